//! Equihash as defined in the Zcash protocol specification (section "Equihash"; BLAKE2b
//! personalization `ZcashPoW || le32(n) || le32(k)` by default, input `header || nonce`):
//!
//! * [`params`]: `(n, k)` checks and derived lengths;
//! * [`hash`]: string generation (portable and multi-lane BLAKE2b kernels);
//! * [`minimal`]: the minimal (packed) solution encoding;
//! * [`verify`]: the verifier, with one error kind per broken rule;
//! * [`solver`]: a multi-threaded Wagner solver finding every solution, with `full`, `pr`
//!   (post-retrieval, CIP-PR/APR) and `em` (external memory) index-pointer modes; `full` runs
//!   the fast path (`fast`: index pointers inside two alternating heaps) where it has a plan;
//! * [`lanes`]: BLAKE2b with a shared prefix state, 8 messages per AVX-512 instruction stream;
//! * `em`: the `em` mode's fast path (the CIP-EM layout: one layer of byte-packed rows in
//!   memory, index pointers in a temporary file), also `pr`'s (the index pointers from the
//!   height on in memory) and `full`'s for (144,5) and (192,7); multi-threaded;
//! * `pool`: `em`'s chunk pool shared by its threads (unsafe code, as are `lanes`'
//!   AVX-512 intrinsics and `fast::avx512`'s row arithmetic);
//! * [`spill`]: the `em` mode's temporary file.
//!
//! The memory modes follow "Memory Optimizations of Wagner's Algorithm with Applications to
//! Equihash" (IACR ePrint 2025/2141).

pub(crate) mod em;
pub(crate) mod fast;
pub mod hash;
pub mod lanes;
pub mod minimal;
pub mod params;
pub(crate) mod pool;
pub mod reference;
pub mod solver;
pub mod spill;
pub mod verify;

pub use hash::{HashGen, Kernel, ZCASH_PERSONALIZATION};
pub use params::{Params, ParamsError};
pub use solver::{
    solve, solve_general, solve_in, Mode, SolveError, SolveStats, SolverConfig, Workspace,
};
pub use verify::{verify_indices, verify_minimal, ErrorKind, VerifyError};

/// The 32-byte nonce whose little-endian value is `v` (the vectors' `nonce_int`).
pub fn nonce_from_int(v: u128) -> [u8; 32] {
    let mut n = [0u8; 32];
    n[..16].copy_from_slice(&v.to_le_bytes());
    n
}
