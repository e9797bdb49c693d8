//! Chapters 2.8.3 ("Read-write ratio"), 2.8.2 ("Scratchpad writes") and 2.5.1 ("Floating point
//! register groups"), measured on whole hashes run by the instrumented interpreter
//! ([`proofkit_randomx::analysis::AnalysisVm::hash_observed`]):
//!
//! - scratchpad reads and writes per program iteration (the document: 39 reads by the `*_M`
//!   instructions, 16 ISTORE writes; with the 128 bytes of register loads and stores and the
//!   64-byte dataset item, 504 bytes read and 256 bytes written). Counted both as the expected
//!   number per program (instructions in the program) and as executed (taken CBRANCHes repeat
//!   some instructions);
//! - the scratchpad write map: one cell per 8 bytes, set when written at least once during the
//!   hash (the document: "L1"/"L2" almost all overwritten, about 66% of the rest);
//! - F and E register values at the end of each program pass: the distribution of
//!   `log10 |x|`, and the share of programs producing an infinite E value (the document: ~2%).

use crate::plot::{self, Bin, Line};
use crate::{figures_table, Analysis, Error, Figure};
use plotters::prelude::*;
use proofkit_randomx::analysis::{AccessKind, AnalysisVm, Observer};
use proofkit_randomx::config::{PROGRAM_ITERATIONS, SCRATCHPAD_L2, SCRATCHPAD_L3};
use proofkit_randomx::program::Program;
use proofkit_randomx::vm::interpreter::Bytecode;
use proofkit_randomx::vm::RegisterFile;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

pub const DOCUMENT_READS: f64 = 39.0;
pub const DOCUMENT_WRITES: f64 = 16.0;
pub const DOCUMENT_BYTES_READ: f64 = 504.0;
pub const DOCUMENT_BYTES_WRITTEN: f64 = 256.0;
pub const DOCUMENT_L3_ONLY_OVERWRITTEN: f64 = 0.66;
pub const DOCUMENT_INFINITE_E_PROGRAMS: f64 = 0.02;
/// Cells per row of the write map picture (512 x 512 cells = 2 MiB).
pub const MAP_WIDTH: usize = 512;
/// Histogram range of `log10 |x|` for F (|F| < 3e14) and E (down to ~1e-77, up to infinity).
const F_RANGE: (f64, f64, usize) = (-10.0, 16.0, 26);
const E_RANGE: (f64, f64, usize) = (-80.0, 320.0, 20);

/// Counts everything the analysis needs from one hash.
struct Recorder {
    static_reads: u64,
    static_writes: u64,
    executed_reads: u64,
    executed_writes: u64,
    l3_stores: u64,
    written: Vec<bool>,
    f_log: Vec<f64>,
    e_log: Vec<f64>,
    f_zero: u64,
    e_infinite: u64,
    program_has_infinite: bool,
    programs_with_infinite: u64,
    programs: u64,
    sample_every: usize,
}

impl Recorder {
    fn new(sample_every: usize) -> Self {
        Recorder {
            static_reads: 0,
            static_writes: 0,
            executed_reads: 0,
            executed_writes: 0,
            l3_stores: 0,
            written: vec![false; SCRATCHPAD_L3 / 8],
            f_log: Vec::new(),
            e_log: Vec::new(),
            f_zero: 0,
            e_infinite: 0,
            program_has_infinite: false,
            programs_with_infinite: 0,
            programs: 0,
            sample_every,
        }
    }

    fn close_program(&mut self) {
        if self.programs > 0 && self.program_has_infinite {
            self.programs_with_infinite += 1;
        }
        self.program_has_infinite = false;
    }
}

impl Observer for Recorder {
    fn program_start(&mut self, _index: usize, _program: &Program, code: &[Bytecode]) {
        self.close_program();
        self.programs += 1;
        for c in code {
            match c {
                Bytecode::Istore { mask, .. } => {
                    self.static_writes += 1;
                    self.l3_stores +=
                        (*mask == proofkit_randomx::config::SCRATCHPAD_L3_MASK) as u64;
                }
                _ if proofkit_randomx::analysis::memory_operand(c, &[0; 9]).is_some() => {
                    self.static_reads += 1
                }
                _ => {}
            }
        }
    }

    fn read(&mut self, _addr: u32, _bytes: u32, kind: AccessKind) {
        if kind == AccessKind::Instruction {
            self.executed_reads += 1;
        }
    }

    fn write(&mut self, addr: u32, bytes: u32, kind: AccessKind) {
        if kind == AccessKind::Store {
            self.executed_writes += 1;
        }
        let first = addr as usize / 8;
        for w in &mut self.written[first..first + bytes as usize / 8] {
            *w = true;
        }
    }

