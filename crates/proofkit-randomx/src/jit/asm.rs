//! A tiny x86-64 assembler: checked encoders for REX, ModRM and SIB, and one function per
//! instruction form that proofkit's JITs emit. Registers are numbered 0-15 (rax=0 ... r15=15).
#![deny(unsafe_code)]

pub const RAX: u8 = 0;
pub const RCX: u8 = 1;
pub const RDX: u8 = 2;
pub const RBX: u8 = 3;
pub const RSP: u8 = 4;
pub const RBP: u8 = 5;
pub const RSI: u8 = 6;
pub const RDI: u8 = 7;

/// REX prefix with W=1 and the high bits of reg (R), index (X) and rm/base (B).
pub fn rex_w(reg: u8, index: u8, rm: u8) -> u8 {
    debug_assert!(reg < 16 && index < 16 && rm < 16);
    0x48 | ((reg >> 3) << 2) | ((index >> 3) << 1) | (rm >> 3)
}

/// REX prefix without W (only emitted when one of the bits is needed).
pub fn rex(reg: u8, rm: u8) -> Option<u8> {
    let r = 0x40 | ((reg >> 3) << 2) | (rm >> 3);
    (r != 0x40).then_some(r)
}

pub fn modrm(md: u8, reg: u8, rm: u8) -> u8 {
    debug_assert!(md < 4);
    (md << 6) | ((reg & 7) << 3) | (rm & 7)
}

pub fn sib(scale_log2: u8, index: u8, base: u8) -> u8 {
    debug_assert!(scale_log2 < 4);
    (scale_log2 << 6) | ((index & 7) << 3) | (base & 7)
}

/// An instruction byte sink.
pub trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

impl Sink for super::WritableCode {
    fn put(&mut self, bytes: &[u8]) {
        self.emit(bytes);
    }
}

/// `op dst, src` for the 64-bit r/m,reg forms (0x01 add, 0x29 sub, 0x31 xor, 0x89 mov).
pub fn alu_rr(s: &mut impl Sink, opcode: u8, dst: u8, src: u8) {
    s.put(&[rex_w(src, 0, dst), opcode, modrm(3, src, dst)]);
}

pub fn sub_rr(s: &mut impl Sink, dst: u8, src: u8) {
    alu_rr(s, 0x29, dst, src);
}

pub fn xor_rr(s: &mut impl Sink, dst: u8, src: u8) {
    alu_rr(s, 0x31, dst, src);
}

pub fn mov_rr(s: &mut impl Sink, dst: u8, src: u8) {
    alu_rr(s, 0x89, dst, src);
}

/// `imul dst, src` (0F AF /r).
pub fn imul_rr(s: &mut impl Sink, dst: u8, src: u8) {
    s.put(&[rex_w(dst, 0, src), 0x0F, 0xAF, modrm(3, dst, src)]);
}

/// `lea dst, [base + index << shift]`; base must not be rbp/r13 (they need a displacement).
pub fn lea_sib(s: &mut impl Sink, dst: u8, base: u8, index: u8, shift: u8) {
    assert!(base & 7 != 5, "lea base rbp/r13 needs a displacement");
    assert!(index != RSP, "rsp cannot be an index");
    s.put(&[
        rex_w(dst, index, base),
        0x8D,
        modrm(0, dst, 4),
        sib(shift, index, base),
    ]);
}

/// `ror dst, imm8` (C1 /1 ib).
pub fn ror_ri(s: &mut impl Sink, dst: u8, imm: u8) {
    s.put(&[rex_w(0, 0, dst), 0xC1, modrm(3, 1, dst), imm]);
}

/// `add dst, imm32` (81 /0 id, sign-extended).
pub fn add_ri(s: &mut impl Sink, dst: u8, imm: u32) {
    s.put(&[rex_w(0, 0, dst), 0x81, modrm(3, 0, dst)]);
    s.put(&imm.to_le_bytes());
}

/// `xor dst, imm32` (81 /6 id, sign-extended).
pub fn xor_ri(s: &mut impl Sink, dst: u8, imm: u32) {
    s.put(&[rex_w(0, 0, dst), 0x81, modrm(3, 6, dst)]);
    s.put(&imm.to_le_bytes());
}

