//! RandomX, the CPU proof of work of Monero: v1 (`rx/0`) and v2 (RANDOMX_FLAG_V2), light mode
//! (256 MiB Cache, dataset items computed on the fly) and fast mode (2080 MiB Dataset).
//!
//! The normative specification is `doc/specs.md` of tevador/RandomX v2.0; each module cites the
//! chapter it implements:
//!
//! | module | spec |
//! |---|---|
//! | [`config`] | 1.2 configurable parameters |
//! | [`blake`] | Blake2b, H', BlakeGenerator (3.5) |
//! | [`aes`] | AesGenerator1R/4R, AesHash1R (3.2-3.4), v2 F/E mixing |
//! | [`superscalar`] | SuperscalarHash (6) |
//! | [`cache`], [`dataset`] | Cache and Dataset (7) |
//! | [`program`] | instruction encoding and opcode table (5.1) |
//! | [`vm`] | the VM and the hash (2, 4, 5) |
//!
//! ```no_run
//! use std::sync::Arc;
//! use proofkit_randomx::{Cache, Vm, Version, PagePolicy};
//! let cache = Arc::new(Cache::new(b"test key 000", PagePolicy::Transparent).unwrap());
//! let mut vm = Vm::light(cache, Version::V1).unwrap();
//! let hash = vm.hash(b"This is a test");
//! ```
#![deny(unsafe_code)]

pub mod aes;
pub mod analysis;
pub mod argon2_fill;
pub mod argon2d;
pub mod blake;
pub mod cache;
pub mod config;
pub mod dataset;
#[cfg(target_arch = "x86_64")]
pub mod jit;
pub mod peer;
pub mod program;
pub mod reciprocal;
pub mod superscalar;
pub mod vm;

pub use aes::Aes;
pub use cache::Cache;
pub use config::Version;
pub use dataset::Dataset;
pub use proofkit_core::memory::{PageKind, PagePolicy};
pub use vm::light_batch::{LightBatch, DEFAULT_VMS as LIGHT_BATCH_VMS};
pub use vm::{DatasetSource, JitRounding, Vm, VmOptions};

/// Errors of the RandomX library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("memory: {0}")]
    Memory(#[from] proofkit_core::memory::MemoryError),
    #[error("argon2: {0}")]
    Argon2(String),
    #[error("the cache has not been initialised with a key")]
    CacheNotInitialized,
    #[error("dataset item range {start}+{count} is outside the dataset")]
    ItemRange { start: u64, count: u64 },
    #[error("hash_next/hash_last called without a pending hash_first")]
    NoPendingHash,
    #[error("a light-mode batch needs at least one VM")]
    EmptyBatch,
    #[error("coroutine stack: {0}")]
    CoroutineStack(String),
}

/// The commitment of RandomX v2's API: `Blake2b-256(input || hash)`.
pub fn commitment(input: &[u8], hash: &[u8; 32]) -> [u8; 32] {
    blake::hash256_parts(&[input, hash])
}
