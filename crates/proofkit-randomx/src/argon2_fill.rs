//! The Argon2d memory fill of specs.md 7.1: 256 MiB, 3 passes, 1 lane, salt `RandomX\x03`, tag
//! length 0, no secret or associated data; finaliser omitted. Delegates to the `argon2` crate's
//! `fill_memory` (which hashes a zero tag length into H0, exactly as RandomX requires).
#![allow(unsafe_code)]

use crate::config::{ARGON_ITERATIONS, ARGON_LANES, ARGON_MEMORY, ARGON_SALT};
use proofkit_core::memory::LargeBuffer;

/// Fills `memory` (at least `ARGON_MEMORY` KiB) from `key`.
pub fn fill(memory: &mut LargeBuffer, key: &[u8]) -> Result<(), argon2::Error> {
    assert!(
        memory.len() >= ARGON_MEMORY * 1024,
        "cache buffer too small"
    );
    let params = argon2::Params::new(ARGON_MEMORY as u32, ARGON_ITERATIONS, ARGON_LANES, None)?;
    let ctx = argon2::Argon2::new(argon2::Algorithm::Argon2d, argon2::Version::V0x13, params);
    // SAFETY: argon2::Block is a #[repr(align(64))] wrapper of [u64; 128] (1024 bytes, no
    // padding, every bit pattern valid); the buffer is page-aligned, at least ARGON_MEMORY KiB
    // long and exclusively borrowed for the duration of the call.
    let blocks = unsafe {
        std::slice::from_raw_parts_mut(memory.as_mut_ptr() as *mut argon2::Block, ARGON_MEMORY)
    };
    ctx.fill_memory(key, ARGON_SALT, blocks)
}

const _: () = assert!(
    std::mem::size_of::<argon2::Block>() == 1024 && std::mem::align_of::<argon2::Block>() <= 4096
);
