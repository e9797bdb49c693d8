//! Recursive SHA-256 verifiable delay function, as used by the MMX blockchain.
//!
//! One link is `h <- SHA256(h)` on a 32-byte `h` (FIPS 180-4 SHA-256 of a 32-byte message:
//! exactly one padded block). A chain of `n` links cannot be sped up by parallelism, so it
//! proves elapsed time; optionally the start is first bound to outside data by *infusions*,
//! `h <- SHA256(h || v)` for 32-byte values `v`, as MMX does.
//!
//! * [`prove`] runs the chain once, sequentially, recording a checkpoint every `S` links;
//! * [`verify`] recomputes every segment between checkpoints independently, all cores and
//!   many chains per core (SIMD lanes or interleaved SHA-NI chains), and reports the first
//!   segment that does not reach its checkpoint;
//! * [`proof`] is the versioned binary proof file (byte diagram there) and its JSON form;
//! * [`kernel`] lists the chain kernels (portable, SHA-NI x1..x4, AVX2 8 lanes, AVX-512 16
//!   lanes, each also with two register sets) behind runtime dispatch with unforgeable tokens.
//!
//! The spec is FIPS 180-4 (SHA-256) plus `docs`-level conventions described in the crate
//! README; the issue that asked for it is proofkit issue 5.
#![deny(unsafe_code)]

pub mod compress;
pub mod kernel;
pub mod proof;
mod prove;
pub mod sha256;

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86_avx2;
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86_avx512;
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86_shani;

pub use kernel::{available, best_many, best_single, Kernel, KernelToken};
pub use proof::{Proof, ProofError};
pub use prove::{prove, verify, verify_with, VdfError, VerifyError};

/// A chain value as eight big-endian 32-bit words (`H0..H7` of the digest).
pub type State = [u32; 8];

/// `n` links of `h <- SHA256(h)` from `start`, with the fastest single-chain kernel.
pub fn chain(start: &[u8; 32], n: u64) -> [u8; 32] {
    let mut s = sha256::bytes_to_words(start);
    best_single().run(std::slice::from_mut(&mut s), n);
    sha256::words_to_bytes(&s)
}

/// One infusion: `SHA256(h || value)`.
pub fn infuse(h: &[u8; 32], value: &[u8; 32]) -> [u8; 32] {
    let mut m = [0u8; 64];
    m[..32].copy_from_slice(h);
    m[32..].copy_from_slice(value);
    sha256::sha256(&m)
}
