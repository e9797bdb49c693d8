//! Appendix E and chapter 3.4, "SuperscalarHash analysis": over many keys, the average size of
//! the SuperscalarHash programs (the document: 450 instructions), their 64-bit multiplications
//! (155) and the longest dependency chain (95, the latency on an ASIC with 1-cycle operations),
//! and the sensitivity of the output to each bit of an input register (high for bits 3-53).
//!
//! The programs are those of a Cache: BlakeGenerator seeded with the key, 8 programs per key
//! (specs.md 7.2). Bit sensitivity: for random register values and every input register and bit,
//! the fraction of the 512 output bits that change when that one bit is flipped (0.5 is a
//! perfect avalanche), averaged over registers and trials.

use crate::{figures_table, Analysis, Error, Figure};
use proofkit_randomx::analysis::superscalar_programs;
use proofkit_randomx::superscalar::SuperscalarProgram;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

pub const DOCUMENT_INSTRUCTIONS: f64 = 450.0;
pub const DOCUMENT_MULTIPLICATIONS: f64 = 155.0;
pub const DOCUMENT_LONGEST_CHAIN: f64 = 95.0;
/// The document's most sensitive input bits, inclusive.
pub const DOCUMENT_SENSITIVE_BITS: (usize, usize) = (3, 53);

/// Appendix E's statistics.
#[derive(Clone, Debug, Serialize)]
pub struct SuperscalarAnalysis {
    pub keys: usize,
    pub programs: usize,
    pub mean_instructions: f64,
    pub mean_multiplications: f64,
    pub mean_longest_chain: f64,
    pub mean_cpu_latency: f64,
    pub min_instructions: usize,
    pub max_instructions: usize,
    pub sensitivity_trials: usize,
    /// Per input bit 0..63: mean fraction of output bits flipped.
    pub sensitivity: Vec<f64>,
    /// The widest run of bits whose sensitivity is within 1% of the maximum.
    pub sensitive_bits: (usize, usize),
}

/// Mean fraction of the 512 output bits of `p` flipped by each input bit, over `trials` random
/// inputs.
pub fn bit_sensitivity(p: &SuperscalarProgram, trials: usize, seed: u64) -> Vec<f64> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut flips = vec![0u64; 64];
    for _ in 0..trials {
        let input: [u64; 8] = std::array::from_fn(|_| rng.gen());
        let mut base = input;
        p.execute(&mut base);
        for reg in 0..8 {
            for (bit, f) in flips.iter_mut().enumerate() {
                let mut x = input;
                x[reg] ^= 1 << bit;
                p.execute(&mut x);
                *f += x
                    .iter()
                    .zip(&base)
                    .map(|(a, b)| (a ^ b).count_ones() as u64)
                    .sum::<u64>();
            }
        }
    }
    let denom = (trials * 8 * 512) as f64;
    flips.into_iter().map(|f| f as f64 / denom).collect()
}

/// The statistics of the programs of `keys` keys (`superscalar key {i}`), with the bit
/// sensitivity of the first program of each of the first `sensitivity_keys` keys, `trials` inputs
/// each.
pub fn run(
    keys: usize,
    sensitivity_keys: usize,
    trials: usize,
) -> Result<SuperscalarAnalysis, Error> {
    crate::check_samples(keys, 1)?;
    crate::check_samples(trials, 1)?;
    let (mut ins, mut mul, mut chain, mut cpu) = (0usize, 0usize, 0usize, 0usize);
    let (mut min_i, mut max_i) = (usize::MAX, 0);
    let mut sens = vec![0.0; 64];
    let mut sens_programs = 0;
    for k in 0..keys {
        let programs = superscalar_programs(format!("superscalar key {k}").as_bytes());
        for p in &programs {
            ins += p.instructions.len();
            mul += p.mul_count;
            chain += p.asic_latency;
            cpu += p.cpu_latency;
            min_i = min_i.min(p.instructions.len());
            max_i = max_i.max(p.instructions.len());
        }
        if k < sensitivity_keys.max(1) {
            for (s, v) in sens
                .iter_mut()
                .zip(bit_sensitivity(&programs[0], trials, k as u64))
            {
                *s += v;
            }
            sens_programs += 1;
        }
    }
    for s in &mut sens {
        *s /= sens_programs as f64;
    }
    let n = (keys * proofkit_randomx::config::CACHE_ACCESSES) as f64;
    Ok(SuperscalarAnalysis {
        keys,
        programs: n as usize,
        mean_instructions: ins as f64 / n,
        mean_multiplications: mul as f64 / n,
        mean_longest_chain: chain as f64 / n,
        mean_cpu_latency: cpu as f64 / n,
        min_instructions: min_i,
        max_instructions: max_i,
        sensitivity_trials: trials * sens_programs,
        sensitive_bits: sensitive_range(&sens),
        sensitivity: sens,
    })
}

