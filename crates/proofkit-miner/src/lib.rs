//! A RandomX miner: solo mining against monerod, pool mining over xmrig's stratum dialect, and
//! xmrig's `--bench` hash sums.
//!
//! Specifications followed: monerod's JSON-RPC (`get_block_template`, `submit_block`,
//! `generateblocks`; docs.getmonero.org "Daemon RPC"), Monero's block hashing blob and
//! difficulty check (`check_hash`), and xmrig's stratum dialect (`login`, `job`, `submit`,
//! `keepalived`; xmrig's doc/STRATUM.md and the pool protocol as pools and p2pool speak it).
//!
//! | module | what |
//! |---|---|
//! | [`target`] | 4/8-byte share targets, difficulties, the hash checks |
//! | [`job`] | jobs: blob, nonce offset, seed hash, `rx/0` / `rx/2` |
//! | [`engine`] | worker threads, one VM each; job and seed switching |
//! | [`daemon`] | monerod JSON-RPC client and the solo-mining loop |
//! | [`stratum`] | the pool client: login, jobs, submit, keepalive, reconnect, failover, TLS |
//! | [`stats`] | 10 s / 60 s / 15 min hashrates, accepted and rejected results |
//! | [`api`] | the read-only JSON HTTP summary |
//! | [`config`] | the JSON config file |
//! | [`xmrig`] | xmrig's benchmark hash sums |

pub mod api;
pub mod config;
pub mod daemon;
pub mod engine;
mod http;
pub mod job;
pub mod stats;
pub mod stratum;
pub mod target;
pub mod xmrig;

use serde_json::{json, Value};

/// Errors of the miner.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("RandomX: {0}")]
    Randomx(#[from] proofkit_randomx::Error),
    #[error("bad target {0}")]
    BadTarget(String),
    #[error("bad job: {0}")]
    BadJob(String),
    #[error("unknown algorithm {0:?} (rx/0 and rx/2 are supported)")]
    UnknownAlgo(String),
    #[error("{0}")]
    Config(String),
    #[error("daemon: {0}")]
    Daemon(String),
    #[error("daemon answered error {code}: {message}")]
    Rpc { code: i64, message: String },
    #[error("pool: {0}")]
    Pool(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("stale: {0}")]
    Stale(String),
}

/// Writes a log line with a UTC time of day on stderr, as xmrig's console lines.
pub fn log(msg: std::fmt::Arguments<'_>) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let s = now.as_secs();
    eprintln!(
        "[{:02}:{:02}:{:02}.{:03}] {msg}",
        (s / 3600) % 24,
        (s / 60) % 60,
        s % 60,
        now.subsec_millis()
    );
}

/// The summary document of the API (xmrig's `/1/summary` field names where they exist).
pub fn summary(status: &stats::Status, engine: &engine::Engine, threads: usize) -> Value {
    let r = status.rates();
    let s = status.shares();
    let c = status.connection();
    let mem = engine.memory_info();
    let (hp_got, hp_want) = mem.huge_pages();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "kind": "cpu",
        "algo": c.algo,
        "uptime": status.started.elapsed().as_secs(),
        "hashrate": {"total": r, "highest": status.highest(), "threads": threads},
        "hashes_total": engine.hashes(),
        "results": {
            "shares_good": s.accepted,
            "shares_total": s.accepted + s.rejected,
            "shares_rejected": s.rejected,
            "shares_dropped": s.dropped,
            "diff_current": s.current_difficulty.to_string(),
            "accepted_difficulty": s.accepted_difficulty.to_string(),
        },
        "connection": {
            "pool": c.url,
            "kind": c.kind,
            "uptime": c.connected_since.map(|t| t.elapsed().as_secs()).unwrap_or(0),
            "connected": c.connected_since.is_some(),
            "accepted": s.accepted,
            "rejected": s.rejected,
            "diff": c.difficulty.to_string(),
            "height": c.height,
        },
        "hugepages": [hp_got, hp_want],
        "memory": {
            "cache_pages": mem.cache_pages.map(|k| k.to_string()),
            "dataset_pages": mem.dataset_pages.map(|k| k.to_string()),
            "dataset_init_s": mem.dataset_init_s,
            "hashing_from": mem.hashing_from,
        },
        "cpu": {
            "brand": proofkit_core::cpu::model_name(),
            "aes": proofkit_randomx::Aes::hardware().is_some(),
        },
    })
}
