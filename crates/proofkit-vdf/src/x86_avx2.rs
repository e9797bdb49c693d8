//! AVX2 backend: 8 chains per 256-bit register (one lane each), with one or two register sets
//! in flight. AVX2 has no rotate, so rotates are two shifts and an OR.
//!
//! [`Avx2`] is the token: it can only be built by [`Avx2::detect`] after the CPU check, so every
//! call into this file's `#[target_feature]` code is sound by construction.

use crate::compress::{chain, Ways, Word};
use crate::State;
use std::arch::x86_64::*;

/// Proof that the running CPU has AVX2 (the private field keeps it unforgeable).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2(());

impl Avx2 {
    pub(crate) fn detect() -> Option<Self> {
        proofkit_core::cpu::features().avx2.then_some(Avx2(()))
    }

    /// Advances 8 chains by `n` links.
    pub(crate) fn chains8(self, states: &mut [State; 8], n: u64) {
        // SAFETY: `self` exists only if AVX2 was detected on this CPU.
        unsafe { chains8(states, n) }
    }

    /// Advances 16 chains by `n` links, as two interleaved 8-lane register sets.
    pub(crate) fn chains16(self, states: &mut [State; 16], n: u64) {
        // SAFETY: as above.
        unsafe { chains16(states, n) }
    }
}

/// Eight lanes. Private to this file: the only code that can run its methods is the
/// `#[target_feature(enable = "avx2")]` kernels below.
#[derive(Clone, Copy)]
struct V(__m256i);

macro_rules! ror {
    ($x:expr, $r:literal) => {
        _mm256_or_si256(
            _mm256_srli_epi32::<$r>($x),
            _mm256_slli_epi32::<{ 32 - $r }>($x),
        )
    };
}

impl Word for V {
    #[inline(always)]
    fn splat(x: u32) -> Self {
        // SAFETY: only reached from the AVX2 kernels of this file (V is private).
        V(unsafe { _mm256_set1_epi32(x as i32) })
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        // SAFETY: as in `splat`.
        V(unsafe { _mm256_add_epi32(self.0, o.0) })
    }
    #[inline(always)]
    fn bsig0(self) -> Self {
        let x = self.0;
        // SAFETY: as in `splat`.
        V(unsafe { _mm256_xor_si256(_mm256_xor_si256(ror!(x, 2), ror!(x, 13)), ror!(x, 22)) })
    }
    #[inline(always)]
    fn bsig1(self) -> Self {
        let x = self.0;
        // SAFETY: as in `splat`.
        V(unsafe { _mm256_xor_si256(_mm256_xor_si256(ror!(x, 6), ror!(x, 11)), ror!(x, 25)) })
    }
    #[inline(always)]
    fn ssig0(self) -> Self {
        let x = self.0;
        // SAFETY: as in `splat`.
        V(unsafe {
            _mm256_xor_si256(
                _mm256_xor_si256(ror!(x, 7), ror!(x, 18)),
                _mm256_srli_epi32::<3>(x),
            )
        })
    }
    #[inline(always)]
    fn ssig1(self) -> Self {
        let x = self.0;
        // SAFETY: as in `splat`.
        V(unsafe {
            _mm256_xor_si256(
                _mm256_xor_si256(ror!(x, 17), ror!(x, 19)),
                _mm256_srli_epi32::<10>(x),
            )
        })
    }
    #[inline(always)]
    fn ch(x: Self, y: Self, z: Self) -> Self {
        // SAFETY: as in `splat`.
        V(unsafe { _mm256_xor_si256(z.0, _mm256_and_si256(x.0, _mm256_xor_si256(y.0, z.0))) })
    }
    #[inline(always)]
    fn maj(x: Self, y: Self, z: Self) -> Self {
        // SAFETY: as in `splat`.
        V(unsafe {
            _mm256_or_si256(
                _mm256_and_si256(x.0, y.0),
                _mm256_and_si256(z.0, _mm256_or_si256(x.0, y.0)),
            )
        })
    }
}

/// Word `j` of lanes `base..base + 8`.
#[inline(always)]
fn load(states: &[State], base: usize, j: usize) -> V {
    let lanes: [u32; 8] = std::array::from_fn(|i| states[base + i][j]);
    // SAFETY: `lanes` is 32 readable bytes; loadu has no alignment requirement. Only reached
    // from the AVX2 kernels below.
    V(unsafe { _mm256_loadu_si256(lanes.as_ptr() as *const __m256i) })
}

#[inline(always)]
fn store(v: V, states: &mut [State], base: usize, j: usize) {
    let mut lanes = [0u32; 8];
    // SAFETY: `lanes` is 32 writable bytes; storeu has no alignment requirement.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, v.0) };
    for (i, l) in lanes.iter().enumerate() {
        states[base + i][j] = *l;
    }
}

#[target_feature(enable = "avx2")]
unsafe fn chains8(states: &mut [State; 8], n: u64) {
    let mut s: [V; 8] = std::array::from_fn(|j| load(states, 0, j));
    chain(&mut s, n);
    for (j, v) in s.into_iter().enumerate() {
        store(v, states, 0, j);
    }
}

#[target_feature(enable = "avx2")]
unsafe fn chains16(states: &mut [State; 16], n: u64) {
    let mut s: [Ways<V, 2>; 8] =
        std::array::from_fn(|j| Ways([load(states, 0, j), load(states, 8, j)]));
    chain(&mut s, n);
    for (j, v) in s.into_iter().enumerate() {
        store(v.0[0], states, 0, j);
        store(v.0[1], states, 8, j);
    }
}
