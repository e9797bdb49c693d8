//! The Merkle-Patricia root (Yellow Paper appendix D) of leaves given in ascending key order,
//! in memory bounded by the trie's depth: a stack of the branches still open on the path of
//! the last key. A branch is complete once a key outside its prefix arrives; it is then
//! encoded, handed to the caller with its store record (the same bytes [`Trie::take_dirty`]
//! yields for it), and folded into its parent as a reference.
//!
//! `Db::check` streams the store's records through one builder for the account trie and one
//! per account for its storage, comparing every record as it completes, so that checking a
//! store of 50M accounts needs no trie in memory.
//!
//! [`Trie::take_dirty`]: crate::trie::Trie::take_dirty
#![deny(unsafe_code)]

use crate::keccak::{keccak256, B256, EMPTY_ROOT};
use crate::trie::{
    common_prefix, encode_branch, encode_extension, encode_leaf, encode_record, nibbles,
    ChildEntry, NodeRef,
};

/// A key that is not above the one before it, or (under [`HashBuilder::below`]) that leaves
/// the subtree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutOfOrder;

/// A branch whose children are not all known yet.
struct OpenBranch {
    /// Nibble depth: the branch's path is the first `depth` nibbles of the keys below it.
    depth: usize,
    /// The nibbles of a key below it (the first `depth` of them are the branch's path).
    key: [u8; 64],
    entries: [Option<ChildEntry>; 16],
    refs: [Option<NodeRef>; 16],
}

/// Builds a trie's root from leaves in ascending key order; see the module doc.
pub struct HashBuilder {
    /// The nibbles every key shares (0 for a whole trie): the top is referred to from there.
    shared: usize,
    open: Vec<OpenBranch>,
    /// The last key and its leaf bytes: where its leaf hangs depends on the next key.
    last: Option<([u8; 64], Vec<u8>)>,
    rlp: Vec<u8>,
}

impl Default for HashBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// The top of a finished trie (or subtree): its entry as the store records it, its reference
/// (`None` when empty) and its hash (the empty-trie root when empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root {
    pub entry: Option<ChildEntry>,
    pub reference: Option<NodeRef>,
    pub hash: B256,
}

impl Root {
    /// The entry and reference of a non-empty top, as its parent branch holds them.
    pub fn top(&self) -> Option<(ChildEntry, NodeRef)> {
        Some((self.entry.clone()?, self.reference?))
    }
}

impl HashBuilder {
    pub fn new() -> Self {
        Self::below(0)
    }

    /// A builder for the subtree under the first `shared` nibbles, which every key added must
    /// share: [`HashBuilder::finish`] then returns the subtree's top as its parent branch (at
    /// nibble `shared - 1`) refers to it, so that subtrees built apart (on other threads) can
    /// be joined in one branch. `Root::hash` is then the top node's hash.
    pub fn below(shared: usize) -> Self {
        HashBuilder {
            shared,
            open: Vec::new(),
            last: None,
            rlp: Vec::with_capacity(600),
        }
    }

    /// The nibbles every key shares (see [`HashBuilder::below`]).
    pub fn shared(&self) -> usize {
        self.shared
    }

