//! Argon2d memory filling (RFC 9106 sections 3.2-3.4) specialised for the RandomX cache
//! (specs.md 7.1: one lane, 3 passes, 262144 blocks, version 0x13, tag length 0), with a
//! compression kernel chosen at run time: AVX-512 (`x86_avx512`, two BlaMka permutations per
//! register set, `vprorq` rotations) where the CPU has it, else the `argon2` crate (AVX2 or
//! portable). [`compress_portable`] is the kernels' oracle.
//!
//! Why our own fill at all: every key change pays for the 256 MiB fill, and the crate's AVX2
//! kernel cannot use AVX-512's rotations; the crate stays as the fallback and as the test oracle
//! for the whole memory.
#![deny(unsafe_code)]

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
pub mod x86_avx512;

use crate::blake::blake2b_long;
use crate::config::{ARGON_ITERATIONS, ARGON_LANES, ARGON_MEMORY, ARGON_SALT};

/// One 1 KiB Argon2 block.
pub type Block = [u64; 128];

const SYNC_POINTS: usize = 4;

/// H0 of RFC 9106 3.2 for RandomX's parameters.
fn initial_hash(password: &[u8]) -> [u8; 64] {
    let mut st = blake2b_simd::Params::new().hash_length(64).to_state();
    for v in [
        ARGON_LANES,
        0u32,
        ARGON_MEMORY as u32,
        ARGON_ITERATIONS,
        0x13,
        0,
    ] {
        st.update(&v.to_le_bytes());
    }
    st.update(&(password.len() as u32).to_le_bytes());
    st.update(password);
    st.update(&(ARGON_SALT.len() as u32).to_le_bytes());
    st.update(ARGON_SALT);
    st.update(&0u32.to_le_bytes()); // secret
    st.update(&0u32.to_le_bytes()); // associated data
    *st.finalize().as_array()
}

#[inline(always)]
fn blamka(x: u64, y: u64) -> u64 {
    x.wrapping_add(y)
        .wrapping_add(2u64.wrapping_mul((x as u32 as u64) * (y as u32 as u64)))
}

#[inline(always)]
fn gb(v: &mut [u64; 128], a: usize, b: usize, c: usize, d: usize) {
    v[a] = blamka(v[a], v[b]);
    v[d] = (v[d] ^ v[a]).rotate_right(32);
    v[c] = blamka(v[c], v[d]);
    v[b] = (v[b] ^ v[c]).rotate_right(24);
    v[a] = blamka(v[a], v[b]);
    v[d] = (v[d] ^ v[a]).rotate_right(16);
    v[c] = blamka(v[c], v[d]);
    v[b] = (v[b] ^ v[c]).rotate_right(63);
}

/// The permutation P on 16 words given by their indices.
fn permute(v: &mut [u64; 128], i: [usize; 16]) {
    gb(v, i[0], i[4], i[8], i[12]);
    gb(v, i[1], i[5], i[9], i[13]);
    gb(v, i[2], i[6], i[10], i[14]);
    gb(v, i[3], i[7], i[11], i[15]);
    gb(v, i[0], i[5], i[10], i[15]);
    gb(v, i[1], i[6], i[11], i[12]);
    gb(v, i[2], i[7], i[8], i[13]);
    gb(v, i[3], i[4], i[9], i[14]);
}

/// G(x, y) XORed into `out` when `xor_into` (passes after the first), else stored: the
/// portable compression, oracle of the SIMD kernels. `first_word` gets `out[0]` as soon as it
/// is known (here: at the end).
pub fn compress_portable(
    out: &mut Block,
    x: &Block,
    y: &Block,
    xor_into: bool,
    first_word: &mut dyn FnMut(u64),
) {
    let mut r = [0u64; 128];
    for k in 0..128 {
        r[k] = x[k] ^ y[k];
    }
    let mut q = r;
    for row in 0..8 {
        permute(&mut q, std::array::from_fn(|k| 16 * row + k));
    }
    for col in 0..8 {
        permute(
            &mut q,
            std::array::from_fn(|k| 2 * col + (k % 2) + 16 * (k / 2)),
        );
    }
    for k in 0..128 {
        let v = q[k] ^ r[k];
        out[k] = if xor_into { out[k] ^ v } else { v };
    }
    first_word(out[0]);
}

/// A compression kernel: `out = G(x, y)` or `out ^= G(x, y)`, calling `first_word(out[0])`
/// once, as early as the kernel knows it. Argon2d's next reference block is chosen by that word:
/// a kernel that knows it before it has finished lets the fill start the next block's
/// data-dependent memory read early (the fill is otherwise half waiting for memory).
pub type CompressFn = fn(&mut Block, &Block, &Block, bool, &mut dyn FnMut(u64));

