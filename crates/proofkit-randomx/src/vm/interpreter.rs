//! The portable interpreter of the RandomX VM (specs.md chapters 4.6 and 5). A program is first
//! decoded into [`Bytecode`] (operand forms resolved, memory masks, reciprocals and branch targets
//! precomputed), then run for `RANDOMX_PROGRAM_ITERATIONS` iterations.
#![deny(unsafe_code)]

use super::float;
use super::RegisterFile;
use crate::config::*;
use crate::program::{Instruction, Opcode, Program};
use crate::reciprocal::{is_zero_or_power_of_2, reciprocal};

/// Index of the always-zero pseudo-register used for `src = 0` memory forms.
const ZERO: u8 = 8;

/// One decoded instruction. Register operands are indices into `r[0..9]` (8 = constant zero),
/// `f`/`e` (0..3) or the combined F+E file (0..7).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bytecode {
    IaddRs {
        dst: u8,
        src: u8,
        shift: u8,
        imm: u64,
    },
    IaddM {
        dst: u8,
        src: u8,
        imm: u64,
        mask: u32,
    },
    IsubR {
        dst: u8,
        src: u8,
    },
    IsubI {
        dst: u8,
        imm: u64,
    },
    IsubM {
        dst: u8,
        src: u8,
        imm: u64,
        mask: u32,
    },
    ImulR {
        dst: u8,
        src: u8,
    },
    ImulI {
        dst: u8,
        imm: u64,
    },
    ImulM {
        dst: u8,
        src: u8,
        imm: u64,
        mask: u32,
    },
    ImulhR {
        dst: u8,
        src: u8,
    },
    ImulhM {
        dst: u8,
        src: u8,
        imm: u64,
        mask: u32,
    },
    IsmulhR {
        dst: u8,
        src: u8,
    },
    IsmulhM {
        dst: u8,
        src: u8,
        imm: u64,
        mask: u32,
    },
    InegR {
        dst: u8,
    },
    IxorR {
        dst: u8,
        src: u8,
    },
    IxorI {
        dst: u8,
        imm: u64,
    },
    IxorM {
        dst: u8,
        src: u8,
        imm: u64,
        mask: u32,
    },
    IrorR {
        dst: u8,
        src: u8,
    },
    IrorI {
        dst: u8,
        rot: u32,
    },
    IrolR {
        dst: u8,
        src: u8,
    },
    IrolI {
        dst: u8,
        rot: u32,
    },
    IswapR {
        dst: u8,
        src: u8,
    },
    FswapR {
        reg: u8,
    },
    FaddR {
        dst: u8,
        src: u8,
    },
    FaddM {
        dst: u8,
        src: u8,
        imm: u64,
        mask: u32,
    },
    FsubR {
        dst: u8,
        src: u8,
    },
    FsubM {
        dst: u8,
        src: u8,
        imm: u64,
        mask: u32,
    },
    FscalR {
        dst: u8,
    },
    FmulR {
        dst: u8,
        src: u8,
    },
    FdivM {
        dst: u8,
        src: u8,
        imm: u64,
        mask: u32,
    },
    FsqrtR {
        dst: u8,
    },
    Cbranch {
        dst: u8,
        cimm: u64,
        cond_mask: u64,
        target: i32,
    },
    Cfround {
        src: u8,
        rot: u32,
    },
    Istore {
        dst: u8,
        src: u8,
        imm: u64,
        mask: u32,
    },
    Nop,
}

fn read_mask(i: &Instruction) -> u32 {
    if i.mod_mem() == 0 {
        SCRATCHPAD_L2_MASK
    } else {
        SCRATCHPAD_L1_MASK
    }
}

/// Decodes a program into bytecode (the "compilation" step of the interpreter).
pub fn decode(program: &Program) -> Vec<Bytecode> {
    let mut out = Vec::with_capacity(program.instructions.len());
    decode_into(program.instructions.iter().copied(), &mut out);
    out
}

/// [`decode`] straight from the generator's instruction bytes (8 per instruction, after the
/// 128-byte entropy block) into a reused buffer: the VM's per-program path, with no allocation.
pub fn decode_bytes_into(instruction_bytes: &[u8], out: &mut Vec<Bytecode>) {
    out.clear();
    decode_into(
        instruction_bytes
            .chunks_exact(8)
            .map(|b| Instruction::from_bytes(b.try_into().expect("8 bytes"))),
        out,
    );
}