/// The widest run of bits within 1% of the peak sensitivity.
fn sensitive_range(s: &[f64]) -> (usize, usize) {
    let peak = s.iter().cloned().fold(0.0, f64::max);
    let mut best = (0, 0);
    let mut start = None;
    for i in 0..=s.len() {
        let high = i < s.len() && s[i] >= 0.99 * peak;
        match (high, start) {
            (true, None) => start = Some(i),
            (false, Some(a)) => {
                if i - a > best.1 + 1 - best.0 || best == (0, 0) {
                    best = (a, i - 1);
                }
                start = None;
            }
            _ => {}
        }
    }
    best
}

impl Analysis for SuperscalarAnalysis {
    fn figures(&self) -> Vec<Figure> {
        vec![
            Figure::new(
                "instructions per program",
                "",
                Some(DOCUMENT_INSTRUCTIONS),
                self.mean_instructions,
            ),
            Figure::new(
                "64-bit multiplications per program",
                "",
                Some(DOCUMENT_MULTIPLICATIONS),
                self.mean_multiplications,
            ),
            Figure::new(
                "longest dependency chain",
                "instructions",
                Some(DOCUMENT_LONGEST_CHAIN),
                self.mean_longest_chain,
            ),
            Figure::new(
                "ASIC cycles per dataset item (8 x chain)",
                "",
                Some(8.0 * DOCUMENT_LONGEST_CHAIN),
                8.0 * self.mean_longest_chain,
            ),
            Figure::new(
                "multiplications per dataset item",
                "",
                Some(8.0 * DOCUMENT_MULTIPLICATIONS),
                8.0 * self.mean_multiplications,
            ),
            Figure::new(
                "first highly sensitive bit",
                "",
                Some(DOCUMENT_SENSITIVE_BITS.0 as f64),
                self.sensitive_bits.0 as f64,
            ),
            Figure::new(
                "last highly sensitive bit",
                "",
                Some(DOCUMENT_SENSITIVE_BITS.1 as f64),
                self.sensitive_bits.1 as f64,
            ),
        ]
    }

    fn to_text(&self) -> String {
        let mut s = format!(
            "## Appendix E: SuperscalarHash ({} keys, {} programs)\n\n",
            self.keys, self.programs
        );
        let _ = writeln!(
            s,
            "Instructions per program: {:.1} (min {}, max {}); reference-CPU latency {:.1} cycles.\n",
            self.mean_instructions,
            self.min_instructions,
            self.max_instructions,
            self.mean_cpu_latency
        );
        s += &figures_table(&self.figures());
        let _ = writeln!(
            s,
            "\nBit sensitivity ({} program-inputs; fraction of the 512 output bits flipped):\n",
            self.sensitivity_trials
        );
        s += "| bits | mean sensitivity |\n|---|---|\n";
        for chunk in 0..8 {
            let v = &self.sensitivity[8 * chunk..8 * chunk + 8];
            let _ = writeln!(
                s,
                "| {}-{} | {} |",
                8 * chunk,
                8 * chunk + 7,
                v.iter()
                    .map(|x| format!("{x:.3}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        s
    }

    fn plot(&self, path: &Path) -> Result<(), Error> {
        let pts: Vec<(f64, f64)> = self
            .sensitivity
            .iter()
            .enumerate()
            .map(|(i, &v)| (i as f64, v))
            .collect();
        let (a, b) = DOCUMENT_SENSITIVE_BITS;
        let doc_band = vec![(a as f64, 0.5), (b as f64, 0.5)];
        crate::plot::lines(
            path,
            "Appendix E: SuperscalarHash sensitivity to one input bit",
            "input bit flipped (0 = least significant)",
            "fraction of 512 output bits changed",
            &[
                crate::plot::Line {
                    label: "proofkit",
                    points: pts,
                    color: crate::plot::OURS_COLOR,
                },
                crate::plot::Line {
                    label: "document: highest for bits 3-53",
                    points: doc_band,
                    color: crate::plot::ACCENT_COLOR,
                },
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn averages_are_near_the_document() {
        let r = run(24, 2, 20).unwrap();
        assert_eq!(r.programs, 24 * 8);
        let near = |ours: f64, doc: f64, tol: f64| (ours / doc - 1.0).abs() < tol;
        assert!(
            near(r.mean_instructions, DOCUMENT_INSTRUCTIONS, 0.05),
            "{}",
            r.mean_instructions
        );
        assert!(
            near(r.mean_multiplications, DOCUMENT_MULTIPLICATIONS, 0.06),
            "{}",
            r.mean_multiplications
        );
        assert!(
            near(r.mean_longest_chain, DOCUMENT_LONGEST_CHAIN, 0.12),
            "{}",
            r.mean_longest_chain
        );
        assert_eq!(r.sensitivity.len(), 64);
        assert!(r.sensitivity.iter().all(|&s| (0.0..=1.0).contains(&s)));
        assert!(run(0, 1, 1).is_err());
    }

    #[test]
    fn sensitive_range_finds_the_widest_high_run() {
        let mut s = vec![0.1; 64];
        for x in s.iter_mut().take(50).skip(4) {
            *x = 0.45;
        }
        s[60] = 0.453;
        assert_eq!(sensitive_range(&s), (4, 49));
    }
}
