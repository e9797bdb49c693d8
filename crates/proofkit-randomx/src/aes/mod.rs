//! The AES-based functions of specs.md chapter 3: AesGenerator1R (3.2), AesGenerator4R (3.3) and
//! AesHash1R (3.4), plus the single AES rounds that RandomX v2 uses to mix the F and E registers
//! (specs.md 4.6.2 step 10).
//!
//! An "AES round" here is exactly the x86 `AESENC`/`AESDEC` instruction: (inverse) ShiftRows,
//! (inverse) SubBytes, (inverse) MixColumns, then XOR with the round key; a 16-byte column's byte
//! `i` is AES state row `i % 4`, column `i / 4`.
//!
//! Two backends with the same functions: [`soft`] (portable T-tables, any CPU) and `x86_aesni`
//! (AES-NI). [`Aes::detect`] picks AES-NI when the CPU has it, unless `PROOFKIT_FORCE_PORTABLE`
//! is set; the AES-NI variant can only be built after the feature check, so calling it is sound.
#![deny(unsafe_code)]

pub mod soft;
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86_aesni;

/// A 16-byte AES column.
pub type Column = [u8; 16];

/// The round keys of AesGenerator1R (specs.md 3.2), generated as Hash512("RandomX AesGenerator1R keys").
pub const GEN1R_KEYS: [Column; 4] = [
    hex16("53a5ac6d096671622b55b5db1749f4b4"),
    hex16("07af7c6d0d716a8478d325174edca10d"),
    hex16("f162123fc67e949f4f79c0f445e3203e"),
    hex16("3581ef6a7c31bab1884c311654911649"),
];

/// The round keys of AesGenerator4R (specs.md 3.3).
pub const GEN4R_KEYS: [Column; 8] = [
    hex16("ddaa2164db3d83d12b6d542f3fd2e599"),
    hex16("50340eb2553f91b6539df706e5cddfa5"),
    hex16("04d93e5caf7b5e519f67a40abf021c17"),
    hex16("63376285085d8fe7853767cd91d2ded8"),
    hex16("736f82b5a6a7d6e36d8b513db4ff9e22"),
    hex16("f36b56c7d9b3109c4e4d02e9d2b772b2"),
    hex16("e7c973f28ba365f70a66a92ba7ef3bf6"),
    hex16("09d67c7ade395891fdd1060c2d76b0c0"),
];

/// The initial state of AesHash1R (specs.md 3.4).
pub const HASH1R_STATE: [Column; 4] = [
    hex16("0d2cb592de56a89f47db82ccad3a98d7"),
    hex16("6e998d3398b7c7155a129ef55780e7ac"),
    hex16("1700776ad0c762ae6b507950e47ca0e8"),
    hex16("0c240a638d82ad070500a1794849997e"),
];

/// The two extra keys of AesHash1R's finalisation (specs.md 3.4).
pub const HASH1R_XKEYS: [Column; 2] = [
    hex16("8983faf69f94248bbf56dc9001028906"),
    hex16("d163b2613ce0f451c64310ee9bf918ed"),
];

const fn hex16(s: &str) -> Column {
    let b = s.as_bytes();
    let mut out = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        out[i] = (nibble(b[2 * i]) << 4) | nibble(b[2 * i + 1]);
        i += 1;
    }
    out
}

const fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => panic!("bad hex digit"),
    }
}

/// Which AES implementation runs. The `Hardware` variant holds a token that exists only when
/// the CPU was checked for AES-NI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aes {
    Software,
    #[cfg(target_arch = "x86_64")]
    Hardware(x86_aesni::AesNi),
}

