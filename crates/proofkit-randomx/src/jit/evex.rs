//! EVEX encodings (Intel SDM vol. 2, 2.7) of the AVX-512 instructions the vector SuperscalarHash
//! compiler emits: 512-bit integer operations on zmm0-zmm31, memory operands `[base + disp32]`
//! (optionally broadcast from one qword) and the VSIB form of gathers. Everything is W1
//! (64-bit elements). Checked against GNU as in the tests.
#![deny(unsafe_code)]

use super::asm::{modrm, sib, Sink};

/// Opcode maps (EVEX.mm).
#[derive(Clone, Copy)]
pub enum Map {
    M0F = 1,
    M0F38 = 2,
}

/// Mandatory prefixes (EVEX.pp).
#[derive(Clone, Copy)]
pub enum Pp {
    P66 = 1,
    PF3 = 2,
}

/// `[base + disp32]`, optionally `{1to8}`-broadcast.
#[derive(Clone, Copy, Debug)]
pub struct VMem {
    pub base: u8,
    pub disp: i32,
    pub broadcast: bool,
}

/// The four prefix bytes. `reg` is ModRM.reg (5 bits), `vvvv` the extra source (5 bits; 0 when
/// unused), `rm_x` the 5th bit of a register rm (reg-reg forms) or of a VSIB index, `b_bit`
/// 4th bit of rm/base, `bcst` the broadcast bit, `aaa` the opmask.
#[allow(clippy::too_many_arguments)]
fn prefix(
    s: &mut impl Sink,
    map: Map,
    pp: Pp,
    reg: u8,
    vvvv: u8,
    x_bit: u8,
    b_bit: u8,
    v_hi: u8,
    bcst: bool,
    aaa: u8,
) {
    debug_assert!(reg < 32 && vvvv < 32 && aaa < 8);
    let p0 = ((!(reg >> 3) & 1) << 7)
        | ((!x_bit & 1) << 6)
        | ((!b_bit & 1) << 5)
        | ((!(reg >> 4) & 1) << 4)
        | map as u8;
    let p1 = 0x80 | ((!vvvv & 0xF) << 3) | 0x04 | pp as u8;
    let p2 = (0b10 << 5) | ((bcst as u8) << 4) | ((!v_hi & 1) << 3) | aaa;
    s.put(&[0x62, p0, p1, p2]);
}

/// `op zmm_dst, zmm_src1, zmm_src2`.
pub fn rrr(s: &mut impl Sink, map: Map, opcode: u8, dst: u8, src1: u8, src2: u8) {
    prefix(
        s,
        map,
        Pp::P66,
        dst,
        src1,
        src2 >> 4,
        (src2 >> 3) & 1,
        src1 >> 4,
        false,
        0,
    );
    s.put(&[opcode, modrm(3, dst & 7, src2 & 7)]);
}

fn mem_tail(s: &mut impl Sink, reg: u8, m: &VMem) {
    if m.base & 7 == 4 {
        s.put(&[modrm(2, reg & 7, 4), sib(0, 4, m.base & 7)]);
    } else {
        s.put(&[modrm(2, reg & 7, m.base & 7)]);
    }
    s.put(&m.disp.to_le_bytes());
}

/// `op zmm_dst{rc-sae}, zmm_src1, zmm_src2` (map 0F, 66, W1) with static rounding `rc`
/// (0 nearest, 1 down, 2 up, 3 toward zero: MXCSR.RC's order and RandomX's `fprc`).
pub fn rrr_rounded(s: &mut impl Sink, opcode: u8, dst: u8, src1: u8, src2: u8, rc: u8) {
    debug_assert!(dst < 32 && src1 < 32 && src2 < 32 && rc < 4);
    let p0 = ((!(dst >> 3) & 1) << 7)
        | ((!(src2 >> 4) & 1) << 6)
        | ((!(src2 >> 3) & 1) << 5)
        | ((!(dst >> 4) & 1) << 4)
        | Map::M0F as u8;
    let p1 = 0x80 | ((!src1 & 0xF) << 3) | 0x04 | Pp::P66 as u8;
    let p2 = (rc << 5) | 0x10 | ((!(src1 >> 4) & 1) << 3);
    s.put(&[0x62, p0, p1, p2, opcode, modrm(3, dst & 7, src2 & 7)]);
}

