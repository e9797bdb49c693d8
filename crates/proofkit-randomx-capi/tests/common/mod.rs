//! Shared by the C tests: finding the freshly built cdylib, compiling C programs against it and
//! running them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A scratch directory holding `librandomx.so` and `librandomx.so.0` symlinks to the cdylib
/// cargo built for this test run. `cargo test` leaves it in `deps/` beside the test binary
/// (`cargo build` also copies it one level up, where it may be stale), so `deps/` comes first.
pub fn library_dir(tag: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps_dir = exe
        .parent()
        .expect("test binary lies in <target>/<profile>/deps");
    let in_deps = deps_dir.join("librandomx.so");
    let built = if in_deps.exists() {
        in_deps
    } else {
        deps_dir
            .parent()
            .expect("<target>/<profile>")
            .join("librandomx.so")
    };
    assert!(
        built.exists(),
        "the cdylib was not built at {}",
        built.display()
    );
    let dir = std::env::temp_dir().join(format!("proofkit-capi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    for name in ["librandomx.so", "librandomx.so.0"] {
        std::os::unix::fs::symlink(&built, dir.join(name)).expect("symlink");
    }
    dir
}

/// True when a C compiler is on PATH (else the caller prints a skip line).
pub fn have_cc() -> bool {
    Command::new("cc")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Compiles `source` (relative to this crate) into `out`, with `include` on the include path
/// and linking `-lrandomx` from `lib_dir` (the system's when None).
pub fn compile(source: &str, out: &Path, include: Option<&Path>, lib_dir: Option<&Path>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(source);
    let mut cmd = Command::new("cc");
    cmd.args(["-std=c11", "-O2", "-Wall", "-Werror"]);
    if let Some(i) = include {
        cmd.arg("-I").arg(i);
    }
    cmd.arg(&src).arg("-o").arg(out);
    if let Some(l) = lib_dir {
        cmd.arg("-L").arg(l);
    }
    cmd.args(["-lrandomx", "-lm", "-ldl"]);
    let o = cmd.output().expect("run cc");
    assert!(
        o.status.success(),
        "cc failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Runs `exe` with `stdin`, optionally with `LD_LIBRARY_PATH=lib_dir`; returns stdout lines.
pub fn run(exe: &Path, stdin: &str, lib_dir: Option<&Path>) -> Vec<String> {
    use std::io::Write;
    let mut cmd = Command::new(exe);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.env_remove("LD_LIBRARY_PATH");
    if let Some(l) = lib_dir {
        cmd.env("LD_LIBRARY_PATH", l);
    }
    let mut child = cmd.spawn().expect("spawn the C program");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write commands");
    let o = child.wait_with_output().expect("wait");
    assert!(
        o.status.success(),
        "{} failed ({}):\n{}",
        exe.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout)
        .expect("utf-8 output")
        .lines()
        .map(str::to_owned)
        .collect()
}

pub fn vectors() -> Option<serde_json::Value> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/vectors/randomx.json");
    match std::fs::read_to_string(&p) {
        Ok(s) => Some(serde_json::from_str(&s).expect("randomx.json parses")),
        Err(_) => {
            eprintln!("skipped: vectors not found at {}", p.display());
            None
        }
    }
}

/// A vector's `name` field as bytes: UTF-8 text, or hex when the field is `<name>_hex`.
pub fn field_bytes(v: &serde_json::Value, name: &str) -> Vec<u8> {
    if let Some(s) = v.get(name).and_then(|x| x.as_str()) {
        return s.as_bytes().to_vec();
    }
    let h = v
        .get(format!("{name}_hex"))
        .and_then(|x| x.as_str())
        .unwrap_or_else(|| panic!("vector lacks {name}"));
    hex::decode(h).expect("hex")
}

/// Hex for the C programs' command lines ("-" for empty).
pub fn arg(b: &[u8]) -> String {
    if b.is_empty() {
        "-".into()
    } else {
        hex::encode(b)
    }
}
