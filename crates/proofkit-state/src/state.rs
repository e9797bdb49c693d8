//! The world state: the secure account trie (keyed by keccak256 of the 20-byte address) whose
//! leaves carry each account's secure storage trie (keyed by keccak256 of the 32-byte slot), and
//! the write log of a block (what finalization writes to the page store).
//!
//! A state is the finalized state in the page store (a [`Snapshot`] of its root) with the
//! changes of the unfinalized blocks above it in memory: the tries hold the top of the tree and
//! the paths those blocks wrote; everything else is a stored node, loaded from the store when a
//! write goes through it. Reads that reach a stored node read the store's flat records.
//!
//! Store layout (keys by length; `pad(p)`: the nibble path `p` packed high nibble first and
//! zero-padded to 32 bytes):
//! ```text
//! 32 bytes  keccak(address)                         -> account (see `account`) ++ storage-root entry
//! 64 bytes  keccak(address) ++ keccak(slot)         -> the value, trimmed big-endian bytes
//! 33 bytes  pad(p) ++ [len(p)]                      -> record of the account-trie branch at p
//!                                                      (none at RECORDLESS_DEPTHS: rebuilt)
//! 33 bytes  [0; 32] ++ [0xff]                       -> entry of the account trie's root
//! 65 bytes  keccak(address) ++ pad(p) ++ [len(p)]   -> record of that storage trie's branch at p
//! ```
//! A branch record lists its children's entries (leaf or branch reference, or an extension's
//! path and its branch's reference: `trie::encode_record`); records sit next to the accounts
//! under the same prefix, so a block's writes and its trie nodes share pages.
#![deny(unsafe_code)]

use crate::account::{Account, AccountLeaf, StorageValue, U256};
use crate::keccak::{keccak256, keccak256_many, B256};
use crate::storage_trie::StorageTrie;
use crate::store::Snapshot;
use crate::trie::{
    decode_entry, decode_record_children, entry_child, loaded_ref, nibbles, Child, ChildEntry,
    Children, LoadError, LoadedNode, Loader, Lookup, NoLoader, StoredKind, Trie,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use thiserror::Error;

/// A 20-byte account address.
pub type Address = [u8; 20];

/// A write or read the state cannot do.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum StateError {
    #[error("storage write to account 0x{0} that does not exist")]
    NoSuchAccount(String),
    #[error("state store: {0}")]
    Store(String),
}

impl From<LoadError> for StateError {
    fn from(e: LoadError) -> Self {
        StateError::Store(e.to_string())
    }
}

impl From<crate::store::StoreError> for StateError {
    fn from(e: crate::store::StoreError) -> Self {
        StateError::Store(e.to_string())
    }
}

/// The depths (in nibbles) of the account-trie branches that have no record in the store: a
/// load rebuilds one from what lies at its sixteen children's positions (a branch's record, an
/// account, or, below a depth-4 branch, a depth-5 branch rebuilt in turn). At 50M accounts
/// these are the 65,536 depth-4 branches and the ~1M depth-5 ones, which memory keeps (six
/// cached levels by default): a finalization of 32,000 accounts changed a third of the first
/// and ~32,000 of the second, each record in a page no account of the batch touches, about a
/// third of the pages it wrote. Only opening, proofs, readers of stored roots and a store
/// kept with fewer cached levels load them: sixteen store lookups and hashes for a depth-5
/// branch, ~300 for a depth-4 one.
pub const RECORDLESS_DEPTHS: std::ops::Range<usize> = 4..6;

/// Whether the account-trie branches at `depth` have no record ([`RECORDLESS_DEPTHS`]).
pub fn is_recordless(depth: usize) -> bool {
    RECORDLESS_DEPTHS.contains(&depth)
}

/// The key of the account trie's root entry.
pub const ROOT_ENTRY_KEY: [u8; 33] = {
    let mut k = [0u8; 33];
    k[32] = 0xff;
    k
};

/// `pad(p) ++ [len(p)]`: the key of the account-trie branch at `pos`, or (after a hashed
/// address) of a storage-trie branch.
pub fn record_key(owner: Option<&B256>, pos: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(65);
    put_record_key(owner, pos, &mut k);
    k
}

/// [`record_key`] appended to `k`.
pub fn put_record_key(owner: Option<&B256>, pos: &[u8], k: &mut Vec<u8>) {
    if let Some(o) = owner {
        k.extend_from_slice(o);
    }
    k.extend_from_slice(&pad(pos));
    k.push(pos.len() as u8);
}

/// A nibble path packed high nibble first, zero-padded to 32 bytes.
pub fn pad(pos: &[u8]) -> B256 {
    let mut k = [0u8; 32];
    for (i, &n) in pos.iter().enumerate().take(64) {
        k[i / 2] |= if i % 2 == 0 { n << 4 } else { n };
    }
    k
}

fn starts_with_nibbles(key: &[u8], pos: &[u8]) -> bool {
    pos.iter()
        .enumerate()
        .all(|(i, &n)| nibble_at(key, i) == Some(n))
}

/// An account record: the account and its storage trie's root entry.
pub fn decode_account_record(v: &[u8]) -> Option<(Account, Option<ChildEntry>)> {
    let (account, mut rest) = Account::from_store_prefix(v).ok()?;
    if rest.is_empty() {
        return Some((account, None));
    }
    let e = decode_entry(&mut rest)?;
    rest.is_empty().then_some((account, Some(e)))
}

/// Calls `f` with the loaders of an account's writes: from the store under `base`, or none.
/// They live on the stack: one heap box per write was measurable.
fn with_loaders<R>(
    base: Option<&Snapshot>,
    haddr: &B256,
    f: impl FnOnce(&dyn Loader<AccountLeaf>, &dyn Loader<StorageValue>) -> R,
) -> R {
    match base {
        Some(s) => f(&AccountLoader(s), &StorageLoader(s, *haddr)),
        None => f(&NoLoader, &NoLoader),
    }
}

/// Writes a slot (hashed) into an account's storage trie; zero deletes it.
fn write_slot(
    storage: &mut StorageTrie,
    hslot: &B256,
    value: &U256,
    loader: &dyn Loader<StorageValue>,
) -> Result<(), LoadError> {
    let spath = nibbles(hslot);
    match StorageValue::new(value) {
        Some(v) => storage.insert(&spath, v, loader),
        None => storage.remove(&spath, loader).map(drop),
    }
}

/// Loads account-trie nodes from a snapshot.
struct AccountLoader<'a>(&'a Snapshot);

