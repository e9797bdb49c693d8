//! Appendix C, "RandomX runtime distribution": the runtime of single VM programs (generation,
//! compilation, execution and the Blake2b of the register file, as the document counts it) with
//! a log-normal fit, the breakdown of one hash into VM execution, scratchpad fill
//! (AesGenerator1R), scratchpad hash (AesHash1R) and program generation/compilation (the
//! document: 7.5% overhead in fast mode), and the distribution of whole-hash times (in light mode:
//! the verification time, 14.8 ms in the document).
//!
//! The document measured an AMD Ryzen 7 1700 at 3.0 GHz; absolute times here are for the machine
//! that runs the analysis, in CPU time of the one thread that hashes (so a busy machine slows
//! the run but does not inflate the figures). Appendix A's strategy III relies on this
//! distribution: rejecting the slowest 25% of programs gives the speed-up reported as
//! `filter_speedup` (the document: 5%).

use crate::plot::{self, Line};
use crate::{figures_table, mean, std_dev, Analysis, Error, Figure};
use proofkit_randomx::analysis::AnalysisVm;
use proofkit_randomx::DatasetSource;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

pub const DOCUMENT_FAST_HASH_US: f64 = 1600.0;
pub const DOCUMENT_FAST_EXECUTE_US: f64 = 1480.0;
pub const DOCUMENT_FILL_US: f64 = 45.0;
pub const DOCUMENT_SCRATCHPAD_HASH_US: f64 = 45.0;
pub const DOCUMENT_GENERATE_US: f64 = 30.0;
pub const DOCUMENT_GENERATE_PER_PROGRAM_US: f64 = 3.6;
pub const DOCUMENT_OVERHEAD: f64 = 0.075;
pub const DOCUMENT_LIGHT_HASH_US: f64 = 14800.0;
pub const DOCUMENT_FILTER_SPEEDUP: f64 = 1.05;

/// Mean microseconds per hash in each phase.
#[derive(Clone, Debug, Serialize)]
pub struct Breakdown {
    pub execute_us: f64,
    pub fill_us: f64,
    pub scratchpad_hash_us: f64,
    pub generate_us: f64,
    pub blake2b_us: f64,
    pub total_us: f64,
    /// Share of the hash not spent executing programs.
    pub overhead: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RuntimeAnalysis {
    /// "fast" (2 GiB dataset) or "light" (cache only).
    pub mode: String,
    pub jit: bool,
    pub hashes: usize,
    /// Single-program runtimes, microseconds.
    pub program_us: Vec<f64>,
    pub program_mean_us: f64,
    pub program_median_us: f64,
    /// Log-normal fit: mean and standard deviation of ln(runtime in us).
    pub lognormal_mu: f64,
    pub lognormal_sigma: f64,
    /// Mean runtime over the fastest 75% of programs, relative to all.
    pub filter_speedup: f64,
    /// Whole-hash times, microseconds.
    pub hash_us: Vec<f64>,
    pub hash_mean_us: f64,
    pub generate_per_program_us: f64,
    pub breakdown: Breakdown,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        0.0
    } else {
        s[s.len() / 2]
    }
}

/// Times `hashes` hashes (inputs `runtime {i}`) on `vm`, after one warm-up hash.
pub fn run(
    vm: &mut AnalysisVm,
    source: &DatasetSource,
    hashes: usize,
) -> Result<RuntimeAnalysis, Error> {
    crate::check_samples(hashes, 2)?;
    let mode = match source {
        DatasetSource::Fast(_) => "fast",
        DatasetSource::Light(_) => "light",
    };
    vm.hash_timed(b"runtime warm-up");
    let (mut program_us, mut hash_us) = (Vec::new(), Vec::new());
    let (mut exe, mut fill, mut sph, mut gen, mut blake) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for i in 0..hashes {
        let (_, t) = vm.hash_timed(format!("runtime {i}").as_bytes());
        for p in 0..t.execute_ns.len() {
            program_us
                .push((t.generate_ns[p] + t.execute_ns[p] + t.register_hash_ns[p]) as f64 / 1e3);
        }
        hash_us.push(t.total_ns() as f64 / 1e3);
        exe += t.execute_ns.iter().sum::<u64>() as f64 / 1e3;
        fill += t.fill_ns as f64 / 1e3;
        sph += t.scratchpad_hash_ns as f64 / 1e3;
        gen += t.generate_ns.iter().sum::<u64>() as f64 / 1e3;
        blake += (t.register_hash_ns.iter().sum::<u64>() + t.final_ns) as f64 / 1e3;
    }
    let n = hashes as f64;
    let total = (exe + fill + sph + gen + blake) / n;
    let logs: Vec<f64> = program_us.iter().map(|t| t.ln()).collect();
    let mut sorted = program_us.clone();
    sorted.sort_by(f64::total_cmp);
    let keep = (sorted.len() * 3).div_ceil(4);
    let filter_speedup = mean(&sorted) / mean(&sorted[..keep]);
    Ok(RuntimeAnalysis {
        mode: mode.into(),
        jit: vm.uses_jit(),
        hashes,
        program_mean_us: mean(&program_us),
        program_median_us: median(&program_us),
        lognormal_mu: mean(&logs),
        lognormal_sigma: std_dev(&logs),
        filter_speedup,
        hash_mean_us: mean(&hash_us),
        generate_per_program_us: gen / n / proofkit_randomx::config::PROGRAM_COUNT as f64,
        breakdown: Breakdown {
            execute_us: exe / n,
            fill_us: fill / n,
            scratchpad_hash_us: sph / n,
            generate_us: gen / n,
            blake2b_us: blake / n,
            total_us: total,
            overhead: 1.0 - exe / n / total,
        },
        program_us,
        hash_us,
    })
}

