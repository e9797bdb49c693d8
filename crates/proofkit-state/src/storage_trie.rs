//! An account's storage trie (Yellow Paper appendix D, keyed by keccak256 of the slot), with
//! the common case held inline: a storage of one slot written since the account's leaf was
//! last stored is that slot's leaf, kept in the account's leaf itself ([`OneSlot`]) instead of
//! in a trie cell of its own.
//!
//! Why: in the Paprika workload every new account gets one slot. As a [`Trie`] that slot is a
//! heap cell per account (allocated by the block, walked by the roots' gathering, the records
//! walk and pruning, freed by another thread), each a cold line when next touched. Inline it
//! costs the account leaf's cell one more line and nothing else. A second slot turns it into
//! a [`Trie`]; once its account is in the store it shrinks to its root's reference like any
//! storage trie.
#![deny(unsafe_code)]

use crate::account::StorageValue;
use crate::keccak::{keccak256, keccak256_many, B256};
use crate::state::pack;
use crate::trie::{
    copied_ref, copy_ref, duplicate_copy, nibbles, wrap_leaf_value, ChildEntry, CopyHash, CopyLen,
    LoadError, Loader, Lookup, NoLoader, NodeRef, StoredKind, Threads, Trie, TrieValue,
};

/// The storage trie of an account: a [`Trie`], or its one slot held inline.
#[derive(Clone)]
pub enum StorageTrie {
    Trie(Trie<StorageValue>),
    One(OneSlot),
}

/// A storage trie of one slot written in memory: its hashed slot, its value, and its root's
/// reference once computed, held as a trie slot holds a child's copied reference ([`CopyLen`],
/// [`CopyHash`]: set through shared references, since the roots are hashed on several threads,
/// and marked stored by the records walk, so that pruning may turn it into that reference).
/// The values a write makes are new `OneSlot`s.
pub struct OneSlot {
    root_len: CopyLen,
    root: CopyHash,
    slot: B256,
    value: StorageValue,
}

impl Clone for OneSlot {
    fn clone(&self) -> Self {
        let (root_len, root) = duplicate_copy(&self.root_len, &self.root);
        OneSlot {
            root_len,
            root,
            slot: self.slot,
            value: self.value,
        }
    }
}

impl OneSlot {
    fn new(slot: B256, value: StorageValue) -> Self {
        OneSlot {
            root_len: CopyLen::none(),
            root: CopyHash::none(),
            slot,
            value,
        }
    }

    /// Whether the nibble path `path` is this slot's.
    fn is_at(&self, path: &[u8]) -> bool {
        path.len() == 64 && pack(path) == self.slot
    }

    /// Appends the RLP of the leaf that is the whole trie (the value's bytes straight into
    /// `out`, as the trie encodes a leaf).
    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        self.value.leaf_bytes(out);
        wrap_leaf_value(&nibbles(&self.slot), start, out);
    }

    /// The root hash, if computed (a leaf over 64 nibbles is over 32 bytes: always a hash).
    fn cached_hash(&self) -> Option<B256> {
        copied_ref(&self.root_len, &self.root).map(|r| r.bytes().try_into().expect("a hash"))
    }

    fn set_hash(&self, h: &B256) {
        copy_ref(
            &self.root_len,
            &self.root,
            &NodeRef::from_bytes(h).expect("32 bytes"),
        );
    }

    fn is_stored(&self) -> bool {
        self.root_len.stored_kind().is_some()
    }

    fn root_hash(&self) -> B256 {
        self.cached_hash().unwrap_or_else(|| {
            let mut rlp = Vec::with_capacity(72);
            self.encode(&mut rlp);
            let h = keccak256(&rlp);
            self.set_hash(&h);
            h
        })
    }

    /// The same trie as a [`Trie`] in memory.
    fn to_trie(&self) -> Trie<StorageValue> {
        let mut t = Trie::new();
        t.insert(&nibbles(&self.slot), self.value, &NoLoader)
            .expect("an empty trie in memory loads nothing");
        t
    }
}

impl Default for StorageTrie {
    fn default() -> Self {
        StorageTrie::Trie(Trie::new())
    }
}

impl StorageTrie {
    /// An empty storage.
    pub fn new() -> Self {
        Self::default()
    }

    /// A trie whose root is the stored record entry `e` (`None`: empty).
    pub fn from_entry(e: Option<&ChildEntry>) -> Self {
        StorageTrie::Trie(Trie::from_entry(e))
    }

    pub fn is_empty(&self) -> bool {
        match self {
            StorageTrie::Trie(t) => t.is_empty(),
            StorageTrie::One(_) => false,
        }
    }

    /// How the root would be named in a stored record (`None` when empty).
    pub fn root_entry(&self) -> Option<ChildEntry> {
        match self {
            StorageTrie::Trie(t) => t.root_entry(),
            // A leaf over 64 nibbles is over 32 bytes: always referenced by its hash.
            StorageTrie::One(o) => Some(ChildEntry::Leaf(
                NodeRef::from_bytes(&o.root_hash()).expect("32 bytes"),
            )),
        }
    }

