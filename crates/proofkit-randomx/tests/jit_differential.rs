//! The bounded differential test of the VM JIT against the interpreter: random programs on
//! random scratchpads (both from random seeds), v1 and v2, all four initial rounding modes,
//! requiring bit-identical register files, rounding mode and scratchpads. The unbounded version
//! is the cargo-fuzz target `fuzz/fuzz_targets/jit_vs_interpreter.rs`.

mod common;
use common::mxcsr;
use proofkit_randomx::{DatasetSource, JitRounding, Version, Vm, VmOptions};
use rand::{RngCore, SeedableRng};

#[test]
fn jit_equals_interpreter_on_random_programs_mxcsr_rounding() {
    jit_equals_interpreter(JitRounding::Mxcsr);
}

/// The same with the four loop copies and AVX-512 static rounding.
#[test]
fn jit_equals_interpreter_on_random_programs_embedded_rounding() {
    if !proofkit_core::cpu::features().avx512f {
        eprintln!("skipped: CPU lacks AVX-512F (embedded rounding)");
        return;
    }
    jit_equals_interpreter(JitRounding::Embedded);
}

fn jit_equals_interpreter(rounding: JitRounding) {
    let cache = common::cache(b"jit differential key");
    let mk = |jit: bool, version: Version| {
        let vm = Vm::new(
            DatasetSource::Light(cache.clone()),
            VmOptions {
                version,
                jit,
                rounding,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(
            vm.uses_jit(),
            jit && cfg!(target_arch = "x86_64")
                && !proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE")
        );
        vm
    };
    if !mk(true, Version::V1).uses_jit() {
        eprintln!("skipped: the JIT is not available here (non-x86-64 or PROOFKIT_FORCE_PORTABLE)");
        return;
    }
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x71D1FF);
    let mut cases = 0;
    for version in [Version::V1, Version::V2] {
        let (mut jit, mut interp) = (mk(true, version), mk(false, version));
        for case in 0..96 {
            let mut seed = [0u8; 64];
            rng.fill_bytes(&mut seed);
            let fprc = (case % 4) as u32;
            // Mostly short runs (many programs), some full-length ones.
            let iterations = if case % 16 == 0 {
                2048
            } else {
                1 + (rng.next_u32() % 64) as usize
            };
            let a = jit.debug_run_program(&seed, fprc, iterations);
            let b = interp.debug_run_program(&seed, fprc, iterations);
            assert_eq!(
                a.0.to_bytes(),
                b.0.to_bytes(),
                "registers: {version:?} seed {} fprc {fprc} iterations {iterations}",
                hex::encode(seed)
            );
            assert_eq!(a.1, b.1, "fprc: {version:?} seed {}", hex::encode(seed));
            assert_eq!(
                a.2,
                b.2,
                "scratchpad: {version:?} seed {}",
                hex::encode(seed)
            );
            cases += 1;
        }
    }
    assert_eq!(cases, 192);
}

/// After a hash the caller's floating-point environment is unchanged (vector `rounding_rule`):
/// the JIT saves and restores MXCSR, the interpreter never touches it.
#[test]
fn caller_rounding_mode_is_preserved() {
    let cache = common::cache(b"test key 000");
    for (jit, rounding) in [
        (true, JitRounding::Mxcsr),
        (true, JitRounding::Embedded),
        (false, JitRounding::Auto),
    ] {
        let mut vm = Vm::new(
            DatasetSource::Light(cache.clone()),
            VmOptions {
                jit,
                rounding,
                ..Default::default()
            },
        )
        .unwrap();
        let before = mxcsr();
        vm.hash(b"This is a test");
        // Rounding control and exception masks unchanged (the sticky status flags in bits 0-5
        // are set by any floating-point code and are not part of the mode).
        assert_eq!(mxcsr() & !0x3F, before & !0x3F, "jit {jit} {rounding:?}");
        // 0.1 + 0.2 in round-to-nearest is 0.30000000000000004.
        let x = std::hint::black_box(0.1f64) + std::hint::black_box(0.2f64);
        assert_eq!(x, 0.30000000000000004);
    }
}
