//! The chain kernels and their runtime dispatch.
//!
//! A [`Kernel`] names an implementation (ISA and lane count); [`Kernel::token`] checks the CPU
//! once and hands back a [`KernelToken`], the only value that can run it. The token wraps the
//! backend's own proof-of-detection type (whose field is private to its backend file), so no
//! code can reach a `#[target_feature]` function on a CPU without the feature.
//!
//! `PROOFKIT_FORCE_PORTABLE=1` makes [`best_single`] and [`best_many`] pick the portable
//! kernels; [`available`] still lists every kernel the CPU can run (the tests use it).
#![deny(unsafe_code)]

use crate::compress::{chain_portable, chains_portable};
use crate::State;

#[cfg(target_arch = "x86_64")]
use crate::{x86_avx2::Avx2, x86_avx512::Avx512, x86_shani::ShaNi};

/// A chain kernel: an ISA and how many chains it advances together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// Portable Rust, one chain (the specialised 32-byte compression).
    Portable1,
    /// Portable Rust, two chains interleaved.
    Portable2,
    /// Portable Rust, four chains interleaved.
    Portable4,
    /// SHA-NI, one chain.
    ShaNi1,
    /// SHA-NI, two chains interleaved.
    ShaNi2,
    /// SHA-NI, three chains interleaved.
    ShaNi3,
    /// SHA-NI, four chains interleaved.
    ShaNi4,
    /// AVX2, 8 lanes.
    Avx2x8,
    /// AVX2, two sets of 8 lanes.
    Avx2x16,
    /// AVX-512, 16 lanes.
    Avx512x16,
    /// AVX-512, two sets of 16 lanes.
    Avx512x32,
    /// AVX-512 16 lanes plus 4 SHA-NI chains, interleaved round by round.
    Hybrid20,
    /// AVX-512 16 lanes plus 8 SHA-NI chains, interleaved round by round.
    Hybrid24,
}

impl Kernel {
    /// Every kernel, portable first.
    pub const ALL: [Kernel; 13] = [
        Kernel::Portable1,
        Kernel::Portable2,
        Kernel::Portable4,
        Kernel::ShaNi1,
        Kernel::ShaNi2,
        Kernel::ShaNi3,
        Kernel::ShaNi4,
        Kernel::Avx2x8,
        Kernel::Avx2x16,
        Kernel::Avx512x16,
        Kernel::Avx512x32,
        Kernel::Hybrid20,
        Kernel::Hybrid24,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::Portable1 => "portable-x1",
            Kernel::Portable2 => "portable-x2",
            Kernel::Portable4 => "portable-x4",
            Kernel::ShaNi1 => "shani-x1",
            Kernel::ShaNi2 => "shani-x2",
            Kernel::ShaNi3 => "shani-x3",
            Kernel::ShaNi4 => "shani-x4",
            Kernel::Avx2x8 => "avx2-8",
            Kernel::Avx2x16 => "avx2-2x8",
            Kernel::Avx512x16 => "avx512-16",
            Kernel::Avx512x32 => "avx512-2x16",
            Kernel::Hybrid20 => "avx512-16+shani-x4",
            Kernel::Hybrid24 => "avx512-16+shani-x8",
        }
    }

    /// Parses [`Kernel::name`].
    pub fn from_name(name: &str) -> Option<Kernel> {
        Kernel::ALL.into_iter().find(|k| k.name() == name)
    }

    /// How many chains one call advances together.
    pub fn lanes(self) -> usize {
        match self {
            Kernel::Portable1 | Kernel::ShaNi1 => 1,
            Kernel::Portable2 | Kernel::ShaNi2 => 2,
            Kernel::ShaNi3 => 3,
            Kernel::Portable4 | Kernel::ShaNi4 => 4,
            Kernel::Avx2x8 => 8,
            Kernel::Avx2x16 | Kernel::Avx512x16 => 16,
            Kernel::Avx512x32 => 32,
            Kernel::Hybrid20 => 20,
            Kernel::Hybrid24 => 24,
        }
    }

    /// The instruction-set extension it needs ("portable" for none).
    pub fn isa(self) -> &'static str {
        match self {
            Kernel::Portable1 | Kernel::Portable2 | Kernel::Portable4 => "portable",
            Kernel::ShaNi1 | Kernel::ShaNi2 | Kernel::ShaNi3 | Kernel::ShaNi4 => "sha",
            Kernel::Avx2x8 | Kernel::Avx2x16 => "avx2",
            Kernel::Avx512x16 | Kernel::Avx512x32 => "avx512f",
            Kernel::Hybrid20 | Kernel::Hybrid24 => "avx512f+sha",
        }
    }

    /// Checks the CPU: `Some` when this kernel can run here.
    pub fn token(self) -> Option<KernelToken> {
        let imp = match self.isa() {
            "portable" => Imp::Portable,
            #[cfg(target_arch = "x86_64")]
            "sha" => Imp::ShaNi(ShaNi::detect()?),
            #[cfg(target_arch = "x86_64")]
            "avx2" => Imp::Avx2(Avx2::detect()?),
            #[cfg(target_arch = "x86_64")]
            "avx512f" => Imp::Avx512(Avx512::detect()?),
            #[cfg(target_arch = "x86_64")]
            "avx512f+sha" => Imp::Hybrid(Avx512::detect()?, ShaNi::detect()?),
            _ => return None,
        };
        Some(KernelToken { kernel: self, imp })
    }
}

