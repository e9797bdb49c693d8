//! `proofkit state ...`: state roots of JSON account lists, proofs, the store checker, and the
//! Paprika-shaped benchmark (`shared/seeds/002_*`: blocks of new accounts with storage, the
//! Merkle root computed at every block, each block finalized into the page store).

use crate::state_peer::PeerName;
use crate::util::{emit, progress_bar, CliResult, ExitCode};
use proofkit_core::peak::{peak_rss_kb, UssSampler};
use proofkit_core::report::Report;
use proofkit_state::bench::{run_paprika_rows, PaprikaConfig, Row};
use proofkit_state::proof::{get_proof, verify};
use proofkit_state::{Address, CommitLevel, Db, DbOptions};
use serde_json::json;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand)]
enum Cmd {
    /// Print the state root of the accounts in a JSON file
    Root {
        #[arg(long)]
        from_json: PathBuf,
    },
    /// Print an eth_getProof-shaped proof (verified before printing) for an account of a JSON file
    Proof {
        #[arg(long)]
        from_json: PathBuf,
        #[arg(long)]
        address: String,
        /// Storage slots to prove (hex)
        #[arg(long)]
        slot: Vec<String>,
    },
    /// Walk every page of a database, check the page tree and recompute the state root
    Check {
        #[arg(long)]
        path: PathBuf,
    },
    /// The Paprika benchmark: blocks of new accounts with storage, root at every block
    Bench(BenchArgs),
}

#[derive(clap::Args, Clone)]
pub struct BenchArgs {
    #[arg(long, default_value_t = 2000)]
    blocks: u64,
    #[arg(long, default_value_t = 1000)]
    accounts_per_block: u64,
    #[arg(long, default_value_t = 1)]
    storage_per_account: u64,
    /// Database directory (a fresh one is made inside); in memory when absent
    #[arg(long)]
    path: Option<PathBuf>,
    /// none | flush-data | flush-data-and-root
    #[arg(long, default_value = "flush-data")]
    commit_level: CommitLevel,
    /// Blocks kept unfinalized behind the newest (0: none)
    #[arg(long, default_value_t = 0)]
    finality_lag: u64,
    /// Blocks finalized together in one store commit (Paprika's runner finalizes every 32)
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    finalize_every: u64,
    /// Rows in the table (one every blocks/rows blocks)
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    rows: u64,
    /// Nibbles of the account trie kept in memory (0-64); the rest stays in the page store
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u8).range(0..=64))]
    cached_levels: u8,
    /// Finalize on the calling thread instead of applying each store commit on a thread of
    /// its own beside the next blocks (the default, pipelined)
    #[arg(long)]
    no_pipeline: bool,
    /// Every block keeps its own trie version (the default with a finality lag); without a
    /// lag each block takes its parent's trie over and changes its nodes in place
    #[arg(long)]
    keep_parent_states: bool,
    /// Leave the finalization's thread at normal priority (by default it runs in Linux's
    /// SCHED_IDLE class, so that the next blocks' threads take a core from it at once)
    #[arg(long)]
    normal_priority_job: bool,
    /// In memory: GB of the page store backed with memory before the clock starts, as
    /// Paprika's runner clears its 18 GB database first (0: pages backed as they are written)
    #[arg(long, default_value_t = 0.0)]
    prefault_gb: f64,
    /// Keep the database directory made under --path (for `proofkit state check`)
    #[arg(long)]
    keep: bool,
    #[arg(long)]
    json: bool,
    /// Then run a peer on the same workload and compare the state roots (geth: needs Go)
    #[arg(long, value_enum)]
    peer: Option<PeerName>,
}

