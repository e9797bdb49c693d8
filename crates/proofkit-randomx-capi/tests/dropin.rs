//! Drop-in replacement: a C program built against Debian's `randomx.h` (librandomx-dev, RandomX
//! 1.1.10) and linked to Debian's `librandomx.so.0` prints the same lines when run with
//! `LD_LIBRARY_PATH` pointing at our library (v1 hashes of keys of 0, 12, 61 and 100 bytes and
//! inputs of 0, 14 and 300 bytes, the batch API, the rounding mode, dataset items, flags, the
//! large-page NULL returns).

mod common;

use std::path::Path;

#[test]
fn debian_program_runs_unchanged_on_our_library() {
    if !Path::new("/usr/include/randomx.h").exists() {
        println!("skipped: librandomx-dev not installed");
        return;
    }
    if !common::have_cc() {
        println!("skipped: no C compiler (cc) on PATH");
        return;
    }
    let dir = common::library_dir("dropin");
    let exe = dir.join("dropin");
    // System header and system library: exactly how an existing program was built.
    common::compile("tests/c/dropin.c", &exe, None, None);

    let reference = common::run(&exe, "", None);
    let ours = common::run(&exe, "", Some(&dir));
    assert!(
        reference.iter().any(|l| l.starts_with("hash k3 i2 ")),
        "the reference run is complete:\n{}",
        reference.join("\n")
    );
    // The first line names the library that was loaded.
    assert!(
        reference[0].starts_with("lib /usr/lib") || reference[0].starts_with("lib /lib"),
        "reference run loaded {}",
        reference[0]
    );
    assert_eq!(
        ours[0],
        format!("lib {}", dir.join("librandomx.so.0").display()),
        "LD_LIBRARY_PATH run must load our library"
    );
    assert_eq!(reference.len(), ours.len());
    // PROOFKIT_FORCE_PORTABLE (inherited by the child) makes our randomx_get_flags report
    // only JIT; every other line must still match.
    let portable = proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE");
    for (r, o) in reference.iter().zip(&ours).skip(1) {
        if portable && r.starts_with("flags ") {
            assert_eq!(o, "flags 8");
            continue;
        }
        assert_eq!(o, r, "our library differs from Debian's");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
