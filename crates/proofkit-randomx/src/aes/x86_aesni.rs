//! AES-NI backend: the same functions as [`super::soft`], with `AESENC`/`AESDEC`.
//! The [`AesNi`] token can only be built after the CPU reported AES-NI, which is what makes the
//! `#[target_feature]` calls below sound.

use super::{Column, GEN1R_KEYS, GEN4R_KEYS, HASH1R_STATE, HASH1R_XKEYS};
use std::arch::x86_64::*;

/// Proof that this CPU has AES-NI (and SSE2, which every x86-64 has).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AesNi(());

impl AesNi {
    pub fn new() -> Option<Self> {
        std::arch::is_x86_feature_detected!("aes").then_some(AesNi(()))
    }

    #[inline]
    pub fn enc_round(self, state: Column, key: Column) -> Column {
        // SAFETY: the token exists only when AES-NI is present.
        unsafe { enc_round(state, key) }
    }

    #[inline]
    pub fn dec_round(self, state: Column, key: Column) -> Column {
        // SAFETY: as above.
        unsafe { dec_round(state, key) }
    }

    #[inline]
    pub fn mix_f_e(self, f: &mut [Column; 4], e: &[Column; 4]) {
        // SAFETY: as above.
        unsafe { mix_f_e(f, e) }
    }

    pub fn fill_1r(self, state: &mut [u8; 64], out: &mut [u8]) {
        // SAFETY: as above; out.len() % 64 == 0 is checked by the caller and only whole chunks
        // are touched.
        unsafe { fill_1r(state, out) }
    }

    pub fn fill_4r(self, state: &mut [u8; 64], out: &mut [u8]) {
        // SAFETY: as above.
        unsafe { fill_4r(state, out) }
    }

    pub fn hash_1r(self, input: &[u8]) -> [u8; 64] {
        // SAFETY: as above.
        unsafe { hash_1r(input) }
    }

    pub fn hash_1r_then_fill_1r(self, buf: &mut [u8], fill_state: &mut [u8; 64]) -> [u8; 64] {
        // SAFETY: as above; buf.len() % 64 == 0 is checked by the caller.
        unsafe { hash_1r_then_fill_1r(buf, fill_state) }
    }
}

#[inline(always)]
unsafe fn load(c: &[u8]) -> __m128i {
    debug_assert!(c.len() >= 16);
    // SAFETY: callers pass slices of at least 16 bytes; unaligned load.
    unsafe { _mm_loadu_si128(c.as_ptr() as *const __m128i) }
}

#[inline(always)]
unsafe fn store(c: &mut [u8], v: __m128i) {
    debug_assert!(c.len() >= 16);
    // SAFETY: as load.
    unsafe { _mm_storeu_si128(c.as_mut_ptr() as *mut __m128i, v) }
}

#[target_feature(enable = "aes,sse2")]
unsafe fn enc_round(state: Column, key: Column) -> Column {
    let mut out = [0u8; 16];
    // SAFETY: 16-byte arrays.
    unsafe { store(&mut out, _mm_aesenc_si128(load(&state), load(&key))) };
    out
}

#[target_feature(enable = "aes,sse2")]
unsafe fn dec_round(state: Column, key: Column) -> Column {
    let mut out = [0u8; 16];
    // SAFETY: 16-byte arrays.
    unsafe { store(&mut out, _mm_aesdec_si128(load(&state), load(&key))) };
    out
}

#[target_feature(enable = "aes,sse2")]
unsafe fn mix_f_e(f: &mut [Column; 4], e: &[Column; 4]) {
    // SAFETY: all loads and stores are on 16-byte arrays.
    unsafe {
        let (mut f0, mut f1, mut f2, mut f3) = (load(&f[0]), load(&f[1]), load(&f[2]), load(&f[3]));
        for k in e {
            let k = load(k);
            f0 = _mm_aesenc_si128(f0, k);
            f1 = _mm_aesdec_si128(f1, k);
            f2 = _mm_aesenc_si128(f2, k);
            f3 = _mm_aesdec_si128(f3, k);
        }
        store(&mut f[0], f0);
        store(&mut f[1], f1);
        store(&mut f[2], f2);
        store(&mut f[3], f3);
    }
}

#[target_feature(enable = "aes,sse2")]
unsafe fn fill_1r(state: &mut [u8; 64], out: &mut [u8]) {
    // SAFETY: state is 64 bytes; each chunk is exactly 64 bytes.
    unsafe {
        let k: [__m128i; 4] = std::array::from_fn(|i| load(&GEN1R_KEYS[i]));
        let mut s: [__m128i; 4] = std::array::from_fn(|i| load(&state[16 * i..]));
        for chunk in out.chunks_exact_mut(64) {
            s[0] = _mm_aesdec_si128(s[0], k[0]);
            s[1] = _mm_aesenc_si128(s[1], k[1]);
            s[2] = _mm_aesdec_si128(s[2], k[2]);
            s[3] = _mm_aesenc_si128(s[3], k[3]);
            for i in 0..4 {
                store(&mut chunk[16 * i..], s[i]);
            }
        }
        for i in 0..4 {
            store(&mut state[16 * i..], s[i]);
        }
    }
}