/// Fills `blocks` (exactly `ARGON_MEMORY` of them) from `password` with `compress`.
pub fn fill_with(blocks: &mut [Block], password: &[u8], compress: CompressFn) {
    assert_eq!(blocks.len(), ARGON_MEMORY, "RandomX cache size");
    let h0 = initial_hash(password);
    let mut seed = [0u8; 72];
    seed[..64].copy_from_slice(&h0);
    for (i, block) in blocks.iter_mut().take(2).enumerate() {
        seed[64..68].copy_from_slice(&(i as u32).to_le_bytes());
        let mut bytes = [0u8; 1024];
        blake2b_long(&mut bytes, &seed);
        for (w, c) in block.iter_mut().zip(bytes.chunks_exact(8)) {
            *w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
    }
    // The blocks in fill order, as (pass, slice, index within the segment).
    let positions = (0..ARGON_ITERATIONS as usize).flat_map(|pass| {
        (0..SYNC_POINTS).flat_map(move |slice| {
            let first = if pass == 0 && slice == 0 { 2 } else { 0 };
            (first..SEGMENT_LENGTH).map(move |index| (pass, slice, index))
        })
    });
    let mut positions = positions.peekable();
    let base = blocks.as_ptr();
    // The first reference block: later ones are prefetched by the kernel's `first_word` hook.
    let mut refi = reference_index((0, 0, 2), blocks[1][0]);
    while let Some((pass, slice, index)) = positions.next() {
        let cur = slice * SEGMENT_LENGTH + index;
        let prev = if cur == 0 { ARGON_MEMORY - 1 } else { cur - 1 };
        let next = positions.peek().copied();
        let mut next_refi = 0;
        let mut first_word = |w: u64| {
            if let Some(next) = next {
                next_refi = reference_index(next, w);
                for line in 0..16 {
                    proofkit_core::memory::prefetch_address(
                        base.wrapping_add(next_refi) as *const u8,
                        64 * line,
                    );
                }
            }
        };
        // The block written WRITE_AHEAD blocks from now: read back and XORed after the first
        // pass, and in the first pass its lines must still be fetched before the stores can
        // complete. Its address is known long before, but the hardware prefetcher does not
        // keep up with one block per ~300 ns beside the random reference reads.
        let ahead = base.wrapping_add((cur + WRITE_AHEAD) % ARGON_MEMORY) as *const u8;
        for line in 0..16 {
            proofkit_core::memory::prefetch_address(ahead, 64 * line);
        }
        let (out, x, y) = three(blocks, cur, prev, refi);
        compress(out, x, y, pass > 0, &mut first_word);
        refi = next_refi;
    }
}

/// How many blocks ahead of the one being computed the fill prefetches the block it will write.
/// CPU time of the 256 MiB fill here (`argon2_timing`, best of 3): no prefetch 0.262-0.271 s;
/// after the first pass only, 1-8 ahead 0.240-0.253 s; in every pass, 2-16 ahead 0.221-0.234 s.
const WRITE_AHEAD: usize = 4;
const SEGMENT_LENGTH: usize = ARGON_MEMORY / SYNC_POINTS;

/// The reference block of the block at `(pass, slice, index)` (RFC 9106 3.4.1.1-3.4.1.3, one
/// lane) given the first word of the previous block (Argon2d's J1 is its low half).
fn reference_index((pass, slice, index): (usize, usize, usize), prev_first_word: u64) -> usize {
    let j1 = prev_first_word & 0xFFFF_FFFF;
    let area = if pass == 0 {
        slice * SEGMENT_LENGTH + index - 1
    } else {
        ARGON_MEMORY - SEGMENT_LENGTH + index - 1
    } as u64;
    let rel = area - 1 - ((area * ((j1 * j1) >> 32)) >> 32);
    let start = if pass == 0 || slice == SYNC_POINTS - 1 {
        0
    } else {
        (slice + 1) * SEGMENT_LENGTH
    };
    (start + rel as usize) % ARGON_MEMORY
}

/// `blocks[cur]` mutably and `blocks[a]`, `blocks[b]` shared. The reference index never is the
/// current block (its window ends two blocks before it), nor is the previous one.
fn three(blocks: &mut [Block], cur: usize, a: usize, b: usize) -> (&mut Block, &Block, &Block) {
    assert!(
        a != cur && b != cur,
        "Argon2 never references the block being written"
    );
    let (left, right) = blocks.split_at_mut(cur);
    let (out, rest) = right.split_first_mut().expect("cur is in range");
    let get = |i: usize| -> &Block {
        if i < cur {
            &left[i]
        } else {
            &rest[i - cur - 1]
        }
    };
    let (x, y) = (get(a), get(b));
    (out, x, y)
}

/// The fastest compression this CPU has, if faster than the `argon2` crate's.
pub fn fast_kernel() -> Option<CompressFn> {
    if proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE") {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        x86_avx512::kernel()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_block(seed: u64) -> Block {
        let mut x = seed | 1;
        std::array::from_fn(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        })
    }

    /// The shared kernel test: every available compression against the portable one.
    #[test]
    fn kernels_equal_portable() {
        let Some(k) = ({
            #[cfg(target_arch = "x86_64")]
            {
                x86_avx512::kernel()
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                None::<CompressFn>
            }
        }) else {
            eprintln!("skipped: CPU lacks AVX-512F");
            return;
        };
        for s in 0..50u64 {
            let (x, y) = (random_block(s + 1), random_block(s + 1000));
            for xor_into in [false, true] {
                let mut a = random_block(s + 7);
                let mut b = a;
                let (mut wa, mut wb) = (None, None);
                compress_portable(&mut a, &x, &y, xor_into, &mut |w| wa = Some(w));
                k(&mut b, &x, &y, xor_into, &mut |w| wb = Some(w));
                assert_eq!(a, b, "seed {s} xor {xor_into}");
                assert_eq!((wa, wb), (Some(a[0]), Some(a[0])), "first word, seed {s}");
            }
        }
        let zero = [0u64; 128];
        let ones = [u64::MAX; 128];
        let (mut a, mut b) = (zero, zero);
        compress_portable(&mut a, &ones, &zero, false, &mut |_| ());
        k(&mut b, &ones, &zero, false, &mut |_| ());
        assert_eq!(a, b);
    }
}
