//! Appendix B, "Performance simulation": a simplified CPU with a 3-stage pipeline (fetch and
//! decode, memory access, execute) runs one pass over each generated RandomX program, and the
//! average cycle count is reported for 10 designs: 1 EXU + 1 MEM to 4 EXU + 2 MEM, in-order or
//! out-of-order, speculative branch handling or not.
//!
//! The model, as the document describes it:
//! - every instruction except ISTORE uses an execution unit (EXU) in stage 3 for one cycle; its
//!   result is usable in the next cycle;
//! - memory instructions (the `*_M` forms and ISTORE) use a memory unit (MEM) in stage 2, where
//!   the address register must already be available;
//! - in-order: up to `EXU` instructions issue per cycle in program order, stopping at the first
//!   one whose operands or units are not ready;
//! - out-of-order: each instruction runs at the earliest cycle its operands and units allow
//!   (registers renamed, unlimited window);
//! - non-speculative: nothing after a CBRANCH is fetched until the branch has executed
//!   (`pipeline - 1 = 2` lost cycles); speculative: branches are predicted not taken and each one
//!   costs the same flush with probability 1/256 (added as its expectation);
//! - floating-point operations wait for a preceding CFROUND (the rounding mode).
//!
//! The programs are the real ones (specs.md 4.5; v1, 256 instructions), generated from
//! `Hash512(nonce)` seeds. The speculative designs land on the document's figures. The
//! non-speculative ones cost more here for two reasons: the document's table dates from a draft
//! with fewer branches (its design #1 loses 31 cycles to branches, ~16 CBRANCH at 2 cycles each,
//! where today's 25/256 frequency gives ~25), and this model stops fetching at every unresolved
//! branch, including the next branch, where the reference simulator (perf-simulation.cpp) lets
//! branches themselves run early out of order, which mostly shows in the out-of-order designs.

use crate::{figures_table, Analysis, Error, Figure};
use proofkit_randomx::analysis::generate_program;
use proofkit_randomx::blake::hash512;
use proofkit_randomx::vm::interpreter::{decode, Bytecode};
use proofkit_randomx::{Aes, Version};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;

/// Pipeline depth of the model.
pub const PIPELINE: u64 = 3;
/// Branch misprediction probability of a speculative design.
pub const MISPREDICT: f64 = 1.0 / 256.0;

/// One simulated CPU design.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct Design {
    pub exu: usize,
    pub mem: usize,
    pub out_of_order: bool,
    pub speculative: bool,
}

/// The 10 designs of the document with its cycles and IPC.
pub const DOCUMENT: [(Design, f64, f64); 10] = {
    const fn d(exu: usize, mem: usize, out_of_order: bool, speculative: bool) -> Design {
        Design {
            exu,
            mem,
            out_of_order,
            speculative,
        }
    }
    [
        (d(1, 1, false, false), 293.0, 0.87),
        (d(1, 1, false, true), 262.0, 0.98),
        (d(2, 1, false, false), 197.0, 1.3),
        (d(2, 1, false, true), 161.0, 1.6),
        (d(2, 1, true, false), 144.0, 1.8),
        (d(2, 1, true, true), 122.0, 2.1),
        (d(4, 2, false, false), 135.0, 1.9),
        (d(4, 2, false, true), 99.0, 2.6),
        (d(4, 2, true, false), 89.0, 2.9),
        (d(4, 2, true, true), 64.0, 4.0),
    ]
};

/// An instruction as the model sees it: registers read and written, units used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Op {
    /// Integer registers read in the execute stage (destination included when read-modify-write).
    pub int_reads: [Option<u8>; 2],
    /// Integer registers written.
    pub int_writes: [Option<u8>; 2],
    /// Address register needed in the memory stage.
    pub address: Option<u8>,
    /// Floating-point register read and written (0-3 F, 4-7 E).
    pub float_dst: Option<u8>,
    /// Depends on the rounding mode.
    pub rounding: bool,
    /// Sets the rounding mode (CFROUND).
    pub sets_rounding: bool,
    pub branch: bool,
    pub uses_exu: bool,
    pub uses_mem: bool,
}

