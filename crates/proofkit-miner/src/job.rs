//! Mining jobs: what to hash (blob, nonce position, RandomX key and version) and what a result
//! must meet (a pool share target or a block difficulty).

use crate::target::{meets_difficulty, Target};
use crate::Error;
use proofkit_randomx::Version;

/// The longest hashing blob accepted from a pool or daemon (xmrig's limit, 408 bytes, leaves room
/// for the largest Monero-family headers; Monero's own blobs are 76 bytes and up).
pub const MAX_BLOB: usize = 408;

/// Byte offset of the 4-byte nonce in a Monero hashing blob whose header varints have their
/// usual sizes (major, minor: 1 byte; timestamp: 5 bytes; then the 32-byte previous id).
pub const MONERO_NONCE_OFFSET: usize = 39;

/// The RandomX variants a job may ask for (xmrig's algorithm names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algo {
    /// `rx/0`: RandomX v1 as Monero uses it.
    Rx0,
    /// `rx/2`: RandomX v2; shares carry the commitment `Blake2b-256(blob || hash)` as well.
    Rx2,
}

impl Algo {
    pub fn parse(name: &str) -> Result<Algo, Error> {
        match name {
            "rx/0" | "randomx" | "rx" => Ok(Algo::Rx0),
            "rx/2" => Ok(Algo::Rx2),
            other => Err(Error::UnknownAlgo(other.chars().take(64).collect())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Algo::Rx0 => "rx/0",
            Algo::Rx2 => "rx/2",
        }
    }

    pub fn version(self) -> Version {
        match self {
            Algo::Rx0 => Version::V1,
            Algo::Rx2 => Version::V2,
        }
    }
}

/// What a result must meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Goal {
    /// A pool share: the hash's last 8 bytes below the target.
    Share(Target),
    /// A block: Monero's 256-bit check against the block difficulty.
    Block(u128),
}

impl Goal {
    pub fn is_met_by(&self, hash: &[u8; 32]) -> bool {
        match *self {
            Goal::Share(t) => t.is_met_by(hash),
            Goal::Block(d) => meets_difficulty(hash, d),
        }
    }

    pub fn difficulty(&self) -> u128 {
        match *self {
            Goal::Share(t) => t.difficulty() as u128,
            Goal::Block(d) => d,
        }
    }
}

/// One unit of work.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// The pool's `job_id`, or a daemon template's id (height and previous hash).
    pub id: String,
    /// The hashing blob; the nonce bytes are overwritten by the miner.
    pub blob: Vec<u8>,
    pub nonce_offset: usize,
    pub goal: Goal,
    /// The RandomX key.
    pub seed_hash: [u8; 32],
    pub height: Option<u64>,
    pub algo: Algo,
}

impl Job {
    /// Checks the blob and nonce position; `Error::BadJob` says what is wrong.
    pub fn validate(&self) -> Result<(), Error> {
        if self.blob.len() > MAX_BLOB {
            return Err(Error::BadJob(format!(
                "blob of {} bytes is longer than {MAX_BLOB}",
                self.blob.len()
            )));
        }
        if self.nonce_offset + 4 > self.blob.len() {
            return Err(Error::BadJob(format!(
                "blob of {} bytes has no room for a nonce at offset {}",
                self.blob.len(),
                self.nonce_offset
            )));
        }
        Ok(())
    }

    /// The blob with `nonce` written at the nonce offset.
    pub fn blob_with_nonce(&self, nonce: u32) -> Vec<u8> {
        let mut b = self.blob.clone();
        b[self.nonce_offset..self.nonce_offset + 4].copy_from_slice(&nonce.to_le_bytes());
        b
    }
}

/// Parses a 32-byte hex seed hash.
pub fn parse_seed_hash(s: &str) -> Result<[u8; 32], Error> {
    let b = hex::decode(s).map_err(|e| Error::BadJob(format!("seed_hash: {e}")))?;
    b.try_into()
        .map_err(|b: Vec<u8>| Error::BadJob(format!("seed_hash of {} bytes, not 32", b.len())))
}

/// Reads a Monero varint (7 bits a byte, little-endian groups) at `pos`; returns the value and
/// the position after it.
pub fn read_varint(b: &[u8], mut pos: usize) -> Result<(u64, usize), Error> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b
            .get(pos)
            .ok_or_else(|| Error::BadJob("truncated varint in block header".into()))?;
        pos += 1;
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Ok((v, pos));
        }
    }
    Err(Error::BadJob("varint longer than 64 bits".into()))
}

/// The nonce offset of a Monero block (or hashing blob): after the major and minor version and
/// timestamp varints and the 32-byte previous block id.
pub fn monero_nonce_offset(blob: &[u8]) -> Result<usize, Error> {
    let (_, p) = read_varint(blob, 0)?;
    let (_, p) = read_varint(blob, p)?;
    let (_, p) = read_varint(blob, p)?;
    let off = p + 32;
    if off + 4 > blob.len() {
        return Err(Error::BadJob(format!(
            "blob of {} bytes ends before its nonce",
            blob.len()
        )));
    }
    Ok(off)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn algo_names() {
        assert_eq!(Algo::parse("rx/0").unwrap(), Algo::Rx0);
        assert_eq!(Algo::parse("rx/2").unwrap().version(), Version::V2);
        assert!(matches!(Algo::parse("cn/r"), Err(Error::UnknownAlgo(_))));
    }

    #[test]
    fn nonce_offset_of_a_monero_header() {
        // major 16, minor 16, a 5-byte timestamp varint, 32-byte prev id, nonce.
        let mut b = vec![16, 16, 0x80, 0x80, 0x80, 0x80, 0x06];
        b.extend([0xaa; 32]);
        b.extend([1, 2, 3, 4]);
        assert_eq!(monero_nonce_offset(&b).unwrap(), MONERO_NONCE_OFFSET);
        assert!(monero_nonce_offset(&b[..40]).is_err());
        assert!(monero_nonce_offset(&[0x80; 20]).is_err());
    }

    #[test]
    fn job_validation() {
        let mut j = Job {
            id: "1".into(),
            blob: vec![0; 76],
            nonce_offset: 39,
            goal: Goal::Block(100),
            seed_hash: [0; 32],
            height: None,
            algo: Algo::Rx0,
        };
        assert!(j.validate().is_ok());
        assert_eq!(&j.blob_with_nonce(0x04030201)[39..43], &[1, 2, 3, 4]);
        j.nonce_offset = 73;
        assert!(j.validate().is_err());
        j.nonce_offset = 39;
        j.blob = vec![0; MAX_BLOB + 1];
        assert!(j.validate().is_err());
        assert!(parse_seed_hash("00").is_err());
        assert!(parse_seed_hash(&"11".repeat(32)).is_ok());
    }
}
