//! xmrig's benchmark sums on a few nonces, against the same sums computed here from the
//! definition with the reference librandomx (dlopen) as the hash.

use proofkit_miner::xmrig::{sum, sum_one_thread, BLOB_LEN, KEY, NONCE_OFFSET};
use proofkit_randomx::{Cache, DatasetSource, PagePolicy, VmOptions};
use std::sync::Arc;

fn value(h: &[u8; 32]) -> u64 {
    u64::from_le_bytes(h[24..32].try_into().unwrap())
}

fn input(nonce: u32, prefix: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOB_LEN];
    b[..8].copy_from_slice(&prefix.to_le_bytes());
    b[NONCE_OFFSET..NONCE_OFFSET + 4].copy_from_slice(&nonce.to_le_bytes());
    b
}

#[test]
fn sums_match_the_definition_computed_with_the_reference() {
    let Ok(lib) = proofkit_randomx::peer::LibRandomx::load() else {
        eprintln!("skipped: the system librandomx is not installed (apt-get install librandomx0)");
        return;
    };
    let flags = lib.recommended_flags();
    let cache = lib.cache(flags, &KEY).unwrap();
    let mut vm = lib.vm(flags, Some(&cache), None).unwrap();
    const N: u64 = 13;
    // Multi-thread variant: plain XOR.
    let want_multi = (0..N as u32).fold(0, |acc, n| acc ^ value(&vm.hash(&input(n, 0))));
    // One-thread variant, straight from the definition: B_0 = B_1 = 0,
    // B_{k+1} = B_k ^ D_{k-1}, D_j = XOR of the values of nonces 0..=j.
    let mut b = vec![0u64; N as usize];
    let mut d = vec![0u64; N as usize];
    for k in 0..N as usize {
        if k >= 2 {
            b[k] = b[k - 1] ^ d[k - 2];
        }
        let v = value(&vm.hash(&input(k as u32, b[k])));
        d[k] = if k == 0 { v } else { d[k - 1] ^ v };
    }
    let want_one = d[N as usize - 1];
    assert_ne!(want_one, want_multi, "the prefixes change the sum");

    let ours = DatasetSource::Light(Arc::new(Cache::new(&KEY, PagePolicy::Transparent).unwrap()));
    let opts = VmOptions::default();
    for threads in [1, 2, 3] {
        assert_eq!(
            sum(&ours, opts, N, threads, &|_| {}).unwrap(),
            want_multi,
            "{threads} threads"
        );
    }
    assert_eq!(sum_one_thread(&ours, opts, N, &|_| {}).unwrap(), want_one);
    // Degenerate counts.
    assert_eq!(
        sum(&ours, opts, 1, 4, &|_| {}).unwrap(),
        value(&vm.hash(&input(0, 0)))
    );
    assert_eq!(sum_one_thread(&ours, opts, 2, &|_| {}).unwrap(), {
        value(&vm.hash(&input(0, 0))) ^ value(&vm.hash(&input(1, 0)))
    });
}
