//! Keccak-f[1600] (FIPS 202, section 3.3) on eight independent states at once with AVX-512F:
//! one 512-bit register per lane position holds that lane of all eight states. Theta's
//! five-way xors and chi's `a ^ (!b & c)` are `vpternlogq`, rho's rotations `vprolvq`.
//! The portable twin is `keccak_x8::permute_portable` (the `keccak` crate's permutation, one
//! state at a time); `keccak_x8::tests` runs both on the same states.

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
    let rho: [__m512i; 25] = core::array::from_fn(|i| _mm512_set1_epi64(RHO[i]));
    for rc in RC {
        // Theta.
        let c: [__m512i; 5] = core::array::from_fn(|x| {
            let t = _mm512_ternarylogic_epi64::<0x96>(a[x], a[x + 5], a[x + 10]);
            _mm512_ternarylogic_epi64::<0x96>(t, a[x + 15], a[x + 20])
        });
        for x in 0..5 {
            let d = _mm512_xor_si512(c[(x + 4) % 5], _mm512_rol_epi64::<1>(c[(x + 1) % 5]));
            for y in 0..5 {
                a[x + 5 * y] = _mm512_xor_si512(a[x + 5 * y], d);
            }
        }
        // Rho and pi.
        let mut b = [_mm512_setzero_si512(); 25];
        for i in 0..25 {
            b[PI[i]] = _mm512_rolv_epi64(a[i], rho[i]);
        }
        // Chi: a = b ^ (!b1 & b2).
        for y in 0..5 {
            for x in 0..5 {
                a[x + 5 * y] = _mm512_ternarylogic_epi64::<0xD2>(
                    b[x + 5 * y],
                    b[(x + 1) % 5 + 5 * y],
                    b[(x + 2) % 5 + 5 * y],
                );
            }
        }
        // Iota.
        a[0] = _mm512_xor_si512(a[0], _mm512_set1_epi64(rc as i64));
    }
    for (r, lane) in a.iter().zip(st.iter_mut()) {
        // SAFETY: `lane` is 8 u64 = 64 writable bytes; storeu has no alignment requirement.
        unsafe { _mm512_storeu_si512(lane.as_mut_ptr().cast(), *r) };
    }
}
