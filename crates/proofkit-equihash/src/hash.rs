//! Hash generation (Zcash protocol specification, "Equihash"): string `i` is the
//! `(i mod 512/n)`-th `n/8`-byte slice of `BLAKE2b-(512/n)*n/8(pers || le32(n) || le32(k),
//! input || nonce || le32(i / (512/n)))`, where `pers` is 8 bytes (`ZcashPoW` by default;
//! `BgoldPoW` and others for other coins).
//!
//! Three kernels produce the same bytes: [`Kernel::Portable`] hashes one block at a time,
//! [`Kernel::Many`] hashes several blocks at once with `blake2b_simd::many` (4 lanes with AVX2)
//! and [`Kernel::Prefix`] compresses the blocks shared by all messages once and the rest
//! eight at a time with AVX-512F ([`crate::lanes`]). `PROOFKIT_FORCE_PORTABLE=1` forces the
//! portable one.
#![deny(unsafe_code)]

use crate::params::Params;

/// The default personalization prefix.
pub const ZCASH_PERSONALIZATION: &[u8; 8] = b"ZcashPoW";

/// Bytes of one BLAKE2b output block buffer (the longest output is 64 bytes).
pub const BLOCK_BYTES: usize = 64;

/// A personalization prefix longer than 8 bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("personalization prefix must be at most 8 bytes, got {0}")]
pub struct PersonalizationError(pub usize);

/// Which hashing kernel generates blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// One BLAKE2b call per block.
    Portable,
    /// `blake2b_simd::many::hash_many` over batches of blocks.
    Many,
    /// Shared prefix state, then 8 lanes with AVX-512F (one at a time without it).
    Prefix,
}

impl Kernel {
    /// The kernel to use on this machine: `Portable` when `PROOFKIT_FORCE_PORTABLE` is set,
    /// else `Prefix` with AVX-512F, else `Many`.
    pub fn detect() -> Kernel {
        if proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE") {
            Kernel::Portable
        } else if cfg!(target_arch = "x86_64") && proofkit_core::cpu::features().avx512f {
            Kernel::Prefix
        } else {
            Kernel::Many
        }
    }
}

/// Generates the hash blocks and strings of one `(params, pers, input, nonce)`.
#[derive(Clone)]
pub struct HashGen {
    params: Params,
    blake: blake2b_simd::Params,
    /// `input || nonce || le32(block)`; the last four bytes are rewritten per block.
    message: Vec<u8>,
    kernel: Kernel,
    prefix: Option<crate::lanes::PrefixHasher>,
}

impl std::fmt::Debug for HashGen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashGen")
            .field("params", &self.params)
            .field("kernel", &self.kernel)
            .finish()
    }
}

/// Batch size for the `Many` kernel (a multiple of every lane count blake2b_simd uses).
const MANY_BATCH: usize = 16;

impl HashGen {
    /// Prepares hashing of `input || nonce` under `pers || le32(n) || le32(k)`.
    pub fn new(
        params: Params,
        pers: &[u8],
        input: &[u8],
        nonce: &[u8],
    ) -> Result<Self, PersonalizationError> {
        Self::with_kernel(params, pers, input, nonce, Kernel::detect())
    }

    /// As [`HashGen::new`] with an explicit kernel (tests compare kernels).
    pub fn with_kernel(
        params: Params,
        pers: &[u8],
        input: &[u8],
        nonce: &[u8],
        kernel: Kernel,
    ) -> Result<Self, PersonalizationError> {
        if pers.len() > 8 {
            return Err(PersonalizationError(pers.len()));
        }
        let mut personal = pers.to_vec();
        personal.extend_from_slice(&params.n().to_le_bytes());
        personal.extend_from_slice(&params.k().to_le_bytes());
        let mut blake = blake2b_simd::Params::new();
        blake
            .hash_length(params.hash_output_len())
            .personal(&personal);
        let mut message = Vec::with_capacity(input.len() + nonce.len() + 4);
        message.extend_from_slice(input);
        message.extend_from_slice(nonce);
        let prefix = (kernel == Kernel::Prefix).then(|| {
            crate::lanes::PrefixHasher::new(
                &personal,
                params.hash_output_len(),
                &message,
                proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE"),
            )
        });
        message.extend_from_slice(&[0; 4]);
        Ok(HashGen {
            params,
            blake,
            message,
            kernel,
            prefix,
        })
    }

