//! A small, readable reference solver (the shape of zcashd's `BasicSolve`): rows carry their
//! full XOR-ed string and their whole index list; every pair of rows equal on the next digit
//! with disjoint indices is merged (smaller first index on the left). It is the oracle for the
//! fast solver on small parameters; it is slow and memory-hungry on large ones.
#![deny(unsafe_code)]

use crate::hash::{to_words, HashGen};
use crate::verify::bits_at;

struct Row {
    hash: Vec<u32>,
    idx: Vec<u32>,
}

/// Every solution of the hash generator's instance, sorted.
pub fn solve(gen: &HashGen) -> Vec<Vec<u32>> {
    trees(gen, true)
}

/// Every tree with distinct indices whose strings collide on digits `0..k` (and, when
/// `last_digit`, on digit `k` too, i.e. every solution), sorted.
pub fn trees(gen: &HashGen, last_digit: bool) -> Vec<Vec<u32>> {
    let p = gen.params();
    let words = (p.n() as usize).div_ceil(32);
    let c = p.collision_bits();
    let mut rows: Vec<Row> = (0..p.num_indices() as u32)
        .map(|i| {
            let mut hash = vec![0u32; words];
            to_words(&gen.string(i), &mut hash);
            Row { hash, idx: vec![i] }
        })
        .collect();
    let mut sols = Vec::new();
    for level in 0..p.k() {
        let fin = level == p.k() - 1;
        let key = |r: &Row| {
            let d = bits_at(&r.hash, level * c, c) as u64;
            if fin && last_digit {
                (d << 32) | bits_at(&r.hash, (level + 1) * c, c) as u64
            } else {
                d
            }
        };
        rows.sort_by_key(key);
        let mut next = Vec::new();
        let mut i = 0;
        while i < rows.len() {
            let mut j = i + 1;
            while j < rows.len() && key(&rows[j]) == key(&rows[i]) {
                j += 1;
            }
            for a in i..j {
                for b in a + 1..j {
                    let (x, y) = if rows[a].idx[0] < rows[b].idx[0] {
                        (&rows[a], &rows[b])
                    } else {
                        (&rows[b], &rows[a])
                    };
                    if x.idx.iter().any(|v| y.idx.contains(v)) {
                        continue;
                    }
                    let idx: Vec<u32> = x.idx.iter().chain(&y.idx).copied().collect();
                    if fin {
                        sols.push(idx);
                    } else {
                        let hash = x.hash.iter().zip(&y.hash).map(|(p, q)| p ^ q).collect();
                        next.push(Row { hash, idx });
                    }
                }
            }
            i = j;
        }
        rows = next;
    }
    sols.sort_unstable();
    sols.dedup();
    sols
}
