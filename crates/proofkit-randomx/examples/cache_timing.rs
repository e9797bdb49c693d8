//! CPU-time cost of cache initialisation, ours and the system librandomx's (robust on a loaded
//! machine; the benchmark proper is `proofkit randomx bench`).
use proofkit_randomx::peer::LibRandomx;
use proofkit_randomx::{Cache, PagePolicy};

fn cpu() -> f64 {
    proofkit_core::cputime::thread_cpu_time()
        .unwrap()
        .as_secs_f64()
}

fn main() {
    let lib = LibRandomx::load().ok();
    let mut cache = Cache::new(b"warm", PagePolicy::Transparent).unwrap();
    let mut peer = lib
        .as_ref()
        .map(|l| l.cache(l.recommended_flags(), b"warm").unwrap());
    for k in 0..8 {
        let t = cpu();
        cache.reinit(format!("key {k}").as_bytes()).unwrap();
        let ours = cpu() - t;
        if let Some(p) = &mut peer {
            let t = cpu();
            p.reinit(format!("key {k}").as_bytes());
            let theirs = cpu() - t;
            println!(
                "cache init cpu: proofkit {ours:.3} s, librandomx {theirs:.3} s, ratio {:.2}",
                theirs / ours
            );
        } else {
            println!("cache init cpu: proofkit {ours:.3} s");
        }
    }
}
