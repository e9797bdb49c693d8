//! Equihash (192,7) against Tromp's solver: `data/tromp_192_7.json` holds the solutions that
//! Tromp's `eq1927` (tromp/equihash, built outside this repository) printed for the inputs of
//! its `-r 3`: 108 zero header bytes, nonces 0, 1 and 2 (little-endian in the first nonce
//! bytes). Our solver must find every one of them (it may find more: Tromp's drops rows of
//! overflowing buckets), each of ours must be valid for our verifier and for the `equihash`
//! crate, and the memory modes must agree.
//!
//! About 35-40 s and 0.9-2 GB per solve on the 2-core machine, so ignored by default; CI runs
//! it: `cargo test -p proofkit-equihash --test tromp_192_7 -- --ignored`.

use proofkit_equihash::{
    minimal, nonce_from_int, solve, verify_indices, HashGen, Mode, Params, SolverConfig,
};
use serde_json::Value;

fn config(mode: Mode) -> SolverConfig {
    SolverConfig {
        mode,
        threads: 2,
        spill_dir: None,
    }
}

#[test]
#[ignore]
fn finds_every_solution_of_tromps_solver_on_192_7() {
    let data: Value = serde_json::from_str(include_str!("data/tromp_192_7.json")).unwrap();
    let p = Params::new(192, 7).unwrap();
    let header = [0u8; 108];
    let mut compared = 0;
    for case in data["cases"].as_array().unwrap() {
        let nonce = nonce_from_int(case["nonce"].as_u64().unwrap() as u128);
        let gen = HashGen::new(p, b"ZcashPoW", &header, &nonce).unwrap();
        let (ours, stats) = solve(&gen, &config(Mode::Em)).unwrap();
        assert!(stats.fast_path && !stats.fast_overflow, "{stats:?}");
        for s in &ours {
            verify_indices(&gen, s).unwrap();
            let enc = minimal::encode(p, s).unwrap();
            equihash::is_valid_solution(192, 7, &header, &nonce, &enc).unwrap();
        }
        for want in case["solutions"].as_array().unwrap() {
            let want: Vec<u32> = want
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(want.len(), 128);
            assert!(
                ours.contains(&want),
                "nonce {}: Tromp's solution {:x?} not found",
                case["nonce"],
                &want[..4]
            );
            compared += 1;
        }
        // The other memory modes give the same set (checked on the first nonce only: each
        // solve is another ~40 s).
        if case["nonce"].as_u64() == Some(0) {
            for mode in [Mode::Full, Mode::Pr { height: 3 }] {
                let (got, stats) = solve(&gen, &config(mode)).unwrap();
                assert_eq!(got, ours, "mode {mode}: {stats:?}");
            }
        }
    }
    assert!(
        compared >= 4,
        "only {compared} of Tromp's solutions compared"
    );
}
