//! `proofkit-state`: an embedded Ethereum state database.
//!
//! * [`trie`]: the Merkle-Patricia trie of the Yellow Paper (appendix D) with cached node
//!   references, structurally shared between versions; [`rlp`] (appendix B), [`keccak`].
//! * [`account`], [`state`]: the secure account trie and per-account storage tries.
//! * [`store`]: a copy-on-write page store on a memory-mapped file (4 KiB pages, two meta pages,
//!   free-page reuse, commit levels), holding the finalized accounts and slots.
//! * [`db`]: blocks: open a block on any unfinalized parent, read-your-writes, commit to a state
//!   root, forks and reorgs, finalize to the store; reopening rebuilds the trie from the store.
//! * [`proof`]: `eth_getProof`-shaped account and storage proofs and their verifier.
//! * [`genesis`]: the JSON account list of `proofkit state root --from-json`.
//! * [`mod@bench`]: the Paprika workload behind `proofkit state bench`.
//!
//! The contract is issue 6 of the project and `shared/DESIGN.md` (CLI forms).

// The workspace's MSRV (1.80) predates `is_multiple_of` and `Option::is_none_or`.
#![allow(clippy::manual_is_multiple_of, clippy::unnecessary_map_or)]

pub mod account;
pub mod bench;
pub mod db;
pub mod genesis;
pub mod hash_builder;
pub mod keccak;
pub mod keccak_x8;
mod mapping;
pub mod proof;
pub mod rlp;
pub mod state;
pub mod storage_trie;
pub mod store;
pub mod trie;
mod unique;
#[cfg(target_arch = "x86_64")]
pub mod x86_avx512;

pub use account::{u256, Account, U256};
pub use db::{BlockId, Db, DbError, DbOptions};
pub use keccak::{keccak256, B256, EMPTY_ROOT, KECCAK_EMPTY};
pub use state::{AccountWithStorage, Address, State, StateError, Writer};
pub use store::CommitLevel;
