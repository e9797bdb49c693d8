//! Argon2 compression G with AVX-512F: the 16-word permutation P runs on four registers
//! (a, b, c, d rows of its 4x4 word matrix), two independent P instances per register set (one
//! per 256-bit half), rotations with `vprorq`, BlaMka's 32x32 products with `vpmuludq`; the
//! diagonal step rotates the b, c, d rows with in-lane `vpermq`. Same signature and results as
//! [`super::compress_portable`].

use super::{Block, CompressFn};
use std::arch::x86_64::*;

/// The kernel, where this CPU has AVX-512F.
pub fn kernel() -> Option<CompressFn> {
    std::arch::is_x86_feature_detected!("avx512f").then_some(compress_checked as CompressFn)
}

fn compress_checked(out: &mut Block, x: &Block, y: &Block, xor_into: bool) {
    // SAFETY: `kernel()` hands this function out only after detecting AVX-512F.
    unsafe { compress(out, x, y, xor_into) }
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

/// A 512-bit value from two 256-bit halves at word offsets `lo` and `hi` of `q`.
#[inline(always)]
unsafe fn load2x4(q: &[u64; 128], lo: usize, hi: usize) -> __m512i {
    debug_assert!(lo + 4 <= 128 && hi + 4 <= 128);
    // SAFETY: both 4-word ranges lie inside q (checked above in debug, by construction here).
    unsafe {
        let l = _mm256_loadu_si256(q.as_ptr().add(lo) as *const __m256i);
        let h = _mm256_loadu_si256(q.as_ptr().add(hi) as *const __m256i);
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(l), h)
    }
}

#[inline(always)]
unsafe fn store2x4(q: &mut [u64; 128], lo: usize, hi: usize, v: __m512i) {
    debug_assert!(lo + 4 <= 128 && hi + 4 <= 128);
    // SAFETY: as load2x4.
    unsafe {
        _mm256_storeu_si256(
            q.as_mut_ptr().add(lo) as *mut __m256i,
            _mm512_castsi512_si256(v),
        );
        _mm256_storeu_si256(
            q.as_mut_ptr().add(hi) as *mut __m256i,
            _mm512_extracti64x4_epi64::<1>(v),
        );
    }
}

/// A 512-bit value from four 2-word pieces at word offsets `o`.
#[inline(always)]
unsafe fn load4x2(q: &[u64; 128], o: [usize; 4]) -> __m512i {
    // SAFETY: every piece lies inside q (offsets < 127, even).
    unsafe {
        let p = |i: usize| _mm_loadu_si128(q.as_ptr().add(o[i]) as *const __m128i);
        let v = _mm512_castsi128_si512(p(0));
        let v = _mm512_inserti64x2::<1>(v, p(1));
        let v = _mm512_inserti64x2::<2>(v, p(2));
        _mm512_inserti64x2::<3>(v, p(3))
    }
}

#[inline(always)]
unsafe fn store4x2(q: &mut [u64; 128], o: [usize; 4], v: __m512i) {
    // SAFETY: as load4x2.
    unsafe {
        _mm_storeu_si128(
            q.as_mut_ptr().add(o[0]) as *mut __m128i,
            _mm512_castsi512_si128(v),
        );
        _mm_storeu_si128(
            q.as_mut_ptr().add(o[1]) as *mut __m128i,
            _mm512_extracti64x2_epi64::<1>(v),
        );
        _mm_storeu_si128(
            q.as_mut_ptr().add(o[2]) as *mut __m128i,
            _mm512_extracti64x2_epi64::<2>(v),
        );
        _mm_storeu_si128(
            q.as_mut_ptr().add(o[3]) as *mut __m128i,
            _mm512_extracti64x2_epi64::<3>(v),
        );
    }
}

#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn compress(out: &mut Block, x: &Block, y: &Block, xor_into: bool) {
    // SAFETY: all memory accesses are 64-byte chunks of the three 1 KiB blocks or of the local
    // q (offsets multiples of 8 words below 128).
    unsafe {
        // Rows: row i is words 16i..16i+16 = (a, b, c, d) at 16i + 0, 4, 8, 12; rows 2p, 2p+1
        // share a register set. R = X ^ Y is formed here (and kept for the final XOR), so the
        // block is read once.
        let mut r = [0u64; 128];
        let mut q = [0u64; 128];
        for p in 0..4 {
            let (r0, r1) = (32 * p, 32 * p + 16);
            let mut v = [_mm512_setzero_si512(); 4];
            for (k, vk) in v.iter_mut().enumerate() {
                let o = 4 * k;
                *vk = _mm512_xor_si512(load2x4(x, r0 + o, r1 + o), load2x4(y, r0 + o, r1 + o));
                store2x4(&mut r, r0 + o, r1 + o, *vk);
            }
            let [mut a, mut b, mut c, mut d] = v;
            permute2(&mut a, &mut b, &mut c, &mut d);
            store2x4(&mut q, r0, r1, a);
            store2x4(&mut q, r0 + 4, r1 + 4, b);
            store2x4(&mut q, r0 + 8, r1 + 8, c);
            store2x4(&mut q, r0 + 12, r1 + 12, d);
        }
        // Columns: column j is the word pairs 2j + 16m (m = 0..8); its a row is the pairs of
        // m = 0, 1, b of m = 2, 3, c of 4, 5, d of 6, 7. Columns 2p and 2p+1 share a set.
        for p in 0..4 {
            let (j0, j1) = (4 * p, 4 * p + 2);
            let off = |m: usize| {
                [
                    j0 + 16 * m,
                    j0 + 16 * (m + 1),
                    j1 + 16 * m,
                    j1 + 16 * (m + 1),
                ]
            };
            let mut a = load4x2(&q, off(0));
            let mut b = load4x2(&q, off(2));
            let mut c = load4x2(&q, off(4));
            let mut d = load4x2(&q, off(6));
            permute2(&mut a, &mut b, &mut c, &mut d);
            store4x2(&mut q, off(0), a);
            store4x2(&mut q, off(2), b);
            store4x2(&mut q, off(4), c);
            store4x2(&mut q, off(6), d);
        }
        for k in (0..128).step_by(8) {
            let mut v = _mm512_xor_si512(
                _mm512_loadu_si512(q.as_ptr().add(k) as *const _),
                _mm512_loadu_si512(r.as_ptr().add(k) as *const _),
            );
            if xor_into {
                v = _mm512_xor_si512(v, _mm512_loadu_si512(out.as_ptr().add(k) as *const _));
            }
            _mm512_storeu_si512(out.as_mut_ptr().add(k) as *mut _, v);
        }
    }
}
