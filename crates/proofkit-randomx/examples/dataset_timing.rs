//! CPU-time cost per dataset item, ours (batched, as the dataset build runs) and the system
//! librandomx's `randomx_init_dataset` (one thread each; robust on a loaded machine).
use proofkit_randomx::peer::{LibRandomx, FLAG_FULL_MEM};
use proofkit_randomx::{Cache, Dataset, PagePolicy};

fn cpu() -> f64 {
    proofkit_core::cputime::process_cpu_time()
        .unwrap()
        .as_secs_f64()
}

fn main() {
    let n = 400_000u64;
    let cache = Cache::new(b"dataset timing", PagePolicy::Transparent).unwrap();
    let mut d = Dataset::alloc(PagePolicy::Transparent).unwrap();
    let lib = LibRandomx::load().ok();
    let peer_cache = lib
        .as_ref()
        .map(|l| l.cache(l.recommended_flags(), b"dataset timing").unwrap());
    for round in 0..3u64 {
        let start = 1_000_000 + round * n;
        let t = cpu();
        d.init_range(&cache, start, n).unwrap();
        let ours = (cpu() - t) * 1e9 / n as f64;
        if let (Some(l), Some(c)) = (&lib, &peer_cache) {
            let t = cpu();
            let pd = l
                .dataset_range(l.recommended_flags() | FLAG_FULL_MEM, c, start, n, 1)
                .unwrap();
            let theirs = (cpu() - t) * 1e9 / n as f64;
            assert_eq!(pd.item(start + 5), d.item(start + 5));
            println!(
                "dataset item cpu: proofkit {ours:.0} ns, librandomx {theirs:.0} ns, ratio {:.2}",
                theirs / ours
            );
        } else {
            println!("dataset item cpu: proofkit {ours:.0} ns");
        }
    }
}