pub fn run(args: Args) -> CliResult {
    match args.cmd {
        Cmd::Root { from_json } => {
            let text = read_accounts_file(&from_json)?;
            let state = proofkit_state::genesis::state_from_json(&text)?;
            println!("0x{}", hex::encode(state.root()));
            Ok(())
        }
        Cmd::Proof {
            from_json,
            address,
            slot,
        } => {
            let text = read_accounts_file(&from_json)?;
            let state = proofkit_state::genesis::state_from_json(&text)?;
            let addr: Address = parse_fixed::<20>("address", &address)?;
            let slots = slot
                .iter()
                .map(|s| parse_padded("slot", s))
                .collect::<Result<Vec<_>, _>>()?;
            let p = get_proof(&state, &addr, &slots);
            verify(&state.root(), &p)
                .map_err(|e| ExitCode(1, format!("own proof failed to verify: {e}")))?;
            let hx = |b: &[u8]| format!("0x{}", hex::encode(b));
            let out = json!({
                "address": hx(&p.address),
                "nonce": format!("0x{:x}", p.nonce),
                "balance": hx(proofkit_state::rlp::trim(&p.balance)),
                "codeHash": hx(&p.code_hash),
                "storageHash": hx(&p.storage_hash),
                "accountProof": p.account_proof.iter().map(|n| hx(n)).collect::<Vec<_>>(),
                "storageProof": p.storage_proof.iter().map(|s| json!({
                    "key": hx(&s.key),
                    "value": hx(proofkit_state::rlp::trim(&s.value)),
                    "proof": s.proof.iter().map(|n| hx(n)).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
                "stateRoot": hx(&state.root()),
            });
            println!("{}", serde_json::to_string_pretty(&out)?);
            Ok(())
        }
        Cmd::Check { path } => {
            if !path.join("state.pk").exists() {
                return Err(ExitCode(
                    2,
                    format!("{}: no database (state.pk) there", path.display()),
                )
                .into());
            }
            let db = Db::open(Some(&path), DbOptions::default())
                .map_err(|e| ExitCode(1, e.to_string()))?;
            let (r, root) = db.check().map_err(|e| ExitCode(1, e.to_string()))?;
            println!(
                "ok: block {}, root 0x{}, {} pages ({} branch, {} leaf, {} free), {} records",
                db.number(db.finalized())?,
                hex::encode(root),
                r.page_count,
                r.branch_pages,
                r.leaf_pages,
                r.free_pages,
                r.entries
            );
            Ok(())
        }
        Cmd::Bench(b) => bench(b),
    }
}

/// The text of a `--from-json` file; an error names the file (exit 2, as other I/O errors).
fn read_accounts_file(path: &std::path::Path) -> Result<String, ExitCode> {
    std::fs::read_to_string(path).map_err(|e| ExitCode(2, format!("{}: {e}", path.display())))
}

fn parse_fixed<const N: usize>(name: &str, s: &str) -> Result<[u8; N], ExitCode> {
    let b = crate::util::decode_hex(name, s).map_err(|e| ExitCode(2, e))?;
    b.try_into()
        .map_err(|_| ExitCode(2, format!("--{name}: expected {N} bytes")))
}

fn parse_padded(name: &str, s: &str) -> Result<[u8; 32], ExitCode> {
    let b = crate::util::decode_hex(name, s).map_err(|e| ExitCode(2, e))?;
    if b.len() > 32 {
        return Err(ExitCode(2, format!("--{name}: more than 32 bytes")));
    }
    let mut out = [0u8; 32];
    out[32 - b.len()..].copy_from_slice(&b);
    Ok(out)
}

/// Paprika's published in-memory figures (seed 002, no Merkle roots): (block, blocks/s, GB).
const PAPRIKA: &[(u64, f64, f64)] = &[
    (5000, 771.9, 2.30),
    (10000, 672.3, 3.55),
    (15000, 634.6, 4.03),
    (20000, 581.8, 4.28),
    (25000, 610.8, 4.51),
    (30000, 595.9, 5.01),
    (35000, 535.0, 6.42),
    (40000, 503.5, 8.98),
    (45000, 471.7, 12.18),
    (49999, 464.2, 15.48),
];

fn bench(a: BenchArgs) -> CliResult {
    if !(0.0..=1024.0).contains(&a.prefault_gb) {
        return Err(ExitCode(
            2,
            format!("--prefault-gb {} is not in 0..=1024", a.prefault_gb),
        )
        .into());
    }
    if a.prefault_gb > 0.0 && a.path.is_some() {
        return Err(ExitCode(
            2,
            "--prefault-gb is for an in-memory database (no --path)".into(),
        )
        .into());
    }
    let dir = match &a.path {
        Some(p) => {
            let d = p.join(format!("proofkit-state-bench-{}", std::process::id()));
            if d.exists() {
                std::fs::remove_dir_all(&d)?;
            }
            Some(d)
        }
        None => None,
    };
    // With a finality lag each finalization would rebuild its target from the write logs.
    let keep_parent_states = a.keep_parent_states || a.finality_lag > 0;
    let cfg = PaprikaConfig {
        blocks: a.blocks,
        accounts_per_block: a.accounts_per_block,
        storage_per_account: a.storage_per_account,
        dir: dir.clone(),
        commit_level: a.commit_level,
        finality_lag: a.finality_lag,
        finalize_every: a.finalize_every,
        rows: a.rows,
        cached_levels: a.cached_levels.into(),
        pipeline: !a.no_pipeline,
        keep_parent_states,
        prefault_bytes: (a.prefault_gb * 1e9) as usize,
        idle_priority_job: !a.normal_priority_job,
    };
    let pb = progress_bar(a.blocks, "state bench", a.json);
    // The kernel keeps no high-water mark of USS: sampled (a read of smaps_rollup took 0.15
    // ms, median of 20, with 2.6 GB resident mid-run).
    let uss = UssSampler::start(std::time::Duration::from_millis(500));
    let cpu0 = cpu_seconds();
    // Each row also goes to stderr as it comes: a long run shows its course, and a run cut
    // short still leaves its rows.
    let row_line = |r: &Row| {
        pb.suspend(|| {
            eprintln!(
                "at block {}: {:.1} blocks/s, {:.3} GB, block {:.1} ms (median), {:.1} ms CPU per block, peak RSS {} kB",
                r.at_block,
                r.avg_blocks_per_s,
                r.space_bytes as f64 / 1e9,
                r.block_ms_median,
                r.cpu_ms_per_block,
                r.peak_rss_kb
            )
        })
    };
    let s = run_paprika_rows(&cfg, &|_| pb.inc(1), &row_line)
        .map_err(|e| ExitCode(1, e.to_string()))?;
    let cpu = cpu_seconds() - cpu0;
    let peak_uss_kb = uss.finish();
    pb.finish_and_clear();
    if let Some(d) = &dir {
        if a.keep {
            eprintln!("database kept in {}", d.display());
        } else {
            std::fs::remove_dir_all(d)?;
        }
    }
    let mut report = Report::new(
        "state",
        &[
            "impl",
            "At Block",
            "Avg speed (blocks/s)",
            "Space used (GB)",
            "New pages P90",
            "Pages reused P90",
            "Total pages P90",
            "peak_rss_kb",
            "block ms (median)",
            "CPU ms per block",
        ],
    );
    for r in &s.rows {
        report.push(vec![
            ("impl", json!("proofkit")),
            ("At Block", json!(r.at_block)),
            ("Avg speed (blocks/s)", json!(r.avg_blocks_per_s)),
            ("Space used (GB)", json!(r.space_bytes as f64 / 1e9)),
            ("New pages P90", json!(r.new_pages_p90)),
            ("Pages reused P90", json!(r.reused_pages_p90)),
            ("Total pages P90", json!(r.total_pages_p90)),
            ("peak_rss_kb", json!(r.peak_rss_kb)),
            ("block ms (median)", json!(r.block_ms_median)),
            ("CPU ms per block", json!(r.cpu_ms_per_block)),
        ]);
    }
    let peer = match a.peer {
        Some(PeerName::Geth) => {
            let w = crate::state_peer::Workload {
                blocks: a.blocks,
                accounts_per_block: a.accounts_per_block,
                storage_per_account: a.storage_per_account,
                rows: a.rows,
                path: a.path.as_deref(),
                keep: a.keep,
                json: a.json,
            };
            let speed = a.blocks as f64 / s.write_seconds;
            crate::state_peer::add_geth(&w, &mut report, &s.final_root, speed, s.read_back_seconds)
        }
        None => Ok(()),
    };
    for &(blk, speed, gb) in PAPRIKA {
        if (blk <= a.blocks || blk == PAPRIKA[0].0)
            && a.accounts_per_block == 1000
            && a.storage_per_account == 1
        {
            report.push(vec![
                ("impl", json!("paprika (published, no Merkle)")),
                ("At Block", json!(blk)),
                ("Avg speed (blocks/s)", json!(speed)),
                ("Space used (GB)", json!(gb)),
            ]);
        }
    }
    report.note(
        "workload",
        format!(
            "{} blocks x {} new accounts x {} slots, root at every block, {} ({:?}, finality lag {}, finalized {} at a time{}{})",
            a.blocks,
            a.accounts_per_block,
            a.storage_per_account,
            if a.path.is_some() { "on disk" } else { "in memory" },
            a.commit_level,
            a.finality_lag,
            a.finalize_every,
            if a.no_pipeline { "" } else { ", pipelined" },
            if keep_parent_states {
                ", parent states kept"
            } else {
                ", each block takes its parent's trie over"
            }
        ),
    );
    report.note("write_seconds", s.write_seconds);
    // The run's CPU: opening the database (its prefault) is before the clock, and noted apart.
    report.note("cpu_seconds", cpu - s.open_cpu_seconds);
    report.note(
        "open_seconds",
        format!(
            "{:.2} ({:.2} s CPU; {} GB prefaulted)",
            s.open_seconds, s.open_cpu_seconds, a.prefault_gb
        ),
    );
    report.note("seconds_in_block_writes", s.seconds_in_block_writes);
    report.note("seconds_in_roots", s.seconds_in_roots);
    report.note("seconds_in_finalize", s.seconds_in_finalize);
    report.note("cpu_seconds_in_block_writes", s.cpu_seconds_in_block_writes);
    report.note("cpu_seconds_in_roots", s.cpu_seconds_in_roots);
    report.note("cpu_seconds_in_finalize", s.cpu_seconds_in_finalize);
    let f = s.finalize_times;
    report.note(
        "finalize_cpu_seconds",
        format!(
            "store writes {:.2} (account-trie records {:.2}), apply to pages {:.2}, store commit {:.2}, drop retired states {:.2}, prune {:.2}",
            f.build_ops, f.account_records, f.apply, f.commit, f.retire, f.rebase
        ),
    );
    report.note("block_ms_median_first_tenth", s.block_ms_median_first_tenth);
    report.note("block_ms_median_last_tenth", s.block_ms_median_last_tenth);
    report.note("accounts_read_back", s.accounts_read_back);
    report.note("read_back_seconds", s.read_back_seconds);
    report.note("read_back_threads", s.read_back_threads as u64);
    report.note("final_root", format!("0x{}", hex::encode(s.final_root)));
    report.note("peak_rss_kb", peak_rss_kb());
    report.note("peak_uss_kb", peak_uss_kb);
    report.note("allocator", crate::alloc::name());
    emit(
        &report,
        a.json,
        "State: Paprika workload (new accounts with storage, root at every block)",
    );
    peer.map_err(|e| ExitCode(1, e))?;
    Ok(())
}

/// User + system CPU seconds of this process so far (from `/proc/self/stat`, 100 ticks/s).
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / 100.0)
        })
        .unwrap_or(0.0)
}

/// The short run for `proofkit bench`: 600 Paprika blocks in memory (about 22 s of CPU), beside
/// Paprika's published figure (its runner is .NET and not run here; the go-ethereum peer, about
/// 10 blocks/s here, is left to `state bench --peer geth`).
pub fn main_bench(json: bool) -> CliResult {
    bench(BenchArgs {
        blocks: 600,
        accounts_per_block: 1000,
        storage_per_account: 1,
        path: None,
        commit_level: CommitLevel::FlushData,
        finality_lag: 0,
        finalize_every: 32,
        rows: 3,
        cached_levels: 6,
        no_pipeline: false,
        keep_parent_states: false,
        normal_priority_job: false,
        prefault_gb: 0.0,
        keep: false,
        json,
        peer: None,
    })
}
