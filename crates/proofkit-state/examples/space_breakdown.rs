//! Where the bytes of a state store go: `cargo run --release -p proofkit-state --example
//! space_breakdown -- DIR` prints the page tree's shape and the entries by kind (accounts,
//! slots, account-trie and storage-trie records), with their key and value bytes, the key bytes
//! a leaf stores (after the prefix shared with the key before it, a zero run as its count; a
//! leaf's first key, stored in full, is counted as shared with the previous leaf's last here),
//! and the encoded bytes in the leaf pages (from `check`).
use proofkit_state::store::Store;

fn main() {
    let dir = std::env::args().nth(1).expect("usage: space_breakdown DIR");
    let s = Store::open(Some(std::path::Path::new(&dir))).expect("opening the store");
    // By key length: 32 account, 33 account-trie record, 64 slot, 65 storage-trie record.
    let mut by_len: std::collections::BTreeMap<usize, (u64, u64, u64, u64)> = Default::default();
    let mut prev: Vec<u8> = Vec::new();
    s.for_each(|k, v| {
        let shared = prev.iter().zip(k).take_while(|(a, b)| a == b).count();
        let e = by_len.entry(k.len()).or_default();
        e.0 += 1;
        e.1 += k.len() as u64;
        e.2 += v.len() as u64;
        // The suffix past the shared bytes, a run of zeros before its last byte as one count
        // byte (the leaf encoding's rule).
        let suffix = &k[shared..];
        let zeros = match suffix.split_last() {
            Some((_, body)) if suffix.len() >= 3 => {
                body.iter().rev().take_while(|&&b| b == 0).count()
            }
            _ => 0,
        };
        e.3 += if zeros >= 2 {
            suffix.len() - zeros + 1
        } else {
            suffix.len()
        } as u64;
        prev.clear();
        prev.extend_from_slice(k);
    })
    .expect("walking the store");
    let r = s.check().expect("checking the store");
    let page = proofkit_state::store::PAGE as u64;
    println!(
        "space {:.3} GB: {} pages, {} branch, {} leaf, {} free; {} entries ({:.1} per leaf)",
        s.space_used() as f64 / 1e9,
        r.page_count,
        r.branch_pages,
        r.leaf_pages,
        r.free_pages,
        r.entries,
        r.entries as f64 / r.leaf_pages.max(1) as f64
    );
    let mut entries = 0;
    for (len, (n, kb, vb, stored)) in &by_len {
        entries += n;
        println!(
            "key {len:>2} bytes: {n:>10} entries, keys {:.3} GB ({:.1} bytes of each stored), values {:.3} GB ({:.1} per entry)",
            *kb as f64 / 1e9,
            *stored as f64 / (*n).max(1) as f64,
            *vb as f64 / 1e9,
            *vb as f64 / (*n).max(1) as f64,
        );
    }
    let accounts = by_len.get(&32).map_or(0, |e| e.0);
    println!(
        "entries {:.3} GB encoded ({:.1} bytes per entry, {:.1} per account) in {:.3} GB of leaf pages: leaves {:.0}% full",
        r.leaf_bytes as f64 / 1e9,
        r.leaf_bytes as f64 / entries.max(1) as f64,
        r.leaf_bytes as f64 / accounts.max(1) as f64,
        (r.leaf_pages * page) as f64 / 1e9,
        100.0 * r.leaf_bytes as f64 / (r.leaf_pages * page - 8 * r.leaf_pages) as f64
    );
}
