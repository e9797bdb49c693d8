//! Fast-mode hashing alone, for a profiler: builds the dataset (2 MiB hugetlb pages where
//! reserved, else transparent huge pages), prints `ready` to stderr, then hashes N blobs (the
//! first argument, default 3,000) on one VM and prints the wall time per hash. With `ref` as the
//! second argument the system librandomx hashes instead (its dataset and VM on large pages).
//! Profile the hashing only by attaching after `ready`, e.g. `perf record -e cpu-clock -p PID`.
use proofkit_randomx::peer::{LibRandomx, FLAG_FULL_MEM, FLAG_LARGE_PAGES};
use proofkit_randomx::{Cache, Dataset, DatasetSource, PagePolicy, Version, Vm, VmOptions};
use std::sync::Arc;

fn main() {
    let n: u32 = std::env::args().nth(1).map_or(3000, |s| s.parse().unwrap());
    let reference = std::env::args().nth(2).is_some_and(|a| a == "ref");
    let key = b"fast timing";
    if reference {
        let lib = LibRandomx::load().unwrap();
        let flags = lib.recommended_flags() | FLAG_FULL_MEM | FLAG_LARGE_PAGES;
        let c = lib.cache(flags, key).unwrap();
        let d = lib.dataset(flags, &c, 2).unwrap();
        let mut vm = lib.vm(flags, Some(&c), Some(&d)).unwrap();
        hash_all("librandomx", n, |blob| vm.hash(blob));
        return;
    }
    let pages = PagePolicy::HugetlbFirst;
    let cache = Cache::new(key, pages).unwrap();
    let dataset = Arc::new(Dataset::build(&cache, pages, 2, &|_, _| {}).unwrap());
    drop(cache);
    let opts = VmOptions {
        version: Version::V1,
        pages,
        ..Default::default()
    };
    let mut vm = Vm::new(DatasetSource::Fast(dataset), opts).unwrap();
    hash_all("proofkit", n, |blob| vm.hash(blob));
}

/// Prints `ready`, hashes `n` blobs (a counter at byte 39, the nonce's place) and prints the wall
/// time per hash.
fn hash_all(name: &str, n: u32, mut hash: impl FnMut(&[u8]) -> [u8; 32]) {
    eprintln!("ready");
    let mut blob = [0u8; 76];
    let t = std::time::Instant::now();
    for i in 0..n {
        blob[39..43].copy_from_slice(&i.to_le_bytes());
        std::hint::black_box(hash(&blob));
    }
    eprintln!(
        "{name} {:.3} ms/hash",
        t.elapsed().as_secs_f64() * 1e3 / n as f64
    );
}
