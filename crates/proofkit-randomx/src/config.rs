//! The configurable parameters of RandomX (specs.md, Table 1.2.1) at their Monero values, and the
//! per-version program size (RandomX v2 raises it from 256 to 384; design_v2.md, chapter 3).
#![deny(unsafe_code)]

pub const ARGON_MEMORY: usize = 262_144;
pub const ARGON_ITERATIONS: u32 = 3;
pub const ARGON_LANES: u32 = 1;
pub const ARGON_SALT: &[u8] = b"RandomX\x03";
pub const CACHE_ACCESSES: usize = 8;
pub const SUPERSCALAR_LATENCY: usize = 170;
pub const DATASET_BASE_SIZE: u64 = 2_147_483_648;
pub const DATASET_EXTRA_SIZE: u64 = 33_554_368;
pub const PROGRAM_SIZE_V1: usize = 256;
pub const PROGRAM_SIZE_V2: usize = 384;
pub const PROGRAM_MAX_SIZE: usize = PROGRAM_SIZE_V2;
pub const PROGRAM_ITERATIONS: usize = 2048;
pub const PROGRAM_COUNT: usize = 8;
pub const JUMP_BITS: u32 = 8;
pub const JUMP_OFFSET: u32 = 8;
pub const SCRATCHPAD_L3: usize = 2_097_152;
pub const SCRATCHPAD_L2: usize = 262_144;
pub const SCRATCHPAD_L1: usize = 16_384;

/// Bytes in the Argon2 cache (256 MiB).
pub const CACHE_SIZE: usize = ARGON_MEMORY * 1024;
/// 64-byte items in the cache.
pub const CACHE_ITEM_COUNT: u64 = (CACHE_SIZE / 64) as u64;
/// 64-byte items in the dataset (2080 MiB / 64).
pub const DATASET_ITEM_COUNT: u64 = (DATASET_BASE_SIZE + DATASET_EXTRA_SIZE) / 64;
/// Bytes in the dataset.
pub const DATASET_SIZE: u64 = DATASET_ITEM_COUNT * 64;

/// Scratchpad access masks (Table 4.2.1).
pub const SCRATCHPAD_L1_MASK: u32 = (SCRATCHPAD_L1 as u32 - 1) & !7;
pub const SCRATCHPAD_L2_MASK: u32 = (SCRATCHPAD_L2 as u32 - 1) & !7;
pub const SCRATCHPAD_L3_MASK: u32 = (SCRATCHPAD_L3 as u32 - 1) & !7;
pub const SCRATCHPAD_L3_MASK64: u32 = (SCRATCHPAD_L3 as u32 - 1) & !63;
/// The dataset offset divisor of chapter 4.5.5.
pub const DATASET_EXTRA_ITEMS: u64 = DATASET_EXTRA_SIZE / 64 + 1;
/// Mask applied to `ma`/`mx` for the 64-byte aligned dataset address.
pub const CACHE_LINE_ALIGN_MASK: u64 = (DATASET_BASE_SIZE - 1) & !63;

/// Which RandomX: v1 (Monero `rx/0`) or v2 (RANDOMX_FLAG_V2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Version {
    #[default]
    V1,
    V2,
}

impl Version {
    pub const fn program_size(self) -> usize {
        match self {
            Version::V1 => PROGRAM_SIZE_V1,
            Version::V2 => PROGRAM_SIZE_V2,
        }
    }
}

// Compile-time checks of the safety constraints listed in configuration.md.
const _: () = assert!(
    SCRATCHPAD_L3.is_power_of_two()
        && SCRATCHPAD_L2.is_power_of_two()
        && SCRATCHPAD_L1.is_power_of_two()
);
const _: () = assert!(SCRATCHPAD_L1 <= SCRATCHPAD_L2 && SCRATCHPAD_L2 <= SCRATCHPAD_L3);
const _: () = assert!(DATASET_EXTRA_SIZE.is_multiple_of(64));
const _: () = assert!(PROGRAM_SIZE_V1.is_multiple_of(8) && PROGRAM_SIZE_V2.is_multiple_of(8));
const _: () = assert!(ARGON_SALT.len() >= 8);
