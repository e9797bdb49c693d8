//! Blake2b as RandomX uses it: `Hash512`, `Hash256` (specs.md 1.1), Argon2's variable-length
//! H' (`blake2b_long`, RFC 9106 section 3.3), and the BlakeGenerator (specs.md 3.5).
#![deny(unsafe_code)]

/// Blake2b with a 64-byte output.
pub fn hash512(input: &[u8]) -> [u8; 64] {
    let h = blake2b_simd::Params::new().hash_length(64).hash(input);
    let mut out = [0u8; 64];
    out.copy_from_slice(h.as_bytes());
    out
}

/// Blake2b with a 32-byte output.
pub fn hash256(input: &[u8]) -> [u8; 32] {
    let h = blake2b_simd::Params::new().hash_length(32).hash(input);
    let mut out = [0u8; 32];
    out.copy_from_slice(h.as_bytes());
    out
}

/// Blake2b-256 over the concatenation of `parts`.
pub fn hash256_parts(parts: &[&[u8]]) -> [u8; 32] {
    let mut st = blake2b_simd::Params::new().hash_length(32).to_state();
    for p in parts {
        st.update(p);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(st.finalize().as_bytes());
    out
}

/// Argon2's variable-length hash H' (`blake2b_long`): fills `out` (any length >= 1).
pub fn blake2b_long(out: &mut [u8], input: &[u8]) {
    let len32 = (out.len() as u32).to_le_bytes();
    if out.len() <= 64 {
        let mut st = blake2b_simd::Params::new()
            .hash_length(out.len())
            .to_state();
        st.update(&len32);
        st.update(input);
        out.copy_from_slice(st.finalize().as_bytes());
        return;
    }
    let mut st = blake2b_simd::Params::new().hash_length(64).to_state();
    st.update(&len32);
    st.update(input);
    let mut v = *st.finalize().as_array();
    out[..32].copy_from_slice(&v[..32]);
    let mut pos = 32;
    while out.len() - pos > 64 {
        v = *blake2b_simd::Params::new()
            .hash_length(64)
            .hash(&v)
            .as_array();
        out[pos..pos + 32].copy_from_slice(&v[..32]);
        pos += 32;
    }
    let last = out.len() - pos;
    let h = blake2b_simd::Params::new().hash_length(last).hash(&v);
    out[pos..].copy_from_slice(h.as_bytes());
}

/// The BlakeGenerator of specs.md 3.5: a 64-byte state re-hashed whenever it runs out.
///
/// The seed is written into the state and zero-padded; only its first 60 bytes are used, and
/// bytes 60..64 hold a 32-bit nonce (0 for SuperscalarHash). Longer keys are therefore truncated
/// here while Argon2 sees the whole key: the reference behaves so and results must match it.
pub struct BlakeGenerator {
    data: [u8; 64],
    index: usize,
}

impl BlakeGenerator {
    pub const MAX_SEED: usize = 60;

    pub fn new(seed: &[u8], nonce: u32) -> Self {
        let mut data = [0u8; 64];
        let n = seed.len().min(Self::MAX_SEED);
        data[..n].copy_from_slice(&seed[..n]);
        data[60..].copy_from_slice(&nonce.to_le_bytes());
        // index = 64 makes the first request hash the state: S = Hash512(S).
        BlakeGenerator { data, index: 64 }
    }

    fn reserve(&mut self, n: usize) {
        if self.index + n > 64 {
            self.data = hash512(&self.data);
            self.index = 0;
        }
    }

    pub fn get_byte(&mut self) -> u8 {
        self.reserve(1);
        let b = self.data[self.index];
        self.index += 1;
        b
    }

    pub fn get_u32(&mut self) -> u32 {
        self.reserve(4);
        let v = u32::from_le_bytes(
            self.data[self.index..self.index + 4]
                .try_into()
                .expect("4-byte slice"),
        );
        self.index += 4;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blake2b_long_matches_its_definition() {
        // <= 64 bytes: a single Blake2b with the length prefix.
        let mut short = [0u8; 32];
        blake2b_long(&mut short, b"abc");
        assert_eq!(short, hash256_parts(&[&32u32.to_le_bytes(), b"abc"]));
        // 1024 bytes (Argon2's block): chained 64-byte hashes, 32 bytes kept from each.
        let mut long = [0u8; 1024];
        blake2b_long(&mut long, b"abc");
        let v1 = hash512_parts(&[&1024u32.to_le_bytes(), b"abc"]);
        assert_eq!(&long[..32], &v1[..32]);
        let v2 = hash512(&v1);
        assert_eq!(&long[32..64], &v2[..32]);
        let mut v = v1;
        for _ in 0..(1024 / 32 - 2) {
            v = hash512(&v);
        }
        // The last 64 bytes are one full hash of the previous state.
        assert_eq!(&long[1024 - 64..], &v[..]);
    }

    fn hash512_parts(parts: &[&[u8]]) -> [u8; 64] {
        let mut st = blake2b_simd::Params::new().hash_length(64).to_state();
        for p in parts {
            st.update(p);
        }
        *st.finalize().as_array()
    }

    #[test]
    fn generator_hashes_before_first_use_and_truncates_seed() {
        let mut g = BlakeGenerator::new(b"key", 0);
        let mut seed = [0u8; 64];
        seed[..3].copy_from_slice(b"key");
        let s = hash512(&seed);
        assert_eq!(g.get_byte(), s[0]);
        assert_eq!(g.get_u32(), u32::from_le_bytes(s[1..5].try_into().unwrap()));
        let long = [7u8; 100];
        let mut a = BlakeGenerator::new(&long, 0);
        let mut b = BlakeGenerator::new(&long[..60], 0);
        for _ in 0..100 {
            assert_eq!(a.get_u32(), b.get_u32());
        }
    }

    #[test]
    fn generator_rehashes_when_exhausted() {
        let mut g = BlakeGenerator::new(b"", 0);
        for _ in 0..15 {
            g.get_u32();
        }
        // 60 bytes used; a u32 still fits, the next one does not.
        g.get_u32();
        let before = g.data;
        g.get_byte();
        assert_eq!(g.data, hash512(&before));
    }
}
