//! The shared Equihash vectors: solutions (all of them, including those of 3-way and larger
//! collisions), the no-solution nonce, the regtest block, the invalid mutations with their
//! expected kinds, and the minimal encodings.

mod common;

use proofkit_equihash::{
    minimal, nonce_from_int, solve, solve_general, verify_indices, verify_minimal, ErrorKind,
    HashGen, Mode, Params, SolverConfig,
};
use serde_json::Value;

fn gen_for(v: &Value) -> (Params, HashGen) {
    let p = Params::new(
        v["n"].as_u64().unwrap() as u32,
        v["k"].as_u64().unwrap() as u32,
    )
    .unwrap();
    let nonce = nonce_from_int(v["nonce_int"].as_u64().unwrap() as u128);
    let gen = HashGen::new(
        p,
        b"ZcashPoW",
        v["input"].as_str().unwrap().as_bytes(),
        &nonce,
    )
    .unwrap();
    (p, gen)
}

#[test]
fn listed_solutions_verify_and_encode() {
    let Some(v) = common::vectors() else { return };
    for case in v["solve"].as_array().unwrap() {
        let (p, gen) = gen_for(case);
        for s in case["solutions"].as_array().unwrap() {
            let idx = common::indices(s);
            verify_indices(&gen, &idx).unwrap();
            let enc = minimal::encode(p, &idx).unwrap();
            assert_eq!(minimal::decode(p, &enc).unwrap(), idx);
            verify_minimal(&gen, &enc).unwrap();
        }
        if let Some(h) = case["minimal_hex_of_first"].as_str() {
            let first = common::indices(&case["solutions"][0]);
            assert_eq!(hex::encode(minimal::encode(p, &first).unwrap()), h);
        }
    }
}

/// The solver finds exactly the listed solutions, in every mode, with one and two threads
/// (the (96,5) vectors; the (144,5) ones are in `solver_finds_the_144_5_vectors`).
#[test]
fn solver_finds_exactly_the_listed_solutions() {
    solver_vectors(96);
}

/// (144,5): the listed solutions of nonce 0 and none for nonce 10, full mode with 2 threads
/// (the general solver: about 40 s and 3 GB per solve on the 2-core machine) and `em` (its
/// wide plan, asserted taken: about 15 s and 740 MB), so not run by default:
/// `cargo test -p proofkit-equihash --test vectors -- --ignored`.
#[test]
#[ignore]
fn solver_finds_the_144_5_vectors() {
    solver_vectors(144);
}

fn solver_vectors(n: u64) {
    let Some(v) = common::vectors() else { return };
    for case in v["solve"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["n"].as_u64() == Some(n))
    {
        let (p, gen) = gen_for(case);
        let mut want: Vec<Vec<u32>> = case["solutions"]
            .as_array()
            .unwrap()
            .iter()
            .map(common::indices)
            .collect();
        want.sort();
        let config = |mode, threads| SolverConfig {
            mode,
            threads,
            spill_dir: None,
        };
        let configs: Vec<SolverConfig> = if p.n() == 144 {
            // `full` and `em` both run `em`'s wide plan (trees in memory and in the file),
            // on one and two threads (`em` on one thread: the unit tests' wide plans); the
            // general solver (about 40 s and 3 GB per solve here) found the same solutions
            // before. Six solves: about 1.5 min on a quiet machine, 2.5 min at load 6.
            vec![
                config(Mode::Full, 1),
                config(Mode::Full, 2),
                config(Mode::Em, 2),
            ]
        } else {
            let mut c = vec![
                config(Mode::Full, 1),
                config(Mode::Full, 2),
                config(Mode::Em, 2),
            ];
            c.extend((1..p.k()).map(|h| config(Mode::Pr { height: h }, 2)));
            c
        };
        for cfg in configs {
            let (got, stats) = solve(&gen, &cfg).unwrap();
            if p.n() == 144 {
                assert!(stats.fast_path && !stats.fast_overflow, "{stats:?}");
            }
            assert_eq!(
                got,
                want,
                "({},{}) nonce {} mode {} threads {}: {stats:?}",
                p.n(),
                p.k(),
                case["nonce_int"],
                cfg.mode,
                cfg.threads
            );
        }
        if p.n() != 144 {
            // The general solver too (its own layout; `pr` above runs `em`'s).
            let (got, stats) = solve_general(&gen, &config(Mode::Full, 2)).unwrap();
            assert!(!stats.fast_path);
            assert_eq!(got, want, "({},{}) general", p.n(), p.k());
        }
    }
}

