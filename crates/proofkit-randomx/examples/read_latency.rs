//! Latency of one dependent random 64-byte read over buffers of the sizes RandomX reads (a
//! scratchpad-like 16 MiB, the 256 MiB cache, the 2 GiB dataset), on the pages each can get:
//! how much of a fast-mode dataset read is the memory and how much the address translation.
//! `read_latency [hugetlb]` (reserve vm.nr_hugepages, and 1 GiB pages for the 2 GiB buffer).
use proofkit_core::memory::{LargeBuffer, PagePolicy};
use std::time::Instant;

fn main() {
    let policy = if std::env::args().any(|a| a == "hugetlb") {
        PagePolicy::HugetlbFirst
    } else {
        PagePolicy::Transparent
    };
    for mib in [16usize, 256, 2048] {
        let mut buf = LargeBuffer::new(mib << 20, policy).unwrap();
        let lines = (mib << 20) / 64;
        // A random cycle through every line (Sattolo), each line holding the next one's index.
        let mut order: Vec<u32> = (0..lines as u32).collect();
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        for i in (1..lines).rev() {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            order.swap(i, (s % i as u64) as usize);
        }
        let words = buf.as_mut_slice();
        for k in 0..lines {
            let (from, to) = (order[k] as usize, order[(k + 1) % lines] as usize);
            words[64 * from..64 * from + 8].copy_from_slice(&(to as u64).to_le_bytes());
        }
        let steps = 4_000_000usize;
        let mut at = order[0] as usize;
        let t = Instant::now();
        for _ in 0..steps {
            at = u64::from_le_bytes(words[64 * at..64 * at + 8].try_into().unwrap()) as usize;
        }
        println!(
            "{mib:>5} MiB on {}: {:.1} ns per dependent read ({at})",
            buf.kind(),
            t.elapsed().as_secs_f64() * 1e9 / steps as f64
        );
    }
}