impl Aes {
    /// Hardware AES where the CPU has it and `PROOFKIT_FORCE_PORTABLE` is unset.
    pub fn detect() -> Self {
        if proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE") {
            return Aes::Software;
        }
        Self::hardware().unwrap_or(Aes::Software)
    }

    /// The AES-NI backend, if this CPU has AES-NI.
    pub fn hardware() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            x86_aesni::AesNi::new().map(Aes::Hardware)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }

    pub fn is_hardware(self) -> bool {
        self != Aes::Software
    }

    pub fn name(self) -> &'static str {
        if self.is_hardware() {
            "hardware (AES-NI)"
        } else {
            "software"
        }
    }

    /// One AES encryption round (x86 `AESENC`).
    #[inline]
    pub fn enc_round(self, state: Column, key: Column) -> Column {
        match self {
            Aes::Software => soft::enc_round(state, key),
            #[cfg(target_arch = "x86_64")]
            Aes::Hardware(t) => t.enc_round(state, key),
        }
    }

    /// One AES decryption round (x86 `AESDEC`).
    #[inline]
    pub fn dec_round(self, state: Column, key: Column) -> Column {
        match self {
            Aes::Software => soft::dec_round(state, key),
            #[cfg(target_arch = "x86_64")]
            Aes::Hardware(t) => t.dec_round(state, key),
        }
    }

    /// RandomX v2's F/E mixing (specs.md 4.6.2 step 10): for each key e0..e3 in turn, f0 and f2
    /// get an encryption round and f1 and f3 a decryption round.
    #[inline]
    pub fn mix_f_e(self, f: &mut [Column; 4], e: &[Column; 4]) {
        match self {
            Aes::Software => soft::mix_f_e(f, e),
            #[cfg(target_arch = "x86_64")]
            Aes::Hardware(t) => t.mix_f_e(f, e),
        }
    }

    /// AesGenerator1R: fills `out` (a multiple of 64 bytes) and advances `state`.
    pub fn fill_1r(self, state: &mut [u8; 64], out: &mut [u8]) {
        assert!(
            out.len().is_multiple_of(64),
            "AesGenerator1R output must be whole 64-byte blocks"
        );
        match self {
            Aes::Software => soft::fill_1r(state, out),
            #[cfg(target_arch = "x86_64")]
            Aes::Hardware(t) => t.fill_1r(state, out),
        }
    }

    /// AesGenerator4R: fills `out` (a multiple of 64 bytes) and advances `state`.
    pub fn fill_4r(self, state: &mut [u8; 64], out: &mut [u8]) {
        assert!(
            out.len().is_multiple_of(64),
            "AesGenerator4R output must be whole 64-byte blocks"
        );
        match self {
            Aes::Software => soft::fill_4r(state, out),
            #[cfg(target_arch = "x86_64")]
            Aes::Hardware(t) => t.fill_4r(state, out),
        }
    }

    /// AesHash1R of `buf`, then `buf` refilled by AesGenerator1R from `fill_state` (advanced):
    /// the end of one hash and the start of the next in the batch API, in one pass over the
    /// scratchpad (the AES-NI kernel interleaves the two independent chains).
    pub fn hash_1r_then_fill_1r(self, buf: &mut [u8], fill_state: &mut [u8; 64]) -> [u8; 64] {
        assert!(
            buf.len().is_multiple_of(64),
            "AesHash1R/AesGenerator1R buffers must be whole 64-byte blocks"
        );
        match self {
            Aes::Software => {
                let h = soft::hash_1r(buf);
                soft::fill_1r(fill_state, buf);
                h
            }
            #[cfg(target_arch = "x86_64")]
            Aes::Hardware(t) => t.hash_1r_then_fill_1r(buf, fill_state),
        }
    }

    /// AesHash1R of `input` (a multiple of 64 bytes).
    pub fn hash_1r(self, input: &[u8]) -> [u8; 64] {
        assert!(
            input.len().is_multiple_of(64),
            "AesHash1R input must be whole 64-byte blocks"
        );
        match self {
            Aes::Software => soft::hash_1r(input),
            #[cfg(target_arch = "x86_64")]
            Aes::Hardware(t) => t.hash_1r(input),
        }
    }
}

pub(crate) fn split64(s: &[u8; 64]) -> [Column; 4] {
    let mut c = [[0u8; 16]; 4];
    for (i, col) in c.iter_mut().enumerate() {
        col.copy_from_slice(&s[16 * i..16 * i + 16]);
    }
    c
}

