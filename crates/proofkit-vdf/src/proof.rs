//! The proof file: a versioned binary format and its JSON form.
//!
//! A proof of `n` links from `start` (after infusions) with segment length `S` has
//! `k = ceil(n / S)` checkpoints: checkpoint `i` (0-based) is the chain value after
//! `min((i + 1) * S, n)` links; the last one is the VDF output. Segment `i` runs from
//! checkpoint `i - 1` (the infused start for `i = 0`) to checkpoint `i`.
//!
//! Binary layout, version 1 (all integers little-endian):
//!
//! ```text
//!  offset  size     field
//!  ------  -------  ---------------------------------------------------------------
//!       0        8  magic  "PKVDF256"
//!       8        2  version (u16) = 1
//!      10        2  reserved (u16) = 0
//!      12        4  m = number of infusions (u32)
//!      16        8  n = iterations (u64, >= 1)
//!      24        8  S = segment length in iterations (u64, >= 1)
//!      32        8  k = number of checkpoints (u64, must equal ceil(n / S))
//!      40       32  start hash (before infusions)
//!      72     32*m  infusion values, in order
//!  72+32m     32*k  checkpoints, in order
//!  end-32       32  SHA-256 of every preceding byte
//!
//!  +----------+-----+-----+-----+-------+-------+-------+--------+--------------+---------------+--------+
//!  | PKVDF256 | ver | rsv |  m  |   n   |   S   |   k   | start  | infusions... | checkpoints...| sha256 |
//!  +----------+-----+-----+-----+-------+-------+-------+--------+--------------+---------------+--------+
//!  0          8     10    12    16      24      32      40       72
//! ```
//!
//! Reading checks, in order: length at least the fixed part, magic, version, reserved field,
//! the declared counts against each other (`k == ceil(n / S)`, bounded), the exact file length
//! (truncated or trailing bytes), then the checksum. Each failure is its own [`ProofError`].
#![deny(unsafe_code)]

use crate::sha256::sha256;

/// The 8-byte magic at offset 0.
pub const MAGIC: [u8; 8] = *b"PKVDF256";
/// The format version this code writes and reads.
pub const VERSION: u16 = 1;
/// The fixed header before the infusions.
pub const HEADER_LEN: usize = 72;
/// The trailing checksum.
pub const CHECKSUM_LEN: usize = 32;
/// The largest checkpoint count accepted (4 GiB of checkpoints).
pub const MAX_CHECKPOINTS: u64 = 1 << 27;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProofError {
    #[error("proof file too short: {len} bytes, the fixed part alone is {min}")]
    TooShort { len: usize, min: usize },
    #[error("not a proofkit VDF proof (bad magic)")]
    BadMagic,
    #[error("unsupported proof version {0} (this build reads version {VERSION})")]
    UnsupportedVersion(u16),
    #[error("reserved header field is {0:#06x}, must be 0")]
    Reserved(u16),
    #[error("iteration count is 0")]
    ZeroIterations,
    #[error("segment length is 0")]
    ZeroSegment,
    #[error("{iterations} iterations in segments of {segment} need {expected} checkpoints, the proof declares {declared}")]
    CheckpointCount {
        iterations: u64,
        segment: u64,
        expected: u64,
        declared: u64,
    },
    #[error(
        "{count} checkpoints is more than the {MAX_CHECKPOINTS} accepted; use longer segments"
    )]
    TooManyCheckpoints { count: u64 },
    #[error("proof file truncated: {actual} bytes, the header declares {expected}")]
    Truncated { expected: u64, actual: u64 },
    #[error("proof file has {extra} trailing bytes after the declared {expected}")]
    TrailingBytes { expected: u64, extra: u64 },
    #[error("proof checksum mismatch: the file is corrupt")]
    Checksum,
    #[error("invalid proof JSON: {0}")]
    Json(String),
}

/// A checkpointed proof.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Proof {
    /// The chain's start, before infusions.
    pub start: [u8; 32],
    /// Values infused into the start, in order: `h <- SHA256(h || v)`.
    pub infusions: Vec<[u8; 32]>,
    /// Total links `n`.
    pub iterations: u64,
    /// Links per segment `S`.
    pub segment: u64,
    /// `ceil(n / S)` checkpoints; the last is the output.
    pub checkpoints: Vec<[u8; 32]>,
}