fn decode_into(instructions: impl Iterator<Item = Instruction>, out: &mut Vec<Bytecode>) {
    // Index of the instruction that last modified each register (-1: none yet), for CBRANCH.
    let mut last_modified = [-1i32; 8];
    for (pc, ins) in instructions.enumerate() {
        let ins = &ins;
        let dst = ins.dst % 8;
        let src = ins.src % 8;
        let simm = ins.simm();
        // Memory operand: `src + imm32` in L1/L2, or `imm32` in L3 when src == dst.
        let (msrc, mmask) = if src == dst {
            (ZERO, SCRATCHPAD_L3_MASK)
        } else {
            (src, read_mask(ins))
        };
        let bc = match ins.op() {
            Opcode::IADD_RS => Bytecode::IaddRs {
                dst,
                src,
                shift: ins.mod_shift(),
                imm: if dst == 5 { simm } else { 0 },
            },
            Opcode::IADD_M => Bytecode::IaddM {
                dst,
                src: msrc,
                imm: simm,
                mask: mmask,
            },
            Opcode::ISUB_R if src == dst => Bytecode::IsubI { dst, imm: simm },
            Opcode::ISUB_R => Bytecode::IsubR { dst, src },
            Opcode::ISUB_M => Bytecode::IsubM {
                dst,
                src: msrc,
                imm: simm,
                mask: mmask,
            },
            Opcode::IMUL_R if src == dst => Bytecode::ImulI { dst, imm: simm },
            Opcode::IMUL_R => Bytecode::ImulR { dst, src },
            Opcode::IMUL_M => Bytecode::ImulM {
                dst,
                src: msrc,
                imm: simm,
                mask: mmask,
            },
            Opcode::IMULH_R => Bytecode::ImulhR { dst, src },
            Opcode::IMULH_M => Bytecode::ImulhM {
                dst,
                src: msrc,
                imm: simm,
                mask: mmask,
            },
            Opcode::ISMULH_R => Bytecode::IsmulhR { dst, src },
            Opcode::ISMULH_M => Bytecode::IsmulhM {
                dst,
                src: msrc,
                imm: simm,
                mask: mmask,
            },
            Opcode::IMUL_RCP if is_zero_or_power_of_2(ins.imm32) => Bytecode::Nop,
            Opcode::IMUL_RCP => Bytecode::ImulI {
                dst,
                imm: reciprocal(ins.imm32),
            },
            Opcode::INEG_R => Bytecode::InegR { dst },
            Opcode::IXOR_R if src == dst => Bytecode::IxorI { dst, imm: simm },
            Opcode::IXOR_R => Bytecode::IxorR { dst, src },
            Opcode::IXOR_M => Bytecode::IxorM {
                dst,
                src: msrc,
                imm: simm,
                mask: mmask,
            },
            Opcode::IROR_R if src == dst => Bytecode::IrorI {
                dst,
                rot: ins.imm32 & 63,
            },
            Opcode::IROR_R => Bytecode::IrorR { dst, src },
            Opcode::IROL_R if src == dst => Bytecode::IrolI {
                dst,
                rot: ins.imm32 & 63,
            },
            Opcode::IROL_R => Bytecode::IrolR { dst, src },
            Opcode::ISWAP_R if src == dst => Bytecode::Nop,
            Opcode::ISWAP_R => Bytecode::IswapR { dst, src },
            Opcode::FSWAP_R => Bytecode::FswapR { reg: dst },
            Opcode::FADD_R => Bytecode::FaddR {
                dst: dst % 4,
                src: src % 4,
            },
            Opcode::FADD_M => Bytecode::FaddM {
                dst: dst % 4,
                src,
                imm: simm,
                mask: read_mask(ins),
            },
            Opcode::FSUB_R => Bytecode::FsubR {
                dst: dst % 4,
                src: src % 4,
            },
            Opcode::FSUB_M => Bytecode::FsubM {
                dst: dst % 4,
                src,
                imm: simm,
                mask: read_mask(ins),
            },
            Opcode::FSCAL_R => Bytecode::FscalR { dst: dst % 4 },
            Opcode::FMUL_R => Bytecode::FmulR {
                dst: dst % 4,
                src: src % 4,
            },
            Opcode::FDIV_M => Bytecode::FdivM {
                dst: dst % 4,
                src,
                imm: simm,
                mask: read_mask(ins),
            },
            Opcode::FSQRT_R => Bytecode::FsqrtR { dst: dst % 4 },
            Opcode::CBRANCH => {
                let b = ins.mod_cond() as u32 + JUMP_OFFSET;
                let mut cimm = simm | (1u64 << b);
                if b > 0 {
                    cimm &= !(1u64 << (b - 1));
                }
                let cond_mask = ((1u64 << JUMP_BITS) - 1) << b;
                Bytecode::Cbranch {
                    dst,
                    cimm,
                    cond_mask,
                    target: last_modified[dst as usize],
                }
            }
            Opcode::CFROUND => Bytecode::Cfround {
                src,
                rot: ins.imm32 & 63,
            },
            Opcode::ISTORE => {
                let mask = if ins.mod_cond() >= 14 {
                    SCRATCHPAD_L3_MASK
                } else {
                    read_mask(ins)
                };
                Bytecode::Istore {
                    dst,
                    src,
                    imm: simm,
                    mask,
                }
            }
        };
        // Register modification bookkeeping of 5.4.2.
        match bc {
            Bytecode::Cbranch { .. } => last_modified = [pc as i32; 8],
            Bytecode::IswapR { dst, src } => {
                last_modified[dst as usize] = pc as i32;
                last_modified[src as usize] = pc as i32;
            }
            Bytecode::Nop | Bytecode::Cfround { .. } | Bytecode::Istore { .. } => {}
            Bytecode::FswapR { .. }
            | Bytecode::FaddR { .. }
            | Bytecode::FaddM { .. }
            | Bytecode::FsubR { .. }
            | Bytecode::FsubM { .. }
            | Bytecode::FscalR { .. }
            | Bytecode::FmulR { .. }
            | Bytecode::FdivM { .. }
            | Bytecode::FsqrtR { .. } => {}
            _ => last_modified[dst as usize] = pc as i32,
        }
        out.push(bc);
    }
}

