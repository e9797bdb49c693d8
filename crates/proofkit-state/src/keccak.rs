//! Keccak-256 (the original Keccak padding, as Ethereum uses it, not SHA3-256): one message
//! over the `sha3` crate's portable Keccak-f\[1600\], many at once over [`crate::keccak_x8`]
//! (eight permutations in the lanes of AVX-512 registers where the CPU has them).
#![deny(unsafe_code)]

use sha3::{Digest, Keccak256};

/// A 32-byte hash.
pub type B256 = [u8; 32];

/// keccak256 of `data`.
pub fn keccak256(data: &[u8]) -> B256 {
    let mut h = Keccak256::new();
    h.update(data);
    h.finalize().into()
}

/// keccak256 of each message, eight at a time where the CPU allows ([`crate::keccak_x8`]).
pub fn keccak256_many(msgs: &[&[u8]]) -> Vec<B256> {
    let mut out = vec![[0u8; 32]; msgs.len()];
    crate::keccak_x8::keccak256_batch(msgs, &mut out);
    out
}

/// keccak256 of the empty string: the code hash of an account without code.
pub const KECCAK_EMPTY: B256 = [
    0xc5, 0xd2, 0x46, 0x01, 0x86, 0xf7, 0x23, 0x3c, 0x92, 0x7e, 0x7d, 0xb2, 0xdc, 0xc7, 0x03, 0xc0,
    0xe5, 0x00, 0xb6, 0x53, 0xca, 0x82, 0x27, 0x3b, 0x7b, 0xfa, 0xd8, 0x04, 0x5d, 0x85, 0xa4, 0x70,
];

/// The root of the empty trie: keccak256 of the RLP empty string `0x80`.
pub const EMPTY_ROOT: B256 = [
    0x56, 0xe8, 0x1f, 0x17, 0x1b, 0xcc, 0x55, 0xa6, 0xff, 0x83, 0x45, 0xe6, 0x92, 0xc0, 0xf8, 0x6e,
    0x5b, 0x48, 0xe0, 0x1b, 0x99, 0x6c, 0xad, 0xc0, 0x01, 0x62, 0x2f, 0xb5, 0xe3, 0x63, 0xb4, 0x21,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_at_once_is_each_alone() {
        // Every length class the batch groups by (one and two rate blocks), odd counts.
        let msgs: Vec<Vec<u8>> = (0..29u8).map(|i| vec![i; 7 * i as usize]).collect();
        let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        let want: Vec<B256> = refs.iter().map(|m| keccak256(m)).collect();
        assert_eq!(keccak256_many(&refs), want);
        assert!(keccak256_many(&[]).is_empty());
    }

    #[test]
    fn constants_are_the_hashes_they_name() {
        assert_eq!(keccak256(b""), KECCAK_EMPTY);
        assert_eq!(keccak256(&[0x80]), EMPTY_ROOT);
        assert_eq!(
            hex::encode(EMPTY_ROOT),
            "56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421"
        );
    }
}