#[target_feature(enable = "aes,sse2")]
unsafe fn fill_4r(state: &mut [u8; 64], out: &mut [u8]) {
    // SAFETY: as fill_1r.
    unsafe {
        let k: [__m128i; 8] = std::array::from_fn(|i| load(&GEN4R_KEYS[i]));
        let mut s: [__m128i; 4] = std::array::from_fn(|i| load(&state[16 * i..]));
        for chunk in out.chunks_exact_mut(64) {
            for r in 0..4 {
                s[0] = _mm_aesdec_si128(s[0], k[r]);
                s[1] = _mm_aesenc_si128(s[1], k[r]);
                s[2] = _mm_aesdec_si128(s[2], k[4 + r]);
                s[3] = _mm_aesenc_si128(s[3], k[4 + r]);
            }
            for i in 0..4 {
                store(&mut chunk[16 * i..], s[i]);
            }
        }
        for i in 0..4 {
            store(&mut state[16 * i..], s[i]);
        }
    }
}

#[target_feature(enable = "aes,sse2")]
unsafe fn hash_1r(input: &[u8]) -> [u8; 64] {
    // SAFETY: each block is exactly 64 bytes; the output is a 64-byte array.
    unsafe {
        let mut s: [__m128i; 4] = std::array::from_fn(|i| load(&HASH1R_STATE[i]));
        for block in input.chunks_exact(64) {
            s[0] = _mm_aesenc_si128(s[0], load(&block[0..]));
            s[1] = _mm_aesdec_si128(s[1], load(&block[16..]));
            s[2] = _mm_aesenc_si128(s[2], load(&block[32..]));
            s[3] = _mm_aesdec_si128(s[3], load(&block[48..]));
        }
        for xk in &HASH1R_XKEYS {
            let x = load(xk);
            s[0] = _mm_aesenc_si128(s[0], x);
            s[1] = _mm_aesdec_si128(s[1], x);
            s[2] = _mm_aesenc_si128(s[2], x);
            s[3] = _mm_aesdec_si128(s[3], x);
        }
        let mut out = [0u8; 64];
        for i in 0..4 {
            store(&mut out[16 * i..], s[i]);
        }
        out
    }
}

/// AesHash1R of `buf`, then `buf` overwritten by AesGenerator1R from `fill_state`, in one pass:
/// each 64-byte chunk is absorbed and then replaced. The two chains are independent, so their
/// AES latencies overlap (each alone is latency-bound at four blocks in flight).
#[target_feature(enable = "aes,sse2")]
unsafe fn hash_1r_then_fill_1r(buf: &mut [u8], fill_state: &mut [u8; 64]) -> [u8; 64] {
    // SAFETY: every chunk is exactly 64 bytes; the states are 64-byte arrays.
    unsafe {
        let k: [__m128i; 4] = std::array::from_fn(|i| load(&GEN1R_KEYS[i]));
        let mut g: [__m128i; 4] = std::array::from_fn(|i| load(&fill_state[16 * i..]));
        let mut h: [__m128i; 4] = std::array::from_fn(|i| load(&HASH1R_STATE[i]));
        for chunk in buf.chunks_exact_mut(64) {
            h[0] = _mm_aesenc_si128(h[0], load(&chunk[0..]));
            h[1] = _mm_aesdec_si128(h[1], load(&chunk[16..]));
            h[2] = _mm_aesenc_si128(h[2], load(&chunk[32..]));
            h[3] = _mm_aesdec_si128(h[3], load(&chunk[48..]));
            g[0] = _mm_aesdec_si128(g[0], k[0]);
            g[1] = _mm_aesenc_si128(g[1], k[1]);
            g[2] = _mm_aesdec_si128(g[2], k[2]);
            g[3] = _mm_aesenc_si128(g[3], k[3]);
            for i in 0..4 {
                store(&mut chunk[16 * i..], g[i]);
            }
        }
        for xk in &HASH1R_XKEYS {
            let x = load(xk);
            h[0] = _mm_aesenc_si128(h[0], x);
            h[1] = _mm_aesdec_si128(h[1], x);
            h[2] = _mm_aesenc_si128(h[2], x);
            h[3] = _mm_aesdec_si128(h[3], x);
        }
        for i in 0..4 {
            store(&mut fill_state[16 * i..], g[i]);
        }
        let mut out = [0u8; 64];
        for i in 0..4 {
            store(&mut out[16 * i..], h[i]);
        }
        out
    }
}
