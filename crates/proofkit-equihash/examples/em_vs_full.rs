//! `em` against `full` on the same nonces, alternating in one process, so that a shared
//! host's changes of speed (seconds long here) fall on both: `cargo run --release --example
//! em_vs_full -- N K ITERS THREADS` (the bench's header for seed `HEADER_SEED`, default 0).
//!
//! Each nonce is solved by both modes, in alternating order; the first nonce (each mode's
//! memory coming in) is left out of the totals. Prints the two modes' times and em/full as
//! Sol/s (the ratio of the totals, and the median of the nonces' ratios).
mod common;

use proofkit_equihash::{nonce_from_int, solve_in, HashGen, Mode, Params, SolverConfig, Workspace};
use std::time::Instant;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let get = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    let p = Params::new(get(1, "200").parse().unwrap(), get(2, "9").parse().unwrap()).unwrap();
    let iters: u32 = get(3, "11").parse().unwrap();
    let threads: usize = get(4, "1").parse().unwrap();
    let header = common::bench_header();
    let modes = [Mode::Full, Mode::Em];
    let mut spaces = [Workspace::default(), Workspace::default()];
    let mut totals = [0f64; 2];
    let mut solutions = [0usize; 2];
    let mut ratios = Vec::new();
    for i in 0..iters {
        let gen = HashGen::new(p, b"ZcashPoW", &header, &nonce_from_int(i as u128)).unwrap();
        let mut ms = [0f64; 2];
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for m in order {
            let config = SolverConfig {
                mode: modes[m],
                threads,
                spill_dir: None,
            };
            let t = Instant::now();
            let (found, _) = solve_in(&gen, &config, &mut spaces[m]).unwrap();
            ms[m] = t.elapsed().as_secs_f64() * 1e3;
            solutions[m] += found.len();
        }
        assert_eq!(solutions[0], solutions[1], "nonce {i}: the modes disagree");
        eprintln!("nonce {i}: full {:.1} ms, em {:.1} ms", ms[0], ms[1]);
        if i > 0 {
            totals[0] += ms[0];
            totals[1] += ms[1];
            ratios.push(ms[0] / ms[1]);
        }
    }
    ratios.sort_by(f64::total_cmp);
    let median = ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN);
    println!(
        "full {:.0} ms, em {:.0} ms over {} nonces: em/full {:.3} (median of nonces {:.3})",
        totals[0],
        totals[1],
        ratios.len(),
        totals[0] / totals[1],
        median
    );
}
