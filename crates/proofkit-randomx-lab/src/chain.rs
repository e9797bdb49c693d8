//! Appendix A, "The effect of chaining VM executions": how many programs each mining strategy
//! executes per hash, and its speed relative to the honest miner, for `N` chained programs.
//!
//! - Strategy I: executes every program (`Q = 1`).
//! - Strategy II: hardware that runs only a fraction `Q = 0.75` of programs, 1.5 times faster;
//!   an unsupported program after the first wastes the chain executed so far.
//! - Strategy III: runs everything but filters the first program of the chain, rejecting the
//!   slowest 25% for a 5% speed-up of that program.
//!
//! Closed forms: the first program is filtered for free, program `k + 1` is acceptable with
//! probability `Q`, so an attempt executes `1 + Q + ... + Q^(N-1) = (1 - Q^N) / (1 - Q)` programs
//! on average and succeeds with probability `Q^(N-1)`; strategy II thus executes
//! `(1 - Q^N) / ((1 - Q) Q^(N-1))` programs per hash. The Monte Carlo simulation draws the
//! acceptability of each program and must agree.
//!
//! The document prints N(II) rounded to one decimal and the speeds truncated (not rounded) to
//! two: 1.2857 appears as 1.28, 0.9256 as 0.92 and 1.0060 as 1.00.

use crate::{figures_table, Analysis, Error, Figure};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// The chain lengths of the document's table.
pub const CHAIN_LENGTHS: [u32; 4] = [1, 2, 4, 8];
/// Strategy II and III's acceptance ratio.
pub const Q: f64 = 0.75;
/// Strategy II's speed-up on the programs it supports.
pub const SPEEDUP_II: f64 = 1.5;
/// Strategy III's speed-up on the first program.
pub const SPEEDUP_III: f64 = 1.05;

/// The document's table: N, programs per hash (I, II, III), speed (I, II, III).
pub const DOCUMENT: [(u32, [f64; 3], [f64; 3]); 4] = [
    (1, [1.0, 1.0, 1.0], [1.00, 1.50, 1.05]),
    (2, [2.0, 2.3, 2.0], [1.00, 1.28, 1.02]),
    (4, [4.0, 6.5, 4.0], [1.00, 0.92, 1.01]),
    (8, [8.0, 27.0, 8.0], [1.00, 0.44, 1.00]),
];

/// Programs executed per hash and relative speed of strategies I, II, III.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Strategies {
    pub programs: [f64; 3],
    pub speed: [f64; 3],
}

/// The closed form for `n` chained programs.
pub fn analytic(n: u32) -> Strategies {
    let n_f = n as f64;
    let programs_ii = (1.0 - Q.powi(n as i32)) / ((1.0 - Q) * Q.powi(n as i32 - 1));
    Strategies {
        programs: [n_f, programs_ii, n_f],
        speed: [
            1.0,
            n_f * SPEEDUP_II / programs_ii,
            n_f / ((n_f - 1.0) + 1.0 / SPEEDUP_III),
        ],
    }
}

/// Wasted programs per attempt for `n` chained programs:
/// `(1-Q)(1 + 2Q + 3Q^2 + ... + (n-1)Q^(n-2))`, the document's expression for N = 8 (~2.5).
pub fn wasted_per_attempt(n: u32) -> f64 {
    (1..n).map(|k| k as f64 * Q.powi(k as i32 - 1)).sum::<f64>() * (1.0 - Q)
}

/// A Monte Carlo run: `hashes` valid hashes per strategy, acceptability drawn per program.
pub fn monte_carlo(n: u32, hashes: usize, seed: u64) -> Strategies {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ n as u64);
    let n_f = n as f64;
    // Strategy II: count every executed program until `hashes` whole chains are acceptable.
    let mut executed_ii = 0u64;
    let mut done = 0;
    while done < hashes {
        // The first program is filtered before execution, at no cost.
        while !rng.gen_bool(Q) {}
        executed_ii += 1;
        let mut ok = true;
        for _ in 1..n {
            if !rng.gen_bool(Q) {
                ok = false;
                break;
            }
            executed_ii += 1;
        }
        done += ok as usize;
    }
    // Strategy III: the first program of each chain is drawn until acceptable (free), then runs
    // 5% faster; the others run at normal speed.
    let mut time_iii = 0.0;
    let mut executed_iii = 0u64;
    for _ in 0..hashes {
        while !rng.gen_bool(Q) {}
        time_iii += 1.0 / SPEEDUP_III;
        executed_iii += 1;
        for _ in 1..n {
            time_iii += 1.0;
            executed_iii += 1;
        }
    }
    let h = hashes as f64;
    let programs_ii = executed_ii as f64 / h;
    Strategies {
        programs: [n_f, programs_ii, executed_iii as f64 / h],
        speed: [
            1.0,
            n_f * h / (executed_ii as f64 / SPEEDUP_II),
            n_f * h / time_iii,
        ],
    }
}

/// One row of the table.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub n: u32,
    pub document: Strategies,
    pub analytic: Strategies,
    pub monte_carlo: Strategies,
}

