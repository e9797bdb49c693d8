//! The one fast-mode test: builds the 2080 MiB dataset once (all cores) and checks the reference
//! vectors, the dataset items and the batch rule through it.

mod common;
use common::*;
use proofkit_randomx::{Cache, Dataset, PagePolicy, Version, Vm};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[test]
fn fast_mode_dataset_and_vectors() {
    let Some(v) = vectors() else { return };
    let key = b"test key 000";
    let cache = Cache::new(key, PagePolicy::Transparent).unwrap();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let last = AtomicU64::new(0);
    let dataset = Dataset::build(&cache, PagePolicy::Transparent, threads, &|done, total| {
        assert!(done <= total);
        last.fetch_max(done, Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!(
        last.load(Ordering::Relaxed),
        proofkit_randomx::config::DATASET_ITEM_COUNT,
        "progress reaches the total"
    );
    for (idx, val) in v["dataset_items_word0"]["items"].as_object().unwrap() {
        let want = u64::from_str_radix(val.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
        assert_eq!(dataset.item(idx.parse().unwrap())[0], want, "item {idx}");
    }
    let last_item = proofkit_randomx::config::DATASET_ITEM_COUNT - 1;
    assert_eq!(dataset.item(last_item), &cache.dataset_item(last_item)[..]);
    let dataset = Arc::new(dataset);
    for (ver, name) in [(Version::V1, "v1"), (Version::V2, "v2")] {
        let mut vm = Vm::fast(dataset.clone(), ver).unwrap();
        let hashes: Vec<_> = v["hashes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|h| field_bytes(h, "key") == key)
            .collect();
        assert!(hashes.len() >= 3);
        for h in &hashes {
            assert_eq!(
                hex::encode(vm.hash(&field_bytes(h, "input"))),
                h[name].as_str().unwrap(),
                "{name} fast"
            );
        }
        // Batch rule in fast mode.
        vm.hash_first(&field_bytes(hashes[0], "input"));
        let a = vm.hash_next(&field_bytes(hashes[1], "input")).unwrap();
        let b = vm.hash_last().unwrap();
        assert_eq!(hex::encode(a), hashes[0][name].as_str().unwrap());
        assert_eq!(hex::encode(b), hashes[1][name].as_str().unwrap());
    }
    // Two threads share the dataset read-only, one VM each.
    std::thread::scope(|s| {
        for t in 0..2u8 {
            let d = dataset.clone();
            let want = v["hashes"][0]["v1"].as_str().unwrap().to_string();
            let input = field_bytes(&v["hashes"][0], "input");
            s.spawn(move || {
                let mut vm = Vm::fast(d, Version::V1).unwrap();
                let _ = t;
                assert_eq!(hex::encode(vm.hash(&input)), want);
            });
        }
    });
}