    pub fn params(&self) -> Params {
        self.params
    }

    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Number of BLAKE2b blocks needed for all strings (the last one may be used in part,
    /// e.g. 52 blocks of 10 strings for the 512 strings of (48,5)).
    pub fn num_blocks(&self) -> u64 {
        self.params
            .num_indices()
            .div_ceil(self.params.indices_per_hash() as u64)
    }

    /// The output of block `g` (first `hash_output_len` bytes meaningful).
    pub fn block(&self, g: u32) -> [u8; BLOCK_BYTES] {
        let mut msg = self.message.clone();
        let len = msg.len();
        msg[len - 4..].copy_from_slice(&g.to_le_bytes());
        let h = self.blake.hash(&msg);
        let mut out = [0u8; BLOCK_BYTES];
        out[..h.as_bytes().len()].copy_from_slice(h.as_bytes());
        out
    }

    /// Fills `out[j]` with block `first + j`, using the configured kernel.
    pub fn blocks(&self, first: u32, out: &mut [[u8; BLOCK_BYTES]]) {
        match self.kernel {
            Kernel::Portable => {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = self.block(first + j as u32);
                }
            }
            Kernel::Many => self.blocks_many(first, out),
            Kernel::Prefix => self
                .prefix
                .as_ref()
                .expect("the Prefix kernel has its hasher")
                .hash_blocks(first, out),
        }
    }

    fn blocks_many(&self, first: u32, out: &mut [[u8; BLOCK_BYTES]]) {
        let len = self.message.len();
        let mut msgs = vec![0u8; len * MANY_BATCH];
        for (c, chunk) in out.chunks_mut(MANY_BATCH).enumerate() {
            let base = first + (c * MANY_BATCH) as u32;
            for j in 0..chunk.len() {
                let m = &mut msgs[j * len..(j + 1) * len];
                m.copy_from_slice(&self.message);
                m[len - 4..].copy_from_slice(&(base + j as u32).to_le_bytes());
            }
            let mut jobs: Vec<blake2b_simd::many::HashManyJob> = (0..chunk.len())
                .map(|j| {
                    blake2b_simd::many::HashManyJob::new(&self.blake, &msgs[j * len..(j + 1) * len])
                })
                .collect();
            blake2b_simd::many::hash_many(jobs.iter_mut());
            for (o, job) in chunk.iter_mut().zip(&jobs) {
                let h = job.to_hash();
                o[..h.as_bytes().len()].copy_from_slice(h.as_bytes());
            }
        }
    }

    /// The `n/8` bytes of string `i`.
    pub fn string(&self, i: u32) -> Vec<u8> {
        let per = self.params.indices_per_hash();
        let b = self.block(i / per);
        let sl = self.params.string_len();
        let off = (i % per) as usize * sl;
        b[off..off + sl].to_vec()
    }
}

/// Big-endian u32 words of a byte string, zero-padded to `words` words.
pub fn to_words(bytes: &[u8], words: &mut [u32]) {
    for (w, out) in words.iter_mut().enumerate() {
        let mut v = [0u8; 4];
        for (j, b) in v.iter_mut().enumerate() {
            if let Some(x) = bytes.get(4 * w + j) {
                *b = *x;
            }
        }
        *out = u32::from_be_bytes(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared kernel driver: every kernel against the portable one on boundary and random
    /// block ranges.
    #[test]
    fn kernels_agree_with_portable() {
        for (n, k) in [(200, 9), (144, 5), (96, 5), (48, 5)] {
            let p = Params::new(n, k).unwrap();
            for input in [&b""[..], b"block header", &[7u8; 140][..], &[1u8; 300][..]] {
                let a = HashGen::with_kernel(p, b"ZcashPoW", input, &[3; 32], Kernel::Portable)
                    .unwrap();
                for kernel in [Kernel::Many, Kernel::Prefix] {
                    let b = HashGen::with_kernel(p, b"ZcashPoW", input, &[3; 32], kernel).unwrap();
                    for first in [0u32, 1, 15, 1000, u32::MAX - 40] {
                        let mut x = vec![[0u8; BLOCK_BYTES]; 37];
                        let mut y = vec![[0u8; BLOCK_BYTES]; 37];
                        a.blocks(first, &mut x);
                        b.blocks(first, &mut y);
                        assert_eq!(x, y, "({n},{k}) first {first} {kernel:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn personalization_is_length_checked() {
        let p = Params::new(144, 5).unwrap();
        assert!(HashGen::new(p, b"BgoldPoW", b"", &[]).is_ok());
        assert_eq!(
            HashGen::new(p, b"TooLongPers", b"", &[]).unwrap_err(),
            PersonalizationError(11)
        );
        let z = HashGen::new(p, b"ZcashPoW", b"x", &[0; 32])
            .unwrap()
            .block(0);
        let g = HashGen::new(p, b"BgoldPoW", b"x", &[0; 32])
            .unwrap()
            .block(0);
        assert_ne!(z, g);
    }
}
