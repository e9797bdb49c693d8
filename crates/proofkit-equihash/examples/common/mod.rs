//! Shared by the timing examples.

/// The bench's header for seed `HEADER_SEED` (default 0: all zeros), as `proofkit equihash
/// bench --seed S` builds it.
pub fn bench_header() -> Vec<u8> {
    let mut header = vec![0u8; 108];
    let seed: u64 = std::env::var("HEADER_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    header[..8].copy_from_slice(&seed.to_le_bytes());
    header
}
