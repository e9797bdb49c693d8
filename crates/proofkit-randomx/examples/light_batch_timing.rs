//! CPU time per light-mode hash: one VM against `LightBatch`es of several sizes, alternating in
//! one process (not a benchmark: see `proofkit randomx bench --mode light`).
//! `cargo run --release -p proofkit-randomx --example light_batch_timing -- [ROUNDS] [PAGES]`
use proofkit_randomx::{Cache, DatasetSource, LightBatch, PagePolicy, Vm, VmOptions};
use std::sync::Arc;

fn cpu() -> f64 {
    proofkit_core::cputime::thread_cpu_time()
        .unwrap()
        .as_secs_f64()
}

fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(3, |a| a.parse().unwrap());
    let pages = match std::env::args().nth(2).as_deref() {
        Some("hugetlb") => PagePolicy::HugetlbFirst,
        _ => PagePolicy::Transparent,
    };
    let cache = Arc::new(Cache::new(b"timing key", pages).unwrap());
    println!("cache pages {}", cache.page_kind());
    let opts = VmOptions {
        pages,
        ..Default::default()
    };
    let inputs: Vec<[u8; 76]> = (0..48u8).map(|i| [i; 76]).collect();
    let mut vm = Vm::new(DatasetSource::Light(cache.clone()), opts).unwrap();
    let sizes = [2usize, 3, 4, 5, 6, 8];
    let mut batches: Vec<LightBatch> = sizes
        .iter()
        .map(|&n| LightBatch::new(cache.clone(), opts, n).unwrap())
        .collect();
    for round in 0..rounds {
        let t = cpu();
        for i in &inputs[..16] {
            std::hint::black_box(vm.hash(i));
        }
        let single = (cpu() - t) * 1e3 / 16.0;
        let mut line = format!("round {round}: one VM {single:.2} ms/hash");
        for (b, n) in batches.iter_mut().zip(sizes) {
            let t = cpu();
            std::hint::black_box(b.hash_many(&inputs));
            let ms = (cpu() - t) * 1e3 / inputs.len() as f64;
            line += &format!(", {n} VMs {ms:.2} ({:.2}x)", single / ms);
        }
        println!("{line}");
    }
}
