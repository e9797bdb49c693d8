//! The engine on its own: with a target every hash meets, each reported result is the RandomX
//! hash of its nonce (checked with an independent light VM), nonces never repeat across threads,
//! a job switch reaches every thread, a new seed hash re-keys, and rx/2 hashes with v2.

use proofkit_miner::engine::{Engine, EngineConfig, Found, Mode};
use proofkit_miner::job::{Algo, Goal, Job};
use proofkit_miner::target::Target;
use proofkit_randomx::{Cache, PagePolicy, Version, Vm};
use std::collections::HashSet;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Duration;

fn job(id: &str, seed: u8, algo: Algo) -> Job {
    Job {
        id: id.into(),
        blob: (0..76u8).map(|i| i ^ seed).collect(),
        nonce_offset: 39,
        goal: Goal::Share(Target(u64::MAX)),
        seed_hash: [seed; 32],
        height: None,
        algo,
    }
}

fn take(rx: &Receiver<Found>, n: usize, id: &str) -> Vec<Found> {
    let mut out = Vec::new();
    while out.len() < n {
        let f = rx.recv_timeout(Duration::from_secs(120)).expect("results");
        if f.job.id == id {
            out.push(f);
        }
    }
    out
}

#[test]
fn results_jobs_and_keys() {
    let (tx, rx) = std::sync::mpsc::channel();
    let engine = Engine::start(
        EngineConfig {
            threads: 2,
            mode: Mode::Light,
            pages: PagePolicy::Transparent,
            pin: false,
        },
        tx,
    )
    .unwrap();
    let check = |fs: &[Found], seed: u8, version: Version| {
        let cache = Arc::new(Cache::new(&[seed; 32], PagePolicy::Transparent).unwrap());
        let mut vm = Vm::light(cache, version).unwrap();
        let mut nonces = HashSet::new();
        for f in fs {
            assert!(nonces.insert(f.nonce), "nonce {} twice", f.nonce);
            assert_eq!(vm.hash(&f.job.blob_with_nonce(f.nonce)), f.hash);
        }
    };
    engine.set_job(job("a", 1, Algo::Rx0)).unwrap();
    let a = take(&rx, 12, "a");
    check(&a, 1, Version::V1);
    assert!(engine.verify(&a[0]).unwrap());
    // A forged hash fails the engine's check.
    let mut forged = a[0].clone();
    forged.hash[0] ^= 1;
    assert!(!engine.verify(&forged).unwrap());

    // Same key, new job: results for "b" start with fresh nonces from 0.
    engine.set_job(job("b", 1, Algo::Rx0)).unwrap();
    let b = take(&rx, 6, "b");
    check(&b, 1, Version::V1);
    assert!(b.iter().any(|f| f.nonce < 16));

    // New key and rx/2: the engine re-keys; old results are no longer verifiable (stale).
    engine.set_job(job("c", 2, Algo::Rx2)).unwrap();
    assert!(engine.verify(&a[0]).is_err());
    let c = take(&rx, 6, "c");
    check(&c, 2, Version::V2);
    assert!(engine.verify(&c[0]).unwrap());

    // Pause: no more results.
    engine.pause();
    // A hash in flight may still report (at most one per thread).
    std::thread::sleep(Duration::from_secs(2));
    while rx.try_recv().is_ok() {}
    std::thread::sleep(Duration::from_secs(1));
    assert!(rx.try_recv().is_err(), "results while paused");
    let info = engine.memory_info();
    assert_eq!(info.scratchpad_pages.len(), 2);
    assert!(info.cache_pages.is_some());
    engine.stop();
}

#[test]
fn bad_jobs_are_refused() {
    let (tx, _rx) = std::sync::mpsc::channel();
    let cfg = EngineConfig {
        threads: 1,
        mode: Mode::Light,
        pages: PagePolicy::Transparent,
        pin: false,
    };
    assert!(Engine::start(EngineConfig { threads: 0, ..cfg }, tx.clone()).is_err());
    let engine = Engine::start(cfg, tx).unwrap();
    let mut j = job("x", 3, Algo::Rx0);
    j.blob.truncate(40);
    assert!(engine.set_job(j).is_err());
    assert!(engine.current_job().is_none());
}