/// Loads the nodes of one account's storage trie from a snapshot.
struct StorageLoader<'a>(&'a Snapshot, B256);

fn load_branch<V: crate::trie::TrieValue>(
    snap: &Snapshot,
    owner: Option<&B256>,
    pos: &[u8],
) -> Result<LoadedNode<V>, LoadError> {
    // An extension below `pos` leaves its branch at least one nibble of the 64-nibble key.
    let room = 64usize.saturating_sub(pos.len() + 2);
    // Decoded where the record lies in its page (no copy of it).
    let children = snap
        .get_with(&record_key(owner, pos), |rec| {
            decode_record_children(rec, room)
        })
        .map_err(|e| LoadError::new(pos, e.to_string()))?
        .ok_or_else(|| LoadError::new(pos, "branch record missing"))?
        .ok_or_else(|| {
            LoadError::new(
                pos,
                "bad branch record (malformed, or an extension path longer than the key)",
            )
        })?;
    Ok(LoadedNode::Branch { children })
}

/// The one key of `len` bytes under the nibble prefix `pos` (after `owner`), and its value.
fn find_leaf(
    snap: &Snapshot,
    owner: Option<&B256>,
    pos: &[u8],
) -> Result<(Vec<u8>, Vec<u8>), LoadError> {
    let skip = owner.map_or(0, |_| 32);
    let mut from = owner.map_or(Vec::new(), |o| o.to_vec());
    from.extend_from_slice(&pad(pos));
    let mut found = None;
    snap.scan_from(&from, |k, v| {
        if !k.starts_with(&from[..skip]) || !starts_with_nibbles(&k[skip..], pos) {
            return false;
        }
        if k.len() == skip + 32 {
            found = Some((k.to_vec(), v.to_vec()));
            return false;
        }
        true
    })
    .map_err(|e| LoadError::new(pos, e.to_string()))?;
    found.ok_or_else(|| LoadError::new(pos, "leaf record missing"))
}

/// The account-trie leaf of account record `(k, v)` at position `pos`.
fn account_leaf(pos: &[u8], k: &[u8], v: &[u8]) -> Result<LoadedNode<AccountLeaf>, LoadError> {
    let (account, entry) =
        decode_account_record(v).ok_or_else(|| LoadError::new(pos, "bad account record"))?;
    let haddr: &B256 = k
        .try_into()
        .map_err(|_| LoadError::new(pos, "an account key not of 32 bytes"))?;
    Ok(LoadedNode::Leaf {
        path: nibbles(haddr)[pos.len()..].into(),
        value: AccountLeaf {
            account,
            storage: StorageTrie::from_entry(entry.as_ref()),
        },
    })
}

/// The account-trie branch at `pos` (at one of the [`RECORDLESS_DEPTHS`]), which has no
/// record: rebuilt from its children's positions.
fn rebuild_branch(snap: &Snapshot, pos: &[u8]) -> Result<Box<Children<AccountLeaf>>, LoadError> {
    let mut children: Box<Children<AccountLeaf>> = Default::default();
    let mut at = pos.to_vec();
    at.push(0);
    for i in 0..16u8 {
        at[pos.len()] = i;
        children[i as usize] = child_entry_at(snap, &at)?.map(|e| entry_child(&e));
    }
    if children.iter().flatten().count() < 2 {
        return Err(LoadError::new(
            pos,
            "a branch without a record has under two children",
        ));
    }
    Ok(children)
}

/// A key and its value, copied out of the store.
type KeyValue = (Vec<u8>, Vec<u8>);

/// The first key under the nibble path `pos` and its value, passing over the root entry and the
/// records of the branches above `pos` (zero-padded, they sort among the keys of the positions
/// below them whose nibbles are all zero).
fn first_under(snap: &Snapshot, pos: &[u8]) -> Result<Option<KeyValue>, LoadError> {
    let mut first = None;
    snap.scan_from(&pad(pos), |k, v| {
        if !starts_with_nibbles(k, pos) {
            return false;
        }
        if k.len() == 33 && (k == ROOT_ENTRY_KEY || usize::from(k[32]) < pos.len()) {
            return true;
        }
        first = Some((k.to_vec(), v.to_vec()));
        false
    })
    .map_err(|e| LoadError::new(pos, e.to_string()))?;
    Ok(first)
}

/// What a parent's record would say of the account-trie node at `pos`: the first key under
/// `pos` is the record of the branch the keys there share (records sort before the accounts
/// under their position, and the branch's before those of the branches below it), or the
/// only account there; nothing when no key starts with `pos`. At a depth without records the
/// node is a branch when keys under `pos` differ in their next nibble (a key under `pos` at or
/// after the first key's next nibble plus one), rebuilt in turn; otherwise the first key
/// decides as above, the keys' shared branch being deeper and so recorded.
fn child_entry_at(snap: &Snapshot, pos: &[u8]) -> Result<Option<ChildEntry>, LoadError> {
    let bad = |what: &str| LoadError::new(pos, what.to_string());
    let Some((k, v)) = first_under(snap, pos)? else {
        return Ok(None);
    };
    if is_recordless(pos.len()) {
        let next = nibble_at(&k, pos.len()).ok_or_else(|| bad("a key as long as its position"))?;
        if next < 15 && has_key_after(snap, pos, next)? {
            let children = rebuild_branch(snap, pos)?;
            let r = loaded_ref::<AccountLeaf>(LoadedNode::Branch { children });
            return Ok(Some(ChildEntry::Branch(r)));
        }
    }
    match k.len() {
        32 => Ok(Some(ChildEntry::Leaf(loaded_ref(account_leaf(
            pos, &k, &v,
        )?)))),
        33 => {
            let at = record_position(&k).ok_or_else(|| bad("a bad record key"))?;
            let children = decode_record_children(&v, 64usize.saturating_sub(at.len() + 2))
                .ok_or_else(|| bad("a bad branch record"))?;
            let r = loaded_ref::<AccountLeaf>(LoadedNode::Branch { children });
            // The scan passed the records above `pos`, so `at` extends it.
            let below = at
                .get(pos.len()..)
                .ok_or_else(|| bad("a record above its position"))?;
            Ok(Some(if below.is_empty() {
                ChildEntry::Branch(r)
            } else {
                ChildEntry::Extension(below.into(), r)
            }))
        }
        _ => Err(bad(
            "a key of the wrong length under an account-trie position",
        )),
    }
}

