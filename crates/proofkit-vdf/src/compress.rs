//! The recursive step `h <- SHA256(h)` for a 32-byte `h`, specialised and written once for any
//! "word" type: a `u32` (one chain), `N` interleaved `u32`s (scalar x2/x4), or a SIMD vector of
//! 8 or 16 lanes (the backends implement [`Word`] for their register types).
//!
//! A 32-byte message is always one block whose second half is constant (FIPS 180-4, 5.1.1):
//! `W8 = 0x80000000`, `W9..W14 = 0`, `W15 = 256`. The state always starts from the constant
//! `IV`. This module folds both facts in:
//!
//! * round 0 works on the constant `IV` state: it costs two additions of `W0` to constants;
//! * rounds 8..15 use precomputed `K_t + W_t` constants;
//! * the schedule words `W16..W31` drop every term that is zero and precompute every `σ` of a
//!   constant word (see [`hash32`]);
//! * the digest words are the next message words directly (no byte order round trip: the chain
//!   state is kept as big-endian words and only converted at the ends).
#![deny(unsafe_code)]

use crate::sha256::{big_sigma0, big_sigma1, ch, maj, small_sigma0, small_sigma1, IV, K};

/// One 32-bit word per lane, with the SHA-256 operations a backend may implement natively
/// (rotates, three-input logic).
pub(crate) trait Word: Copy {
    fn splat(x: u32) -> Self;
    fn add(self, o: Self) -> Self;
    /// `Σ0`
    fn bsig0(self) -> Self;
    /// `Σ1`
    fn bsig1(self) -> Self;
    /// `σ0`
    fn ssig0(self) -> Self;
    /// `σ1`
    fn ssig1(self) -> Self;
    fn ch(x: Self, y: Self, z: Self) -> Self;
    fn maj(x: Self, y: Self, z: Self) -> Self;
}

