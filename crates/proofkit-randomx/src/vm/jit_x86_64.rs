//! The x86-64 JIT for RandomX programs (specs.md 4.6.2 and chapter 5): one machine-code function
//! per program that runs all `RANDOMX_PROGRAM_ITERATIONS` loop iterations, compiled from the
//! interpreter's [`Bytecode`] (operand forms, masks, reciprocals and branch targets are resolved
//! once, in one place).
//!
//! Register roles:
//!
//! | RandomX | x86-64 |
//! |---|---|
//! | r0-r7 | r8-r15 |
//! | f0-f3, e0-e3, a0-a3 | xmm0-3, xmm4-7, xmm8-11 |
//! | temporary | rax, rcx, rdx, xmm12 |
//! | E-mask AND / OR, FSCAL mask | xmm13, xmm14, xmm15 |
//! | scratchpad base | rsi |
//! | dataset base + datasetOffset (fast mode) | rdi |
//! | `ma` (low 32 bits), `mx` (high 32 bits) | rbp |
//! | loop counter `ic` | rbx |
//!
//! Stack frame (after pushing rbx, rbp, r12-r15), see the `FRAME_*` constants: MXCSR scratch,
//! the first iteration's spAddr, the state pointer, the two scratchpad line pointers of the
//! current iteration, and in light mode a 64-byte item buffer plus save areas for the caller-saved
//! registers around the item callback.
//!
//! Rounding ([`Rounding`]): the function saves the caller's MXCSR and restores it on return
//! (vector `rounding_rule`). In between, either
//! - `Mxcsr` (the reference's way): MXCSR is set from `fprc` and CFROUND writes it. Zen 4
//!   serializes on a changed MXCSR: measured 4-7% of the loop's time (`CFROUND` emitted as
//!   nothing, paired runs on the zero dataset), or
//! - `Embedded`: MXCSR stays at round-to-nearest and the loop is emitted four times, copy `m`
//!   rounding every FP operation statically to mode `m` (AVX-512 embedded rounding, EVEX
//!   `{rn,rd,ru,rz}-sae`, which needs the 512-bit form: the upper lanes compute on zeros and are
//!   never read). CFROUND jumps to the same place in the copy of its new mode; CBRANCH and the
//!   loop branch stay inside their copy. Copies 1-3 are byte copies of copy 0 with the rounding
//!   bits and the cross-copy displacements patched, so compiling costs one emission.
#![allow(unsafe_code)]

use super::interpreter::Bytecode;
use crate::config::*;
use crate::jit::asm::{self, Mem, Sink, RAX, RBP, RBX, RCX, RDI, RDX, RSI, RSP};
use crate::jit::evex;
use crate::jit::JitError;
use proofkit_core::memory::{LargeBuffer, PageKind, PagePolicy};
use std::mem::offset_of;

/// Everything the compiled loop reads and writes, shared with Rust.
#[repr(C, align(64))]
#[derive(Clone, Debug)]
pub struct JitState {
    pub r: [u64; 8],
    pub f: [[f64; 2]; 4],
    pub e: [[f64; 2]; 4],
    pub a: [[f64; 2]; 4],
    pub mantissa_mask: [u64; 2],
    pub e_mask: [u64; 2],
    pub scale_mask: [u64; 2],
    pub scratchpad: *mut u8,
    /// Fast mode: dataset base plus datasetOffset.
    pub dataset: *const u8,
    /// `ma` in the low and `mx` in the high 32 bits.
    pub mem: u64,
    /// spAddr0 (low) and spAddr1 (high) at the start of the first iteration.
    pub sp_addr: u64,
    pub iterations: u64,
    pub fprc: u32,
    pub saved_mxcsr: u32,
    /// Light mode: `item_fn(item_ctx, masked_address, out)` XORs nothing, it writes the 64-byte
    /// item for dataset byte address `datasetOffset + masked_address`.
    pub item_ctx: *const std::ffi::c_void,
    pub item_fn: Option<ItemFn>,
}

// SAFETY: the raw pointers are set by `execute` for the duration of one call and cleared after
// it (dataset: a pointer into an Arc-held dataset the VM keeps alive); a JitState moved to
// another thread carries no live borrow.
unsafe impl Send for JitState {}

/// The light-mode dataset item callback.
pub type ItemFn = unsafe extern "sysv64" fn(*const std::ffi::c_void, u64, *mut u64, u64);

impl Default for JitState {
    fn default() -> Self {
        JitState {
            r: [0; 8],
            f: [[0.0; 2]; 4],
            e: [[0.0; 2]; 4],
            a: [[0.0; 2]; 4],
            mantissa_mask: [(1 << 56) - 1; 2],
            e_mask: [0; 2],
            scale_mask: [0x80F0_0000_0000_0000; 2],
            scratchpad: std::ptr::null_mut(),
            dataset: std::ptr::null(),
            mem: 0,
            sp_addr: 0,
            iterations: PROGRAM_ITERATIONS as u64,
            fprc: 0,
            saved_mxcsr: 0,
            item_ctx: std::ptr::null(),
            item_fn: None,
        }
    }
}

const FRAME_MXCSR: i32 = 0;
const FRAME_SP_CARRY: i32 = 8;
const FRAME_STATE: i32 = 16;
const FRAME_SP0: i32 = 24;
const FRAME_SP1: i32 = 32;
/// `Embedded`: the rounding mode of the copy that left the loop.
const FRAME_MODE: i32 = 40;
const FRAME_ITEM: i32 = 48;
const FRAME_XMM: i32 = 112;
const FRAME_GPR: i32 = 240;
/// MXCSR values of the four rounding modes (all exceptions masked), indexed by 4 * mode.
const FRAME_MXCSR_TABLE: i32 = 280;
/// Frame size: 8 mod 16, so that rsp is 16-byte aligned after the six pushes.
const FRAME_SIZE: i32 = 0x128;
const CALLEE_SAVED: [u8; 6] = [RBX, RBP, 12, 13, 14, 15];