    /// Adds the leaf of `key` carrying `value` (the leaf's bytes: RLP for an account, the
    /// RLP string of the trimmed value for a storage slot). `on_branch(path, record)` is
    /// called for every branch this key completes; its error stops the build.
    pub fn add<E: From<OutOfOrder>>(
        &mut self,
        key: &B256,
        value: Vec<u8>,
        on_branch: &mut impl FnMut(&[u8], Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let key = nibbles(key);
        if let Some((last, last_value)) = self.last.take() {
            if key <= last {
                self.last = Some((last, last_value));
                return Err(OutOfOrder.into());
            }
            let common = common_prefix(&last, &key);
            if common < self.shared {
                self.last = Some((last, last_value));
                return Err(OutOfOrder.into());
            }
            let top = self.open.last().map(|b| b.depth);
            if top.is_none_or(|d| d < common) {
                self.open.push(OpenBranch::new(common, last));
            }
            self.hang_leaf(&last, &last_value);
            self.close_deeper_than(Some(common), on_branch)?;
        }
        self.last = Some((key, value));
        Ok(())
    }

    /// Completes every open branch and returns the root.
    pub fn finish<E>(
        mut self,
        on_branch: &mut impl FnMut(&[u8], Vec<u8>) -> Result<(), E>,
    ) -> Result<Root, E> {
        let Some((last, last_value)) = self.last.take() else {
            return Ok(Root {
                entry: None,
                reference: None,
                hash: EMPTY_ROOT,
            });
        };
        if self.open.is_empty() {
            // One leaf: the top is that leaf, its path the rest of the key.
            let r = self.leaf_ref(&last, self.shared, &last_value);
            return Ok(Root {
                entry: Some(ChildEntry::Leaf(r)),
                reference: Some(r),
                hash: root_hash(&r),
            });
        }
        self.hang_leaf(&last, &last_value);
        let (entry, r) = self
            .close_deeper_than(None, on_branch)?
            .expect("closing every branch reaches the top");
        Ok(Root {
            entry: Some(entry),
            reference: Some(r),
            hash: root_hash(&r),
        })
    }
}

impl OpenBranch {
    fn new(depth: usize, key: [u8; 64]) -> Self {
        OpenBranch {
            depth,
            key,
            entries: Default::default(),
            refs: [None; 16],
        }
    }
}

impl HashBuilder {
    /// The reference of the leaf of `key` whose path starts at nibble `from`.
    fn leaf_ref(&mut self, key: &[u8; 64], from: usize, value: &[u8]) -> NodeRef {
        self.rlp.clear();
        encode_leaf(&key[from..], value, &mut self.rlp);
        NodeRef::from_rlp(&self.rlp)
    }

    /// Hangs the leaf of `key` in the deepest open branch.
    fn hang_leaf(&mut self, key: &[u8; 64], value: &[u8]) {
        let depth = self.open.last().expect("an open branch").depth;
        let r = self.leaf_ref(key, depth + 1, value);
        let slot = key[depth] as usize;
        let b = self.open.last_mut().expect("an open branch");
        b.entries[slot] = Some(ChildEntry::Leaf(r));
        b.refs[slot] = Some(r);
    }

    /// Closes the open branches deeper than `depth` (all of them for `None`), each hung in its
    /// parent: the next open branch, or a new one at `depth` when the next is shallower (the
    /// next key leaves the closed branch's prefix at nibble `depth`). Closing all returns the
    /// top of the trie (its entry and reference).
    fn close_deeper_than<E>(
        &mut self,
        depth: Option<usize>,
        on_branch: &mut impl FnMut(&[u8], Vec<u8>) -> Result<(), E>,
    ) -> Result<Option<(ChildEntry, NodeRef)>, E> {
        while let Some(b) = self.open.pop_if(|b| depth.is_none_or(|d| b.depth > d)) {
            on_branch(&b.key[..b.depth], encode_record(&b.entries))?;
            self.rlp.clear();
            encode_branch(&b.refs, &mut self.rlp);
            let branch = NodeRef::from_rlp(&self.rlp);
            let parent = match (self.open.last().map(|p| p.depth), depth) {
                (Some(p), Some(d)) if p >= d => p,
                (_, Some(d)) => {
                    self.open.push(OpenBranch::new(d, b.key));
                    d
                }
                (Some(p), None) => p,
                (None, None) => {
                    let shared = self.shared;
                    return Ok(Some(self.reference(&b.key, shared, b.depth, branch)));
                }
            };
            let (entry, r) = self.reference(&b.key, parent + 1, b.depth, branch);
            let slot = b.key[parent] as usize;
            let p = self
                .open
                .last_mut()
                .expect("the parent was found or opened");
            p.entries[slot] = Some(entry);
            p.refs[slot] = Some(r);
        }
        Ok(None)
    }