impl std::fmt::Display for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug)]
enum Imp {
    Portable,
    #[cfg(target_arch = "x86_64")]
    ShaNi(ShaNi),
    #[cfg(target_arch = "x86_64")]
    Avx2(Avx2),
    #[cfg(target_arch = "x86_64")]
    Avx512(Avx512),
    #[cfg(target_arch = "x86_64")]
    Hybrid(Avx512, ShaNi),
}

/// A kernel that this CPU can run; only [`Kernel::token`] makes one.
#[derive(Clone, Copy, Debug)]
pub struct KernelToken {
    kernel: Kernel,
    imp: Imp,
}

/// Views a chunk of exactly `N` states as an array.
fn exact<const N: usize>(chunk: &mut [State]) -> &mut [State; N] {
    // Callers pass chunks of exactly `kernel.lanes()` == N states (see `run_exact`).
    chunk.try_into().expect("chunk has the kernel's lane count")
}

impl KernelToken {
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Advances every chain in `states` by `n` links (`h <- SHA256(h)`), `lanes()` at a time;
    /// a last partial group is padded.
    pub fn run(&self, states: &mut [State], n: u64) {
        let l = self.kernel.lanes();
        for chunk in states.chunks_mut(l) {
            if chunk.len() == l {
                self.run_exact(chunk, n);
            } else {
                let mut buf = [[0u32; 8]; 32];
                buf[..chunk.len()].copy_from_slice(chunk);
                self.run_exact(&mut buf[..l], n);
                chunk.copy_from_slice(&buf[..chunk.len()]);
            }
        }
    }

    fn run_exact(&self, c: &mut [State], n: u64) {
        match (self.imp, self.kernel) {
            (Imp::Portable, Kernel::Portable1) => chain_portable(&mut c[0], n),
            (Imp::Portable, Kernel::Portable2) => chains_portable::<2>(exact(c), n),
            (Imp::Portable, Kernel::Portable4) => chains_portable::<4>(exact(c), n),
            #[cfg(target_arch = "x86_64")]
            (Imp::ShaNi(t), Kernel::ShaNi1) => t.chains::<1>(exact(c), n),
            #[cfg(target_arch = "x86_64")]
            (Imp::ShaNi(t), Kernel::ShaNi2) => t.chains::<2>(exact(c), n),
            #[cfg(target_arch = "x86_64")]
            (Imp::ShaNi(t), Kernel::ShaNi3) => t.chains::<3>(exact(c), n),
            #[cfg(target_arch = "x86_64")]
            (Imp::ShaNi(t), Kernel::ShaNi4) => t.chains::<4>(exact(c), n),
            #[cfg(target_arch = "x86_64")]
            (Imp::Avx2(t), Kernel::Avx2x8) => t.chains8(exact(c), n),
            #[cfg(target_arch = "x86_64")]
            (Imp::Avx2(t), Kernel::Avx2x16) => t.chains16(exact(c), n),
            #[cfg(target_arch = "x86_64")]
            (Imp::Avx512(t), Kernel::Avx512x16) => t.chains16(exact(c), n),
            #[cfg(target_arch = "x86_64")]
            (Imp::Avx512(t), Kernel::Avx512x32) => t.chains32(exact(c), n),
            #[cfg(target_arch = "x86_64")]
            (Imp::Hybrid(v, s), Kernel::Hybrid20) => v.chains_hybrid::<4, 20>(s, exact(c), n),
            #[cfg(target_arch = "x86_64")]
            (Imp::Hybrid(v, s), Kernel::Hybrid24) => v.chains_hybrid::<8, 24>(s, exact(c), n),
            // `Kernel::token` pairs every kernel with its own backend's token.
            _ => unreachable!("kernel {} paired with a foreign token", self.kernel),
        }
    }
}

