//! Proofs end to end: the shared vectors, the `sha2` crate as oracle, the file format (round
//! trip, golden layout, every truncation and every flipped byte), tampering, huge counts.

use proofkit_vdf::proof::{checkpoint_count, HEADER_LEN, MAGIC, MAX_CHECKPOINTS};
use proofkit_vdf::{
    available, chain, infuse, prove, verify, verify_with, Kernel, Proof, ProofError, VdfError,
    VerifyError,
};
use sha2::Digest;

fn sha2_chain(start: [u8; 32], n: u64) -> [u8; 32] {
    let mut h = start;
    for _ in 0..n {
        h = sha2::Sha256::digest(h).into();
    }
    h
}

fn h32(s: &str) -> [u8; 32] {
    hex::decode(s).unwrap().try_into().unwrap()
}

#[test]
fn shared_vectors() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/vectors/vdf.json"
    );
    let Ok(text) = std::fs::read_to_string(path) else {
        println!("skipped: vectors not found");
        return;
    };
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let chains = v["chains"].as_array().unwrap();
    assert!(!chains.is_empty());
    for c in chains {
        let start = h32(c["start_hex"].as_str().unwrap());
        let n = c["iterations"].as_u64().unwrap();
        let end = h32(c["end_hex"].as_str().unwrap());
        assert_eq!(chain(&start, n), end);
        for tok in available() {
            let mut s = vec![proofkit_vdf::sha256::bytes_to_words(&start); 3];
            tok.run(&mut s, n);
            assert!(
                s.iter()
                    .all(|x| proofkit_vdf::sha256::words_to_bytes(x) == end),
                "{}",
                tok.kernel()
            );
        }
    }
}

fn small_proof() -> Proof {
    let start = h32("2efd64a55463b5b554c4a2e22a472da23bb76e63758ce3c89276abf0e9ad8b15");
    let infusions = [[0x11u8; 32], [0x22u8; 32]];
    prove(&start, &infusions, 1000, 64, &mut |_| {}).unwrap()
}

#[test]
fn prove_matches_sha2_oracle() {
    let p = small_proof();
    assert_eq!(p.checkpoints.len(), 16); // 15 segments of 64, one of 40
    let mut m = [0u8; 64];
    m[..32].copy_from_slice(&p.start);
    m[32..].copy_from_slice(&[0x11; 32]);
    let mut h: [u8; 32] = sha2::Sha256::digest(m).into();
    m[..32].copy_from_slice(&h);
    m[32..].copy_from_slice(&[0x22; 32]);
    h = sha2::Sha256::digest(m).into();
    assert_eq!(p.seed(), h);
    assert_eq!(infuse(&infuse(&p.start, &[0x11; 32]), &[0x22; 32]), h);
    for (i, c) in p.checkpoints.iter().enumerate() {
        h = sha2_chain(h, p.segment_len(i as u64));
        assert_eq!(*c, h, "checkpoint {i}");
    }
    assert_eq!(p.segment_len(15), 40);
    assert_eq!(p.output(), sha2_chain(p.seed(), 1000));
}

#[test]
fn verify_accepts_with_every_kernel_and_thread_count() {
    let p = small_proof();
    for tok in available() {
        for threads in [1, 2, 3] {
            verify_with(&p, threads, tok, &|_| {})
                .unwrap_or_else(|e| panic!("{}: {e}", tok.kernel()));
        }
    }
    let done = std::sync::atomic::AtomicU64::new(0);
    verify(&p, 0, &|d| {
        done.fetch_add(d, std::sync::atomic::Ordering::Relaxed);
    })
    .unwrap();
    assert_eq!(done.into_inner(), 16);
}

#[test]
fn tampered_checkpoint_is_reported_by_index() {
    let p = small_proof();
    for tok in available() {
        for i in [0usize, 1, 7, 14, 15] {
            let mut q = p.clone();
            q.checkpoints[i][5] ^= 0x40;
            match verify_with(&q, 2, tok, &|_| {}) {
                Err(VerifyError::BadSegment {
                    index,
                    segments: 16,
                    ..
                }) => assert_eq!(index, i as u64, "{}", tok.kernel()),
                other => panic!("{}: tampered checkpoint {i} gave {other:?}", tok.kernel()),
            }
        }
    }
    // Two tampered checkpoints: the first is reported.
    let mut q = p.clone();
    q.checkpoints[9][0] ^= 1;
    q.checkpoints[3][0] ^= 1;
    assert!(matches!(
        verify(&q, 2, &|_| {}),
        Err(VerifyError::BadSegment { index: 3, .. })
    ));
    // A changed start or infusion breaks segment 0.
    let mut q = p.clone();
    q.infusions[1][31] ^= 1;
    assert!(matches!(
        verify(&q, 1, &|_| {}),
        Err(VerifyError::BadSegment { index: 0, .. })
    ));
    let mut q = p.clone();
    q.start[0] ^= 1;
    assert!(matches!(
        verify(&q, 1, &|_| {}),
        Err(VerifyError::BadSegment { index: 0, .. })
    ));
    // A proof claiming more iterations than it ran: mismatched counts are a typed error.
    let mut q = p.clone();
    q.iterations = 2000;
    assert!(matches!(
        verify(&q, 1, &|_| {}),
        Err(VerifyError::Malformed(ProofError::CheckpointCount { .. }))
    ));
}

