//! SHA-NI backend: the x86 SHA extensions (`sha256rnds2`, `sha256msg1`, `sha256msg2`), with one
//! to four independent chains interleaved per step (the "x1..x4 editions"). A single chain is
//! bound by the latency of its 32 dependent `sha256rnds2`; interleaving fills the unit's
//! throughput.
//!
//! Specialised like the portable kernel: the state starts from the constant IV, the words
//! `W8..W15` are the constant padding (their `K + W` are precomputed), and the digest is turned
//! into the next message with two shuffles, folding the IV feed-forward into the first
//! round's constant.
//!
//! [`ShaNi`] is the token: it can only be built by [`ShaNi::detect`] after the CPU check.

use crate::sha256::{IV, K};
use crate::State;
use std::arch::x86_64::*;

/// Proof that the running CPU has the SHA extensions and SSE4.1 (private field: unforgeable).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ShaNi(());

impl ShaNi {
    pub(crate) fn detect() -> Option<Self> {
        let f = proofkit_core::cpu::features();
        (f.sha && f.sse41 && f.ssse3).then_some(ShaNi(()))
    }

    /// Advances `N` (1 to 4) interleaved chains by `n` links.
    pub(crate) fn chains<const N: usize>(self, states: &mut [State; N], n: u64) {
        // SAFETY: `self` exists only if SHA, SSE4.1 and SSSE3 were detected on this CPU.
        unsafe { chains::<N>(states, n) }
    }
}

/// Four u32 lanes as an `__m128i`, lane 0 first.
#[inline(always)]
fn lanes(w: [u32; 4]) -> __m128i {
    // SAFETY: SSE2 is part of x86-64.
    unsafe { _mm_set_epi32(w[3] as i32, w[2] as i32, w[1] as i32, w[0] as i32) }
}

const fn add4(a: [u32; 4], b: [u32; 4]) -> [u32; 4] {
    [
        a[0].wrapping_add(b[0]),
        a[1].wrapping_add(b[1]),
        a[2].wrapping_add(b[2]),
        a[3].wrapping_add(b[3]),
    ]
}

const fn k4(g: usize) -> [u32; 4] {
    [K[4 * g], K[4 * g + 1], K[4 * g + 2], K[4 * g + 3]]
}

/// The IV in the SHA-NI register layout: `ABEF` = lanes [F, E, B, A], `CDGH` = [H, G, D, C].
const IV_ABEF: [u32; 4] = [IV[5], IV[4], IV[1], IV[0]];
const IV_CDGH: [u32; 4] = [IV[7], IV[6], IV[3], IV[2]];
/// The IV as message words: [A, B, C, D] and [E, F, G, H].
const IV_LO: [u32; 4] = [IV[0], IV[1], IV[2], IV[3]];
const IV_HI: [u32; 4] = [IV[4], IV[5], IV[6], IV[7]];
/// `W8..W11`, `W12..W15`: the constant padding of a 32-byte message.
const PAD_LO: [u32; 4] = [0x8000_0000, 0, 0, 0];
const PAD_HI: [u32; 4] = [0, 0, 0, 256];

/// Two `sha256rnds2` (four rounds) with message-plus-constant `wk`.
#[inline(always)]
unsafe fn rounds4(s0: &mut __m128i, s1: &mut __m128i, wk: __m128i) {
    *s1 = _mm_sha256rnds2_epu32(*s1, *s0, wk);
    *s0 = _mm_sha256rnds2_epu32(*s0, *s1, _mm_shuffle_epi32::<0x0e>(wk));
}

/// The next four schedule words: `m[g%4]` holds `W[4g-16..]` and becomes `W[4g..]`.
#[inline(always)]
unsafe fn schedule(m: &mut [__m128i; 4], g: usize) {
    let j = g % 4;
    let t = _mm_sha256msg1_epu32(m[j], m[(j + 1) % 4]);
    let t = _mm_add_epi32(t, _mm_alignr_epi8::<4>(m[(j + 3) % 4], m[(j + 2) % 4]));
    m[j] = _mm_sha256msg2_epu32(t, m[(j + 3) % 4]);
}

/// `N` SHA-NI chains advanced one round group (four rounds) at a time, so that a caller can
/// interleave them with other work (the hybrid kernel of `x86_avx512`). A link is the 16
/// groups `0..16` of one chain, in order.
///
/// The chain value is the message `[W0..W3], [W4..W7]`, kept as `raw + IV`: `raw` is the
/// compression output before the feed-forward, so that round group 0 and 1 add `K + IV` in one
/// operation.
pub(crate) struct ShaLanes<const N: usize> {
    raw_lo: [__m128i; N],
    raw_hi: [__m128i; N],
    s0: [__m128i; N],
    s1: [__m128i; N],
    m: [[__m128i; 4]; N],
}

