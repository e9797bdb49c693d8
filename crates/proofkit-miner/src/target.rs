//! Targets and difficulties.
//!
//! Pools send a share target in the `target` field of a stratum job: 8 hex digits (the compact
//! 4-byte form, little-endian) or 16 hex digits (the 64-bit target itself, little-endian). A hash
//! meets a 64-bit target when its last 8 bytes, read little-endian, are below it; the share's
//! difficulty is `(2^64 - 1) / target`.
//!
//! monerod gives a block difficulty (up to 128 bits, `wide_difficulty`); a hash meets it when the
//! hash, read as a 256-bit little-endian number, times the difficulty stays below `2^256`
//! (Monero's `check_hash`).

use crate::Error;

/// A 64-bit share target as pools use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target(pub u64);

impl Target {
    /// Parses a pool's `target` field: 4 bytes (compact) or 8 bytes, hex, little-endian.
    /// The compact form expands as xmrig does: `(2^64 - 1) / ((2^32 - 1) / t)`.
    pub fn parse_hex(hex_target: &str) -> Result<Target, Error> {
        let bad = |why: String| Error::BadTarget(format!("{hex_target:?}: {why}"));
        if hex_target.len() > 16 {
            return Err(bad(format!(
                "{} hex digits; pools send 8 or 16",
                hex_target.len()
            )));
        }
        let b = hex::decode(hex_target).map_err(|e| bad(e.to_string()))?;
        let t = match b.len() {
            8 => u64::from_le_bytes(b.try_into().expect("8 bytes")),
            4 => {
                let t = u32::from_le_bytes(b.try_into().expect("4 bytes")) as u64;
                if t == 0 {
                    return Err(bad("zero target".into()));
                }
                u64::MAX / (0xFFFF_FFFFu64 / t)
            }
            n => return Err(bad(format!("{n} bytes; pools send 4 or 8"))),
        };
        if t == 0 {
            return Err(bad("zero target".into()));
        }
        Ok(Target(t))
    }

    /// The target of a share difficulty (difficulty 0 or 1 gives the largest target).
    pub fn from_difficulty(difficulty: u64) -> Target {
        Target(u64::MAX / difficulty.max(1))
    }

    /// The share difficulty this target stands for.
    pub fn difficulty(self) -> u64 {
        u64::MAX / self.0.max(1)
    }

    /// True when `hash` meets this target.
    pub fn is_met_by(self, hash: &[u8; 32]) -> bool {
        hash_value64(hash) < self.0
    }
}

/// The last 8 bytes of a hash as a little-endian u64: the value compared with pool targets
/// (and the value xmrig's benchmark sums).
pub fn hash_value64(hash: &[u8; 32]) -> u64 {
    u64::from_le_bytes(hash[24..32].try_into().expect("8 bytes"))
}

/// True when `hash` (a 256-bit little-endian number) times `difficulty` is below `2^256`:
/// Monero's block check. Difficulty 0 is met by nothing.
pub fn meets_difficulty(hash: &[u8; 32], difficulty: u128) -> bool {
    if difficulty == 0 {
        return false;
    }
    let h: [u64; 4] = std::array::from_fn(|i| {
        u64::from_le_bytes(hash[8 * i..8 * i + 8].try_into().expect("8 bytes"))
    });
    let d = [difficulty as u64, (difficulty >> 64) as u64];
    // Schoolbook product into six limbs; the hash meets the difficulty when limbs 4 and 5 are 0.
    let mut p = [0u64; 6];
    for (j, &dj) in d.iter().enumerate() {
        let mut carry = 0u128;
        for (i, &hi) in h.iter().enumerate() {
            let t = hi as u128 * dj as u128 + p[i + j] as u128 + carry;
            p[i + j] = t as u64;
            carry = t >> 64;
        }
        let mut k = j + 4;
        while carry != 0 && k < 6 {
            let t = p[k] as u128 + carry;
            p[k] = t as u64;
            carry = t >> 64;
            k += 1;
        }
    }
    p[4] == 0 && p[5] == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_and_full_targets() {
        // 4-byte targets expand as xmrig does; difficulty round-trips approximately.
        let t = Target::parse_hex("b88d0600").unwrap();
        assert_eq!(t.0, u64::MAX / (0xFFFF_FFFF / 0x00068db8));
        assert_eq!(t.difficulty(), 10000);
        let t8 = Target::parse_hex("ffffffffffffff00").unwrap();
        assert_eq!(t8.0, 0x00ff_ffff_ffff_ffff);
        assert_eq!(t8.difficulty(), 256);
        assert_eq!(Target::from_difficulty(256).0, u64::MAX / 256);
    }

    #[test]
    fn bad_targets_are_errors() {
        for bad in [
            "",
            "zz",
            "00000000",
            "0000000000000000",
            "001122",
            "00112233445566778899",
        ] {
            assert!(Target::parse_hex(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn share_check_uses_the_last_eight_bytes() {
        let mut h = [0xffu8; 32];
        h[24..32].copy_from_slice(&99u64.to_le_bytes());
        assert!(Target(100).is_met_by(&h));
        assert!(!Target(99).is_met_by(&h));
    }

    #[test]
    fn block_check_matches_the_256_bit_product() {
        let mut h = [0u8; 32];
        assert!(meets_difficulty(&h, u128::MAX));
        assert!(!meets_difficulty(&h, 0));
        // hash = 2^255: meets difficulty 1, not 2.
        h[31] = 0x80;
        assert!(meets_difficulty(&h, 1));
        assert!(!meets_difficulty(&h, 2));
        // hash = 2^192 * 99 (top limb 99): difficulty d meets iff 99 * d < 2^64.
        let mut h = [0u8; 32];
        h[24..32].copy_from_slice(&99u64.to_le_bytes());
        let limit = (u64::MAX / 99) as u128;
        assert!(meets_difficulty(&h, limit));
        assert!(!meets_difficulty(&h, limit + 1));
        // All ones times 1 fits; times 2 does not.
        let ones = [0xffu8; 32];
        assert!(meets_difficulty(&ones, 1));
        assert!(!meets_difficulty(&ones, 2));
        // 128-bit difficulties: hash 1 meets 2^128 - 1.
        let mut one = [0u8; 32];
        one[0] = 1;
        assert!(meets_difficulty(&one, u128::MAX));
        // hash 2^128 times 2^128 - 1 fits (< 2^256); hash 2^128 + 2^127... check a carry case:
        let mut big = [0u8; 32];
        big[16..32].copy_from_slice(&[0xff; 16]);
        assert!(meets_difficulty(&big, 1));
        assert!(!meets_difficulty(&big, 2));
    }
}
