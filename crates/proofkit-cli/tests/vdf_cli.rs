//! `proofkit vdf` as a user runs it: the shared chain vector, a proof round trip, and damaged or
//! truncated proof files rejected with exit code 1 and a reason; usage errors exit 2.

use std::process::Command;

fn proofkit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_proofkit"))
        .args(args)
        .output()
        .expect("run proofkit")
}

const ZERO: &str = "0000000000000000000000000000000000000000000000000000000000000000";
/// shared/vectors/vdf.json: 1000 links from zero.
const END_1000: &str = "36c1cb4f826ae42ceba848227e0c5f786178ca9dceca6772e5d728d09c30a2f6";

#[test]
fn chain_prove_verify_and_bad_files() {
    let out = proofkit(&["vdf", "chain", "--start-hex", ZERO, "--iters", "1000"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), END_1000);

    let dir = std::env::temp_dir().join(format!("proofkit-vdf-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let proof = dir.join("p.bin");
    let p = proof.to_str().unwrap();
    let out = proofkit(&[
        "vdf",
        "prove",
        "--start-hex",
        ZERO,
        "--iters",
        "1000",
        "--segment",
        "100",
        "--out",
        p,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), END_1000);
    let out = proofkit(&["vdf", "verify", p, "--threads", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let bytes = std::fs::read(&proof).unwrap();
    // A flipped byte in the last checkpoint, and a truncated file: exit 1 with the reason.
    let mut bad = bytes.clone();
    let n = bad.len();
    bad[n - 40] ^= 1;
    for (name, data) in [("flipped.bin", bad), ("short.bin", bytes[..100].to_vec())] {
        let f = dir.join(name);
        std::fs::write(&f, data).unwrap();
        let out = proofkit(&["vdf", "verify", f.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{name}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.starts_with("proofkit: ") && !err.trim().is_empty(),
            "{name}: {err}"
        );
    }
    // Usage errors: a start that is not 32 bytes, a missing file.
    assert_eq!(
        proofkit(&[
            "vdf",
            "prove",
            "--start-hex",
            "00",
            "--iters",
            "10",
            "--segment",
            "5",
            "--out",
            p
        ])
        .status
        .code(),
        Some(2)
    );
    assert_ne!(
        proofkit(&["vdf", "verify", dir.join("missing.bin").to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
