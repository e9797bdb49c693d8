//! CPU time of the Argon2 compression on cache-resident blocks (pure compute) against the whole
//! 256 MiB fill (compute plus the wait for each data-dependent reference block), ours and the
//! `argon2` crate's: how much of the fill is memory latency.
use proofkit_core::memory::{LargeBuffer, PagePolicy};
use proofkit_randomx::argon2_fill;
use proofkit_randomx::argon2d::{self, Block};

fn cpu() -> f64 {
    proofkit_core::cputime::thread_cpu_time()
        .unwrap()
        .as_secs_f64()
}

fn main() {
    let kernel = argon2d::fast_kernel().expect("AVX-512F");
    let x: Block = std::array::from_fn(|i| i as u64 * 0x9E37_79B9_7F4A_7C15);
    let y: Block = std::array::from_fn(|i| !(i as u64) * 0xD1B5_4A32_D192_ED03);
    let mut out = [0u64; 128];
    let n = 786_432; // compressions in one RandomX cache fill
    let t = cpu();
    for _ in 0..n {
        kernel(&mut out, &x, &y, true, &mut |_| ());
        std::hint::black_box(&mut out);
    }
    let hot = cpu() - t;
    let mut mem = LargeBuffer::new(256 << 20, PagePolicy::Transparent).unwrap();
    argon2_fill::fill(&mut mem, b"warm: fault the pages in").unwrap();
    let (mut ours, mut krate) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        let t = cpu();
        argon2_fill::fill(&mut mem, b"key").unwrap();
        ours = ours.min(cpu() - t);
        let t = cpu();
        argon2_fill::fill_with_crate(&mut mem, b"key").unwrap();
        krate = krate.min(cpu() - t);
    }
    println!(
        "{n} compressions on hot blocks {hot:.3} s ({:.0} ns each); fill (best of 3): ours {ours:.3} s, argon2 crate {krate:.3} s",
        hot / n as f64 * 1e9
    );
}