/// `op zmm_dst, zmm_src1, [mem]` (or `[mem]{1to8}`).
pub fn rrm(s: &mut impl Sink, map: Map, opcode: u8, dst: u8, src1: u8, m: &VMem) {
    debug_assert!(m.base < 16);
    prefix(
        s,
        map,
        Pp::P66,
        dst,
        src1,
        0,
        m.base >> 3,
        src1 >> 4,
        m.broadcast,
        0,
    );
    s.put(&[opcode]);
    mem_tail(s, dst, m);
}

/// The shift/rotate-by-immediate group (66 0F 72/73 /ext ib): `op zmm_dst, zmm_src, imm`.
fn shift_imm(s: &mut impl Sink, opcode: u8, ext: u8, dst: u8, src: u8, imm: u8) {
    prefix(
        s,
        Map::M0F,
        Pp::P66,
        ext,
        dst,
        src >> 4,
        (src >> 3) & 1,
        dst >> 4,
        false,
        0,
    );
    s.put(&[opcode, modrm(3, ext, src & 7), imm]);
}

pub fn vpaddq(s: &mut impl Sink, dst: u8, a: u8, b: u8) {
    rrr(s, Map::M0F, 0xD4, dst, a, b);
}
pub fn vpsubq(s: &mut impl Sink, dst: u8, a: u8, b: u8) {
    rrr(s, Map::M0F, 0xFB, dst, a, b);
}
pub fn vpxorq(s: &mut impl Sink, dst: u8, a: u8, b: u8) {
    rrr(s, Map::M0F, 0xEF, dst, a, b);
}
pub fn vpandq(s: &mut impl Sink, dst: u8, a: u8, b: u8) {
    rrr(s, Map::M0F, 0xDB, dst, a, b);
}
/// Unsigned 32 x 32 -> 64-bit products of the low halves.
pub fn vpmuludq(s: &mut impl Sink, dst: u8, a: u8, b: u8) {
    rrr(s, Map::M0F, 0xF4, dst, a, b);
}
/// Low 64 bits of 64 x 64-bit products (AVX512DQ).
pub fn vpmullq(s: &mut impl Sink, dst: u8, a: u8, b: u8) {
    rrr(s, Map::M0F38, 0x40, dst, a, b);
}
pub fn vpsrlq(s: &mut impl Sink, dst: u8, src: u8, imm: u8) {
    shift_imm(s, 0x73, 2, dst, src, imm);
}
pub fn vpsllq(s: &mut impl Sink, dst: u8, src: u8, imm: u8) {
    shift_imm(s, 0x73, 6, dst, src, imm);
}
pub fn vpsraq(s: &mut impl Sink, dst: u8, src: u8, imm: u8) {
    shift_imm(s, 0x72, 4, dst, src, imm);
}
pub fn vprorq(s: &mut impl Sink, dst: u8, src: u8, imm: u8) {
    shift_imm(s, 0x72, 0, dst, src, imm);
}

/// `vmovdqu64 zmm, [mem]`.
pub fn load(s: &mut impl Sink, dst: u8, m: &VMem) {
    debug_assert!(!m.broadcast && m.base < 16);
    prefix(s, Map::M0F, Pp::PF3, dst, 0, 0, m.base >> 3, 0, false, 0);
    s.put(&[0x6F]);
    mem_tail(s, dst, m);
}

/// `vmovdqu64 [mem], zmm`.
pub fn store(s: &mut impl Sink, m: &VMem, src: u8) {
    debug_assert!(!m.broadcast && m.base < 16);
    prefix(s, Map::M0F, Pp::PF3, src, 0, 0, m.base >> 3, 0, false, 0);
    s.put(&[0x7F]);
    mem_tail(s, src, m);
}

