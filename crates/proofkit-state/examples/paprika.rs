//! The Paprika workload without the CLI: `cargo run --release -p proofkit-state --example paprika
//! -- BLOCKS [DIR]` (the CLI's `proofkit state bench` prints the same figures as the seed's table).
use proofkit_state::bench::{run_paprika_rows, PaprikaConfig, Summary};
use proofkit_state::CommitLevel;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let mut args = std::env::args().skip(1);
    let blocks = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let dir = args.next().map(std::path::PathBuf::from);
    let cfg = PaprikaConfig {
        blocks,
        accounts_per_block: 1000,
        storage_per_account: 1,
        dir,
        commit_level: CommitLevel::FlushData,
        finality_lag: env("PK_FINALITY_LAG", 0),
        finalize_every: env("PK_FINALIZE_EVERY", 32),
        rows: std::env::var("PK_ROWS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10),
        cached_levels: std::env::var("PK_CACHED_LEVELS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(6),
        pipeline: env("PK_PIPELINE", 1) != 0,
        keep_parent_states: env("PK_KEEP_PARENT_STATES", 0) != 0,
        prefault_bytes: env::<usize>("PK_PREFAULT_MB", 0) << 20,
        idle_priority_job: env("PK_IDLE_PRIORITY_JOB", 1) != 0,
    };
    let start = std::time::Instant::now();
    println!("At Block | Avg speed (blocks/s) | Space used (GB) | New pages P90 | Pages reused P90 | Total pages P90 | peak RSS (KiB) | block ms (median) | CPU s | wall s");
    let s = run_paprika_rows(&cfg, &|_| {}, &|r| {
        println!(
            "{:>8} | {:>8.1} | {:>7.3} | {:>6} | {:>6} | {:>6} | {:>10} | {:>7.2} | {:>8.1} | {:>8.1}",
            r.at_block,
            r.avg_blocks_per_s,
            r.space_bytes as f64 / 1e9,
            r.new_pages_p90,
            r.reused_pages_p90,
            r.total_pages_p90,
            r.peak_rss_kb,
            r.block_ms_median,
            proofkit_core::cputime::process_cpu_time().map_or(0.0, |d| d.as_secs_f64()),
            start.elapsed().as_secs_f64(),
        );
    })
    .expect("bench");
    // The rows were printed as they came; the rest of the summary, the root in hex.
    let mut rest: Summary = s.clone();
    rest.rows.clear();
    println!("final root 0x{}\n{rest:#?}", hex(&s.final_root));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
