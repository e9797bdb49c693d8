//! Keccak-256 of many independent messages, eight at a time: the sponge (FIPS 202 section 4,
//! Keccak's original pad10*1 with domain byte 0x01, rate 136 bytes) over eight states permuted
//! together. The AVX-512F kernel ([`crate::x86_avx512`]) is picked once at run time; setting
//! `PROOFKIT_FORCE_PORTABLE` forces the portable twin. Messages are grouped by their number of
//! rate blocks so that the eight states absorb in step; groups of one go to the scalar hash.
#![deny(unsafe_code)]

use crate::keccak::{keccak256, B256};
#[cfg(target_arch = "x86_64")]
use crate::x86_avx512::Avx512Token;

/// Stands in for the AVX-512 token where the architecture has none: it cannot be made.
#[cfg(not(target_arch = "x86_64"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Avx512Token {}

#[cfg(not(target_arch = "x86_64"))]
impl Avx512Token {
    fn detect() -> Option<Self> {
        None
    }
    fn f1600_x8(self, _: &mut States) {
        match self {}
    }
    fn keccak256_x8(self, _: &[&[u8]], _: &mut [B256]) {
        match self {}
    }
}
use std::sync::OnceLock;

/// Keccak-256's rate in bytes (the kernels absorb in blocks of it too).
pub(crate) const RATE: usize = 136;

/// Eight Keccak states, lane-major: `st[lane][state]`.
pub type States = [[u64; 8]; 25];

/// The permutation kernel in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    Portable,
    Avx512(Avx512Token),
}

/// The kernel chosen for this process (once).
pub fn kernel() -> Kernel {
    static K: OnceLock<Kernel> = OnceLock::new();
    *K.get_or_init(|| {
        if proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE") {
            return Kernel::Portable;
        }
        Avx512Token::detect().map_or(Kernel::Portable, Kernel::Avx512)
    })
}

/// Every kernel this CPU can run (for tests and benchmarks).
pub fn available_kernels() -> Vec<Kernel> {
    let mut v = vec![Kernel::Portable];
    if let Some(t) = Avx512Token::detect() {
        v.push(Kernel::Avx512(t));
    }
    v
}

/// The portable twin: the `keccak` crate's permutation, one state at a time.
#[allow(clippy::needless_range_loop)] // `i` picks the state in every lane row
pub fn permute_portable(st: &mut States) {
    for i in 0..8 {
        let mut a: [u64; 25] = core::array::from_fn(|l| st[l][i]);
        keccak::f1600(&mut a);
        for (l, v) in a.iter().enumerate() {
            st[l][i] = *v;
        }
    }
}

pub fn permute(k: Kernel, st: &mut States) {
    match k {
        Kernel::Portable => permute_portable(st),
        Kernel::Avx512(t) => t.f1600_x8(st),
    }
}

/// Rate blocks a message of `len` bytes takes, padded (a group's messages share the count).
pub(crate) fn blocks(len: usize) -> usize {
    len / RATE + 1
}

/// keccak256 of up to eight messages with the same number of padded blocks.
fn hash_group(k: Kernel, msgs: &[&[u8]], out: &mut [B256]) {
    match k {
        Kernel::Portable => hash_group_portable(msgs, out),
        Kernel::Avx512(t) => t.keccak256_x8(msgs, out),
    }
}

/// The portable twin of the kernels' sponge: each block copied, padded and xored into the
/// lane-major states, then [`permute_portable`].
fn hash_group_portable(msgs: &[&[u8]], out: &mut [B256]) {
    debug_assert!(
        msgs.len() <= 8
            && msgs
                .iter()
                .all(|m| blocks(m.len()) == blocks(msgs[0].len()))
    );
    let mut st: States = [[0; 8]; 25];
    let n = blocks(msgs[0].len());
    let mut block = [0u8; RATE];
    for b in 0..n {
        for (i, m) in msgs.iter().enumerate() {
            let chunk = &m[(b * RATE).min(m.len())..((b + 1) * RATE).min(m.len())];
            block[..chunk.len()].copy_from_slice(chunk);
            block[chunk.len()..].fill(0);
            if b == n - 1 {
                block[chunk.len()] ^= 0x01;
                block[RATE - 1] ^= 0x80;
            }
            for (l, lane) in block.chunks_exact(8).enumerate() {
                st[l][i] ^= u64::from_le_bytes(lane.try_into().expect("8 bytes"));
            }
        }
        permute_portable(&mut st);
    }
    for (i, o) in out.iter_mut().enumerate().take(msgs.len()) {
        for l in 0..4 {
            o[8 * l..8 * l + 8].copy_from_slice(&st[l][i].to_le_bytes());
        }
    }
}

