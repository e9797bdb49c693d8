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
    // Index of the instruction that last modified each register (-1: none yet), for CBRANCH.
    let mut last_modified = [-1i32; 8];
    let mut out = Vec::with_capacity(program.instructions.len());
    for (pc, ins) in program.instructions.iter().enumerate() {
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
    out
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