#[inline(always)]
fn load64(sp: &[u8], addr: u32) -> u64 {
    let a = addr as usize;
    u64::from_le_bytes(sp[a..a + 8].try_into().expect("8 bytes"))
}

#[inline(always)]
fn store64(sp: &mut [u8], addr: u32, v: u64) {
    let a = addr as usize;
    sp[a..a + 8].copy_from_slice(&v.to_le_bytes());
}

/// 4.3.1: two little-endian int32 -> two doubles.
#[inline(always)]
pub fn convert_f(v: u64) -> [f64; 2] {
    [(v as u32 as i32) as f64, ((v >> 32) as u32 as i32) as f64]
}

/// 4.3.2: group E conversion with the program's masks.
#[inline(always)]
pub fn convert_e(v: u64, e_mask: &[u64; 2]) -> [f64; 2] {
    const DYNAMIC_MANTISSA_MASK: u64 = (1 << 56) - 1;
    let [lo, hi] = convert_f(v);
    [
        f64::from_bits((lo.to_bits() & DYNAMIC_MANTISSA_MASK) | e_mask[0]),
        f64::from_bits((hi.to_bits() & DYNAMIC_MANTISSA_MASK) | e_mask[1]),
    ]
}

#[inline(always)]
fn addr(r: &[u64; 9], src: u8, imm: u64, mask: u32) -> u32 {
    (r[src as usize].wrapping_add(imm) as u32) & mask
}

