//! Solo mining against monerod's JSON-RPC (`/json_rpc`): `get_block_template` with a reserve,
//! `submit_block`, and `generateblocks` (regtest, used by tests to grow a chain).
//!
//! The template is polled; a new job starts when the chain tip (height or previous block)
//! changes or the template is older than `refresh` (to take in new transactions). A result is
//! re-hashed and checked against the block difficulty before it is submitted.

use crate::engine::{Engine, Found};
use crate::http;
use crate::job::{monero_nonce_offset, parse_seed_hash, Algo, Goal, Job};
use crate::stats::Status;
use crate::{log, Error};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A monerod JSON-RPC client.
#[derive(Clone, Debug)]
pub struct Client {
    hostport: String,
    timeout: Duration,
}

/// One `get_block_template` answer.
#[derive(Clone, Debug)]
pub struct Template {
    pub blocktemplate_blob: Vec<u8>,
    pub blockhashing_blob: Vec<u8>,
    pub difficulty: u128,
    pub height: u64,
    pub prev_hash: String,
    pub seed_hash: [u8; 32],
    pub reserved_offset: u64,
    /// Nonce offset in both blobs.
    pub nonce_offset: usize,
}

/// The largest block template accepted (Monero's block size limit is far above what a regtest or
/// ordinary node returns; this only guards memory against a broken server).
const MAX_TEMPLATE: usize = 4 << 20;

impl Client {
    /// `url` is `http://host:port`; the JSON-RPC path is `/json_rpc`.
    pub fn new(url: &str) -> Result<Client, Error> {
        let (hostport, _) = http::split_url(url)?;
        Ok(Client {
            hostport,
            timeout: Duration::from_secs(30),
        })
    }

    /// The same client with another per-request timeout (`generateblocks` of many blocks takes
    /// minutes).
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    /// Calls `method`; returns `result`, or `Error::Rpc` with the JSON-RPC error.
    pub fn call(&self, method: &str, params: Value) -> Result<Value, Error> {
        let req = json!({"jsonrpc": "2.0", "id": "0", "method": method, "params": params});
        let (status, body) = http::post_json(
            &self.hostport,
            "/json_rpc",
            req.to_string().as_bytes(),
            self.timeout,
        )?;
        let v: Value = serde_json::from_slice(&body).map_err(|e| {
            Error::Daemon(format!("{method}: HTTP {status}, body is not JSON: {e}"))
        })?;
        if let Some(err) = v.get("error") {
            return Err(Error::Rpc {
                code: err["code"].as_i64().unwrap_or(0),
                message: err["message"].as_str().unwrap_or("").to_string(),
            });
        }
        if status != 200 {
            return Err(Error::Daemon(format!("{method}: HTTP {status}")));
        }
        v.get("result")
            .cloned()
            .ok_or_else(|| Error::Daemon(format!("{method}: no result in the answer")))
    }

    pub fn get_block_template(&self, wallet: &str, reserve_size: u32) -> Result<Template, Error> {
        let r = self.call(
            "get_block_template",
            json!({"wallet_address": wallet, "reserve_size": reserve_size}),
        )?;
        parse_template(&r)
    }

