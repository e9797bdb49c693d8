//! Times solves of (n, k) on the benchmark's instances: `cargo run --release --example
//! solve_time -- N K ITERS THREADS MODE [HEIGHT]`
//! (MODE full|pr|em, or peer for the equihash crate's (200,9) solver).
mod common;

use proofkit_equihash::{nonce_from_int, solve_in, HashGen, Mode, Params, SolverConfig, Workspace};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let get = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    let p = Params::new(get(1, "200").parse().unwrap(), get(2, "9").parse().unwrap()).unwrap();
    let iters: u32 = get(3, "2").parse().unwrap();
    let threads: usize = get(4, "1").parse().unwrap();
    let height: u32 = get(6, "0").parse().unwrap();
    let mode = match get(5, "full").as_str() {
        "pr" => Mode::Pr { height },
        "em" => Mode::Em,
        _ => Mode::Full,
    };
    let header = common::bench_header();
    let t = std::time::Instant::now();
    let mut total = 0;
    let mut ws = Workspace::default();
    for i in 0..iters {
        if get(5, "full") == "peer" {
            // The equihash crate's Tromp-derived solver, for side-by-side CPU time.
            let mut next = Some(nonce_from_int(i as u128));
            let n = equihash::tromp::solve_200_9(&header, || next.take()).len();
            eprintln!("nonce {i}: {n} solutions (peer)");
            total += n;
            continue;
        }
        let one = std::time::Instant::now();
        let gen = HashGen::new(p, b"ZcashPoW", &header, &nonce_from_int(i as u128)).unwrap();
        let (s, st) = solve_in(
            &gen,
            &SolverConfig {
                mode,
                threads,
                spill_dir: None,
            },
            &mut ws,
        )
        .unwrap();
        eprintln!(
            "nonce {i}: {} solutions in {:.1} ms {st:?}",
            s.len(),
            one.elapsed().as_secs_f64() * 1e3
        );
        total += s.len();
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{total} solutions in {secs:.3} s ({:.3} Sol/s), peak RSS {} kB",
        total as f64 / secs,
        proofkit_core::peak::peak_rss_kb()
    );
}