/// Executes one pass over the program (step 4 of 4.6.2). `r` has the zero register at index 8.
#[inline]
pub fn execute(
    code: &[Bytecode],
    regs: &mut RegisterFile,
    r: &mut [u64; 9],
    fprc: &mut u32,
    sp: &mut [u8],
    e_mask: &[u64; 2],
    v2: bool,
) {
    let mut pc = 0usize;
    while pc < code.len() {
        match code[pc] {
            Bytecode::IaddRs {
                dst,
                src,
                shift,
                imm,
            } => {
                r[dst as usize] = r[dst as usize]
                    .wrapping_add(r[src as usize] << shift)
                    .wrapping_add(imm)
            }
            Bytecode::IaddM {
                dst,
                src,
                imm,
                mask,
            } => {
                r[dst as usize] = r[dst as usize].wrapping_add(load64(sp, addr(r, src, imm, mask)))
            }
            Bytecode::IsubR { dst, src } => {
                r[dst as usize] = r[dst as usize].wrapping_sub(r[src as usize])
            }
            Bytecode::IsubI { dst, imm } => r[dst as usize] = r[dst as usize].wrapping_sub(imm),
            Bytecode::IsubM {
                dst,
                src,
                imm,
                mask,
            } => {
                r[dst as usize] = r[dst as usize].wrapping_sub(load64(sp, addr(r, src, imm, mask)))
            }
            Bytecode::ImulR { dst, src } => {
                r[dst as usize] = r[dst as usize].wrapping_mul(r[src as usize])
            }
            Bytecode::ImulI { dst, imm } => r[dst as usize] = r[dst as usize].wrapping_mul(imm),
            Bytecode::ImulM {
                dst,
                src,
                imm,
                mask,
            } => {
                r[dst as usize] = r[dst as usize].wrapping_mul(load64(sp, addr(r, src, imm, mask)))
            }
            Bytecode::ImulhR { dst, src } => {
                r[dst as usize] = mulh(r[dst as usize], r[src as usize])
            }
            Bytecode::ImulhM {
                dst,
                src,
                imm,
                mask,
            } => r[dst as usize] = mulh(r[dst as usize], load64(sp, addr(r, src, imm, mask))),
            Bytecode::IsmulhR { dst, src } => {
                r[dst as usize] = smulh(r[dst as usize], r[src as usize])
            }
            Bytecode::IsmulhM {
                dst,
                src,
                imm,
                mask,
            } => r[dst as usize] = smulh(r[dst as usize], load64(sp, addr(r, src, imm, mask))),
            Bytecode::InegR { dst } => r[dst as usize] = r[dst as usize].wrapping_neg(),
            Bytecode::IxorR { dst, src } => r[dst as usize] ^= r[src as usize],
            Bytecode::IxorI { dst, imm } => r[dst as usize] ^= imm,
            Bytecode::IxorM {
                dst,
                src,
                imm,
                mask,
            } => r[dst as usize] ^= load64(sp, addr(r, src, imm, mask)),
            Bytecode::IrorR { dst, src } => {
                r[dst as usize] = r[dst as usize].rotate_right((r[src as usize] & 63) as u32)
            }
            Bytecode::IrorI { dst, rot } => r[dst as usize] = r[dst as usize].rotate_right(rot),
            Bytecode::IrolR { dst, src } => {
                r[dst as usize] = r[dst as usize].rotate_left((r[src as usize] & 63) as u32)
            }
            Bytecode::IrolI { dst, rot } => r[dst as usize] = r[dst as usize].rotate_left(rot),
            Bytecode::IswapR { dst, src } => r.swap(dst as usize, src as usize),
            Bytecode::FswapR { reg } => {
                let x = if reg < 4 {
                    &mut regs.f[reg as usize]
                } else {
                    &mut regs.e[reg as usize - 4]
                };
                x.swap(0, 1);
            }
            Bytecode::FaddR { dst, src } => {
                let (f, a) = (&mut regs.f[dst as usize], regs.a[src as usize]);
                f[0] = float::add(f[0], a[0], *fprc);
                f[1] = float::add(f[1], a[1], *fprc);
            }
            Bytecode::FaddM {
                dst,
                src,
                imm,
                mask,
            } => {
                let m = convert_f(load64(sp, addr(r, src, imm, mask)));
                let f = &mut regs.f[dst as usize];
                f[0] = float::add(f[0], m[0], *fprc);
                f[1] = float::add(f[1], m[1], *fprc);
            }
            Bytecode::FsubR { dst, src } => {
                let (f, a) = (&mut regs.f[dst as usize], regs.a[src as usize]);
                f[0] = float::sub(f[0], a[0], *fprc);
                f[1] = float::sub(f[1], a[1], *fprc);
            }
            Bytecode::FsubM {
                dst,
                src,
                imm,
                mask,
            } => {
                let m = convert_f(load64(sp, addr(r, src, imm, mask)));
                let f = &mut regs.f[dst as usize];
                f[0] = float::sub(f[0], m[0], *fprc);
                f[1] = float::sub(f[1], m[1], *fprc);
            }
            Bytecode::FscalR { dst } => {
                const SCALE_MASK: u64 = 0x80F0_0000_0000_0000;
                let f = &mut regs.f[dst as usize];
                f[0] = f64::from_bits(f[0].to_bits() ^ SCALE_MASK);
                f[1] = f64::from_bits(f[1].to_bits() ^ SCALE_MASK);
            }
            Bytecode::FmulR { dst, src } => {
                let (e, a) = (&mut regs.e[dst as usize], regs.a[src as usize]);
                e[0] = float::mul(e[0], a[0], *fprc);
                e[1] = float::mul(e[1], a[1], *fprc);
            }
            Bytecode::FdivM {
                dst,
                src,
                imm,
                mask,
            } => {
                let m = convert_e(load64(sp, addr(r, src, imm, mask)), e_mask);
                let e = &mut regs.e[dst as usize];
                e[0] = float::div(e[0], m[0], *fprc);
                e[1] = float::div(e[1], m[1], *fprc);
            }
            Bytecode::FsqrtR { dst } => {
                let e = &mut regs.e[dst as usize];
                e[0] = float::sqrt(e[0], *fprc);
                e[1] = float::sqrt(e[1], *fprc);
            }
            Bytecode::Cbranch {
                dst,
                cimm,
                cond_mask,
                target,
            } => {
                r[dst as usize] = r[dst as usize].wrapping_add(cimm);
                if r[dst as usize] & cond_mask == 0 {
                    // Jump to the instruction after the last modification of dst.
                    pc = (target + 1) as usize;
                    continue;
                }
            }
            Bytecode::Cfround { src, rot } => {
                let v = r[src as usize].rotate_right(rot);
                if !v2 || v & 60 == 0 {
                    *fprc = (v & 3) as u32;
                }
            }
            Bytecode::Istore {
                dst,
                src,
                imm,
                mask,
            } => {
                let a = addr(r, dst, imm, mask);
                store64(sp, a, r[src as usize]);
            }
            Bytecode::Nop => {}
        }
        pc += 1;
    }
}

