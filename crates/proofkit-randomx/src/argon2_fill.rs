//! The Argon2d memory fill of specs.md 7.1: 256 MiB, 3 passes, 1 lane, salt `RandomX\x03`, tag
//! length 0, no secret or associated data; finaliser omitted. Runs [`crate::argon2d`] with its
//! AVX-512 kernel where the CPU has AVX-512F, else the `argon2` crate's `fill_memory` (which
//! hashes a zero tag length into H0, exactly as RandomX requires).
#![allow(unsafe_code)]

use crate::config::{ARGON_ITERATIONS, ARGON_LANES, ARGON_MEMORY, ARGON_SALT};
use proofkit_core::memory::LargeBuffer;

/// Fills `memory` (at least `ARGON_MEMORY` KiB) from `key` with the fastest implementation.
pub fn fill(memory: &mut LargeBuffer, key: &[u8]) -> Result<(), argon2::Error> {
    match crate::argon2d::fast_kernel() {
        Some(kernel) => {
            crate::argon2d::fill_with(blocks_of(memory), key, kernel);
            Ok(())
        }
        None => fill_with_crate(memory, key),
    }
}

/// The buffer as Argon2 blocks.
pub fn blocks_of(memory: &mut LargeBuffer) -> &mut [crate::argon2d::Block] {
    assert!(
        memory.len() >= ARGON_MEMORY * 1024,
        "cache buffer too small"
    );
    // SAFETY: [u64; 128] has alignment 8 <= the page alignment of the buffer, every bit pattern
    // is valid, and ARGON_MEMORY blocks of 1024 bytes lie inside it; the borrow is exclusive.
    unsafe {
        std::slice::from_raw_parts_mut(
            memory.as_mut_ptr() as *mut crate::argon2d::Block,
            ARGON_MEMORY,
        )
    }
}

/// The `argon2` crate's fill (the fallback, and the oracle of [`crate::argon2d`]).
pub fn fill_with_crate(memory: &mut LargeBuffer, key: &[u8]) -> Result<(), argon2::Error> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proofkit_core::memory::PagePolicy;

    /// The whole 256 MiB from our fill (fastest kernel, then the portable compression on a
    /// quarter of a pass is too slow: the fast kernel only) equals the argon2 crate's.
    #[test]
    fn own_fill_equals_argon2_crate() {
        let Some(kernel) = crate::argon2d::fast_kernel() else {
            eprintln!("skipped: CPU lacks AVX-512F (or PROOFKIT_FORCE_PORTABLE): the crate is the only fill");
            return;
        };
        for key in [&b"test key 000"[..], b"", &[0x55; 100][..]] {
            let mut a = LargeBuffer::new(ARGON_MEMORY * 1024, PagePolicy::Transparent).unwrap();
            let mut b = LargeBuffer::new(ARGON_MEMORY * 1024, PagePolicy::Transparent).unwrap();
            crate::argon2d::fill_with(blocks_of(&mut a), key, kernel);
            fill_with_crate(&mut b, key).unwrap();
            assert!(a.as_slice() == b.as_slice(), "key {key:?}");
        }
    }
}
