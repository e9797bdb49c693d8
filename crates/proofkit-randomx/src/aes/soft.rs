//! Portable AES rounds with 32-bit T-tables built at compile time from the S-box definition
//! (FIPS-197 5.1.1: multiplicative inverse in GF(2^8) followed by the affine transform), and the
//! RandomX generators on top of them. Runs on any CPU; the oracle for the AES-NI backend.
#![deny(unsafe_code)]

use super::{join64, split64, Column, GEN1R_KEYS, GEN4R_KEYS, HASH1R_STATE, HASH1R_XKEYS};

const fn gf_mul(mut a: u8, mut b: u8) -> u8 {
    let mut p = 0u8;
    while b != 0 {
        if b & 1 != 0 {
            p ^= a;
        }
        let hi = a & 0x80;
        a <<= 1;
        if hi != 0 {
            a ^= 0x1b;
        }
        b >>= 1;
    }
    p
}

const fn gf_inv(a: u8) -> u8 {
    // a^254 = a^-1 in GF(2^8); 0 maps to 0.
    let mut r = 1u8;
    let mut i = 0;
    while i < 254 {
        r = gf_mul(r, a);
        i += 1;
    }
    if a == 0 {
        0
    } else {
        r
    }
}

const fn build_sbox() -> [u8; 256] {
    let mut s = [0u8; 256];
    let mut x = 0;
    while x < 256 {
        let b = gf_inv(x as u8);
        s[x] = b ^ b.rotate_left(1) ^ b.rotate_left(2) ^ b.rotate_left(3) ^ b.rotate_left(4) ^ 0x63;
        x += 1;
    }
    s
}

const fn build_inv_sbox(s: &[u8; 256]) -> [u8; 256] {
    let mut inv = [0u8; 256];
    let mut x = 0;
    while x < 256 {
        inv[s[x] as usize] = x as u8;
        x += 1;
    }
    inv
}

pub(crate) const SBOX: [u8; 256] = build_sbox();
pub(crate) const INV_SBOX: [u8; 256] = build_inv_sbox(&SBOX);

/// Contribution of an input byte in row 0 to its output column, rows 0..3 as bytes 0..3.
const fn build_table(sbox: &[u8; 256], coef: [u8; 4]) -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut x = 0;
    while x < 256 {
        let s = sbox[x];
        t[x] = (gf_mul(s, coef[0]) as u32)
            | ((gf_mul(s, coef[1]) as u32) << 8)
            | ((gf_mul(s, coef[2]) as u32) << 16)
            | ((gf_mul(s, coef[3]) as u32) << 24);
        x += 1;
    }
    t
}

const TE0: [u32; 256] = build_table(&SBOX, [2, 1, 1, 3]);
const TD0: [u32; 256] = build_table(&INV_SBOX, [14, 9, 13, 11]);

#[inline(always)]
fn words(c: &Column) -> [u32; 4] {
    [
        u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
        u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        u32::from_le_bytes([c[8], c[9], c[10], c[11]]),
        u32::from_le_bytes([c[12], c[13], c[14], c[15]]),
    ]
}

#[inline(always)]
fn column(w: [u32; 4]) -> Column {
    let mut c = [0u8; 16];
    for i in 0..4 {
        c[4 * i..4 * i + 4].copy_from_slice(&w[i].to_le_bytes());
    }
    c
}

#[inline(always)]
fn byte(w: u32, row: u32) -> usize {
    ((w >> (8 * row)) & 0xff) as usize
}

/// One encryption round (x86 AESENC semantics).
#[inline]
pub fn enc_round(state: Column, key: Column) -> Column {
    let s = words(&state);
    let k = words(&key);
    let mut o = [0u32; 4];
    for j in 0..4 {
        // ShiftRows: row r of output column j comes from input column j + r.
        o[j] = TE0[byte(s[j], 0)]
            ^ TE0[byte(s[(j + 1) & 3], 1)].rotate_left(8)
            ^ TE0[byte(s[(j + 2) & 3], 2)].rotate_left(16)
            ^ TE0[byte(s[(j + 3) & 3], 3)].rotate_left(24)
            ^ k[j];
    }
    column(o)
}

/// One decryption round (x86 AESDEC semantics).
#[inline]
pub fn dec_round(state: Column, key: Column) -> Column {
    let s = words(&state);
    let k = words(&key);
    let mut o = [0u32; 4];
    for j in 0..4 {
        // InvShiftRows: row r of output column j comes from input column j - r.
        o[j] = TD0[byte(s[j], 0)]
            ^ TD0[byte(s[(j + 3) & 3], 1)].rotate_left(8)
            ^ TD0[byte(s[(j + 2) & 3], 2)].rotate_left(16)
            ^ TD0[byte(s[(j + 1) & 3], 3)].rotate_left(24)
            ^ k[j];
    }
    column(o)
}

