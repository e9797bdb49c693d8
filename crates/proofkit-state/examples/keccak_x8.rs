//! Keccak-256 eight at a time, timed: the permutation alone and batches of messages of the
//! sizes the roots hash (a 110-byte leaf, a 532-byte full branch), with every kernel this CPU
//! runs (the portable twin and, where the CPU has AVX-512F, the kernel), medians of five
//! rounds.
//!
//! `cargo run --release -p proofkit-state --example keccak_x8`
use proofkit_state::keccak_x8::{available_kernels, keccak256_batch_with, permute, States};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    for k in available_kernels() {
        let mut st: States = [[0x0123_4567_89ab_cdef; 8]; 25];
        let rounds = 100_000;
        let per_permutation = median(
            (0..5)
                .map(|_| {
                    let t = Instant::now();
                    for _ in 0..rounds {
                        permute(k, &mut st);
                    }
                    t.elapsed().as_secs_f64() / rounds as f64
                })
                .collect(),
        );
        println!(
            "{k:?}: {:.1} ns per permutation of eight states ({:.1} ns a state)",
            per_permutation * 1e9,
            per_permutation * 1e9 / 8.0
        );
        for len in [110usize, 532] {
            let msgs: Vec<Vec<u8>> = (0..4096)
                .map(|i| (0..len).map(|j| (i * 7 + j) as u8).collect())
                .collect();
            let refs: Vec<&[u8]> = msgs.iter().map(|m| &m[..]).collect();
            let mut out = vec![[0u8; 32]; refs.len()];
            let per_message = median(
                (0..5)
                    .map(|_| {
                        let t = Instant::now();
                        for _ in 0..20 {
                            keccak256_batch_with(k, &refs, &mut out);
                        }
                        t.elapsed().as_secs_f64() / (20.0 * refs.len() as f64)
                    })
                    .collect(),
            );
            println!(
                "{k:?}: {len}-byte messages: {:.1} ns a message",
                per_message * 1e9
            );
        }
        // Keeps the states and hashes observable.
        println!("  (state word {:#x})", st[0][0]);
    }
}
