//! Random-input checks against two oracles: the `equihash` crate's `is_valid_solution`
//! (every solution we find must be valid for it, and our verifier must agree with it on
//! mutated solutions), and this crate's small reference solver (the fast solver must find
//! exactly its solutions). Also: every memory mode and thread count gives the same set.

use proofkit_equihash::{
    minimal, nonce_from_int, reference, solve, solve_general, solve_in, verify_minimal, HashGen,
    Mode, Params, SolverConfig, Workspace,
};
use rand::{Rng, SeedableRng};

fn random_instance(rng: &mut rand::rngs::SmallRng) -> (Vec<u8>, [u8; 32]) {
    let len = rng.gen_range(0..160);
    let input: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
    let mut nonce = [0u8; 32];
    rng.fill(&mut nonce);
    (input, nonce)
}

fn cfg(mode: Mode, threads: usize) -> SolverConfig {
    SolverConfig {
        mode,
        threads,
        spill_dir: None,
    }
}

/// Every solution found on random (48,5) and (96,5) instances is valid for the `equihash`
/// crate; our verifier agrees with it on valid and mutated solutions.
#[test]
fn solutions_are_valid_for_the_equihash_crate() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x5eed);
    let mut checked = 0;
    for (n, k, count) in [(48u32, 5u32, 300), (96, 5, 120)] {
        let p = Params::new(n, k).unwrap();
        for _ in 0..count {
            let (input, nonce) = random_instance(&mut rng);
            let gen = HashGen::new(p, b"ZcashPoW", &input, &nonce).unwrap();
            let (sols, _) = solve(&gen, &cfg(Mode::Full, 2)).unwrap();
            for s in sols {
                let enc = minimal::encode(p, &s).unwrap();
                equihash::is_valid_solution(n, k, &input, &nonce, &enc).unwrap();
                verify_minimal(&gen, &enc).unwrap();
                checked += 1;
                // Mutations: the two verifiers agree on acceptance.
                for _ in 0..4 {
                    let mut m = s.clone();
                    match rng.gen_range(0..3) {
                        0 => {
                            let (a, b) = (rng.gen_range(0..m.len()), rng.gen_range(0..m.len()));
                            m.swap(a, b);
                        }
                        1 => {
                            let a = rng.gen_range(0..m.len());
                            m[a] = rng.gen_range(0..p.num_indices() as u32);
                        }
                        _ => {
                            let half = m.len() / 2;
                            let at = rng.gen_range(0..half / 2) * 2;
                            m.copy_within(at..at + 2, half + at);
                        }
                    }
                    let enc = minimal::encode(p, &m).unwrap();
                    let ours = verify_minimal(&gen, &enc).is_ok();
                    let theirs = equihash::is_valid_solution(n, k, &input, &nonce, &enc).is_ok();
                    assert_eq!(ours, theirs, "({n},{k}) mutation {m:?}");
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} solutions checked");
}

/// The fast solver finds exactly the reference solver's solutions.
#[test]
fn solver_matches_the_reference_solver() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut total = 0;
    for (n, k, count) in [(48u32, 5u32, 200), (96, 5, 6), (64, 3, 20)] {
        let p = Params::new(n, k).unwrap();
        for _ in 0..count {
            let (input, nonce) = random_instance(&mut rng);
            let gen = HashGen::new(p, b"ZcashPoW", &input, &nonce).unwrap();
            let want = reference::solve(&gen);
            let (got, stats) = solve(&gen, &cfg(Mode::Full, 1)).unwrap();
            assert_eq!(
                got,
                want,
                "({n},{k}) input {} nonce {}: {stats:?}",
                hex::encode(&input),
                hex::encode(nonce)
            );
            total += want.len();
        }
    }
    assert!(total > 50, "only {total} solutions compared");
}

/// Full (1 and 2 threads), every post-retrieval height and external memory give the same
/// solution set, on the fast paths and on the general solver.
#[test]
fn all_modes_give_the_same_solutions() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(99);
    for (n, k, count) in [(96u32, 5u32, 8), (48, 5, 40), (192, 7, 0)] {
        let p = Params::new(n, k).unwrap();
        for _ in 0..count {
            let (input, nonce) = random_instance(&mut rng);
            let gen = HashGen::new(p, b"ZcashPoW", &input, &nonce).unwrap();
            let (base, _) = solve(&gen, &cfg(Mode::Full, 1)).unwrap();
            let mut modes = vec![cfg(Mode::Full, 2), cfg(Mode::Em, 1), cfg(Mode::Em, 2)];
            for h in 0..k {
                modes.push(cfg(Mode::Pr { height: h }, 2));
            }
            for c in &modes {
                assert_eq!(
                    solve(&gen, c).unwrap().0,
                    base,
                    "({n},{k}) mode {} threads {}",
                    c.mode,
                    c.threads
                );
            }
            // The general solver (its own layout and tables) in every mode.
            for c in &modes {
                let (sols, stats) = solve_general(&gen, c).unwrap();
                assert!(!stats.fast_path);
                assert_eq!(
                    sols, base,
                    "({n},{k}) general {} threads {}",
                    c.mode, c.threads
                );
            }
        }
    }
}