/// The model's view of one decoded instruction.
pub fn classify(code: &Bytecode) -> Op {
    use Bytecode as B;
    let mut op = Op {
        uses_exu: true,
        ..Op::default()
    };
    let zero_reg = |r: u8| if r < 8 { Some(r) } else { None };
    match *code {
        B::IaddRs { dst, src, .. }
        | B::IsubR { dst, src }
        | B::ImulR { dst, src }
        | B::ImulhR { dst, src }
        | B::IsmulhR { dst, src }
        | B::IxorR { dst, src }
        | B::IrorR { dst, src }
        | B::IrolR { dst, src } => {
            op.int_reads = [Some(dst), Some(src)];
            op.int_writes[0] = Some(dst);
        }
        B::IsubI { dst, .. }
        | B::ImulI { dst, .. }
        | B::IxorI { dst, .. }
        | B::IrorI { dst, .. }
        | B::IrolI { dst, .. }
        | B::InegR { dst } => {
            op.int_reads[0] = Some(dst);
            op.int_writes[0] = Some(dst);
        }
        B::IaddM { dst, src, .. }
        | B::IsubM { dst, src, .. }
        | B::ImulM { dst, src, .. }
        | B::ImulhM { dst, src, .. }
        | B::IsmulhM { dst, src, .. }
        | B::IxorM { dst, src, .. } => {
            op.int_reads[0] = Some(dst);
            op.int_writes[0] = Some(dst);
            op.address = zero_reg(src);
            op.uses_mem = true;
        }
        B::IswapR { dst, src } => {
            op.int_reads = [Some(dst), Some(src)];
            op.int_writes = [Some(dst), Some(src)];
        }
        B::FswapR { reg } => op.float_dst = Some(reg),
        B::FaddR { dst, .. } | B::FsubR { dst, .. } => {
            op.float_dst = Some(dst);
            op.rounding = true;
        }
        B::FaddM { dst, src, .. } | B::FsubM { dst, src, .. } => {
            op.float_dst = Some(dst);
            op.rounding = true;
            op.address = Some(src);
            op.uses_mem = true;
        }
        B::FscalR { dst } => op.float_dst = Some(dst),
        B::FmulR { dst, .. } | B::FsqrtR { dst } => {
            op.float_dst = Some(4 + dst);
            op.rounding = true;
        }
        B::FdivM { dst, src, .. } => {
            op.float_dst = Some(4 + dst);
            op.rounding = true;
            op.address = Some(src);
            op.uses_mem = true;
        }
        B::Cbranch { dst, .. } => {
            op.int_reads[0] = Some(dst);
            op.int_writes[0] = Some(dst);
            op.branch = true;
        }
        B::Cfround { src, .. } => {
            op.int_reads[0] = Some(src);
            op.sets_rounding = true;
        }
        B::Istore { dst, .. } => {
            // The document's model: a store needs its address register in the memory stage.
            op.address = Some(dst);
            op.uses_exu = false;
            op.uses_mem = true;
        }
        B::Nop => op.uses_exu = false,
    }
    op
}

#[derive(Default)]
struct Ready {
    int: [u64; 8],
    float: [u64; 8],
    rounding: u64,
}

impl Ready {
    /// The first execute-stage cycle at which `op`'s operands are available.
    fn earliest(&self, op: &Op) -> u64 {
        let mut t = 0;
        for r in op.int_reads.iter().flatten() {
            t = t.max(self.int[*r as usize]);
        }
        if let Some(a) = op.address {
            // Needed one stage earlier, in the memory stage.
            t = t.max(self.int[a as usize] + 1);
        }
        if let Some(f) = op.float_dst {
            t = t.max(self.float[f as usize]);
        }
        if op.rounding {
            t = t.max(self.rounding);
        }
        t
    }

    fn retire(&mut self, op: &Op, t: u64) {
        for r in op.int_writes.iter().flatten() {
            self.int[*r as usize] = t + 1;
        }
        if let Some(f) = op.float_dst {
            self.float[f as usize] = t + 1;
        }
        if op.sets_rounding {
            self.rounding = t + 1;
        }
    }
}

fn misprediction_cycles(branches: usize, d: &Design) -> f64 {
    if d.speculative {
        branches as f64 * MISPREDICT * (PIPELINE - 1) as f64
    } else {
        0.0
    }
}

