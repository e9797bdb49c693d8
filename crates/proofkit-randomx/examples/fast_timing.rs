//! CPU time per fast-mode hash on one thread, ours and the system librandomx's, with the same
//! page size for both datasets when `hugetlb` is given (reserve vm.nr_hugepages first), else ours
//! on transparent huge pages and the reference on its default 4 KiB pages. Our VM's scratchpad
//! and JIT code are on transparent huge pages, or hugetlb with `vm-hugetlb` (as in `proofkit
//! randomx bench --pages hugetlb`). Usage: `fast_timing [hugetlb] [vm-hugetlb]`.
use proofkit_randomx::peer::{LibRandomx, FLAG_FULL_MEM, FLAG_LARGE_PAGES};
use proofkit_randomx::{Cache, Dataset, PagePolicy, Version, Vm};
use std::sync::Arc;

fn cpu() -> f64 {
    proofkit_core::cputime::process_cpu_time()
        .unwrap()
        .as_secs_f64()
}

fn main() {
    let huge = std::env::args().any(|a| a == "hugetlb");
    let pages = if huge {
        PagePolicy::HugetlbFirst
    } else {
        PagePolicy::Transparent
    };
    let threads = 2;
    let key = b"fast timing";
    let cache = Cache::new(key, pages).unwrap();
    let t = std::time::Instant::now();
    let d = Arc::new(Dataset::build(&cache, pages, threads, &|_, _| {}).unwrap());
    println!(
        "proofkit dataset: {:.1} s wall on {threads} threads, pages {}",
        t.elapsed().as_secs_f64(),
        d.page_kind()
    );
    drop(cache);
    let lib = LibRandomx::load().unwrap();
    let mut flags = lib.recommended_flags() | FLAG_FULL_MEM;
    if huge {
        flags |= FLAG_LARGE_PAGES;
    }
    let c = lib.cache(flags, key).unwrap();
    let t = std::time::Instant::now();
    let pd = lib.dataset(flags, &c, threads).unwrap();
    println!(
        "librandomx dataset: {:.1} s wall on {threads} threads (flags {flags})",
        t.elapsed().as_secs_f64()
    );
    // The VM's own memory (scratchpad, JIT code): hugetlb as in `proofkit randomx bench --pages
    // hugetlb` when `vm-hugetlb` is given, else transparent huge pages.
    let vm_pages = if std::env::args().any(|a| a == "vm-hugetlb") {
        PagePolicy::HugetlbFirst
    } else {
        PagePolicy::Transparent
    };
    let opts = proofkit_randomx::VmOptions {
        version: Version::V1,
        pages: vm_pages,
        ..Default::default()
    };
    let mut vm = Vm::new(proofkit_randomx::DatasetSource::Fast(d.clone()), opts).unwrap();
    println!(
        "proofkit VM: scratchpad {}, JIT code {:?}",
        vm.scratchpad_pages(),
        vm.code_pages()
    );
    let mut pvm = lib.vm(flags, Some(&c), Some(&pd)).unwrap();
    // Alternating rounds, so that both see the same machine load; CPU time per hash.
    let n = 60;
    let mut ratios = Vec::new();
    let mut blob = [0u8; 76];
    for round in 0..11u32 {
        let t = cpu();
        for i in 0..n {
            blob[39..43].copy_from_slice(&(round * n + i).to_le_bytes());
            std::hint::black_box(vm.hash(&blob));
        }
        let ours = (cpu() - t) / n as f64;
        let t = cpu();
        for i in 0..n {
            blob[39..43].copy_from_slice(&(round * n + i).to_le_bytes());
            std::hint::black_box(pvm.hash(&blob));
        }
        let theirs = (cpu() - t) / n as f64;
        println!(
            "fast hash cpu: proofkit {:.2} ms, librandomx {:.2} ms, ratio {:.2}",
            ours * 1e3,
            theirs * 1e3,
            theirs / ours
        );
        ratios.push(theirs / ours);
    }
    ratios.sort_by(f64::total_cmp);
    println!("median ratio {:.2}", ratios[ratios.len() / 2]);
}
