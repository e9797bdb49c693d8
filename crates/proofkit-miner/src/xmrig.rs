//! xmrig's `--bench` hash sums, so that users can compare with xmrig's published table.
//!
//! Key: 32 zero bytes. Input: a 112-byte zero blob with the nonce (u32, little-endian) at offset
//! 39; nonces `0..n`. The sum is the XOR over all hashes of the little-endian u64 in hash bytes
//! 24..31.
//!
//! The one-thread variant chains the inputs: before hashing nonce k, blob bytes 0..7 are set to
//! `B_k` (little-endian), where `B_0 = B_1 = 0` and `B_{k+1} = B_k ^ D_{k-1}`, `D_j` being the
//! running XOR of the values of nonces `0..=j`. `B_{k+1}` needs only results up to nonce k-1,
//! so one hash can be in flight (the batch API) while the next input is prepared.

use crate::target::hash_value64;
use crate::Error;
use proofkit_randomx::{DatasetSource, Vm, VmOptions};

/// Bytes in the benchmark blob.
pub const BLOB_LEN: usize = 112;
/// Nonce offset in the benchmark blob.
pub const NONCE_OFFSET: usize = 39;
/// The benchmark key.
pub const KEY: [u8; 32] = [0; 32];

/// xmrig's published rx/0 sums: (nonces, one-thread variant, sum).
pub const PUBLISHED: [(u64, bool, u64); 2] = [
    (1_000_000, false, 0x898B_6E04_31C2_8A6B),
    (1_000_000, true, 0x3DF4_7B0A_427C_93D9),
];

/// The published sum for `n` nonces of a variant, where xmrig gives one.
pub fn published(n: u64, one_thread: bool) -> Option<u64> {
    PUBLISHED
        .iter()
        .find(|p| p.0 == n && p.1 == one_thread)
        .map(|p| p.2)
}

/// Parses a nonce count: `1M`, `250K`, `10M` or a plain number.
pub fn parse_count(s: &str) -> Result<u64, Error> {
    let t = s.trim();
    let (num, mul) = match t.chars().last() {
        Some('M' | 'm') => (&t[..t.len() - 1], 1_000_000),
        Some('K' | 'k') => (&t[..t.len() - 1], 1_000),
        _ => (t, 1),
    };
    let v: u64 = num
        .parse()
        .map_err(|_| Error::Config(format!("{s:?}: expected 1M, 250K or a number of hashes")))?;
    v.checked_mul(mul)
        .filter(|&v| v > 0 && v <= 1 << 32)
        .ok_or_else(|| Error::Config(format!("{s:?}: between 1 and 2^32 hashes")))
}

fn blob(nonce: u32, prefix: u64) -> [u8; BLOB_LEN] {
    let mut b = [0u8; BLOB_LEN];
    b[..8].copy_from_slice(&prefix.to_le_bytes());
    b[NONCE_OFFSET..NONCE_OFFSET + 4].copy_from_slice(&nonce.to_le_bytes());
    b
}

/// The multi-thread sum over nonces `0..n` on `threads` threads (the result does not depend on
/// the thread count). `source` must be keyed with [`KEY`]. `progress` gets the hashes done.
pub fn sum(
    source: &DatasetSource,
    opts: VmOptions,
    n: u64,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<u64, Error> {
    use std::sync::atomic::{AtomicU64, Ordering};
    let threads = threads.max(1) as u64;
    let done = AtomicU64::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (source, done) = (source.clone(), &done);
                s.spawn(move || -> Result<u64, Error> {
                    let mut vm = Vm::new(source, opts)?;
                    // Thread t takes nonces t, t + threads, ...
                    let mut nonce = t;
                    if nonce >= n {
                        return Ok(0);
                    }
                    let mut acc = 0u64;
                    vm.hash_first(&blob(nonce as u32, 0));
                    loop {
                        let next = nonce + threads;
                        let h = if next < n {
                            vm.hash_next(&blob(next as u32, 0))?
                        } else {
                            vm.hash_last()?
                        };
                        acc ^= hash_value64(&h);
                        let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                        if t == 0 && d % 64 == 0 {
                            progress(d);
                        }
                        if next >= n {
                            return Ok(acc);
                        }
                        nonce = next;
                    }
                })
            })
            .collect();
        handles.into_iter().try_fold(0u64, |acc, h| {
            Ok(acc ^ h.join().expect("bench thread panicked")?)
        })
    })
}

/// The one-thread (chained) sum over nonces `0..n`.
pub fn sum_one_thread(
    source: &DatasetSource,
    opts: VmOptions,
    n: u64,
    progress: &dyn Fn(u64),
) -> Result<u64, Error> {
    let mut vm = Vm::new(source.clone(), opts)?;
    let mut b_cur = 0u64; // B_k, the prefix of the nonce being finished
    let mut running = 0u64; // D of the last finished nonce
    let mut d_before = 0u64; // D_{k-1} while nonce k is being finished
    vm.hash_first(&blob(0, 0));
    for k in 0..n {
        // hash_next returns nonce k and starts nonce k+1, whose prefix B_{k+1} = B_k ^ D_{k-1}
        // uses results up to nonce k-1 only.
        let next = k + 1;
        let h = if next < n {
            let b_next = if next < 2 { 0 } else { b_cur ^ d_before };
            b_cur = b_next;
            vm.hash_next(&blob(next as u32, b_next))?
        } else {
            vm.hash_last()?
        };
        running ^= hash_value64(&h);
        d_before = running;
        if k % 64 == 63 {
            progress(k + 1);
        }
    }
    Ok(running)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!(parse_count("1M").unwrap(), 1_000_000);
        assert_eq!(parse_count("250K").unwrap(), 250_000);
        assert_eq!(parse_count("17").unwrap(), 17);
        for bad in ["", "0", "M", "-1", "1G", "99999999999"] {
            assert!(parse_count(bad).is_err(), "{bad:?}");
        }
        assert_eq!(published(1_000_000, true), Some(0x3DF47B0A427C93D9));
        assert_eq!(published(250_000, true), None);
    }
}