/// Cycles of one program pass on an in-order design.
pub fn in_order(ops: &[Op], d: &Design) -> f64 {
    let mut ready = Ready::default();
    let mut cycle = PIPELINE - 1;
    let mut i = 0;
    let mut branches = 0;
    while i < ops.len() {
        let (mut issued, mut mem_used, mut stall) = (0, 0, 0);
        while i < ops.len() && issued < d.exu {
            let op = &ops[i];
            if (op.uses_mem && mem_used >= d.mem) || ready.earliest(op) > cycle {
                break;
            }
            ready.retire(op, cycle);
            issued += 1;
            mem_used += op.uses_mem as usize;
            i += 1;
            if op.branch {
                branches += 1;
                if !d.speculative {
                    stall = PIPELINE - 1;
                    break;
                }
            }
        }
        cycle += 1 + stall;
    }
    cycle as f64 + misprediction_cycles(branches, d)
}

/// Cycles of one program pass on an out-of-order design.
pub fn out_of_order(ops: &[Op], d: &Design) -> f64 {
    let mut ready = Ready::default();
    let horizon = (PIPELINE as usize + 1) * (ops.len() + 2) + 8;
    let mut exu_busy = vec![0usize; horizon];
    let mut mem_busy = vec![0usize; horizon];
    let mut last_branch: Option<u64> = None;
    let mut branches = 0;
    let mut end = 0u64;
    for op in ops {
        let mut t = (PIPELINE - 1).max(ready.earliest(op));
        if !d.speculative {
            if let Some(b) = last_branch {
                // Fetched only after the branch has executed.
                t = t.max(b + PIPELINE);
            }
        }
        while (op.uses_exu && exu_busy[t as usize] >= d.exu)
            || (op.uses_mem && mem_busy[t as usize - 1] >= d.mem)
        {
            t += 1;
        }
        exu_busy[t as usize] += op.uses_exu as usize;
        mem_busy[t as usize - 1] += op.uses_mem as usize;
        ready.retire(op, t);
        end = end.max(t + 1);
        if op.branch {
            branches += 1;
            last_branch = Some(last_branch.map_or(t, |b| b.max(t)));
        }
    }
    end as f64 + misprediction_cycles(branches, d)
}

/// Cycles of one program pass on `d`.
pub fn simulate(ops: &[Op], d: &Design) -> f64 {
    if d.out_of_order {
        out_of_order(ops, d)
    } else {
        in_order(ops, d)
    }
}

/// The model's view of the program generated from `Hash512(nonce)`.
pub fn program_ops(nonce: u32) -> Vec<Op> {
    let p = generate_program(&hash512(&nonce.to_le_bytes()), Version::V1, Aes::detect());
    decode(&p).iter().map(classify).collect()
}

/// One design's result.
#[derive(Clone, Debug, Serialize)]
pub struct DesignResult {
    pub number: usize,
    pub design: Design,
    pub document_cycles: f64,
    pub document_ipc: f64,
    pub cycles: f64,
    pub ipc: f64,
}

/// Appendix B's table.
#[derive(Clone, Debug, Serialize)]
pub struct PipelineAnalysis {
    pub programs: usize,
    pub instructions_per_program: usize,
    pub branches_per_program: f64,
    pub designs: Vec<DesignResult>,
}

/// Simulates the 10 designs over `programs` generated programs (nonces 0..programs).
pub fn run(programs: usize) -> Result<PipelineAnalysis, Error> {
    crate::check_samples(programs, 1)?;
    let mut totals = [0.0f64; 10];
    let mut branches = 0usize;
    let size = Version::V1.program_size();
    for nonce in 0..programs as u32 {
        let ops = program_ops(nonce);
        branches += ops.iter().filter(|o| o.branch).count();
        for (i, (d, _, _)) in DOCUMENT.iter().enumerate() {
            totals[i] += simulate(&ops, d);
        }
    }
    let n = programs as f64;
    Ok(PipelineAnalysis {
        programs,
        instructions_per_program: size,
        branches_per_program: branches as f64 / n,
        designs: DOCUMENT
            .iter()
            .enumerate()
            .map(|(i, &(design, dc, di))| DesignResult {
                number: i + 1,
                design,
                document_cycles: dc,
                document_ipc: di,
                cycles: totals[i] / n,
                ipc: size as f64 * n / totals[i],
            })
            .collect(),
    })
}

fn describe(d: &Design) -> String {
    format!(
        "{} EXU + {} MEM, {}, {}",
        d.exu,
        d.mem,
        if d.out_of_order {
            "out-of-order"
        } else {
            "in-order"
        },
        if d.speculative {
            "speculative"
        } else {
            "non-speculative"
        }
    )
}

impl Analysis for PipelineAnalysis {
    fn figures(&self) -> Vec<Figure> {
        self.designs
            .iter()
            .map(|r| {
                Figure::new(
                    format!("#{} cycles", r.number),
                    "",
                    Some(r.document_cycles),
                    r.cycles,
                )
            })
            .collect()
    }

