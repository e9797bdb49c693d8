//! Fast-mode hashing alone, for a profiler: builds the dataset (2 MiB hugetlb pages where
//! reserved, else transparent huge pages), prints `ready` to stderr, then hashes N blobs (the
//! first argument, default 3,000) on one VM and prints the wall time per hash. Profile the
//! hashing only by skipping the build, e.g. `perf record -e cpu-clock -D 9000 -- fast_profile`.
use proofkit_randomx::{Cache, Dataset, DatasetSource, PagePolicy, Version, Vm, VmOptions};
use std::sync::Arc;

fn main() {
    let pages = PagePolicy::HugetlbFirst;
    let cache = Cache::new(b"fast timing", pages).unwrap();
    let dataset = Arc::new(Dataset::build(&cache, pages, 2, &|_, _| {}).unwrap());
    drop(cache);
    let opts = VmOptions {
        version: Version::V1,
        pages,
        ..Default::default()
    };
    let mut vm = Vm::new(DatasetSource::Fast(dataset), opts).unwrap();
    eprintln!("ready");
    let n: u32 = std::env::args().nth(1).map_or(3000, |s| s.parse().unwrap());
    let mut blob = [0u8; 76];
    let t = std::time::Instant::now();
    for i in 0..n {
        blob[39..43].copy_from_slice(&i.to_le_bytes());
        std::hint::black_box(vm.hash(&blob));
    }
    eprintln!("{:.3} ms/hash", t.elapsed().as_secs_f64() * 1e3 / n as f64);
}