/// Which dataset the loop reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JitMode {
    Fast,
    Light,
}

pub use super::JitRounding as Rounding;

impl Rounding {
    /// The strategy `self` stands for on this CPU (never `Auto`). Called for every program
    /// compiled: `Auto`'s choice (an environment lookup and, in a VM, a trapping CPUID) is made
    /// once per process.
    pub fn resolve(self) -> Rounding {
        static AUTO: std::sync::OnceLock<Rounding> = std::sync::OnceLock::new();
        let avx512 = proofkit_core::cpu::features().avx512f;
        match self {
            Rounding::Embedded if avx512 => Rounding::Embedded,
            Rounding::Embedded | Rounding::Mxcsr => Rounding::Mxcsr,
            Rounding::Auto => {
                *AUTO.get_or_init(|| match std::env::var("PROOFKIT_JIT_ROUNDING").as_deref() {
                    Ok("mxcsr") => Rounding::Mxcsr,
                    Ok("embedded") => Rounding::Embedded.resolve(),
                    _ if avx512 && cpu_is_amd() => Rounding::Embedded,
                    _ => Rounding::Mxcsr,
                })
            }
        }
    }
}

fn cpu_is_amd() -> bool {
    let v = std::arch::x86_64::__cpuid(0);
    let mut vendor = [0u8; 12];
    vendor[..4].copy_from_slice(&v.ebx.to_le_bytes());
    vendor[4..8].copy_from_slice(&v.edx.to_le_bytes());
    vendor[8..].copy_from_slice(&v.ecx.to_le_bytes());
    &vendor == b"AuthenticAMD"
}

fn r(i: u8) -> u8 {
    8 + i
}
const XTMP: u8 = 12;
const XMANT: u8 = 13;
const XEMASK: u8 = 14;
const XSCALE: u8 = 15;

fn state_off(field: usize) -> i32 {
    field as i32
}

/// Machine code being assembled. With embedded rounding it also records what differs between
/// the four copies of the loop: the EVEX byte holding each FP operation's rounding mode and the
/// displacements that point from a copy into copy 0.
struct Assembler {
    code: Vec<u8>,
    embedded: bool,
    rounding_bytes: Vec<usize>,
    to_copy0: Vec<usize>,
    quarter_copy_size_imms: Vec<usize>,
}

impl Assembler {
    fn scratch(embedded: bool) -> Self {
        Assembler {
            code: Vec::new(),
            embedded,
            rounding_bytes: Vec::new(),
            to_copy0: Vec::new(),
            quarter_copy_size_imms: Vec::new(),
        }
    }

    /// Appends `other`, emitted on its own, with its recorded positions moved along.
    fn append(&mut self, other: Assembler) {
        let base = self.code.len();
        self.code.extend_from_slice(&other.code);
        self.rounding_bytes
            .extend(other.rounding_bytes.iter().map(|p| p + base));
        self.to_copy0
            .extend(other.to_copy0.iter().map(|p| p + base));
        self.quarter_copy_size_imms
            .extend(other.quarter_copy_size_imms.iter().map(|p| p + base));
    }
}

impl Sink for Assembler {
    fn put(&mut self, bytes: &[u8]) {
        self.code.extend_from_slice(bytes);
    }
}

/// Scratchpad operand of a memory-form instruction: `[rsi + rax]` after computing the masked
/// address into `addr_reg`, or `[rsi + imm]` for the L3-immediate form (src == dst).
fn scratchpad_operand(a: &mut Assembler, src: u8, imm: u64, mask: u32, addr_reg: u8) -> Mem {
    if src == 8 {
        Mem::base(RSI, (imm as u32 & mask) as i32)
    } else {
        asm::lea_r32_disp32(a, addr_reg, r(src), imm as u32 as i32);
        asm::and_r32_imm(a, addr_reg, mask);
        Mem::indexed(RSI, addr_reg, 0)
    }
}

/// `dst = dst op src` (`sqrtpd dst, src` for SQRTPD) on packed doubles, rounded by MXCSR or, with
/// embedded rounding, statically to mode 0 (patched per copy).
fn fp_op(a: &mut Assembler, op: u8, dst: u8, src: u8) {
    if a.embedded {
        a.rounding_bytes.push(a.code.len() + 3);
        let src1 = if op == asm::SQRTPD { 0 } else { dst };
        evex::rrr_rounded(a, op, dst, src1, src, 0);
    } else {
        asm::sse_rr(a, Some(0x66), op, dst, src);
    }
}

/// Embedded rounding: jumps to the point right after this sequence in the copy of mode `eax / 4`
/// (eax in {0, 4, 8, 12}). The multiplier (a quarter of the copy size) is filled in once copy 0
/// is complete; inside a copy, the `lea` displacement is moved back to copy 0.
fn jump_to_mode_copy(a: &mut Assembler) {
    asm::imul_rri(a, RAX, RAX, 0);
    a.quarter_copy_size_imms.push(a.code.len() - 4);
    a.put(&[0x48, 0x8D, 0x0D]); // lea rcx, [rip + 5]: the end of this sequence
    a.to_copy0.push(a.code.len());
    a.put(&5i32.to_le_bytes());
    a.put(&[0x48, 0x01, 0xC1, 0xFF, 0xE1]); // add rcx, rax; jmp rcx
}

