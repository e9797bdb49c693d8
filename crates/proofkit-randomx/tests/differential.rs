//! Differential test against the system's reference librandomx (v1): random keys (0 to 300
//! bytes: longer than 60 is the known trap where Argon2 takes the whole key and SuperscalarHash
//! its first 60 bytes) and random inputs (0 to 300 bytes), light mode.

use proofkit_randomx::peer::{LibRandomx, FLAG_FULL_MEM, FLAG_LARGE_PAGES};
use proofkit_randomx::{Cache, PagePolicy, Version, Vm};
use rand::{Rng, SeedableRng};
use std::sync::Arc;

const KEYS: usize = 24;
const INPUTS_PER_KEY: usize = 12;

fn peer() -> Option<LibRandomx> {
    match LibRandomx::load() {
        Ok(l) => Some(l),
        Err(e) => {
            eprintln!("skipped: system librandomx not available ({e})");
            None
        }
    }
}

#[test]
fn random_keys_and_inputs_match_reference() {
    let Some(lib) = peer() else { return };
    let flags = lib.recommended_flags() & !(FLAG_FULL_MEM | FLAG_LARGE_PAGES);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x5EED_0001);
    let fixed_lengths = [0usize, 1, 32, 59, 60, 61, 64, 100, 255, 300];
    let keys: Vec<Vec<u8>> = (0..KEYS)
        .map(|i| {
            let len = if i < fixed_lengths.len() {
                fixed_lengths[i]
            } else {
                rng.gen_range(0..=300)
            };
            (0..len).map(|_| rng.gen()).collect()
        })
        .collect();
    let cases: Vec<(usize, Vec<u8>)> = (0..KEYS * INPUTS_PER_KEY)
        .map(|i| {
            let len = match i % INPUTS_PER_KEY {
                0 => 0,
                1 => 300,
                _ => rng.gen_range(0..=300),
            };
            (i / INPUTS_PER_KEY, (0..len).map(|_| rng.gen()).collect())
        })
        .collect();
    let checked = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for part in 0..2 {
            let (keys, cases, lib, checked) = (&keys, &cases, &lib, &checked);
            s.spawn(move || {
                for (k, key) in keys.iter().enumerate().filter(|(k, _)| k % 2 == part) {
                    let ours = Arc::new(Cache::new(key, PagePolicy::Transparent).unwrap());
                    let theirs = lib.cache(flags, key).expect("reference cache");
                    // Argon2 memory at a few places, where the peer exposes it (>= 1.2).
                    for w in [0usize, 12345, 33_554_431] {
                        if let Some(t) = theirs.word(w) {
                            assert_eq!(ours.words()[w], t, "cache word {w}, key len {}", key.len());
                        }
                    }
                    let mut vm = Vm::light(ours, Version::V1).unwrap();
                    let mut pvm = lib.vm(flags, Some(&theirs), None).expect("reference vm");
                    // The batch API on both sides (the fused scratchpad hash-and-refill).
                    let batch: Vec<&Vec<u8>> = cases
                        .iter()
                        .filter(|(ck, _)| *ck == k)
                        .map(|(_, i)| i)
                        .take(3)
                        .collect();
                    vm.hash_first(batch[0]);
                    pvm.hash_first(batch[0]);
                    for next in &batch[1..] {
                        assert_eq!(vm.hash_next(next).unwrap(), pvm.hash_next(next));
                    }
                    assert_eq!(vm.hash_last().unwrap(), pvm.hash_last());
                    for (_, input) in cases.iter().filter(|(ck, _)| *ck == k) {
                        assert_eq!(
                            hex::encode(vm.hash(input)),
                            hex::encode(pvm.hash(input)),
                            "key {} ({} bytes), input {} ({} bytes)",
                            hex::encode(key),
                            key.len(),
                            hex::encode(input),
                            input.len()
                        );
                        checked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            });
        }
    });
    assert_eq!(checked.into_inner(), KEYS * INPUTS_PER_KEY);
}

#[test]
fn dataset_items_match_reference() {
    let Some(lib) = peer() else { return };
    let flags = lib.recommended_flags() & !(FLAG_FULL_MEM | FLAG_LARGE_PAGES);
    let key = b"dataset differential key";
    let ours = Cache::new(key, PagePolicy::Transparent).unwrap();
    let theirs = lib.cache(flags, key).unwrap();
    let last = lib.dataset_item_count() - 1000;
    for start in [0u64, 17_000_000, last] {
        let d = lib
            .dataset_range(flags, &theirs, start, 1000, 2)
            .expect("reference dataset");
        for i in start..start + 1000 {
            assert_eq!(ours.dataset_item(i), d.item(i), "item {i}");
        }
    }
}
