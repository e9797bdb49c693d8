//! Keccak-f\[1600\] (FIPS 202, section 3.3) on eight independent states at once with AVX-512F:
//! one 512-bit register per lane position holds that lane of all eight states. Theta's
//! five-way xors and chi's `a ^ (!b & c)` are `vpternlogq`, rho's rotations `vprolvq`.
//! The portable twin is `keccak_x8::permute_portable` (the `keccak` crate's permutation, one
//! state at a time); `keccak_x8::tests` runs both on the same states.

use crate::keccak_x8::{blocks, RATE};
use core::arch::x86_64::*;

/// Proof that this CPU has AVX-512F; only [`Avx512Token::detect`] makes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Avx512Token(());

impl Avx512Token {
    pub fn detect() -> Option<Self> {
        proofkit_core::cpu::features()
            .avx512f
            .then_some(Avx512Token(()))
    }

    /// Permutes eight states, stored lane-major (`st[lane][state]`).
    pub fn f1600_x8(self, st: &mut [[u64; 8]; 25]) {
        // SAFETY: the token exists only after the CPU reported AVX-512F (`detect`).
        unsafe { f1600_x8(st) }
    }
}

/// Round constants (FIPS 202, algorithm 5 / table of iota).
const RC: [u64; 24] = [
    0x0000000000000001,
    0x0000000000008082,
    0x800000000000808A,
    0x8000000080008000,
    0x000000000000808B,
    0x0000000080000001,
    0x8000000080008081,
    0x8000000000008009,
    0x000000000000008A,
    0x0000000000000088,
    0x0000000080008009,
    0x000000008000000A,
    0x000000008000808B,
    0x800000000000008B,
    0x8000000000008089,
    0x8000000000008003,
    0x8000000000008002,
    0x8000000000000080,
    0x000000000000800A,
    0x800000008000000A,
    0x8000000080008081,
    0x8000000000008080,
    0x0000000080000001,
    0x8000000080008008,
];

/// Rho offsets by lane index x + 5y.
const RHO: [i64; 25] = [
    0, 1, 62, 28, 27, 36, 44, 6, 55, 20, 3, 10, 43, 25, 39, 41, 45, 15, 21, 8, 18, 2, 61, 56, 14,
];

/// Pi: lane x + 5y moves to y + 5((2x + 3y) mod 5).
const PI: [usize; 25] = {
    let mut t = [0usize; 25];
    let mut i = 0;
    while i < 25 {
        let (x, y) = (i % 5, i / 5);
        t[i] = y + 5 * ((2 * x + 3 * y) % 5);
        i += 1;
    }
    t
};

#[target_feature(enable = "avx512f")]
unsafe fn f1600_x8(st: &mut [[u64; 8]; 25]) {
    let mut a = [_mm512_setzero_si512(); 25];
    for (r, lane) in a.iter_mut().zip(st.iter()) {
        // SAFETY: `lane` is 8 u64 = 64 readable bytes; loadu has no alignment requirement.
        *r = unsafe { _mm512_loadu_si512(lane.as_ptr().cast()) };
    }
    rounds(&mut a);
    for (r, lane) in a.iter().zip(st.iter_mut()) {
        // SAFETY: `lane` is 8 u64 = 64 writable bytes; storeu has no alignment requirement.
        unsafe { _mm512_storeu_si512(lane.as_mut_ptr().cast(), *r) };
    }
}

/// Rho and pi along the cycle `$i, PI[$i], ...` of the lane permutation: lane `$i` rotated by
/// its rho offset (an immediate: `vprolq`, so no register holds 25 rotation counts) goes to
/// `PI[$i]`, whose lane is carried to the next step.
macro_rules! rho_pi {
    ($a:ident; $($i:literal),*) => {
        let mut carried = $a[1];
        $(
            let next = $a[PI[$i]];
            $a[PI[$i]] = _mm512_rol_epi64::<{ RHO[$i] as i32 }>(carried);
            carried = next;
        )*
        let _ = carried;
    };
}

/// The 24 rounds of Keccak-f[1600] on eight states held lane by lane in `a`.
#[target_feature(enable = "avx512f")]
#[inline]
fn rounds(a: &mut [__m512i; 25]) {
    for rc in RC {
        // Theta: each lane xors with the column parities beside it, in one `vpternlogq`.
        let c: [__m512i; 5] = core::array::from_fn(|x| {
            let t = _mm512_ternarylogic_epi64::<0x96>(a[x], a[x + 5], a[x + 10]);
            _mm512_ternarylogic_epi64::<0x96>(t, a[x + 15], a[x + 20])
        });
        for x in 0..5 {
            // One rotated parity at a time: with the 25 lanes and five parities live, a
            // sixth array of five would not fit in the 32 registers.
            let d = _mm512_rol_epi64::<1>(c[(x + 1) % 5]);
            for y in 0..5 {
                a[x + 5 * y] = _mm512_ternarylogic_epi64::<0x96>(a[x + 5 * y], c[(x + 4) % 5], d);
            }
        }
        // Rho and pi, in place along pi's one cycle through lanes 1..24 (lane 0 rotates by
        // zero and stays): each lane moves to where the next one is taken from.
        rho_pi!(a; 1, 10, 7, 11, 17, 18, 3, 5, 16, 8, 21, 24, 4, 15, 23, 19, 13, 12, 2, 20, 14,
            22, 9, 6);
        // Chi, a row at a time: a = b ^ (!b1 & b2), the row's first two lanes kept for its
        // last two.
        for y in 0..5 {
            let r = 5 * y;
            let (b0, b1) = (a[r], a[r + 1]);
            a[r] = _mm512_ternarylogic_epi64::<0xD2>(a[r], a[r + 1], a[r + 2]);
            a[r + 1] = _mm512_ternarylogic_epi64::<0xD2>(a[r + 1], a[r + 2], a[r + 3]);
            a[r + 2] = _mm512_ternarylogic_epi64::<0xD2>(a[r + 2], a[r + 3], a[r + 4]);
            a[r + 3] = _mm512_ternarylogic_epi64::<0xD2>(a[r + 3], a[r + 4], b0);
            a[r + 4] = _mm512_ternarylogic_epi64::<0xD2>(a[r + 4], b0, b1);
        }
        // Iota.
        a[0] = _mm512_xor_si512(a[0], _mm512_set1_epi64(rc as i64));
    }
}