/// Steps 1 and 12 of 4.6.2: spAddr0 (eax) and spAddr1 (edx) from readReg0 ^ readReg1. Before
/// the loop (`first`), mixed with the program's initial spAddr from the frame; at the end of an
/// iteration, with each line prefetched as soon as its address is known.
fn scratchpad_addresses(a: &mut Assembler, read_reg: [u8; 4], first: bool) {
    asm::mov_rr(a, RAX, r(read_reg[0]));
    asm::xor_rr(a, RAX, r(read_reg[1]));
    if first {
        asm::op_rm(a, 0x33, RAX, &Mem::base(RSP, FRAME_SP_CARRY));
    }
    asm::mov_rr(a, RDX, RAX);
    asm::and_r32_imm(a, RAX, SCRATCHPAD_L3_MASK64);
    if !first {
        asm::prefetcht0(a, &Mem::indexed(RSI, RAX, 0));
    }
    asm::shift_imm(a, 5, RDX, 32);
    asm::and_r32_imm(a, RDX, SCRATCHPAD_L3_MASK64);
    if !first {
        asm::prefetcht0(a, &Mem::indexed(RSI, RDX, 0));
    }
}

fn emit_instruction(
    a: &mut Assembler,
    bc: &Bytecode,
    starts: &[usize],
    body_start: usize,
    v2: bool,
) {
    match *bc {
        Bytecode::IaddRs {
            dst,
            src,
            shift,
            imm,
        } => {
            if dst == 5 || imm != 0 {
                asm::lea_sib_disp32(a, r(dst), r(dst), r(src), shift, imm as i32);
            } else {
                asm::lea_sib(a, r(dst), r(dst), r(src), shift);
            }
        }
        Bytecode::IaddM {
            dst,
            src,
            imm,
            mask,
        }
        | Bytecode::IsubM {
            dst,
            src,
            imm,
            mask,
        }
        | Bytecode::IxorM {
            dst,
            src,
            imm,
            mask,
        } => {
            // add / sub / xor r64, [scratchpad]
            let opcode = match bc {
                Bytecode::IaddM { .. } => 0x03,
                Bytecode::IsubM { .. } => 0x2B,
                _ => 0x33,
            };
            let m = scratchpad_operand(a, src, imm, mask, RAX);
            asm::op_rm(a, opcode, r(dst), &m);
        }
        Bytecode::IsubR { dst, src } => asm::sub_rr(a, r(dst), r(src)),
        Bytecode::IsubI { dst, imm } => asm::group1_ri(a, 5, r(dst), imm as i32),
        Bytecode::ImulR { dst, src } => asm::imul_rr(a, r(dst), r(src)),
        Bytecode::ImulI { dst, imm } => {
            if imm as i64 == imm as i32 as i64 {
                asm::imul_rri(a, r(dst), r(dst), imm as i32);
            } else {
                asm::mov_ri64(a, RAX, imm);
                asm::imul_rr(a, r(dst), RAX);
            }
        }
        Bytecode::ImulM {
            dst,
            src,
            imm,
            mask,
        } => {
            let m = scratchpad_operand(a, src, imm, mask, RAX);
            asm::imul_rm(a, r(dst), &m);
        }
        Bytecode::ImulhR { dst, src } | Bytecode::IsmulhR { dst, src } => {
            asm::mov_rr(a, RAX, r(dst));
            asm::group3_r(
                a,
                if matches!(bc, Bytecode::ImulhR { .. }) {
                    4
                } else {
                    5
                },
                r(src),
            );
            asm::mov_rr(a, r(dst), RDX);
        }
        Bytecode::ImulhM {
            dst,
            src,
            imm,
            mask,
        }
        | Bytecode::IsmulhM {
            dst,
            src,
            imm,
            mask,
        } => {
            let m = scratchpad_operand(a, src, imm, mask, RCX);
            asm::mov_rr(a, RAX, r(dst));
            asm::group3_m(
                a,
                if matches!(bc, Bytecode::ImulhM { .. }) {
                    4
                } else {
                    5
                },
                &m,
            );
            asm::mov_rr(a, r(dst), RDX);
        }
        Bytecode::InegR { dst } => asm::group3_r(a, 3, r(dst)),
        Bytecode::IxorR { dst, src } => asm::xor_rr(a, r(dst), r(src)),
        Bytecode::IxorI { dst, imm } => asm::group1_ri(a, 6, r(dst), imm as i32),
        Bytecode::IrorR { dst, src } => {
            asm::mov_r32(a, RCX, r(src));
            asm::shift_cl(a, 1, r(dst));
        }
        Bytecode::IrolR { dst, src } => {
            asm::mov_r32(a, RCX, r(src));
            asm::shift_cl(a, 0, r(dst));
        }
        Bytecode::IrorI { dst, rot } => asm::shift_imm(a, 1, r(dst), rot as u8),
        Bytecode::IrolI { dst, rot } => asm::shift_imm(a, 0, r(dst), rot as u8),
        Bytecode::IswapR { dst, src } => asm::xchg_rr(a, r(dst), r(src)),
        Bytecode::FswapR { reg } => asm::shufpd(a, reg, reg, 1),
        Bytecode::FaddR { dst, src } => fp_op(a, asm::ADDPD, dst, 8 + src),
        Bytecode::FsubR { dst, src } => fp_op(a, asm::SUBPD, dst, 8 + src),
        Bytecode::FaddM {
            dst,
            src,
            imm,
            mask,
        }
        | Bytecode::FsubM {
            dst,
            src,
            imm,
            mask,
        } => {
            let m = scratchpad_operand(a, src, imm, mask, RAX);
            asm::sse_rm(a, Some(0xF3), asm::CVTDQ2PD, XTMP, &m);
            let op = if matches!(bc, Bytecode::FaddM { .. }) {
                asm::ADDPD
            } else {
                asm::SUBPD
            };
            fp_op(a, op, dst, XTMP);
        }
        Bytecode::FscalR { dst } => asm::sse_rr(a, None, asm::XORPS, dst, XSCALE),
        Bytecode::FmulR { dst, src } => fp_op(a, asm::MULPD, 4 + dst, 8 + src),
        Bytecode::FdivM {
            dst,
            src,
            imm,
            mask,
        } => {
            let m = scratchpad_operand(a, src, imm, mask, RAX);
            asm::sse_rm(a, Some(0xF3), asm::CVTDQ2PD, XTMP, &m);
            asm::sse_rr(a, None, asm::ANDPS, XTMP, XMANT);
            asm::sse_rr(a, None, asm::ORPS, XTMP, XEMASK);
            fp_op(a, asm::DIVPD, 4 + dst, XTMP);
        }
        Bytecode::FsqrtR { dst } => fp_op(a, asm::SQRTPD, 4 + dst, 4 + dst),
        Bytecode::Cbranch {
            dst,
            cimm,
            cond_mask,
            target,
        } => {
            asm::group1_ri(a, 0, r(dst), cimm as i32);
            asm::test_ri(a, r(dst), cond_mask as i32);
            let to = if target < 0 {
                body_start
            } else {
                starts[target as usize + 1]
            };
            let at = a.code.len();
            asm::jcc_rel32(a, asm::CC_Z, at, to);
        }
        Bytecode::Cfround { src, rot } => {
            // Rotate by rot - 2 so that the two mode bits land in bits 2-3: `and eax, 12` is
            // then the byte offset of the mode's MXCSR value in the frame's table.
            asm::mov_rr(a, RAX, r(src));
            let rot2 = (rot as u8).wrapping_sub(2) & 63;
            if rot2 != 0 {
                asm::shift_imm(a, 1, RAX, rot2);
            }
            let mut tail = Assembler::scratch(a.embedded);
            asm::and_r32_imm(&mut tail, RAX, 12);
            if a.embedded {
                jump_to_mode_copy(&mut tail);
            } else {
                asm::mxcsr(
                    &mut tail,
                    2,
                    &Mem {
                        base: RSP,
                        index: Some((RAX, 0)),
                        disp: FRAME_MXCSR_TABLE,
                    },
                );
            }
            if v2 {
                // v2: change the mode only when bits 2-5 of the value rotated by `rot` (here
                // bits 4-7) are zero.
                asm::test_al(a, 0xF0);
                asm::jnz_short(a, tail.code.len() as u8);
            }
            a.append(tail);
        }
        Bytecode::Istore {
            dst,
            src,
            imm,
            mask,
        } => {
            asm::lea_r32_disp32(a, RAX, r(dst), imm as u32 as i32);
            asm::and_r32_imm(a, RAX, mask);
            asm::op_rm(a, 0x89, r(src), &Mem::indexed(RSI, RAX, 0));
        }
        Bytecode::Nop => {}
    }
}