    fn to_text(&self) -> String {
        let mut s = format!(
            "## Appendix B: pipeline simulation ({} programs, {} instructions, {:.1} CBRANCH each)\n\n",
            self.programs, self.instructions_per_program, self.branches_per_program
        );
        s += "| design | configuration | document cycles | ours | difference | document IPC | ours |\n|---|---|---|---|---|---|---|\n";
        for r in &self.designs {
            let _ = writeln!(
                s,
                "| #{} | {} | {} | {:.1} | {:+.1}% | {} | {:.2} |",
                r.number,
                describe(&r.design),
                r.document_cycles,
                r.cycles,
                100.0 * (r.cycles / r.document_cycles - 1.0),
                r.document_ipc,
                r.ipc
            );
        }
        s + "\n" + &figures_table(&self.figures())
    }

    fn plot(&self, path: &Path) -> Result<(), Error> {
        let cats: Vec<_> = self
            .designs
            .iter()
            .map(|r| (format!("#{}", r.number), Some(r.document_cycles), r.cycles))
            .collect();
        crate::plot::document_vs_ours_bars(
            path,
            "Appendix B: cycles per program pass, 10 CPU designs",
            "cycles",
            &cats,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alu(dst: u8, src: u8) -> Op {
        classify(&Bytecode::IxorR { dst, src })
    }

    #[test]
    fn independent_instructions_fill_the_units() {
        let ops: Vec<Op> = (0..8).map(|i| alu(i, i)).collect();
        let one = Design {
            exu: 1,
            mem: 1,
            out_of_order: false,
            speculative: true,
        };
        // Pipeline fill (2) + one instruction per cycle.
        assert_eq!(in_order(&ops, &one), 10.0);
        let four = Design { exu: 4, ..one };
        assert_eq!(in_order(&ops, &four), 4.0);
        assert_eq!(out_of_order(&ops, &four), 4.0);
    }

    #[test]
    fn dependencies_and_branches_stall() {
        // A chain r0 <- r0 cannot use a second unit.
        let chain: Vec<Op> = (0..4).map(|_| alu(0, 1)).collect();
        let two = Design {
            exu: 2,
            mem: 1,
            out_of_order: true,
            speculative: true,
        };
        assert_eq!(out_of_order(&chain, &two), 6.0);
        // A non-speculative branch costs 2 more cycles than a speculative one (no mispredict
        // expectation beyond 2/256).
        let br = classify(&Bytecode::Cbranch {
            dst: 2,
            cimm: 1,
            cond_mask: 0xff,
            target: -1,
        });
        let prog = vec![alu(0, 1), br, alu(3, 4)];
        let spec = Design {
            exu: 1,
            mem: 1,
            out_of_order: false,
            speculative: true,
        };
        let non = Design {
            speculative: false,
            ..spec
        };
        assert_eq!(in_order(&prog, &non) - in_order(&prog, &spec).floor(), 2.0);
        // A memory operand waits one more cycle for its address register.
        let load = classify(&Bytecode::IaddM {
            dst: 3,
            src: 0,
            imm: 0,
            mask: 0x3ff8,
        });
        assert_eq!(in_order(&[alu(0, 1), load], &spec), 5.0);
    }

    #[test]
    fn small_sample_is_near_the_document() {
        let r = run(300).unwrap();
        for d in &r.designs {
            let rel = d.cycles / d.document_cycles - 1.0;
            if d.design.speculative {
                assert!(
                    rel.abs() < 0.1,
                    "design #{}: {} vs {}",
                    d.number,
                    d.cycles,
                    d.document_cycles
                );
            } else {
                // About 25 CBRANCH per program today against ~16 when the document's table was
                // made, and fetch stops at every unresolved branch: never faster, at most 50%
                // slower.
                assert!(
                    (-0.02..0.5).contains(&rel),
                    "design #{}: {} vs {}",
                    d.number,
                    d.cycles,
                    d.document_cycles
                );
            }
        }
        assert!((r.branches_per_program - 25.0).abs() < 1.5);
        // More resources never cost cycles.
        let c: Vec<f64> = r.designs.iter().map(|d| d.cycles).collect();
        assert!(c[1] <= c[0] && c[3] <= c[2] && c[5] <= c[4] && c[9] <= c[8] && c[9] <= c[7]);
        assert!(run(0).is_err());
    }
}