pub(crate) fn join64(c: &[Column; 4]) -> [u8; 64] {
    let mut s = [0u8; 64];
    for (i, col) in c.iter().enumerate() {
        s[16 * i..16 * i + 16].copy_from_slice(col);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng_bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn constants_are_the_documented_hashes() {
        let k1 = crate::blake::hash512(b"RandomX AesGenerator1R keys");
        assert_eq!(join64(&GEN1R_KEYS), k1);
        let a = crate::blake::hash512(b"RandomX AesGenerator4R keys 0-3");
        let b = crate::blake::hash512(b"RandomX AesGenerator4R keys 4-7");
        assert_eq!(join64(&GEN4R_KEYS[..4].try_into().unwrap()), a);
        assert_eq!(join64(&GEN4R_KEYS[4..].try_into().unwrap()), b);
        assert_eq!(
            join64(&HASH1R_STATE),
            crate::blake::hash512(b"RandomX AesHash1R state")
        );
        let x = crate::blake::hash256(b"RandomX AesHash1R xkeys");
        assert_eq!(&x[..16], &HASH1R_XKEYS[0]);
        assert_eq!(&x[16..], &HASH1R_XKEYS[1]);
    }

    /// FIPS-197 Appendix B: the first round of AES-128 encryption of 3243f6a8... under
    /// 2b7e1516... ends (after round key 1) at a49c7ff2689f352b6b5bea43026a5049; x86 AESENC does
    /// the same round on the state after the initial AddRoundKey.
    #[test]
    fn soft_round_matches_fips197() {
        let after_add = hex16("193de3bea0f4e22b9ac68d2ae9f84808");
        let rk1 = hex16("a0fafe1788542cb123a339392a6c7605");
        assert_eq!(
            soft::enc_round(after_add, rk1),
            hex16("a49c7ff2689f352b6b5bea43026a5049")
        );
    }

    #[test]
    fn soft_dec_round_inverts_enc_structure() {
        // AESDEC(AESENC(s, 0) with InvMixColumns applied to the key) is not the identity, but the
        // decryption round must invert the cipher's last round: check the FIPS-197 equivalent
        // inverse cipher on one round via a known AES-NI-free identity: decrypting the output of
        // enc_round with key k gives InvMixColumns-domain values; compare with the hardware
        // round where present and with a direct implementation otherwise.
        let s = hex16("00112233445566778899aabbccddeeff");
        let k = hex16("000102030405060708090a0b0c0d0e0f");
        let d = soft::dec_round(s, k);
        assert_eq!(d, soft::reference_dec_round(s, k));
        let e = soft::enc_round(s, k);
        assert_eq!(e, soft::reference_enc_round(s, k));
    }

    /// The shared driver: every available backend against the portable one, on boundary and
    /// random inputs.
    #[test]
    fn every_backend_equals_software() {
        let Some(hw) = Aes::hardware() else {
            eprintln!("skipped: CPU lacks AES-NI");
            return;
        };
        for seed in 0..64u64 {
            let b = rng_bytes(seed, 64 + 32 + 16 * 8);
            let s: Column = b[..16].try_into().unwrap();
            let k: Column = b[16..32].try_into().unwrap();
            assert_eq!(hw.enc_round(s, k), soft::enc_round(s, k));
            assert_eq!(hw.dec_round(s, k), soft::dec_round(s, k));
            let mut f1: [Column; 4] = split64(b[..64].try_into().unwrap());
            let mut f2 = f1;
            let e: [Column; 4] = split64(b[32..96].try_into().unwrap());
            hw.mix_f_e(&mut f1, &e);
            Aes::Software.mix_f_e(&mut f2, &e);
            assert_eq!(f1, f2);
        }
        for len in [64usize, 128, 4096, 2176] {
            let seed = rng_bytes(len as u64, 64);
            let mut s1: [u8; 64] = seed.clone().try_into().unwrap();
            let mut s2 = s1;
            let (mut o1, mut o2) = (vec![0u8; len], vec![0u8; len]);
            hw.fill_1r(&mut s1, &mut o1);
            Aes::Software.fill_1r(&mut s2, &mut o2);
            assert_eq!((o1.clone(), s1), (o2.clone(), s2));
            hw.fill_4r(&mut s1, &mut o1);
            Aes::Software.fill_4r(&mut s2, &mut o2);
            assert_eq!((o1.clone(), s1), (o2.clone(), s2));
            assert_eq!(hw.hash_1r(&o1), Aes::Software.hash_1r(&o2));
            // The fused pass equals hash-then-fill, on both backends.
            let want_hash = Aes::Software.hash_1r(&o2);
            let mut s3 = s2;
            let mut o3 = o2.clone();
            Aes::Software.fill_1r(&mut s3, &mut o3);
            for be in [hw, Aes::Software] {
                let (mut s4, mut o4) = (s2, o2.clone());
                let h = be.hash_1r_then_fill_1r(&mut o4, &mut s4);
                assert_eq!((h, o4, s4), (want_hash, o3.clone(), s3), "{len}");
            }
        }
        for edge in [[0u8; 64], [0xffu8; 64]] {
            assert_eq!(hw.hash_1r(&edge), Aes::Software.hash_1r(&edge));
        }
    }
}