    /// The value at the nibble path `path`, as far as memory holds the trie.
    pub fn lookup(&self, path: &[u8]) -> Lookup<'_, StorageValue> {
        match self {
            StorageTrie::Trie(t) => t.lookup(path),
            StorageTrie::One(o) if o.is_at(path) => Lookup::Found(&o.value),
            StorageTrie::One(_) => Lookup::Absent,
        }
    }

    /// The root hash (the empty-trie root when empty).
    pub fn root_hash(&self) -> B256 {
        match self {
            StorageTrie::Trie(t) => t.root_hash(),
            StorageTrie::One(o) => o.root_hash(),
        }
    }

    /// Sets the slot at `path` (64 nibbles). An empty storage takes it inline; a second slot
    /// makes the storage a [`Trie`].
    pub fn insert(
        &mut self,
        path: &[u8],
        value: StorageValue,
        loader: &dyn Loader<StorageValue>,
    ) -> Result<(), LoadError> {
        match self {
            StorageTrie::Trie(t) if t.is_empty() && path.len() == 64 => {
                *self = StorageTrie::One(OneSlot::new(pack(path), value));
            }
            StorageTrie::Trie(t) => t.insert(path, value, loader)?,
            StorageTrie::One(o) if o.is_at(path) => {
                *self = StorageTrie::One(OneSlot::new(o.slot, value));
            }
            StorageTrie::One(o) => {
                let mut t = o.to_trie();
                t.insert(path, value, loader)?;
                *self = StorageTrie::Trie(t);
            }
        }
        Ok(())
    }

    /// Removes the slot at `path`; returns whether it was present.
    pub fn remove(
        &mut self,
        path: &[u8],
        loader: &dyn Loader<StorageValue>,
    ) -> Result<bool, LoadError> {
        match self {
            StorageTrie::Trie(t) => t.remove(path, loader),
            StorageTrie::One(o) if o.is_at(path) => {
                *self = StorageTrie::new();
                Ok(true)
            }
            StorageTrie::One(_) => Ok(false),
        }
    }

    /// The proof nodes of `path` (see [`Trie::proof`]).
    pub fn proof(
        &self,
        path: &[u8],
        loader: &dyn Loader<StorageValue>,
    ) -> Result<Vec<Vec<u8>>, LoadError> {
        match self {
            StorageTrie::Trie(t) => t.proof(path, loader),
            StorageTrie::One(o) => o.to_trie().proof(path, &NoLoader),
        }
    }

    /// The value at `path`, loading stored nodes on the way (see [`Trie::load_value`]).
    pub fn load_value(
        &self,
        path: &[u8],
        loader: &dyn Loader<StorageValue>,
    ) -> Result<Option<StorageValue>, LoadError> {
        match self {
            StorageTrie::Trie(t) => t.load_value(path, loader),
            StorageTrie::One(o) => Ok(o.is_at(path).then_some(o.value)),
        }
    }

    /// The depths on the way to `path` where a removal may have left a stale branch record
    /// (see [`Trie::stale_positions`]; a trie of one leaf has no branch: all of them).
    pub fn stale_positions(&self, path: &[u8]) -> Vec<usize> {
        match self {
            StorageTrie::Trie(t) => t.stale_positions(path),
            StorageTrie::One(_) => (0..path.len()).collect(),
        }
    }

    /// Visits the branch records not in the store and marks the trie stored (see
    /// [`Trie::take_dirty`]; a trie of one leaf has no branch).
    pub fn take_dirty(&self, f: impl FnMut(&[u8], &[u8])) {
        match self {
            StorageTrie::Trie(t) => t.take_dirty(f),
            StorageTrie::One(o) => {
                // The mark needs the reference (the roots computed it at the block's commit).
                o.root_hash();
                o.root_len.mark_stored(StoredKind::Leaf);
            }
        }
    }

    /// This storage once its account is in the store: the nodes the store holds replaced by
    /// their references (see [`Trie::pruned`]); an inline slot the records walk stored becomes
    /// its root's reference.
    pub fn pruned(&self) -> StorageTrie {
        match self {
            StorageTrie::Trie(t) => StorageTrie::Trie(t.pruned(0)),
            StorageTrie::One(o) if o.is_stored() => {
                StorageTrie::from_entry(self.root_entry().as_ref())
            }
            StorageTrie::One(_) => self.clone(),
        }
    }

    /// Asks for the root's cell (a hint; an inline slot has none).
    pub fn prefetch_root(&self) {
        if let StorageTrie::Trie(t) = self {
            t.prefetch_root();
        }
    }

    /// Visits every (nibble path, value) held in memory, in path order.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &StorageValue)) {
        match self {
            StorageTrie::Trie(t) => t.for_each(f),
            StorageTrie::One(o) => f(&nibbles(&o.slot), &o.value),
        }
    }

    /// Computes the roots of many storages together: the tries' written nodes on `threads`
    /// ([`Trie::hash_many`]), the inline slots' leaves eight at a time on this thread.
    pub fn hash_many(storages: &[&StorageTrie], threads: Threads) {
        let mut tries = Vec::new();
        let mut ones = Vec::new();
        for s in storages {
            match s {
                StorageTrie::Trie(t) => tries.push(t),
                StorageTrie::One(o) if o.cached_hash().is_none() => ones.push(o),
                StorageTrie::One(_) => {}
            }
        }
        if !tries.is_empty() {
            Trie::hash_many(&tries, threads);
        }
        if ones.is_empty() {
            return;
        }
        let mut rlp = Vec::with_capacity(ones.len() * 72);
        let mut bounds = Vec::with_capacity(ones.len() + 1);
        bounds.push(0);
        for o in &ones {
            o.encode(&mut rlp);
            bounds.push(rlp.len());
        }
        let msgs: Vec<&[u8]> = bounds.windows(2).map(|b| &rlp[b[0]..b[1]]).collect();
        for (o, h) in ones.iter().zip(&keccak256_many(&msgs)) {
            o.set_hash(h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keccak::EMPTY_ROOT;

    fn value(x: u8) -> StorageValue {
        StorageValue::from_trimmed(&[x]).expect("non-zero")
    }

    fn path(k: u8) -> [u8; 64] {
        nibbles(&keccak256(&[k]))
    }

    /// The same writes into a `StorageTrie` and a plain `Trie` give the same root, lookups
    /// and entries at every step, through one slot, a second, removals and back to empty.
    #[test]
    fn inline_slot_agrees_with_the_trie() {
        let mut s = StorageTrie::new();
        let mut t = Trie::<StorageValue>::new();
        let steps: [(u8, Option<u8>); 9] = [
            (1, Some(7)),
            (1, Some(8)),
            (2, Some(9)),
            (1, None),
            (2, None),
            (3, Some(1)),
            (4, None),
            (3, None),
            (5, Some(200)),
        ];
        for (k, v) in steps {
            match v {
                Some(v) => {
                    s.insert(&path(k), value(v), &NoLoader).unwrap();
                    t.insert(&path(k), value(v), &NoLoader).unwrap();
                }
                None => {
                    let a = s.remove(&path(k), &NoLoader).unwrap();
                    let b = t.remove(&path(k), &NoLoader).unwrap();
                    assert_eq!(a, b, "removal of {k}");
                }
            }
            assert_eq!(s.root_hash(), t.root_hash(), "after {k} {v:?}");
            assert_eq!(s.root_entry(), t.root_entry());
            assert_eq!(s.is_empty(), t.is_empty());
            for k in 1..=5 {
                assert_eq!(s.get(&path(k)), t.get(&path(k)).copied(), "slot {k}");
                assert_eq!(
                    s.proof(&path(k), &NoLoader).unwrap(),
                    t.proof(&path(k), &NoLoader).unwrap()
                );
            }
        }
        assert!(matches!(s, StorageTrie::One(_)), "one slot left is inline");
        assert_ne!(s.root_hash(), EMPTY_ROOT);
    }

    /// Batched roots equal one-at-a-time roots, for inline slots and tries mixed.
    #[test]
    fn hash_many_sets_every_root() {
        let storages: Vec<StorageTrie> = (0..40u8)
            .map(|i| {
                let mut s = StorageTrie::new();
                for j in 0..(i % 3) + 1 {
                    s.insert(
                        &path(i.wrapping_mul(7).wrapping_add(j)),
                        value(i + 1),
                        &NoLoader,
                    )
                    .unwrap();
                }
                s
            })
            .collect();
        let expected: Vec<B256> = storages.iter().map(|s| s.clone().root_hash()).collect();
        let fresh: Vec<StorageTrie> = storages.to_vec();
        StorageTrie::hash_many(&fresh.iter().collect::<Vec<_>>(), Threads::Caller);
        for (s, e) in fresh.iter().zip(&expected) {
            if let StorageTrie::One(o) = s {
                assert_eq!(o.cached_hash().as_ref(), Some(e), "set by the batch");
            }
            assert_eq!(s.root_hash(), *e);
        }
    }

    /// An inline slot is pruned to its root's reference only once the records walk stored it,
    /// and a write makes it unstored again.
    #[test]
    fn pruning_waits_for_the_records_walk() {
        let mut s = StorageTrie::new();
        s.insert(&path(1), value(1), &NoLoader).unwrap();
        let root = s.root_hash();
        assert!(matches!(s.pruned(), StorageTrie::One(_)));
        s.take_dirty(|_, _| panic!("one leaf has no branch record"));
        let p = s.pruned();
        assert!(matches!(&p, StorageTrie::Trie(t) if !t.is_empty()));
        assert_eq!(p.root_hash(), root);
        assert_eq!(p.root_entry(), s.root_entry());
        assert!(matches!(p.lookup(&path(1)), Lookup::Stored));
        s.insert(&path(1), value(2), &NoLoader).unwrap();
        assert!(matches!(s.pruned(), StorageTrie::One(_)));
    }

    impl StorageTrie {
        fn get(&self, path: &[u8]) -> Option<StorageValue> {
            match self.lookup(path) {
                Lookup::Found(v) => Some(*v),
                _ => None,
            }
        }
    }
}