#[inline(always)]
fn mulh(a: u64, b: u64) -> u64 {
    ((a as u128 * b as u128) >> 64) as u64
}

#[inline(always)]
fn smulh(a: u64, b: u64) -> u64 {
    ((a as i64 as i128 * b as i64 as i128) >> 64) as u64
}

#[cfg(test)]
mod tests {
    //! One test per instruction: a program of a single instruction word (plus setup) is decoded
    //! and executed, and the result compared with the operation written out from specs.md 5.
    use super::*;
    use crate::program::{Instruction, Opcode, DECODE};

    fn opcode_of(op: Opcode) -> u8 {
        DECODE.iter().position(|&o| o == op).unwrap() as u8
    }

    fn word(op: Opcode, dst: u8, src: u8, modifier: u8, imm: u32) -> Instruction {
        Instruction {
            opcode: opcode_of(op),
            dst,
            src,
            modifier,
            imm32: imm,
        }
    }

    struct Machine {
        regs: RegisterFile,
        r: [u64; 9],
        fprc: u32,
        sp: Vec<u8>,
        e_mask: [u64; 2],
    }

    impl Machine {
        fn new() -> Self {
            let mut m = Machine {
                regs: RegisterFile::default(),
                r: [0; 9],
                fprc: 0,
                sp: vec![0; SCRATCHPAD_L3],
                e_mask: [0x3F30_0000_0000_0000, 0x3F40_0000_0000_0000],
            };
            for i in 0..8 {
                m.r[i] = 0x0123_4567_89AB_CDEFu64.wrapping_mul(i as u64 + 3) ^ (i as u64) << 60;
            }
            for (i, b) in m.sp.iter_mut().enumerate() {
                *b = (i.wrapping_mul(2654435761) >> 7) as u8;
            }
            for i in 0..4 {
                m.regs.f[i] = [1000.5 + i as f64, -2000.25 - i as f64];
                m.regs.e[i] = [3.0 + i as f64, 1.0 / (7.0 + i as f64)];
                m.regs.a[i] = [1.5 + i as f64, 17.125 + i as f64];
            }
            m
        }
        fn run(&mut self, words: &[Instruction], v2: bool) {
            let p = Program {
                entropy: [0; 16],
                instructions: words.to_vec(),
            };
            let code = decode(&p);
            execute(
                &code,
                &mut self.regs,
                &mut self.r,
                &mut self.fprc,
                &mut self.sp,
                &self.e_mask,
                v2,
            );
        }
        fn mem(&self, addr: u64) -> u64 {
            let a = addr as usize;
            u64::from_le_bytes(self.sp[a..a + 8].try_into().unwrap())
        }
    }

