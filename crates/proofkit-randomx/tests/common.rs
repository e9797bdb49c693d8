//! Shared test helpers: the vectors of `shared/vectors/randomx.json` (source: the reference
//! implementation's own test suite, tevador/RandomX src/tests/tests.cpp).
#![allow(dead_code)]

use serde_json::Value;
use std::sync::{Arc, OnceLock};

pub fn vectors() -> Option<Value> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/vectors/randomx.json");
    match std::fs::read_to_string(&p) {
        Ok(s) => Some(serde_json::from_str(&s).expect("randomx.json parses")),
        Err(_) => {
            eprintln!("skipped: vectors not found at {}", p.display());
            None
        }
    }
}

pub fn field_bytes(v: &Value, name: &str) -> Vec<u8> {
    if let Some(s) = v.get(name).and_then(|x| x.as_str()) {
        return s.as_bytes().to_vec();
    }
    let h = v
        .get(&format!("{name}_hex"))
        .and_then(|x| x.as_str())
        .unwrap_or_else(|| panic!("vector lacks {name}"));
    hex::decode(h).expect("hex")
}

/// Caches are 256 MiB and take a second to build: share one per key across the tests of a binary.
pub fn cache(key: &[u8]) -> Arc<proofkit_randomx::Cache> {
    static CACHES: OnceLock<std::sync::Mutex<Vec<(Vec<u8>, Arc<proofkit_randomx::Cache>)>>> =
        OnceLock::new();
    let m = CACHES.get_or_init(Default::default);
    let mut g = m.lock().unwrap();
    if let Some((_, c)) = g.iter().find(|(k, _)| k == key) {
        return c.clone();
    }
    let c = Arc::new(
        proofkit_randomx::Cache::new(key, proofkit_randomx::PagePolicy::Transparent).unwrap(),
    );
    g.push((key.to_vec(), c.clone()));
    c
}

/// The calling thread's MXCSR (0 off x86-64).
#[cfg(target_arch = "x86_64")]
pub fn mxcsr() -> u32 {
    let mut v: u32 = 0;
    // SAFETY: stmxcsr writes 4 bytes to the given address.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut v) };
    v
}

#[cfg(not(target_arch = "x86_64"))]
pub fn mxcsr() -> u32 {
    0
}

/// Sets the calling thread's MXCSR (tests change only its rounding-control bits).
#[cfg(target_arch = "x86_64")]
pub fn set_mxcsr(v: u32) {
    // SAFETY: ldmxcsr reads 4 bytes; callers pass a value mxcsr() returned with only RC changed.
    unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &v) };
}
