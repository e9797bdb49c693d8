//! The `proofkit randomx` command line, run as a user would: vectors through `hash`, bad input,
//! and `mine` results re-checked with the library.

use std::process::Command;

fn proofkit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_proofkit"))
        .args(args)
        .output()
        .expect("run proofkit")
}

fn vectors() -> Option<serde_json::Value> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/vectors/randomx.json");
    match std::fs::read_to_string(&p) {
        Ok(s) => Some(serde_json::from_str(&s).unwrap()),
        Err(_) => {
            eprintln!("skipped: vectors not found at {}", p.display());
            None
        }
    }
}

#[test]
fn hash_prints_the_vectors() {
    let Some(v) = vectors() else { return };
    for h in v["hashes"].as_array().unwrap() {
        let key = h["key"].as_str().unwrap();
        let mut args = vec!["randomx", "hash", "--key", key];
        let input_text;
        if let Some(t) = h.get("input").and_then(|x| x.as_str()) {
            input_text = t.to_string();
            args.extend(["--input", &input_text]);
        } else {
            input_text = h["input_hex"].as_str().unwrap().to_string();
            args.extend(["--input-hex", &input_text]);
        }
        for (flag, name) in [(None, "v1"), (Some("--v2"), "v2")] {
            let mut a = args.clone();
            if let Some(f) = flag {
                a.push(f);
            }
            let out = proofkit(&a);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(
                String::from_utf8(out.stdout).unwrap().trim(),
                h[name].as_str().unwrap(),
                "{name} {key}"
            );
        }
    }
    // --key-hex gives the same as --key.
    let out = proofkit(&[
        "randomx",
        "hash",
        "--key-hex",
        &hex::encode("test key 000"),
        "--input",
        "This is a test",
    ]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        v["hashes"][0]["v1"].as_str().unwrap()
    );
}

#[test]
fn bad_input_is_a_one_line_error() {
    for args in [
        vec!["randomx", "hash", "--key-hex", "zz", "--input", "x"],
        vec!["randomx", "hash", "--key", "k"],
        vec![
            "randomx",
            "hash",
            "--key",
            "k",
            "--key-hex",
            "00",
            "--input",
            "x",
        ],
        vec![
            "randomx",
            "mine",
            "--key",
            "k",
            "--blob-hex",
            "0000",
            "--target",
            "ffffffff",
            "--light",
        ],
        vec![
            "randomx",
            "mine",
            "--key",
            "k",
            "--blob-hex",
            &"00".repeat(76),
            "--target",
            "ffff",
            "--light",
        ],
        vec!["randomx", "bench", "--threads", "0"],
    ] {
        let out = proofkit(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.starts_with("proofkit: ") && err.trim().lines().count() == 1,
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn mine_finds_nonces_that_meet_the_target() {
    let blob = "0707".repeat(38);
    // Target 0x40000000 (compact) passes about one hash in three.
    let out = proofkit(&[
        "randomx",
        "mine",
        "--key",
        "test key 000",
        "--blob-hex",
        &blob,
        "--target",
        "00000040",
        "--light",
        "--threads",
        "2",
        "--count",
        "2",
        "--max-seconds",
        "120",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cache = std::sync::Arc::new(
        proofkit_randomx::Cache::new(b"test key 000", proofkit_randomx::PagePolicy::Transparent)
            .unwrap(),
    );
    let mut vm = proofkit_randomx::Vm::light(cache, proofkit_randomx::Version::V1).unwrap();
    let target = u64::MAX / (0xFFFF_FFFFu64 / 0x4000_0000);
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    for l in lines {
        let b = hex::decode(l["blob_hex"].as_str().unwrap()).unwrap();
        let nonce = l["nonce"].as_u64().unwrap() as u32;
        assert_eq!(&b[39..43], &nonce.to_le_bytes());
        let h = vm.hash(&b);
        assert_eq!(hex::encode(h), l["hash"].as_str().unwrap());
        assert!(u64::from_le_bytes(h[24..32].try_into().unwrap()) < target);
    }
}
