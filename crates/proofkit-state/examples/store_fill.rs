//! Fills a page store with the Paprika key pattern (an account and one slot per key) and prints
//! the page tree's shape as it grows: a tool to study space use.
use proofkit_state::keccak256;
use proofkit_state::store::{CommitLevel, Op, Store};

fn main() {
    let batches: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3000);
    let mut s = Store::open_reserving(None, 8 << 30).unwrap();
    for b in 0..batches {
        let mut ops = Vec::new();
        for i in 0..1000u64 {
            let h = keccak256(&[b.to_le_bytes(), i.to_le_bytes()].concat());
            ops.push(Op::Put(h.to_vec(), vec![1, 0, 2, 1, 2, 0]));
            let mut k = h.to_vec();
            k.extend_from_slice(&keccak256(&[0u8; 32]));
            ops.push(Op::Put(k, vec![1, 2, 3]));
        }
        s.apply(ops).unwrap();
        let st = s.commit(b, [0; 32], CommitLevel::None).unwrap();
        if (b + 1) % 250 == 0 {
            let r = s.check().unwrap();
            println!(
                "batch {} space {:.3} GB new {} reused {} | branch {} leaf {} free {} entries {} ({:.1}/leaf)",
                b + 1,
                s.space_used() as f64 / 1e9,
                st.new_pages,
                st.reused_pages,
                r.branch_pages,
                r.leaf_pages,
                r.free_pages,
                r.entries,
                r.entries as f64 / r.leaf_pages as f64
            );
        }
    }
}
