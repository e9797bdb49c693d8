//! The measurements of the RandomX design document (`shared/seeds/003_48818c1b4bdf7b97.txt`,
//! tevador/RandomX `doc/design.md`), re-run on proofkit's own VM. One module per analysis, named
//! after the chapter or appendix it reproduces:
//!
//! | module | document | what |
//! |---|---|---|
//! | [`chain`] | Appendix A | programs per hash and relative speed of mining strategies I-III for N = 1, 2, 4, 8 chained programs: closed form and Monte Carlo |
//! | [`pipeline`] | Appendix B | the simplified 3-stage CPU model over generated programs: cycles and IPC of the 10 designs |
//! | [`runtime`] | Appendix C | single-program runtime distribution (log-normal fit), per-hash breakdown, light-mode verification time |
//! | [`entropy`] | Appendix D | final scratchpads compressed with LZMA (preset 9 extreme) |
//! | [`superscalar`] | Appendix E, chapter 3.4 | SuperscalarHash size, multiplications, longest dependency chain, bit sensitivity |
//! | [`rng`] | Appendix F | AesGenerator1R/4R streams through the `dieharder` battery |
//! | [`memory`] | chapters 2.8.3, 2.8.2, 2.5.1 | scratchpad reads/writes per iteration, the write map, F/E register value distributions |
//!
//! Every result carries [`Figure`]s: the document's number beside ours and the difference; it
//! renders as a text table ([`Analysis::to_text`]), as JSON (serde) and, where a picture says
//! more, as a PNG ([`Analysis::plot`], drawn with `plotters`).
#![deny(unsafe_code)]

pub mod chain;
pub mod entropy;
pub mod memory;
pub mod pipeline;
pub mod plot;
pub mod rng;
pub mod runtime;
pub mod superscalar;

use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// Errors of the analyses.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("randomx: {0}")]
    Randomx(#[from] proofkit_randomx::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("plot: {0}")]
    Plot(String),
    #[error("no font for plot text: {0} (install Debian's fonts-dejavu-core or set PROOFKIT_FONT to a .ttf file)")]
    Font(String),
    #[error("dieharder: {0}")]
    Dieharder(String),
    #[error("sample size must be at least {min}, got {got}")]
    Samples { min: usize, got: usize },
    #[error("this analysis has no plot")]
    NoPlot,
}

/// One compared number: the document's figure (where it gives one), ours, and the difference.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Figure {
    pub name: String,
    pub unit: String,
    pub document: Option<f64>,
    pub ours: f64,
    /// `ours - document`.
    pub difference: Option<f64>,
    /// `(ours - document) / document`, where the document's figure is not zero.
    pub relative_difference: Option<f64>,
}

impl Figure {
    pub fn new(name: impl Into<String>, unit: &str, document: Option<f64>, ours: f64) -> Self {
        Figure {
            name: name.into(),
            unit: unit.to_string(),
            document,
            ours,
            difference: document.map(|d| ours - d),
            relative_difference: document.filter(|&d| d != 0.0).map(|d| (ours - d) / d),
        }
    }
}

/// Formats a number with 6 significant digits, trailing zeros dropped.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let a = x.abs();
    if a == 0.0 {
        return "0".into();
    }
    if !(1e-4..1e9).contains(&a) {
        return format!("{x:.5e}");
    }
    let decimals = (5 - a.log10().floor() as i32).clamp(0, 9) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// The figures as a markdown table.
pub fn figures_table(figures: &[Figure]) -> String {
    let mut s = String::from("| figure | document | ours | difference |\n|---|---|---|---|\n");
    for f in figures {
        let unit = if f.unit.is_empty() {
            String::new()
        } else {
            format!(" {}", f.unit)
        };
        let doc = f
            .document
            .map(|d| format!("{}{unit}", fmt_num(d)))
            .unwrap_or_else(|| "-".into());
        let diff = match (f.difference, f.relative_difference) {
            (Some(d), Some(r)) => format!("{} ({:+.2}%)", fmt_num(d), 100.0 * r),
            (Some(d), None) => fmt_num(d),
            _ => "-".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {doc} | {}{unit} | {diff} |",
            f.name,
            fmt_num(f.ours)
        );
    }
    s
}

/// What every analysis result offers.
pub trait Analysis: Serialize {
    /// The document's figures beside ours.
    fn figures(&self) -> Vec<Figure>;
    /// A human-readable report (markdown tables).
    fn to_text(&self) -> String;
    /// Draws the analysis's picture as a PNG; [`Error::NoPlot`] where it has none.
    fn plot(&self, path: &Path) -> Result<(), Error>;
    /// The result as one JSON object.
    fn to_json(&self) -> String {
        // Serialising plain data structs with string keys cannot fail.
        serde_json::to_string_pretty(self).expect("analysis results serialise")
    }
}

/// Mean of a slice (0 for an empty one).
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// Sample standard deviation (0 for fewer than 2 values).
pub fn std_dev(xs: &[f64]) -> f64 {
    if xs.len() < 2 {
        return 0.0;
    }
    let m = mean(xs);
    (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (xs.len() - 1) as f64).sqrt()
}

pub(crate) fn check_samples(got: usize, min: usize) -> Result<(), Error> {
    if got < min {
        Err(Error::Samples { min, got })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figure_difference_and_table() {
        let f = Figure::new("cycles", "", Some(200.0), 210.0);
        assert_eq!(f.difference, Some(10.0));
        assert!((f.relative_difference.unwrap() - 0.05).abs() < 1e-12);
        let t = figures_table(&[f, Figure::new("x", "ms", None, 1.5)]);
        assert!(t.contains("| cycles | 200 | 210 | 10 (+5.00%) |"), "{t}");
        assert!(t.contains("| x | - | 1.5 ms | - |"), "{t}");
        assert_eq!(fmt_num(1.000280123), "1.00028");
        assert_eq!(fmt_num(-0.0250001), "-0.0250001");
        assert_eq!(fmt_num(2.5e-7), "2.50000e-7");
        assert_eq!(
            Figure::new("z", "", Some(0.0), 1.0).relative_difference,
            None
        );
    }

    #[test]
    fn mean_and_std_dev() {
        assert_eq!(mean(&[]), 0.0);
        assert_eq!(mean(&[1.0, 2.0, 3.0]), 2.0);
        assert!((std_dev(&[1.0, 2.0, 3.0]) - 1.0).abs() < 1e-12);
        assert!(check_samples(0, 1).is_err());
    }
}
