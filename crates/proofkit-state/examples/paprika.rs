//! The Paprika workload without the CLI: `cargo run --release -p proofkit-state --example paprika
//! -- BLOCKS [DIR]` (the CLI's `proofkit state bench` prints the same figures as the seed's table).
use proofkit_state::bench::{run_paprika, PaprikaConfig};
use proofkit_state::CommitLevel;

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
        finality_lag: 0,
        rows: 10,
    };
    let s = run_paprika(&cfg, &|_| {}).expect("bench");
    println!("At Block | Avg speed (blocks/s) | Space used (GB) | New pages P90 | Pages reused P90 | Total pages P90 | peak RSS (KiB)");
    for r in &s.rows {
        println!(
            "{:>8} | {:>8.1} | {:>7.3} | {:>6} | {:>6} | {:>6} | {:>10}",
            r.at_block,
            r.avg_blocks_per_s,
            r.space_bytes as f64 / 1e9,
            r.new_pages_p90,
            r.reused_pages_p90,
            r.total_pages_p90,
            r.peak_rss_kb
        );
    }
    println!("{s:#?}");
}
