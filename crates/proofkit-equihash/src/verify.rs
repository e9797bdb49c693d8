//! The verifier (Zcash protocol specification, "Equihash"; the rules of zcashd's
//! `IsValidSolution`): for a solution of `2^k` indices, viewed as a binary tree,
//! at every merge of two sibling subtrees of `2^(l-1)` leaves each (level `l = 1..k`)
//!
//! 1. their XOR-ed strings agree on collision digit `l-1` ([`ErrorKind::Collision`]);
//! 2. the left subtree's first index is not above the right one's ([`ErrorKind::OutOfOrder`]);
//! 3. the two subtrees share no index ([`ErrorKind::DuplicateIdxs`]);
//!
//! checked in that order, depth-first, left subtree first; finally the XOR of all strings
//! must be zero ([`ErrorKind::NonZeroRoot`]). Lengths and index ranges are checked first.
#![deny(unsafe_code)]

use crate::hash::{to_words, HashGen, BLOCK_BYTES};
use crate::minimal::{self, EncodingError};
use crate::params::Params;

/// The kinds of rejection, for matching against vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    BadLength,
    IndexOutOfRange,
    Collision,
    OutOfOrder,
    DuplicateIdxs,
    NonZeroRoot,
}

/// Why a solution is invalid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("bad length: expected {expected}, got {got}")]
    BadLength { expected: usize, got: usize },
    #[error("index {index} out of range (must be below 2^{bits})")]
    IndexOutOfRange { index: u32, bits: u32 },
    #[error(
        "collision: subtrees at level {level} (starting at position {position}) do not collide"
    )]
    Collision { level: u32, position: usize },
    #[error("out of order: subtrees at level {level} (starting at position {position}) are in the wrong order")]
    OutOfOrder { level: u32, position: usize },
    #[error("duplicate indices: subtrees at level {level} (starting at position {position}) share an index")]
    DuplicateIdxs { level: u32, position: usize },
    #[error("non-zero root: the XOR of all strings is not zero")]
    NonZeroRoot,
}

impl VerifyError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            VerifyError::BadLength { .. } => ErrorKind::BadLength,
            VerifyError::IndexOutOfRange { .. } => ErrorKind::IndexOutOfRange,
            VerifyError::Collision { .. } => ErrorKind::Collision,
            VerifyError::OutOfOrder { .. } => ErrorKind::OutOfOrder,
            VerifyError::DuplicateIdxs { .. } => ErrorKind::DuplicateIdxs,
            VerifyError::NonZeroRoot => ErrorKind::NonZeroRoot,
        }
    }
}

impl From<EncodingError> for VerifyError {
    fn from(e: EncodingError) -> Self {
        match e {
            EncodingError::BadLength { expected, got }
            | EncodingError::BadCount { expected, got } => VerifyError::BadLength { expected, got },
            EncodingError::IndexOutOfRange { index, bits } => {
                VerifyError::IndexOutOfRange { index, bits }
            }
        }
    }
}

/// Bits `[start, start + len)` (len <= 32) of a big-endian word string.
pub(crate) fn bits_at(words: &[u32], start: u32, len: u32) -> u32 {
    if len == 0 {
        return 0;
    }
    let w = (start / 32) as usize;
    let hi = words.get(w).copied().unwrap_or(0) as u64;
    let lo = words.get(w + 1).copied().unwrap_or(0) as u64;
    let v = (hi << 32) | lo;
    let shift = 64 - (start % 32) - len;
    ((v >> shift) & ((1u64 << len) - 1)) as u32
}