/// Whether a key under `pos` lies in a child slot after `slot` (the first key at or after
/// `pad(pos ++ [slot + 1])` starts with `pos`; nothing above `pos` sorts there, its nibble at
/// `pos.len()` being nonzero).
fn has_key_after(snap: &Snapshot, pos: &[u8], slot: u8) -> Result<bool, LoadError> {
    let mut after = pos.to_vec();
    after.push(slot + 1);
    let mut found = false;
    snap.scan_from(&pad(&after), |k, _| {
        found = starts_with_nibbles(k, pos);
        false
    })
    .map_err(|e| LoadError::new(pos, e.to_string()))?;
    Ok(found)
}

/// The nibble of `key` at `i`, if it is that long.
fn nibble_at(key: &[u8], i: usize) -> Option<u8> {
    key.get(i / 2)
        .map(|b| if i % 2 == 0 { b >> 4 } else { b & 15 })
}

/// The nibble path of a record key's last 33 bytes `pad(p) ++ [len(p)]`; `None` unless the
/// nibbles after `p` are zero.
pub fn record_position(k: &[u8]) -> Option<Vec<u8>> {
    let (&len, padded) = k.split_last()?;
    let len = len as usize;
    if len > 64 {
        return None;
    }
    let pos: Vec<u8> = (0..len)
        .map(|i| nibble_at(padded, i))
        .collect::<Option<_>>()?;
    (pad(&pos)[..] == *padded).then_some(pos)
}

impl Loader<AccountLeaf> for AccountLoader<'_> {
    fn load(&self, pos: &[u8], kind: StoredKind) -> Result<LoadedNode<AccountLeaf>, LoadError> {
        match kind {
            StoredKind::Branch if is_recordless(pos.len()) => Ok(LoadedNode::Branch {
                children: rebuild_branch(self.0, pos)?,
            }),
            StoredKind::Branch => load_branch(self.0, None, pos),
            StoredKind::Leaf => {
                let (k, v) = find_leaf(self.0, None, pos)?;
                account_leaf(pos, &k, &v)
            }
        }
    }

    fn exists(&self, path: &[u8]) -> Result<bool, LoadError> {
        self.0
            .get(&pad(path))
            .map(|v| v.is_some())
            .map_err(|e| LoadError::new(path, e.to_string()))
    }
}

impl Loader<StorageValue> for StorageLoader<'_> {
    fn load(&self, pos: &[u8], kind: StoredKind) -> Result<LoadedNode<StorageValue>, LoadError> {
        match kind {
            StoredKind::Branch => load_branch(self.0, Some(&self.1), pos),
            StoredKind::Leaf => {
                let (k, v) = find_leaf(self.0, Some(&self.1), pos)?;
                let value = match StorageValue::from_trimmed(&v) {
                    Some(value) if v[0] != 0 => value,
                    _ => return Err(LoadError::new(pos, "bad storage value")),
                };
                Ok(LoadedNode::Leaf {
                    path: nibbles(&k[32..].try_into().expect("a 64-byte key"))[pos.len()..].into(),
                    value,
                })
            }
        }
    }

    fn exists(&self, path: &[u8]) -> Result<bool, LoadError> {
        let mut k = self.1.to_vec();
        k.extend_from_slice(&pad(path));
        self.0
            .get(&k)
            .map(|v| v.is_some())
            .map_err(|e| LoadError::new(path, e.to_string()))
    }
}

/// One version of the world state; cloning is O(1).
#[derive(Clone, Default)]
pub struct State {
    accounts: Trie<AccountLeaf>,
    /// The store root the stored nodes belong to (`None`: all in memory).
    base: Option<Arc<Snapshot>>,
}

/// What a block did to one account (keys are hashed): finalization turns it into store writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountWrite {
    /// The account (and so its storage) was deleted at some point in the block.
    pub wiped: bool,
    /// The account at the end of the block (`None`: it does not exist).
    pub account: Option<Account>,
    /// Slots written after the last wipe, by hashed slot; zero means deleted.
    pub storage: SlotWrites,
}

/// The slots a block wrote to one account, by hashed slot, in order. Most accounts a block
/// writes get one slot: that one is held inline, more go to a map (a map per account was
/// ~4% of the Paprika workload's block writes, a 700-byte node allocated and dropped each).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SlotWrites {
    #[default]
    Empty,
    One(B256, U256),
    Many(BTreeMap<B256, U256>),
}

impl SlotWrites {
    /// Sets `slot` to `value` (a later write of a slot replaces the earlier).
    pub fn insert(&mut self, slot: B256, value: U256) {
        match self {
            SlotWrites::Empty => *self = SlotWrites::One(slot, value),
            SlotWrites::One(s, v) if *s == slot => *v = value,
            SlotWrites::One(s, v) => {
                *self = SlotWrites::Many(BTreeMap::from([(*s, *v), (slot, value)]))
            }
            SlotWrites::Many(m) => {
                m.insert(slot, value);
            }
        }
    }

    pub fn clear(&mut self) {
        *self = SlotWrites::Empty;
    }

    pub fn len(&self) -> usize {
        match self {
            SlotWrites::Empty => 0,
            SlotWrites::One(..) => 1,
            SlotWrites::Many(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The slots and their values in slot order.
    pub fn iter(&self) -> SlotWritesIter<'_> {
        match self {
            SlotWrites::Empty => SlotWritesIter::One(None),
            SlotWrites::One(s, v) => SlotWritesIter::One(Some((s, v))),
            SlotWrites::Many(m) => SlotWritesIter::Many(m.iter()),
        }
    }

    /// The slots in order.
    pub fn keys(&self) -> impl Iterator<Item = &B256> {
        self.iter().map(|(s, _)| s)
    }
}

/// [`SlotWrites::iter`].
pub enum SlotWritesIter<'a> {
    One(Option<(&'a B256, &'a U256)>),
    Many(std::collections::btree_map::Iter<'a, B256, U256>),
}

impl<'a> Iterator for SlotWritesIter<'a> {
    type Item = (&'a B256, &'a U256);
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            SlotWritesIter::One(one) => one.take(),
            SlotWritesIter::Many(it) => it.next(),
        }
    }
}

impl<'a> IntoIterator for &'a SlotWrites {
    type Item = (&'a B256, &'a U256);
    type IntoIter = SlotWritesIter<'a>;
    fn into_iter(self) -> SlotWritesIter<'a> {
        self.iter()
    }
}