    const IMM: u32 = 0xFFFF_FF85; // -123
    const SIMM: u64 = -123i64 as u64;

    fn l1(r: u64, imm: u64) -> u64 {
        (r.wrapping_add(imm) as u32 & SCRATCHPAD_L1_MASK) as u64
    }
    fn l2(r: u64, imm: u64) -> u64 {
        (r.wrapping_add(imm) as u32 & SCRATCHPAD_L2_MASK) as u64
    }
    fn l3(imm: u64) -> u64 {
        (imm as u32 & SCRATCHPAD_L3_MASK) as u64
    }

    #[test]
    fn iadd_rs() {
        let mut m = Machine::new();
        let (d, s) = (m.r[1], m.r[2]);
        m.run(&[word(Opcode::IADD_RS, 1, 2, 0b1000, IMM)], false);
        assert_eq!(m.r[1], d.wrapping_add(s << 2), "imm only added for r5");
        let mut m = Machine::new();
        let (d, s) = (m.r[5], m.r[2]);
        m.run(&[word(Opcode::IADD_RS, 5, 2, 0b0100, IMM)], false);
        assert_eq!(m.r[5], d.wrapping_add(s << 1).wrapping_add(SIMM));
    }

    #[test]
    fn integer_memory_forms() {
        for (op, f) in [
            (
                Opcode::IADD_M,
                (|a: u64, b: u64| a.wrapping_add(b)) as fn(u64, u64) -> u64,
            ),
            (Opcode::ISUB_M, |a, b| a.wrapping_sub(b)),
            (Opcode::IMUL_M, |a, b| a.wrapping_mul(b)),
            (Opcode::IMULH_M, |a, b| {
                ((a as u128 * b as u128) >> 64) as u64
            }),
            (Opcode::ISMULH_M, |a, b| {
                ((a as i64 as i128 * b as i64 as i128) >> 64) as u64
            }),
            (Opcode::IXOR_M, |a, b| a ^ b),
        ] {
            // mod.mem != 0: L1; == 0: L2; src == dst: L3 at imm32.
            for (modifier, src, expect_addr) in [(1u8, 2u8, 0u8), (0, 2, 1), (1, 3, 2)] {
                let mut m = Machine::new();
                let d = m.r[3];
                let addr = match expect_addr {
                    0 => l1(m.r[2], SIMM),
                    1 => l2(m.r[2], SIMM),
                    _ => l3(SIMM),
                };
                let v = m.mem(addr);
                m.run(&[word(op, 3, src, modifier, IMM)], false);
                assert_eq!(m.r[3], f(d, v), "{op:?} mod {modifier} src {src}");
            }
        }
    }

    #[test]
    fn integer_register_forms() {
        type F = fn(u64, u64) -> u64;
        for (op, f, with_imm) in [
            (
                Opcode::ISUB_R,
                (|a: u64, b: u64| a.wrapping_sub(b)) as F,
                true,
            ),
            (Opcode::IMUL_R, |a, b| a.wrapping_mul(b), true),
            (Opcode::IXOR_R, |a, b| a ^ b, true),
            (Opcode::IROR_R, |a, b| a.rotate_right((b & 63) as u32), true),
            (Opcode::IROL_R, |a, b| a.rotate_left((b & 63) as u32), true),
            (
                Opcode::IMULH_R,
                |a, b| ((a as u128 * b as u128) >> 64) as u64,
                false,
            ),
            (
                Opcode::ISMULH_R,
                |a, b| ((a as i64 as i128 * b as i64 as i128) >> 64) as u64,
                false,
            ),
        ] {
            let mut m = Machine::new();
            let (d, s) = (m.r[6], m.r[0]);
            m.run(&[word(op, 6, 0, 0, IMM)], false);
            assert_eq!(m.r[6], f(d, s), "{op:?} register");
            // src == dst: imm32 (sign-extended; rotations mask it to 6 bits) or squaring.
            let mut m = Machine::new();
            let d = m.r[6];
            m.run(&[word(op, 6, 6, 0, IMM)], false);
            assert_eq!(
                m.r[6],
                f(d, if with_imm { SIMM } else { d }),
                "{op:?} src == dst"
            );
        }
    }