    /// How a parent refers to the branch at nibble `depth` (reference `branch`) from nibble
    /// `from` on: directly, or through an extension over the nibbles in between.
    fn reference(
        &mut self,
        key: &[u8; 64],
        from: usize,
        depth: usize,
        branch: NodeRef,
    ) -> (ChildEntry, NodeRef) {
        if from == depth {
            return (ChildEntry::Branch(branch), branch);
        }
        let path = &key[from..depth];
        self.rlp.clear();
        encode_extension(path, &branch, &mut self.rlp);
        (
            ChildEntry::Extension(path.into(), branch),
            NodeRef::from_rlp(&self.rlp),
        )
    }
}

/// The root hash of a trie whose top node has reference `r` (hashed even when short).
pub fn root_hash(r: &NodeRef) -> B256 {
    if r.is_hash() {
        r.bytes().try_into().expect("a hash reference is 32 bytes")
    } else {
        keccak256(r.bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trie::{NoLoader, Trie, TrieValue};
    use rand::{Rng, SeedableRng};
    use std::collections::BTreeMap;

    #[derive(Clone)]
    struct Raw(Vec<u8>);
    impl TrieValue for Raw {
        fn leaf_bytes(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.0);
        }
    }

    type Records = BTreeMap<Vec<u8>, Vec<u8>>;

    fn build(leaves: &BTreeMap<B256, Vec<u8>>) -> (Root, Records) {
        let mut records = Records::new();
        let mut on_branch = |path: &[u8], rec: Vec<u8>| -> Result<(), OutOfOrder> {
            assert!(
                records.insert(path.to_vec(), rec).is_none(),
                "one record per branch"
            );
            Ok(())
        };
        let mut b = HashBuilder::new();
        for (k, v) in leaves {
            b.add(k, v.clone(), &mut on_branch).unwrap();
        }
        (b.finish(&mut on_branch).unwrap(), records)
    }

    /// The root entry and hash of the `Trie` of `leaves`, and its records.
    fn trie_of(leaves: &BTreeMap<B256, Vec<u8>>) -> ((Option<ChildEntry>, B256), Records) {
        let mut t = Trie::new();
        for (k, v) in leaves {
            t.insert(&nibbles(k), Raw(v.clone()), &NoLoader).unwrap();
        }
        let hash = t.root_hash();
        let mut records = Records::new();
        t.take_dirty(|pos, rec| {
            records.insert(pos.to_vec(), rec.to_vec());
        });
        ((t.root_entry(), hash), records)
    }

    /// Keys drawn from few nibble values with shared runs, so that extensions, embedded
    /// (short) nodes and deep branches all occur; values of 1 to 40 bytes.
    fn random_leaves(rng: &mut impl Rng, n: usize) -> BTreeMap<B256, Vec<u8>> {
        let base: B256 = rng.gen();
        let mut out = BTreeMap::new();
        for _ in 0..n {
            let mut k = base;
            // Differ from the base from a random nibble on, over a narrow alphabet.
            let from = rng.gen_range(0..64usize);
            for i in from..64 {
                let nib = rng.gen_range(0..3u8);
                k[i / 2] = if i % 2 == 0 {
                    (k[i / 2] & 0x0f) | nib << 4
                } else {
                    (k[i / 2] & 0xf0) | nib
                };
            }
            let len = rng.gen_range(1..=40usize);
            out.insert(k, (0..len).map(|_| rng.gen()).collect());
        }
        out
    }

    #[test]
    fn equals_the_trie_root_and_records() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for case in 0..400 {
            let n = [0, 1, 2, 3, 5, 17, 100][case % 7];
            let leaves = if case % 3 == 0 {
                (0..n)
                    .map(|i| (keccak256(&[case as u8, i as u8]), vec![i as u8 + 1]))
                    .collect()
            } else {
                random_leaves(&mut rng, n)
            };
            let (root, records) = build(&leaves);
            let (want_root, want_records) = trie_of(&leaves);
            assert_eq!((root.entry, root.hash), want_root, "case {case}");
            assert_eq!(records, want_records, "case {case}");
        }
    }

    #[test]
    fn subtrees_built_apart_join_into_the_root() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(8);
        let mut joined = 0;
        for case in 0..100 {
            let leaves = if case % 2 == 0 {
                random_leaves(&mut rng, 1 + case % 40)
            } else {
                (0..case)
                    .map(|i| (keccak256(&[i as u8, 1]), vec![i as u8]))
                    .collect()
            };
            let (want_root, want_records) = trie_of(&leaves);
            // One builder per first nibble, joined in a branch at the top.
            let mut records = Records::new();
            let mut tops: [Option<(ChildEntry, NodeRef)>; 16] = Default::default();
            for (n, top) in tops.iter_mut().enumerate() {
                let mut on_branch = |path: &[u8], rec: Vec<u8>| -> Result<(), OutOfOrder> {
                    records.insert(path.to_vec(), rec);
                    Ok(())
                };
                let mut b = HashBuilder::below(1);
                for (k, v) in leaves.iter().filter(|(k, _)| k[0] >> 4 == n as u8) {
                    b.add(k, v.clone(), &mut on_branch).unwrap();
                }
                *top = b.finish(&mut on_branch).unwrap().top();
            }
            if tops.iter().filter(|t| t.is_some()).count() < 2 {
                continue; // the top of the trie is not a branch at nibble 0
            }
            let entries: [Option<ChildEntry>; 16] =
                std::array::from_fn(|i| tops[i].as_ref().map(|t| t.0.clone()));
            let refs: [Option<NodeRef>; 16] =
                std::array::from_fn(|i| tops[i].as_ref().map(|t| t.1));
            records.insert(vec![], encode_record(&entries));
            let mut rlp = Vec::new();
            encode_branch(&refs, &mut rlp);
            let r = NodeRef::from_rlp(&rlp);
            assert_eq!(
                (Some(ChildEntry::Branch(r)), root_hash(&r)),
                want_root,
                "case {case}"
            );
            assert_eq!(records, want_records, "case {case}");
            joined += 1;
        }
        assert!(joined >= 40, "{joined} tries joined");
    }

