//! Shared test helpers: the vectors file (`/work/shared/vectors/equihash.json`, from zcashd's
//! equihash_tests.cpp and librustzcash's test vectors).

use serde_json::Value;

pub fn vectors() -> Option<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/vectors/equihash.json"
    );
    match std::fs::read_to_string(path) {
        Ok(s) => Some(serde_json::from_str(&s).expect("vectors file is valid JSON")),
        Err(_) => {
            eprintln!("skipped: vectors not found at {path}");
            None
        }
    }
}

pub fn indices(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}
