//! The Paprika workload (`shared/seeds/002_*`): every block creates `accounts_per_block` new
//! accounts with `storage_per_account` slots each; the state root is computed at every block and
//! blocks are finalized into the page store (after `finality_lag` blocks); at the end every
//! account is read back from the store and checked. The CLI prints the result as the seed's table.
#![deny(unsafe_code)]

use crate::account::{u256, Account};
use crate::db::{Db, DbError, DbOptions};
use crate::keccak::keccak256;
use crate::state::Address;
use crate::store::CommitLevel;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct PaprikaConfig {
    pub blocks: u64,
    pub accounts_per_block: u64,
    pub storage_per_account: u64,
    /// Database directory (must not hold a database yet); in memory when `None`.
    pub dir: Option<PathBuf>,
    pub commit_level: CommitLevel,
    pub finality_lag: u64,
    /// A row every `blocks / rows` blocks.
    pub rows: u64,
    /// Nibbles of the account trie kept in memory ([`DbOptions::cached_levels`]).
    pub cached_levels: usize,
}

/// One row of the seed's table; the page figures are 90th percentiles over the blocks since the
/// previous row.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub at_block: u64,
    pub avg_blocks_per_s: f64,
    pub space_bytes: u64,
    pub new_pages_p90: u64,
    pub reused_pages_p90: u64,
    pub total_pages_p90: u64,
    pub peak_rss_kb: u64,
    /// Median time of a block (write, root, finalize) since the previous row.
    pub block_ms_median: f64,
}

#[derive(Clone, Debug)]
pub struct Summary {
    pub rows: Vec<Row>,
    pub write_seconds: f64,
    pub seconds_in_block_writes: f64,
    pub seconds_in_roots: f64,
    pub seconds_in_finalize: f64,
    pub block_ms_median_first_tenth: f64,
    pub block_ms_median_last_tenth: f64,
    pub accounts_read_back: u64,
    pub read_back_seconds: f64,
    pub read_back_threads: usize,
    pub final_root: [u8; 32],
}

/// The address of account `i` of block `n`.
pub fn address(block: u64, i: u64) -> Address {
    let mut seed = [0u8; 16];
    seed[..8].copy_from_slice(&block.to_le_bytes());
    seed[8..].copy_from_slice(&i.to_le_bytes());
    keccak256(&seed)[..20].try_into().expect("20 bytes")
}

fn p90(xs: &mut [u64]) -> u64 {
    if xs.is_empty() {
        return 0;
    }
    xs.sort_unstable();
    xs[(xs.len() * 9).div_ceil(10) - 1]
}

