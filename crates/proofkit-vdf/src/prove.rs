//! Creating a checkpointed proof (sequential) and verifying it (parallel over segments).
#![deny(unsafe_code)]

use crate::kernel::{best_for, best_many, best_single, KernelToken};
use crate::proof::{checkpoint_count, Proof, ProofError};
use crate::sha256::{bytes_to_words, words_to_bytes};
use crate::State;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VdfError {
    #[error(transparent)]
    Proof(#[from] ProofError),
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    /// Segment `index` (0-based) does not reach its checkpoint: the checkpoint (or an
    /// earlier one it starts from) was tampered with.
    #[error("segment {index} of {segments} is invalid: links {first_link}..{end_link} do not reach checkpoint {index}")]
    BadSegment {
        index: u64,
        segments: u64,
        first_link: u64,
        end_link: u64,
    },
    #[error("malformed proof: {0}")]
    Malformed(#[from] ProofError),
    #[error("cannot start {threads} verification threads: {reason}")]
    Threads { threads: usize, reason: String },
}

/// Links per kernel call while proving, so that progress is reported at least this often.
const PROGRESS_STEP: u64 = 1 << 20;

/// Runs `iterations` links from `start` (after `infusions`), recording a checkpoint every
/// `segment` links. `progress` is called with the number of links just done.
pub fn prove(
    start: &[u8; 32],
    infusions: &[[u8; 32]],
    iterations: u64,
    segment: u64,
    progress: &mut dyn FnMut(u64),
) -> Result<Proof, VdfError> {
    let k = checkpoint_count(iterations, segment)?;
    let kernel = best_single();
    let mut proof = Proof {
        start: *start,
        infusions: infusions.to_vec(),
        iterations,
        segment,
        checkpoints: Vec::new(),
    };
    proof.checkpoints.reserve_exact(
        usize::try_from(k).map_err(|_| ProofError::TooManyCheckpoints { count: k })?,
    );
    let mut h: State = bytes_to_words(&proof.seed());
    for i in 0..k {
        let mut left = proof.segment_len(i);
        while left > 0 {
            let step = left.min(PROGRESS_STEP);
            kernel.run(std::slice::from_mut(&mut h), step);
            progress(step);
            left -= step;
        }
        proof.checkpoints.push(words_to_bytes(&h));
    }
    Ok(proof)
}

/// Verifies every segment on `threads` threads (0: all cores) with the fastest many-chain
/// kernel. `progress` is called with the number of segments just checked.
/// The last, partial group of segments goes to the kernel that finishes it soonest.
pub fn verify(
    proof: &Proof,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), VerifyError> {
    verify_impl(proof, threads, best_many(), true, progress)
}

/// [`verify`] with a chosen kernel for every segment.
pub fn verify_with(
    proof: &Proof,
    threads: usize,
    kernel: KernelToken,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), VerifyError> {
    verify_impl(proof, threads, kernel, false, progress)
}

fn verify_impl(
    proof: &Proof,
    threads: usize,
    kernel: KernelToken,
    auto_tail: bool,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), VerifyError> {
    proof.validate()?;
    let k = proof.checkpoints.len() as u64;
    let seed = proof.seed();
    let lanes = kernel.kernel().lanes() as u64;
    // Every segment but possibly the last has `segment` links; those go in batches of `lanes`,
    // the short last one (if any) in a batch of its own.
    let full = if proof.segment_len(k - 1) == proof.segment {
        k
    } else {
        k - 1
    };
    let mut batches: Vec<(u64, u64)> = (0..full.div_ceil(lanes))
        .map(|b| (b * lanes, ((b + 1) * lanes).min(full)))
        .collect();
    if full < k {
        batches.push((full, k));
    }
    let first_bad = AtomicU64::new(u64::MAX);
    let run_batch = |&(lo, hi): &(u64, u64)| {
        if lo > first_bad.load(Ordering::Relaxed) {
            return;
        }
        let start_of = |i: u64| {
            if i == 0 {
                seed
            } else {
                proof.checkpoints[(i - 1) as usize]
            }
        };
        let mut states: Vec<State> = (lo..hi).map(|i| bytes_to_words(&start_of(i))).collect();
        let k = if auto_tail && hi - lo < lanes {
            best_for((hi - lo) as usize)
        } else {
            kernel
        };
        k.run(&mut states, proof.segment_len(lo));
        for (i, s) in (lo..hi).zip(&states) {
            if words_to_bytes(s) != proof.checkpoints[i as usize] {
                first_bad.fetch_min(i, Ordering::Relaxed);
                break;
            }
        }
        progress(hi - lo);
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| VerifyError::Threads {
            threads,
            reason: e.to_string(),
        })?;
    pool.install(|| {
        use rayon::prelude::*;
        batches.par_iter().with_max_len(1).for_each(run_batch);
    });
    match first_bad.into_inner() {
        u64::MAX => Ok(()),
        index => {
            let first_link = index * proof.segment;
            Err(VerifyError::BadSegment {
                index,
                segments: k,
                first_link,
                end_link: first_link + proof.segment_len(index),
            })
        }
    }
}
