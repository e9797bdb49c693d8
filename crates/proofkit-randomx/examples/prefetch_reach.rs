//! Does a software prefetch hide a random read over the 2 GiB dataset here? A loop shaped like
//! a fast-mode iteration: ~100 ns of computation that depends on this iteration's 64-byte read,
//! whose address is known `distance` iterations ahead and prefetched then (0: no prefetch).
//! `prefetch_reach [hugetlb]`
use proofkit_core::memory::{LargeBuffer, PagePolicy};
use std::time::Instant;

fn main() {
    let policy = if std::env::args().any(|a| a == "hugetlb") {
        PagePolicy::HugetlbFirst
    } else {
        PagePolicy::Transparent
    };
    for mib in [256usize, 2048] {
        let mut buf = LargeBuffer::new(mib << 20, policy).unwrap();
        buf.as_mut_slice().fill(1);
        let lines = (mib << 20) / 64;
        let steps = 2_000_000usize;
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let addr: Vec<usize> = (0..steps + 8)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                64 * (s as usize % lines)
            })
            .collect();
        let base = buf.as_slice().as_ptr();
        let words = buf.as_slice();
        let mut line = format!("{mib:>5} MiB on {}:", buf.kind());
        for distance in [0usize, 1, 2, 4] {
            let mut x = 1u64;
            let t = Instant::now();
            for i in 0..steps {
                if distance > 0 {
                    proofkit_core::memory::prefetch_address(base, addr[i + distance]);
                }
                let a = addr[i];
                x ^= u64::from_le_bytes(words[a..a + 8].try_into().unwrap());
                // ~100 ns of dependent multiplications (a VM iteration's worth of latency).
                for _ in 0..80 {
                    x = x.wrapping_mul(0x2545_F491_4F6C_DD1D).rotate_left(7);
                }
            }
            line += &format!(
                " d={distance} {:.0} ns",
                t.elapsed().as_secs_f64() * 1e9 / steps as f64
            );
            std::hint::black_box(x);
        }
        println!("{line}");
    }
}