/// `mov dst, imm64` (REX.W B8+r io).
pub fn mov_ri64(s: &mut impl Sink, dst: u8, imm: u64) {
    s.put(&[rex_w(0, 0, dst), 0xB8 + (dst & 7)]);
    s.put(&imm.to_le_bytes());
}

/// `mul src` (unsigned rdx:rax = rax * src; F7 /4).
pub fn mul_r(s: &mut impl Sink, src: u8) {
    s.put(&[rex_w(0, 0, src), 0xF7, modrm(3, 4, src)]);
}

/// `imul src` (signed rdx:rax = rax * src; F7 /5).
pub fn imul_r(s: &mut impl Sink, src: u8) {
    s.put(&[rex_w(0, 0, src), 0xF7, modrm(3, 5, src)]);
}

/// `mov dst, [base + disp8]`.
pub fn load_disp8(s: &mut impl Sink, dst: u8, base: u8, disp: i8) {
    assert!(base & 7 != RSP, "rsp/r12 base needs a SIB byte");
    s.put(&[rex_w(dst, 0, base), 0x8B, modrm(1, dst, base), disp as u8]);
}

/// `mov [base + disp8], src`.
pub fn store_disp8(s: &mut impl Sink, base: u8, disp: i8, src: u8) {
    assert!(base & 7 != RSP, "rsp/r12 base needs a SIB byte");
    s.put(&[rex_w(src, 0, base), 0x89, modrm(1, src, base), disp as u8]);
}

pub fn push(s: &mut impl Sink, r: u8) {
    if r >= 8 {
        s.put(&[0x41, 0x50 + (r & 7)]);
    } else {
        s.put(&[0x50 + r]);
    }
}

pub fn pop(s: &mut impl Sink, r: u8) {
    if r >= 8 {
        s.put(&[0x41, 0x58 + (r & 7)]);
    } else {
        s.put(&[0x58 + r]);
    }
}

pub fn ret(s: &mut impl Sink) {
    s.put(&[0xC3]);
}

/// A memory operand `[base + index << scale + disp]`.
#[derive(Clone, Copy, Debug)]
pub struct Mem {
    pub base: u8,
    pub index: Option<(u8, u8)>,
    pub disp: i32,
}

impl Mem {
    pub fn base(base: u8, disp: i32) -> Self {
        Mem {
            base,
            index: None,
            disp,
        }
    }
    pub fn indexed(base: u8, index: u8, disp: i32) -> Self {
        assert!(index != RSP, "rsp cannot be an index");
        Mem {
            base,
            index: Some((index, 0)),
            disp,
        }
    }
    fn index_reg(&self) -> u8 {
        self.index.map_or(0, |(i, _)| i)
    }
}

/// ModRM (+SIB, +displacement) bytes for `reg` and memory operand `m`.
fn mem_bytes(reg: u8, m: &Mem) -> MemBytes {
    let mut v = MemBytes {
        bytes: [0; 7],
        len: 0,
    };
    let (md, disp_len) = if m.disp == 0 && m.base & 7 != RBP {
        (0u8, 0)
    } else if (-128..=127).contains(&m.disp) {
        (1, 1)
    } else {
        (2, 4)
    };
    match m.index {
        Some((idx, scale)) => {
            v.push(&[modrm(md, reg, 4), sib(scale, idx, m.base)]);
        }
        None if m.base & 7 == RSP => {
            v.push(&[modrm(md, reg, 4), sib(0, RSP, m.base)]);
        }
        None => v.push(&[modrm(md, reg, m.base)]),
    }
    match disp_len {
        1 => v.push(&[m.disp as i8 as u8]),
        4 => v.push(&m.disp.to_le_bytes()),
        _ => {}
    }
    v
}

/// ModRM, SIB and displacement bytes (at most 7), on the stack: the JIT emits one per memory
/// operand for every program, so no heap allocation here.
struct MemBytes {
    bytes: [u8; 7],
    len: usize,
}

