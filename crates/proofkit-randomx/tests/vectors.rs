//! The reference vectors (shared/vectors/randomx.json) through the Rust API, light mode.

mod common;
use common::*;
use proofkit_randomx::{commitment, Aes, DatasetSource, Version, Vm, VmOptions};

fn u64_of(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap(),
    }
}

#[test]
fn argon2_cache_words() {
    let Some(v) = vectors() else { return };
    let w = &v["argon2_cache_words"];
    let cache = cache(w["key"].as_str().unwrap().as_bytes());
    for (idx, val) in w["words"].as_object().unwrap() {
        assert_eq!(
            cache.words()[idx.parse::<usize>().unwrap()],
            u64_of(val.as_str().unwrap()),
            "word {idx}"
        );
    }
}

#[test]
fn dataset_items() {
    let Some(v) = vectors() else { return };
    let d = &v["dataset_items_word0"];
    let cache = cache(d["key"].as_str().unwrap().as_bytes());
    for (idx, val) in d["items"].as_object().unwrap() {
        assert_eq!(
            cache.dataset_item(idx.parse().unwrap())[0],
            u64_of(val.as_str().unwrap()),
            "item {idx}"
        );
    }
}

#[test]
fn reciprocals() {
    let Some(v) = vectors() else { return };
    for (d, r) in v["reciprocal"].as_object().unwrap() {
        assert_eq!(
            proofkit_randomx::reciprocal::reciprocal(d.parse().unwrap()),
            u64_of(r.as_str().unwrap()),
            "divisor {d}"
        );
    }
}

#[test]
fn aes_generator_1r() {
    let Some(v) = vectors() else { return };
    let a = &v["aes"];
    let state: [u8; 64] = hex::decode(a["state0_hex"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    let want = hex::decode(a["aes_generator_1r_first32_hex"].as_str().unwrap()).unwrap();
    for aes in [Some(Aes::Software), Aes::hardware()].into_iter().flatten() {
        let mut s = state;
        let mut out = [0u8; 64];
        aes.fill_1r(&mut s, &mut out);
        assert_eq!(&out[..32], &want[..], "{}", aes.name());
    }
}

fn check_hashes(aes: Aes) {
    let Some(v) = vectors() else { return };
    for h in v["hashes"].as_array().unwrap() {
        let key = field_bytes(h, "key");
        let input = field_bytes(h, "input");
        for (ver, name) in [(Version::V1, "v1"), (Version::V2, "v2")] {
            let mut vm = Vm::new(
                DatasetSource::Light(cache(&key)),
                VmOptions {
                    version: ver,
                    aes,
                    ..Default::default()
                },
            )
            .unwrap();
            assert_eq!(
                hex::encode(vm.hash(&input)),
                h[name].as_str().unwrap(),
                "{name} key {:?} input {:?} aes {}",
                String::from_utf8_lossy(&key),
                String::from_utf8_lossy(&input),
                aes.name()
            );
        }
    }
}

#[test]
fn hashes_v1_v2_detected_aes() {
    check_hashes(Aes::detect());
}

#[test]
fn hashes_v1_v2_software_aes() {
    check_hashes(Aes::Software);
}

#[test]
fn commitments() {
    let Some(v) = vectors() else { return };
    for c in v["commitments"].as_array().unwrap() {
        let key = field_bytes(c, "key");
        let input = field_bytes(c, "input");
        for (ver, name) in [(Version::V1, "v1"), (Version::V2, "v2")] {
            let mut vm = Vm::light(cache(&key), ver).unwrap();
            let h = vm.hash(&input);
            assert_eq!(
                hex::encode(commitment(&input, &h)),
                c[name].as_str().unwrap(),
                "{name}"
            );
        }
    }
}

#[test]
fn batch_rule() {
    let Some(v) = vectors() else { return };
    let hashes = v["hashes"].as_array().unwrap();
    let key = field_bytes(&hashes[0], "key");
    let inputs: Vec<Vec<u8>> = hashes[..3]
        .iter()
        .map(|h| field_bytes(h, "input"))
        .collect();
    for (ver, name) in [(Version::V1, "v1"), (Version::V2, "v2")] {
        let mut vm = Vm::light(cache(&key), ver).unwrap();
        assert!(
            vm.hash_last().is_err(),
            "hash_last without hash_first is an error"
        );
        vm.hash_first(&inputs[0]);
        let a = vm.hash_next(&inputs[1]).unwrap();
        let b = vm.hash_next(&inputs[2]).unwrap();
        let c = vm.hash_last().unwrap();
        for (got, h) in [a, b, c].iter().zip(&hashes[..3]) {
            assert_eq!(hex::encode(got), h[name].as_str().unwrap(), "{name}");
        }
        assert!(vm.hash_last().is_err());
    }
}