/// (200,9): one instance, three modes and two thread counts agree, and each solution is valid
/// for the `equihash` crate (a few seconds per solve).
#[test]
fn modes_agree_on_200_9() {
    let p = Params::new(200, 9).unwrap();
    let input = b"block header";
    let nonce = nonce_from_int(0);
    let gen = HashGen::new(p, b"ZcashPoW", input, &nonce).unwrap();
    let (base, stats) = solve(&gen, &cfg(Mode::Full, 2)).unwrap();
    assert!(stats.fast_path && !stats.fast_overflow, "{stats:?}");
    for s in &base {
        equihash::is_valid_solution(200, 9, input, &nonce, &minimal::encode(p, s).unwrap())
            .unwrap();
    }
    for c in [
        cfg(Mode::Em, 1),
        cfg(Mode::Em, 2),
        cfg(Mode::Pr { height: 3 }, 2),
        cfg(Mode::Full, 1),
    ] {
        let (sols, stats) = solve(&gen, &c).unwrap();
        assert_eq!(sols, base, "mode {} threads {}", c.mode, c.threads);
        // `em` and `pr` on the CIP-EM layout, not the general solver.
        assert!(stats.fast_path && !stats.fast_overflow, "{stats:?}");
        if let Mode::Pr { height } = c.mode {
            // Every layer below the height rebuilt once for the candidates.
            let h = height as usize;
            assert_eq!(stats.recomputed_steps, h * (h + 1) / 2, "{stats:?}");
        }
    }
}

/// (200,9) whose last layer grows past the slot ids (2.79M rows, a bucket of 2,943 rows
/// against 2,895 ids: the bench's header for seed 2, nonce 5): `em` stays on its own layout
/// (before, it fell back to the general solver and ~210 MB), with the general solver's
/// solutions, each valid for the `equihash` crate.
#[test]
fn em_keeps_its_layout_when_the_last_layer_outgrows_the_slot_ids() {
    let p = Params::new(200, 9).unwrap();
    let mut input = vec![0u8; 108];
    input[0] = 2;
    let nonce = nonce_from_int(5);
    let gen = HashGen::new(p, b"ZcashPoW", &input, &nonce).unwrap();
    let (want, general) = solve(&gen, &cfg(Mode::Full, 1)).unwrap();
    // `full`'s fixed slots overflow here (a plain fallback, no memory bound to keep).
    assert!(general.fast_overflow, "{general:?}");
    assert_eq!(want.len(), 3);
    let (sols, stats) = solve(&gen, &cfg(Mode::Em, 1)).unwrap();
    assert!(stats.fast_path && !stats.fast_overflow, "{stats:?}");
    assert!(stats.layer_rows[8] > 2_700_000, "{stats:?}");
    assert_eq!(sols, want);
    for s in &sols {
        equihash::is_valid_solution(200, 9, &input, &nonce, &minimal::encode(p, s).unwrap())
            .unwrap();
    }
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!("proofkit-eq-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        TempDir(d)
    }

    fn files(&self) -> usize {
        std::fs::read_dir(&self.0).unwrap().count()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `em` on random instances: the CIP-EM path is taken, gives exactly the `full` mode's
/// solutions (with a fresh and with a reused workspace), keeps one temporary file while a
/// workspace lives and leaves none behind.
#[test]
fn em_mode_matches_full_and_removes_its_file() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0xe3);
    let dir = TempDir::new("em");
    let em = SolverConfig {
        mode: Mode::Em,
        threads: 1,
        spill_dir: Some(dir.0.clone()),
    };
    for (n, k, count) in [(96u32, 5u32, 10), (48, 5, 60)] {
        let p = Params::new(n, k).unwrap();
        let mut ws = Workspace::default();
        for i in 0..count {
            let (input, nonce) = random_instance(&mut rng);
            let gen = HashGen::new(p, b"ZcashPoW", &input, &nonce).unwrap();
            let (want, _) = solve(&gen, &cfg(Mode::Full, 1)).unwrap();
            let (fresh, stats) = solve(&gen, &em).unwrap();
            assert!(
                stats.fast_path && !stats.fast_overflow,
                "({n},{k}) {stats:?}"
            );
            assert_eq!(fresh, want, "({n},{k})");
            // Only the workspace's file (from the second instance on) is left.
            let kept = usize::from(i > 0);
            assert_eq!(dir.files(), kept, "a one-off solve leaves no file");
            let (reused, _) = solve_in(&gen, &em, &mut ws).unwrap();
            assert_eq!(reused, want, "({n},{k}) reused workspace");
            assert_eq!(dir.files(), 1, "the workspace keeps its file");
        }
        drop(ws);
        assert_eq!(dir.files(), 0, "dropping the workspace removes the file");
    }
}