impl FromIterator<(B256, U256)> for SlotWrites {
    fn from_iter<I: IntoIterator<Item = (B256, U256)>>(iter: I) -> Self {
        let mut w = SlotWrites::Empty;
        for (s, v) in iter {
            w.insert(s, v);
        }
        w
    }
}

/// A block's writes by hashed address, on `foldhash`'s seeded hasher: std's SipHash was ~0.6%
/// of a benchmark block's CPU, and the keys are hashes an attacker can grind, so the hasher
/// stays seeded per process.
pub type WriteLog = HashMap<B256, AccountWrite, foldhash::quality::RandomState>;

const CORRUPT: &str = "the state store was damaged after it was opened (use the try_ reads)";

impl State {
    pub fn new() -> Self {
        State::default()
    }

    /// The state held by a store root: the account trie's root entry, checked against the
    /// root the meta page names.
    pub fn from_snapshot(snap: Arc<Snapshot>) -> Result<State, StateError> {
        let entry = match snap.get(&ROOT_ENTRY_KEY)? {
            None => None,
            Some(v) => {
                let mut b = &v[..];
                let e = decode_entry(&mut b)
                    .filter(|_| b.is_empty())
                    .ok_or_else(|| StateError::Store("bad root entry".into()))?;
                Some(e)
            }
        };
        Ok(State {
            accounts: Trie::from_entry(entry.as_ref()),
            base: Some(snap),
        })
    }

    /// The store root this state's stored nodes belong to.
    pub fn base(&self) -> Option<&Arc<Snapshot>> {
        self.base.as_ref()
    }

    /// Moves this state onto another store root holding the same stored nodes (a newer root
    /// that finalized only blocks this state descends from), and with the subtrees below
    /// `keep` nibbles that the store holds dropped from memory when `prune`.
    pub(crate) fn rebase(&mut self, snap: Arc<Snapshot>, prune: Option<usize>) {
        self.base = Some(snap);
        if let Some(keep) = prune {
            drop(self.prune(keep));
        }
    }

    /// Drops from memory the account-trie subtrees below `keep` nibbles that the store holds
    /// (in this state's store root: call after moving onto the root that stored them), and
    /// returns them, for the caller to free where it suits.
    pub(crate) fn prune(&mut self, keep: usize) -> Vec<Child<AccountLeaf>> {
        let mut dropped = Vec::new();
        self.accounts.prune_in_place(keep, &mut dropped);
        dropped
    }

