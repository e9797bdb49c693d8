//! Argon2 compression G with AVX-512F: the 16-word permutation P runs on four registers
//! (a, b, c, d rows of its 4x4 word matrix), two independent P instances per register set (one
//! per 256-bit half), rotations with `vprorq`, BlaMka's 32x32 products with `vpmuludq`; the
//! diagonal step rotates the b, c, d rows with in-lane `vpermq`. Same signature and results as
//! [`super::compress_portable`]; the result's first word is handed out after the first quarter
//! of the column step (see [`super::CompressFn`]).

use super::{Block, CompressFn};
use std::arch::x86_64::*;

/// The kernel, where this CPU has AVX-512F.
pub fn kernel() -> Option<CompressFn> {
    std::arch::is_x86_feature_detected!("avx512f").then_some(compress_checked as CompressFn)
}

fn compress_checked(
    out: &mut Block,
    x: &Block,
    y: &Block,
    xor_into: bool,
    first_word: &mut dyn FnMut(u64),
) {
    // SAFETY: `kernel()` hands this function out only after detecting AVX-512F.
    unsafe { compress(out, x, y, xor_into, first_word) }
}

#[inline(always)]
unsafe fn blamka(x: __m512i, y: __m512i) -> __m512i {
    // SAFETY: register-only AVX-512F arithmetic; the caller enabled the feature.
    unsafe {
        let m = _mm512_mul_epu32(x, y);
        _mm512_add_epi64(_mm512_add_epi64(x, y), _mm512_add_epi64(m, m))
    }
}

#[inline(always)]
unsafe fn gb(a: &mut __m512i, b: &mut __m512i, c: &mut __m512i, d: &mut __m512i) {
    // SAFETY: as blamka.
    unsafe {
        *a = blamka(*a, *b);
        *d = _mm512_ror_epi64::<32>(_mm512_xor_si512(*d, *a));
        *c = blamka(*c, *d);
        *b = _mm512_ror_epi64::<24>(_mm512_xor_si512(*b, *c));
        *a = blamka(*a, *b);
        *d = _mm512_ror_epi64::<16>(_mm512_xor_si512(*d, *a));
        *c = blamka(*c, *d);
        *b = _mm512_ror_epi64::<63>(_mm512_xor_si512(*b, *c));
    }
}

/// P on two instances at once: column step, rotate rows b/c/d left by 1/2/3 words within each
/// 256-bit half (diagonals become columns), column step, rotate back.
#[inline(always)]
unsafe fn permute2(a: &mut __m512i, b: &mut __m512i, c: &mut __m512i, d: &mut __m512i) {
    // SAFETY: as blamka.
    unsafe {
        gb(a, b, c, d);
        *b = _mm512_permutex_epi64::<0b00_11_10_01>(*b);
        *c = _mm512_permutex_epi64::<0b01_00_11_10>(*c);
        *d = _mm512_permutex_epi64::<0b10_01_00_11>(*d);
        gb(a, b, c, d);
        *b = _mm512_permutex_epi64::<0b10_01_00_11>(*b);
        *c = _mm512_permutex_epi64::<0b01_00_11_10>(*c);
        *d = _mm512_permutex_epi64::<0b00_11_10_01>(*d);
    }
}

/// Swaps the middle two 128-bit lanes: turns a row-set register (the same 4 words of two rows,
/// one row per half) into a column-pair register (2 words of each of the two rows per half) and
/// back; its own inverse.
#[inline(always)]
unsafe fn swap_middle_lanes(v: __m512i) -> __m512i {
    // SAFETY: register-only AVX-512F shuffle; the caller enabled the feature.
    unsafe { _mm512_shuffle_i64x2::<0b11_01_10_00>(v, v) }
}

#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn compress(
    out: &mut Block,
    x: &Block,
    y: &Block,
    xor_into: bool,
    first_word: &mut dyn FnMut(u64),
) {
    // SAFETY: every load and store is a 64-byte chunk at word offset 8i (i < 16) of one of the
    // three 1 KiB blocks.
    unsafe {
        let load = |b: &Block, k: usize| _mm512_loadu_si512(b.as_ptr().add(k) as *const _);
        // The whole block stays in 16 registers. Row set s holds rows 2s and 2s+1 (one per
        // 256-bit half); its register t holds words 4t..4t+3 of each (the a, b, c, d rows of
        // the 4x4 matrix P works on). R = X ^ Y is loaded as rows [2s words 8h..8h+8].
        let mut v = [[_mm512_setzero_si512(); 4]; 4];
        for s in 0..4 {
            for h in 0..2 {
                // Words 8h..8h+8 of rows 2s and 2s+1 = registers t = 2h, 2h+1.
                let lo = _mm512_xor_si512(load(x, 32 * s + 8 * h), load(y, 32 * s + 8 * h));
                let hi =
                    _mm512_xor_si512(load(x, 32 * s + 16 + 8 * h), load(y, 32 * s + 16 + 8 * h));
                v[s][2 * h] = _mm512_shuffle_i64x2::<0b01_00_01_00>(lo, hi);
                v[s][2 * h + 1] = _mm512_shuffle_i64x2::<0b11_10_11_10>(lo, hi);
            }
        }
        for row_set in v.iter_mut() {
            let [a, b, c, d] = row_set;
            permute2(a, b, c, d);
        }
        // Columns: the column pair p (words 4p..4p+3 of every row) takes its a, b, c, d from
        // register p of row sets 0, 1, 2, 3, lanes regrouped two words per row.
        for p in 0..4 {
            let mut a = swap_middle_lanes(v[0][p]);
            let mut b = swap_middle_lanes(v[1][p]);
            let mut c = swap_middle_lanes(v[2][p]);
            let mut d = swap_middle_lanes(v[3][p]);
            permute2(&mut a, &mut b, &mut c, &mut d);
            if p == 0 {
                // Word 0 of the result is final once columns 0 and 1 are: hand it out now, so
                // that the next block's reference read starts while columns 2-7 are computed.
                let q0 = _mm_cvtsi128_si64(_mm512_castsi512_si128(a)) as u64;
                first_word(q0 ^ x[0] ^ y[0] ^ if xor_into { out[0] } else { 0 });
            }
            v[0][p] = swap_middle_lanes(a);
            v[1][p] = swap_middle_lanes(b);
            v[2][p] = swap_middle_lanes(c);
            v[3][p] = swap_middle_lanes(d);
        }
        // Back to memory order, XORed with R (and with the old block after the first pass).
        for s in 0..4 {
            for h in 0..2 {
                let (t0, t1) = (v[s][2 * h], v[s][2 * h + 1]);
                for (row, k) in [(0, 32 * s + 8 * h), (1, 32 * s + 16 + 8 * h)] {
                    let q = if row == 0 {
                        _mm512_shuffle_i64x2::<0b01_00_01_00>(t0, t1)
                    } else {
                        _mm512_shuffle_i64x2::<0b11_10_11_10>(t0, t1)
                    };
                    let mut w = _mm512_xor_si512(q, _mm512_xor_si512(load(x, k), load(y, k)));
                    if xor_into {
                        w = _mm512_xor_si512(w, load(out, k));
                    }
                    _mm512_storeu_si512(out.as_mut_ptr().add(k) as *mut _, w);
                }
            }
        }
    }
}
