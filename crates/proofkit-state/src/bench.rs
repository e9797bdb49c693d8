//! The Paprika workload (`shared/seeds/002_*`): every block creates `accounts_per_block` new
//! accounts with `storage_per_account` slots each; the state root is computed at every block and
//! blocks are finalized into the page store (after `finality_lag` blocks); at the end every
//! account is read back from the store and checked. The CLI prints the result as the seed's table.
#![deny(unsafe_code)]

use crate::account::{u256, Account};
use crate::db::{Db, DbError, DbOptions};
use crate::keccak::keccak256;
use crate::state::Address;
use crate::store::{CommitLevel, CommitStats};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Instant;

/// Accounts per [`Db::stored_accounts`] call in the read-back.
pub const READ_BACK_BATCH: u64 = 64;

#[derive(Clone, Debug)]
pub struct PaprikaConfig {
    pub blocks: u64,
    pub accounts_per_block: u64,
    pub storage_per_account: u64,
    /// Database directory (must not hold a database yet); in memory when `None`.
    pub dir: Option<PathBuf>,
    pub commit_level: CommitLevel,
    /// Blocks kept unfinalized behind the newest (reorg depth).
    pub finality_lag: u64,
    /// Blocks finalized together in one store commit (Paprika's runner: 32): a page that
    /// several of them touch is copied once, and the top of the trie is written once.
    pub finalize_every: u64,
    /// A row every `blocks / rows` blocks.
    pub rows: u64,
    /// Nibbles of the account trie kept in memory ([`DbOptions::cached_levels`]).
    pub cached_levels: usize,
    /// Each finalization's store writes on a thread of their own beside the next blocks
    /// ([`DbOptions::pipeline`]); the run ends after the last one is durable either way.
    pub pipeline: bool,
    /// [`DbOptions::keep_parent_states`]: off, each block takes its parent's trie over (the
    /// chain is finalized at its tip, so no older state is needed again).
    pub keep_parent_states: bool,
    /// In memory: bytes of the page store backed with memory before the clock starts
    /// ([`DbOptions::memory_prefault`]; Paprika's runner clears its 18 GB database first).
    pub prefault_bytes: usize,
    /// The finalization's thread in the `SCHED_IDLE` class ([`DbOptions::idle_priority_job`]).
    pub idle_priority_job: bool,
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
    /// Process CPU (all threads, the commit thread's included) per block since the previous
    /// row, in ms: the flatness of a block's cost, less sensitive to other load than wall time.
    pub cpu_ms_per_block: f64,
}

#[derive(Clone, Debug)]
pub struct Summary {
    pub rows: Vec<Row>,
    pub write_seconds: f64,
    pub seconds_in_block_writes: f64,
    pub seconds_in_roots: f64,
    pub seconds_in_finalize: f64,
    /// Process CPU seconds (all threads) in the same three phases.
    pub cpu_seconds_in_block_writes: f64,
    pub cpu_seconds_in_roots: f64,
    pub cpu_seconds_in_finalize: f64,
    /// Finalization's phases (CPU seconds of the writer thread).
    pub finalize_times: crate::db::FinalizeTimes,
    pub block_ms_median_first_tenth: f64,
    pub block_ms_median_last_tenth: f64,
    pub accounts_read_back: u64,
    pub read_back_seconds: f64,
    pub read_back_threads: usize,
    pub final_root: [u8; 32],
    /// Opening the database (with its prefault), before the clock starts: wall and process CPU
    /// seconds.
    pub open_seconds: f64,
    pub open_cpu_seconds: f64,
}

/// The address of account `i` of block `n`.
pub fn address(block: u64, i: u64) -> Address {
    let mut seed = [0u8; 16];
    seed[..8].copy_from_slice(&block.to_le_bytes());
    seed[8..].copy_from_slice(&i.to_le_bytes());
    keccak256(&seed)[..20].try_into().expect("20 bytes")
}