    /// Submits a block; Ok(true) when monerod accepted it, Ok(false) when it answered "not
    /// accepted" (JSON-RPC error -7), other errors as they come.
    pub fn submit_block(&self, block: &[u8]) -> Result<bool, Error> {
        match self.call("submit_block", json!([hex::encode(block)])) {
            Ok(r) => Ok(r["status"] == "OK"),
            Err(Error::Rpc { code: -7, .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Regtest only: mines `n` blocks inside monerod.
    pub fn generate_blocks(&self, n: u64, wallet: &str) -> Result<u64, Error> {
        let r = self.call(
            "generateblocks",
            json!({"amount_of_blocks": n, "wallet_address": wallet}),
        )?;
        r["height"]
            .as_u64()
            .ok_or_else(|| Error::Daemon("generateblocks: no height".into()))
    }

    /// Asks monerod to shut down (its `/stop_daemon` endpoint), so its database is closed cleanly.
    pub fn stop_daemon(&self) -> Result<(), Error> {
        http::post_json(&self.hostport, "/stop_daemon", b"{}", self.timeout)?;
        Ok(())
    }

    /// The chain height (number of blocks).
    pub fn height(&self) -> Result<u64, Error> {
        let r = self.call("get_block_count", json!({}))?;
        r["count"]
            .as_u64()
            .ok_or_else(|| Error::Daemon("get_block_count: no count".into()))
    }

    /// The header of the block at `height` (JSON as monerod gives it).
    pub fn block_header(&self, height: u64) -> Result<Value, Error> {
        let r = self.call("get_block_header_by_height", json!({"height": height}))?;
        Ok(r["block_header"].clone())
    }
}

fn parse_template(r: &Value) -> Result<Template, Error> {
    let bad = |what: &str| Error::Daemon(format!("get_block_template: {what}"));
    let hexfield = |name: &str| -> Result<Vec<u8>, Error> {
        let s = r[name].as_str().ok_or_else(|| bad(&format!("no {name}")))?;
        if s.len() > 2 * MAX_TEMPLATE {
            return Err(bad(&format!("{name} is too long")));
        }
        hex::decode(s).map_err(|e| bad(&format!("{name}: {e}")))
    };
    let blocktemplate_blob = hexfield("blocktemplate_blob")?;
    let blockhashing_blob = hexfield("blockhashing_blob")?;
    let difficulty = match r["wide_difficulty"].as_str() {
        Some(w) => u128::from_str_radix(w.trim_start_matches("0x"), 16)
            .map_err(|e| bad(&format!("wide_difficulty {w:?}: {e}")))?,
        None => {
            let lo = r["difficulty"]
                .as_u64()
                .ok_or_else(|| bad("no difficulty"))?;
            let hi = r["difficulty_top64"].as_u64().unwrap_or(0);
            ((hi as u128) << 64) | lo as u128
        }
    };
    if difficulty == 0 {
        return Err(bad("difficulty 0"));
    }
    let nonce_offset = monero_nonce_offset(&blockhashing_blob)?;
    if monero_nonce_offset(&blocktemplate_blob)? != nonce_offset {
        return Err(bad(
            "the template and hashing blobs put the nonce at different offsets",
        ));
    }
    let seed_hash = parse_seed_hash(r["seed_hash"].as_str().ok_or_else(|| bad("no seed_hash"))?)?;
    Ok(Template {
        blocktemplate_blob,
        blockhashing_blob,
        difficulty,
        height: r["height"].as_u64().ok_or_else(|| bad("no height"))?,
        prev_hash: r["prev_hash"].as_str().unwrap_or("").to_string(),
        seed_hash,
        reserved_offset: r["reserved_offset"].as_u64().unwrap_or(0),
        nonce_offset,
    })
}

/// Solo mining settings.
#[derive(Clone, Debug)]
pub struct SoloConfig {
    pub url: String,
    pub wallet: String,
    /// Bytes reserved in the coinbase extra (left zero; 2^32 nonces per template are plenty for
    /// a CPU between two polls).
    pub reserve_size: u32,
    /// How often the template is polled.
    pub poll: Duration,
    /// A template older than this is replaced even when the tip did not move.
    pub refresh: Duration,
    /// Longest pause between retries of a daemon that went away.
    pub max_backoff: Duration,
}

impl SoloConfig {
    pub fn new(url: &str, wallet: &str) -> SoloConfig {
        SoloConfig {
            url: url.to_string(),
            wallet: wallet.to_string(),
            reserve_size: 8,
            poll: Duration::from_secs(1),
            refresh: Duration::from_secs(30),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// The templates whose results may still be submitted (same tip), newest last.
struct Recent {
    jobs: VecDeque<(Arc<Job>, Template)>,
}

/// Mines against monerod until `stop` is set. Daemon failures are logged and retried with
/// exponential backoff (1 s doubling up to `max_backoff`).
pub fn run_solo(
    cfg: &SoloConfig,
    engine: &Engine,
    found: &Receiver<Found>,
    status: &Status,
    stop: &AtomicBool,
) -> Result<(), Error> {
    let client = Client::new(&cfg.url)?;
    status.set_connection(&cfg.url, "solo");
    let mut recent = Recent {
        jobs: VecDeque::new(),
    };
    let mut serial = 0u64;
    let mut next_poll = Instant::now();
    let mut backoff = Duration::from_secs(1);
    let mut job_started = Instant::now();
    while !stop.load(Ordering::Acquire) {
        if Instant::now() >= next_poll {
            match client.get_block_template(&cfg.wallet, cfg.reserve_size) {
                Ok(t) => {
                    backoff = Duration::from_secs(1);
                    next_poll = Instant::now() + cfg.poll;
                    let tip_moved = recent
                        .jobs
                        .back()
                        .is_none_or(|(_, c)| c.prev_hash != t.prev_hash || c.height != t.height);
                    if tip_moved || job_started.elapsed() >= cfg.refresh {
                        serial += 1;
                        let job = Job {
                            id: format!("{}-{serial}", t.height),
                            blob: t.blockhashing_blob.clone(),
                            nonce_offset: t.nonce_offset,
                            goal: Goal::Block(t.difficulty),
                            seed_hash: t.seed_hash,
                            height: Some(t.height),
                            algo: Algo::Rx0,
                        };
                        let seed_changed = engine
                            .current_job()
                            .is_none_or(|j| j.seed_hash != job.seed_hash);
                        match engine.set_job(job) {
                            Ok(()) => {
                                if tip_moved {
                                    recent.jobs.clear();
                                }
                                let j = engine.current_job().expect("just set");
                                log(format_args!(
                                    "new job from {} diff {} algo rx/0 height {}{}",
                                    cfg.url,
                                    t.difficulty,
                                    t.height,
                                    if seed_changed {
                                        format!(" seed {}", hex::encode(t.seed_hash))
                                    } else {
                                        String::new()
                                    }
                                ));
                                status.set_job(t.difficulty, Some(t.height), "rx/0");
                                recent.jobs.push_back((j, t));
                                while recent.jobs.len() > 8 {
                                    recent.jobs.pop_front();
                                }
                                job_started = Instant::now();
                            }
                            Err(e) => log(format_args!("daemon job skipped: {e}")),
                        }
                    }
                }
                Err(e) => {
                    log(format_args!(
                        "daemon {}: {e}; retrying in {} s",
                        cfg.url,
                        backoff.as_secs()
                    ));
                    engine.pause();
                    recent.jobs.clear();
                    status.set_disconnected();
                    next_poll = Instant::now() + backoff;
                    backoff = (backoff * 2).min(cfg.max_backoff);
                }
            }
        }
        let f = match found.recv_timeout(Duration::from_millis(50)) {
            Ok(f) => f,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        };
        let Some((job, template)) = recent.jobs.iter().find(|(j, _)| Arc::ptr_eq(j, &f.job)) else {
            status.drop_result("stale (the chain tip moved)");
            continue;
        };
        match engine.verify(&f) {
            Ok(true) => {}
            Ok(false) => {
                status.drop_result("failed the local check");
                continue;
            }
            Err(e) => {
                status.drop_result(&e.to_string());
                continue;
            }
        }
        let mut block = template.blocktemplate_blob.clone();
        block[job.nonce_offset..job.nonce_offset + 4].copy_from_slice(&f.nonce.to_le_bytes());
        let diff = template.difficulty;
        let height = template.height;
        match client.submit_block(&block) {
            Ok(true) => {
                status.accept(diff);
                let s = status.shares();
                log(format_args!(
                    "block accepted ({}/{}) diff {diff} height {height} nonce {:08x}",
                    s.accepted, s.rejected, f.nonce
                ));
            }
            Ok(false) => {
                status.reject(diff);
                let s = status.shares();
                log(format_args!(
                    "block rejected ({}/{}) diff {diff} height {height}",
                    s.accepted, s.rejected
                ));
            }
            Err(e) => {
                status.reject(diff);
                log(format_args!("submit_block failed: {e}"));
            }
        }
        // The tip moved (or the block was bad): fetch a new template now.
        next_poll = Instant::now();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_with_bad_fields_are_errors() {
        let good = json!({
            "blocktemplate_blob": format!("1010{}{}{}", "8080808006", "aa".repeat(32), "00000000023d"),
            "blockhashing_blob": format!("1010{}{}{}", "8080808006", "aa".repeat(32), "00000000ffff"),
            "wide_difficulty": "0xc8", "height": 5, "prev_hash": "aa", "seed_hash": "11".repeat(32),
        });
        let t = parse_template(&good).unwrap();
        assert_eq!((t.difficulty, t.nonce_offset, t.height), (200, 39, 5));
        for (k, v) in [
            ("blockhashing_blob", json!("zz")),
            ("blockhashing_blob", json!("1010")),
            ("wide_difficulty", json!("0x0")),
            ("wide_difficulty", json!("nonsense")),
            ("seed_hash", json!("11")),
            ("height", json!("x")),
        ] {
            let mut b = good.clone();
            b[k] = v;
            assert!(parse_template(&b).is_err(), "{k} accepted");
        }
    }
}
