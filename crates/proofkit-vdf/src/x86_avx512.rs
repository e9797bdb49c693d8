//! AVX-512 backend: 16 chains per 512-bit register (one lane each), with one or two register
//! sets in flight (two sets hide the latency of each round's dependency chain). Rotates are
//! single `vprord`s; `Ch`, `Maj` and the three-way XORs of `Σ`/`σ` are single `vpternlogd`s.
//!
//! [`Avx512`] is the token: it can only be built by [`Avx512::detect`] after the CPU check, so
//! every call into this file's `#[target_feature]` code is sound by construction.

use crate::compress::{chain, hash32_hooked, Hook, Ways, Word};
use crate::x86_shani::{ShaLanes, ShaNi};
use crate::State;
use std::arch::x86_64::*;

/// Proof that the running CPU has AVX-512F (the private field keeps it unforgeable).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512(());

impl Avx512 {
    pub(crate) fn detect() -> Option<Self> {
        proofkit_core::cpu::features().avx512f.then_some(Avx512(()))
    }

    /// Advances 16 chains by `n` links.
    pub(crate) fn chains16(self, states: &mut [State; 16], n: u64) {
        // SAFETY: `self` exists only if AVX-512F was detected on this CPU.
        unsafe { chains16(states, n) }
    }

    /// Advances `16 + SHA` chains by `n` links: 16 in AVX-512 lanes and `SHA` on the SHA-NI
    /// unit, whose round groups are interleaved with the vector rounds so that both kinds of
    /// execution unit work at once.
    pub(crate) fn chains_hybrid<const SHA: usize, const L: usize>(
        self,
        _sha: ShaNi,
        states: &mut [State; L],
        n: u64,
    ) {
        const { assert!(L == 16 + SHA) };
        // SAFETY: `self` proves AVX-512F, `_sha` proves SHA, SSE4.1 and SSSE3.
        unsafe { chains_hybrid::<SHA>(states, n) }
    }

    /// Advances 32 chains by `n` links, as two interleaved 16-lane register sets.
    pub(crate) fn chains32(self, states: &mut [State; 32], n: u64) {
        // SAFETY: as above.
        unsafe { chains32(states, n) }
    }
}

/// Sixteen lanes. Private to this file: the only code that can run its methods is the
/// `#[target_feature(enable = "avx512f")]` kernels below.
#[derive(Clone, Copy)]
struct V(__m512i);

/// `vpternlogd` truth tables (operands a, b, c).
const XOR3: i32 = 0x96;
const CH: i32 = 0xca; // a ? b : c
const MAJ: i32 = 0xe8; // majority(a, b, c)

impl Word for V {
    #[inline(always)]
    fn splat(x: u32) -> Self {
        // SAFETY: only reached from the AVX-512 kernels of this file (V is private).
        V(unsafe { _mm512_set1_epi32(x as i32) })
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        // SAFETY: as in `splat`.
        V(unsafe { _mm512_add_epi32(self.0, o.0) })
    }
    #[inline(always)]
    fn bsig0(self) -> Self {
        let x = self.0;
        // SAFETY: as in `splat`.
        V(unsafe {
            _mm512_ternarylogic_epi32::<XOR3>(
                _mm512_ror_epi32::<2>(x),
                _mm512_ror_epi32::<13>(x),
                _mm512_ror_epi32::<22>(x),
            )
        })
    }
    #[inline(always)]
    fn bsig1(self) -> Self {
        let x = self.0;
        // SAFETY: as in `splat`.
        V(unsafe {
            _mm512_ternarylogic_epi32::<XOR3>(
                _mm512_ror_epi32::<6>(x),
                _mm512_ror_epi32::<11>(x),
                _mm512_ror_epi32::<25>(x),
            )
        })
    }
    #[inline(always)]
    fn ssig0(self) -> Self {
        let x = self.0;
        // SAFETY: as in `splat`.
        V(unsafe {
            _mm512_ternarylogic_epi32::<XOR3>(
                _mm512_ror_epi32::<7>(x),
                _mm512_ror_epi32::<18>(x),
                _mm512_srli_epi32::<3>(x),
            )
        })
    }
    #[inline(always)]
    fn ssig1(self) -> Self {
        let x = self.0;
        // SAFETY: as in `splat`.
        V(unsafe {
            _mm512_ternarylogic_epi32::<XOR3>(
                _mm512_ror_epi32::<17>(x),
                _mm512_ror_epi32::<19>(x),
                _mm512_srli_epi32::<10>(x),
            )
        })
    }
    #[inline(always)]
    fn ch(x: Self, y: Self, z: Self) -> Self {
        // SAFETY: as in `splat`.
        V(unsafe { _mm512_ternarylogic_epi32::<CH>(x.0, y.0, z.0) })
    }
    #[inline(always)]
    fn maj(x: Self, y: Self, z: Self) -> Self {
        // SAFETY: as in `splat`.
        V(unsafe { _mm512_ternarylogic_epi32::<MAJ>(x.0, y.0, z.0) })
    }
}