/// Compiles one program's whole loop. `read_reg` are the four address registers of 4.5.4.
pub fn compile(
    code: &[Bytecode],
    read_reg: [u8; 4],
    mode: JitMode,
    v2: bool,
    rounding: Rounding,
) -> Vec<u8> {
    let mut out = Vec::new();
    compile_into(&mut out, code, read_reg, mode, v2, rounding);
    out
}

/// [`compile`] into a reused buffer (cleared first): no allocation per program once warm.
pub fn compile_into(
    out: &mut Vec<u8>,
    code: &[Bytecode],
    read_reg: [u8; 4],
    mode: JitMode,
    v2: bool,
    rounding: Rounding,
) {
    let embedded = rounding.resolve() == Rounding::Embedded;
    out.clear();
    out.reserve(if embedded { 16384 } else { 4096 } + code.len() * 24);
    let mut a = Assembler::scratch(embedded);
    a.code = std::mem::take(out);
    let st = |f: usize| Mem::base(RDI, state_off(f));

    // Prologue: rdi = state.
    for &reg in &CALLEE_SAVED {
        asm::push(&mut a, reg);
    }
    asm::group1_ri(&mut a, 5, RSP, FRAME_SIZE); // sub rsp, FRAME_SIZE
    asm::store64(&mut a, &Mem::base(RSP, FRAME_STATE), RDI);
    for mode in 0..4u32 {
        asm::store32_imm(
            &mut a,
            &Mem::base(RSP, FRAME_MXCSR_TABLE + 4 * mode as i32),
            0x1F80 | mode << 13,
        );
    }
    asm::mxcsr(&mut a, 3, &st(offset_of!(JitState, saved_mxcsr)));
    // MXCSR from fprc: 0x1F80 (all exceptions masked) | fprc << 13; with embedded rounding
    // always round-to-nearest (fprc picks the copy instead).
    if embedded {
        asm::store32_imm(&mut a, &Mem::base(RSP, FRAME_MXCSR), 0x1F80);
    } else {
        a.put(&[0x8B, 0x87]);
        a.put(&state_off(offset_of!(JitState, fprc)).to_le_bytes()); // mov eax, [rdi+fprc]
        asm::shift_imm(&mut a, 4, RAX, 13);
        asm::group1_ri(&mut a, 1, RAX, 0x1F80);
        a.put(&[0x89, 0x04, 0x24]); // mov [rsp], eax
    }
    asm::mxcsr(&mut a, 2, &Mem::base(RSP, FRAME_MXCSR));
    for i in 0..8u8 {
        asm::load64(&mut a, r(i), &st(offset_of!(JitState, r) + 8 * i as usize));
    }
    for i in 0..4u8 {
        asm::movupd_load(
            &mut a,
            8 + i,
            &st(offset_of!(JitState, a) + 16 * i as usize),
        );
    }
    asm::movupd_load(&mut a, XMANT, &st(offset_of!(JitState, mantissa_mask)));
    asm::movupd_load(&mut a, XEMASK, &st(offset_of!(JitState, e_mask)));
    asm::movupd_load(&mut a, XSCALE, &st(offset_of!(JitState, scale_mask)));
    asm::load64(&mut a, RSI, &st(offset_of!(JitState, scratchpad)));
    asm::load64(&mut a, RBP, &st(offset_of!(JitState, mem)));
    asm::load64(&mut a, RBX, &st(offset_of!(JitState, iterations)));
    asm::load64(&mut a, RAX, &st(offset_of!(JitState, sp_addr)));
    asm::store64(&mut a, &Mem::base(RSP, FRAME_SP_CARRY), RAX);
    if embedded {
        a.put(&[0x8B, 0x87]);
        a.put(&state_off(offset_of!(JitState, fprc)).to_le_bytes()); // mov eax, [rdi+fprc]
        asm::and_r32_imm(&mut a, RAX, 3);
        asm::shift_imm(&mut a, 4, RAX, 2);
    }
    asm::load64(&mut a, RDI, &st(offset_of!(JitState, dataset)));
    if embedded {
        // The 512-bit operations compute on the upper lanes too: zeros, not stale data.
        evex::vzeroupper(&mut a);
        jump_to_mode_copy(&mut a);
    }

    // Copy 0 of four with embedded rounding: the first iteration's step 1, then the loop.
    let copy_start = a.code.len();
    // 1: spAddr0 (eax) and spAddr1 (edx) from readReg0 ^ readReg1 and the program's initial
    // spAddr. Later iterations get them from the end of the previous one, where they are
    // computed for the scratchpad prefetch (their registers are final by then).
    scratchpad_addresses(&mut a, read_reg, true);
    let loop_start = a.code.len();
    // 2: integer registers ^= the 64 bytes at spAddr0.
    asm::op_rm(&mut a, 0x8D, RCX, &Mem::indexed(RSI, RAX, 0)); // lea rcx, [rsi+rax]
    asm::store64(&mut a, &Mem::base(RSP, FRAME_SP0), RCX);
    for i in 0..8u8 {
        asm::op_rm(&mut a, 0x33, r(i), &Mem::base(RCX, 8 * i as i32));
    }
    // 3: F and E registers from the 64 bytes at spAddr1.
    asm::op_rm(&mut a, 0x8D, RCX, &Mem::indexed(RSI, RDX, 0));
    asm::store64(&mut a, &Mem::base(RSP, FRAME_SP1), RCX);
    for i in 0..4u8 {
        asm::sse_rm(
            &mut a,
            Some(0xF3),
            asm::CVTDQ2PD,
            i,
            &Mem::base(RCX, 8 * i as i32),
        );
    }
    for i in 0..4u8 {
        asm::sse_rm(
            &mut a,
            Some(0xF3),
            asm::CVTDQ2PD,
            4 + i,
            &Mem::base(RCX, 32 + 8 * i as i32),
        );
        asm::sse_rr(&mut a, None, asm::ANDPS, 4 + i, XMANT);
        asm::sse_rr(&mut a, None, asm::ORPS, 4 + i, XEMASK);
    }
    // 4: the program. Two passes: instruction start offsets first (branch targets point back).
    let body_start = a.code.len();
    let mut starts = Vec::with_capacity(code.len() + 1);
    for bc in code {
        starts.push(a.code.len());
        emit_instruction(&mut a, bc, &starts, body_start, v2);
    }
    starts.push(a.code.len());
    // 5-8: dataset read.
    asm::mov_r32(&mut a, RDX, RBP); // edx = ma (the read address mt)
    asm::mov_rr(&mut a, RAX, r(read_reg[2]));
    asm::xor_rr(&mut a, RAX, r(read_reg[3]));
    asm::mov_r32(&mut a, RAX, RAX); // zero-extend: low 32 bits of the mix
    if !v2 {
        asm::shift_imm(&mut a, 4, RAX, 32); // v1: mp = mx (high half)
    }
    asm::xor_rr(&mut a, RBP, RAX);
    asm::and_r32_imm(&mut a, RDX, CACHE_LINE_ALIGN_MASK as u32);
    match mode {
        JitMode::Fast => {
            // Prefetch mp: v1 mx (high half), v2 ma (low half).
            asm::mov_rr(&mut a, RCX, RBP);
            if !v2 {
                asm::shift_imm(&mut a, 5, RCX, 32);
            }
            asm::and_r32_imm(&mut a, RCX, CACHE_LINE_ALIGN_MASK as u32);
            asm::prefetchnta(&mut a, &Mem::indexed(RDI, RCX, 0));
            for i in 0..8u8 {
                asm::op_rm(
                    &mut a,
                    0x33,
                    r(i),
                    &Mem {
                        base: RDI,
                        index: Some((RDX, 0)),
                        disp: 8 * i as i32,
                    },
                );
            }
        }
        JitMode::Light => {
            // Save caller-saved state (MXCSR included: the callee may change it), call
            // item_fn(item_ctx, address, rsp + FRAME_ITEM).
            asm::mxcsr(&mut a, 3, &Mem::base(RSP, FRAME_MXCSR));
            for i in 0..8u8 {
                asm::movupd_store(&mut a, &Mem::base(RSP, FRAME_XMM + 16 * i as i32), i);
            }
            for i in 0..4u8 {
                asm::store64(&mut a, &Mem::base(RSP, FRAME_GPR + 8 * i as i32), r(i));
            }
            asm::load64(&mut a, RCX, &Mem::base(RSP, FRAME_STATE));
            asm::load64(
                &mut a,
                RDI,
                &Mem::base(RCX, state_off(offset_of!(JitState, item_ctx))),
            );
            asm::load64(
                &mut a,
                RAX,
                &Mem::base(RCX, state_off(offset_of!(JitState, item_fn))),
            );
            asm::mov_rr(&mut a, RSI, RDX);
            asm::op_rm(&mut a, 0x8D, RDX, &Mem::base(RSP, FRAME_ITEM));
            // 4th argument: the next iteration's read address (mx, high half of rbp, in both
            // versions at this point), so that the callback can compute two items together.
            asm::mov_rr(&mut a, RCX, RBP);
            asm::shift_imm(&mut a, 5, RCX, 32);
            asm::and_r32_imm(&mut a, RCX, CACHE_LINE_ALIGN_MASK as u32);
            asm::call_rax(&mut a);
            if embedded {
                evex::vzeroupper(&mut a);
            }
            asm::load64(&mut a, RCX, &Mem::base(RSP, FRAME_STATE));
            asm::load64(
                &mut a,
                RSI,
                &Mem::base(RCX, state_off(offset_of!(JitState, scratchpad))),
            );
            for i in 0..4u8 {
                asm::load64(&mut a, r(i), &Mem::base(RSP, FRAME_GPR + 8 * i as i32));
            }
            for i in 0..8u8 {
                asm::movupd_load(&mut a, i, &Mem::base(RSP, FRAME_XMM + 16 * i as i32));
            }
            for i in 0..4u8 {
                asm::movupd_load(
                    &mut a,
                    8 + i,
                    &Mem::base(RCX, state_off(offset_of!(JitState, a) + 16 * i as usize)),
                );
            }
            asm::movupd_load(
                &mut a,
                XMANT,
                &Mem::base(RCX, state_off(offset_of!(JitState, mantissa_mask))),
            );
            asm::movupd_load(
                &mut a,
                XEMASK,
                &Mem::base(RCX, state_off(offset_of!(JitState, e_mask))),
            );
            asm::movupd_load(
                &mut a,
                XSCALE,
                &Mem::base(RCX, state_off(offset_of!(JitState, scale_mask))),
            );
            // The callee may have changed MXCSR's rounding (Rust code assumes nearest): reload it.
            asm::mxcsr(&mut a, 2, &Mem::base(RSP, FRAME_MXCSR));
            for i in 0..8u8 {
                asm::op_rm(
                    &mut a,
                    0x33,
                    r(i),
                    &Mem::base(RSP, FRAME_ITEM + 8 * i as i32),
                );
            }
        }
    }
    {
        // 12 and the next iteration's 1: spAddr0 (eax) and spAddr1 (edx), live until the loop
        // top, and their scratchpad lines touched as soon as their address is known rather
        // than after this iteration's stores (the idea of xmrig's scratchpad prefetch; measured
        // 2-4% less CPU per hash with `loop_timing`).
        scratchpad_addresses(&mut a, read_reg, false);
    }
    asm::shift_imm(&mut a, 1, RBP, 32); // ror rbp, 32: swap ma and mx
                                        // 9: integer registers to spAddr1.
    asm::load64(&mut a, RCX, &Mem::base(RSP, FRAME_SP1));
    for i in 0..8u8 {
        asm::store64(&mut a, &Mem::base(RCX, 8 * i as i32), r(i));
    }
    // 10: mix F with E.
    if v2 {
        for k in 0..4u8 {
            for fi in 0..4u8 {
                asm::aes_round(&mut a, fi % 2 == 1, fi, 4 + k);
            }
        }
    } else {
        for i in 0..4u8 {
            asm::sse_rr(&mut a, None, asm::XORPS, i, 4 + i);
        }
    }
    // 11: F registers to spAddr0.
    asm::load64(&mut a, RCX, &Mem::base(RSP, FRAME_SP0));
    for i in 0..4u8 {
        asm::movupd_store(&mut a, &Mem::base(RCX, 16 * i as i32), i);
    }
    // 13: loop.
    asm::group1_ri(&mut a, 5, RBX, 1);
    let at = a.code.len();
    asm::jcc_rel32(&mut a, asm::CC_NZ, at, loop_start);
    if embedded {
        make_mode_copies(&mut a, copy_start);
    }

    // Epilogue: registers back to the state, caller's MXCSR restored.
    asm::load64(&mut a, RCX, &Mem::base(RSP, FRAME_STATE));
    for i in 0..8u8 {
        asm::store64(
            &mut a,
            &Mem::base(RCX, state_off(offset_of!(JitState, r) + 8 * i as usize)),
            r(i),
        );
    }
    for i in 0..4u8 {
        asm::movupd_store(
            &mut a,
            &Mem::base(RCX, state_off(offset_of!(JitState, f) + 16 * i as usize)),
            i,
        );
        asm::movupd_store(
            &mut a,
            &Mem::base(RCX, state_off(offset_of!(JitState, e) + 16 * i as usize)),
            4 + i,
        );
    }
    asm::store64(
        &mut a,
        &Mem::base(RCX, state_off(offset_of!(JitState, mem))),
        RBP,
    );
    if embedded {
        asm::load32(&mut a, RAX, &Mem::base(RSP, FRAME_MODE));
    } else {
        // fprc = the rounding-control bits of the MXCSR the program left.
        asm::mxcsr(&mut a, 3, &Mem::base(RSP, FRAME_MXCSR));
        asm::load32(&mut a, RAX, &Mem::base(RSP, FRAME_MXCSR));
        asm::shift_imm(&mut a, 5, RAX, 13);
        asm::and_r32_imm(&mut a, RAX, 3);
    }
    asm::store32(
        &mut a,
        &Mem::base(RCX, state_off(offset_of!(JitState, fprc))),
        RAX,
    );
    asm::mxcsr(
        &mut a,
        2,
        &Mem::base(RCX, state_off(offset_of!(JitState, saved_mxcsr))),
    );
    asm::group1_ri(&mut a, 0, RSP, FRAME_SIZE);
    for &reg in CALLEE_SAVED.iter().rev() {
        asm::pop(&mut a, reg);
    }
    asm::ret(&mut a);
    *out = a.code;
}