/// Every kernel this CPU can run, portable first.
pub fn available() -> Vec<KernelToken> {
    Kernel::ALL.into_iter().filter_map(Kernel::token).collect()
}

fn forced_portable() -> bool {
    proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE")
}

fn first_available(order: &[Kernel]) -> KernelToken {
    let portable = Kernel::Portable1
        .token()
        .expect("the portable kernel runs everywhere");
    order.iter().find_map(|k| k.token()).unwrap_or(portable)
}

/// The fastest kernel for one chain (proof creation): SHA-NI where present, else portable.
pub fn best_single() -> KernelToken {
    if forced_portable() {
        return first_available(&[Kernel::Portable1]);
    }
    first_available(&[Kernel::ShaNi1, Kernel::Portable1])
}

/// Approximate one-core throughput in MH/s, measured on the development machine (AMD EPYC
/// Zen 4, see the crate README); used only to choose between kernels for a small group.
fn nominal_mhs(k: Kernel) -> f64 {
    match k {
        Kernel::Portable1 => 6.0,
        Kernel::Portable2 | Kernel::Portable4 => 4.0,
        Kernel::ShaNi1 => 28.0,
        Kernel::ShaNi2 => 50.0,
        Kernel::ShaNi3 | Kernel::ShaNi4 => 54.0,
        Kernel::Avx2x8 => 29.0,
        Kernel::Avx2x16 => 22.0,
        Kernel::Avx512x16 => 61.0,
        Kernel::Avx512x32 => 64.0,
        Kernel::Hybrid20 | Kernel::Hybrid24 => 56.0,
    }
}

/// The kernel expected to finish `count` equal-length chains soonest on one core (padding
/// included): for the last, partial group of a verification.
pub fn best_for(count: usize) -> KernelToken {
    if forced_portable() {
        return first_available(&[Kernel::Portable1]);
    }
    let cost = |t: &KernelToken| {
        let l = t.kernel().lanes();
        (count.div_ceil(l) * l) as f64 / nominal_mhs(t.kernel())
    };
    available()
        .into_iter()
        .min_by(|a, b| cost(a).total_cmp(&cost(b)))
        .unwrap_or_else(best_single)
}

/// The fastest kernel for many independent chains (verification), in the order measured on
/// the development machine (see the crate README).
pub fn best_many() -> KernelToken {
    if forced_portable() {
        return first_available(&[Kernel::Portable4]);
    }
    first_available(&[
        Kernel::Avx512x32,
        Kernel::ShaNi4,
        Kernel::Avx2x16,
        Kernel::Portable4,
    ])
}

#[cfg(test)]
mod tests {
    //! The shared test driver: every available kernel against the portable one and against
    //! the `sha2` crate, on boundary and random inputs, for several link counts.
    use super::*;
    use crate::sha256::{bytes_to_words, words_to_bytes};
    use rand::{Rng, SeedableRng};

    fn sha2_chain(start: [u8; 32], n: u64) -> [u8; 32] {
        use sha2::Digest;
        let mut h = start;
        for _ in 0..n {
            h = sha2::Sha256::digest(h).into();
        }
        h
    }

    fn inputs(count: usize, seed: u64) -> Vec<State> {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let mut v: Vec<State> = vec![[0; 8], [u32::MAX; 8], [0x8000_0000, 0, 0, 0, 0, 0, 0, 256]];
        while v.len() < count {
            v.push(std::array::from_fn(|_| rng.gen()));
        }
        v.truncate(count);
        v
    }