    #[test]
    fn imul_rcp_ineg_iswap() {
        let mut m = Machine::new();
        let d = m.r[4];
        m.run(&[word(Opcode::IMUL_RCP, 4, 0, 0, 12345)], false);
        assert_eq!(m.r[4], d.wrapping_mul(crate::reciprocal::reciprocal(12345)));
        for imm in [0u32, 1, 1 << 20] {
            let mut m = Machine::new();
            let d = m.r[4];
            m.run(&[word(Opcode::IMUL_RCP, 4, 0, 0, imm)], false);
            assert_eq!(m.r[4], d, "IMUL_RCP by 0 or a power of two is a no-op");
        }
        let mut m = Machine::new();
        let d = m.r[7];
        m.run(&[word(Opcode::INEG_R, 7, 0, 0, 0)], false);
        assert_eq!(m.r[7], d.wrapping_neg());
        let mut m = Machine::new();
        let (a, b) = (m.r[1], m.r[2]);
        m.run(&[word(Opcode::ISWAP_R, 1, 2, 0, 0)], false);
        assert_eq!((m.r[1], m.r[2]), (b, a));
    }

    #[test]
    fn float_register_forms() {
        let mut m = Machine::new();
        let (f, a) = (m.regs.f[1], m.regs.a[2]);
        m.run(&[word(Opcode::FADD_R, 1, 2, 0, 0)], false);
        assert_eq!(m.regs.f[1], [f[0] + a[0], f[1] + a[1]]);
        m.run(&[word(Opcode::FSUB_R, 5, 6, 0, 0)], false); // dst 5 % 4 = f1, src 6 % 4 = a2
        assert_eq!(m.regs.f[1], [f[0] + a[0] - a[0], f[1] + a[1] - a[1]]);
        let mut m = Machine::new();
        let f = m.regs.f[3];
        m.run(&[word(Opcode::FSCAL_R, 3, 0, 0, 0)], false);
        assert_eq!(
            m.regs.f[3][0].to_bits(),
            f[0].to_bits() ^ 0x80F0_0000_0000_0000
        );
        let mut m = Machine::new();
        let (e, a) = (m.regs.e[0], m.regs.a[1]);
        m.run(&[word(Opcode::FMUL_R, 0, 1, 0, 0)], false);
        assert_eq!(m.regs.e[0], [e[0] * a[0], e[1] * a[1]]);
        let mut m = Machine::new();
        let e = m.regs.e[2];
        m.run(&[word(Opcode::FSQRT_R, 2, 0, 0, 0)], false);
        assert_eq!(m.regs.e[2], [e[0].sqrt(), e[1].sqrt()]);
        // FSWAP_R: dst 0-3 are f0-f3, 4-7 are e0-e3.
        let mut m = Machine::new();
        let (f, e) = (m.regs.f[2], m.regs.e[1]);
        m.run(
            &[
                word(Opcode::FSWAP_R, 2, 0, 0, 0),
                word(Opcode::FSWAP_R, 5, 0, 0, 0),
            ],
            false,
        );
        assert_eq!(m.regs.f[2], [f[1], f[0]]);
        assert_eq!(m.regs.e[1], [e[1], e[0]]);
    }

    #[test]
    fn float_memory_forms() {
        let mut m = Machine::new();
        let f = m.regs.f[0];
        let v = m.mem(l1(m.r[3], SIMM));
        let c = convert_f(v);
        m.run(&[word(Opcode::FADD_M, 0, 3, 1, IMM)], false);
        assert_eq!(m.regs.f[0], [f[0] + c[0], f[1] + c[1]]);
        let mut m = Machine::new();
        let f = m.regs.f[0];
        let v = m.mem(l2(m.r[3], SIMM));
        let c = convert_f(v);
        m.run(&[word(Opcode::FSUB_M, 0, 3, 0, IMM)], false);
        assert_eq!(m.regs.f[0], [f[0] - c[0], f[1] - c[1]]);
        let mut m = Machine::new();
        let e = m.regs.e[3];
        let v = m.mem(l1(m.r[1], SIMM));
        let c = convert_e(v, &m.e_mask);
        assert!(c[0] > 0.0 && c[1] > 0.0, "E operands are positive");
        m.run(&[word(Opcode::FDIV_M, 3, 1, 2, IMM)], false);
        assert_eq!(m.regs.e[3], [e[0] / c[0], e[1] / c[1]]);
    }