/// Completes copy 0 of the loop (starting at `copy_start` with the first iteration's step 1,
/// ending with the loop branch) with an exit that records its mode and jumps to the epilogue,
/// pads it to whole cache lines and appends copies 1-3: the same bytes with the FP operations'
/// rounding bits set to the copy's mode and the displacements that leave the copy moved back by
/// the copies in between.
fn make_mode_copies(a: &mut Assembler, copy_start: usize) {
    asm::store32_imm(a, &Mem::base(RSP, FRAME_MODE), 0);
    let mode_imm = a.code.len() - 4;
    a.put(&[0xE9]); // jmp rel32 to the epilogue
    let exit_disp = a.code.len();
    a.put(&[0; 4]);
    while (a.code.len() - copy_start) % 64 != 0 {
        a.put(&[0xCC]);
    }
    let size = a.code.len() - copy_start;
    let write =
        |code: &mut [u8], at: usize, v: i32| code[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let read =
        |code: &[u8], at: usize| i32::from_le_bytes(code[at..at + 4].try_into().expect("4 bytes"));
    for &at in &a.quarter_copy_size_imms {
        write(&mut a.code, at, (size / 4) as i32);
    }
    let epilogue = copy_start + 4 * size;
    write(&mut a.code, exit_disp, (epilogue - (exit_disp + 4)) as i32);
    let leaving: Vec<usize> = a
        .to_copy0
        .iter()
        .copied()
        .filter(|&at| at >= copy_start)
        .chain([exit_disp])
        .collect();
    for m in 1..4usize {
        let shift = m * size;
        a.code.extend_from_within(copy_start..copy_start + size);
        for &at in &a.rounding_bytes {
            a.code[at + shift] |= (m as u8) << 5;
        }
        for &at in &leaving {
            let v = read(&a.code, at + shift);
            write(&mut a.code, at + shift, v - shift as i32);
        }
        a.code[mode_imm + shift] = m as u8;
    }
}

/// A reusable code region for one VM: programs are recompiled into it for every program of
/// every hash. In secure mode the region flips between read-write and read-execute (W^X, like
/// the reference's RANDOMX_FLAG_SECURE); otherwise it is mapped read-write-execute once, which
/// saves two `mprotect` calls per program. With a large-page policy the region is one 2 MiB
/// page (hugetlb or THP, as the VM's other memory), so the code never misses the iTLB.
pub struct ProgramCode {
    ptr: *mut u8,
    cap: usize,
    secure: bool,
    len: usize,
    /// The large-page mapping behind `ptr`, when there is one (else `ptr` is our own mmap).
    backing: Option<LargeBuffer>,
}

// SAFETY: the region is owned by one VM and only used through &mut self.
unsafe impl Send for ProgramCode {}

/// Largest code a program compiles to: 384 instructions of at most 40 bytes plus the loop, four
/// times with embedded rounding.
const CODE_CAPACITY: usize = 128 * 1024;
const LARGE_PAGE: usize = 2 << 20;

type LoopFn = unsafe extern "sysv64" fn(*mut JitState);

impl ProgramCode {
    pub fn new(secure: bool) -> Result<Self, JitError> {
        Self::with_pages(secure, PagePolicy::SmallOnly)
    }

    /// A region on the page size `pages` allows (large pages falling back to 4 KiB ones).
    pub fn with_pages(secure: bool, pages: PagePolicy) -> Result<Self, JitError> {
        let prot = if secure {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC
        };
        if pages != PagePolicy::SmallOnly {
            if let Ok(mut buf) = LargeBuffer::new(LARGE_PAGE, pages) {
                if buf.kind().is_large() {
                    let ptr = buf.as_mut_ptr();
                    // SAFETY: changes the protection of our own mapping, whole.
                    if unsafe { libc::mprotect(ptr as *mut libc::c_void, LARGE_PAGE, prot) } == 0 {
                        return Ok(ProgramCode {
                            ptr,
                            cap: LARGE_PAGE,
                            secure,
                            len: 0,
                            backing: Some(buf),
                        });
                    }
                    if !secure {
                        // RWX refused: W^X on large pages.
                        return Self::with_pages(true, pages);
                    }
                }
            }
        }
        let cap = CODE_CAPACITY;
        // SAFETY: anonymous private mapping, result checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                cap,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            if !secure {
                // Some kernels/policies refuse RWX mappings: fall back to W^X.
                return Self::new(true);
            }
            return Err(JitError::Map(std::io::Error::last_os_error()));
        }
        Ok(ProgramCode {
            ptr: p as *mut u8,
            cap,
            secure,
            len: 0,
            backing: None,
        })
    }

    /// The page size the code lives on.
    pub fn page_kind(&self) -> PageKind {
        self.backing
            .as_ref()
            .map_or(PageKind::Small4K, |b| b.kind())
    }

    pub fn is_secure(&self) -> bool {
        self.secure
    }

    fn protect(&self, prot: i32) -> Result<(), JitError> {
        // SAFETY: our own mapping.
        if unsafe { libc::mprotect(self.ptr as *mut libc::c_void, self.cap, prot) } != 0 {
            return Err(JitError::Protect(std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Installs machine code.
    pub fn load(&mut self, code: &[u8]) -> Result<(), JitError> {
        assert!(
            code.len() <= self.cap,
            "program code exceeds the JIT region"
        );
        if self.secure {
            self.protect(libc::PROT_READ | libc::PROT_WRITE)?;
        }
        // SAFETY: bounds checked; the region is writable now and starts on a page boundary.
        unsafe { copy_code(code, self.ptr) };
        self.len = code.len();
        if self.secure {
            self.protect(libc::PROT_READ | libc::PROT_EXEC)?;
        } else {
            serialize_instruction_stream();
        }
        Ok(())
    }

    /// Runs the installed loop on `state`.
    ///
    /// # Safety
    /// The installed code must come from [`compile`] with the mode matching `state` (fast: a
    /// valid dataset pointer; light: a valid callback), and `state.scratchpad` must point to a
    /// writable scratchpad of `RANDOMX_SCRATCHPAD_L3` bytes.
    pub unsafe fn run(&self, state: &mut JitState) {
        assert!(self.len > 0, "no program loaded");
        // SAFETY: the region holds a complete function emitted by compile() (System V ABI:
        // callee-saved registers and MXCSR restored); the caller guarantees the pointers.
        unsafe {
            let f: LoopFn = std::mem::transmute::<*mut u8, LoopFn>(self.ptr);
            f(state);
        }
    }
}

/// Writes `code` to `dst` with 8-byte stores. Not `copy_nonoverlapping`: glibc's memcpy moves
/// this size with 64-byte AVX-512 stores here, and those stores into the code that just ran cost
/// 3.6% of a fast-mode hash (~14 us per program, measured with `perf` on `fast_profile`); plain
/// stores cost 0.3%.
///
/// # Safety
/// `dst` must be 8-byte aligned and valid for `code.len()` bytes of writes.
unsafe fn copy_code(code: &[u8], dst: *mut u8) {
    let (words, tail) = code.as_chunks::<8>();
    for (i, w) in words.iter().enumerate() {
        // SAFETY: i * 8 + 8 <= code.len(), within dst's writable range, and 8-aligned (caller);
        // volatile so that the compiler does not turn the loop back into a memcpy call.
        unsafe { std::ptr::write_volatile(dst.add(8 * i).cast::<u64>(), u64::from_ne_bytes(*w)) };
    }
    for (i, b) in tail.iter().enumerate() {
        // SAFETY: as above, for the last code.len() % 8 bytes.
        unsafe { std::ptr::write_volatile(dst.add(8 * words.len() + i), *b) };
    }
}

/// Makes this thread fetch the code just written instead of instructions it may still hold
/// for the previous program at the same addresses. Without it, VMs on several threads
/// occasionally jumped to a branch target of the previous program (session 12: a stand-alone
/// reproducer, three light-mode VMs while a new Cache was built, crashed in 3 of 4 runs within
/// a minute, always at the first iteration of a program, inside an instruction of the current
/// one; the miner's regtest test died the same way in 2 of 5 runs; secure mode, whose
/// `mprotect` serializes, never did). `SERIALIZE` where the CPU has it, else `CPUID` (the
/// architectural way; a VM exit under a hypervisor, ~1-2 us, once per program).
fn serialize_instruction_stream() {
    if proofkit_core::cpu::features().serialize {
        // SAFETY: SERIALIZE (0F 01 E8) has no operands and no effect but serialization; the CPU
        // reports it (CPUID.07H:EDX[14]).
        unsafe { std::arch::asm!(".byte 0x0f, 0x01, 0xe8", options(nostack, preserves_flags)) };
    } else {
        // CPUID is serializing.
        std::arch::x86_64::__cpuid(0);
    }
}

impl Drop for ProgramCode {
    fn drop(&mut self) {
        if self.backing.is_none() {
            // SAFETY: our own mapping, unmapped once.
            unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.cap) };
        }
    }
}

/// What the light-mode callback needs: the cache, the program's datasetOffset, and the item it
/// computed ahead (the next iteration's, paired with the current one).
struct LightCtx<'a> {
    cache: &'a crate::cache::Cache,
    dataset_offset: u64,
    ahead: std::cell::Cell<Option<(u64, [u64; 8])>>,
}