    #[test]
    fn every_kernel_matches_portable_and_sha2() {
        let portable = Kernel::Portable1.token().unwrap();
        for tok in available() {
            for (n, count) in [(0u64, 5usize), (1, 37), (2, 33), (7, 64), (100, 40)] {
                let start = inputs(count, n ^ 0x5eed);
                let mut got = start.clone();
                tok.run(&mut got, n);
                for (i, s) in start.iter().enumerate() {
                    let mut want = *s;
                    portable.run(std::slice::from_mut(&mut want), n);
                    assert_eq!(got[i], want, "{} lane {i} n {n}", tok.kernel());
                    if i < 6 || n <= 2 {
                        let oracle = bytes_to_words(&sha2_chain(words_to_bytes(s), n));
                        assert_eq!(got[i], oracle, "{} vs sha2, lane {i} n {n}", tok.kernel());
                    }
                }
            }
        }
    }

    #[test]
    fn portable_kernel_matches_sha2_on_random_inputs() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut got = [0u32; 8];
        for _ in 0..300 {
            let x: [u8; 32] = rng.gen();
            got = bytes_to_words(&x);
            chain_portable(&mut got, 3);
            assert_eq!(words_to_bytes(&got), sha2_chain(x, 3));
        }
        assert_ne!(got, [0; 8]);
    }

    #[test]
    fn sha_ni_kernels() {
        if Kernel::ShaNi1.token().is_none() {
            println!("skipped: CPU lacks SHA-NI");
            return;
        }
        for k in [
            Kernel::ShaNi1,
            Kernel::ShaNi2,
            Kernel::ShaNi3,
            Kernel::ShaNi4,
        ] {
            let tok = k.token().unwrap();
            let start = inputs(9, 3);
            let mut got = start.clone();
            tok.run(&mut got, 1000);
            for (s, g) in start.iter().zip(&got) {
                assert_eq!(
                    *g,
                    bytes_to_words(&sha2_chain(words_to_bytes(s), 1000)),
                    "{k}"
                );
            }
        }
    }

    #[test]
    fn avx512_kernels() {
        if Kernel::Avx512x16.token().is_none() {
            println!("skipped: CPU lacks AVX-512F");
            return;
        }
        let start = inputs(40, 11);
        for k in [
            Kernel::Avx512x16,
            Kernel::Avx512x32,
            Kernel::Hybrid20,
            Kernel::Hybrid24,
        ] {
            let Some(tok) = k.token() else {
                println!("skipped: {k}: CPU lacks SHA-NI");
                continue;
            };
            let mut got = start.clone();
            tok.run(&mut got, 500);
            for (s, g) in start.iter().zip(&got) {
                assert_eq!(
                    *g,
                    bytes_to_words(&sha2_chain(words_to_bytes(s), 500)),
                    "{k}"
                );
            }
        }
    }

    #[test]
    fn avx2_kernels() {
        if Kernel::Avx2x8.token().is_none() {
            println!("skipped: CPU lacks AVX2");
            return;
        }
        let start = inputs(20, 12);
        for k in [Kernel::Avx2x8, Kernel::Avx2x16] {
            let mut got = start.clone();
            k.token().unwrap().run(&mut got, 500);
            for (s, g) in start.iter().zip(&got) {
                assert_eq!(
                    *g,
                    bytes_to_words(&sha2_chain(words_to_bytes(s), 500)),
                    "{k}"
                );
            }
        }
    }

    #[test]
    fn names_round_trip_and_dispatch_honours_force_portable() {
        for k in Kernel::ALL {
            assert_eq!(Kernel::from_name(k.name()), Some(k));
        }
        if forced_portable() {
            assert_eq!(best_single().kernel().isa(), "portable");
            assert_eq!(best_many().kernel().isa(), "portable");
        }
        assert!(available().iter().any(|t| t.kernel() == Kernel::Portable1));
        for count in [1, 3, 17, 100] {
            assert!(available()
                .iter()
                .any(|t| t.kernel() == best_for(count).kernel()));
        }
    }
}