    #[test]
    fn cfround_v1_and_v2() {
        let mut m = Machine::new();
        m.r[2] = 0b10 << 5; // rotated right by 5: 0b10 -> round toward positive
        m.run(&[word(Opcode::CFROUND, 0, 2, 0, 5)], false);
        assert_eq!(m.fprc, 2);
        // v2: only when bits 2-5 of the rotated value are zero.
        let mut m = Machine::new();
        m.r[2] = (0b0100_11u64) << 5;
        m.run(&[word(Opcode::CFROUND, 0, 2, 0, 5)], true);
        assert_eq!(m.fprc, 0, "bits 2-5 set: v2 keeps the mode");
        m.r[2] = (0b11u64) << 5;
        m.run(&[word(Opcode::CFROUND, 0, 2, 0, 5)], true);
        assert_eq!(m.fprc, 3);
        // The mode applies to the following operations: 0.1 * 3 is inexact, so rounding down
        // and up give neighbouring doubles.
        let product = |mode: u64| {
            let mut m = Machine::new();
            m.regs.e[0] = [0.1, 0.1];
            m.regs.a[0] = [3.0, 3.0];
            m.r[1] = mode;
            m.run(
                &[
                    word(Opcode::CFROUND, 0, 1, 0, 0),
                    word(Opcode::FMUL_R, 0, 0, 0, 0),
                ],
                false,
            );
            assert_eq!(m.fprc as u64, mode);
            m.regs.e[0][0]
        };
        assert_eq!(product(2), product(1).next_up());
        assert_eq!(product(3), product(1));
        assert!(product(0) == product(1) || product(0) == product(2));
    }

    #[test]
    fn istore_levels() {
        for (modifier, level) in [(0x01u8, 1), (0x00, 2), (0xE0, 3), (0xF1, 3)] {
            let mut m = Machine::new();
            let v = m.r[4];
            let addr = match level {
                1 => l1(m.r[6], SIMM),
                2 => l2(m.r[6], SIMM),
                _ => (m.r[6].wrapping_add(SIMM) as u32 & SCRATCHPAD_L3_MASK) as u64,
            };
            m.run(&[word(Opcode::ISTORE, 6, 4, modifier, IMM)], false);
            assert_eq!(m.mem(addr), v, "mod {modifier:#x}");
        }
    }

    #[test]
    fn cbranch_jumps_after_last_modification() {
        // pc 0: r1 += r0 (= 1); pc 1: CBRANCH r1 with mod.cond 0, so b = 8 and cimm = 0x100.
        // From r1 = 0xFF00: 0xFF01 + 0x100 = 0x10001 has bits 8-15 clear -> jump to pc 1 (the
        // instruction after r1's last modification) -> 0x10101, bits 8-15 = 1 -> fall through.
        let mut m = Machine::new();
        m.r[0] = 1;
        m.r[1] = 0xFF00;
        m.run(
            &[
                word(Opcode::IADD_RS, 1, 0, 0, 0),
                word(Opcode::CBRANCH, 1, 0, 0, 0),
            ],
            false,
        );
        assert_eq!(m.r[1], 0x10101);
        // A register never modified in the program jumps to the start.
        // r3 = -0x100: + 0x100 = 0 -> jump to pc 0; the second pass adds 0x100 -> no jump.
        let mut m = Machine::new();
        m.r[3] = 0u64.wrapping_sub(0x100);
        m.r[0] = 5;
        m.r[2] = 0;
        m.run(
            &[
                word(Opcode::IADD_RS, 2, 0, 0, 0),
                word(Opcode::CBRANCH, 3, 0, 0, 0),
            ],
            false,
        );
        assert_eq!(m.r[2], 10, "IADD_RS ran twice: the jump went to pc 0");
        assert_eq!(m.r[3], 0x100);
    }
}