fn median(xs: &mut [f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// A read-back that found a wrong account.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Db(#[from] DbError),
    #[error("read-back: account {0} is wrong")]
    ReadBack(u64),
    #[error("--blocks and --accounts-per-block must be positive")]
    Empty,
}

/// Runs the workload; `progress(block)` is called after every block.
pub fn run_paprika(cfg: &PaprikaConfig, progress: &dyn Fn(u64)) -> Result<Summary, BenchError> {
    run_paprika_rows(cfg, progress, &|_| {})
}

/// [`run_paprika`], handing each row of the table to `on_row` as soon as it is measured (for
/// long runs that may be stopped).
pub fn run_paprika_rows(
    cfg: &PaprikaConfig,
    progress: &dyn Fn(u64),
    on_row: &dyn Fn(&Row),
) -> Result<Summary, BenchError> {
    if cfg.blocks == 0 || cfg.accounts_per_block == 0 {
        return Err(BenchError::Empty);
    }
    // In memory: address space for the pages (only written pages take memory): about 1 KB
    // per record with the trie nodes, at least 1 GiB.
    let records = cfg.blocks * cfg.accounts_per_block * (1 + cfg.storage_per_account);
    let options = DbOptions {
        commit_level: cfg.commit_level,
        cached_levels: cfg.cached_levels,
        memory_reserve: (records as usize * 1024).clamp(1 << 30, 64 << 30),
        ..Default::default()
    };
    let mut db = Db::open(cfg.dir.as_deref(), options)?;
    let step = (cfg.blocks / cfg.rows.max(1)).max(1);
    let (mut new, mut reused, mut total) = (Vec::new(), Vec::new(), Vec::new());
    let mut rows = Vec::new();
    let mut pending = VecDeque::new();
    let mut parent = db.finalized();
    let mut block_ms = Vec::with_capacity(cfg.blocks as usize);
    let mut since_row = Vec::new();
    let (mut write_s, mut root_s, mut finalize_s) = (0.0, 0.0, 0.0);
    let start = Instant::now();
    for n in 1..=cfg.blocks {
        let t0 = Instant::now();
        let mut block = db.begin(parent)?;
        for i in 0..cfg.accounts_per_block {
            let addr = address(n, i);
            block.set_account(
                &addr,
                Some(Account {
                    nonce: 0,
                    balance: u256(n),
                    ..Default::default()
                }),
            );
            for s in 0..cfg.storage_per_account {
                block
                    .set_storage(&addr, &u256(s), &u256(n * 1_000_000 + i * 16 + s + 1))
                    .map_err(DbError::from)?;
            }
        }
        let t1 = Instant::now();
        let (id, _root) = db.commit(block)?;
        let t2 = Instant::now();
        write_s += (t1 - t0).as_secs_f64();
        root_s += (t2 - t1).as_secs_f64();
        pending.push_back(id);
        if pending.len() as u64 > cfg.finality_lag {
            let f = pending.pop_front().expect("non-empty");
            let st = db.finalize(f)?;
            finalize_s += t2.elapsed().as_secs_f64();
            new.push(st.new_pages);
            reused.push(st.reused_pages);
            total.push(st.new_pages + st.reused_pages);
        }
        parent = id;
        block_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        since_row.push(t0.elapsed().as_secs_f64() * 1e3);
        progress(n);
        if n % step == 0 || n == cfg.blocks {
            rows.push(Row {
                at_block: n,
                avg_blocks_per_s: n as f64 / start.elapsed().as_secs_f64(),
                space_bytes: db.store().space_used(),
                new_pages_p90: p90(&mut new),
                reused_pages_p90: p90(&mut reused),
                total_pages_p90: p90(&mut total),
                peak_rss_kb: proofkit_core::peak::peak_rss_kb(),
                block_ms_median: median(&mut since_row),
            });
            on_row(rows.last().expect("just pushed"));
            since_row.clear();
            new.clear();
            reused.clear();
            total.clear();
        }
    }
    let write_seconds = start.elapsed().as_secs_f64();
    while let Some(f) = pending.pop_front() {
        db.finalize(f)?;
    }

    // Read every account back from the page store and check it, on every core.
    let t = Instant::now();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let accounts = cfg.blocks * cfg.accounts_per_block;
    let chunk = accounts.div_ceil(threads as u64).max(1);
    let results = std::thread::scope(|s| {
        let db = &db;
        let handles: Vec<_> = (0..threads as u64)
            .map(|c| {
                s.spawn(move || -> Result<(), BenchError> {
                    for k in c * chunk..((c + 1) * chunk).min(accounts) {
                        let (n, i) = (k / cfg.accounts_per_block + 1, k % cfg.accounts_per_block);
                        if db.stored_account(&address(n, i))?.map(|a| a.balance) != Some(u256(n)) {
                            return Err(BenchError::ReadBack(k));
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("reader thread"))
            .collect::<Vec<_>>()
    });
    for r in results {
        r?;
    }
    let read_back_seconds = t.elapsed().as_secs_f64();
    let tenth = (block_ms.len() / 10).max(1);
    let mut first: Vec<f64> = block_ms[..tenth].to_vec();
    let mut last: Vec<f64> = block_ms[block_ms.len() - tenth..].to_vec();
    let final_root = db.root(db.finalized())?;
    drop(db);
    Ok(Summary {
        rows,
        write_seconds,
        seconds_in_block_writes: write_s,
        seconds_in_roots: root_s,
        seconds_in_finalize: finalize_s,
        block_ms_median_first_tenth: median(&mut first),
        block_ms_median_last_tenth: median(&mut last),
        accounts_read_back: accounts,
        read_back_seconds,
        read_back_threads: threads,
        final_root,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_reads_everything_back_in_memory_and_on_disk() {
        let dir = std::env::temp_dir().join(format!("pk-state-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut roots = Vec::new();
        for d in [None, Some(dir.clone())] {
            let cfg = PaprikaConfig {
                blocks: 30,
                accounts_per_block: 50,
                storage_per_account: 2,
                dir: d,
                commit_level: CommitLevel::FlushData,
                finality_lag: 3,
                rows: 3,
                cached_levels: 1,
            };
            let s = run_paprika(&cfg, &|_| {}).unwrap();
            assert_eq!(s.rows.len(), 3);
            assert_eq!(s.rows[2].at_block, 30);
            assert_eq!(s.accounts_read_back, 1500);
            assert!(s
                .rows
                .iter()
                .all(|r| r.total_pages_p90 >= r.new_pages_p90
                    && r.total_pages_p90 >= r.reused_pages_p90));
            roots.push(s.final_root);
        }
        assert_eq!(
            roots[0], roots[1],
            "in memory and on disk give the same root"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