/// `kxnorw k, k0, k0`: all mask bits set (a gather clears its mask as it completes). Reading
/// only k0, which nothing writes, keeps it free of a dependency on the previous gather.
pub fn kxnorw_all(s: &mut impl Sink, k: u8) {
    debug_assert!((1..8).contains(&k));
    // VEX.L1.0F.W0 46 /r, two-byte VEX form: R=1, vvvv = ~0, L = 1, pp = 0.
    s.put(&[0xC5, 0xFC, 0x46, modrm(3, k, 0)]);
}

/// `vzeroupper`.
pub fn vzeroupper(s: &mut impl Sink) {
    s.put(&[0xC5, 0xF8, 0x77]);
}

/// `vpgatherqq zmm_dst{k}, [base + zmm_index * 8 + disp32]`: qword `i` from `base + index[i] * 8
/// + disp` where mask bit `i` is set.
pub fn vpgatherqq(s: &mut impl Sink, dst: u8, k: u8, base: u8, index: u8, disp: i32) {
    debug_assert!(dst != index && (1..8).contains(&k) && base < 16);
    prefix(
        s,
        Map::M0F38,
        Pp::P66,
        dst,
        0,
        (index >> 3) & 1,
        base >> 3,
        index >> 4,
        false,
        k,
    );
    s.put(&[0x91, modrm(2, dst & 7, 4), sib(3, index & 7, base & 7)]);
    s.put(&disp.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jit::asm::{RDI, RDX, RSI, RSP};

    fn bytes(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut v = Vec::new();
        f(&mut v);
        v
    }

    /// Golden bytes from GNU as 2.40 (`as --64`, `objdump -d`) for the same instructions.
    #[test]
    fn encodings_match_gnu_as() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (bytes(|s| vpaddq(s, 0, 1, 2)), "62f1f548d4c2"),
            (bytes(|s| vpaddq(s, 17, 9, 30)), "6281b548d4ce"),
            (bytes(|s| vpsubq(s, 3, 3, 12)), "62d1e548fbdc"),
            (bytes(|s| vpxorq(s, 25, 25, 7)), "6261b540efcf"),
            (bytes(|s| vpandq(s, 8, 8, 15)), "6251bd48dbc7"),
            (bytes(|s| vpmuludq(s, 10, 3, 4)), "6271e548f4d4"),
            (bytes(|s| vpmullq(s, 5, 5, 20)), "62b2d54840ec"),
            (bytes(|s| vpsrlq(s, 8, 3, 32)), "62f1bd4873d320"),
            (bytes(|s| vpsllq(s, 9, 20, 3)), "62b1b54873f403"),
            (bytes(|s| vpsraq(s, 14, 14, 63)), "62d18d4872e63f"),
            (bytes(|s| vprorq(s, 22, 6, 13)), "62f1cd4072c60d"),
            (
                bytes(|s| {
                    rrm(
                        s,
                        Map::M0F,
                        0xD4,
                        2,
                        2,
                        &VMem {
                            base: RDX,
                            disp: 0x128,
                            broadcast: true,
                        },
                    )
                }),
                "62f1ed58d49228010000",
            ),
            (
                bytes(|s| {
                    rrm(
                        s,
                        Map::M0F38,
                        0x40,
                        19,
                        19,
                        &VMem {
                            base: RDX,
                            disp: 8,
                            broadcast: true,
                        },
                    )
                }),
                "62e2e550409a08000000",
            ),
            (
                bytes(|s| {
                    load(
                        s,
                        6,
                        &VMem {
                            base: RDI,
                            disp: 0x40,
                            broadcast: false,
                        },
                    )
                }),
                "62f1fe486fb740000000",
            ),
            (
                bytes(|s| {
                    store(
                        s,
                        &VMem {
                            base: RSP,
                            disp: 0x80,
                            broadcast: false,
                        },
                        27,
                    )
                }),
                "6261fe487f9c2480000000",
            ),
            (bytes(|s| kxnorw_all(s, 3)), "c5fc46d8"),
            (bytes(vzeroupper), "c5f877"),
            (
                bytes(|s| vpgatherqq(s, 8, 1, RSI, 15, 0x18)),
                "6232fd499184fe18000000",
            ),
        ];
        for (got, want) in cases {
            let got: String = got.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(got, want);
        }
    }
}
