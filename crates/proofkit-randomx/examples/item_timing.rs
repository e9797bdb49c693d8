//! CPU-time cost of dataset item generation (robust on a loaded machine): one item at a time.
use proofkit_randomx::{Cache, PagePolicy};

fn cpu() -> f64 {
    proofkit_core::cputime::thread_cpu_time()
        .unwrap()
        .as_secs_f64()
}

fn main() {
    let cache = Cache::new(b"timing key", PagePolicy::Transparent).unwrap();
    let n = 200_000u64;
    for round in 0..3 {
        let t = cpu();
        let mut acc = 0u64;
        for i in 0..n {
            acc ^= cache.dataset_item(i + round * n)[0];
        }
        println!(
            "single: {:.0} ns/item cpu ({acc:x})",
            (cpu() - t) * 1e9 / n as f64
        );
        let t = cpu();
        let mut acc2 = 0u64;
        for i in (0..n).step_by(2) {
            let v = cache.dataset_items::<2>(i + round * n);
            acc2 ^= v[0][0] ^ v[1][0];
        }
        println!(
            "x2: {:.0} ns/item cpu ({acc2:x})",
            (cpu() - t) * 1e9 / n as f64
        );
        let t = cpu();
        let mut acc2v = 0u64;
        for i in (0..n).step_by(2) {
            let v = cache.dataset_item_pair(i + round * n, i + 1 + round * n);
            acc2v ^= v[0][0] ^ v[1][0];
        }
        println!(
            "pair (light mode's): {:.0} ns/item cpu ({acc2v:x})",
            (cpu() - t) * 1e9 / n as f64
        );
        let t = cpu();
        let mut acc4 = 0u64;
        for i in (0..n).step_by(4) {
            let v = cache.dataset_items::<4>(i + round * n);
            acc4 ^= v[0][0] ^ v[1][0] ^ v[2][0] ^ v[3][0];
        }
        println!(
            "x4: {:.0} ns/item cpu ({acc4:x})",
            (cpu() - t) * 1e9 / n as f64
        );
        let t = cpu();
        let mut acc8 = 0u64;
        for i in (0..n).step_by(8) {
            let v = cache.dataset_items::<8>(i + round * n);
            for x in v {
                acc8 ^= x[0];
            }
        }
        println!(
            "x8: {:.0} ns/item cpu ({acc8:x})",
            (cpu() - t) * 1e9 / n as f64
        );
        let t = cpu();
        let mut acc16 = 0u64;
        for i in (0..n).step_by(16) {
            let v = cache.dataset_items::<16>(i + round * n);
            for x in v {
                acc16 ^= x[0];
            }
        }
        println!(
            "x16: {:.0} ns/item cpu ({acc16:x})",
            (cpu() - t) * 1e9 / n as f64
        );
    }
}
