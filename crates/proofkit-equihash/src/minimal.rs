//! The minimal encoding of a solution (Zcash protocol specification, "Equihash": the `2^k`
//! indices, each as `n/(k+1)+1` bits, big-endian, concatenated; `2^k * (n/(k+1)+1) / 8` bytes).
//!
//! ```text
//!  bit 0                                                       bit 2^k*(c+1)-1
//!  | index 0 (c+1 bits, MSB first) | index 1 | ... | index 2^k-1 |
//! ```
#![deny(unsafe_code)]

use crate::params::Params;

/// Why bytes or indices are not a minimal encoding for the parameters.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodingError {
    #[error("bad length: expected {expected} bytes, got {got}")]
    BadLength { expected: usize, got: usize },
    #[error("bad number of indices: expected {expected}, got {got}")]
    BadCount { expected: usize, got: usize },
    #[error("index {index} does not fit in {bits} bits")]
    IndexOutOfRange { index: u32, bits: u32 },
}

/// Packs `indices` (exactly `2^k`, each below `2^(n/(k+1)+1)`).
pub fn encode(p: Params, indices: &[u32]) -> Result<Vec<u8>, EncodingError> {
    if indices.len() != p.solution_len() {
        return Err(EncodingError::BadCount {
            expected: p.solution_len(),
            got: indices.len(),
        });
    }
    let bits = p.index_bits();
    let mut out = Vec::with_capacity(p.minimal_len());
    let mut acc: u64 = 0;
    let mut acc_bits = 0u32;
    for &i in indices {
        if bits < 32 && (i >> bits) != 0 {
            return Err(EncodingError::IndexOutOfRange { index: i, bits });
        }
        acc = (acc << bits) | i as u64;
        acc_bits += bits;
        while acc_bits >= 8 {
            acc_bits -= 8;
            out.push((acc >> acc_bits) as u8);
        }
        acc &= (1u64 << acc_bits) - 1;
    }
    debug_assert_eq!(acc_bits, 0);
    Ok(out)
}

/// Unpacks a minimal encoding; the length must be exactly [`Params::minimal_len`].
pub fn decode(p: Params, bytes: &[u8]) -> Result<Vec<u32>, EncodingError> {
    if bytes.len() != p.minimal_len() {
        return Err(EncodingError::BadLength {
            expected: p.minimal_len(),
            got: bytes.len(),
        });
    }
    let bits = p.index_bits();
    let mut out = Vec::with_capacity(p.solution_len());
    let mut acc: u64 = 0;
    let mut acc_bits = 0u32;
    for &b in bytes {
        acc = (acc << 8) | b as u64;
        acc_bits += 8;
        if acc_bits >= bits {
            acc_bits -= bits;
            out.push((acc >> acc_bits) as u32);
            acc &= (1u64 << acc_bits) - 1;
        }
    }
    debug_assert_eq!(out.len(), p.solution_len());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let p = Params::new(200, 9).unwrap();
        let idx: Vec<u32> = (0..512).map(|i| (i * 4099 + 7) % (1 << 21)).collect();
        let e = encode(p, &idx).unwrap();
        assert_eq!(e.len(), 1344);
        assert_eq!(decode(p, &e).unwrap(), idx);
        assert_eq!(
            decode(p, &e[1..]),
            Err(EncodingError::BadLength {
                expected: 1344,
                got: 1343
            })
        );
        assert_eq!(
            encode(p, &idx[1..]),
            Err(EncodingError::BadCount {
                expected: 512,
                got: 511
            })
        );
        let mut bad = idx.clone();
        bad[3] = 1 << 21;
        assert_eq!(
            encode(p, &bad),
            Err(EncodingError::IndexOutOfRange {
                index: 1 << 21,
                bits: 21
            })
        );
    }
}