/// Byte-by-byte textbook round, the oracle for the T-table version.
pub fn reference_enc_round(state: Column, key: Column) -> Column {
    let mut t = [0u8; 16];
    for c in 0..4 {
        for r in 0..4 {
            t[4 * c + r] = SBOX[state[4 * ((c + r) % 4) + r] as usize];
        }
    }
    let mut o = [0u8; 16];
    for c in 0..4 {
        let a = &t[4 * c..4 * c + 4];
        for r in 0..4 {
            o[4 * c + r] = gf_mul(a[r], 2)
                ^ gf_mul(a[(r + 1) % 4], 3)
                ^ a[(r + 2) % 4]
                ^ a[(r + 3) % 4]
                ^ key[4 * c + r];
        }
    }
    o
}

/// Byte-by-byte textbook inverse round, the oracle for the T-table version.
pub fn reference_dec_round(state: Column, key: Column) -> Column {
    let mut t = [0u8; 16];
    for c in 0..4 {
        for r in 0..4 {
            t[4 * c + r] = INV_SBOX[state[4 * ((c + 4 - r) % 4) + r] as usize];
        }
    }
    let mut o = [0u8; 16];
    for c in 0..4 {
        let a = &t[4 * c..4 * c + 4];
        for r in 0..4 {
            o[4 * c + r] = gf_mul(a[r], 14)
                ^ gf_mul(a[(r + 1) % 4], 11)
                ^ gf_mul(a[(r + 2) % 4], 13)
                ^ gf_mul(a[(r + 3) % 4], 9)
                ^ key[4 * c + r];
        }
    }
    o
}

pub fn mix_f_e(f: &mut [Column; 4], e: &[Column; 4]) {
    for k in e {
        f[0] = enc_round(f[0], *k);
        f[1] = dec_round(f[1], *k);
        f[2] = enc_round(f[2], *k);
        f[3] = dec_round(f[3], *k);
    }
}

pub fn fill_1r(state: &mut [u8; 64], out: &mut [u8]) {
    let mut s = split64(state);
    for chunk in out.chunks_exact_mut(64) {
        s[0] = dec_round(s[0], GEN1R_KEYS[0]);
        s[1] = enc_round(s[1], GEN1R_KEYS[1]);
        s[2] = dec_round(s[2], GEN1R_KEYS[2]);
        s[3] = enc_round(s[3], GEN1R_KEYS[3]);
        chunk.copy_from_slice(&join64(&s));
    }
    *state = join64(&s);
}

pub fn fill_4r(state: &mut [u8; 64], out: &mut [u8]) {
    let mut s = split64(state);
    for chunk in out.chunks_exact_mut(64) {
        for r in 0..4 {
            s[0] = dec_round(s[0], GEN4R_KEYS[r]);
            s[1] = enc_round(s[1], GEN4R_KEYS[r]);
            s[2] = dec_round(s[2], GEN4R_KEYS[4 + r]);
            s[3] = enc_round(s[3], GEN4R_KEYS[4 + r]);
        }
        chunk.copy_from_slice(&join64(&s));
    }
    *state = join64(&s);
}

pub fn hash_1r(input: &[u8]) -> [u8; 64] {
    let mut s = HASH1R_STATE;
    for block in input.chunks_exact(64) {
        let k = split64(block.try_into().expect("64-byte chunk"));
        s[0] = enc_round(s[0], k[0]);
        s[1] = dec_round(s[1], k[1]);
        s[2] = enc_round(s[2], k[2]);
        s[3] = dec_round(s[3], k[3]);
    }
    for xk in HASH1R_XKEYS {
        s[0] = enc_round(s[0], xk);
        s[1] = dec_round(s[1], xk);
        s[2] = enc_round(s[2], xk);
        s[3] = dec_round(s[3], xk);
    }
    join64(&s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbox_known_values() {
        assert_eq!(SBOX[0x00], 0x63);
        assert_eq!(SBOX[0x53], 0xed);
        assert_eq!(INV_SBOX[0x63], 0x00);
    }

    #[test]
    fn tables_equal_textbook_rounds() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..200 {
            let mut s = [0u8; 16];
            let mut k = [0u8; 16];
            for i in 0..16 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                s[i] = (x >> 56) as u8;
                k[i] = (x >> 48) as u8;
            }
            assert_eq!(enc_round(s, k), reference_enc_round(s, k));
            assert_eq!(dec_round(s, k), reference_dec_round(s, k));
        }
    }
}
