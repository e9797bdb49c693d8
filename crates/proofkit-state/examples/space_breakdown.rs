//! Where the bytes of a state store go: `cargo run --release -p proofkit-state --example
//! space_breakdown -- DIR` prints the page tree's shape and the entries by kind (accounts,
//! slots, account-trie and storage-trie records), with their key, value and header bytes.
use proofkit_state::store::Store;

fn main() {
    let dir = std::env::args().nth(1).expect("usage: space_breakdown DIR");
    let s = Store::open(Some(std::path::Path::new(&dir))).expect("opening the store");
    // By key length: 32 account, 33 account-trie record, 64 slot, 65 storage-trie record.
    let mut by_len: std::collections::BTreeMap<usize, (u64, u64, u64)> = Default::default();
    s.for_each(|k, v| {
        let e = by_len.entry(k.len()).or_default();
        e.0 += 1;
        e.1 += k.len() as u64;
        e.2 += v.len() as u64;
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
    let mut total = 0;
    for (len, (n, kb, vb)) in &by_len {
        let bytes = kb + vb + 3 * n;
        total += bytes;
        println!(
            "key {len:>2} bytes: {n:>10} entries, keys {:.3} GB, values {:.3} GB ({:.1} per entry), with headers {:.3} GB",
            *kb as f64 / 1e9,
            *vb as f64 / 1e9,
            *vb as f64 / (*n).max(1) as f64,
            bytes as f64 / 1e9
        );
    }
    println!(
        "entries {:.3} GB in {:.3} GB of leaf pages: leaves {:.0}% full",
        total as f64 / 1e9,
        (r.leaf_pages * page) as f64 / 1e9,
        100.0 * total as f64 / (r.leaf_pages * page - 8 * r.leaf_pages) as f64
    );
}