    fn iteration_end(&mut self, iteration: usize, regs: &RegisterFile) {
        for g in regs.e.iter().flatten() {
            if g.is_infinite() {
                self.program_has_infinite = true;
            }
        }
        if !iteration.is_multiple_of(self.sample_every) {
            return;
        }
        for &x in regs.f.iter().flatten() {
            if x == 0.0 {
                self.f_zero += 1;
            } else {
                self.f_log.push(x.abs().log10());
            }
        }
        for &x in regs.e.iter().flatten() {
            if x.is_infinite() {
                self.e_infinite += 1;
            } else {
                self.e_log.push(x.abs().log10());
            }
        }
    }
}

/// The memory analysis of `hashes` light-mode hashes.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryAnalysis {
    pub hashes: usize,
    pub iterations: u64,
    /// `*_M` instructions per program (what the document's 39 counts).
    pub reads_per_program: f64,
    /// ISTORE instructions per program (the document's 16).
    pub writes_per_program: f64,
    /// ISTOREs into "L3" per program (the document: 2).
    pub l3_writes_per_program: f64,
    /// Executed reads and writes per iteration (CBRANCH repeats included).
    pub executed_reads_per_iteration: f64,
    pub executed_writes_per_iteration: f64,
    pub bytes_read_per_iteration: f64,
    pub bytes_written_per_iteration: f64,
    /// Share of 8-byte cells written at least once, per region, averaged over hashes.
    pub l1_l2_overwritten: f64,
    pub l3_only_overwritten: f64,
    /// The write map of the first hash, one cell per 8 bytes.
    #[serde(skip)]
    pub write_map: Vec<bool>,
    pub f_histogram: Vec<(f64, f64, f64)>,
    pub e_histogram: Vec<(f64, f64, f64)>,
    pub f_zero_values: u64,
    pub e_infinite_values: u64,
    pub programs: u64,
    pub programs_with_infinite_e: u64,
}

/// Runs `hashes` hashes (inputs `memory analysis {i}`) on `vm` with the observer. F/E values
/// are sampled every `sample_every` iterations.
pub fn run(
    vm: &mut AnalysisVm,
    hashes: usize,
    sample_every: usize,
) -> Result<MemoryAnalysis, Error> {
    crate::check_samples(hashes, 1)?;
    crate::check_samples(sample_every, 1)?;
    let cells = SCRATCHPAD_L3 / 8;
    let l12 = SCRATCHPAD_L2 / 8;
    let mut total = Recorder::new(sample_every);
    let (mut l12_sum, mut l3_sum) = (0.0, 0.0);
    let mut first_map = Vec::new();
    for h in 0..hashes {
        let mut rec = Recorder::new(sample_every);
        vm.hash_observed(format!("memory analysis {h}").as_bytes(), &mut rec);
        rec.close_program();
        l12_sum += rec.written[..l12].iter().filter(|&&w| w).count() as f64 / l12 as f64;
        l3_sum += rec.written[l12..].iter().filter(|&&w| w).count() as f64 / (cells - l12) as f64;
        total.static_reads += rec.static_reads;
        total.static_writes += rec.static_writes;
        total.l3_stores += rec.l3_stores;
        total.executed_reads += rec.executed_reads;
        total.executed_writes += rec.executed_writes;
        total.f_log.extend(rec.f_log);
        total.e_log.extend(rec.e_log);
        total.f_zero += rec.f_zero;
        total.e_infinite += rec.e_infinite;
        total.programs += rec.programs;
        total.programs_with_infinite += rec.programs_with_infinite;
        if h == 0 {
            first_map = rec.written;
        }
    }
    let programs = total.programs as f64;
    let iterations = total.programs * PROGRAM_ITERATIONS as u64;
    let it = iterations as f64;
    let reads = total.executed_reads as f64 / it;
    let writes = total.executed_writes as f64 / it;
    let hist = |v: &[f64], (lo, hi, n): (f64, f64, usize)| {
        plot::bins(v, lo, hi, n)
            .into_iter()
            .map(|b| (b.left, b.right, b.height))
            .collect()
    };
    Ok(MemoryAnalysis {
        hashes,
        iterations,
        reads_per_program: total.static_reads as f64 / programs,
        writes_per_program: total.static_writes as f64 / programs,
        l3_writes_per_program: total.l3_stores as f64 / programs,
        executed_reads_per_iteration: reads,
        executed_writes_per_iteration: writes,
        bytes_read_per_iteration: 8.0 * reads + 128.0 + 64.0,
        bytes_written_per_iteration: 8.0 * writes + 128.0,
        l1_l2_overwritten: l12_sum / hashes as f64,
        l3_only_overwritten: l3_sum / hashes as f64,
        write_map: first_map,
        f_histogram: hist(&total.f_log, F_RANGE),
        e_histogram: hist(&total.e_log, E_RANGE),
        f_zero_values: total.f_zero,
        e_infinite_values: total.e_infinite,
        programs: total.programs,
        programs_with_infinite_e: total.programs_with_infinite,
    })
}