/// `out[i] = keccak256(msgs[i])`, with kernel `k`.
pub fn keccak256_batch_with(k: Kernel, msgs: &[&[u8]], out: &mut [B256]) {
    assert_eq!(msgs.len(), out.len(), "one output per message");
    let mut order: Vec<usize> = (0..msgs.len()).collect();
    order.sort_by_key(|&i| blocks(msgs[i].len()));
    let mut group: Vec<&[u8]> = Vec::with_capacity(8);
    let mut hashes = [[0u8; 32]; 8];
    let mut i = 0;
    while i < order.len() {
        let nb = blocks(msgs[order[i]].len());
        let j = i + order[i..]
            .iter()
            .take(8)
            .take_while(|&&x| blocks(msgs[x].len()) == nb)
            .count();
        if j - i == 1 {
            out[order[i]] = keccak256(msgs[order[i]]);
        } else {
            group.clear();
            group.extend(order[i..j].iter().map(|&x| msgs[x]));
            hash_group(k, &group, &mut hashes);
            for (g, &x) in order[i..j].iter().enumerate() {
                out[x] = hashes[g];
            }
        }
        i = j;
    }
}

/// `out[i] = keccak256(msgs[i])`, with the process's kernel.
pub fn keccak256_batch(msgs: &[&[u8]], out: &mut [B256]) {
    keccak256_batch_with(kernel(), msgs, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn every_kernel_matches_the_portable_permutation() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let kernels = available_kernels();
        if kernels.len() == 1 {
            println!("skipped: CPU lacks AVX-512F (only the portable kernel ran)");
        }
        for case in 0..20 {
            let st: States = if case == 0 {
                [[0; 8]; 25]
            } else {
                core::array::from_fn(|_| rng.gen())
            };
            let mut want = st;
            permute_portable(&mut want);
            for &k in &kernels {
                let mut got = st;
                permute(k, &mut got);
                assert_eq!(got, want, "{k:?}");
            }
        }
    }

    #[test]
    fn batches_equal_the_scalar_hash_at_every_length() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(2);
        // Lengths around the rate boundaries, and random ones.
        let mut lens: Vec<usize> = (0..20)
            .chain(130..142)
            .chain(268..276)
            .chain([407, 408, 532, 544])
            .collect();
        lens.extend((0..200).map(|_| rng.gen_range(0..700)));
        let msgs: Vec<Vec<u8>> = lens
            .iter()
            .map(|&l| (0..l).map(|_| rng.gen()).collect())
            .collect();
        let refs: Vec<&[u8]> = msgs.iter().map(|m| &m[..]).collect();
        for k in available_kernels() {
            let mut out = vec![[0u8; 32]; refs.len()];
            keccak256_batch_with(k, &refs, &mut out);
            for (m, o) in refs.iter().zip(&out) {
                assert_eq!(*o, keccak256(m), "{k:?}, {} bytes", m.len());
            }
        }
    }

    #[test]
    fn groups_of_every_size_equal_the_scalar_hash() {
        // Batches of 1 to 9 messages of one block count: the kernels' masks for states
        // without a message, and last blocks whose messages end at different words.
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        for k in available_kernels() {
            for blocks in 0..3 {
                for n in 1..=9 {
                    let msgs: Vec<Vec<u8>> = (0..n)
                        .map(|_| {
                            let len = blocks * RATE + rng.gen_range(0..RATE);
                            (0..len).map(|_| rng.gen()).collect()
                        })
                        .collect();
                    let refs: Vec<&[u8]> = msgs.iter().map(|m| &m[..]).collect();
                    let mut out = vec![[0u8; 32]; n];
                    keccak256_batch_with(k, &refs, &mut out);
                    for (m, o) in refs.iter().zip(&out) {
                        assert_eq!(*o, keccak256(m), "{k:?}, {n} messages of {} bytes", m.len());
                    }
                }
            }
        }
    }
}
