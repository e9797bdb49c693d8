//! The heap allocator per command (src/alloc.rs): mimalloc for `state`, overridable by
//! `PROOFKIT_ALLOCATOR`, and a clear error for an unknown value.
use std::process::Command;

/// A short state bench with `env` set (and no allocator settings inherited).
fn state_bench(env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proofkit"));
    cmd.args([
        "state",
        "bench",
        "--blocks",
        "2",
        "--accounts-per-block",
        "10",
    ])
    .args(["--rows", "1", "--json"])
    .env_remove("PROOFKIT_ALLOCATOR")
    .env_remove("MIMALLOC_PURGE_DELAY")
    .envs(env.iter().copied());
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
    let with = |a| state_bench(&[("PROOFKIT_ALLOCATOR", a)]);
    assert_eq!(allocator_of(&state_bench(&[])), "mimalloc");
    assert_eq!(allocator_of(&with("system")), "system");
    assert_eq!(allocator_of(&with("mimalloc")), "mimalloc");
}

#[test]
fn an_unknown_allocator_is_refused() {
    let out = state_bench(&[("PROOFKIT_ALLOCATOR", "jemalloc")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PROOFKIT_ALLOCATOR=jemalloc is not an allocator"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// mimalloc's option listing (`MIMALLOC_VERBOSE=1`) shows purging off, unless the environment
/// sets it: this also checks the option index src/alloc.rs hard-codes.
#[test]
fn mimalloc_runs_with_purging_off() {
    let purge_delay = |env: &[(&str, &str)]| {
        let env: Vec<_> = [("MIMALLOC_VERBOSE", "1")]
            .iter()
            .chain(env)
            .copied()
            .collect();
        let out = state_bench(&env);
        assert!(out.status.success());
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        err.lines()
            .find_map(|l| l.strip_prefix("option 'purge_delay': "))
            .unwrap_or_else(|| panic!("no purge_delay in mimalloc's options: {err}"))
            .trim()
            .to_string()
    };
    assert_eq!(purge_delay(&[]), "-1");
    assert_eq!(purge_delay(&[("MIMALLOC_PURGE_DELAY", "25")]), "25");
}