impl Word for u32 {
    #[inline(always)]
    fn splat(x: u32) -> Self {
        x
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    #[inline(always)]
    fn bsig0(self) -> Self {
        big_sigma0(self)
    }
    #[inline(always)]
    fn bsig1(self) -> Self {
        big_sigma1(self)
    }
    #[inline(always)]
    fn ssig0(self) -> Self {
        small_sigma0(self)
    }
    #[inline(always)]
    fn ssig1(self) -> Self {
        small_sigma1(self)
    }
    #[inline(always)]
    fn ch(x: Self, y: Self, z: Self) -> Self {
        // (x & y) ^ (!x & z) with one operation fewer.
        z ^ (x & (y ^ z))
    }
    #[inline(always)]
    fn maj(x: Self, y: Self, z: Self) -> Self {
        (x & y) | (z & (x | y))
    }
}

/// `N` independent words advanced together: N interleaved chains for instruction-level
/// parallelism (the scalar x2/x4 editions), or N SIMD register sets per step.
#[derive(Clone, Copy)]
pub(crate) struct Ways<W: Word, const N: usize>(pub [W; N]);

// Plain index loops, no closures: a closure is a separate function without the caller's
// `#[target_feature]`s, and if it is not inlined every SIMD operation becomes a call.
macro_rules! ways_unary {
    ($name:ident) => {
        #[inline(always)]
        fn $name(self) -> Self {
            let mut r = self;
            for i in 0..N {
                r.0[i] = self.0[i].$name();
            }
            r
        }
    };
}

impl<W: Word, const N: usize> Word for Ways<W, N> {
    #[inline(always)]
    fn splat(x: u32) -> Self {
        Ways([W::splat(x); N])
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        let mut r = self;
        for i in 0..N {
            r.0[i] = self.0[i].add(o.0[i]);
        }
        r
    }
    ways_unary!(bsig0);
    ways_unary!(bsig1);
    ways_unary!(ssig0);
    ways_unary!(ssig1);
    #[inline(always)]
    fn ch(x: Self, y: Self, z: Self) -> Self {
        let mut r = x;
        for i in 0..N {
            r.0[i] = W::ch(x.0[i], y.0[i], z.0[i]);
        }
        r
    }
    #[inline(always)]
    fn maj(x: Self, y: Self, z: Self) -> Self {
        let mut r = x;
        for i in 0..N {
            r.0[i] = W::maj(x.0[i], y.0[i], z.0[i]);
        }
        r
    }
}

/// The constant second half of a 32-byte message's block.
pub(crate) const PAD: [u32; 8] = [0x8000_0000, 0, 0, 0, 0, 0, 0, 256];

/// Round 0 on the constant IV: `T1 = W0 + R0_T1`, `a = T1 + R0_T2`, `e = T1 + IV[3]`.
const R0_T1: u32 = IV[7]
    .wrapping_add(big_sigma1(IV[4]))
    .wrapping_add(ch(IV[4], IV[5], IV[6]))
    .wrapping_add(K[0]);
const R0_T2: u32 = big_sigma0(IV[0]).wrapping_add(maj(IV[0], IV[1], IV[2]));

/// `K_t + W_t` for the rounds 8..15, whose message words are the constant padding.
const KW_PAD: [u32; 8] = {
    let mut kw = [0u32; 8];
    let mut i = 0;
    while i < 8 {
        kw[i] = K[8 + i].wrapping_add(PAD[i]);
        i += 1;
    }
    kw
};

/// The constants the schedule needs: `σ1(W15)`, `σ0(W8)`, `σ0(W15)`.
const S1_W15: u32 = small_sigma1(256);
const S0_W8: u32 = small_sigma0(0x8000_0000);
const S0_W15: u32 = small_sigma0(256);

/// One round at a constant position `t`; the eight working variables stay in place in `s`
/// and the round rotates which slot plays `a` (slot `(8 - t % 8) % 8`).
#[inline(always)]
fn round<W: Word>(s: &mut [W; 8], t: usize, kw: W, hook: &mut impl Hook) {
    let a = (8 - t % 8) % 8;
    let i = |k: usize| (a + k) % 8;
    let t1 = s[i(7)]
        .add(s[i(4)].bsig1())
        .add(W::ch(s[i(4)], s[i(5)], s[i(6)]))
        .add(kw);
    s[i(3)] = s[i(3)].add(t1);
    s[i(7)] = t1
        .add(s[i(0)].bsig0())
        .add(W::maj(s[i(0)], s[i(1)], s[i(2)]));
    hook.at(t);
}

macro_rules! rounds {
    ($s:ident, $w:ident, $hook:ident; $($t:literal)*) => {
        $( round(&mut $s, $t, $w[$t].add(W::splat(K[$t])), $hook); )*
    };
}

macro_rules! schedule_and_rounds {
    ($s:ident, $w:ident, $hook:ident; $($t:literal)*) => {
        $(
            $w[$t] = $w[$t - 16].add($w[$t - 15].ssig0()).add($w[$t - 7]).add($w[$t - 2].ssig1());
            round(&mut $s, $t, $w[$t].add(W::splat(K[$t])), $hook);
        )*
    };
}

/// `SHA256(m)` for a 32-byte message given as eight big-endian words; the result is the
/// digest as eight big-endian words, ready to be the next message.
#[inline(always)]
pub(crate) fn hash32<W: Word>(m: &[W; 8]) -> [W; 8] {
    hash32_hooked(m, &mut NoHook)
}

/// Work interleaved with the rounds of [`hash32_hooked`]: `at(t)` runs after round `t`.
/// (A trait rather than a closure: its `#[inline(always)]` method is guaranteed to be inlined
/// into the caller's `#[target_feature]` code, with `t` a constant.)
pub(crate) trait Hook {
    fn at(&mut self, t: usize);
}

struct NoHook;

impl Hook for NoHook {
    #[inline(always)]
    fn at(&mut self, _t: usize) {}
}

/// [`hash32`], calling `hook.at(t)` after round `t` (a constant after inlining): a place to
/// interleave independent work, such as the SHA-NI chains of the hybrid kernel.
#[inline(always)]
pub(crate) fn hash32_hooked<W: Word>(m: &[W; 8], hook: &mut impl Hook) -> [W; 8] {
    let zero = W::splat(0);
    let mut w = [zero; 64];
    w[..8].copy_from_slice(m);

    // Round 0 on the constant IV: only a and e change, and only by W0.
    let t1 = m[0].add(W::splat(R0_T1));
    let mut s = [zero; 8];
    for i in 0..8 {
        s[i] = W::splat(IV[i]);
    }
    // Round 0 leaves a in slot 7 and e in slot 3 (see `round`).
    s[7] = t1.add(W::splat(R0_T2));
    s[3] = t1.add(W::splat(IV[3]));
    hook.at(0);

    rounds!(s, w, hook; 1 2 3 4 5 6 7);
    round(&mut s, 8, W::splat(KW_PAD[0]), hook);
    round(&mut s, 9, W::splat(KW_PAD[1]), hook);
    round(&mut s, 10, W::splat(KW_PAD[2]), hook);
    round(&mut s, 11, W::splat(KW_PAD[3]), hook);
    round(&mut s, 12, W::splat(KW_PAD[4]), hook);
    round(&mut s, 13, W::splat(KW_PAD[5]), hook);
    round(&mut s, 14, W::splat(KW_PAD[6]), hook);
    round(&mut s, 15, W::splat(KW_PAD[7]), hook);

    // W16..W31 with the zero padding words dropped and the σ of constants precomputed.
    w[16] = w[0].add(w[1].ssig0());
    round(&mut s, 16, w[16].add(W::splat(K[16])), hook);
    w[17] = w[1].add(w[2].ssig0()).add(W::splat(S1_W15));
    round(&mut s, 17, w[17].add(W::splat(K[17])), hook);
    w[18] = w[2].add(w[3].ssig0()).add(w[16].ssig1());
    round(&mut s, 18, w[18].add(W::splat(K[18])), hook);
    w[19] = w[3].add(w[4].ssig0()).add(w[17].ssig1());
    round(&mut s, 19, w[19].add(W::splat(K[19])), hook);
    w[20] = w[4].add(w[5].ssig0()).add(w[18].ssig1());
    round(&mut s, 20, w[20].add(W::splat(K[20])), hook);
    w[21] = w[5].add(w[6].ssig0()).add(w[19].ssig1());
    round(&mut s, 21, w[21].add(W::splat(K[21])), hook);
    w[22] = w[6].add(w[7].ssig0()).add(w[20].ssig1()).add(W::splat(256));
    round(&mut s, 22, w[22].add(W::splat(K[22])), hook);
    w[23] = w[7].add(w[16]).add(w[21].ssig1()).add(W::splat(S0_W8));
    round(&mut s, 23, w[23].add(W::splat(K[23])), hook);
    w[24] = w[17].add(w[22].ssig1()).add(W::splat(0x8000_0000));
    round(&mut s, 24, w[24].add(W::splat(K[24])), hook);
    w[25] = w[18].add(w[23].ssig1());
    round(&mut s, 25, w[25].add(W::splat(K[25])), hook);
    w[26] = w[19].add(w[24].ssig1());
    round(&mut s, 26, w[26].add(W::splat(K[26])), hook);
    w[27] = w[20].add(w[25].ssig1());
    round(&mut s, 27, w[27].add(W::splat(K[27])), hook);
    w[28] = w[21].add(w[26].ssig1());
    round(&mut s, 28, w[28].add(W::splat(K[28])), hook);
    w[29] = w[22].add(w[27].ssig1());
    round(&mut s, 29, w[29].add(W::splat(K[29])), hook);
    w[30] = w[23].add(w[28].ssig1()).add(W::splat(S0_W15));
    round(&mut s, 30, w[30].add(W::splat(K[30])), hook);
    w[31] = w[24]
        .add(w[16].ssig0())
        .add(w[29].ssig1())
        .add(W::splat(256));
    round(&mut s, 31, w[31].add(W::splat(K[31])), hook);

    schedule_and_rounds!(s, w, hook; 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47
                               48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63);

    // After 64 rounds the slots are back in place: s[0] is a, ..., s[7] is h.
    let mut out = s;
    for i in 0..8 {
        out[i] = s[i].add(W::splat(IV[i]));
    }
    out
}

/// Runs `n` links of every lane's chain.
#[inline(always)]
pub(crate) fn chain<W: Word>(s: &mut [W; 8], n: u64) {
    for _ in 0..n {
        *s = hash32(s);
    }
}

/// The portable single chain (scalar, specialised).
pub fn chain_portable(state: &mut [u32; 8], n: u64) {
    chain::<u32>(state, n);
}

/// `N` portable chains interleaved for instruction-level parallelism.
pub fn chains_portable<const N: usize>(states: &mut [[u32; 8]; N], n: u64) {
    let mut s: [Ways<u32, N>; 8] =
        std::array::from_fn(|j| Ways(std::array::from_fn(|i| states[i][j])));
    chain(&mut s, n);
    for (i, st) in states.iter_mut().enumerate() {
        *st = std::array::from_fn(|j| s[j].0[i]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sha256::{bytes_to_words, sha256, words_to_bytes};

    #[test]
    fn hash32_equals_general_sha256() {
        let mut x = [0u8; 32];
        for i in 0..2000u32 {
            let w = bytes_to_words(&x);
            let got = words_to_bytes(&hash32::<u32>(&w));
            let want = sha256(&x);
            assert_eq!(got, want, "input {}", hex::encode(x));
            // Next input: mix in the counter so that the inputs are not a chain.
            x = want;
            x[0] ^= i as u8;
            x[31] ^= (i >> 8) as u8;
        }
        for x in [[0u8; 32], [0xff; 32]] {
            assert_eq!(
                words_to_bytes(&hash32::<u32>(&bytes_to_words(&x))),
                sha256(&x)
            );
        }
    }
}