/// Appendix A's table, closed form and Monte Carlo.
#[derive(Clone, Debug, Serialize)]
pub struct ChainAnalysis {
    pub q: f64,
    pub hashes_per_strategy: usize,
    pub seed: u64,
    pub wasted_per_attempt_n8: f64,
    pub rows: Vec<Row>,
}

/// Runs the analysis with `hashes` simulated valid hashes per strategy and chain length.
pub fn run(hashes: usize, seed: u64) -> Result<ChainAnalysis, Error> {
    crate::check_samples(hashes, 1)?;
    Ok(ChainAnalysis {
        q: Q,
        hashes_per_strategy: hashes,
        seed,
        wasted_per_attempt_n8: wasted_per_attempt(8),
        rows: DOCUMENT
            .iter()
            .map(|&(n, programs, speed)| Row {
                n,
                document: Strategies { programs, speed },
                analytic: analytic(n),
                monte_carlo: monte_carlo(n, hashes, seed),
            })
            .collect(),
    })
}

const NAMES: [&str; 3] = ["I", "II", "III"];

impl Analysis for ChainAnalysis {
    fn figures(&self) -> Vec<Figure> {
        let mut out = vec![Figure::new(
            "wasted programs per attempt, N = 8",
            "",
            Some(2.5),
            self.wasted_per_attempt_n8,
        )];
        for r in &self.rows {
            for s in 1..3 {
                out.push(Figure::new(
                    format!("N = {}: programs per hash N({})", r.n, NAMES[s]),
                    "",
                    Some(r.document.programs[s]),
                    r.analytic.programs[s],
                ));
            }
            for s in 1..3 {
                out.push(Figure::new(
                    format!("N = {}: Speed({})", r.n, NAMES[s]),
                    "",
                    Some(r.document.speed[s]),
                    r.analytic.speed[s],
                ));
            }
        }
        out
    }

    fn to_text(&self) -> String {
        let mut s = String::from("## Appendix A: chained programs (Q = 0.75)\n\n");
        s += "| N | N(I) | N(II) | N(III) | Speed(I) | Speed(II) | Speed(III) | source |\n";
        s += "|---|---|---|---|---|---|---|---|\n";
        for r in &self.rows {
            for (name, v, digits) in [
                ("document", &r.document, 1),
                ("closed form", &r.analytic, 3),
                ("Monte Carlo", &r.monte_carlo, 3),
            ] {
                let _ = writeln!(
                    s,
                    "| {} | {:.d$} | {:.d$} | {:.d$} | {:.3} | {:.3} | {:.3} | {name} |",
                    r.n,
                    v.programs[0],
                    v.programs[1],
                    v.programs[2],
                    v.speed[0],
                    v.speed[1],
                    v.speed[2],
                    d = digits
                );
            }
        }
        let _ = writeln!(
            s,
            "\nMonte Carlo: {} valid hashes per strategy and N, seed {}.\n",
            self.hashes_per_strategy, self.seed
        );
        s + &figures_table(&self.figures())
    }

    fn plot(&self, path: &Path) -> Result<(), Error> {
        let mut cats = Vec::new();
        for r in &self.rows {
            for s in 1..3 {
                cats.push((
                    format!("N={} {}", r.n, NAMES[s]),
                    Some(r.document.speed[s]),
                    r.monte_carlo.speed[s],
                ));
            }
        }
        crate::plot::document_vs_ours_bars(
            path,
            "Appendix A: speed relative to the honest miner (Monte Carlo)",
            "relative speed",
            &cats,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document rounds N(II) to one decimal and truncates the speeds to two.
    #[test]
    fn closed_form_reproduces_the_document_table_exactly() {
        for (n, programs, speed) in DOCUMENT {
            let a = analytic(n);
            for s in 0..3 {
                assert_eq!(
                    (a.programs[s] * 10.0).round() / 10.0,
                    programs[s],
                    "N = {n} programs {s}"
                );
                assert_eq!(
                    (a.speed[s] * 100.0 + 1e-9).floor() / 100.0,
                    speed[s],
                    "N = {n} speed {s}"
                );
            }
        }
        assert!((wasted_per_attempt(8) - 2.5).abs() < 0.05);
        // The closed form and the attempt-wise sum agree: N(II) = (1 + wasted) / Q^(N-1).
        for n in CHAIN_LENGTHS {
            let a = analytic(n);
            let per_attempt = (1.0 - Q.powi(n as i32)) / (1.0 - Q);
            assert!((a.programs[1] - per_attempt / Q.powi(n as i32 - 1)).abs() < 1e-12);
        }
    }

    #[test]
    fn monte_carlo_agrees_with_the_closed_form() {
        let r = run(20_000, 7).unwrap();
        for row in &r.rows {
            for s in 0..3 {
                let (a, m) = (row.analytic, row.monte_carlo);
                assert!(
                    (m.programs[s] / a.programs[s] - 1.0).abs() < 0.03,
                    "N = {} programs {s}: {} vs {}",
                    row.n,
                    m.programs[s],
                    a.programs[s]
                );
                assert!(
                    (m.speed[s] / a.speed[s] - 1.0).abs() < 0.03,
                    "N = {} speed {s}",
                    row.n
                );
            }
        }
        assert!(run(0, 1).is_err());
    }
}