/// The addresses of accounts `from..to` of block `n` ([`address`]), hashed eight at a time.
pub fn addresses(block: u64, from: u64, to: u64) -> Vec<Address> {
    let seeds: Vec<[u8; 16]> = (from..to)
        .map(|i| {
            let mut seed = [0u8; 16];
            seed[..8].copy_from_slice(&block.to_le_bytes());
            seed[8..].copy_from_slice(&i.to_le_bytes());
            seed
        })
        .collect();
    let msgs: Vec<&[u8]> = seeds.iter().map(|s| &s[..]).collect();
    crate::keccak::keccak256_many(&msgs)
        .iter()
        .map(|h| h[..20].try_into().expect("20 bytes"))
        .collect()
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
        pipeline: cfg.pipeline,
        keep_parent_states: cfg.keep_parent_states,
        memory_reserve: (records as usize * 1024)
            .clamp(1 << 30, 64 << 30)
            .max(cfg.prefault_bytes),
        memory_prefault: cfg.prefault_bytes,
        idle_priority_job: cfg.idle_priority_job,
        ..Default::default()
    };
    let cpu = || proofkit_core::cputime::process_cpu_time().map_or(0.0, |d| d.as_secs_f64());
    let (open_start, open_cpu) = (Instant::now(), cpu());
    let mut db = Db::open(cfg.dir.as_deref(), options)?;
    let (open_seconds, open_cpu_seconds) = (open_start.elapsed().as_secs_f64(), cpu() - open_cpu);
    let step = (cfg.blocks / cfg.rows.max(1)).max(1);
    let (mut new, mut reused, mut total) = (Vec::new(), Vec::new(), Vec::new());
    let mut rows = Vec::new();
    let mut pending = VecDeque::new();
    // Pipelined: the blocks of the finalization whose page counts are still to come.
    let mut unsynced: Option<usize> = None;
    let mut parent = db.finalized();
    let mut block_ms = Vec::with_capacity(cfg.blocks as usize);
    let mut since_row = Vec::new();
    let (mut write_s, mut root_s, mut finalize_s) = (0.0, 0.0, 0.0);
    let (mut write_cpu, mut root_cpu, mut finalize_cpu) = (0.0, 0.0, 0.0);
    let start = Instant::now();
    let (mut row_cpu, mut row_block) = (cpu(), 0);
    for n in 1..=cfg.blocks {
        let t0 = Instant::now();
        let c0 = cpu();
        let mut block = db.begin(parent)?;
        // The block's accounts in one call, each with its slots (`set_accounts_with_storage`:
        // one walk down the account trie per account, session 43; the keys hashed eight at a
        // time, the writes' hints walking 32 paths together, the root's subtrees written on
        // both threads, session 47).
        let addrs = addresses(n, 0, cfg.accounts_per_block);
        let account = Account {
            nonce: 0,
            balance: u256(n),
            ..Default::default()
        };
        let k = cfg.storage_per_account as usize;
        let mut slots = Vec::with_capacity(addrs.len() * k);
        for i in 0..addrs.len() as u64 {
            for s in 0..cfg.storage_per_account {
                slots.push((u256(s), u256(n * 1_000_000 + i * 16 + s + 1)));
            }
        }
        let updates: Vec<_> = (addrs.iter().enumerate())
            .map(|(j, a)| (*a, account, &slots[j * k..(j + 1) * k]))
            .collect();
        block.set_accounts_with_storage(&updates);
        let t1 = Instant::now();
        let c1 = cpu();
        let (id, _root) = db.commit(block)?;
        let t2 = Instant::now();
        let c2 = cpu();
        write_cpu += c1 - c0;
        root_cpu += c2 - c1;
        write_s += (t1 - t0).as_secs_f64();
        root_s += (t2 - t1).as_secs_f64();
        pending.push_back(id);
        let last = n == cfg.blocks;
        let k = if pending.len() as u64 >= cfg.finality_lag + cfg.finalize_every.max(1) {
            // The newest block `finality_lag` behind, and with it every older pending one.
            pending.len() - cfg.finality_lag as usize
        } else if last {
            pending.len()
        } else {
            0
        };
        if k > 0 || last {
            let mut pages = |st: CommitStats, k: usize| {
                // Per block: the batch's pages shared out over its blocks.
                for _ in 0..k {
                    new.push(st.new_pages / k as u64);
                    reused.push(st.reused_pages / k as u64);
                    total.push((st.new_pages + st.reused_pages) / k as u64);
                }
            };
            if k > 0 {
                let f = pending[k - 1];
                pending.drain(..k);
                let st = db.finalize(f)?;
                if !cfg.pipeline {
                    pages(st, k);
                } else if let Some(prev) = unsynced.replace(k) {
                    // Pipelined, `finalize` returns the previous finalization's pages.
                    pages(st, prev);
                }
            }
            if last {
                // The last finalization durable inside the timed run.
                if let (Some(st), Some(k)) = (db.sync()?, unsynced.take()) {
                    pages(st, k);
                }
            }
            finalize_s += t2.elapsed().as_secs_f64();
            finalize_cpu += cpu() - c2;
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
                cpu_ms_per_block: (cpu() - row_cpu) * 1e3 / (n - row_block) as f64,
            });
            (row_cpu, row_block) = (cpu(), n);
            on_row(rows.last().expect("just pushed"));
            since_row.clear();
            new.clear();
            reused.clear();
            total.clear();
        }
    }
    let write_seconds = start.elapsed().as_secs_f64();

    // Read every account back from the page store and check it, on every core.
    let t = Instant::now();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let accounts = cfg.blocks * cfg.accounts_per_block;
    read_back(
        &db,
        cfg.blocks,
        cfg.accounts_per_block,
        threads,
        READ_BACK_BATCH,
    )?;
    let read_back_seconds = t.elapsed().as_secs_f64();
    let tenth = (block_ms.len() / 10).max(1);
    let mut first: Vec<f64> = block_ms[..tenth].to_vec();
    let mut last: Vec<f64> = block_ms[block_ms.len() - tenth..].to_vec();
    let final_root = db.root(db.finalized())?;
    let finalize_times = db.finalize_times();
    drop(db);
    Ok(Summary {
        rows,
        write_seconds,
        seconds_in_block_writes: write_s,
        seconds_in_roots: root_s,
        seconds_in_finalize: finalize_s,
        cpu_seconds_in_block_writes: write_cpu,
        cpu_seconds_in_roots: root_cpu,
        cpu_seconds_in_finalize: finalize_cpu,
        finalize_times,
        block_ms_median_first_tenth: median(&mut first),
        block_ms_median_last_tenth: median(&mut last),
        accounts_read_back: accounts,
        read_back_seconds,
        read_back_threads: threads,
        final_root,
        open_seconds,
        open_cpu_seconds,
    })
}