    fn account_loader(&self) -> Box<dyn Loader<AccountLeaf> + '_> {
        match &self.base {
            Some(s) => Box::new(AccountLoader(s)),
            None => Box::new(NoLoader),
        }
    }

    fn storage_loader(&self, haddr: &B256) -> Box<dyn Loader<StorageValue> + '_> {
        match &self.base {
            Some(s) => Box::new(StorageLoader(s, *haddr)),
            None => Box::new(NoLoader),
        }
    }

    fn base_get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        match &self.base {
            Some(s) => Ok(s.get(key)?),
            None => Err(StateError::Store("a stored node without a store".into())),
        }
    }

    /// The state root.
    pub fn root(&self) -> B256 {
        self.accounts.root_hash()
    }

    /// The account at `addr` (panics only if the store was damaged after opening; see
    /// [`State::try_account`]).
    pub fn account(&self, addr: &Address) -> Option<Account> {
        self.try_account(addr).expect(CORRUPT)
    }

    pub fn try_account(&self, addr: &Address) -> Result<Option<Account>, StateError> {
        self.try_account_hashed(&keccak256(addr))
    }

    pub fn account_hashed(&self, haddr: &B256) -> Option<Account> {
        self.try_account_hashed(haddr).expect(CORRUPT)
    }

    pub fn try_account_hashed(&self, haddr: &B256) -> Result<Option<Account>, StateError> {
        match self.accounts.lookup(&nibbles(haddr)) {
            Lookup::Found(l) => Ok(Some(l.account)),
            Lookup::Absent => Ok(None),
            Lookup::Stored => match self.base_get(haddr)? {
                None => Ok(None),
                Some(v) => decode_account_record(&v)
                    .map(|(a, _)| Some(a))
                    .ok_or_else(|| StateError::Store("bad account record".into())),
            },
        }
    }

    /// The value of a slot (zero when unset or when the account does not exist).
    pub fn storage(&self, addr: &Address, slot: &B256) -> U256 {
        self.try_storage(addr, slot).expect(CORRUPT)
    }

    pub fn try_storage(&self, addr: &Address, slot: &B256) -> Result<U256, StateError> {
        self.try_storage_hashed(&keccak256(addr), &keccak256(slot))
    }

    pub fn storage_hashed(&self, haddr: &B256, hslot: &B256) -> U256 {
        self.try_storage_hashed(haddr, hslot).expect(CORRUPT)
    }

    pub fn try_storage_hashed(&self, haddr: &B256, hslot: &B256) -> Result<U256, StateError> {
        let in_store = || -> Result<U256, StateError> {
            let mut k = haddr.to_vec();
            k.extend_from_slice(hslot);
            match self.base_get(&k)? {
                None => Ok([0; 32]),
                Some(v) => match StorageValue::from_trimmed(&v) {
                    Some(value) => Ok(value.to_u256()),
                    None => Err(StateError::Store("bad storage value".into())),
                },
            }
        };
        match self.accounts.lookup(&nibbles(haddr)) {
            Lookup::Absent => Ok([0; 32]),
            Lookup::Stored => in_store(),
            Lookup::Found(l) => match l.storage.lookup(&nibbles(hslot)) {
                Lookup::Found(v) => Ok(v.to_u256()),
                Lookup::Absent => Ok([0; 32]),
                Lookup::Stored => in_store(),
            },
        }
    }

    /// The storage root of an account (`None` when it does not exist).
    pub fn storage_root(&self, addr: &Address) -> Option<B256> {
        self.try_storage_root(addr).expect(CORRUPT)
    }

    pub fn try_storage_root(&self, addr: &Address) -> Result<Option<B256>, StateError> {
        Ok(self
            .account_leaf(&keccak256(addr))?
            .map(|l| l.storage.root_hash()))
    }

    /// The leaf of an account (its fields and storage trie), loaded from the store if need be.
    pub fn account_leaf(&self, haddr: &B256) -> Result<Option<AccountLeaf>, StateError> {
        match self.accounts.lookup(&nibbles(haddr)) {
            Lookup::Found(l) => Ok(Some(l.clone())),
            Lookup::Absent => Ok(None),
            Lookup::Stored => Ok(self
                .accounts
                .load_value(&nibbles(haddr), &*self.account_loader())?),
        }
    }

    /// The proof nodes of `haddr` in the account trie (see `proof`).
    pub(crate) fn account_proof(&self, haddr: &B256) -> Result<Vec<Vec<u8>>, StateError> {
        Ok(self
            .accounts
            .proof(&nibbles(haddr), &*self.account_loader())?)
    }

    /// The proof nodes of `hslot` in the storage trie of `haddr`, whose leaf is `leaf`.
    pub(crate) fn storage_proof(
        &self,
        haddr: &B256,
        leaf: &AccountLeaf,
        hslot: &B256,
    ) -> Result<Vec<Vec<u8>>, StateError> {
        Ok(leaf
            .storage
            .proof(&nibbles(hslot), &*self.storage_loader(haddr))?)
    }

    /// Positions on the way to `haddr` in the account trie where no branch is now, above any
    /// stored node (see [`Trie::stale_positions`]).
    pub(crate) fn stale_account_positions(&self, haddr: &B256) -> Vec<usize> {
        self.accounts.stale_positions(&nibbles(haddr))
    }

    /// The in-memory leaf of an account written since the last finalization.
    pub(crate) fn written_leaf(&self, haddr: &B256) -> Option<&AccountLeaf> {
        match self.accounts.lookup(&nibbles(haddr)) {
            Lookup::Found(l) => Some(l),
            _ => None,
        }
    }

    /// Account-trie nodes held in memory (the rest is in the page store).
    pub fn nodes_in_memory(&self) -> usize {
        self.accounts.nodes_in_memory()
    }

    pub(crate) fn account_trie(&self) -> &Trie<AccountLeaf> {
        &self.accounts
    }

    /// Creates or updates an account (keeping its storage); `None` deletes it with its storage.
    pub fn set_account_hashed(
        &mut self,
        haddr: &B256,
        account: Option<Account>,
    ) -> Result<(), StateError> {
        match account {
            Some(account) => self.set_account_with_storage_hashed(haddr, account, &[]),
            None => with_loaders(self.base.as_deref(), haddr, |loader, _| {
                self.accounts.remove(&nibbles(haddr), loader)?;
                Ok(())
            }),
        }
    }

    /// [`State::set_account_hashed`] with `Some(account)`, then [`State::set_storage_hashed`]
    /// for each of `slots` (hashed slot, value; zero deletes) in order, in one walk down the
    /// account trie: the slots are written into the account's leaf as it is put in place. An
    /// account already there keeps its storage.
    pub fn set_account_with_storage_hashed(
        &mut self,
        haddr: &B256,
        account: Account,
        slots: &[(B256, U256)],
    ) -> Result<(), StateError> {
        let path = nibbles(haddr);
        with_loaders(self.base.as_deref(), haddr, |aloader, sloader| {
            let (leaf, mut then) = write_leaf(account, slots, sloader);
            self.accounts
                .upsert_with(&path, leaf, aloader, keep_storage, &mut then)
        })?;
        Ok(())
    }

    /// A hint before writes to the accounts `haddrs`: brings what those writes will read (the
    /// account trie's nodes in memory on their paths, then the store's pages holding the
    /// stored node each path reaches and the account's record) into the cache, all the
    /// writes' misses overlapping (see [`Trie::prefetch_paths`],
    /// [`crate::store::Snapshot::prefetch_many`]). Changes nothing; a damaged page is left to
    /// the writes to report.
    pub fn prefetch_accounts(&self, haddrs: &[B256]) {
        hint_writes(self.base.as_deref(), haddrs, |paths| {
            self.accounts.prefetch_paths(paths)
        });
    }

    /// [`State::set_account_with_storage_hashed`] for each of `items` (hashed address,
    /// account, hashed slots and values), the hints of [`State::prefetch_accounts`] given a
    /// group of [`WRITE_GROUP`] accounts at a time. Returns which items were written and the
    /// first error met (a write that fails stops the writes below the same nibble of the
    /// root; which others were made is what the flags say).
    ///
    /// From [`PARALLEL_WRITES`] accounts on, the root branch's sixteen subtrees are written
    /// apart, taken one at a time by this thread and the rayon pool's (`trie::share_out`):
    /// this thread starts at once and the other joins when it is free. A block's writes ran
    /// on one core while the finalization's job left the other idle part of the time (1.72
    /// cores busy during the writes of the 50,000-block run, session 47).
    pub(crate) fn set_accounts_with_storage_hashed(
        &mut self,
        items: &[AccountItem],
    ) -> (Vec<bool>, Option<StateError>) {
        let mut written = vec![false; items.len()];
        if items.len() >= PARALLEL_WRITES && rayon::current_num_threads() > 1 {
            let nibbles_written = items.iter().fold(0u16, |m, (h, ..)| m | 1 << (h[0] >> 4));
            let base = self.base.as_deref();
            // The root is an account-trie node: the storage loader (for an address) is unused.
            let children = with_loaders(base, &[0; 32], |aloader, _| {
                self.accounts
                    .root_children_for_write(nibbles_written, aloader)
            });
            match children {
                Err(e) => return (written, Some(e.into())),
                Ok(Some(children)) => {
                    let error = write_below_root(children, items, base, &mut written);
                    return (written, error);
                }
                // Not a branch at the top (a small trie): one by one.
                Ok(None) => {}
            }
        }
        for (group, flags) in items
            .chunks(WRITE_GROUP)
            .zip(written.chunks_mut(WRITE_GROUP))
        {
            let haddrs: Vec<B256> = group.iter().map(|(h, ..)| *h).collect();
            self.prefetch_accounts(&haddrs);
            for ((haddr, account, slots), flag) in group.iter().zip(flags) {
                if let Err(e) = self.set_account_with_storage_hashed(haddr, *account, slots) {
                    return (written, Some(e));
                }
                *flag = true;
            }
        }
        (written, None)
    }
}

/// An account to write with its slots: hashed address, account, hashed slots and values.
pub(crate) type AccountItem<'a> = (B256, Account, &'a [(B256, U256)]);

/// Accounts given the hints of [`State::prefetch_accounts`] together before they are written
/// (the misses of 32 paths overlap; 8 at a time, the block writes were ~4% slower).
const WRITE_GROUP: usize = 32;

/// The fewest accounts [`State::set_accounts_with_storage_hashed`] writes on two threads.
const PARALLEL_WRITES: usize = 2 * WRITE_GROUP;