impl MemBytes {
    fn push(&mut self, b: &[u8]) {
        self.bytes[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }
}

impl std::ops::Deref for MemBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// A 64-bit `op reg, [mem]` or `op [mem], reg` with a one-byte opcode (0x03 add, 0x2B sub,
/// 0x33 xor, 0x8B load, 0x89 store, 0x87 xchg).
pub fn op_rm(s: &mut impl Sink, opcode: u8, reg: u8, m: &Mem) {
    s.put(&[rex_w(reg, m.index_reg(), m.base), opcode]);
    s.put(&mem_bytes(reg, m));
}

/// `mov reg, qword [mem]`.
pub fn load64(s: &mut impl Sink, reg: u8, m: &Mem) {
    op_rm(s, 0x8B, reg, m);
}

/// `mov qword [mem], reg`.
pub fn store64(s: &mut impl Sink, m: &Mem, reg: u8) {
    op_rm(s, 0x89, reg, m);
}

/// `imul reg, [mem]`.
pub fn imul_rm(s: &mut impl Sink, reg: u8, m: &Mem) {
    s.put(&[rex_w(reg, m.index_reg(), m.base), 0x0F, 0xAF]);
    s.put(&mem_bytes(reg, m));
}

/// Group-3 unary forms on a 64-bit memory operand (F7 /ext: 4 mul, 5 imul).
pub fn group3_m(s: &mut impl Sink, ext: u8, m: &Mem) {
    s.put(&[rex_w(0, m.index_reg(), m.base), 0xF7]);
    s.put(&mem_bytes(ext, m));
}

/// Group-3 unary forms on a register (F7 /ext: 3 neg, 4 mul, 5 imul).
pub fn group3_r(s: &mut impl Sink, ext: u8, r: u8) {
    s.put(&[rex_w(0, 0, r), 0xF7, modrm(3, ext, r)]);
}

/// `op r64, imm32` of group 1 (81 /ext: 0 add, 4 and, 5 sub, 6 xor), sign-extended.
pub fn group1_ri(s: &mut impl Sink, ext: u8, r: u8, imm: i32) {
    s.put(&[rex_w(0, 0, r), 0x81, modrm(3, ext, r)]);
    s.put(&imm.to_le_bytes());
}

/// `and r32, imm32` (zero-extends to 64 bits).
pub fn and_r32_imm(s: &mut impl Sink, r: u8, imm: u32) {
    if let Some(x) = rex(0, r) {
        s.put(&[x]);
    }
    s.put(&[0x81, modrm(3, 4, r)]);
    s.put(&imm.to_le_bytes());
}

/// `lea r32, [base + disp32]` (the 32-bit result is zero-extended).
pub fn lea_r32_disp32(s: &mut impl Sink, dst: u8, base: u8, disp: i32) {
    if let Some(x) = rex(dst, base) {
        s.put(&[x]);
    }
    s.put(&[0x8D]);
    let m = Mem {
        base,
        index: None,
        disp,
    };
    let b = mem_bytes(dst, &m);
    if b[0] >> 6 == 2 {
        s.put(&b);
    } else {
        // Force a 32-bit displacement so the encoding size does not depend on imm.
        let rm_sib = if base & 7 == RSP { 2 } else { 1 };
        let mut head = [0u8; 2];
        head[..rm_sib].copy_from_slice(&b[..rm_sib]);
        head[0] = (head[0] & 0x3F) | 0x80;
        s.put(&head[..rm_sib]);
        s.put(&disp.to_le_bytes());
    }
}

/// `lea dst, [base + index << shift + disp32]`.
pub fn lea_sib_disp32(s: &mut impl Sink, dst: u8, base: u8, index: u8, shift: u8, disp: i32) {
    assert!(index != RSP);
    s.put(&[
        rex_w(dst, index, base),
        0x8D,
        modrm(2, dst, 4),
        sib(shift, index, base),
    ]);
    s.put(&disp.to_le_bytes());
}

/// `imul dst, src, imm32`.
pub fn imul_rri(s: &mut impl Sink, dst: u8, src: u8, imm: i32) {
    s.put(&[rex_w(dst, 0, src), 0x69, modrm(3, dst, src)]);
    s.put(&imm.to_le_bytes());
}

/// `ror r, cl` (ext 1) / `rol r, cl` (ext 0).
pub fn shift_cl(s: &mut impl Sink, ext: u8, r: u8) {
    s.put(&[rex_w(0, 0, r), 0xD3, modrm(3, ext, r)]);
}

/// `ror r, imm8` (ext 1) / `rol r, imm8` (ext 0) / `shl` (4) / `shr` (5).
pub fn shift_imm(s: &mut impl Sink, ext: u8, r: u8, imm: u8) {
    s.put(&[rex_w(0, 0, r), 0xC1, modrm(3, ext, r), imm]);
}

/// `mov r32, r32` (zero-extends).
pub fn mov_r32(s: &mut impl Sink, dst: u8, src: u8) {
    if let Some(x) = rex(src, dst) {
        s.put(&[x]);
    }
    s.put(&[0x89, modrm(3, src, dst)]);
}

/// `xchg a, b`.
pub fn xchg_rr(s: &mut impl Sink, a: u8, b: u8) {
    s.put(&[rex_w(b, 0, a), 0x87, modrm(3, b, a)]);
}

/// `test r64, imm32` (sign-extended).
pub fn test_ri(s: &mut impl Sink, r: u8, imm: i32) {
    s.put(&[rex_w(0, 0, r), 0xF7, modrm(3, 0, r)]);
    s.put(&imm.to_le_bytes());
}

/// `mov dword [mem], imm32`.
pub fn store32_imm(s: &mut impl Sink, m: &Mem, imm: u32) {
    let r = 0x40 | ((m.index_reg() >> 3) << 1) | (m.base >> 3);
    if r != 0x40 {
        s.put(&[r]);
    }
    s.put(&[0xC7]);
    s.put(&mem_bytes(0, m));
    s.put(&imm.to_le_bytes());
}

/// `mov r32, dword [mem]` (zero-extends).
pub fn load32(s: &mut impl Sink, reg: u8, m: &Mem) {
    let r = 0x40 | ((reg >> 3) << 2) | ((m.index_reg() >> 3) << 1) | (m.base >> 3);
    if r != 0x40 {
        s.put(&[r]);
    }
    s.put(&[0x8B]);
    s.put(&mem_bytes(reg, m));
}

/// `mov dword [mem], r32`.
pub fn store32(s: &mut impl Sink, m: &Mem, reg: u8) {
    let r = 0x40 | ((reg >> 3) << 2) | ((m.index_reg() >> 3) << 1) | (m.base >> 3);
    if r != 0x40 {
        s.put(&[r]);
    }
    s.put(&[0x89]);
    s.put(&mem_bytes(reg, m));
}

/// `test al, imm8`.
pub fn test_al(s: &mut impl Sink, imm: u8) {
    s.put(&[0xA8, imm]);
}

/// `jz rel32` / `jnz rel32` to an absolute code offset, given the offset of this instruction.
pub fn jcc_rel32(s: &mut impl Sink, cc: u8, at: usize, target: usize) {
    let rel = target as i64 - (at as i64 + 6);
    s.put(&[0x0F, 0x80 | cc, 0, 0, 0, 0][..2]);
    s.put(&(rel as i32).to_le_bytes());
}
pub const CC_Z: u8 = 0x4;
pub const CC_NZ: u8 = 0x5;

/// `jnz rel8` forward over `skip` bytes.
pub fn jnz_short(s: &mut impl Sink, skip: u8) {
    s.put(&[0x75, skip]);
}

/// A packed-double / SSE operation `op xmm_dst, xmm_src` with optional 66/F3 prefix and a
/// 0F-map opcode.
pub fn sse_rr(s: &mut impl Sink, prefix: Option<u8>, opcode: u8, dst: u8, src: u8) {
    if let Some(p) = prefix {
        s.put(&[p]);
    }
    if let Some(x) = rex(dst, src) {
        s.put(&[x]);
    }
    s.put(&[0x0F, opcode, modrm(3, dst, src)]);
}

/// `op xmm, [mem]` / `op [mem], xmm` for SSE forms.
pub fn sse_rm(s: &mut impl Sink, prefix: Option<u8>, opcode: u8, reg: u8, m: &Mem) {
    if let Some(p) = prefix {
        s.put(&[p]);
    }
    let r = 0x40 | ((reg >> 3) << 2) | ((m.index_reg() >> 3) << 1) | (m.base >> 3);
    if r != 0x40 {
        s.put(&[r]);
    }
    s.put(&[0x0F, opcode]);
    s.put(&mem_bytes(reg, m));
}

pub const ADDPD: u8 = 0x58;
pub const MULPD: u8 = 0x59;
pub const SUBPD: u8 = 0x5C;
pub const DIVPD: u8 = 0x5E;
pub const SQRTPD: u8 = 0x51;
pub const ANDPS: u8 = 0x54;
pub const ORPS: u8 = 0x56;
pub const XORPS: u8 = 0x57;
pub const MOVUPD_LOAD: u8 = 0x10;
pub const MOVUPD_STORE: u8 = 0x11;
pub const CVTDQ2PD: u8 = 0xE6; // with F3

/// `movupd xmm, [mem]`.
pub fn movupd_load(s: &mut impl Sink, xmm: u8, m: &Mem) {
    sse_rm(s, Some(0x66), MOVUPD_LOAD, xmm, m);
}

/// `movupd [mem], xmm`.
pub fn movupd_store(s: &mut impl Sink, m: &Mem, xmm: u8) {
    sse_rm(s, Some(0x66), MOVUPD_STORE, xmm, m);
}

/// `shufpd xmm, xmm, imm8`.
pub fn shufpd(s: &mut impl Sink, dst: u8, src: u8, imm: u8) {
    sse_rr(s, Some(0x66), 0xC6, dst, src);
    s.put(&[imm]);
}

/// `aesenc xmm, xmm` (`dec` = false) / `aesdec xmm, xmm`.
pub fn aes_round(s: &mut impl Sink, dec: bool, dst: u8, key: u8) {
    s.put(&[0x66]);
    if let Some(x) = rex(dst, key) {
        s.put(&[x]);
    }
    s.put(&[
        0x0F,
        0x38,
        if dec { 0xDE } else { 0xDC },
        modrm(3, dst, key),
    ]);
}

/// `ldmxcsr [mem]` (ext 2) / `stmxcsr [mem]` (ext 3).
pub fn mxcsr(s: &mut impl Sink, ext: u8, m: &Mem) {
    let r = 0x40 | ((m.index_reg() >> 3) << 1) | (m.base >> 3);
    if r != 0x40 {
        s.put(&[r]);
    }
    s.put(&[0x0F, 0xAE]);
    s.put(&mem_bytes(ext, m));
}

/// `prefetchnta [mem]`.
pub fn prefetchnta(s: &mut impl Sink, m: &Mem) {
    let r = 0x40 | ((m.index_reg() >> 3) << 1) | (m.base >> 3);
    if r != 0x40 {
        s.put(&[r]);
    }
    s.put(&[0x0F, 0x18]);
    s.put(&mem_bytes(0, m));
}

/// `prefetcht0 [mem]`.
pub fn prefetcht0(s: &mut impl Sink, m: &Mem) {
    let r = 0x40 | ((m.index_reg() >> 3) << 1) | (m.base >> 3);
    if r != 0x40 {
        s.put(&[r]);
    }
    s.put(&[0x0F, 0x18]);
    s.put(&mem_bytes(1, m));
}

/// `call rax`.
pub fn call_rax(s: &mut impl Sink) {
    s.put(&[0xFF, 0xD0]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden bytes, checked against the Intel SDM encodings (and `objdump -d` of the same
    /// instructions assembled by GNU as).
    #[test]
    fn golden_encodings() {
        let cases: Vec<(Vec<u8>, &str, Vec<u8>)> = vec![
            (
                {
                    let mut v = vec![];
                    sub_rr(&mut v, 8, 9);
                    v
                },
                "sub r8, r9",
                vec![0x4D, 0x29, 0xC8],
            ),
            (
                {
                    let mut v = vec![];
                    xor_rr(&mut v, 15, 8);
                    v
                },
                "xor r15, r8",
                vec![0x4D, 0x31, 0xC7],
            ),
            (
                {
                    let mut v = vec![];
                    imul_rr(&mut v, 10, 11);
                    v
                },
                "imul r10, r11",
                vec![0x4D, 0x0F, 0xAF, 0xD3],
            ),
            (
                {
                    let mut v = vec![];
                    lea_sib(&mut v, 9, 9, 12, 3);
                    v
                },
                "lea r9, [r9 + r12*8]",
                vec![0x4F, 0x8D, 0x0C, 0xE1],
            ),
            (
                {
                    let mut v = vec![];
                    ror_ri(&mut v, 14, 13);
                    v
                },
                "ror r14, 13",
                vec![0x49, 0xC1, 0xCE, 0x0D],
            ),
            (
                {
                    let mut v = vec![];
                    add_ri(&mut v, 8, 0x8000_0001);
                    v
                },
                "add r8, -0x7fffffff",
                vec![0x49, 0x81, 0xC0, 0x01, 0x00, 0x00, 0x80],
            ),
            (
                {
                    let mut v = vec![];
                    xor_ri(&mut v, 11, 5);
                    v
                },
                "xor r11, 5",
                vec![0x49, 0x81, 0xF3, 0x05, 0x00, 0x00, 0x00],
            ),
            (
                {
                    let mut v = vec![];
                    mov_ri64(&mut v, RAX, 0x0102030405060708);
                    v
                },
                "movabs rax, imm",
                vec![0x48, 0xB8, 8, 7, 6, 5, 4, 3, 2, 1],
            ),
            (
                {
                    let mut v = vec![];
                    mul_r(&mut v, 13);
                    v
                },
                "mul r13",
                vec![0x49, 0xF7, 0xE5],
            ),
            (
                {
                    let mut v = vec![];
                    imul_r(&mut v, 8);
                    v
                },
                "imul r8",
                vec![0x49, 0xF7, 0xE8],
            ),
            (
                {
                    let mut v = vec![];
                    mov_rr(&mut v, RAX, 12);
                    v
                },
                "mov rax, r12",
                vec![0x4C, 0x89, 0xE0],
            ),
            (
                {
                    let mut v = vec![];
                    mov_rr(&mut v, 10, RDX);
                    v
                },
                "mov r10, rdx",
                vec![0x49, 0x89, 0xD2],
            ),
            (
                {
                    let mut v = vec![];
                    load_disp8(&mut v, 8, RDI, 16);
                    v
                },
                "mov r8, [rdi+16]",
                vec![0x4C, 0x8B, 0x47, 0x10],
            ),
            (
                {
                    let mut v = vec![];
                    store_disp8(&mut v, RDI, 56, 15);
                    v
                },
                "mov [rdi+56], r15",
                vec![0x4C, 0x89, 0x7F, 0x38],
            ),
            (
                {
                    let mut v = vec![];
                    push(&mut v, 12);
                    pop(&mut v, 12);
                    ret(&mut v);
                    v
                },
                "push r12; pop r12; ret",
                vec![0x41, 0x54, 0x41, 0x5C, 0xC3],
            ),
            (
                {
                    let mut v = vec![];
                    store32_imm(&mut v, &Mem::base(RSP, 0x120), 0x3F80);
                    load32(&mut v, RAX, &Mem::base(RSP, 0));
                    store32(&mut v, &Mem::base(RCX, 0x158), RAX);
                    prefetcht0(&mut v, &Mem::indexed(RSI, RAX, 0));
                    mxcsr(
                        &mut v,
                        2,
                        &Mem {
                            base: RSP,
                            index: Some((RAX, 0)),
                            disp: 0x118,
                        },
                    );
                    v
                },
                "mov dword [rsp+0x120], 0x3f80; mov eax, [rsp]; mov [rcx+0x158], eax; \
                 prefetcht0 [rsi+rax]; ldmxcsr [rsp+rax+0x118]",
                vec![
                    0xC7, 0x84, 0x24, 0x20, 0x01, 0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x8B, 0x04,
                    0x24, 0x89, 0x81, 0x58, 0x01, 0x00, 0x00, 0x0F, 0x18, 0x0C, 0x06, 0x0F, 0xAE,
                    0x94, 0x04, 0x18, 0x01, 0x00, 0x00,
                ],
            ),
        ];
        for (got, text, want) in cases {
            assert_eq!(got, want, "{text}");
        }
    }
}
