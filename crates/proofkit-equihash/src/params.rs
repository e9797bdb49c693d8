//! Equihash parameters `(n, k)` and the quantities derived from them (Zcash protocol
//! specification, section "Equihash": `n` a multiple of 8 and of `k + 1`; collision length
//! `n / (k + 1)` bits; indices of `n / (k + 1) + 1` bits; `2^k` indices per solution).
#![deny(unsafe_code)]

/// Why a pair `(n, k)` is not usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    #[error("n = {0} is not a multiple of 8")]
    NotByteMultiple(u32),
    #[error("n = {n} is not a multiple of k + 1 = {}", k + 1)]
    NotDigitMultiple { n: u32, k: u32 },
    #[error("k = {0} is out of range (1 <= k < 32)")]
    BadK(u32),
    #[error("n = {0} is out of range (8 <= n <= 512)")]
    BadN(u32),
    #[error("indices of {0} bits do not fit in 32 bits")]
    IndexTooWide(u32),
    #[error("a solution of 2^{k} indices of {bits} bits is not a whole number of bytes")]
    NotByteAligned { k: u32, bits: u32 },
}

/// Validated Equihash parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    n: u32,
    k: u32,
}

impl Params {
    /// Checks `(n, k)`: n a multiple of 8 and of k + 1, 8 <= n <= 512 (one BLAKE2b output holds
    /// at least one string), 1 <= k < 32, indices of at most 32 bits, and a minimal encoding of
    /// a whole number of bytes.
    pub fn new(n: u32, k: u32) -> Result<Self, ParamsError> {
        if !(1..32).contains(&k) {
            return Err(ParamsError::BadK(k));
        }
        if !(8..=512).contains(&n) {
            return Err(ParamsError::BadN(n));
        }
        if !n.is_multiple_of(8) {
            return Err(ParamsError::NotByteMultiple(n));
        }
        if !n.is_multiple_of(k + 1) {
            return Err(ParamsError::NotDigitMultiple { n, k });
        }
        let bits = n / (k + 1) + 1;
        if bits > 32 {
            return Err(ParamsError::IndexTooWide(bits));
        }
        if !((1u64 << k) * bits as u64).is_multiple_of(8) {
            return Err(ParamsError::NotByteAligned { k, bits });
        }
        Ok(Params { n, k })
    }

    pub fn n(&self) -> u32 {
        self.n
    }

    pub fn k(&self) -> u32 {
        self.k
    }

    /// Bits per collision digit: `n / (k + 1)`.
    pub fn collision_bits(&self) -> u32 {
        self.n / (self.k + 1)
    }

    /// Bits per index in the minimal encoding: `n / (k + 1) + 1`.
    pub fn index_bits(&self) -> u32 {
        self.collision_bits() + 1
    }

    /// Number of strings (and of possible indices): `2^(n/(k+1)+1)`.
    pub fn num_indices(&self) -> u64 {
        1u64 << self.index_bits()
    }

    /// Indices per solution: `2^k`.
    pub fn solution_len(&self) -> usize {
        1usize << self.k
    }

    /// Strings taken from one BLAKE2b output: `512 / n`.
    pub fn indices_per_hash(&self) -> u32 {
        512 / self.n
    }

    /// BLAKE2b output length in bytes: `(512 / n) * n / 8`.
    pub fn hash_output_len(&self) -> usize {
        (self.indices_per_hash() * self.n / 8) as usize
    }

    /// Bytes of one string: `n / 8`.
    pub fn string_len(&self) -> usize {
        (self.n / 8) as usize
    }

    /// Length in bytes of a minimally encoded solution: `2^k * (n/(k+1)+1) / 8`.
    pub fn minimal_len(&self) -> usize {
        self.solution_len() * self.index_bits() as usize / 8
    }
}

impl std::fmt::Display for Params {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({}, {})", self.n, self.k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zcash_parameters() {
        let p = Params::new(200, 9).unwrap();
        assert_eq!(
            (
                p.collision_bits(),
                p.index_bits(),
                p.hash_output_len(),
                p.minimal_len()
            ),
            (20, 21, 50, 1344)
        );
        let p = Params::new(144, 5).unwrap();
        assert_eq!(
            (
                p.collision_bits(),
                p.indices_per_hash(),
                p.hash_output_len(),
                p.minimal_len()
            ),
            (24, 3, 54, 100)
        );
        let p = Params::new(48, 5).unwrap();
        assert_eq!(
            (p.indices_per_hash(), p.hash_output_len(), p.minimal_len()),
            (10, 60, 36)
        );
        for (n, k) in [(96, 5), (192, 7), (96, 3), (32, 3)] {
            assert!(Params::new(n, k).is_ok(), "({n},{k})");
        }
    }

    #[test]
    fn invalid_parameters_are_typed() {
        assert_eq!(Params::new(100, 4), Err(ParamsError::NotByteMultiple(100)));
        assert_eq!(
            Params::new(200, 8),
            Err(ParamsError::NotDigitMultiple { n: 200, k: 8 })
        );
        assert_eq!(Params::new(200, 0), Err(ParamsError::BadK(0)));
        assert_eq!(Params::new(520, 12), Err(ParamsError::BadN(520)));
        assert_eq!(Params::new(512, 1), Err(ParamsError::IndexTooWide(257)));
        assert!(matches!(
            Params::new(24, 2),
            Err(ParamsError::NotByteAligned { .. })
        ));
    }
}