/// The new leaf of an account written over an existing one keeps the old one's storage.
fn keep_storage(old: AccountLeaf, new: AccountLeaf) -> AccountLeaf {
    AccountLeaf {
        account: new.account,
        storage: old.storage,
    }
}

/// The leaf of an account written with its slots: the account, then each slot written in
/// order into its storage (an existing account's, by `keep_storage`).
fn write_leaf<'a>(
    account: Account,
    slots: &'a [(B256, U256)],
    sloader: &'a dyn Loader<StorageValue>,
) -> (
    AccountLeaf,
    impl FnMut(&mut AccountLeaf) -> Result<(), LoadError> + 'a,
) {
    let leaf = AccountLeaf {
        account,
        storage: StorageTrie::new(),
    };
    let then = move |leaf: &mut AccountLeaf| {
        slots
            .iter()
            .try_for_each(|(hslot, value)| write_slot(&mut leaf.storage, hslot, value, sloader))
    };
    (leaf, then)
}

/// The writes of [`State::set_accounts_with_storage_hashed`] below the root branch's
/// `children` (marked written already), a subtree at a time on this thread and the pool's;
/// sets the flags of the items written and returns the first error.
fn write_below_root(
    children: &mut Children<AccountLeaf>,
    items: &[AccountItem],
    base: Option<&Snapshot>,
    written: &mut [bool],
) -> Option<StateError> {
    /// A subtree's writes: its slot, its items (indices, in order), how many were written
    /// and the error that stopped them.
    struct Part<'c> {
        slot: &'c mut Option<Child<AccountLeaf>>,
        items: Vec<usize>,
        written: usize,
        error: Option<StateError>,
    }
    let mut by_nibble: [Vec<usize>; 16] = Default::default();
    for (i, (h, ..)) in items.iter().enumerate() {
        by_nibble[(h[0] >> 4) as usize].push(i);
    }
    let parts: Vec<std::sync::Mutex<Part>> = children
        .iter_mut()
        .zip(by_nibble)
        .filter(|(_, part)| !part.is_empty())
        .map(|(slot, items)| {
            std::sync::Mutex::new(Part {
                slot,
                items,
                written: 0,
                error: None,
            })
        })
        .collect();
    crate::trie::share_out(&parts, |part| {
        // Each part is taken by one thread only: the lock is never contended.
        let mut part = part
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Part {
            slot,
            items: indices,
            written,
            error,
        } = &mut *part;
        for group in indices.chunks(WRITE_GROUP) {
            let haddrs: Vec<B256> = group.iter().map(|&i| items[i].0).collect();
            let paths = hint_writes(base, &haddrs, |paths| {
                crate::trie::prefetch_paths_below(slot, paths)
            });
            for (&i, path) in group.iter().zip(&paths) {
                let (haddr, account, slots) = &items[i];
                let result = with_loaders(base, haddr, |aloader, sloader| {
                    let (leaf, mut then) = write_leaf(*account, slots, sloader);
                    crate::trie::upsert_below(slot, path, leaf, aloader, keep_storage, &mut then)
                });
                if let Err(e) = result {
                    *error = Some(e.into());
                    return;
                }
                *written += 1;
            }
        }
    });
    let mut first_error = None;
    for part in parts {
        let part = part
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for &i in &part.items[..part.written] {
            written[i] = true;
        }
        first_error = first_error.or(part.error);
    }
    first_error
}

/// [`State::prefetch_accounts`] for the accounts `haddrs`, the trie's side given by
/// `trie_hints` (over the accounts' paths; it returns the stored node each write loads first):
/// then the store's side, for each path that record or leaf and the account's own record.
/// Returns the paths.
fn hint_writes(
    base: Option<&Snapshot>,
    haddrs: &[B256],
    trie_hints: impl FnOnce(&[&[u8]]) -> Vec<Option<(usize, StoredKind)>>,
) -> Vec<[u8; 64]> {
    let paths: Vec<[u8; 64]> = haddrs.iter().map(nibbles).collect();
    let path_refs: Vec<&[u8]> = paths.iter().map(|p| &p[..]).collect();
    let stored = trie_hints(&path_refs);
    let Some(base) = base else {
        return paths;
    };
    // The keys in one buffer (at most 33 bytes each), not two heap buffers an account.
    let mut keys: Vec<([u8; 33], usize)> = Vec::with_capacity(2 * haddrs.len());
    for ((path, haddr), stored) in path_refs.iter().zip(haddrs).zip(stored) {
        let Some((depth, kind)) = stored else {
            continue;
        };
        let mut key = [0; 33];
        key[..32].copy_from_slice(&pad(&path[..depth]));
        keys.push(match kind {
            // A record's key: the padded path and its length.
            StoredKind::Branch if !is_recordless(depth) => {
                key[32] = depth as u8;
                (key, 33)
            }
            // No record there (or a leaf): its keys lie from the padded path on.
            _ => (key, 32),
        });
        let mut account = [0; 33];
        account[..32].copy_from_slice(haddr);
        keys.push((account, 32));
    }
    let key_refs: Vec<&[u8]> = keys.iter().map(|(k, n)| &k[..*n]).collect();
    let _ = base.prefetch_many(&key_refs);
    paths
}

impl State {
    /// Writes a slot of an existing account; zero deletes it.
    pub fn set_storage_hashed(
        &mut self,
        haddr: &B256,
        hslot: &B256,
        value: &U256,
    ) -> Result<(), StateError> {
        let path = nibbles(haddr);
        with_loaders(self.base.as_deref(), haddr, |aloader, sloader| {
            let Some(leaf) = self.accounts.find_mut(&path, aloader)? else {
                return Err(StateError::NoSuchAccount(hex::encode(haddr)));
            };
            Ok(write_slot(&mut leaf.storage, hslot, value, sloader)?)
        })
    }

    /// Applies a block's write log (what [`Writer`] recorded): for each account a wipe, its
    /// final value, then its slots written after the wipe. The accounts are independent and
    /// a trie's shape depends only on its contents, so the state reached is the one the
    /// block's writes reached, whatever their order was.
    pub fn replay(&mut self, log: &WriteLog) -> Result<(), StateError> {
        for (haddr, w) in log {
            if w.wiped {
                self.set_account_hashed(haddr, None)?;
            }
            if let Some(account) = w.account {
                self.set_account_hashed(haddr, Some(account))?;
                for (hslot, value) in &w.storage {
                    self.set_storage_hashed(haddr, hslot, value)?;
                }
            }
        }
        Ok(())
    }

