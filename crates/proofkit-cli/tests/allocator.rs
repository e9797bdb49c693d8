//! The heap allocator per command (src/alloc.rs): mimalloc for `state`, overridable by
//! `PROOFKIT_ALLOCATOR`, and a clear error for an unknown value.
use std::process::Command;

fn state_bench(allocator: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proofkit"));
    cmd.args(["state", "bench", "--blocks", "2", "--accounts-per-block", "10"])
        .args(["--rows", "1", "--json"])
        .env_remove("PROOFKIT_ALLOCATOR");
    if let Some(a) = allocator {
        cmd.env("PROOFKIT_ALLOCATOR", a);
    }
    cmd.output().expect("run proofkit")
}

fn allocator_of(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    v["info"]["allocator"]
        .as_str()
        .expect("the allocator note")
        .to_string()
}

#[test]
fn state_runs_on_mimalloc_unless_told_otherwise() {
    assert_eq!(allocator_of(&state_bench(None)), "mimalloc");
    assert_eq!(allocator_of(&state_bench(Some("system"))), "system");
    assert_eq!(allocator_of(&state_bench(Some("mimalloc"))), "mimalloc");
}

#[test]
fn an_unknown_allocator_is_refused() {
    let out = state_bench(Some("jemalloc"));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PROOFKIT_ALLOCATOR=jemalloc is not an allocator"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}
