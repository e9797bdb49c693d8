//! A page store whose file was damaged in many ways (bytes flipped, child slots overwritten,
//! leaf headers changed, pages zeroed or copied over others) gives errors or values on every
//! operation, never a panic or a hang: open, lookups one at a time and batched, scans,
//! writes (puts, deletes, a prefix delete), the commit and `check`.

use proofkit_state::keccak::keccak256;
use proofkit_state::store::{CommitLevel, Op, Store, PAGE};
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

const KEYS: u32 = 40_000;

fn key(i: u32) -> Vec<u8> {
    keccak256(&i.to_le_bytes()).to_vec()
}

/// Every operation on the store in `dir`; each may fail, none may panic. Returns whether any
/// of them gave an error.
fn exercise(dir: &Path, seed: u64) -> bool {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let Ok(mut s) = Store::open(Some(dir)) else {
        return true;
    };
    let mut failed = s.check().is_err();
    let keys: Vec<Vec<u8>> = (0..64)
        .map(|_| key(rng.gen_range(0..KEYS + 1000)))
        .collect();
    for k in &keys {
        failed |= s.get(k).is_err();
    }
    let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
    failed |= s.get_many(&refs, |_, _| {}).is_err();
    let mut seen = 0;
    failed |= s
        .scan_from(&keys[0], |_, _| {
            seen += 1;
            seen < 2_000
        })
        .is_err();
    let snap = s.snapshot();
    failed |= snap.get(&keys[1]).is_err();
    let mut ops: Vec<Op> = (0..200)
        .map(|_| Op::Put(key(rng.gen_range(0..KEYS + 1000)), vec![rng.gen(); 40]))
        .collect();
    ops.extend((0..20).map(|_| Op::Del(key(rng.gen_range(0..KEYS)))));
    ops.push(Op::DelPrefix(key(rng.gen_range(0..KEYS))[..2].to_vec()));
    match s.apply(ops) {
        Ok(()) => {
            failed |= s.commit(2, [2; 32], CommitLevel::None).is_err();
            failed |= s.check().is_err();
        }
        Err(_) => failed = true,
    }
    drop(snap);
    failed
}

#[test]
fn a_damaged_store_gives_errors_never_a_panic_or_a_hang() {
    let dir = std::env::temp_dir().join(format!("pk-store-damage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The pages in use (the file is longer: it grows in steps).
    let pages = {
        let mut s = Store::open(Some(&dir)).unwrap();
        s.apply(
            (0..KEYS)
                .map(|i| Op::Put(key(i), vec![i as u8; 60]))
                .collect(),
        )
        .unwrap();
        s.commit(1, [1; 32], CommitLevel::None).unwrap();
        // A second commit, so that the file holds freed pages and a free list.
        s.apply((0..40).map(|i| Op::Put(key(i), vec![9; 80])).collect())
            .unwrap();
        s.commit(2, [2; 32], CommitLevel::None).unwrap();
        s.check().unwrap();
        s.meta().page_count as usize
    };
    let file = dir.join("state.pk");
    let clean = std::fs::read(&file).unwrap();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(41);
    let mut noticed = 0;
    let mut by_kind = [0usize; 6];
    // Branch pages are a few percent of the pages: every other case damages one of them.
    let branches: Vec<usize> = (2..pages).filter(|&p| clean[p * PAGE] == 1).collect();
    assert!(branches.len() > 16);
    const CASES: u64 = 360;
    for case in 0..CASES {
        let mut bytes = clean.clone();
        // Pages 2.. (the meta pages have their own checksum and tests).
        let page = if case % 2 == 0 {
            branches[rng.gen_range(0..branches.len())]
        } else {
            rng.gen_range(2..pages)
        };
        let at = page * PAGE;
        match (case / 2) % 6 {
            0 => {
                for _ in 0..rng.gen_range(1..8) {
                    bytes[at + rng.gen_range(0..PAGE)] ^= 1 << rng.gen_range(0..8);
                }
            }
            1 => {
                // A u32 in the first 1,036 bytes (a branch's child slots) set to a page id
                // in range, to 0, 1 or past the end.
                let o = at + 8 + 4 * rng.gen_range(0..257);
                let v: u32 = match rng.gen_range(0..4) {
                    0 => rng.gen_range(0..pages as u32),
                    1 => rng.gen_range(0..2),
                    2 => page as u32,
                    _ => rng.gen(),
                };
                bytes[o..o + 4].copy_from_slice(&v.to_le_bytes());
            }
            2 => {
                // The header: kind, depth, a leaf's count and restart table.
                let o = at + rng.gen_range(0..8);
                bytes[o] = rng.gen();
            }
            3 => bytes[at..at + PAGE].fill(0),
            4 => {
                let from = rng.gen_range(2..pages) * PAGE;
                bytes.copy_within(from..from + PAGE, at);
            }
            _ => {
                // A restart table entry or the first entries' bytes.
                let o = at + 8 + rng.gen_range(0..200);
                bytes[o] = rng.gen();
            }
        }
        std::fs::write(&file, &bytes).unwrap();
        let (tx, rx) = mpsc::channel();
        let d = dir.clone();
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(|| exercise(&d, case));
            let _ = tx.send(r.ok());
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Some(n)) => {
                noticed += usize::from(n);
                by_kind[(case as usize / 2) % 6] += usize::from(n);
            }
            Ok(None) => panic!(
                "case {case} (page {page}, kind {}) panicked",
                (case / 2) % 6
            ),
            Err(_) => panic!("case {case} (page {page}, kind {}) hung", (case / 2) % 6),
        }
    }
    // Damage to a page no root reaches (freed by the second commit) is harmless; most cases
    // hit a page in use, which `check` (or the open) reports.
    eprintln!("{noticed} of {CASES}: {by_kind:?}");
    assert!(
        noticed as u64 > CASES / 2,
        "{noticed} of {CASES} damaged stores noticed"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