    /// Visits every account held in memory (hashed address, account, storage trie) in hashed
    /// order: all of them for a state not backed by a store (such as
    /// `genesis::state_from_json`'s); a store-backed state keeps most accounts in the store.
    pub fn for_each_account(&self, mut f: impl FnMut(B256, &Account, &StorageTrie)) {
        self.accounts
            .for_each(|path, leaf| f(pack(path), &leaf.account, &leaf.storage));
    }
}

/// Packs 64 nibbles back into 32 bytes.
pub fn pack(path: &[u8]) -> B256 {
    let mut k = [0u8; 32];
    for (i, pair) in path.chunks(2).enumerate().take(32) {
        k[i] = (pair[0] << 4) | pair.get(1).copied().unwrap_or(0);
    }
    k
}

/// Addresses hashed recently and their keccak256, direct-mapped by the address's last byte: a
/// block writes an account and then its slots, or one account several times, and each write
/// needs the hash again (in the Paprika workload, hashing every address a second time for its
/// slot was ~3% of the block writes).
#[derive(Clone)]
struct AddressHashes(Box<[Option<(Address, B256)>; 256]>);

impl Default for AddressHashes {
    fn default() -> Self {
        AddressHashes(Box::new([None; 256]))
    }
}

impl AddressHashes {
    fn get(&self, addr: &Address) -> Option<B256> {
        match &self.0[addr[19] as usize] {
            Some((a, h)) if a == addr => Some(*h),
            _ => None,
        }
    }

    fn put(&mut self, addr: &Address, h: B256) {
        self.0[addr[19] as usize] = Some((*addr, h));
    }

    /// The hash of one address.
    fn hash(&mut self, addr: &Address) -> B256 {
        self.get(addr).unwrap_or_else(|| {
            let h = keccak256(addr);
            self.put(addr, h);
            h
        })
    }

    /// The hashes of `addrs`, those not known hashed eight at a time.
    fn hash_all(&mut self, addrs: &[&Address]) -> Vec<B256> {
        let mut out: Vec<B256> = Vec::with_capacity(addrs.len());
        let mut missing: Vec<usize> = Vec::new();
        for (i, a) in addrs.iter().enumerate() {
            let h = self.get(a);
            if h.is_none() {
                missing.push(i);
            }
            out.push(h.unwrap_or_default());
        }
        if !missing.is_empty() {
            let msgs: Vec<&[u8]> = missing.iter().map(|&i| &addrs[i][..]).collect();
            for (&i, h) in missing.iter().zip(keccak256_many(&msgs)) {
                out[i] = h;
                self.put(addrs[i], h);
            }
        }
        out
    }
}

/// An account's new value and the slots written with it (slot, value; zero deletes), for
/// [`Writer::set_accounts_with_storage`].
pub type AccountWithStorage<'a> = (Address, Account, &'a [(B256, U256)]);

/// A state being changed, with the log of its changes: the body of a block.
#[derive(Clone, Default)]
pub struct Writer {
    pub(crate) state: State,
    pub(crate) log: WriteLog,
    /// Addresses written recently and their hashes.
    hashed: AddressHashes,
    /// The last slot written and its hash (many accounts use the same low slots).
    last_slot: Option<(B256, B256)>,
    /// The first write that failed for want of a readable store; the block cannot commit.
    error: Option<StateError>,
}

impl Writer {
    pub fn new(state: State) -> Self {
        Writer::with_capacity(state, 0)
    }

    /// A writer whose log has room for `accounts` accounts (a block like the one before it
    /// then never grows its log, which moves every entry each time).
    pub fn with_capacity(state: State, accounts: usize) -> Self {
        Writer {
            state,
            log: WriteLog::with_capacity_and_hasher(accounts, Default::default()),
            hashed: AddressHashes::default(),
            last_slot: None,
            error: None,
        }
    }

    /// The first write that failed because the store could not be read (the block cannot be
    /// committed then).
    pub fn error(&self) -> Option<&StateError> {
        self.error.as_ref()
    }

    fn hash_address(&mut self, addr: &Address) -> B256 {
        self.hashed.hash(addr)
    }

    /// The state as written so far (read-your-writes).
    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn account(&self, addr: &Address) -> Option<Account> {
        self.state.account(addr)
    }

    pub fn try_account(&self, addr: &Address) -> Result<Option<Account>, StateError> {
        self.state.try_account(addr)
    }

    pub fn storage(&self, addr: &Address, slot: &B256) -> U256 {
        self.state.storage(addr, slot)
    }

    pub fn try_storage(&self, addr: &Address, slot: &B256) -> Result<U256, StateError> {
        self.state.try_storage(addr, slot)
    }

    /// Creates or updates an account (keeping its storage); `None` deletes it and its storage.
    pub fn set_account(&mut self, addr: &Address, account: Option<Account>) {
        let haddr = self.hash_address(addr);
        self.set_account_at(haddr, account);
    }

    /// [`Writer::set_account`] for each account in turn, the addresses hashed eight at a
    /// time (a block's writes are known together; one Keccak-f at a time was ~5% of a
    /// block's writes in the Paprika benchmark).
    pub fn set_accounts(&mut self, accounts: &[(Address, Option<Account>)]) {
        let addrs: Vec<&Address> = accounts.iter().map(|(a, _)| a).collect();
        let haddrs = self.hashed.hash_all(&addrs);
        self.state.prefetch_accounts(&haddrs);
        self.log.reserve(accounts.len());
        for ((_, account), haddr) in accounts.iter().zip(haddrs) {
            self.set_account_at(haddr, *account);
        }
    }

    fn set_account_at(&mut self, haddr: B256, account: Option<Account>) {
        if let Err(e) = self.state.set_account_hashed(&haddr, account) {
            self.error.get_or_insert(e);
            return;
        }
        let w = self.log.entry(haddr).or_default();
        if account.is_none() {
            w.wiped = true;
            w.storage.clear();
        }
        w.account = account;
    }