/// A spill directory where no file can be created is a typed error naming the spill file,
/// not a panic.
#[test]
fn em_without_a_usable_spill_dir_is_an_error() {
    let p = Params::new(96, 5).unwrap();
    let gen = HashGen::new(p, b"ZcashPoW", b"x", &[0; 32]).unwrap();
    let missing = TempDir::new("gone").0.join("no").join("such-dir");
    for threads in [1, 2] {
        let c = SolverConfig {
            mode: Mode::Em,
            threads,
            spill_dir: Some(missing.clone()),
        };
        match solve(&gen, &c) {
            Err(e @ proofkit_equihash::SolveError::Io(_)) => {
                assert!(e.to_string().starts_with("spill file:"), "{e}")
            }
            other => panic!("expected an I/O error, got {:?}", other.map(|r| r.0.len())),
        }
    }
}

/// The `full` mode takes the fast path for the parameter sets it has a plan for, and a
/// workspace reused across nonces (stale heap contents) gives exactly the fresh results.
#[test]
fn fast_path_and_reused_workspace() {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    for (n, k) in [(96u32, 5u32), (48, 5)] {
        let p = Params::new(n, k).unwrap();
        for threads in [1, 2] {
            let mut ws = Workspace::default();
            for _ in 0..6 {
                let (input, nonce) = random_instance(&mut rng);
                let gen = HashGen::new(p, b"ZcashPoW", &input, &nonce).unwrap();
                let (fresh, stats) = solve(&gen, &cfg(Mode::Full, threads)).unwrap();
                assert!(stats.fast_path, "({n},{k}) {stats:?}");
                let (reused, _) = solve_in(&gen, &cfg(Mode::Full, threads), &mut ws).unwrap();
                assert_eq!(reused, fresh, "({n},{k}) threads {threads}");
            }
        }
    }
}

#[test]
fn bad_settings_are_typed_errors() {
    let p = Params::new(96, 5).unwrap();
    let gen = HashGen::new(p, b"ZcashPoW", b"x", &[0; 32]).unwrap();
    assert!(matches!(
        solve(&gen, &cfg(Mode::Pr { height: 5 }, 1)),
        Err(proofkit_equihash::SolveError::BadHeight { .. })
    ));
    let big = HashGen::new(Params::new(216, 7).unwrap(), b"ZcashPoW", b"x", &[0; 32]).unwrap();
    assert!(matches!(
        solve(&big, &cfg(Mode::Full, 1)),
        Err(proofkit_equihash::SolveError::TooLarge(..))
    ));
}