/// Reads the accounts of blocks `1..=blocks` (`accounts_per_block` each) back from the page
/// store of `db` on `threads` threads and checks each one (balance: the block's number, nonce 0,
/// no code), as the run wrote it.
/// `batch` accounts at a time go to [`Db::stored_accounts`] (one key-ordered lookup).
pub fn read_back(
    db: &Db,
    blocks: u64,
    accounts_per_block: u64,
    threads: usize,
    batch: u64,
) -> Result<(), BenchError> {
    let (threads, batch) = (threads.max(1), batch.max(1));
    let accounts = blocks * accounts_per_block;
    let chunk = accounts.div_ceil(threads as u64).max(1);
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|c| {
                s.spawn(move || -> Result<(), BenchError> {
                    let end = ((c + 1) * chunk).min(accounts);
                    let mut k = c * chunk;
                    let (mut addrs, mut wanted) = (Vec::new(), Vec::new());
                    while k < end {
                        // The addresses of one block's accounts hash together.
                        let batch_end = (k + batch).min(end);
                        addrs.clear();
                        wanted.clear();
                        while k < batch_end {
                            let (n, i) = (k / accounts_per_block + 1, k % accounts_per_block);
                            let to = accounts_per_block.min(i + batch_end - k);
                            addrs.extend(addresses(n, i, to));
                            let want = Account {
                                nonce: 0,
                                balance: u256(n),
                                ..Default::default()
                            };
                            wanted.extend(std::iter::repeat_n(want, (to - i) as usize));
                            k += to - i;
                        }
                        let first = batch_end - addrs.len() as u64;
                        let found = db.stored_accounts(&addrs)?;
                        for ((j, a), want) in (first..).zip(found).zip(&wanted) {
                            if a.as_ref() != Some(want) {
                                return Err(BenchError::ReadBack(j));
                            }
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
    results.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batched_addresses_and_reads_equal_the_single_ones() {
        for (from, to) in [(0, 0), (0, 1), (5, 20), (3, 67)] {
            let one: Vec<Address> = (from..to).map(|i| address(3, i)).collect();
            assert_eq!(addresses(3, from, to), one);
        }
        let mut db = Db::open(None, DbOptions::default()).unwrap();
        let mut block = db.begin(db.finalized()).unwrap();
        let written = addresses(1, 0, 20);
        for (i, a) in (0..).zip(&written) {
            block.set_account(
                a,
                Some(Account {
                    nonce: i,
                    ..Default::default()
                }),
            );
        }
        let (id, _) = db.commit(block).unwrap();
        db.finalize(id).unwrap();
        let mut asked = written.clone();
        asked.insert(7, address(2, 0));
        let got = db.stored_accounts(&asked).unwrap();
        assert_eq!(got.len(), asked.len());
        for (a, g) in asked.iter().zip(&got) {
            assert_eq!(*g, db.stored_account(a).unwrap());
        }
        assert_eq!(got[7], None, "an account never written");
        assert_eq!(got[8].map(|a| a.nonce), Some(7));
    }

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
                pipeline: d.is_some(),
                commit_level: CommitLevel::FlushData,
                finality_lag: 3,
                finalize_every: 4,
                rows: 3,
                cached_levels: 1,
                // On disk, each block takes its parent's trie over: with the lag, every
                // finalization rebuilds its target's state from the write logs.
                keep_parent_states: d.is_none(),
                // In memory, the first 8 MiB of pages backed at open (on disk: ignored).
                prefault_bytes: 8 << 20,
                idle_priority_job: d.is_some(),
                dir: d,
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
        // Finalizing every block on its own, or 7 at a time with no lag, ends at that root.
        for (every, lag) in [(1, 0), (7, 0)] {
            let cfg = PaprikaConfig {
                blocks: 30,
                accounts_per_block: 50,
                storage_per_account: 2,
                dir: None,
                commit_level: CommitLevel::None,
                finality_lag: lag,
                finalize_every: every,
                rows: 2,
                cached_levels: 1,
                pipeline: every == 7,
                keep_parent_states: every == 1,
                prefault_bytes: 0,
                idle_priority_job: every == 7,
            };
            let s = run_paprika(&cfg, &|_| {}).unwrap();
            assert_eq!(s.final_root, roots[0], "finalize_every {every}");
            assert_eq!(s.accounts_read_back, 1500);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