    /// Writes each account with the slots written with it: for `(address, account, slots)`,
    /// what [`Writer::set_account`] with `Some(account)` and then [`Writer::set_storage`] for
    /// each `(slot, value)` in order do (zero deletes a slot), in one walk down the account
    /// trie per account instead of two; keys hashed eight at a time as in
    /// [`Writer::set_accounts`] and [`Writer::set_storages`]. Deleting an account is
    /// [`Writer::set_accounts`]'s.
    ///
    /// Give a block's accounts in one call: from 64 accounts on, the subtrees under the
    /// account trie's root are written on this thread and the rayon pool's together
    /// (`State::set_accounts_with_storage_hashed`). A write that fails (a damaged store) is
    /// [`Writer::error`]'s; the writes below other nibbles of the root may have been made,
    /// and the log holds exactly those made.
    pub fn set_accounts_with_storage(&mut self, updates: &[AccountWithStorage]) {
        let addrs: Vec<&Address> = updates.iter().map(|(a, ..)| a).collect();
        let haddrs = self.hashed.hash_all(&addrs);
        // Each distinct slot hashed once (the same low slots recur across accounts).
        let mut distinct: Vec<&B256> = updates
            .iter()
            .flat_map(|(_, _, slots)| slots.iter().map(|(slot, _)| slot))
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        let hashes = keccak256_many(&distinct.iter().map(|s| &s[..]).collect::<Vec<_>>());
        let hash_of = |slot: &B256| hashes[distinct.binary_search(&slot).expect("collected")];
        let hashed: Vec<(B256, U256)> = updates
            .iter()
            .flat_map(|(_, _, slots)| slots.iter().map(|(slot, value)| (hash_of(slot), *value)))
            .collect();
        let mut at = 0;
        let items: Vec<AccountItem> = updates
            .iter()
            .zip(&haddrs)
            .map(|((_, account, slots), haddr)| {
                at += slots.len();
                (*haddr, *account, &hashed[at - slots.len()..at])
            })
            .collect();
        let (written, error) = self.state.set_accounts_with_storage_hashed(&items);
        if let Some(e) = error {
            self.error.get_or_insert(e);
        }
        // The log's entries after the trie's writes, in a loop of their own: each is a miss on
        // a cold bucket (the table is fresh memory every block), and here the next entries'
        // misses overlap with it instead of queueing behind a trie write each (1.75% of a
        // 10,000-block run's samples on that one load, session 47).
        self.log.reserve(updates.len());
        for ((haddr, account, slots), _) in items.iter().zip(written).filter(|(_, w)| *w) {
            let w = self.log.entry(*haddr).or_default();
            w.account = Some(*account);
            for (hslot, value) in slots.iter() {
                w.storage.insert(*hslot, *value);
            }
        }
    }

    /// Writes a storage slot of an existing account; zero deletes it.
    pub fn set_storage(
        &mut self,
        addr: &Address,
        slot: &B256,
        value: &U256,
    ) -> Result<(), StateError> {
        let haddr = self.hash_address(addr);
        let hslot = match self.last_slot {
            Some((s, h)) if s == *slot => h,
            _ => {
                let h = keccak256(slot);
                self.last_slot = Some((*slot, h));
                h
            }
        };
        self.set_storage_at(haddr, hslot, value)
    }

    /// [`Writer::set_storage`] for each `(address, slot, value)` in turn, addresses and slots
    /// hashed eight at a time (an address written recently, or a slot equal to the one
    /// before it, is not hashed again); stops at the first write that fails and returns its
    /// error, the writes before it applied.
    pub fn set_storages(&mut self, writes: &[(Address, B256, U256)]) -> Result<(), StateError> {
        let addrs: Vec<&Address> = writes.iter().map(|(a, _, _)| a).collect();
        let haddrs = self.hashed.hash_all(&addrs);
        // Only a slot that differs from the one before is hashed (runs of one slot are
        // common: slot 0 of many accounts).
        let last_slot = self.last_slot.map(|(s, _)| s);
        let starts_run = |i: usize| {
            if i == 0 {
                last_slot != Some(writes[0].1)
            } else {
                writes[i - 1].1 != writes[i].1
            }
        };
        let runs: Vec<&[u8]> = (0..writes.len())
            .filter(|&i| starts_run(i))
            .map(|i| &writes[i].1[..])
            .collect();
        let mut hslots = keccak256_many(&runs).into_iter();
        let mut hslot = self.last_slot.map_or([0u8; 32], |(_, h)| h);
        for (i, ((_, slot, value), haddr)) in writes.iter().zip(haddrs).enumerate() {
            if starts_run(i) {
                hslot = hslots.next().expect("one hash per run");
            }
            self.set_storage_at(haddr, hslot, value)?;
            self.last_slot = Some((*slot, hslot));
        }
        Ok(())
    }

    fn set_storage_at(&mut self, haddr: B256, hslot: B256, value: &U256) -> Result<(), StateError> {
        if let Err(e) = self.state.set_storage_hashed(&haddr, &hslot, value) {
            if matches!(e, StateError::Store(_)) {
                self.error.get_or_insert(e.clone());
            }
            return Err(e);
        }
        // A slot write leaves the account as it is: look it up only for a new log entry.
        let w = match self.log.entry(haddr) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let account = self.state.try_account_hashed(&haddr)?;
                e.insert(AccountWrite {
                    account,
                    ..Default::default()
                })
            }
        };
        w.storage.insert(hslot, *value);
        Ok(())
    }

    pub(crate) fn into_parts(self) -> Result<(State, WriteLog), StateError> {
        match self.error {
            Some(e) => Err(e),
            None => Ok((self.state, self.log)),
        }
    }

    /// The root of the state as written so far.
    pub fn root(&self) -> B256 {
        self.state.root()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SlotWrites` is a map from slot to value: any sequence of writes and clears leaves the
    /// entries (in order) a `BTreeMap` has after the same calls.
    #[test]
    fn slot_writes_are_a_map_in_slot_order() {
        let mut state = 7u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        for _ in 0..200 {
            let (mut w, mut want) = (SlotWrites::default(), BTreeMap::new());
            for _ in 0..next(6) {
                if next(8) == 0 {
                    w.clear();
                    want.clear();
                    continue;
                }
                let (slot, value) = ([next(4) as u8; 32], [next(256) as u8; 32]);
                w.insert(slot, value);
                want.insert(slot, value);
            }
            let got: Vec<(B256, U256)> = w.iter().map(|(s, v)| (*s, *v)).collect();
            let want: Vec<(B256, U256)> = want.into_iter().collect();
            assert_eq!(got, want);
            assert_eq!(w.len(), want.len());
            assert_eq!(w.is_empty(), want.is_empty());
            assert!(w.keys().copied().eq(want.iter().map(|e| e.0)));
            assert_eq!(
                want.iter().copied().collect::<SlotWrites>().iter().count(),
                want.len()
            );
        }
    }
}
