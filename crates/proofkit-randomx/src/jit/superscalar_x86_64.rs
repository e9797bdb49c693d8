//! SuperscalarHash compiled to x86-64 (specs.md chapter 6), the fast twin of
//! [`SuperscalarProgram::execute`]. Each program becomes one function
//! `extern "sysv64" fn(regs: *mut [u64; 8])`.
//!
//! Register roles:
//!
//! | RandomX | x86-64 | note |
//! |---|---|---|
//! | r0-r7 | r8-r15 | loaded from and stored back to `[rdi]` |
//! | - | rax, rdx | multiplication scratch (IMULH_R, ISMULH_R, IMUL_RCP) |
//! | - | rdi | pointer to the register array |
//!
//! r12-r15 are callee-saved in the System V ABI and are pushed in the prologue.

use super::asm::{self, RAX, RDI, RDX};
use super::{ExecutableCode, JitError, WritableCode};
use crate::superscalar::{SsOp, SuperscalarProgram};

/// x86 register holding RandomX register `i`.
fn reg(i: u8) -> u8 {
    8 + i
}

/// Longest encoding of one SuperscalarHash instruction (IMUL_RCP: 10 + 4 bytes).
const MAX_INSTRUCTION_BYTES: usize = 14;
const FRAME_BYTES: usize = 8 * 2 + 8 * 4 * 2 + 8 * 4 + 1;

fn emit_program(code: &mut WritableCode, prog: &SuperscalarProgram) {
    for r in 12..16 {
        asm::push(code, r);
    }
    for i in 0..8u8 {
        asm::load_disp8(code, reg(i), RDI, 8 * i as i8);
    }
    let mut rcps = prog.reciprocals().iter();
    for ins in &prog.instructions {
        let (d, s) = (reg(ins.dst), reg(ins.src));
        match ins.op {
            SsOp::ISUB_R => asm::sub_rr(code, d, s),
            SsOp::IXOR_R => asm::xor_rr(code, d, s),
            SsOp::IADD_RS => asm::lea_sib(code, d, d, s, ins.shift),
            SsOp::IMUL_R => asm::imul_rr(code, d, s),
            SsOp::IROR_C => asm::ror_ri(code, d, ins.imm32 as u8),
            SsOp::IADD_C7 | SsOp::IADD_C8 | SsOp::IADD_C9 => asm::add_ri(code, d, ins.imm32),
            SsOp::IXOR_C7 | SsOp::IXOR_C8 | SsOp::IXOR_C9 => asm::xor_ri(code, d, ins.imm32),
            SsOp::IMULH_R | SsOp::ISMULH_R => {
                asm::mov_rr(code, RAX, d);
                if ins.op == SsOp::IMULH_R {
                    asm::mul_r(code, s);
                } else {
                    asm::imul_r(code, s);
                }
                asm::mov_rr(code, d, RDX);
            }
            SsOp::IMUL_RCP => {
                asm::mov_ri64(
                    code,
                    RAX,
                    *rcps.next().expect("one reciprocal per IMUL_RCP"),
                );
                asm::imul_rr(code, d, RAX);
            }
        }
    }
    for i in 0..8u8 {
        asm::store_disp8(code, RDI, 8 * i as i8, reg(i));
    }
    for r in (12..16).rev() {
        asm::pop(code, r);
    }
    asm::ret(code);
}

/// The eight SuperscalarHash programs of a cache, compiled.
pub struct CompiledSuperscalar {
    code: ExecutableCode,
    entries: Vec<usize>,
}

type SsFn = unsafe extern "sysv64" fn(*mut u64);

impl CompiledSuperscalar {
    /// Compiles `programs`; fails only where executable memory cannot be had.
    pub fn compile(programs: &[SuperscalarProgram]) -> Result<Self, JitError> {
        if !cfg!(target_arch = "x86_64") {
            return Err(JitError::Unsupported);
        }
        let cap: usize = programs
            .iter()
            .map(|p| p.instructions.len() * MAX_INSTRUCTION_BYTES + FRAME_BYTES + 16)
            .sum();
        let mut code = WritableCode::new(cap)?;
        let mut entries = Vec::with_capacity(programs.len());
        for p in programs {
            // 16-byte aligned entry points.
            while code.len() % 16 != 0 {
                code.emit(&[0xCC]);
            }
            entries.push(code.len());
            emit_program(&mut code, p);
        }
        Ok(CompiledSuperscalar {
            code: code.seal()?,
            entries,
        })
    }

    /// Runs program `index` on `r`.
    #[inline(always)]
    pub fn execute(&self, index: usize, r: &mut [u64; 8]) {
        let entry = self.code.entry(self.entries[index]);
        // SAFETY: entry is the start of a function emitted by emit_program for the System V
        // ABI: it reads and writes exactly 8 u64 at the pointer, saves the callee-saved
        // registers it uses and clobbers only rax, rdx and r8-r11 (caller-saved).
        unsafe {
            let f: SsFn = std::mem::transmute::<*const u8, SsFn>(entry);
            f(r.as_mut_ptr());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blake::BlakeGenerator;

    /// The compiled programs equal the portable executor on random registers (shared test of the
    /// SuperscalarHash kernels), over programs of several keys.
    #[test]
    fn compiled_equals_portable() {
        let mut x = 0x243F_6A88_85A3_08D3u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for key in [&b"test key 000"[..], b"", &[0xAB; 60][..], b"another key"] {
            let mut gen = BlakeGenerator::new(key, 0);
            let progs: Vec<SuperscalarProgram> = (0..8)
                .map(|_| SuperscalarProgram::generate(&mut gen))
                .collect();
            let jit = CompiledSuperscalar::compile(&progs).unwrap();
            for (i, p) in progs.iter().enumerate() {
                for case in 0..64 {
                    let mut a: [u64; 8] = std::array::from_fn(|_| next());
                    if case == 0 {
                        a = [0; 8];
                    } else if case == 1 {
                        a = [u64::MAX; 8];
                    }
                    let mut b = a;
                    p.execute(&mut a);
                    jit.execute(i, &mut b);
                    assert_eq!(a, b, "program {i} key {key:?}");
                }
            }
        }
    }
}