#[test]
fn binary_round_trip_and_golden_layout() {
    let p = small_proof();
    let bytes = p.to_bytes().unwrap();
    assert_eq!(Proof::from_bytes(&bytes).unwrap(), p);
    // The layout of the module doc, written out by hand.
    let mut want = Vec::new();
    want.extend_from_slice(b"PKVDF256");
    want.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
    want.extend_from_slice(&1000u64.to_le_bytes());
    want.extend_from_slice(&64u64.to_le_bytes());
    want.extend_from_slice(&16u64.to_le_bytes());
    want.extend_from_slice(&p.start);
    want.extend_from_slice(&[0x11; 32]);
    want.extend_from_slice(&[0x22; 32]);
    for c in &p.checkpoints {
        want.extend_from_slice(c);
    }
    let sum: [u8; 32] = sha2::Sha256::digest(&want).into();
    want.extend_from_slice(&sum);
    assert_eq!(bytes, want);
    assert_eq!(&bytes[..8], &MAGIC);
    assert_eq!(HEADER_LEN, 72);
}

#[test]
fn json_round_trip() {
    let p = small_proof();
    let j = p.to_json();
    assert_eq!(j["output_hex"].as_str().unwrap(), hex::encode(p.output()));
    assert_eq!(Proof::from_json(&j.to_string()).unwrap(), p);
    let mut bad = j.clone();
    bad["checkpoints_hex"][3] = serde_json::Value::String("abcd".into());
    assert!(matches!(
        Proof::from_json(&bad.to_string()),
        Err(ProofError::Json(_))
    ));
    let mut bad = j.clone();
    bad["segment"] = serde_json::json!(50);
    assert!(matches!(
        Proof::from_json(&bad.to_string()),
        Err(ProofError::CheckpointCount { .. })
    ));
    assert!(matches!(Proof::from_json("{"), Err(ProofError::Json(_))));
}

#[test]
fn every_truncation_and_every_flipped_byte_is_an_error() {
    let bytes = small_proof().to_bytes().unwrap();
    for len in 0..bytes.len() {
        let e = Proof::from_bytes(&bytes[..len]).unwrap_err();
        assert!(
            matches!(
                e,
                ProofError::TooShort { .. } | ProofError::Truncated { .. } | ProofError::BadMagic
            ),
            "len {len}: {e}"
        );
    }
    for pos in 0..bytes.len() {
        let mut b = bytes.clone();
        b[pos] ^= 0x08;
        assert!(
            Proof::from_bytes(&b).is_err(),
            "flipped byte {pos} accepted"
        );
    }
    let mut b = bytes.clone();
    b.push(0);
    assert_eq!(
        Proof::from_bytes(&b).unwrap_err(),
        ProofError::TrailingBytes {
            expected: bytes.len() as u64,
            extra: 1
        }
    );
    let mut b = bytes.clone();
    b[8] = 2;
    assert_eq!(
        Proof::from_bytes(&b).unwrap_err(),
        ProofError::UnsupportedVersion(2)
    );
    let mut b = bytes.clone();
    b[40] ^= 1; // the start: only the checksum can notice
    assert_eq!(Proof::from_bytes(&b).unwrap_err(), ProofError::Checksum);
}

#[test]
fn huge_counts_do_not_overflow() {
    assert_eq!(checkpoint_count(u64::MAX, u64::MAX), Ok(1));
    assert_eq!(checkpoint_count(u64::MAX, 1 << 40), Ok(1 << 24));
    assert!(matches!(
        checkpoint_count(u64::MAX, 1),
        Err(ProofError::TooManyCheckpoints { .. })
    ));
    assert_eq!(checkpoint_count(MAX_CHECKPOINTS, 1), Ok(MAX_CHECKPOINTS));
    assert_eq!(checkpoint_count(0, 5), Err(ProofError::ZeroIterations));
    assert_eq!(checkpoint_count(5, 0), Err(ProofError::ZeroSegment));
    let p = Proof {
        start: [0; 32],
        infusions: vec![],
        iterations: u64::MAX,
        segment: u64::MAX / 2,
        checkpoints: vec![[0; 32]; 3],
    };
    assert_eq!(p.segment_len(2), 1);
    assert_eq!(p.segment_len(u64::MAX), 0);
    // A header declaring a huge proof in a short file: an error, no allocation, no panic.
    let mut b = small_proof().to_bytes().unwrap();
    b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    b[24..32].copy_from_slice(&(1u64 << 40).to_le_bytes());
    b[32..40].copy_from_slice(&(1u64 << 24).to_le_bytes());
    assert!(matches!(
        Proof::from_bytes(&b),
        Err(ProofError::Truncated { .. })
    ));
    b[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        Proof::from_bytes(&b),
        Err(ProofError::Truncated { .. })
    ));
    assert!(matches!(
        prove(&[0; 32], &[], u64::MAX, 1, &mut |_| {}),
        Err(VdfError::Proof(ProofError::TooManyCheckpoints {
            count: u64::MAX
        }))
    ));
    assert_eq!(
        prove(&[0; 32], &[], 10, 0, &mut |_| {}),
        Err(VdfError::Proof(ProofError::ZeroSegment))
    );
}

#[test]
fn single_segment_and_exact_multiple() {
    for (n, s) in [(1u64, 1u64), (5, 100), (128, 64), (129, 64)] {
        let p = prove(&[3; 32], &[], n, s, &mut |_| {}).unwrap();
        assert_eq!(p.checkpoints.len() as u64, n.div_ceil(s));
        assert_eq!(p.output(), sha2_chain([3; 32], n));
        for tok in available() {
            verify_with(&p, 2, tok, &|_| {}).unwrap();
        }
    }
    assert!(Kernel::Portable1.token().is_some());
}
