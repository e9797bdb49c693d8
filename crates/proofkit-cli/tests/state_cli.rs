//! `proofkit state root | proof | check | bench` as a user runs them: the printed root and proof
//! are the library's on the same accounts (the library's roots and proofs are checked against
//! `alloy-trie` in `crates/proofkit-state/tests/oracle.rs`), a database written by `bench --path
//! --keep` checks clean and a damaged one exits 1 naming the corruption, and bad files, bad
//! flags and bad hex are one-line errors with exit 2 (the CLI's code for usage and input
//! errors), never a panic.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn proofkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_proofkit"))
        .args(args)
        .output()
        .expect("run proofkit")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit code `code`, a message naming `needle`, and no panic.
fn assert_refused(o: &Output, code: i32, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "stderr: {err}");
    assert!(err.contains(needle), "{needle:?} not in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

const ACCOUNTS: &str = r#"{"accounts":[
  {"address":"0x1000000000000000000000000000000000000001","nonce":1,"balance":"0x0de0b6b3a7640000",
   "storage":{"0x00":"0x2a","0x01":"0x0100"}},
  {"address":"0x2000000000000000000000000000000000000002","nonce":0,"balance":7},
  {"address":"0x3000000000000000000000000000000000000003","nonce":"0x5","balance":"0x1",
   "code_hash":"0x1111111111111111111111111111111111111111111111111111111111111111",
   "storage":{"0x05":"0x07"}}
]}"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_owned()
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("proofkit-state-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn root_and_proof_print_the_libraries_answers() {
    let d = temp_dir("root");
    let file = write(&d, "accounts.json", ACCOUNTS);
    let want = proofkit_state::genesis::state_from_json(ACCOUNTS)
        .unwrap()
        .root();
    let o = proofkit(&["state", "root", "--from-json", &file]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim(), format!("0x{}", hex::encode(want)));

    // No accounts: the root of the empty trie.
    let empty = write(&d, "empty.json", r#"{"accounts":[]}"#);
    let o = proofkit(&["state", "root", "--from-json", &empty]);
    assert_eq!(
        stdout(&o).trim(),
        "0x56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421"
    );

    let o = proofkit(&[
        "state",
        "proof",
        "--from-json",
        &file,
        "--address",
        "0x1000000000000000000000000000000000000001",
        "--slot",
        "0x01",
        "--slot",
        "0x09",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let p: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(p["stateRoot"], format!("0x{}", hex::encode(want)));
    assert_eq!(p["nonce"], "0x1");
    assert_eq!(p["balance"], "0x0de0b6b3a7640000");
    assert_eq!(p["storageProof"][0]["value"], "0x0100");
    // A slot never written proves absent: its value is zero.
    assert_eq!(p["storageProof"][1]["value"], "0x");
    assert!(!p["accountProof"].as_array().unwrap().is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_files_and_hex_are_one_line_errors() {
    let d = temp_dir("bad");
    let file = write(&d, "accounts.json", ACCOUNTS);
    let missing = d.join("missing.json");
    let o = proofkit(&["state", "root", "--from-json", missing.to_str().unwrap()]);
    assert_refused(&o, 2, "missing.json: No such file");
    for (name, text, needle) in [
        ("truncated.json", &ACCOUNTS[..60], "json"),
        (
            "short.json",
            r#"{"accounts":[{"address":"0x12","nonce":0,"balance":0}]}"#,
            "address",
        ),
        ("notjson.json", "accounts = 3", "json"),
    ] {
        let f = write(&d, name, text);
        let o = proofkit(&["state", "root", "--from-json", &f]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(err.to_lowercase().contains(needle), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let long_slot = format!("0x{}", "11".repeat(33));
    for (flag, value) in [
        ("--address", "0x1234"),
        ("--address", "0xzz"),
        ("--slot", long_slot.as_str()),
    ] {
        let mut args = vec!["state", "proof", "--from-json", &file];
        if flag == "--slot" {
            args.extend(["--address", "0x1000000000000000000000000000000000000001"]);
        }
        args.extend([flag, value]);
        let o = proofkit(&args);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"));
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_kept_bench_database_checks_clean_and_a_damaged_one_does_not() {
    let d = temp_dir("check");
    let o = proofkit(&[
        "state",
        "bench",
        "--blocks",
        "40",
        "--accounts-per-block",
        "50",
        "--finalize-every",
        "8",
        "--rows",
        "2",
        "--path",
        d.to_str().unwrap(),
        "--keep",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let root = v["info"]["final_root"].as_str().unwrap().to_owned();
    // Peak memory, both ways: the kernel's RSS high-water mark and the sampled USS.
    let (rss, uss) = (
        v["info"]["peak_rss_kb"].as_u64().unwrap(),
        v["info"]["peak_uss_kb"].as_u64().unwrap(),
    );
    assert!(uss > 1024 && uss <= rss, "USS {uss} kB, RSS {rss} kB");
    let db = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("state.pk").exists())
        .expect("the kept database");
    let o = proofkit(&["state", "check", "--path", db.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with(&format!("ok: block 40, root {root}, ")),
        "{out}"
    );

    // Every data page (past the two meta pages) gets a byte flipped: no page survives intact,
    // so whatever the checker reads first is damaged.
    let file = db.join("state.pk");
    let mut bytes = std::fs::read(&file).unwrap();
    for page in bytes.chunks_mut(4096).skip(2) {
        page[0] ^= 0x5a;
    }
    std::fs::write(&file, &bytes).unwrap();
    let o = proofkit(&["state", "check", "--path", db.to_str().unwrap()]);
    assert_refused(&o, 1, "corrupt");
    assert_eq!(stderr(&o).trim().lines().count(), 1, "{}", stderr(&o));

    let o = proofkit(&[
        "state",
        "check",
        "--path",
        d.join("nothing").to_str().unwrap(),
    ]);
    assert_refused(&o, 2, "no database");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_bench_flags_are_usage_errors() {
    for (flag, value) in [
        ("--finalize-every", "0"),
        ("--rows", "0"),
        ("--cached-levels", "65"),
        ("--commit-level", "sometimes"),
        ("--prefault-gb", "nan"),
        ("--prefault-gb", "2000"),
    ] {
        let o = proofkit(&["state", "bench", "--blocks", "2", flag, value]);
        assert_refused(&o, 2, flag);
    }
    let o = proofkit(&["state", "bench", "--blocks", "0"]);
    assert_refused(&o, 1, "must be positive");
    let d = temp_dir("prefault-on-disk");
    let o = proofkit(&[
        "state",
        "bench",
        "--blocks",
        "2",
        "--prefault-gb",
        "0.1",
        "--path",
        d.to_str().unwrap(),
    ]);
    assert_refused(&o, 2, "in-memory database");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_prefaulted_bench_is_resident_from_the_start_and_ends_at_the_same_root() {
    let run = |prefault: &str| {
        let o = proofkit(&[
            "state",
            "bench",
            "--blocks",
            "20",
            "--accounts-per-block",
            "50",
            "--rows",
            "1",
            "--prefault-gb",
            prefault,
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_str::<Value>(&stdout(&o)).unwrap()
    };
    let (lazy, eager) = (run("0"), run("0.2"));
    assert_eq!(lazy["info"]["final_root"], eager["info"]["final_root"]);
    let open = eager["info"]["open_seconds"].as_str().unwrap();
    assert!(open.ends_with("0.2 GB prefaulted)"), "{open}");
    // 0.2 GB = 195,313 kB resident before the first block, whatever the run wrote.
    let rss = |v: &Value| v["info"]["peak_rss_kb"].as_u64().unwrap();
    assert!(rss(&eager) >= 195_313, "peak RSS {} kB", rss(&eager));
    assert!(rss(&lazy) < 195_313, "peak RSS {} kB", rss(&lazy));
}
