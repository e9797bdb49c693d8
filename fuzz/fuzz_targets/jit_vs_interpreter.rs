//! Differential fuzzing of the RandomX VM JIT against the interpreter: the fuzzer chooses the
//! program/scratchpad seed, the version, the initial rounding mode, the JIT's rounding strategy
//! (MXCSR or AVX-512 embedded rounding) and the iteration count; both backends must agree bit
//! for bit. Run with `cargo +nightly fuzz run jit_vs_interpreter`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proofkit_randomx::{Cache, DatasetSource, JitRounding, PagePolicy, Version, Vm, VmOptions};
use std::sync::{Arc, OnceLock};

fn cache() -> Arc<Cache> {
    static C: OnceLock<Arc<Cache>> = OnceLock::new();
    C.get_or_init(|| Arc::new(Cache::new(b"fuzz", PagePolicy::Transparent).unwrap())).clone()
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 66 {
        return;
    }
    let seed: [u8; 64] = data[..64].try_into().unwrap();
    let version = if data[64] & 1 == 0 { Version::V1 } else { Version::V2 };
    let fprc = (data[64] >> 1) as u32 & 3;
    let rounding = if data[64] & 8 == 0 { JitRounding::Mxcsr } else { JitRounding::Embedded };
    let iterations = 1 + data[65] as usize;
    let mk = |jit| {
        let opts = VmOptions { version, jit, rounding, ..Default::default() };
        Vm::new(DatasetSource::Light(cache()), opts).unwrap()
    };
    let (mut a, mut b) = (mk(true), mk(false));
    let x = a.debug_run_program(&seed, fprc, iterations);
    let y = b.debug_run_program(&seed, fprc, iterations);
    assert_eq!(x.0.to_bytes(), y.0.to_bytes());
    assert_eq!(x.1, y.1);
    assert_eq!(x.2, y.2);
});
