//! Quick timing of light-mode hashing and its parts (not a benchmark: see `proofkit randomx bench`).
use proofkit_randomx::{Cache, PagePolicy, Version, Vm};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let jit = std::env::args().nth(1).map_or(true, |a| a != "nojit");
    let t = Instant::now();
    let cache = Arc::new(Cache::with_jit(b"timing key", PagePolicy::Transparent, jit).unwrap());
    println!(
        "cache init {:.3} s (superscalar jit: {})",
        t.elapsed().as_secs_f64(),
        cache.superscalar_jit()
    );
    let t = Instant::now();
    let mut acc = 0u64;
    for i in 0..100_000u64 {
        acc ^= cache.dataset_item(i * 7919)[0];
    }
    println!(
        "dataset item {:.0} ns ({acc:x})",
        t.elapsed().as_secs_f64() * 1e9 / 100_000.0
    );
    for jit_vm in [false, true] {
        let opts = proofkit_randomx::VmOptions {
            jit: jit_vm,
            ..Default::default()
        };
        let mut vm = Vm::new(proofkit_randomx::DatasetSource::Light(cache.clone()), opts).unwrap();
        let t = Instant::now();
        for i in 0..5u8 {
            vm.hash(&[i; 76]);
        }
        println!(
            "light hash {:.2} ms (vm jit: {})",
            t.elapsed().as_secs_f64() * 1e3 / 5.0,
            vm.uses_jit()
        );
    }
    let _ = Version::V1;
    // CPU time per light hash beside the system librandomx (robust on a loaded machine).
    if let Ok(lib) = proofkit_randomx::peer::LibRandomx::load() {
        let cpu = || {
            proofkit_core::cputime::thread_cpu_time()
                .unwrap()
                .as_secs_f64()
        };
        let flags = lib.recommended_flags();
        let pc = lib.cache(flags, b"timing key").unwrap();
        let mut pvm = lib.vm(flags, Some(&pc), None).unwrap();
        let mut vm = Vm::light(cache.clone(), Version::V1).unwrap();
        for round in 0..3 {
            let n = 10u8;
            let t = cpu();
            for i in 0..n {
                vm.hash(&[i ^ (round << 4); 76]);
            }
            let ours = (cpu() - t) / n as f64;
            let t = cpu();
            for i in 0..n {
                pvm.hash(&[i ^ (round << 4); 76]);
            }
            let theirs = (cpu() - t) / n as f64;
            println!(
                "light hash cpu: proofkit {:.2} ms, librandomx {:.2} ms, ratio {:.2}",
                ours * 1e3,
                theirs * 1e3,
                theirs / ours
            );
        }
    }
}