#[test]
fn regtest_block_verifies_and_is_found() {
    let Some(v) = common::vectors() else { return };
    for case in v["verify_block"].as_array().unwrap() {
        let p = Params::new(
            case["n"].as_u64().unwrap() as u32,
            case["k"].as_u64().unwrap() as u32,
        )
        .unwrap();
        let header = hex::decode(case["header_hex"].as_str().unwrap()).unwrap();
        let nonce = hex::decode(case["nonce_hex"].as_str().unwrap()).unwrap();
        let sol = hex::decode(case["solution_minimal_hex"].as_str().unwrap()).unwrap();
        let gen = HashGen::new(p, b"ZcashPoW", &header, &nonce).unwrap();
        assert_eq!(
            verify_minimal(&gen, &sol).is_ok(),
            case["valid"].as_bool().unwrap()
        );
        let idx = minimal::decode(p, &sol).unwrap();
        let (found, _) = solve(&gen, &SolverConfig::default()).unwrap();
        assert!(
            found.contains(&idx),
            "{} not found among {} solutions",
            case["name"],
            found.len()
        );
        // A truncated or extended encoding is a length error, never a panic.
        assert_eq!(
            verify_minimal(&gen, &sol[1..]).unwrap_err().kind(),
            ErrorKind::BadLength
        );
        let mut long = sol.clone();
        long.push(0);
        assert_eq!(
            verify_minimal(&gen, &long).unwrap_err().kind(),
            ErrorKind::BadLength
        );
    }
}

fn mutate(desc: &str, s: &[u32]) -> Vec<u32> {
    let mut m = s.to_vec();
    let n = m.len();
    match desc {
        d if d.starts_with("index 0 changed from") => {
            let to: u32 = d.rsplit(' ').next().unwrap().parse().unwrap();
            m[0] = to;
        }
        "swap positions 0 and 12" => m.swap(0, 12),
        "reverse the first pair" => m.swap(0, 1),
        "swap pair 0 and pair 1" => {
            m.swap(0, 2);
            m.swap(1, 3);
        }
        "swap the last two pairs" => {
            m.swap(n - 4, n - 2);
            m.swap(n - 3, n - 1);
        }
        "swap the two halves (16 and 16)" => m.rotate_left(n / 2),
        "sort all 32 indices ascending" => m.sort_unstable(),
        "each of the first 16 indices doubled in place (a,a,b,b,...)" => {
            m = s[..n / 2].iter().flat_map(|&x| [x, x]).collect();
        }
        "first half repeated twice" => {
            m = s[..n / 2].iter().chain(&s[..n / 2]).copied().collect();
        }
        other => panic!("unknown mutation in vectors: {other}"),
    }
    m
}

#[test]
fn invalid_mutations_have_their_kinds() {
    let Some(v) = common::vectors() else { return };
    let base = &v["solve"][1];
    let (p, gen) = gen_for(base);
    let first = common::indices(&base["solutions"][0]);
    let cases = v["invalid"]["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    for case in cases {
        let desc = case["mutation"].as_str().unwrap();
        let m = mutate(desc, &first);
        let err = verify_indices(&gen, &m).unwrap_err();
        let want = match case["expect"].as_str().unwrap() {
            "Collision" => ErrorKind::Collision,
            "OutOfOrder" => ErrorKind::OutOfOrder,
            "DuplicateIdxs" => ErrorKind::DuplicateIdxs,
            "NonZeroRoot" => ErrorKind::NonZeroRoot,
            other => panic!("unknown kind {other}"),
        };
        assert_eq!(err.kind(), want, "{desc}: {err}");
        // The same through the minimal encoding.
        let enc = minimal::encode(p, &m).unwrap();
        assert_eq!(
            verify_minimal(&gen, &enc).unwrap_err().kind(),
            want,
            "{desc} (minimal)"
        );
    }
    // Wrong counts and out-of-range indices are typed too.
    assert_eq!(
        verify_indices(&gen, &first[1..]).unwrap_err().kind(),
        ErrorKind::BadLength
    );
    let mut big = first.clone();
    big[5] = 1 << p.index_bits();
    assert_eq!(
        verify_indices(&gen, &big).unwrap_err().kind(),
        ErrorKind::IndexOutOfRange
    );
}

#[test]
fn minimal_encodings_of_21_bit_indices() {
    let Some(v) = common::vectors() else { return };
    // 21-bit indices and 8 indices per solution: (n, k) = (80, 3).
    let p = Params::new(80, 3).unwrap();
    for case in v["minimal_encoding_21bit"].as_array().unwrap() {
        let idx = common::indices(&case["indices"]);
        let want = case["hex"].as_str().unwrap();
        assert_eq!(hex::encode(minimal::encode(p, &idx).unwrap()), want);
        assert_eq!(
            minimal::decode(p, &hex::decode(want).unwrap()).unwrap(),
            idx
        );
    }
}

/// A tree valid on every level but whose root is not zero is rejected as NonZeroRoot.
#[test]
fn non_zero_root_is_detected() {
    let p = Params::new(48, 5).unwrap();
    let gen = HashGen::new(p, b"ZcashPoW", b"root", &nonce_from_int(0)).unwrap();
    let sols = proofkit_equihash::reference::solve(&gen);
    let near: Vec<Vec<u32>> = proofkit_equihash::reference::trees(&gen, false)
        .into_iter()
        .filter(|t| !sols.contains(t))
        .collect();
    assert!(!near.is_empty());
    for t in &near {
        assert_eq!(
            verify_indices(&gen, t).unwrap_err().kind(),
            ErrorKind::NonZeroRoot
        );
    }
}