/// Word `j` of lanes `base..base + 16`.
#[inline(always)]
fn load(states: &[State], base: usize, j: usize) -> V {
    let lanes: [u32; 16] = std::array::from_fn(|i| states[base + i][j]);
    // SAFETY: `lanes` is 64 readable bytes; loadu has no alignment requirement. Only reached
    // from the AVX-512 kernels below.
    V(unsafe { _mm512_loadu_si512(lanes.as_ptr() as *const _) })
}

#[inline(always)]
fn store(v: V, states: &mut [State], base: usize, j: usize) {
    let mut lanes = [0u32; 16];
    // SAFETY: `lanes` is 64 writable bytes; storeu has no alignment requirement.
    unsafe { _mm512_storeu_si512(lanes.as_mut_ptr() as *mut _, v.0) };
    for (i, l) in lanes.iter().enumerate() {
        states[base + i][j] = *l;
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn chains16(states: &mut [State; 16], n: u64) {
    let mut s: [V; 8] = std::array::from_fn(|j| load(states, 0, j));
    chain(&mut s, n);
    for (j, v) in s.into_iter().enumerate() {
        store(v, states, 0, j);
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn chains32(states: &mut [State; 32], n: u64) {
    let mut s: [Ways<V, 2>; 8] =
        std::array::from_fn(|j| Ways([load(states, 0, j), load(states, 16, j)]));
    chain(&mut s, n);
    for (j, v) in s.into_iter().enumerate() {
        store(v.0[0], states, 0, j);
        store(v.0[1], states, 16, j);
    }
}

#[target_feature(enable = "avx512f,sha,sse4.1,ssse3")]
unsafe fn chains_hybrid<const SHA: usize>(states: &mut [State], n: u64) {
    let mut s: [V; 8] = std::array::from_fn(|j| load(states, 0, j));
    let mut sha = ShaLanes::<SHA>::load(&states[16..]);
    // One link of every SHA-NI chain per vector link: 16 * SHA round groups spread evenly
    // over the 64 vector rounds, group-major so that each chain's groups are far apart.
    for _ in 0..n {
        s = hash32_hooked(&s, &mut Interleave(&mut sha));
    }
    for (j, v) in s.into_iter().enumerate() {
        store(v, states, 0, j);
    }
    sha.store(&mut states[16..]);
}

/// Runs the SHA-NI round groups between the vector rounds.
struct Interleave<'a, const SHA: usize>(&'a mut ShaLanes<SHA>);

impl<const SHA: usize> Hook for Interleave<'_, SHA> {
    #[inline(always)]
    fn at(&mut self, t: usize) {
        let steps = 16 * SHA;
        for k in t * steps / 64..(t + 1) * steps / 64 {
            // SAFETY: only used by `chains_hybrid`, which requires SHA, SSE4.1 and SSSE3.
            unsafe { self.0.group(k % SHA, k / SHA) };
        }
    }
}