impl Analysis for MemoryAnalysis {
    fn figures(&self) -> Vec<Figure> {
        vec![
            Figure::new(
                "reads per iteration (*_M instructions in the program)",
                "",
                Some(DOCUMENT_READS),
                self.reads_per_program,
            ),
            Figure::new(
                "writes per iteration (ISTORE in the program)",
                "",
                Some(DOCUMENT_WRITES),
                self.writes_per_program,
            ),
            Figure::new(
                "ISTORE into L3 per program",
                "",
                Some(2.0),
                self.l3_writes_per_program,
            ),
            Figure::new(
                "executed reads per iteration",
                "",
                Some(DOCUMENT_READS),
                self.executed_reads_per_iteration,
            ),
            Figure::new(
                "executed writes per iteration",
                "",
                Some(DOCUMENT_WRITES),
                self.executed_writes_per_iteration,
            ),
            Figure::new(
                "bytes read per iteration",
                "B",
                Some(DOCUMENT_BYTES_READ),
                self.bytes_read_per_iteration,
            ),
            Figure::new(
                "bytes written per iteration",
                "B",
                Some(DOCUMENT_BYTES_WRITTEN),
                self.bytes_written_per_iteration,
            ),
            Figure::new(
                "L1+L2 (first 256 KiB) overwritten",
                "",
                Some(1.0),
                self.l1_l2_overwritten,
            ),
            Figure::new(
                "rest of L3 (1792 KiB) overwritten",
                "",
                Some(DOCUMENT_L3_ONLY_OVERWRITTEN),
                self.l3_only_overwritten,
            ),
            Figure::new(
                "programs with an infinite E value",
                "",
                Some(DOCUMENT_INFINITE_E_PROGRAMS),
                self.programs_with_infinite_e as f64 / self.programs.max(1) as f64,
            ),
        ]
    }

    fn to_text(&self) -> String {
        let mut s = format!(
            "## Chapters 2.8.3, 2.8.2, 2.5.1: scratchpad traffic and FP values ({} hashes, {} iterations)\n\n",
            self.hashes, self.iterations
        );
        s += &figures_table(&self.figures());
        s += "\nlog10|x| of F and E at the end of each program pass (count per bin):\n\n| bin | F | | bin | E |\n|---|---|---|---|---|\n";
        let n = self.f_histogram.len().max(self.e_histogram.len());
        for i in 0..n {
            let cell = |h: &[(f64, f64, f64)]| {
                h.get(i)
                    .map(|b| (format!("1e{:.0}", b.0), format!("{:.0}", b.2)))
                    .unwrap_or_default()
            };
            let (fb, fc) = cell(&self.f_histogram);
            let (eb, ec) = cell(&self.e_histogram);
            let _ = writeln!(s, "| {fb} | {fc} | | {eb} | {ec} |");
        }
        let _ = writeln!(
            s,
            "\nF values equal to 0: {}; infinite E values: {}.",
            self.f_zero_values, self.e_infinite_values
        );
        s
    }

    /// Two pictures: `path` (the write map) and `path` with `-fe` before the extension (the
    /// F/E distributions).
    fn plot(&self, path: &Path) -> Result<(), Error> {
        plot::bitmap(
            path,
            "2.8.2: scratchpad writes, one hash",
            &format!(
                "1 px = 8 bytes, red = written. Rows 0-63 (L1+L2): {:.1}%, rest: {:.1}%",
                100.0 * self.l1_l2_overwritten,
                100.0 * self.l3_only_overwritten
            ),
            MAP_WIDTH,
            &self.write_map,
        )?;
        self.plot_registers(&companion_path(path, "fe"))
    }
}

impl MemoryAnalysis {
    /// The F and E distributions side by side.
    pub fn plot_registers(&self, path: &Path) -> Result<(), Error> {
        plot::ensure_font()?;
        let root = BitMapBackend::new(path, (1200, 520)).into_drawing_area();
        root.fill(&WHITE).map_err(plot::err)?;
        let (left, right) = root.split_horizontally(600);
        let bins = |h: &[(f64, f64, f64)]| -> Vec<Bin> {
            h.iter()
                .map(|&(left, right, height)| Bin {
                    left,
                    right,
                    height,
                })
                .collect()
        };
        let none: [Line<'_>; 0] = [];
        plot::histogram_on(
            &left,
            "Chapter 2.5.1: group F values",
            "log10 |F|",
            "values",
            &bins(&self.f_histogram),
            &none,
        )?;
        plot::histogram_on(
            &right,
            "group E values (finite)",
            "log10 E",
            "values",
            &bins(&self.e_histogram),
            &none,
        )?;
        root.present().map_err(plot::err)?;
        plot::compact(path)
    }
}

/// `dir/name.png` -> `dir/name-suffix.png`.
pub fn companion_path(path: &Path, suffix: &str) -> std::path::PathBuf {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("plot");
    let ext = path.extension().and_then(|s| s.to_str()).unwrap_or("png");
    path.with_file_name(format!("{stem}-{suffix}.{ext}"))
}