/// 64-bit words in the rate.
const RATE_WORDS: usize = RATE / 8;

impl Avx512Token {
    /// keccak256 of up to eight messages that take the same number of rate blocks (their
    /// lengths divided by 136 are equal): `out[i]` for `msgs[i]`. The sponge runs in registers:
    /// each block's words are gathered straight from the eight messages (`vpgatherqq`, masked
    /// to the words a message has), the padding xored in from per-state vectors, so no byte is
    /// copied into a block buffer and no state is transposed through memory.
    pub fn keccak256_x8(self, msgs: &[&[u8]], out: &mut [[u8; 32]]) {
        assert!(msgs.len() <= 8 && out.len() >= msgs.len());
        let n = msgs.first().map_or(0, |m| blocks(m.len()));
        assert!(msgs.iter().all(|m| blocks(m.len()) == n));
        // SAFETY: the token exists only after the CPU reported AVX-512F (`detect`); the
        // kernel reads only bytes inside `msgs` (checked above to share their block count).
        unsafe { keccak256_x8(msgs, n, out) }
    }
}

#[target_feature(enable = "avx512f")]
unsafe fn keccak256_x8(msgs: &[&[u8]], blocks: usize, out: &mut [[u8; 32]]) {
    if msgs.is_empty() {
        return;
    }
    let present: __mmask8 = ((1u16 << msgs.len()) - 1) as __mmask8;
    // Per state: the message's address, the full words of its last block, and that block's
    // padded tail word (its last 0-7 bytes, then the domain byte 0x01).
    let mut base = [0u64; 8];
    let mut full_words = [0u64; 8];
    let mut tail = [0u64; 8];
    for (i, m) in msgs.iter().enumerate() {
        let rest = &m[(blocks - 1) * RATE..];
        base[i] = m.as_ptr() as u64;
        full_words[i] = (rest.len() / 8) as u64;
        let bytes = &rest[rest.len() / 8 * 8..];
        let mut w = [0u8; 8];
        w[..bytes.len()].copy_from_slice(bytes);
        w[bytes.len()] = 0x01;
        tail[i] = u64::from_le_bytes(w);
    }
    // SAFETY (all three loads): each array is 8 u64 = 64 readable bytes.
    let base = unsafe { _mm512_loadu_si512(base.as_ptr().cast()) };
    let full_words = unsafe { _mm512_loadu_si512(full_words.as_ptr().cast()) };
    let tail = unsafe { _mm512_loadu_si512(tail.as_ptr().cast()) };
    let mut a = [_mm512_setzero_si512(); 25];
    for b in 0..blocks {
        let last = b + 1 == blocks;
        for (l, lane) in a.iter_mut().take(RATE_WORDS).enumerate() {
            let index = _mm512_set1_epi64(l as i64);
            // The states whose message has word `l` of this block in full.
            let mask = if last {
                present & _mm512_cmplt_epu64_mask(index, full_words)
            } else {
                present
            };
            let at = _mm512_add_epi64(base, _mm512_set1_epi64((b * RATE + 8 * l) as i64));
            // SAFETY: a lane is read only where `mask` is set, and then its address is word
            // `l` of block `b` of message `i`, which lies inside the message (for the last
            // block, `l` < its full words); masked-off lanes read nothing.
            let words = unsafe {
                _mm512_mask_i64gather_epi64::<1>(
                    _mm512_setzero_si512(),
                    mask,
                    at,
                    core::ptr::null::<i64>(),
                )
            };
            *lane = _mm512_xor_si512(*lane, words);
            if last {
                // The tail word goes to the word after the full ones.
                let here = _mm512_cmpeq_epi64_mask(index, full_words);
                *lane = _mm512_mask_xor_epi64(*lane, here, *lane, tail);
            }
        }
        if last {
            a[RATE_WORDS - 1] =
                _mm512_xor_si512(a[RATE_WORDS - 1], _mm512_set1_epi64((0x80u64 << 56) as i64));
        }
        rounds(&mut a);
    }
    let mut digest = [[0u64; 8]; 4];
    for (row, lane) in digest.iter_mut().zip(&a) {
        // SAFETY: `row` is 8 u64 = 64 writable bytes.
        unsafe { _mm512_storeu_si512(row.as_mut_ptr().cast(), *lane) };
    }
    for (i, o) in out.iter_mut().enumerate().take(msgs.len()) {
        for (l, row) in digest.iter().enumerate() {
            o[8 * l..8 * l + 8].copy_from_slice(&row[i].to_le_bytes());
        }
    }
}
