//! BLAKE2b (RFC 7693) of many messages that differ only in their last bytes, as Equihash
//! hashes `input || nonce || le32(g)` for every block number `g`: the 128-byte blocks before
//! the first varying byte are compressed once (the prefix state), and only the remaining
//! blocks are compressed per message. With AVX-512F (detected at run time) eight messages are
//! compressed at once, one per 64-bit lane; otherwise one at a time in portable code.
//! `PROOFKIT_FORCE_PORTABLE=1` forces the portable compression.
//!
//! The blake2b_simd crate has no way to start from a saved state for many messages (its
//! `hash_many` compresses every block of every message), which doubles the work for the
//! 144-byte Zcash messages; this module exists for that reason alone.
#![deny(unsafe_code)]

const IV: [u64; 8] = [
    0x6a09e667f3bcc908,
    0xbb67ae8584caa73b,
    0x3c6ef372fe94f82b,
    0xa54ff53a5f1d36f1,
    0x510e527fade682d1,
    0x9b05688c2b3e6c1f,
    0x1f83d9abfb41bd6b,
    0x5be0cd19137e2179,
];

const SIGMA: [[usize; 16]; 12] = [
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
    [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
    [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
    [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
    [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
    [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
    [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
    [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
    [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
    [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
];

/// Lanes of the AVX-512 kernel.
pub const LANES: usize = 8;

/// Message words of one 128-byte block, little-endian.
fn words(block: &[u8; 128]) -> [u64; 16] {
    let mut m = [0u64; 16];
    for (i, w) in m.iter_mut().enumerate() {
        *w = u64::from_le_bytes(block[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    }
    m
}

/// The portable compression function F.
fn compress(h: &mut [u64; 8], m: &[u64; 16], t: u64, last: bool) {
    let mut v = [0u64; 16];
    v[..8].copy_from_slice(h);
    v[8..].copy_from_slice(&IV);
    v[12] ^= t;
    if last {
        v[14] = !v[14];
    }
    #[inline(always)]
    fn g(v: &mut [u64; 16], a: usize, b: usize, c: usize, d: usize, x: u64, y: u64) {
        v[a] = v[a].wrapping_add(v[b]).wrapping_add(x);
        v[d] = (v[d] ^ v[a]).rotate_right(32);
        v[c] = v[c].wrapping_add(v[d]);
        v[b] = (v[b] ^ v[c]).rotate_right(24);
        v[a] = v[a].wrapping_add(v[b]).wrapping_add(y);
        v[d] = (v[d] ^ v[a]).rotate_right(16);
        v[c] = v[c].wrapping_add(v[d]);
        v[b] = (v[b] ^ v[c]).rotate_right(63);
    }
    for s in &SIGMA {
        g(&mut v, 0, 4, 8, 12, m[s[0]], m[s[1]]);
        g(&mut v, 1, 5, 9, 13, m[s[2]], m[s[3]]);
        g(&mut v, 2, 6, 10, 14, m[s[4]], m[s[5]]);
        g(&mut v, 3, 7, 11, 15, m[s[6]], m[s[7]]);
        g(&mut v, 0, 5, 10, 15, m[s[8]], m[s[9]]);
        g(&mut v, 1, 6, 11, 12, m[s[10]], m[s[11]]);
        g(&mut v, 2, 7, 8, 13, m[s[12]], m[s[13]]);
        g(&mut v, 3, 4, 9, 14, m[s[14]], m[s[15]]);
    }
    for i in 0..8 {
        h[i] ^= v[i] ^ v[i + 8];
    }
}

/// BLAKE2b of `prefix || le32(g)` for many `g`, sharing the state after the prefix's
/// constant blocks.
#[derive(Clone, Debug)]
pub struct PrefixHasher {
    /// State after the constant blocks.
    state: [u64; 8],
    /// Bytes in the constant blocks.
    done: u64,
    /// The message bytes after the constant blocks, the last 4 being the block number.
    tail: Vec<u8>,
    /// The tail's message words with a zero block number, each repeated over the lanes.
    tail_lanes: Vec<[[u64; LANES]; 16]>,
    out_len: usize,
    avx512: bool,
}

impl PrefixHasher {
    /// `personal` at most 16 bytes (zero-padded), `out_len` 1..=64, no key.
    pub fn new(personal: &[u8], out_len: usize, prefix: &[u8], portable: bool) -> Self {
        assert!(personal.len() <= 16 && (1..=64).contains(&out_len));
        let mut state = IV;
        state[0] ^= 0x0101_0000 ^ out_len as u64;
        let mut p = [0u8; 16];
        p[..personal.len()].copy_from_slice(personal);
        state[6] ^= u64::from_le_bytes(p[..8].try_into().expect("8 bytes"));
        state[7] ^= u64::from_le_bytes(p[8..].try_into().expect("8 bytes"));
        // Every block before the one holding the first byte of le32(g) is the same for all g,
        // and none of them is the final block.
        let constant = prefix.len() / 128;
        for (i, blk) in prefix[..constant * 128].chunks_exact(128).enumerate() {
            let t = 128 * (i as u64 + 1);
            compress(
                &mut state,
                &words(blk.try_into().expect("128 bytes")),
                t,
                false,
            );
        }
        let mut tail = prefix[constant * 128..].to_vec();
        tail.extend_from_slice(&[0; 4]);
        let mut padded = tail.clone();
        padded.resize(tail.len().div_ceil(128) * 128, 0);
        let tail_lanes = padded
            .chunks_exact(128)
            .map(|blk| words(blk.try_into().expect("128 bytes")).map(|w| [w; LANES]))
            .collect();
        PrefixHasher {
            state,
            done: (constant * 128) as u64,
            tail,
            tail_lanes,
            out_len,
            avx512: !portable && avx512_available(),
        }
    }

    /// Whether the eight-lane kernel runs.
    pub fn uses_avx512(&self) -> bool {
        self.avx512
    }

    /// The tail's 128-byte blocks (zero-padded) for block number `g`.
    fn tail_blocks(&self, g: u32, out: &mut [[u8; 128]; 2]) -> usize {
        let n = self.tail.len().div_ceil(128);
        let mut buf = [0u8; 256];
        buf[..self.tail.len()].copy_from_slice(&self.tail);
        let l = self.tail.len();
        buf[l - 4..l].copy_from_slice(&g.to_le_bytes());
        for (i, o) in out.iter_mut().enumerate().take(n) {
            o.copy_from_slice(&buf[128 * i..128 * i + 128]);
        }
        n
    }

    /// Fills `out[j]` (first `out_len` bytes) with the hash for block number `first + j`.
    pub fn hash_blocks(&self, first: u32, out: &mut [[u8; 64]]) {
        let mut j = 0;
        if self.avx512 {
            while j + LANES <= out.len() {
                let chunk: &mut [[u8; 64]; LANES] =
                    (&mut out[j..j + LANES]).try_into().expect("LANES blocks");
                self.hash8(first.wrapping_add(j as u32), chunk);
                j += LANES;
            }
        }
        for (i, o) in out.iter_mut().enumerate().skip(j) {
            *o = self.hash_one(first.wrapping_add(i as u32));
        }
    }

    /// One hash, portable.
    pub fn hash_one(&self, g: u32) -> [u8; 64] {
        let mut blocks = [[0u8; 128]; 2];
        let n = self.tail_blocks(g, &mut blocks);
        let mut h = self.state;
        let total = self.done + self.tail.len() as u64;
        for (i, blk) in blocks[..n].iter().enumerate() {
            let last = i + 1 == n;
            let t = if last {
                total
            } else {
                self.done + 128 * (i as u64 + 1)
            };
            compress(&mut h, &words(blk), t, last);
        }
        let mut out = [0u8; 64];
        for (i, w) in h.iter().enumerate() {
            out[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        out[self.out_len..].fill(0);
        out
    }

    // The lane is the innermost index of the transposed words.
    #[allow(clippy::needless_range_loop)]
    fn hash8(&self, first: u32, out: &mut [[u8; 64]; LANES]) {
        // Message words transposed, m[block][word][lane]: the template with each lane's
        // block number put in (its 4 bytes may straddle two words).
        let mut m = [[[0u64; LANES]; 16]; 2];
        let n = self.tail_lanes.len();
        m[..n].copy_from_slice(&self.tail_lanes);
        let at = self.tail.len() - 4;
        for lane in 0..LANES {
            let g = first.wrapping_add(lane as u32);
            for (i, byte) in g.to_le_bytes().into_iter().enumerate() {
                let p = at + i;
                m[p / 128][(p % 128) / 8][lane] |= (byte as u64) << (8 * (p % 8));
            }
        }
        let total = self.done + self.tail.len() as u64;
        let mut h = [[0u64; LANES]; 8];
        // SAFETY: `avx512` is set only when the CPU reports AVX-512F (`avx512_available`).
        #[allow(unsafe_code)]
        unsafe {
            if n == 1 && self.tail.len() <= 16 {
                avx512::hash8::<true>(&self.state, &m[..n], self.done, total, &mut h)
            } else {
                avx512::hash8::<false>(&self.state, &m[..n], self.done, total, &mut h)
            }
        };
        let words = self.out_len.div_ceil(8);
        for (lane, o) in out.iter_mut().enumerate() {
            for (i, w) in h[..words].iter().enumerate() {
                o[8 * i..8 * i + 8].copy_from_slice(&w[lane].to_le_bytes());
            }
            o[self.out_len..].fill(0);
        }
    }
}

fn avx512_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        proofkit_core::cpu::features().avx512f
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod avx512 {
    use super::{IV, LANES};
    use std::arch::x86_64::*;

    #[inline(always)]
    fn load(w: &[u64; LANES]) -> __m512i {
        // SAFETY: `w` is 64 readable bytes; the load is unaligned.
        unsafe { _mm512_loadu_si512(w.as_ptr() as *const _) }
    }

    #[inline(always)]
    fn store(v: __m512i, w: &mut [u64; LANES]) {
        // SAFETY: `w` is 64 writable bytes; the store is unaligned.
        unsafe { _mm512_storeu_si512(w.as_mut_ptr() as *mut _, v) }
    }

    /// Compresses `blocks` (transposed message words) for eight lanes starting from the
    /// shared state `start`; `done` bytes precede the first block, `total` is the message
    /// length. Writes the final state words, transposed, to `out`.
    ///
    /// `TWO_WORDS`: there is one block and its words 2..16 are zero (Zcash's 144-byte
    /// messages: the last 16 bytes after the shared prefix); the additions of those words, 14
    /// of a round's 16, are then left out (the zero vectors fold away at compile time).
    ///
    /// # Safety
    /// The CPU must support AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn hash8<const TWO_WORDS: bool>(
        start: &[u64; 8],
        blocks: &[[[u64; LANES]; 16]],
        done: u64,
        total: u64,
        out: &mut [[u64; LANES]; 8],
    ) {
        let mut h = [_mm512_setzero_si512(); 8];
        for i in 0..8 {
            h[i] = _mm512_set1_epi64(start[i] as i64);
        }
        for (b, blk) in blocks.iter().enumerate() {
            let last = b + 1 == blocks.len();
            let t = if last {
                total
            } else {
                done + 128 * (b as u64 + 1)
            };
            let mut m = [_mm512_setzero_si512(); 16];
            let words = if TWO_WORDS { 2 } else { 16 };
            for i in 0..words {
                m[i] = load(&blk[i]);
            }
            let [mut v0, mut v1, mut v2, mut v3, mut v4, mut v5, mut v6, mut v7] = h;
            let mut v8 = _mm512_set1_epi64(IV[0] as i64);
            let mut v9 = _mm512_set1_epi64(IV[1] as i64);
            let mut v10 = _mm512_set1_epi64(IV[2] as i64);
            let mut v11 = _mm512_set1_epi64(IV[3] as i64);
            let mut v12 = _mm512_set1_epi64((IV[4] ^ t) as i64);
            let mut v13 = _mm512_set1_epi64(IV[5] as i64);
            let mut v14 = _mm512_set1_epi64((if last { !IV[6] } else { IV[6] }) as i64);
            let mut v15 = _mm512_set1_epi64(IV[7] as i64);
            macro_rules! g {
                ($a:ident, $b:ident, $c:ident, $d:ident, $x:expr, $y:expr) => {
                    $a = _mm512_add_epi64(_mm512_add_epi64($a, $b), $x);
                    $d = _mm512_ror_epi64::<32>(_mm512_xor_si512($d, $a));
                    $c = _mm512_add_epi64($c, $d);
                    $b = _mm512_ror_epi64::<24>(_mm512_xor_si512($b, $c));
                    $a = _mm512_add_epi64(_mm512_add_epi64($a, $b), $y);
                    $d = _mm512_ror_epi64::<16>(_mm512_xor_si512($d, $a));
                    $c = _mm512_add_epi64($c, $d);
                    $b = _mm512_ror_epi64::<63>(_mm512_xor_si512($b, $c));
                };
            }
            // One round per row of SIGMA, with the message schedule spelled out so that
            // every index is a constant.
            macro_rules! round {
                ($s0:literal, $s1:literal, $s2:literal, $s3:literal, $s4:literal, $s5:literal,
                 $s6:literal, $s7:literal, $s8:literal, $s9:literal, $s10:literal,
                 $s11:literal, $s12:literal, $s13:literal, $s14:literal, $s15:literal) => {
                    g!(v0, v4, v8, v12, m[$s0], m[$s1]);
                    g!(v1, v5, v9, v13, m[$s2], m[$s3]);
                    g!(v2, v6, v10, v14, m[$s4], m[$s5]);
                    g!(v3, v7, v11, v15, m[$s6], m[$s7]);
                    g!(v0, v5, v10, v15, m[$s8], m[$s9]);
                    g!(v1, v6, v11, v12, m[$s10], m[$s11]);
                    g!(v2, v7, v8, v13, m[$s12], m[$s13]);
                    g!(v3, v4, v9, v14, m[$s14], m[$s15]);
                };
            }
            round!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            round!(14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3);
            round!(11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4);
            round!(7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8);
            round!(9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13);
            round!(2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9);
            round!(12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11);
            round!(13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10);
            round!(6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5);
            round!(10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0);
            round!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            round!(14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3);
            let v = [
                v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15,
            ];
            for i in 0..8 {
                h[i] = _mm512_xor_si512(h[i], _mm512_xor_si512(v[i], v[i + 8]));
            }
        }
        for i in 0..8 {
            store(h[i], &mut out[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both compressions against blake2b_simd for prefixes around the block boundaries (and
    /// around the two-word tail of the AVX-512 kernel: prefixes of 128 + 12 bytes and less).
    #[test]
    fn matches_blake2b_simd() {
        if !avx512_available() {
            println!("skipped (AVX-512 part): CPU lacks avx512f");
        }
        for len in [
            0usize, 1, 100, 123, 124, 125, 127, 128, 139, 140, 141, 200, 251, 252, 253, 300,
        ] {
            let prefix: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            for out_len in [50usize, 54, 64, 30] {
                let pers = b"ZcashPoW\xc8\0\0\0\x09\0\0\0";
                let mut params = blake2b_simd::Params::new();
                params.hash_length(out_len).personal(pers);
                for portable in [true, false] {
                    let h = PrefixHasher::new(pers, out_len, &prefix, portable);
                    let mut got = vec![[0u8; 64]; 19];
                    h.hash_blocks(u32::MAX - 9, &mut got);
                    for (j, g) in got.iter().enumerate() {
                        let idx = (u32::MAX - 9).wrapping_add(j as u32);
                        let mut msg = prefix.clone();
                        msg.extend_from_slice(&idx.to_le_bytes());
                        let want = params.hash(&msg);
                        assert_eq!(&g[..out_len], want.as_bytes(), "len {len} out {out_len}");
                        assert!(g[out_len..].iter().all(|&b| b == 0));
                    }
                }
            }
        }
    }
}
