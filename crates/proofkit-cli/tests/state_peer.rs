//! `proofkit state bench --peer geth`: the same small Paprika workload through proofkit and
//! through go-ethereum's state database (the Go harness in bench/peers/geth), in memory and on
//! disk, must end at the same state root; harness failures are clear errors; without Go the peer
//! is skipped with a message. The tests that need Go print "skipped: go not installed" and
//! return when it is absent.

use serde_json::Value;
use std::process::{Command, Output};

fn proofkit(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_proofkit"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run proofkit")
}

fn go_installed() -> bool {
    Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn bench_json(extra: &[&str]) -> Value {
    let mut args = vec![
        "state",
        "bench",
        "--blocks",
        "20",
        "--accounts-per-block",
        "50",
        "--storage-per-account",
        "2",
        "--rows",
        "4",
        "--json",
        "--peer",
        "geth",
    ];
    args.extend_from_slice(extra);
    let out = proofkit(&args, &[]);
    assert!(
        out.status.success(),
        "proofkit {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn assert_same_root(v: &Value) {
    let info = &v["info"];
    let ours = info["final_root"].as_str().expect("final_root");
    let geth = info["geth_final_root"].as_str().expect("geth_final_root");
    assert_eq!(ours.len(), 66, "{ours}");
    assert_eq!(ours, geth, "proofkit and go-ethereum state roots");
    assert_eq!(info["state_roots_equal"], Value::Bool(true));
    // The empty trie's root would mean nothing was written.
    assert_ne!(
        ours,
        "0x56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421"
    );
    let geth_rows: Vec<&Value> = v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["impl"] == "go-ethereum")
        .collect();
    let blocks: Vec<u64> = geth_rows
        .iter()
        .map(|r| r["At Block"].as_u64().expect("At Block"))
        .collect();
    assert_eq!(blocks, [5, 10, 15, 20]);
    assert!(geth_rows
        .iter()
        .all(|r| r["Avg speed (blocks/s)"].as_f64().unwrap() > 0.0
            && r["peak_rss_kb"].as_u64().unwrap() > 0));
    assert_eq!(info["geth_accounts_read_back"], 1000);
    // proofkit's rows carry the block time and the CPU per block of their window.
    let ours: Vec<&Value> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["impl"] == "proofkit")
        .collect();
    assert_eq!(ours.len(), 4);
    assert!(ours
        .iter()
        .all(|r| r["block ms (median)"].as_f64().unwrap() > 0.0
            && r["CPU ms per block"].as_f64().unwrap() > 0.0));
}

#[test]
fn geth_ends_at_proofkit_state_root_in_memory_and_on_disk() {
    if !go_installed() {
        eprintln!("skipped: go not installed");
        return;
    }
    let memory = bench_json(&[]);
    assert_same_root(&memory);
    assert_eq!(memory["info"]["geth_state_history"], false);

    let dir = std::env::temp_dir().join(format!("proofkit-state-peer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let disk = bench_json(&["--path", dir.to_str().unwrap()]);
    assert_same_root(&disk);
    assert_eq!(disk["info"]["geth_state_history"], true);
    // Same workload, same root, whatever the backing store.
    assert_eq!(memory["info"]["final_root"], disk["info"]["final_root"]);
    // Both databases were removed (no --keep).
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_harness_is_a_clear_error() {
    if !go_installed() {
        eprintln!("skipped: go not installed");
        return;
    }
    let out = proofkit(
        &[
            "state",
            "bench",
            "--blocks",
            "2",
            "--accounts-per-block",
            "3",
            "--json",
            "--peer",
            "geth",
        ],
        &[("PROOFKIT_GETH_HARNESS_DIR", "/nonexistent/geth-harness")],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/geth-harness") && err.contains("PROOFKIT_GETH_HARNESS_DIR"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn without_go_the_peer_is_skipped_with_a_message() {
    // An empty PATH: no `go` to find.
    let empty = std::env::temp_dir().join(format!("proofkit-no-go-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let out = proofkit(
        &[
            "state",
            "bench",
            "--blocks",
            "3",
            "--accounts-per-block",
            "4",
            "--json",
            "--peer",
            "geth",
        ],
        &[("PATH", empty.to_str().unwrap())],
    );
    std::fs::remove_dir_all(&empty).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["info"]["geth"], "skipped: go not installed");
    assert!(v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["impl"] != "go-ethereum"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("skipped: go not installed"));
}

#[test]
fn an_unknown_peer_is_a_usage_error() {
    let out = proofkit(&["state", "bench", "--blocks", "1", "--peer", "nope"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
}
