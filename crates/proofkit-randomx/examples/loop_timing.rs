//! CPU time per fast-mode hash on an untouched (all-zero, never faulted in) dataset: every
//! dataset read hits the kernel's shared zero page, so this times the VM loop, program
//! generation and compilation, scratchpad fill and hash without DRAM stalls. For comparing JIT
//! code variants (build one, then the other, run both twice); the hashes are not RandomX's
//! (the dataset is not built).
use proofkit_randomx::{Dataset, PagePolicy, Version, Vm};
use std::sync::Arc;

fn main() {
    let cpu = || {
        proofkit_core::cputime::thread_cpu_time()
            .unwrap()
            .as_secs_f64()
    };
    let d = Arc::new(Dataset::alloc(PagePolicy::SmallOnly).unwrap());
    let mut vm = Vm::fast(d, Version::V1).unwrap();
    let mut blob = [0u8; 76];
    let mut times = Vec::new();
    for round in 0..11u32 {
        let n = 100;
        let t = cpu();
        for i in 0..n {
            blob[39..43].copy_from_slice(&(round * n + i).to_le_bytes());
            std::hint::black_box(vm.hash(&blob));
        }
        times.push((cpu() - t) / n as f64 * 1e3);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "loop-only hash cpu: median {:.3} ms (min {:.3})",
        times[5], times[0]
    );
}