/// Light-mode dataset read. Each iteration needs one new item, but the next iteration's address
/// is already known here, so items are computed in pairs, interleaved (their cache-line reads
/// overlap): the current and the next; the next call then finds its item ready.
unsafe extern "sysv64" fn light_item(
    ctx: *const std::ffi::c_void,
    address: u64,
    out: *mut u64,
    next_address: u64,
) {
    // SAFETY: ctx is the LightCtx that `execute` keeps alive for the whole run; out points to
    // the 64-byte item buffer in the JIT frame.
    unsafe {
        let ctx = &*(ctx as *const LightCtx<'_>);
        let item = (ctx.dataset_offset + address) / 64;
        let value = match ctx.ahead.take() {
            Some((i, v)) if i == item => v,
            _ => {
                let next = (ctx.dataset_offset + next_address) / 64;
                let [v, w] = super::light_batch::item_pair(ctx.cache, item, next);
                ctx.ahead.set(Some((next, w)));
                v
            }
        };
        std::ptr::copy_nonoverlapping(value.as_ptr(), out, 8);
    }
}

/// Installs `machine_code` (from [`compile`] with the mode matching `source`) and runs it on
/// `state`, pointing it at `scratchpad` and the dataset or cache of `source`. Safe: every pointer
/// the compiled loop dereferences is derived here from live references.
pub fn execute(
    region: &mut ProgramCode,
    machine_code: &[u8],
    mode: JitMode,
    state: &mut JitState,
    scratchpad: &mut [u8],
    source: &super::DatasetSource,
    dataset_offset: u64,
) -> Result<(), JitError> {
    assert_eq!(scratchpad.len(), SCRATCHPAD_L3, "scratchpad size");
    assert!(dataset_offset <= DATASET_EXTRA_SIZE, "dataset offset");
    region.load(machine_code)?;
    state.scratchpad = scratchpad.as_mut_ptr();
    match source {
        super::DatasetSource::Fast(d) => {
            assert_eq!(mode, JitMode::Fast, "fast-mode code for a dataset");
            // SAFETY: the offset is at most DATASET_EXTRA_SIZE, and every read is below
            // offset + DATASET_BASE_SIZE <= the dataset size.
            state.dataset = unsafe { d.memory_ptr().add(dataset_offset as usize) };
            state.item_fn = None;
            // SAFETY: code from compile(Fast); dataset and scratchpad pointers valid for the call.
            unsafe { region.run(state) };
        }
        super::DatasetSource::Light(c) => {
            assert_eq!(mode, JitMode::Light, "light-mode code for a cache");
            let ctx = LightCtx {
                cache: c,
                dataset_offset,
                ahead: std::cell::Cell::new(None),
            };
            state.item_ctx = &ctx as *const LightCtx<'_> as *const std::ffi::c_void;
            state.item_fn = Some(light_item);
            state.dataset = std::ptr::null();
            // SAFETY: code from compile(Light); ctx outlives the call.
            unsafe { region.run(state) };
            state.item_ctx = std::ptr::null();
        }
    }
    state.scratchpad = std::ptr::null_mut();
    Ok(())
}