    #[test]
    fn a_key_outside_the_subtree_is_an_error() {
        let mut b = HashBuilder::below(2);
        let mut ok = |_: &[u8], _: Vec<u8>| -> Result<(), OutOfOrder> { Ok(()) };
        b.add(&[0x12; 32], vec![1], &mut ok).unwrap();
        assert_eq!(b.add(&[0x13; 32], vec![1], &mut ok), Err(OutOfOrder));
        b.add(&[0x14; 32], vec![1], &mut ok).unwrap_err();
        let mut k = [0x12; 32];
        k[31] = 0x13;
        b.add(&k, vec![1], &mut ok).unwrap();
    }

    #[test]
    fn the_empty_trie() {
        let (root, records) = build(&BTreeMap::new());
        assert_eq!(root.hash, EMPTY_ROOT);
        assert_eq!(root.entry, None);
        assert!(records.is_empty());
    }

    #[test]
    fn a_key_not_above_the_last_is_an_error() {
        let mut b = HashBuilder::new();
        let mut ok = |_: &[u8], _: Vec<u8>| -> Result<(), OutOfOrder> { Ok(()) };
        b.add(&[2; 32], vec![1], &mut ok).unwrap();
        assert_eq!(b.add(&[2; 32], vec![1], &mut ok), Err(OutOfOrder));
        assert_eq!(b.add(&[1; 32], vec![1], &mut ok), Err(OutOfOrder));
        b.add(&[3; 32], vec![1], &mut ok).unwrap();
        let (want, _) = trie_of(&[([2; 32], vec![1]), ([3; 32], vec![1])].into());
        let root = b.finish(&mut ok).unwrap();
        assert_eq!((root.entry, root.hash), want);
    }

    #[test]
    fn an_error_from_the_callback_stops_the_build() {
        let mut b = HashBuilder::new();
        let mut calls = 0;
        let mut refuse = |_: &[u8], _: Vec<u8>| -> Result<(), OutOfOrder> {
            calls += 1;
            Err(OutOfOrder)
        };
        b.add(&[1; 32], vec![1], &mut refuse).unwrap();
        b.add(&[2; 32], vec![1], &mut refuse).unwrap();
        assert_eq!(b.finish(&mut refuse), Err(OutOfOrder));
        assert_eq!(calls, 1);
    }
}