impl<const N: usize> ShaLanes<N> {
    /// Loads `N` chain values. Caller: SSE2 (x86-64 baseline) suffices.
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // indexes several parallel arrays
    pub(crate) unsafe fn load(states: &[State]) -> Self {
        let z = _mm_setzero_si128();
        let (iv_lo, iv_hi) = (lanes(IV_LO), lanes(IV_HI));
        let mut l = ShaLanes {
            raw_lo: [z; N],
            raw_hi: [z; N],
            s0: [z; N],
            s1: [z; N],
            m: [[z; 4]; N],
        };
        for c in 0..N {
            l.raw_lo[c] =
                _mm_sub_epi32(_mm_loadu_si128(states[c].as_ptr() as *const __m128i), iv_lo);
            l.raw_hi[c] = _mm_sub_epi32(
                _mm_loadu_si128(states[c][4..].as_ptr() as *const __m128i),
                iv_hi,
            );
        }
        l
    }

    /// Stores the chain values (between links).
    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // indexes several parallel arrays
    pub(crate) unsafe fn store(&self, states: &mut [State]) {
        let (iv_lo, iv_hi) = (lanes(IV_LO), lanes(IV_HI));
        for c in 0..N {
            _mm_storeu_si128(
                states[c].as_mut_ptr() as *mut __m128i,
                _mm_add_epi32(self.raw_lo[c], iv_lo),
            );
            _mm_storeu_si128(
                states[c][4..].as_mut_ptr() as *mut __m128i,
                _mm_add_epi32(self.raw_hi[c], iv_hi),
            );
        }
    }

    /// Round group `g` (rounds `4g..4g+4`) of chain `c`'s current link. Both are constants
    /// after inlining. Caller: the CPU has SHA, SSE4.1 and SSSE3.
    #[inline(always)]
    pub(crate) unsafe fn group(&mut self, c: usize, g: usize) {
        match g {
            0 => {
                self.s0[c] = lanes(IV_ABEF);
                self.s1[c] = lanes(IV_CDGH);
                self.m[c] = [
                    _mm_add_epi32(self.raw_lo[c], lanes(IV_LO)),
                    _mm_add_epi32(self.raw_hi[c], lanes(IV_HI)),
                    lanes(PAD_LO),
                    lanes(PAD_HI),
                ];
                let wk = _mm_add_epi32(self.raw_lo[c], lanes(add4(k4(0), IV_LO)));
                rounds4(&mut self.s0[c], &mut self.s1[c], wk);
            }
            1 => {
                let wk = _mm_add_epi32(self.raw_hi[c], lanes(add4(k4(1), IV_HI)));
                rounds4(&mut self.s0[c], &mut self.s1[c], wk);
            }
            2 => rounds4(&mut self.s0[c], &mut self.s1[c], lanes(add4(k4(2), PAD_LO))),
            3 => rounds4(&mut self.s0[c], &mut self.s1[c], lanes(add4(k4(3), PAD_HI))),
            _ => {
                schedule(&mut self.m[c], g);
                let wk = _mm_add_epi32(self.m[c][g % 4], lanes(k4(g)));
                rounds4(&mut self.s0[c], &mut self.s1[c], wk);
                if g == 15 {
                    // ABEF = [F, E, B, A], CDGH = [H, G, D, C] -> [A, B, C, D], [E, F, G, H].
                    self.raw_lo[c] =
                        _mm_shuffle_epi32::<0xb1>(_mm_unpackhi_epi64(self.s0[c], self.s1[c]));
                    self.raw_hi[c] =
                        _mm_shuffle_epi32::<0xb1>(_mm_unpacklo_epi64(self.s0[c], self.s1[c]));
                }
            }
        }
    }
}

macro_rules! link {
    ($l:ident, $n:ident; $($g:literal)*) => {
        $( for c in 0..$n { $l.group(c, $g); } )*
    };
}

#[target_feature(enable = "sha,sse4.1,ssse3")]
unsafe fn chains<const N: usize>(states: &mut [State; N], n: u64) {
    let mut l = ShaLanes::<N>::load(states);
    for _ in 0..n {
        link!(l, N; 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
    }
    l.store(states);
}