/// `ceil(iterations / segment)`, checked: zero counts and too many checkpoints are errors.
pub fn checkpoint_count(iterations: u64, segment: u64) -> Result<u64, ProofError> {
    if iterations == 0 {
        return Err(ProofError::ZeroIterations);
    }
    if segment == 0 {
        return Err(ProofError::ZeroSegment);
    }
    let k = iterations.div_ceil(segment);
    if k > MAX_CHECKPOINTS {
        return Err(ProofError::TooManyCheckpoints { count: k });
    }
    Ok(k)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn hash_at(b: &[u8], at: usize) -> [u8; 32] {
    b[at..at + 32].try_into().expect("32 bytes")
}

impl Proof {
    /// The chain start after the infusions: the start of segment 0.
    pub fn seed(&self) -> [u8; 32] {
        self.infusions
            .iter()
            .fold(self.start, |h, v| crate::infuse(&h, v))
    }

    /// The VDF output (the last checkpoint), or the seed for a proof without checkpoints.
    pub fn output(&self) -> [u8; 32] {
        self.checkpoints
            .last()
            .copied()
            .unwrap_or_else(|| self.seed())
    }

    /// Checks that the counts agree with each other.
    pub fn validate(&self) -> Result<(), ProofError> {
        let expected = checkpoint_count(self.iterations, self.segment)?;
        let declared = self.checkpoints.len() as u64;
        if declared != expected {
            return Err(ProofError::CheckpointCount {
                iterations: self.iterations,
                segment: self.segment,
                expected,
                declared,
            });
        }
        if u32::try_from(self.infusions.len()).is_err() {
            return Err(ProofError::Json(format!(
                "{} infusions do not fit the format",
                self.infusions.len()
            )));
        }
        Ok(())
    }

    /// The number of links in segment `i` (the last one may be shorter).
    pub fn segment_len(&self, i: u64) -> u64 {
        let begin = i.saturating_mul(self.segment);
        self.iterations.saturating_sub(begin).min(self.segment)
    }

    /// The encoded size of a proof with `m` infusions and `k` checkpoints, checked.
    pub fn encoded_len(m: u64, k: u64) -> Option<u64> {
        m.checked_add(k)?
            .checked_mul(32)?
            .checked_add((HEADER_LEN + CHECKSUM_LEN) as u64)
    }

    /// Encodes the binary form (see the module doc).
    pub fn to_bytes(&self) -> Result<Vec<u8>, ProofError> {
        self.validate()?;
        let mut out = Vec::with_capacity(
            HEADER_LEN + 32 * (self.infusions.len() + self.checkpoints.len()) + CHECKSUM_LEN,
        );
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        // `validate` checked that the infusion count fits a u32.
        out.extend_from_slice(&(self.infusions.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.iterations.to_le_bytes());
        out.extend_from_slice(&self.segment.to_le_bytes());
        out.extend_from_slice(&(self.checkpoints.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.start);
        for v in self.infusions.iter().chain(&self.checkpoints) {
            out.extend_from_slice(v);
        }
        let sum = sha256(&out);
        out.extend_from_slice(&sum);
        Ok(out)
    }

    /// Decodes and checks the binary form.
    pub fn from_bytes(b: &[u8]) -> Result<Self, ProofError> {
        let min = HEADER_LEN + CHECKSUM_LEN;
        if b.len() < min {
            if b.len() >= 8 && b[..8] != MAGIC {
                return Err(ProofError::BadMagic);
            }
            return Err(ProofError::TooShort { len: b.len(), min });
        }
        if b[..8] != MAGIC {
            return Err(ProofError::BadMagic);
        }
        let version = u16_at(b, 8);
        if version != VERSION {
            return Err(ProofError::UnsupportedVersion(version));
        }
        let reserved = u16_at(b, 10);
        if reserved != 0 {
            return Err(ProofError::Reserved(reserved));
        }
        let m = u32_at(b, 12) as u64;
        let iterations = u64_at(b, 16);
        let segment = u64_at(b, 24);
        let declared = u64_at(b, 32);
        let expected_k = checkpoint_count(iterations, segment)?;
        if declared != expected_k {
            return Err(ProofError::CheckpointCount {
                iterations,
                segment,
                expected: expected_k,
                declared,
            });
        }
        // m < 2^32 and k <= 2^27, so this cannot overflow a u64; checked all the same.
        let expected = Self::encoded_len(m, declared)
            .ok_or(ProofError::TooManyCheckpoints { count: declared })?;
        let actual = b.len() as u64;
        if actual < expected {
            return Err(ProofError::Truncated { expected, actual });
        }
        if actual > expected {
            return Err(ProofError::TrailingBytes {
                expected,
                extra: actual - expected,
            });
        }
        let body = &b[..b.len() - CHECKSUM_LEN];
        if sha256(body)[..] != b[body.len()..] {
            return Err(ProofError::Checksum);
        }
        let start = hash_at(b, 40);
        // Both counts are bounded by the (already checked) length of `b`, so they fit usize.
        let (m, k) = (m as usize, declared as usize);
        let infusions = (0..m).map(|i| hash_at(b, HEADER_LEN + 32 * i)).collect();
        let base = HEADER_LEN + 32 * m;
        let checkpoints = (0..k).map(|i| hash_at(b, base + 32 * i)).collect();
        Ok(Proof {
            start,
            infusions,
            iterations,
            segment,
            checkpoints,
        })
    }

    /// The JSON form: `{"format":"proofkit-vdf","version":1,"start_hex":..,"infusions_hex":[..],
    /// "iterations":..,"segment":..,"checkpoints_hex":[..],"output_hex":..}`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "format": "proofkit-vdf",
            "version": VERSION,
            "start_hex": hex::encode(self.start),
            "infusions_hex": self.infusions.iter().map(hex::encode).collect::<Vec<_>>(),
            "iterations": self.iterations,
            "segment": self.segment,
            "checkpoints_hex": self.checkpoints.iter().map(hex::encode).collect::<Vec<_>>(),
            "output_hex": hex::encode(self.output()),
        })
    }

    /// Reads the JSON form back (the `output_hex` field, when present, must match).
    pub fn from_json(text: &str) -> Result<Self, ProofError> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| ProofError::Json(e.to_string()))?;
        let err = |m: &str| ProofError::Json(m.to_string());
        if v.get("format").and_then(|f| f.as_str()) != Some("proofkit-vdf") {
            return Err(err("missing \"format\": \"proofkit-vdf\""));
        }
        let version = v
            .get("version")
            .and_then(|x| x.as_u64())
            .ok_or_else(|| err("missing version"))?;
        if version != VERSION as u64 {
            return Err(ProofError::UnsupportedVersion(
                u16::try_from(version).unwrap_or(u16::MAX),
            ));
        }
        let hash = |x: &serde_json::Value, what: &str| -> Result<[u8; 32], ProofError> {
            let s = x
                .as_str()
                .ok_or_else(|| err(&format!("{what} is not a string")))?;
            let bytes = hex::decode(s).map_err(|e| err(&format!("{what}: {e}")))?;
            bytes
                .try_into()
                .map_err(|_| err(&format!("{what} is not 32 bytes")))
        };
        let list = |key: &str| -> Result<Vec<[u8; 32]>, ProofError> {
            let a = v
                .get(key)
                .and_then(|x| x.as_array())
                .ok_or_else(|| err(&format!("missing {key}")))?;
            a.iter()
                .enumerate()
                .map(|(i, x)| hash(x, &format!("{key}[{i}]")))
                .collect()
        };
        let num = |key: &str| {
            v.get(key)
                .and_then(|x| x.as_u64())
                .ok_or_else(|| err(&format!("missing {key}")))
        };
        let p = Proof {
            start: hash(
                v.get("start_hex").ok_or_else(|| err("missing start_hex"))?,
                "start_hex",
            )?,
            infusions: list("infusions_hex")?,
            iterations: num("iterations")?,
            segment: num("segment")?,
            checkpoints: list("checkpoints_hex")?,
        };
        p.validate()?;
        if let Some(out) = v.get("output_hex") {
            if hash(out, "output_hex")? != p.output() {
                return Err(err("output_hex differs from the last checkpoint"));
            }
        }
        Ok(p)
    }
}