impl RuntimeAnalysis {
    fn fast(&self) -> bool {
        self.mode == "fast"
    }

    /// Histogram of `values` with the log-normal density of their logs, scaled to counts.
    fn histogram_with_fit(
        values: &[f64],
        path: &Path,
        title: &str,
        x_label: &str,
    ) -> Result<(), Error> {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let lo = sorted.first().copied().unwrap_or(0.0);
        let hi = sorted[((sorted.len() as f64 * 0.995) as usize).min(sorted.len() - 1)];
        let hi = if hi > lo { hi } else { lo + 1.0 };
        let count = 40;
        let bins = plot::bins(values, lo, hi, count);
        let logs: Vec<f64> = values.iter().map(|v| v.ln()).collect();
        let (mu, sigma) = (mean(&logs), std_dev(&logs).max(1e-9));
        let width = (hi - lo) / count as f64;
        let pts = (0..=200)
            .map(|i| {
                let x = lo + (hi - lo) * i as f64 / 200.0;
                let x = x.max(1e-9);
                let z = (x.ln() - mu) / sigma;
                let pdf = (-0.5 * z * z).exp() / (x * sigma * (2.0 * std::f64::consts::PI).sqrt());
                (x, pdf * values.len() as f64 * width)
            })
            .collect();
        let label = format!("log-normal fit: mu = {mu:.3}, sigma = {sigma:.3}");
        plot::histogram(
            path,
            title,
            x_label,
            "count",
            &bins,
            &[Line {
                label: &label,
                points: pts,
                color: plot::ACCENT_COLOR,
            }],
        )
    }
}

impl Analysis for RuntimeAnalysis {
    fn figures(&self) -> Vec<Figure> {
        let b = &self.breakdown;
        let fast = self.fast();
        let doc = |x: f64| if fast { Some(x) } else { None };
        let mut v = vec![
            Figure::new(
                format!("hash time ({} mode)", self.mode),
                "us",
                Some(if fast {
                    DOCUMENT_FAST_HASH_US
                } else {
                    DOCUMENT_LIGHT_HASH_US
                }),
                self.hash_mean_us,
            ),
            Figure::new(
                "VM execution (8 programs)",
                "us",
                doc(DOCUMENT_FAST_EXECUTE_US),
                b.execute_us,
            ),
            Figure::new(
                "scratchpad fill (AesGenerator1R)",
                "us",
                Some(DOCUMENT_FILL_US),
                b.fill_us,
            ),
            Figure::new(
                "scratchpad hash (AesHash1R)",
                "us",
                Some(DOCUMENT_SCRATCHPAD_HASH_US),
                b.scratchpad_hash_us,
            ),
            Figure::new(
                "program generation + compilation (8 programs)",
                "us",
                Some(DOCUMENT_GENERATE_US),
                b.generate_us,
            ),
            Figure::new(
                "generation + compilation per program",
                "us",
                Some(DOCUMENT_GENERATE_PER_PROGRAM_US),
                self.generate_per_program_us,
            ),
            Figure::new("Blake2b (register files, final)", "us", None, b.blake2b_us),
            Figure::new(
                "overhead (time not executing programs)",
                "",
                doc(DOCUMENT_OVERHEAD),
                b.overhead,
            ),
            Figure::new(
                "speed-up from rejecting the slowest 25% of programs",
                "",
                doc(DOCUMENT_FILTER_SPEEDUP),
                self.filter_speedup,
            ),
        ];
        v.push(Figure::new(
            "single program: mean",
            "us",
            None,
            self.program_mean_us,
        ));
        v
    }

    fn to_text(&self) -> String {
        let mut s = format!(
            "## Appendix C: runtime ({} mode, {}, {} hashes, {} programs)\n\n",
            self.mode,
            if self.jit { "JIT" } else { "interpreter" },
            self.hashes,
            self.program_us.len()
        );
        s += &figures_table(&self.figures());
        let _ = writeln!(
            s,
            "\nSingle-program runtime: median {:.1} us, log-normal fit mu = {:.3}, sigma = {:.3} (ln us).",
            self.program_median_us, self.lognormal_mu, self.lognormal_sigma
        );
        if !self.fast() {
            s += "Light mode: the document's breakdown and overhead are fast-mode figures, so only the hash time (verification) is compared.\n";
        }
        s
    }

    /// `path`: single-program runtimes; `path` with `-hash`: whole-hash times.
    fn plot(&self, path: &Path) -> Result<(), Error> {
        Self::histogram_with_fit(
            &self.program_us,
            path,
            &format!(
                "Appendix C: single program runtime, {} mode ({} programs)",
                self.mode,
                self.program_us.len()
            ),
            "microseconds (generation + compilation + execution + Blake2b)",
        )?;
        Self::histogram_with_fit(
            &self.hash_us,
            &crate::memory::companion_path(path, "hash"),
            &format!(
                "Appendix C: time per hash, {} mode ({} hashes)",
                self.mode, self.hashes
            ),
            "microseconds per hash",
        )
    }
}