/// The strings of `indices` as big-endian words (`ceil(n/32)` words each), hashed in batches.
fn leaf_words(gen: &HashGen, indices: &[u32]) -> Vec<Vec<u32>> {
    let p = gen.params();
    let per = p.indices_per_hash();
    let words = (p.n() as usize).div_ceil(32);
    let sl = p.string_len();
    let mut blocks: Vec<u32> = indices.iter().map(|i| i / per).collect();
    blocks.sort_unstable();
    blocks.dedup();
    // Hash each needed block once (runs of consecutive blocks go through the batch kernel).
    let mut out_blocks = std::collections::HashMap::with_capacity(blocks.len());
    let mut buf = [[0u8; BLOCK_BYTES]; 1];
    for &b in &blocks {
        gen.blocks(b, &mut buf);
        out_blocks.insert(b, buf[0]);
    }
    indices
        .iter()
        .map(|&i| {
            let blk = &out_blocks[&(i / per)];
            let off = (i % per) as usize * sl;
            let mut w = vec![0u32; words];
            to_words(&blk[off..off + sl], &mut w);
            w
        })
        .collect()
}

struct Node {
    hash: Vec<u32>,
    sorted: Vec<u32>,
}

fn validate(
    p: Params,
    leaves: &[Vec<u32>],
    indices: &[u32],
    offset: usize,
) -> Result<Node, VerifyError> {
    if indices.len() == 1 {
        return Ok(Node {
            hash: leaves[offset].clone(),
            sorted: vec![indices[0]],
        });
    }
    let mid = indices.len() / 2;
    let a = validate(p, leaves, &indices[..mid], offset)?;
    let b = validate(p, leaves, &indices[mid..], offset + mid)?;
    let level = indices.len().trailing_zeros();
    let hash: Vec<u32> = a.hash.iter().zip(&b.hash).map(|(x, y)| x ^ y).collect();
    let cb = p.collision_bits();
    if bits_at(&hash, (level - 1) * cb, cb) != 0 {
        return Err(VerifyError::Collision {
            level,
            position: offset,
        });
    }
    if indices[mid] < indices[0] {
        return Err(VerifyError::OutOfOrder {
            level,
            position: offset,
        });
    }
    // Merge the two sorted index lists, watching for an index in both.
    let mut sorted = Vec::with_capacity(indices.len());
    let (mut i, mut j) = (0, 0);
    while i < a.sorted.len() && j < b.sorted.len() {
        match a.sorted[i].cmp(&b.sorted[j]) {
            std::cmp::Ordering::Less => {
                sorted.push(a.sorted[i]);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                sorted.push(b.sorted[j]);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                return Err(VerifyError::DuplicateIdxs {
                    level,
                    position: offset,
                })
            }
        }
    }
    sorted.extend_from_slice(&a.sorted[i..]);
    sorted.extend_from_slice(&b.sorted[j..]);
    Ok(Node { hash, sorted })
}

/// Verifies a solution given as its `2^k` indices.
pub fn verify_indices(gen: &HashGen, indices: &[u32]) -> Result<(), VerifyError> {
    let p = gen.params();
    if indices.len() != p.solution_len() {
        return Err(VerifyError::BadLength {
            expected: p.solution_len(),
            got: indices.len(),
        });
    }
    let bits = p.index_bits();
    if let Some(&bad) = indices.iter().find(|&&i| bits < 32 && (i >> bits) != 0) {
        return Err(VerifyError::IndexOutOfRange { index: bad, bits });
    }
    let leaves = leaf_words(gen, indices);
    let root = validate(p, &leaves, indices, 0)?;
    let cb = p.collision_bits();
    if bits_at(&root.hash, p.k() * cb, cb) != 0 {
        return Err(VerifyError::NonZeroRoot);
    }
    Ok(())
}

/// Verifies a minimally encoded solution (length checked first).
pub fn verify_minimal(gen: &HashGen, solution: &[u8]) -> Result<(), VerifyError> {
    let indices = minimal::decode(gen.params(), solution)?;
    verify_indices(gen, &indices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bit_extraction() {
        let w = [0x1234_5678, 0x9abc_def0];
        assert_eq!(bits_at(&w, 0, 8), 0x12);
        assert_eq!(bits_at(&w, 4, 8), 0x23);
        assert_eq!(bits_at(&w, 28, 8), 0x89);
        assert_eq!(bits_at(&w, 40, 24), 0xbcdef0);
        assert_eq!(bits_at(&w, 60, 4), 0x0);
    }
}
