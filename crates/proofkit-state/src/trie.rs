//! The Merkle-Patricia trie of the Ethereum Yellow Paper (appendix D), as a persistent
//! (structurally shared) tree of reference-counted nodes, each caching its own node reference
//! (the keccak256 of its RLP, or the RLP itself when shorter than 32 bytes).
//!
//! * Paths are nibble strings; in the secure trie every key is the 64 nibbles of a keccak256,
//!   so branches never carry a value and no key is a prefix of another.
//! * Writes go through `Arc::make_mut` (`unique::make_mut`, its twin without a locked
//!   instruction): a node shared with an older version (a parent block) is copied, a node only
//!   this version holds is changed in place. Each write drops the cached
//!   reference of the nodes on its path, so computing the root after a block re-hashes only the
//!   paths the block wrote: the cost grows with the writes, not with the size of the state.
//! * Node encodings: leaf `[hp(path, leaf), value]`, extension `[hp(path), child]`, branch
//!   `[c0..c15, ""]`; a child whose RLP is shorter than 32 bytes is embedded, longer ones are
//!   referenced by hash; the root is always hashed.
//! * Paged: a subtree that lives in the page store is a *stored* node (a leaf or a branch) of
//!   which only the reference is in memory. Reading through one is the caller's business (the
//!   flat records of the store hold every key); writing through one loads it first from its
//!   position (a [`Loader`]), one node at a time, so a block loads only the nodes on its paths.
//!   [`Trie::pruned`] turns the subtrees below a depth back into stored nodes once they are in
//!   the store, so memory holds the top of the tree and the paths of unfinalized blocks only.
#![deny(unsafe_code)]

use crate::keccak::{keccak256, B256, EMPTY_ROOT};
use crate::rlp;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// A value stored in a leaf.
pub trait TrieValue: Clone + Send + Sync {
    /// Appends the bytes the leaf carries as its second item (itself RLP, e.g. an account list).
    fn leaf_bytes(&self, out: &mut Vec<u8>);

    /// Called with the values of the leaves about to be encoded together, so that work inside
    /// them (an account's storage root) can be batched first, on the threads `threads` says.
    fn prepare_batch(_values: &[&Self], _threads: Threads) {}

    /// The value as kept in memory once its node is in the store (an account leaf drops its
    /// storage trie down to the root's reference).
    fn pruned(&self) -> Self {
        self.clone()
    }

    /// Asks for the lines that dropping the value reads (a hint, for [`drop_subtrees`]).
    fn prefetch(&self) {}
}

/// Where a batch of nodes is encoded and hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threads {
    /// Each level's nodes shared out over the rayon pool.
    Pool,
    /// All on the calling thread (a piece of a larger job that is already shared out), unless
    /// the batch holds [`POOL_BATCH`] nodes or more.
    Caller,
}

/// Written nodes from which a batch is hashed on the pool whatever [`Threads`] says.
pub const POOL_BATCH: usize = 4096;

/// A node kept in the page store, of which memory holds only the reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredKind {
    Leaf,
    Branch,
}

/// Why a stored node could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("loading the trie node at path {path}: {reason}")]
pub struct LoadError {
    pub path: String,
    pub reason: String,
}

impl LoadError {
    pub fn new(path: &[u8], reason: impl Into<String>) -> Self {
        LoadError {
            path: path.iter().map(|n| format!("{n:x}")).collect(),
            reason: reason.into(),
        }
    }
}

/// Where stored nodes come from: the page store at the version the trie was built on.
pub trait Loader<V> {
    /// The node of `kind` at position `pos` (its nibble path from the root): a leaf with its
    /// remaining path and value, or a branch whose children are stored nodes (extensions
    /// below it already resolved).
    fn load(&self, pos: &[u8], kind: StoredKind) -> Result<LoadedNode<V>, LoadError>;

    /// Whether the key with the full nibble path `path` is present below a stored node.
    fn exists(&self, path: &[u8]) -> Result<bool, LoadError>;
}

/// A node as a [`Loader`] gives it.
pub enum LoadedNode<V> {
    Leaf { path: Nibbles, value: V },
    Branch { children: Box<Children<V>> },
}

/// A trie with no stored nodes needs no loader.
pub struct NoLoader;

impl<V> Loader<V> for NoLoader {
    fn load(&self, pos: &[u8], _: StoredKind) -> Result<LoadedNode<V>, LoadError> {
        Err(LoadError::new(
            pos,
            "a stored node in a trie without a store",
        ))
    }
    fn exists(&self, path: &[u8]) -> Result<bool, LoadError> {
        Err(LoadError::new(
            path,
            "a stored node in a trie without a store",
        ))
    }
}

/// What [`Trie::lookup`] finds.
pub enum Lookup<'a, V> {
    Found(&'a V),
    Absent,
    /// The key's path enters a stored node: the answer is in the store.
    Stored,
}

/// How a stored record refers to a child: a leaf or a branch by reference, or an extension by
/// its path and its branch's reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChildEntry {
    Leaf(NodeRef),
    Branch(NodeRef),
    Extension(Nibbles, NodeRef),
}

/// How a parent refers to a node: its hash, or its RLP when that is shorter than 32 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeRef {
    len: u8,
    buf: [u8; 32],
}

impl NodeRef {
    /// The reference of a node with RLP `rlp`.
    pub fn from_rlp(rlp: &[u8]) -> Self {
        if rlp.len() < 32 {
            let mut buf = [0u8; 32];
            buf[..rlp.len()].copy_from_slice(rlp);
            NodeRef {
                len: rlp.len() as u8,
                buf,
            }
        } else {
            NodeRef {
                len: 32,
                buf: keccak256(rlp),
            }
        }
    }

    /// True when the node is referenced by its hash (not embedded in its parent).
    pub fn is_hash(&self) -> bool {
        self.len == 32
    }

    /// The hash or the embedded RLP.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    /// A reference from its bytes (32: a hash; fewer: embedded RLP).
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.is_empty() || b.len() > 32 {
            return None;
        }
        let mut buf = [0u8; 32];
        buf[..b.len()].copy_from_slice(b);
        Some(NodeRef {
            len: b.len() as u8,
            buf,
        })
    }

    fn encoded_len(&self) -> usize {
        if self.is_hash() {
            33
        } else {
            self.len as usize
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        if self.is_hash() {
            rlp::encode_bytes(out, &self.buf);
        } else {
            out.extend_from_slice(self.bytes());
        }
    }
}

enum Node<V> {
    Leaf(Leaf<V>),
    Extension {
        path: Nibbles,
        child: Child<V>,
    },
    /// Boxed, so that leaves (most nodes) stay small.
    Branch {
        children: Box<Children<V>>,
    },
    /// Stands in for a node while it is rebuilt in place; never seen outside `Insertion::at_cell`
    /// and `remove_slot`.
    Hole,
}

/// A leaf node: the rest of its key's path, then its value. In this order (`repr(C)`): the
/// walks read a leaf's path (the records walk, encoding, a write's comparison) and most of them
/// not its value, and an account leaf's value is 184 bytes (its storage slot held inline): after
/// it, the path sat on the fourth and fifth lines of the cell, past the lines asked for ahead.
#[repr(C)]
struct Leaf<V> {
    path: Nibbles,
    value: V,
}

impl<V: Clone> Clone for Node<V> {
    fn clone(&self) -> Self {
        match self {
            Node::Leaf(Leaf { path, value }) => Node::Leaf(Leaf {
                path: path.clone(),
                value: value.clone(),
            }),
            Node::Extension { path, child } => Node::Extension {
                path: path.clone(),
                child: child.clone(),
            },
            Node::Branch { children } => {
                // Copying a branch (every write copies the branches on its path that older
                // versions share) counts one more owner of each child in memory: 16 locked
                // increments, each on a line of its own that is rarely in cache, and a locked
                // instruction waits for the one before it. The lines are requested together
                // first, so that the misses overlap.
                prefetch_counts(children);
                Node::Branch {
                    children: children.clone(),
                }
            }
            Node::Hole => Node::Hole,
        }
    }
}

/// Where a parent (or the trie) holds a node: in memory, or in the page store. A stored node
/// is only its kind and reference, held inline in its parent: loading a branch allocates
/// nothing for its stored children, and encoding a branch reads their references from the
/// branch itself instead of from one heap cell per child (the profile's memory stalls).
///
/// A child in memory carries a copy of its reference in its parent's slot ([`CopyLen`],
/// [`CopyHash`]), so that encoding a branch reads the references of its unchanged children
/// from its own children's box instead of from each child's cell: a branch above the cached
/// levels has up to 16 children in memory, and their cells are cold (4.2% of a 10,000-block
/// run's samples asked for them, and the encoding waited on them).
pub enum Child<V> {
    /// The node, and the copy of its reference (none until the parent is next encoded). Code
    /// that changes the cell takes it through [`Child::cell_mut`], which drops the copy (or
    /// [`Child::cell_mut_same_ref`] for a change that keeps the reference). The fields are
    /// open to this module, so that is a rule of the module, checked by the tests (a copy
    /// left stale fails `copied_child_references_follow_every_change` and the oracle tests),
    /// not one the compiler enforces.
    Mem(Arc<Cell<V>>, CopyLen, CopyHash),
    Stored(StoredKind, NodeRef),
}

/// The length of the reference copied in a [`Child::Mem`] slot: 0 for none, else 1-32. Apart
/// from [`CopyHash`] (not one struct) so that a slot stays 48 bytes: the enum's tag, this byte,
/// the 32 bytes and the pointer (a struct of both, padded to 40 bytes, made the slot 56).
///
/// Its top bits say that the child is in the store and of which kind ([`SLOT_STORED`],
/// [`SLOT_BRANCH`]; see [`CopyLen::mark_stored`]).
pub struct CopyLen(AtomicU8);

/// The bits of a [`CopyLen`] that hold the copy's length.
const COPY_LEN_BITS: u8 = 0x3f;
/// In a [`CopyLen`] with a copy: the child's record is in the store (set by the records walk
/// as it marks the child's cell [`STORED`]), so that pruning can replace the child by a stored
/// node from its slot alone, without reading its cold cell. Cleared with the copy by
/// [`Child::cell_mut`], as any change of the child drops it.
const SLOT_STORED: u8 = 0x80;
/// With [`SLOT_STORED`]: the child is a branch (else a leaf).
const SLOT_BRANCH: u8 = 0x40;

/// The bytes of the reference copied in a [`Child::Mem`] slot (see [`CopyLen`]). Set through a
/// shared slot by whichever thread first encodes the parent (every setter writes the same
/// bytes: the child cannot change while the slot is shared), the bytes first and the length
/// last, with release and acquire ordering between them.
pub struct CopyHash([AtomicU64; 4]);

/// A cell's cached reference: the same scheme as a slot's copy ([`CopyLen`], [`CopyHash`]),
/// set through a shared cell by whichever thread hashes the node, every setter writing the
/// same bytes (a shared node cannot change), the bytes first and the length last with release
/// and acquire ordering. Cleared only through `&mut`. A `OnceLock` took two locked
/// instructions per set; without them the runs measured the same (the wait moved to the next
/// cold read, sessions 39 and 43), so this is kept for the one scheme, not for speed.
struct RefCache {
    len: CopyLen,
    hash: CopyHash,
}

impl RefCache {
    fn new() -> Self {
        RefCache {
            len: CopyLen(AtomicU8::new(0)),
            hash: CopyHash(Default::default()),
        }
    }

    fn with(r: NodeRef) -> Self {
        let cache = RefCache::new();
        cache.set(r);
        cache
    }

    fn get(&self) -> Option<NodeRef> {
        copied_ref(&self.len, &self.hash)
    }

    fn is_set(&self) -> bool {
        // The length bits, as a slot's copy reads them (a cell's cache never carries the
        // stored marks, but one encoding of "set" for both).
        self.len.0.load(Ordering::Acquire) & COPY_LEN_BITS != 0
    }

    fn set(&self, r: NodeRef) {
        copy_ref(&self.len, &self.hash, &r);
    }

    fn get_or_init(&self, f: impl FnOnce() -> NodeRef) -> NodeRef {
        self.get().unwrap_or_else(|| {
            let r = f();
            self.set(r);
            r
        })
    }
}

impl<V> Child<V> {
    /// A child in memory, without a copy of its reference yet.
    fn mem(cell: Arc<Cell<V>>) -> Self {
        Child::mem_with_copy(cell, None)
    }

    /// A child in memory whose reference is known (`None`: not yet).
    fn mem_with_copy(cell: Arc<Cell<V>>, r: Option<NodeRef>) -> Self {
        let (len, hash) = (CopyLen(AtomicU8::new(0)), CopyHash(Default::default()));
        if let Some(r) = r {
            copy_ref(&len, &hash, &r);
        }
        Child::Mem(cell, len, hash)
    }

    /// The cell of a child in memory, to change: drops the copy of its reference, which the
    /// change may make stale.
    fn cell_mut(&mut self) -> Option<&mut Arc<Cell<V>>> {
        match self {
            Child::Mem(cell, len, _) => {
                *len.0.get_mut() = 0;
                Some(cell)
            }
            Child::Stored(..) => None,
        }
    }

    /// [`Child::cell_mut`] for a change that keeps the node's reference (pruning replaces
    /// stored children by their references; the node encodes the same).
    fn cell_mut_same_ref(&mut self) -> Option<&mut Arc<Cell<V>>> {
        match self {
            Child::Mem(cell, ..) => Some(cell),
            Child::Stored(..) => None,
        }
    }
}

impl CopyLen {
    /// No copy.
    pub(crate) fn none() -> Self {
        CopyLen(AtomicU8::new(0))
    }

    /// Whether the slot holds a copy (a hint's test: no ordering with the bytes).
    fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed) & COPY_LEN_BITS != 0
    }

    /// Marks the child of a slot with a copy as stored, of kind `kind` (nothing without a
    /// copy: pruning needs the reference). A release store after an acquire load, so that a
    /// thread that sees the mark sees the copy's bytes (whoever wrote them).
    pub(crate) fn mark_stored(&self, kind: StoredKind) {
        let v = self.0.load(Ordering::Acquire);
        if v & COPY_LEN_BITS != 0 {
            let bits = match kind {
                StoredKind::Leaf => SLOT_STORED,
                StoredKind::Branch => SLOT_STORED | SLOT_BRANCH,
            };
            self.0.store(v | bits, Ordering::Release);
        }
    }

    /// The kind of the child, if [`CopyLen::mark_stored`] marked it stored.
    pub(crate) fn stored_kind(&self) -> Option<StoredKind> {
        let v = self.0.load(Ordering::Relaxed);
        match (v & SLOT_STORED != 0, v & SLOT_BRANCH != 0) {
            (false, _) => None,
            (true, false) => Some(StoredKind::Leaf),
            (true, true) => Some(StoredKind::Branch),
        }
    }
}

/// A copy and its marks as they are, for a value that carries one beside its own data
/// ([`crate::storage_trie::OneSlot`]; a slot's clone takes the reference only).
pub(crate) fn duplicate_copy(len: &CopyLen, hash: &CopyHash) -> (CopyLen, CopyHash) {
    let v = len.0.load(Ordering::Acquire);
    let words = std::array::from_fn(|i| AtomicU64::new(hash.0[i].load(Ordering::Relaxed)));
    (CopyLen(AtomicU8::new(v)), CopyHash(words))
}

impl CopyHash {
    /// No bytes yet.
    pub(crate) fn none() -> Self {
        CopyHash(Default::default())
    }
}

/// The copy of a child's reference in its slot, if set.
pub(crate) fn copied_ref(len: &CopyLen, hash: &CopyHash) -> Option<NodeRef> {
    let n = len.0.load(Ordering::Acquire) & COPY_LEN_BITS;
    if n == 0 {
        return None;
    }
    let mut buf = [0u8; 32];
    for (b, w) in buf.chunks_exact_mut(8).zip(&hash.0) {
        b.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
    Some(NodeRef { len: n, buf })
}

/// Sets the copy of a child's reference in its slot.
pub(crate) fn copy_ref(len: &CopyLen, hash: &CopyHash, r: &NodeRef) {
    for (b, w) in r.buf.chunks_exact(8).zip(&hash.0) {
        w.store(
            u64::from_le_bytes(b.try_into().expect("8 bytes")),
            Ordering::Relaxed,
        );
    }
    len.0.store(r.len, Ordering::Release);
}

impl<V> Clone for Child<V> {
    fn clone(&self) -> Self {
        match self {
            Child::Mem(c, len, hash) => Child::mem_with_copy(c.clone(), copied_ref(len, hash)),
            Child::Stored(kind, r) => Child::Stored(*kind, *r),
        }
    }
}

/// The longest RLP of a branch: a list header of 3 bytes, 16 references of at most 33 bytes
/// (a hash with its prefix) and the empty value.
const BRANCH_RLP_MAX: usize = 3 + 16 * 33 + 1;

/// The 16 children of a branch.
pub type Children<V> = [Option<Child<V>>; 16];

/// The node's record is in the store as it is (its subtree too).
const STORED: u8 = 1;
/// The subtree below the pruning depth is stored nodes only.
const PRUNED: u8 = 2;

/// A node and its cached reference.
///
/// In this order (`repr(C)`): the flags and the cached reference share the first line of the
/// `Arc`'s allocation with its counts, and a branch's kind and children box sit on the next,
/// the other line of the same 128-byte pair (an account-trie cell's allocation is 256 bytes,
/// so aligned; a storage-trie cell's is smaller and its lines may fall otherwise). The
/// walks read the counts, the flags, the reference and the kind of cells that are mostly
/// cold; in the order the compiler chose, those were the first and the fourth line.
#[repr(C)]
pub struct Cell<V> {
    flags: AtomicU8,
    /// A branch's slots whose child may lack a cached reference (a superset): the slots
    /// written through this node since it last had a reference of its own. The walk that
    /// collects a root's unhashed nodes looks only at these children instead of loading
    /// every child's cell (16 lines, mostly cold, per branch on a write path).
    dirty_slots: u16,
    /// A branch's slots whose child may be in memory and not pruned (a superset): the slots
    /// written through this node since it was last pruned, and those pruning had to leave
    /// (nodes the store did not hold yet). Pruning visits only these children.
    unpruned_slots: u16,
    /// A branch's slots whose child in memory the records walk passed since the last pruning
    /// (every slot for a node built or loaded since). Pruning visits only the unpruned slots
    /// among these: a path written after the walk holds nothing the walk stored, and pruning
    /// ran just before each walk, so it went down every path of the batch being finalized and
    /// found only unstored nodes there (40% of its samples at 10,000 blocks, session 39). Set
    /// by the walk through shared cells, hence atomic.
    walked_slots: AtomicU16,
    cached: RefCache,
    node: Node<V>,
}

/// The slots in `mask` whose child is in memory.
fn mem_slots<V>(children: &Children<V>, mask: u16) -> u16 {
    slots_in(mask)
        .filter(|&i| matches!(children[i], Some(Child::Mem(..))))
        .fold(0, |bits, i| bits | 1 << i)
}

/// Every slot: for a node built whole, whose children are not known to be hashed or pruned.
const ALL_SLOTS: u16 = u16::MAX;

/// The slots set in `mask`, in order.
fn slots_in(mut mask: u16) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            i
        })
    })
}

impl<V: Clone> Clone for Cell<V> {
    fn clone(&self) -> Self {
        // The copy is about to be changed: it starts without a cached reference.
        let (dirty_slots, unpruned_slots) = self.slots_before_change();
        Cell {
            node: self.node.clone(),
            cached: RefCache::new(),
            flags: AtomicU8::new(0),
            dirty_slots,
            unpruned_slots,
            walked_slots: AtomicU16::new(self.walked_slots.load(Ordering::Relaxed)),
        }
    }
}

impl<V> Drop for Cell<V> {
    fn drop(&mut self) {
        // Dropping a branch releases each child in memory: a locked decrement on the child's
        // counts, a line of its own that is rarely in cache (a retired block's branches are
        // mostly copies whose children the next block still holds). As in `clone`, the lines
        // are requested together first, so that the misses overlap instead of queueing
        // behind one another; the fields are then dropped as usual.
        if let Node::Branch { children } = &self.node {
            prefetch_counts(children);
        }
    }
}

/// Asks for the lines holding the counts of a branch's children in memory; a hint only.
fn prefetch_counts<V>(children: &Children<V>) {
    for c in children.iter().flatten() {
        if let Child::Mem(c, ..) = c {
            // The counts sit just before the value in an `Arc`'s allocation (a wrong guess
            // costs nothing but the hint).
            proofkit_core::memory::prefetch_address(
                Arc::as_ptr(c).cast::<u8>(),
                0usize.wrapping_sub(16),
            );
        }
    }
}

impl<V> Cell<V> {
    fn new(node: Node<V>) -> Arc<Self> {
        Arc::new(Cell {
            node,
            cached: RefCache::new(),
            flags: AtomicU8::new(0),
            dirty_slots: ALL_SLOTS,
            unpruned_slots: ALL_SLOTS,
            walked_slots: AtomicU16::new(ALL_SLOTS),
        })
    }

    /// A stored node loaded to be changed at once: as [`Cell::touch`] leaves a node loaded
    /// with [`Cell::clean`] (no reference, not stored, no slot dirty, every slot unpruned).
    fn loaded_for_write(node: Node<V>) -> Self {
        Cell {
            flags: AtomicU8::new(0),
            dirty_slots: 0,
            unpruned_slots: ALL_SLOTS,
            walked_slots: AtomicU16::new(ALL_SLOTS),
            cached: RefCache::new(),
            node,
        }
    }

    /// A node whose reference is known and whose record is in the store.
    fn clean(node: Node<V>, r: NodeRef, flags: u8) -> Arc<Self> {
        Arc::new(Cell {
            node,
            cached: RefCache::with(r),
            flags: AtomicU8::new(flags),
            dirty_slots: 0,
            unpruned_slots: if flags & PRUNED != 0 { 0 } else { ALL_SLOTS },
            walked_slots: AtomicU16::new(ALL_SLOTS),
        })
    }

    fn has(&self, flag: u8) -> bool {
        self.flags.load(Ordering::Relaxed) & flag != 0
    }

    /// The slot masks a copy or an in-place change of this node starts from: a node with a
    /// reference had every child hashed, so no slot is dirty; a pruned node's children are
    /// all pruned or stored, so none is unpruned; otherwise the slots written so far.
    fn slots_before_change(&self) -> (u16, u16) {
        (
            if self.cached.is_set() {
                0
            } else {
                self.dirty_slots
            },
            if self.has(PRUNED) {
                0
            } else {
                self.unpruned_slots
            },
        )
    }

    /// About to change: its reference and store state no longer hold.
    fn touch(&mut self) {
        (self.dirty_slots, self.unpruned_slots) = self.slots_before_change();
        self.cached = RefCache::new();
        *self.flags.get_mut() = 0;
    }

    /// Slots `written` through this node: their children may now be unhashed and unpruned.
    fn written(&mut self, written: u16) {
        self.dirty_slots |= written;
        self.unpruned_slots |= written;
    }

    /// The slots pruning visits: the unpruned ones the records walk passed.
    fn prunable_slots(&self) -> u16 {
        self.unpruned_slots & self.walked_slots.load(Ordering::Relaxed)
    }

    /// Notes that the records walk passed this branch's children in `mask` that are in
    /// memory (`children` is this branch's box). A plain store, not a locked `or`: while the
    /// walk runs it is the only writer of the cells it visits (see `DirtyWalk::child`).
    fn walked(&self, children: &Children<V>, mask: u16) {
        let bits = mem_slots(children, mask);
        let old = self.walked_slots.load(Ordering::Relaxed);
        if old | bits != old {
            self.walked_slots.store(old | bits, Ordering::Relaxed);
        }
    }
}

/// The child for an entry of a stored record: a leaf or a branch stays in the store; an
/// extension is a cell (over its stored branch).
pub fn entry_child<V: TrieValue>(e: &ChildEntry) -> Child<V> {
    match e {
        ChildEntry::Leaf(r) => Child::Stored(StoredKind::Leaf, *r),
        ChildEntry::Branch(r) => Child::Stored(StoredKind::Branch, *r),
        ChildEntry::Extension(path, r) => {
            let c = Arc::new(Cell {
                node: Node::Extension {
                    path: path.clone(),
                    child: Child::Stored(StoredKind::Branch, *r),
                },
                cached: RefCache::new(),
                flags: AtomicU8::new(STORED | PRUNED),
                dirty_slots: 0,
                unpruned_slots: 0,
                walked_slots: AtomicU16::new(0),
            });
            node_ref(&c);
            Child::mem(c)
        }
    }
}

/// The reference of a child (cached or computed for one in memory).
fn child_ref<V: TrieValue>(c: &Child<V>) -> NodeRef {
    match c {
        Child::Stored(_, r) => *r,
        Child::Mem(c, len, hash) => copied_ref(len, hash).unwrap_or_else(|| {
            let r = node_ref(c);
            copy_ref(len, hash, &r);
            r
        }),
    }
}

/// A trie version; cloning is O(1) and shares every node.
pub struct Trie<V> {
    root: Option<Child<V>>,
}

impl<V> Clone for Trie<V> {
    fn clone(&self) -> Self {
        Trie {
            root: self.root.clone(),
        }
    }
}

impl<V> Default for Trie<V> {
    fn default() -> Self {
        Trie { root: None }
    }
}

/// The 64 nibbles of a 32-byte key.
pub fn nibbles(key: &B256) -> [u8; 64] {
    let mut n = [0u8; 64];
    for (i, b) in key.iter().enumerate() {
        n[2 * i] = b >> 4;
        n[2 * i + 1] = b & 15;
    }
    n
}

pub(crate) fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn concat(a: &[u8], b: &[u8]) -> Nibbles {
    let mut n = Nibbles::from(a);
    n.extend_from_slice(b);
    n
}

/// A node's path (one nibble a byte, at most 64: the nibbles of a 32-byte key), held inline in
/// the node: a heap buffer per leaf was two of the allocations (and frees, when the leaf is
/// pruned) of every account and slot a block writes.
#[derive(Clone, PartialEq, Eq)]
pub struct Nibbles {
    len: u8,
    n: [u8; 64],
}

impl Nibbles {
    /// Appends `more` (the path stays at most 64 nibbles: the keys are 32 bytes).
    fn extend_from_slice(&mut self, more: &[u8]) {
        let at = self.len as usize;
        self.n[at..at + more.len()].copy_from_slice(more);
        self.len += more.len() as u8;
    }
}

impl From<&[u8]> for Nibbles {
    /// Panics past 64 nibbles (no path of a 32-byte key is longer).
    fn from(p: &[u8]) -> Self {
        let mut n = [0; 64];
        n[..p.len()].copy_from_slice(p);
        Nibbles {
            len: p.len() as u8,
            n,
        }
    }
}

impl std::ops::Deref for Nibbles {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.n[..self.len as usize]
    }
}

impl std::fmt::Debug for Nibbles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Hex-prefix encoding (Yellow Paper appendix C).
pub fn hex_prefix(path: &[u8], leaf: bool) -> Vec<u8> {
    HexPrefix::new(path, leaf).as_slice().to_vec()
}

/// A hex-prefix encoding, held inline for the paths of 32-byte keys (at most 64 nibbles: 33
/// bytes) and on the heap for longer ones (the public encoders take any path). Nodes are
/// encoded for every changed node of every block, and a heap buffer per node was one of the
/// commonest allocations of a block.
struct HexPrefix {
    inline: [u8; 33],
    long: Vec<u8>,
    len: usize,
}

impl HexPrefix {
    fn new(path: &[u8], leaf: bool) -> HexPrefix {
        let len = path.len() / 2 + 1;
        let mut hp = HexPrefix {
            inline: [0u8; 33],
            long: if len > 33 { vec![0u8; len] } else { Vec::new() },
            len,
        };
        let out = if len > 33 {
            &mut hp.long[..]
        } else {
            &mut hp.inline[..len]
        };
        let flag = if leaf { 2u8 } else { 0 };
        let rest = if path.len() % 2 == 1 {
            out[0] = ((flag | 1) << 4) | path[0];
            &path[1..]
        } else {
            out[0] = flag << 4;
            path
        };
        for (o, pair) in out[1..].iter_mut().zip(rest.chunks(2)) {
            *o = (pair[0] << 4) | pair[1];
        }
        hp
    }

    fn as_slice(&self) -> &[u8] {
        if self.len > 33 {
            &self.long
        } else {
            &self.inline[..self.len]
        }
    }
}

/// Decodes hex-prefix bytes into (nibbles, is_leaf); `None` for a bad flag.
pub fn decode_hex_prefix(hp: &[u8]) -> Option<(Vec<u8>, bool)> {
    let &first = hp.first()?;
    let flag = first >> 4;
    if flag > 3 {
        return None;
    }
    let mut out = Vec::with_capacity(hp.len() * 2);
    if flag & 1 == 1 {
        out.push(first & 15);
    } else if first & 15 != 0 {
        return None;
    }
    for b in &hp[1..] {
        out.push(b >> 4);
        out.push(b & 15);
    }
    Some((out, flag & 2 == 2))
}

impl<V: TrieValue> Trie<V> {
    pub fn new() -> Self {
        Trie { root: None }
    }

    pub fn is_empty(&self) -> bool {
        self.root.is_none()
    }

    /// A trie whose root is the stored record entry `e` (`None`: empty).
    pub fn from_entry(e: Option<&ChildEntry>) -> Self {
        Trie {
            root: e.map(entry_child),
        }
    }

    /// How the root would be named in a stored record (`None` when empty).
    pub fn root_entry(&self) -> Option<ChildEntry> {
        self.root.as_ref().map(child_entry)
    }

    /// The value at `path`, as far as memory holds the trie.
    pub fn lookup(&self, path: &[u8]) -> Lookup<'_, V> {
        let Some(mut cur) = self.root.as_ref() else {
            return Lookup::Absent;
        };
        let mut path = path;
        loop {
            let Child::Mem(cell, ..) = cur else {
                return Lookup::Stored;
            };
            match &cell.node {
                Node::Hole => return Lookup::Absent,
                Node::Leaf(Leaf { path: p, value }) => {
                    return if **p == *path {
                        Lookup::Found(value)
                    } else {
                        Lookup::Absent
                    }
                }
                Node::Extension { path: p, child } => {
                    let Some(rest) = path.strip_prefix(&**p) else {
                        return Lookup::Absent;
                    };
                    path = rest;
                    cur = child;
                }
                Node::Branch { children } => {
                    let Some((&i, rest)) = path.split_first() else {
                        return Lookup::Absent;
                    };
                    let Some(c) = children[i as usize].as_ref() else {
                        return Lookup::Absent;
                    };
                    cur = c;
                    path = rest;
                }
            }
        }
    }

    /// The value at `path` of a trie held wholly in memory (`None` too when the path enters a
    /// stored node: use [`Trie::lookup`] for a paged trie).
    pub fn get(&self, path: &[u8]) -> Option<&V> {
        match self.lookup(path) {
            Lookup::Found(v) => Some(v),
            _ => None,
        }
    }

    /// The depths `d` on the way to `path` at which no branch sits at `path[..d]`, down to the
    /// first stored node (whose subtree is unchanged): where a removal may have left a stale
    /// branch record.
    pub fn stale_positions(&self, path: &[u8]) -> Vec<usize> {
        let mut out = Vec::new();
        let mut cur = self.root.as_ref();
        let mut d = 0;
        while let Some(c) = cur {
            let Child::Mem(c, ..) = c else {
                return out;
            };
            match &c.node {
                Node::Branch { children } => {
                    cur = children[path[d] as usize].as_ref();
                    d += 1;
                }
                Node::Extension { path: p, child } => {
                    if !path[d..].starts_with(p) {
                        break;
                    }
                    out.extend(d..d + p.len());
                    d += p.len();
                    cur = Some(child);
                }
                Node::Leaf(..) | Node::Hole => break,
            }
        }
        out.extend(d..path.len());
        out
    }

    /// Nodes held in memory (stored nodes count one each; values' own tries not counted).
    pub fn nodes_in_memory(&self) -> usize {
        self.root.as_ref().map_or(0, |r| count_nodes(r, 1))
    }

    /// Whether a branch sits at position `pos` (memory only: `false` inside stored subtrees).
    pub fn lookup_branch(&self, pos: &[u8]) -> bool {
        let Some(mut cur) = self.root.as_ref() else {
            return false;
        };
        let mut path = pos;
        loop {
            let Child::Mem(cell, ..) = cur else {
                return false;
            };
            match &cell.node {
                Node::Branch { children } => match path.split_first() {
                    None => return true,
                    Some((&i, rest)) => match children[i as usize].as_ref() {
                        Some(c) => {
                            cur = c;
                            path = rest;
                        }
                        None => return false,
                    },
                },
                Node::Extension { path: p, child } => match path.strip_prefix(&**p) {
                    Some(rest) => {
                        cur = child;
                        path = rest;
                    }
                    None => return false,
                },
                _ => return false,
            }
        }
    }

    /// Whether `path` is present, asking the loader where memory does not know.
    pub fn contains(&self, path: &[u8], loader: &dyn Loader<V>) -> Result<bool, LoadError> {
        match self.lookup(path) {
            Lookup::Found(_) => Ok(true),
            Lookup::Absent => Ok(false),
            Lookup::Stored => loader.exists(path),
        }
    }

    /// A hint before writes to many `paths`: walks them down the nodes in memory together,
    /// half a level at a time (a node, then its children array, which a write copies when the
    /// node is shared), prefetching what each next step reads, so that the paths' cache misses overlap
    /// instead of each write waiting for its own, one level after another. Stops at stored
    /// nodes (the store has [`crate::store::Snapshot::prefetch_many`]); changes nothing.
    /// Returns, for each path, the stored node its write will load first: its depth (the
    /// length of its position) and kind.
    pub fn prefetch_paths(&self, paths: &[&[u8]]) -> Vec<Option<(usize, StoredKind)>> {
        prefetch_paths_at(&self.root, 0, paths)
    }

    /// The root branch's children, for writes below them on several threads (each slot's
    /// subtree apart: [`upsert_below`], [`prefetch_paths_below`]): the root made writable
    /// first (copied when shared, loaded when stored, its reference dropped) and its slots in
    /// `written` marked written, as the writes through it would. `None` (nothing changed)
    /// when the root is not a branch.
    pub fn root_children_for_write(
        &mut self,
        written: u16,
        loader: &dyn Loader<V>,
    ) -> Result<Option<&mut Children<V>>, LoadError> {
        let is_branch = match &self.root {
            Some(Child::Stored(kind, _)) => *kind == StoredKind::Branch,
            Some(Child::Mem(c, ..)) => matches!(c.node, Node::Branch { .. }),
            None => false,
        };
        let Some(root) = self.root.as_mut().filter(|_| is_branch) else {
            return Ok(None);
        };
        let cell = materialize_for_write(root, &[], loader)?;
        cell.written(written);
        match &mut cell.node {
            Node::Branch { children } => Ok(Some(children)),
            _ => unreachable!("a branch above"),
        }
    }
}

/// [`Trie::upsert_with`] for a path whose first nibble's slot in the root branch is `slot`
/// (one of [`Trie::root_children_for_write`]'s children, marked written there).
pub fn upsert_below<V: TrieValue>(
    slot: &mut Option<Child<V>>,
    path: &[u8],
    value: V,
    loader: &dyn Loader<V>,
    merge: fn(V, V) -> V,
    then: &mut dyn FnMut(&mut V) -> Result<(), LoadError>,
) -> Result<(), LoadError> {
    let mut pos = Vec::with_capacity(64);
    pos.push(path[0]);
    Insertion {
        pos,
        loader,
        merge,
        then,
    }
    .at_slot(slot, &path[1..], value)
}

/// [`Trie::prefetch_paths`] for paths whose first nibble's slot in the root branch is `slot`.
pub fn prefetch_paths_below<V>(
    slot: &Option<Child<V>>,
    paths: &[&[u8]],
) -> Vec<Option<(usize, StoredKind)>> {
    prefetch_paths_at(slot, 1, paths)
}

/// [`Trie::prefetch_paths`] from `slot`, the child at depth `depth` on every path.
fn prefetch_paths_at<V>(
    slot: &Option<Child<V>>,
    depth: usize,
    paths: &[&[u8]],
) -> Vec<Option<(usize, StoredKind)>> {
    match slot {
        Some(Child::Mem(c, ..)) => {
            prefetch_cell(c);
            prefetch_paths_from(
                paths.iter().map(|_| Some(At::Node(c, depth))).collect(),
                paths,
            )
        }
        Some(Child::Stored(kind, _)) => vec![Some((depth, *kind)); paths.len()],
        None => vec![None; paths.len()],
    }
}

/// Where [`prefetch_paths_from`] is on a path: at a node, at depth `d`, or at the slot of a
/// children array that the path's nibble `d` names.
enum At<'a, V> {
    Node(&'a Cell<V>, usize),
    Slot(&'a Children<V>, usize),
}

/// [`Trie::prefetch_paths`] from the cursors `at`, one a path.
fn prefetch_paths_from<'a, V>(
    mut at: Vec<Option<At<'a, V>>>,
    paths: &[&[u8]],
) -> Vec<Option<(usize, StoredKind)>> {
    let mut stored = vec![None; paths.len()];
    let mut moving = true;
    while moving {
        moving = false;
        for ((cursor, path), stored) in at.iter_mut().zip(paths).zip(&mut stored) {
            let next = match cursor.take() {
                None => None,
                Some(At::Node(cell, d)) => match &cell.node {
                    Node::Branch { children } if d < path.len() => {
                        // The slot the write goes through (a write copies the whole
                        // array when the node is shared, which a block that took its
                        // parent's trie over seldom finds).
                        prefetch_slots(cell, 1 << path[d]);
                        Some(At::Slot(children, d))
                    }
                    Node::Extension { path: p, child } if path[d..].starts_with(p) => match child {
                        Child::Mem(c, ..) => {
                            prefetch_cell(c);
                            Some(At::Node(c, d + p.len()))
                        }
                        Child::Stored(kind, _) => {
                            *stored = Some((d + p.len(), *kind));
                            None
                        }
                    },
                    _ => None,
                },
                Some(At::Slot(children, d)) => match &children[path[d] as usize] {
                    Some(Child::Mem(c, ..)) => {
                        prefetch_cell(c);
                        Some(At::Node(c, d + 1))
                    }
                    Some(Child::Stored(kind, _)) => {
                        *stored = Some((d + 1, *kind));
                        None
                    }
                    None => None,
                },
            };
            moving |= next.is_some();
            *cursor = next;
        }
    }
    stored
}

impl<V: TrieValue> Trie<V> {
    /// The value at `path` for changing in place: nodes on the path shared with other versions
    /// are copied first (stored ones loaded), and their cached references dropped; `None` when
    /// absent (nothing is copied then).
    pub fn get_mut(
        &mut self,
        path: &[u8],
        loader: &dyn Loader<V>,
    ) -> Result<Option<&mut V>, LoadError> {
        if !self.contains(path, loader)? {
            return Ok(None);
        }
        let root = self.root.as_mut().expect("present, so not empty");
        get_mut_at(root, &mut Vec::with_capacity(64), path, loader)
    }

    /// [`Trie::get_mut`] in one walk, for a key the caller expects present: the nodes on the
    /// path are copied and their references dropped on the way down, so an absent key leaves
    /// them copied (their contents unchanged: the same root, rehashed). `get_mut` first walks
    /// the path to look the key up; a slot write after its account's write walked the
    /// account trie three times (session 43).
    pub fn find_mut(
        &mut self,
        path: &[u8],
        loader: &dyn Loader<V>,
    ) -> Result<Option<&mut V>, LoadError> {
        match self.root.as_mut() {
            None => Ok(None),
            Some(root) => get_mut_at(root, &mut Vec::with_capacity(64), path, loader),
        }
    }

    /// Sets the value at `path` (all keys of one trie must have the same length).
    pub fn insert(
        &mut self,
        path: &[u8],
        value: V,
        loader: &dyn Loader<V>,
    ) -> Result<(), LoadError> {
        self.upsert(path, value, loader, |_, new| new)
    }

    /// [`Trie::insert`], except that a value already at `path` becomes `merge(old, value)`:
    /// one walk down the path where a [`Trie::get_mut`] and then an insert would take two (and
    /// a store lookup of the key to tell that it is absent).
    pub fn upsert(
        &mut self,
        path: &[u8],
        value: V,
        loader: &dyn Loader<V>,
        merge: fn(V, V) -> V,
    ) -> Result<(), LoadError> {
        self.upsert_with(path, value, loader, merge, &mut |_| Ok(()))
    }

    /// [`Trie::upsert`], then `then` on the value at `path` (merged or new) before it is put
    /// in its leaf: an account written with its slots in one walk. An error from `then` is
    /// returned once the trie is whole again, the value as `then` left it.
    pub fn upsert_with(
        &mut self,
        path: &[u8],
        value: V,
        loader: &dyn Loader<V>,
        merge: fn(V, V) -> V,
        then: &mut dyn FnMut(&mut V) -> Result<(), LoadError>,
    ) -> Result<(), LoadError> {
        Insertion {
            pos: Vec::with_capacity(64),
            loader,
            merge,
            then,
        }
        .at_slot(&mut self.root, path, value)
    }

    /// Removes the value at `path`; returns whether it was present.
    pub fn remove(&mut self, path: &[u8], loader: &dyn Loader<V>) -> Result<bool, LoadError> {
        if !self.contains(path, loader)? {
            return Ok(false);
        }
        remove_slot(&mut self.root, &mut Vec::with_capacity(64), path, loader)?;
        Ok(true)
    }

    /// The root hash (the empty-trie root when empty), hashing the nodes written since the last
    /// call: the root's written subtrees on this thread and the rayon pool's (`hash_dirty`).
    pub fn root_hash(&self) -> B256 {
        match &self.root {
            None => EMPTY_ROOT,
            Some(child) => {
                if let Child::Mem(cell, ..) = child {
                    if !cell.cached.is_set() {
                        hash_dirty(cell);
                    }
                }
                let r = child_ref(child);
                if r.is_hash() {
                    r.buf
                } else {
                    keccak256(r.bytes())
                }
            }
        }
    }

    /// The RLP of the nodes on the way to `path` that are referenced by hash (the root first), as
    /// `eth_getProof` lists them; embedded nodes are inside their parents. Stored nodes on the
    /// way are loaded (and not kept).
    pub fn proof(&self, path: &[u8], loader: &dyn Loader<V>) -> Result<Vec<Vec<u8>>, LoadError> {
        let mut out = Vec::new();
        let Some(mut next) = self.root.clone() else {
            return Ok(out);
        };
        let mut pos = Vec::with_capacity(64);
        let mut first = true;
        loop {
            let cur = resolve(&next, &pos, loader)?;
            if first || node_ref(&cur).is_hash() {
                let mut rlp = Vec::new();
                encode(&cur, &mut rlp);
                out.push(rlp);
            }
            first = false;
            let rest = &path[pos.len()..];
            next = match &cur.node {
                Node::Hole | Node::Leaf(..) => return Ok(out),
                Node::Extension { path: p, child } => {
                    if !rest.starts_with(p) {
                        return Ok(out);
                    }
                    pos.extend_from_slice(p);
                    child.clone()
                }
                Node::Branch { children } => {
                    let Some(&i) = rest.first() else {
                        return Ok(out);
                    };
                    let Some(c) = children[i as usize].as_ref() else {
                        return Ok(out);
                    };
                    pos.push(i);
                    c.clone()
                }
            };
        }
    }

    /// The leaf value at `path`, loading stored nodes on the way (not kept).
    pub fn load_value(&self, path: &[u8], loader: &dyn Loader<V>) -> Result<Option<V>, LoadError> {
        let Some(mut next) = self.root.clone() else {
            return Ok(None);
        };
        let mut pos = Vec::with_capacity(64);
        loop {
            let cur = resolve(&next, &pos, loader)?;
            let rest = &path[pos.len()..];
            next = match &cur.node {
                Node::Hole => return Ok(None),
                Node::Leaf(Leaf { path: p, value }) => {
                    return Ok((**p == *rest).then(|| value.clone()));
                }
                Node::Extension { path: p, child } => {
                    if !rest.starts_with(p) {
                        return Ok(None);
                    }
                    pos.extend_from_slice(p);
                    child.clone()
                }
                Node::Branch { children } => {
                    let Some(&i) = rest.first() else {
                        return Ok(None);
                    };
                    let Some(c) = children[i as usize].as_ref() else {
                        return Ok(None);
                    };
                    pos.push(i);
                    c.clone()
                }
            };
        }
    }

    /// This trie with the nodes at depth `keep` and below that are in the store (marked by
    /// [`Trie::take_dirty`] or loaded from it) replaced by stored nodes; nodes above stay in
    /// memory, their values pruned by [`TrieValue::pruned`], and nodes written since the last
    /// `take_dirty` stay as they are (their stored descendants pruned). Walks only what changed
    /// since the last pruning.
    pub fn pruned(&self, keep: usize) -> Trie<V> {
        Trie {
            root: self.root.as_ref().map(|r| prune(r, 0, keep)),
        }
    }

    /// Asks for the root's cell, its cached reference included (a hint only).
    pub fn prefetch_root(&self) {
        if let Some(Child::Mem(c, ..)) = &self.root {
            prefetch_cell(c);
        }
    }

    /// [`Trie::pruned`] in place: nodes this version alone holds are changed where they are
    /// (no copy, nothing of the old tree to drop); shared ones are copied. The subtrees it
    /// replaces by stored nodes go to `dropped` (for the caller to free them on another
    /// thread: freeing them is most of a pruning's time).
    pub fn prune_in_place(&mut self, keep: usize, dropped: &mut Vec<Child<V>>) {
        if let Some(r) = &mut self.root {
            prune_mut(r, 0, keep, dropped);
        }
    }

    /// Visits the branches whose records are not in the store (position, record), and marks
    /// every node as stored; call after the root was computed, then write what it visited.
    pub fn take_dirty(&self, f: impl FnMut(&[u8], &[u8])) {
        self.take_dirty_with_leaves(f, |_, _| {});
    }

    /// [`Trie::take_dirty`] that also visits the leaves not in the store (full path, value),
    /// the ones [`Trie::for_each_unstored_leaf`] visits, in path order: one walk of the
    /// changed nodes instead of two (each node's cell is a cold line by then).
    pub fn take_dirty_with_leaves<'a>(
        &'a self,
        mut records: impl FnMut(&[u8], &[u8]),
        mut leaves: impl FnMut(&[u8], &'a V),
    ) {
        if let Some(r) = &self.root {
            let mut walk = DirtyWalk::new(&mut records, &mut leaves);
            walk.child(r);
        }
    }

    /// [`Trie::take_dirty_with_leaves`] for one half of the key space (`half` 0: paths whose
    /// first nibble is below 8, with the root's own record; 1: the rest), so that two threads
    /// can walk the two halves together (the walk waits on a cold line per node). The root is
    /// marked stored by [`Trie::took_both_halves`], once both are done. A root that is not a
    /// branch is walked whole by half 0. Branches at the depths `recordless` are walked and
    /// marked stored without a record (the store rebuilds them from their children's;
    /// [`NO_DEPTHS`]: every branch has its record).
    pub fn take_dirty_half<'a>(
        &'a self,
        half: usize,
        recordless: std::ops::Range<usize>,
        mut records: impl FnMut(&[u8], &[u8]),
        mut leaves: impl FnMut(&[u8], &'a V),
    ) {
        let Some(root) = &self.root else { return };
        let mut walk = DirtyWalk::new(&mut records, &mut leaves);
        walk.recordless = recordless;
        let branch = match root {
            Child::Mem(cell, ..) if !cell.has(STORED) => match &cell.node {
                Node::Branch { children } => Some(children),
                _ => None,
            },
            _ => None,
        };
        let Some(children) = branch else {
            if half == 0 {
                walk.child(root);
            }
            return;
        };
        if half == 0 {
            walk.record(children);
        }
        if let Some(Child::Mem(cell, ..)) = &self.root {
            // Both halves' walks note their slots in the root, the one cell they share: a
            // locked `or`.
            cell.walked_slots
                .fetch_or(mem_slots(children, 0x00ff << (half * 8)), Ordering::Relaxed);
        }
        walk.children(children, 0x00ff << (half * 8));
    }

    /// Marks the root stored after [`Trie::take_dirty_half`] walked both halves.
    pub fn took_both_halves(&self) {
        if let Some(Child::Mem(cell, ..)) = &self.root {
            cell.flags.fetch_or(STORED, Ordering::Relaxed);
        }
    }

    /// Visits the leaves whose records are not in the store yet (full path, value) in path
    /// order: the values written since the last [`Trie::take_dirty`], and leaves a write moved
    /// (a new neighbour split the branch above them). Call before `take_dirty`.
    pub fn for_each_unstored_leaf<'a>(&'a self, mut f: impl FnMut(&[u8], &'a V)) {
        if let Some(r) = &self.root {
            walk_leaves(r, &mut Vec::with_capacity(64), true, &mut f);
        }
    }

    /// Computes the root references of many tries together (batched hashing), on `threads`.
    pub fn hash_many(tries: &[&Trie<V>], threads: Threads) {
        let roots: Vec<&Cell<V>> = tries
            .iter()
            .filter_map(|t| match &t.root {
                Some(Child::Mem(c, ..)) => Some(&**c),
                _ => None,
            })
            .filter(|c| !c.cached.is_set())
            .collect();
        if !roots.is_empty() {
            hash_dirty_many(&roots, threads);
        }
    }

    /// Visits every (path, value) held in memory, in path order (all of them for a trie that
    /// was never pruned; stored subtrees are skipped).
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &V)) {
        if let Some(r) = &self.root {
            walk_leaves(r, &mut Vec::with_capacity(64), false, &mut f);
        }
    }
}

/// Calls `f` with the full nibble path and value of every leaf held in memory below `cell`, in
/// path order; with `unstored_only`, skips the subtrees already in the store (a changed node's
/// ancestors are all changed copies, made by `Arc::make_mut` on the way down, so a stored node
/// has no unstored leaf below it).
fn walk_leaves<'a, V>(
    child: &'a Child<V>,
    prefix: &mut Vec<u8>,
    unstored_only: bool,
    f: &mut dyn FnMut(&[u8], &'a V),
) {
    let Child::Mem(cell, ..) = child else { return };
    if unstored_only && cell.has(STORED) {
        return;
    }
    match &cell.node {
        Node::Hole => {}
        Node::Leaf(Leaf { path, value }) => {
            let n = prefix.len();
            prefix.extend_from_slice(path);
            f(prefix, value);
            prefix.truncate(n);
        }
        Node::Extension { path, child } => {
            let n = prefix.len();
            prefix.extend_from_slice(path);
            walk_leaves(child, prefix, unstored_only, f);
            prefix.truncate(n);
        }
        Node::Branch { children } => {
            for (i, c) in children.iter().enumerate() {
                if let Some(c) = c {
                    prefix.push(i as u8);
                    walk_leaves(c, prefix, unstored_only, f);
                    prefix.pop();
                }
            }
        }
    }
}

fn new_leaf<V>(path: &[u8], value: V) -> Child<V> {
    Child::mem(Cell::new(Node::Leaf(Leaf {
        path: path.into(),
        value,
    })))
}

fn placeholder<V>() -> Node<V> {
    Node::Hole
}

/// The stored node of `kind` with reference `r` at `pos`, loaded (its reference kept, its
/// record still stored).
fn load_cell<V: TrieValue>(
    r: NodeRef,
    pos: &[u8],
    kind: StoredKind,
    loader: &dyn Loader<V>,
) -> Result<Arc<Cell<V>>, LoadError> {
    Ok(Cell::clean(load_node(pos, kind, loader)?, r, STORED))
}

fn load_node<V: TrieValue>(
    pos: &[u8],
    kind: StoredKind,
    loader: &dyn Loader<V>,
) -> Result<Node<V>, LoadError> {
    Ok(match loader.load(pos, kind)? {
        LoadedNode::Leaf { path, value } => Node::Leaf(Leaf { path, value }),
        LoadedNode::Branch { children } => Node::Branch { children },
    })
}

/// [`materialize`] for a node about to change, made unique and [`Cell::touch`]ed. A stored
/// node is loaded as `touch` would leave it (no reference, not stored, no slot dirty, every
/// slot unpruned) instead of with the reference the change drops at once: setting it was a
/// locked write, which waited for the stores of the just-decoded children to drain.
fn materialize_for_write<'a, V: TrieValue>(
    child: &'a mut Child<V>,
    pos: &[u8],
    loader: &dyn Loader<V>,
) -> Result<&'a mut Cell<V>, LoadError> {
    if let Child::Stored(kind, _) = *child {
        let node = load_node(pos, kind, loader)?;
        *child = Child::mem(Arc::new(Cell::loaded_for_write(node)));
    }
    let c = child.cell_mut().expect("loaded above");
    let cell = crate::unique::make_mut(c);
    cell.touch();
    Ok(cell)
}

/// The node `child` at `pos` in memory (loaded when stored; nothing kept).
fn resolve<V: TrieValue>(
    child: &Child<V>,
    pos: &[u8],
    loader: &dyn Loader<V>,
) -> Result<Arc<Cell<V>>, LoadError> {
    match child {
        Child::Mem(c, ..) => Ok(c.clone()),
        Child::Stored(kind, r) => load_cell(*r, pos, *kind, loader),
    }
}

/// Replaces a stored `child` at `pos` by its loaded form; the cell either way.
fn materialize<'a, V: TrieValue>(
    child: &'a mut Child<V>,
    pos: &[u8],
    loader: &dyn Loader<V>,
) -> Result<&'a mut Arc<Cell<V>>, LoadError> {
    if let Child::Stored(kind, r) = *child {
        *child = Child::mem(load_cell(r, pos, kind, loader)?);
    }
    Ok(child.cell_mut().expect("loaded above"))
}

fn get_mut_at<'a, V: TrieValue>(
    child: &'a mut Child<V>,
    pos: &mut Vec<u8>,
    path: &[u8],
    loader: &dyn Loader<V>,
) -> Result<Option<&'a mut V>, LoadError> {
    let cell = materialize_for_write(child, pos, loader)?;
    if let Node::Branch { .. } = cell.node {
        // A key no longer than the branch's position is not in the trie (keys of one trie
        // have one length).
        let Some(&first) = path.first() else {
            return Ok(None);
        };
        cell.written(1 << first);
    }
    match &mut cell.node {
        Node::Hole => Ok(None),
        // The leaf's path is checked: `Trie::find_mut` walks without looking the key up first.
        Node::Leaf(Leaf { path: rest, value }) => Ok((rest[..] == *path).then_some(value)),
        Node::Extension { path: p, child } => {
            if !path.starts_with(p) {
                return Ok(None);
            }
            let n = p.len();
            pos.extend_from_slice(p);
            get_mut_at(child, pos, &path[n..], loader)
        }
        Node::Branch { children } => match children[path[0] as usize].as_mut() {
            Some(c) => {
                pos.push(path[0]);
                get_mut_at(c, pos, &path[1..], loader)
            }
            None => Ok(None),
        },
    }
}

/// No depths: an empty range (for [`Trie::take_dirty_half`]'s `recordless`).
pub const NO_DEPTHS: std::ops::Range<usize> = 0..0;

/// One insertion's walk down the trie ([`Trie::upsert`]): the position reached (the nibbles
/// from the root), where stored nodes are loaded from, and how a value already at the path
/// combines with the new one.
struct Insertion<'l, V> {
    pos: Vec<u8>,
    loader: &'l dyn Loader<V>,
    merge: fn(V, V) -> V,
    /// Called once on the value that goes into the leaf ([`Trie::upsert_with`]).
    then: &'l mut dyn FnMut(&mut V) -> Result<(), LoadError>,
}

impl<V: TrieValue> Insertion<'_, V> {
    /// Inserts `value` at `path` below `slot`; a value already there becomes
    /// `merge(old, value)`.
    fn at_slot(
        &mut self,
        slot: &mut Option<Child<V>>,
        path: &[u8],
        value: V,
    ) -> Result<(), LoadError> {
        match slot {
            None => {
                let (leaf, result) = self.new_leaf(path, value);
                *slot = Some(leaf);
                result
            }
            Some(child) => self.at_child(child, path, value),
        }
    }

    /// The leaf for the inserted `value` at `path`, once `then` ran on the value, and what
    /// `then` returned.
    fn new_leaf(&mut self, path: &[u8], mut value: V) -> (Child<V>, Result<(), LoadError>) {
        let result = (self.then)(&mut value);
        (new_leaf(path, value), result)
    }

    fn at_child(&mut self, child: &mut Child<V>, path: &[u8], value: V) -> Result<(), LoadError> {
        // A stored node is loaded into a cell on the stack, changed there and then moved into
        // its `Arc`: making a fresh `Arc` unique is a locked instruction, which waited for the
        // stores of the just-decoded children to drain (~8% of the block thread's write
        // samples).
        if let Child::Stored(kind, _) = *child {
            let mut cell = Cell::loaded_for_write(load_node(&self.pos, kind, self.loader)?);
            let result = self.at_cell(&mut cell, path, value);
            *child = Child::mem(Arc::new(cell));
            return result;
        }
        let cell = materialize_for_write(child, &self.pos, self.loader)?;
        self.at_cell(cell, path, value)
    }

    /// [`Insertion::at_child`] once the node is in a cell of its own, touched.
    fn at_cell(&mut self, cell: &mut Cell<V>, path: &[u8], value: V) -> Result<(), LoadError> {
        // A branch stays a branch: changed in place. Moving the node out and back, as the
        // other kinds are rebuilt, copied the whole `Node` (an account leaf's size) twice at
        // every level of the path, through the cell's cold lines (session 43).
        if let Node::Branch { children } = &mut cell.node {
            self.pos.push(path[0]);
            let result = self.at_slot(&mut children[path[0] as usize], &path[1..], value);
            self.pos.pop();
            cell.written(1 << path[0]);
            return result;
        }
        let merge = self.merge;
        let node = std::mem::replace(&mut cell.node, placeholder());
        let result;
        cell.node = match node {
            Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
            Node::Leaf(Leaf {
                path: lp,
                value: lv,
            }) => {
                if *lp == *path {
                    let mut value = merge(lv, value);
                    result = (self.then)(&mut value);
                    Node::Leaf(Leaf { path: lp, value })
                } else {
                    let c = common_prefix(&lp, path);
                    let mut children: Box<Children<V>> = Default::default();
                    children[lp[c] as usize] = Some(new_leaf(&lp[c + 1..], lv));
                    let (leaf, r) = self.new_leaf(&path[c + 1..], value);
                    children[path[c] as usize] = Some(leaf);
                    result = r;
                    wrap_extension(&path[..c], Node::Branch { children })
                }
            }
            Node::Extension {
                path: ep,
                mut child,
            } => {
                let c = common_prefix(&ep, path);
                if c == ep.len() {
                    let n = self.pos.len();
                    self.pos.extend_from_slice(&ep);
                    result = self.at_child(&mut child, &path[c..], value);
                    self.pos.truncate(n);
                    Node::Extension { path: ep, child }
                } else {
                    let mut children: Box<Children<V>> = Default::default();
                    let rest = &ep[c + 1..];
                    children[ep[c] as usize] = Some(if rest.is_empty() {
                        child
                    } else {
                        Child::mem(Cell::new(Node::Extension {
                            path: rest.into(),
                            child,
                        }))
                    });
                    let (leaf, r) = self.new_leaf(&path[c + 1..], value);
                    children[path[c] as usize] = Some(leaf);
                    result = r;
                    wrap_extension(&path[..c], Node::Branch { children })
                }
            }
            Node::Branch { .. } => unreachable!("a branch is changed in place above"),
        };
        // A node rebuilt (into a branch, maybe): every slot written.
        cell.written(ALL_SLOTS);
        result
    }
}

fn wrap_extension<V>(prefix: &[u8], branch: Node<V>) -> Node<V> {
    if prefix.is_empty() {
        branch
    } else {
        Node::Extension {
            path: prefix.into(),
            child: Child::mem(Cell::new(branch)),
        }
    }
}

/// Removes `path`, which must be present; keeps the trie canonical (no branch with a single
/// child, no extension pointing at a leaf or an extension).
fn remove_slot<V: TrieValue>(
    slot: &mut Option<Child<V>>,
    pos: &mut Vec<u8>,
    path: &[u8],
    loader: &dyn Loader<V>,
) -> Result<(), LoadError> {
    let Some(child) = slot else { return Ok(()) };
    let is_leaf = match child {
        Child::Stored(kind, _) => *kind == StoredKind::Leaf,
        Child::Mem(c, ..) => matches!(c.node, Node::Leaf(..)),
    };
    if is_leaf {
        *slot = None;
        return Ok(());
    }
    let cell = materialize_for_write(child, pos, loader)?;
    let node = std::mem::replace(&mut cell.node, placeholder());
    let mut result;
    // As in `Insertion::at_child`.
    let mut written = ALL_SLOTS;
    cell.node = match node {
        Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
        Node::Leaf(..) => unreachable!("handled above"),
        Node::Extension { path: ep, child } => {
            let mut c = Some(child);
            let n = pos.len();
            pos.extend_from_slice(&ep);
            result = remove_slot(&mut c, pos, &path[ep.len()..], loader);
            pos.truncate(n);
            // A branch below an extension holds two or more keys, so one is left.
            let child = c.expect("an extension's branch keeps at least one key");
            match prepend(&ep, child, pos, loader) {
                Ok(node) => node,
                Err(e) => {
                    result = Err(e);
                    Node::Hole
                }
            }
        }
        Node::Branch { mut children } => {
            pos.push(path[0]);
            result = remove_slot(&mut children[path[0] as usize], pos, &path[1..], loader);
            pos.pop();
            let mut live = children.iter().enumerate().filter(|(_, c)| c.is_some());
            let first = live.next().map(|(i, _)| i);
            let more = live.next().is_some();
            match (first, more) {
                (Some(i), false) => {
                    let only = children[i].take().expect("counted above");
                    pos.push(i as u8);
                    let merged = prepend(&[i as u8], only, pos, loader);
                    pos.pop();
                    match merged {
                        Ok(node) => node,
                        Err(e) => {
                            result = Err(e);
                            Node::Hole
                        }
                    }
                }
                _ => {
                    written = 1 << path[0];
                    Node::Branch { children }
                }
            }
        }
    };
    cell.written(written);
    result
}

/// The node `prefix ++ child` (`child` at position `pos`): merges into a leaf or an extension
/// child (a stored leaf is loaded for that), or extends a branch.
fn prepend<V: TrieValue>(
    prefix: &[u8],
    mut child: Child<V>,
    pos: &[u8],
    loader: &dyn Loader<V>,
) -> Result<Node<V>, LoadError> {
    let cell = match &mut child {
        Child::Stored(StoredKind::Branch, _) => {
            return Ok(Node::Extension {
                path: prefix.into(),
                child,
            })
        }
        c => materialize(c, pos, loader)?,
    };
    Ok(match &cell.node {
        Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
        Node::Leaf(Leaf { path, value }) => Node::Leaf(Leaf {
            path: concat(prefix, path),
            value: value.clone(),
        }),
        Node::Extension { path, child: grand } => Node::Extension {
            path: concat(prefix, path),
            child: grand.clone(),
        },
        Node::Branch { .. } => Node::Extension {
            path: prefix.into(),
            child,
        },
    })
}

/// How a record names `child` (the reference of one in memory must be cached).
fn child_entry<V: TrieValue>(child: &Child<V>) -> ChildEntry {
    let cell = match child {
        Child::Stored(StoredKind::Leaf, r) => return ChildEntry::Leaf(*r),
        Child::Stored(StoredKind::Branch, r) => return ChildEntry::Branch(*r),
        Child::Mem(c, ..) => c,
    };
    match &cell.node {
        Node::Leaf(..) => ChildEntry::Leaf(node_ref(cell)),
        Node::Branch { .. } => ChildEntry::Branch(node_ref(cell)),
        Node::Extension { path, child } => ChildEntry::Extension(path.clone(), child_ref(child)),
        Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
    }
}

/// The stored record of a branch: the bytes of [`encode_record`] of its children's
/// [`child_entry`]s, written straight from the cells (no entries built: an extension's path
/// is not copied).
#[cfg(test)]
fn branch_record<V: TrieValue>(children: &Children<V>) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORD_CAPACITY);
    branch_record_into(children, &mut out);
    out
}

/// [`branch_record`] appended to `out`.
fn branch_record_into<V: TrieValue>(children: &Children<V>, out: &mut Vec<u8>) {
    out.extend_from_slice(&presence_bits(children).to_le_bytes());
    for c in children.iter().flatten() {
        match c {
            Child::Stored(StoredKind::Leaf, r) => put_entry(TAG_LEAF, None, r, out),
            Child::Stored(StoredKind::Branch, r) => put_entry(TAG_BRANCH, None, r, out),
            Child::Mem(cell, ..) => match &cell.node {
                Node::Leaf(..) => put_entry(TAG_LEAF, None, &node_ref(cell), out),
                Node::Branch { .. } => put_entry(TAG_BRANCH, None, &node_ref(cell), out),
                Node::Extension { path, child } => {
                    put_entry(TAG_EXTENSION, Some(path), &child_ref(child), out)
                }
                Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
            },
        }
    }
}

/// A record's usual size: the bitmap and 16 entries of a 32-byte reference.
const RECORD_CAPACITY: usize = 2 + 35 * 16;

/// Record layout: a u16 bitmap of the present children (bit i: child i), then each present
/// child's entry (see [`encode_entry`]).
pub fn encode_record(entries: &[Option<ChildEntry>; 16]) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORD_CAPACITY);
    out.extend_from_slice(&presence_bits(entries).to_le_bytes());
    for e in entries.iter().flatten() {
        encode_entry(e, &mut out);
    }
    out
}

/// A record's bitmap: bit i set when slot i holds a child.
fn presence_bits<T>(slots: &[Option<T>; 16]) -> u16 {
    slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_some())
        .fold(0, |b, (i, _)| b | 1 << i)
}

/// Entry layout: `[tag: 0 leaf, 1 branch, 2 extension]` then, for an extension, `[path length
/// u8][path nibbles packed, high first]`, then `[reference length u8][reference]` (of the
/// leaf or branch; for an extension, of its branch).
pub fn encode_entry(e: &ChildEntry, out: &mut Vec<u8>) {
    match e {
        ChildEntry::Leaf(r) => put_entry(TAG_LEAF, None, r, out),
        ChildEntry::Branch(r) => put_entry(TAG_BRANCH, None, r, out),
        ChildEntry::Extension(p, r) => put_entry(TAG_EXTENSION, Some(p), r, out),
    }
}

/// An entry's tag byte.
const TAG_LEAF: u8 = 0;
const TAG_BRANCH: u8 = 1;
const TAG_EXTENSION: u8 = 2;

/// The bytes of one entry (see [`encode_entry`]): `tag`, an extension's path, the reference.
fn put_entry(tag: u8, extension_path: Option<&[u8]>, r: &NodeRef, out: &mut Vec<u8>) {
    out.push(tag);
    if let Some(p) = extension_path {
        out.push(p.len() as u8);
        for pair in p.chunks(2) {
            out.push((pair[0] << 4) | pair.get(1).copied().unwrap_or(0));
        }
    }
    out.push(r.len);
    out.extend_from_slice(r.bytes());
}

/// Decodes one entry from the front of `b`; `None` when malformed.
pub fn decode_entry(b: &mut &[u8]) -> Option<ChildEntry> {
    let (&tag, rest) = b.split_first()?;
    *b = rest;
    let ext = if tag == TAG_EXTENSION {
        let (&n, rest) = b.split_first()?;
        let n = n as usize;
        let bytes = rest.get(..n.div_ceil(2))?;
        // At most 63 nibbles: the branch below an extension takes one more of the key's 64.
        if n == 0 || n > 63 || (n % 2 == 1 && bytes[n / 2] & 15 != 0) {
            return None;
        }
        let mut path = Nibbles {
            len: n as u8,
            n: [0; 64],
        };
        for (i, nibble) in path.n[..n].iter_mut().enumerate() {
            *nibble = if i % 2 == 0 {
                bytes[i / 2] >> 4
            } else {
                bytes[i / 2] & 15
            };
        }
        *b = &rest[n.div_ceil(2)..];
        Some(path)
    } else if tag > TAG_EXTENSION {
        return None;
    } else {
        None
    };
    let (&len, rest) = b.split_first()?;
    let r = NodeRef::from_bytes(rest.get(..len as usize)?)?;
    *b = &rest[len as usize..];
    Some(match (tag, ext) {
        (TAG_LEAF, _) => ChildEntry::Leaf(r),
        (TAG_BRANCH, _) => ChildEntry::Branch(r),
        (_, Some(p)) => ChildEntry::Extension(p, r),
        _ => return None,
    })
}

/// Decodes a branch record into its children's entries; `None` when malformed (fewer than two
/// children, trailing bytes, a bad entry).
pub fn decode_record(mut b: &[u8]) -> Option<[Option<ChildEntry>; 16]> {
    let bits = u16::from_le_bytes(b.get(..2)?.try_into().ok()?);
    if bits.count_ones() < 2 {
        return None;
    }
    b = &b[2..];
    let mut out: [Option<ChildEntry>; 16] = Default::default();
    for (i, slot) in out.iter_mut().enumerate() {
        if bits & (1 << i) != 0 {
            *slot = Some(decode_entry(&mut b)?);
        }
    }
    b.is_empty().then_some(out)
}

/// The children of the branch whose record is `b`, as stored nodes, decoded straight into
/// the branch's box (no array of entries in between: a block's writes load a few thousand
/// branches); `None` for a malformed record or an extension path over `room` nibbles.
pub fn decode_record_children<V: TrieValue>(mut b: &[u8], room: usize) -> Option<Box<Children<V>>> {
    let bits = u16::from_le_bytes(b.get(..2)?.try_into().ok()?);
    if bits.count_ones() < 2 {
        return None;
    }
    b = &b[2..];
    let mut children: Box<Children<V>> = Default::default();
    for (i, slot) in children.iter_mut().enumerate() {
        if bits & (1 << i) != 0 {
            let e = decode_entry(&mut b)?;
            if matches!(&e, ChildEntry::Extension(p, _) if p.len() > room) {
                return None;
            }
            *slot = Some(entry_child(&e));
        }
    }
    b.is_empty().then_some(children)
}

/// The branch of a decoded record, its children as stored nodes.
pub fn record_children<V: TrieValue>(entries: &[Option<ChildEntry>; 16]) -> Box<Children<V>> {
    Box::new(std::array::from_fn(|i| {
        entries[i].as_ref().map(entry_child)
    }))
}

fn prune<V: TrieValue>(child: &Child<V>, depth: usize, keep: usize) -> Child<V> {
    let cell = match child {
        Child::Mem(c, ..) if !c.has(PRUNED) => c,
        _ => return child.clone(),
    };
    let r = node_ref(cell);
    // A node not in the store yet (written since the last `take_dirty`) stays in memory as it
    // is, its stored descendants pruned below it.
    let stored = cell.has(STORED);
    let node = match &cell.node {
        Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
        Node::Leaf(..) if stored && depth >= keep => return Child::Stored(StoredKind::Leaf, r),
        Node::Branch { .. } if stored && depth >= keep => {
            return Child::Stored(StoredKind::Branch, r)
        }
        Node::Leaf(..) if !stored => return child.clone(),
        Node::Leaf(Leaf { path, value }) => Node::Leaf(Leaf {
            path: path.clone(),
            value: value.pruned(),
        }),
        Node::Extension { path, child } => Node::Extension {
            path: path.clone(),
            child: prune(child, depth + path.len(), keep),
        },
        Node::Branch { children } => Node::Branch {
            children: Box::new(std::array::from_fn(|i| {
                children[i].as_ref().map(|c| prune(c, depth + 1, keep))
            })),
        },
    };
    let flags = if stored { STORED | PRUNED } else { 0 };
    Child::mem_with_copy(Cell::clean(node, r, flags), Some(r))
}

fn prune_mut<V: TrieValue>(
    child: &mut Child<V>,
    depth: usize,
    keep: usize,
    dropped: &mut Vec<Child<V>>,
) {
    // A child the records walk marked stored in its slot is replaced without reading its
    // cell (a cold line or two a written account at the pruning depth).
    if depth >= keep {
        if let Child::Mem(_, len, hash) = child {
            if let (Some(kind), Some(r)) = (len.stored_kind(), copied_ref(len, hash)) {
                dropped.push(std::mem::replace(child, Child::Stored(kind, r)));
                return;
            }
        }
    }
    // Pruning keeps every node's reference: the copy in `child`'s slot stays.
    let Some(arc) = child.cell_mut_same_ref() else {
        return;
    };
    if arc.has(PRUNED) {
        return;
    }
    // See `prune`: only what the store holds is pruned.
    let stored = arc.has(STORED);
    let r = node_ref(arc);
    let kind = match &arc.node {
        Node::Leaf(..) if !stored => return,
        Node::Leaf(..) => Some(StoredKind::Leaf),
        Node::Branch { .. } => Some(StoredKind::Branch),
        _ => None,
    };
    if let (Some(kind), true) = (kind, stored && depth >= keep) {
        dropped.push(std::mem::replace(child, Child::Stored(kind, r)));
        return;
    }
    let Some(cell) = crate::unique::get_mut(arc) else {
        *child = prune(child, depth, keep);
        return;
    };
    match &mut cell.node {
        Node::Leaf(Leaf { value, .. }) => *value = value.pruned(),
        Node::Extension { path, child } => prune_mut(child, depth + path.len(), keep, dropped),
        Node::Branch { children } => {
            // Only the slots the records walk passed (`Cell::walked_slots`); the others stay
            // unpruned for a pruning after the next walk.
            let walked = *cell.walked_slots.get_mut();
            let mask = cell.unpruned_slots & walked;
            let kept = cell.unpruned_slots & !walked;
            *cell.walked_slots.get_mut() = 0;
            cell.unpruned_slots = kept
                | if depth == 0 {
                    // The root's two halves are independent subtrees: pruned on two threads
                    // (finalization prunes on the block thread while the other core is idle).
                    let (low, high) = children.split_at_mut(8);
                    let mut high_dropped = Vec::new();
                    let (l, h) = rayon::join(
                        || prune_slots(low, 0, mask & 0x00ff, depth, keep, dropped),
                        || prune_slots(high, 8, mask & 0xff00, depth, keep, &mut high_dropped),
                    );
                    dropped.append(&mut high_dropped);
                    l | h
                } else {
                    prune_slots(&mut children[..], 0, mask, depth, keep, dropped)
                };
        }
        Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
    }
    if stored {
        *cell.flags.get_mut() = STORED | PRUNED;
    }
}

/// Prunes the children in the slots of `mask` (slot `first + i` is `children[i]`) of a
/// branch at `depth`; returns the slots whose child is still in memory unpruned.
fn prune_slots<V: TrieValue>(
    children: &mut [Option<Child<V>>],
    first: usize,
    mask: u16,
    depth: usize,
    keep: usize,
    dropped: &mut Vec<Child<V>>,
) -> u16 {
    // A child at depth `d` whose slot marks it stored is pruned from its slot alone (see
    // `prune_mut`): its cell is not asked for.
    let from_slot = |d: usize, len: &CopyLen| d >= keep && len.stored_kind().is_some();
    // As in `collect_dirty`: the children's misses overlap.
    for i in slots_in(mask) {
        if let Some(Child::Mem(c, len, _)) = &children[i - first] {
            if !from_slot(depth + 1, len) {
                prefetch_cell(c);
            }
        }
    }
    // Then what pruning a child branch reads next: the slots of its children's box it will
    // visit, once its cell is in (the first child's cell is waited for here, the others'
    // with it), and then those slots' cells. A branch one level above the pruning depth has
    // one or two such slots, so a walk that went down child by child waited on each
    // grandchild's cell alone (three quarters of the pruning's samples, session 33); asked
    // for here, the grandchildren of all the siblings overlap. Three levels above the
    // pruning depth the paths are asked for whole (below); that covers these two stages.
    if depth + 1 < keep && depth + 3 != keep {
        for i in slots_in(mask) {
            if let Some(Child::Mem(c, ..)) = &children[i - first] {
                if !c.has(PRUNED) {
                    prefetch_slots(c, c.prunable_slots());
                }
            }
        }
        for i in slots_in(mask) {
            if let Some(Child::Mem(c, ..)) = &children[i - first] {
                if c.has(PRUNED) {
                    continue;
                }
                if let Node::Branch { children } = &c.node {
                    for j in slots_in(c.prunable_slots()) {
                        if let Some(Child::Mem(g, len, _)) = &children[j] {
                            if !from_slot(depth + 2, len) {
                                prefetch_for_pruning(g);
                            }
                        }
                    }
                }
            }
        }
    }
    // Three levels above the pruning depth, the paths down to it are asked for whole, a level
    // at a time across the siblings' paths: below here a branch has one or two unpruned slots,
    // so the walk down each path met its cold lines one after another.
    if depth + 3 == keep {
        let unpruned: Vec<&Cell<V>> = slots_in(mask)
            .filter_map(|i| match &children[i - first] {
                Some(Child::Mem(c, ..)) if !c.has(PRUNED) => Some(&**c),
                _ => None,
            })
            .collect();
        prefetch_unpruned_paths(
            unpruned,
            2,
            PRUNED,
            |_, c| c.prunable_slots(),
            |level, len| !from_slot(depth + 2 + level, len),
        );
    }
    let mut left = 0;
    for i in slots_in(mask) {
        if let Some(c) = &mut children[i - first] {
            prune_mut(c, depth + 1, keep, dropped);
            if matches!(c, Child::Mem(a, ..) if !a.has(PRUNED)) {
                left |= 1 << i;
            }
        }
    }
    left
}

/// The walk of [`Trie::take_dirty_with_leaves`]: the position it is at, the buffer each
/// record is written into (one for the walk, not one allocation per record), and where the
/// records and leaves go.
struct DirtyWalk<'w, 'a, V> {
    pos: Vec<u8>,
    record: Vec<u8>,
    /// The depths whose branches get no record (empty: none).
    recordless: std::ops::Range<usize>,
    records: &'w mut dyn FnMut(&[u8], &[u8]),
    leaves: &'w mut dyn FnMut(&[u8], &'a V),
}

impl<'w, 'a, V: TrieValue> DirtyWalk<'w, 'a, V> {
    fn new(
        records: &'w mut dyn FnMut(&[u8], &[u8]),
        leaves: &'w mut dyn FnMut(&[u8], &'a V),
    ) -> Self {
        DirtyWalk {
            pos: Vec::with_capacity(64),
            record: Vec::with_capacity(RECORD_CAPACITY),
            recordless: NO_DEPTHS,
            records,
            leaves,
        }
    }

    /// Hands over the record of the branch at the walk's position.
    fn record(&mut self, children: &Children<V>) {
        if self.recordless.contains(&self.pos.len()) {
            return;
        }
        self.record.clear();
        branch_record_into(children, &mut self.record);
        (self.records)(&self.pos, &self.record);
    }

    /// Walks the children of the branch at the walk's position in the slots of `mask`.
    fn children(&mut self, children: &'a Children<V>, mask: u16) {
        for i in slots_in(mask) {
            if let Some(c) = &children[i] {
                self.pos.push(i as u8);
                self.child(c);
                self.pos.pop();
            }
        }
    }

    fn child(&mut self, child: &'a Child<V>) {
        let Child::Mem(cell, ..) = child else { return };
        let flags = cell.flags.load(Ordering::Relaxed);
        if flags & STORED != 0 {
            return;
        }
        match &cell.node {
            Node::Leaf(Leaf { path, value }) => {
                let n = self.pos.len();
                self.pos.extend_from_slice(path);
                (self.leaves)(&self.pos, value);
                self.pos.truncate(n);
            }
            Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
            Node::Extension { path, child } => {
                let n = self.pos.len();
                self.pos.extend_from_slice(path);
                self.child(child);
                self.pos.truncate(n);
            }
            Node::Branch { children } if self.recordless.contains(&self.pos.len()) => {
                cell.walked(children, cell.unpruned_slots);
                self.unrecorded_branch(cell, children);
            }
            Node::Branch { children } => {
                // The record reads every child's cell, and the walk then goes down into the
                // children not stored yet, each first reading its children's box: both asked
                // for ahead, so that the siblings' misses overlap instead of coming one after
                // another as the walk goes down.
                for c in children.iter().flatten() {
                    if let Child::Mem(c, ..) = c {
                        prefetch_cell(c);
                    }
                }
                self.record(children);
                if self.recordless.contains(&(self.pos.len() + 1)) {
                    // Children without records: the walk below them follows their unpruned
                    // slots only, one or two a branch, so each path down is a chain of cold
                    // lines; asked for here a level at a time across all the children's paths.
                    let unstored: Vec<&Cell<V>> = children
                        .iter()
                        .flatten()
                        .filter_map(|c| match c {
                            Child::Mem(c, ..) if !c.has(STORED) => Some(&**c),
                            _ => None,
                        })
                        .collect();
                    // Down to the first recorded level below, whose record reads its whole
                    // box and whose walk then reads each child's cell: those asked for too
                    // (the box's first line had 24% of the walk's samples at 50,000 blocks;
                    // the finalization 9% less time on the block thread, session 46).
                    let below = self.pos.len() + 1;
                    let recordless = &self.recordless;
                    prefetch_unpruned_paths(
                        unstored,
                        recordless.end - below + 1,
                        STORED,
                        |level, c| {
                            if recordless.contains(&(below + level)) {
                                c.unpruned_slots
                            } else {
                                ALL_SLOTS
                            }
                        },
                        |_, _| true,
                    );
                } else {
                    for c in children.iter().flatten() {
                        if let Child::Mem(c, ..) = c {
                            if !c.has(STORED) {
                                prefetch_children_box(c);
                            }
                        }
                    }
                }
                cell.walked(children, ALL_SLOTS);
                self.children(children, ALL_SLOTS);
            }
        }
        // A store, not a read-modify-write: while the walk runs it is the only writer of the
        // flags of the cells it visits (the two halves' walks share no cell below the root,
        // and pruning writes flags only through cells it holds alone), and the locked `or`
        // drained the store buffer at every node (most of the walk's own time in storage
        // tries).
        cell.flags.store(flags | STORED, Ordering::Relaxed);
        if let Child::Mem(_, len, _) = child {
            match &cell.node {
                Node::Leaf(..) => len.mark_stored(StoredKind::Leaf),
                Node::Branch { .. } => len.mark_stored(StoredKind::Branch),
                _ => {}
            }
        }
    }

    /// The walk below a branch at a recordless depth. With no record to write, only the
    /// children not in the store yet need a visit, and they are among the cell's unpruned
    /// slots (a superset of its slots holding an unpruned cell; a node not stored is never
    /// pruned). The finalization prunes before it walks, so these are about the slots written
    /// since the last walk: a depth-4 branch of the account trie has one or two of its 16
    /// children to visit, and reading every child's cell for its flags was 16 cold lines (a
    /// depth-5 branch's box, whose children are mostly stored, 10 lines for one or two slots).
    fn unrecorded_branch(&mut self, cell: &'a Cell<V>, children: &'a Children<V>) {
        let slots = cell.unpruned_slots;
        for i in slots_in(slots) {
            if let Some(Child::Mem(c, ..)) = &children[i] {
                prefetch_cell(c);
            }
        }
        // What each child visited reads next: only its own unpruned slots when it is
        // recordless too.
        let child_recordless = self.recordless.contains(&(self.pos.len() + 1));
        for i in slots_in(slots) {
            if let Some(Child::Mem(c, ..)) = &children[i] {
                if c.has(STORED) {
                    continue;
                }
                if child_recordless {
                    prefetch_slots(c, c.unpruned_slots);
                } else {
                    prefetch_children_box(c);
                }
            }
        }
        self.children(children, slots);
    }
}

/// The reference of a node as a [`Loader`] gives it (its children's references are those of
/// the loaded entries).
pub fn loaded_ref<V: TrieValue>(node: LoadedNode<V>) -> NodeRef {
    node_ref(&Cell::new(match node {
        LoadedNode::Leaf { path, value } => Node::Leaf(Leaf { path, value }),
        LoadedNode::Branch { children } => Node::Branch { children },
    }))
}

fn node_ref<V: TrieValue>(cell: &Cell<V>) -> NodeRef {
    cell.cached.get_or_init(|| {
        let mut rlp = Vec::with_capacity(600);
        encode(cell, &mut rlp);
        NodeRef::from_rlp(&rlp)
    })
}

/// Computes the references of every node written since the last root. The subtrees of the
/// root's written children are independent pieces, each hashed whole by one thread
/// ([`hash_dirty_many`] on the caller's thread), and the threads take pieces as they come
/// ([`share_out`]); then the root. A level at a time over the whole trie instead (a batch on
/// the pool per level, nine a block) left the pool's second thread idle most of the time:
/// asleep after the block's writes, it woke hundreds of microseconds after the first thread
/// had split the work, so that the roots ran at 1.05 cores even with nothing else running
/// (pieces: 1.3 rather than 2.2 ms a block at 10,000 blocks without the pipeline, session 38).
fn hash_dirty<V: TrieValue>(root: &Cell<V>) {
    if let Node::Branch { children } = &root.node {
        let pieces: Vec<&Cell<V>> = slots_in(root.dirty_slots)
            .filter_map(|i| match &children[i] {
                Some(Child::Mem(c, ..)) if !c.cached.is_set() => Some(&**c),
                _ => None,
            })
            .collect();
        if pieces.len() > 1 {
            share_out(&pieces, |c| hash_dirty_many(&[*c], Threads::Caller));
            // Every written child now has its reference: only the root is left to encode.
            node_ref(root);
            return;
        }
    }
    hash_dirty_many(&[root], Threads::Pool);
}

/// Calls `f` on every item, on this thread and on the rayon pool's other threads, each taking
/// the next item when it is free: the caller starts at once and a thread of the pool joins
/// when it wakes, instead of the caller waiting for the pool to start the job and split it.
pub(crate) fn share_out<T: Sync>(items: &[T], f: impl Fn(&T) + Sync) {
    let next = AtomicUsize::new(0);
    let take = || {
        while let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) {
            f(item);
        }
    };
    let helpers = rayon::current_num_threads()
        .saturating_sub(1)
        .min(items.len().saturating_sub(1));
    rayon::in_place_scope(|s| {
        for _ in 0..helpers {
            s.spawn(|_| take());
        }
        take();
    });
}

/// [`hash_dirty`] for the roots of many tries at once (their nodes batch together), level by
/// level (by distance from the roots) from the farthest up: a level's nodes are independent,
/// and their children are all in the levels below. Each level is RLP-encoded in chunks, on
/// the rayon pool or on this thread (`threads`), each chunk hashed eight at a time
/// ([`crate::keccak_x8`]).
fn hash_dirty_many<V: TrieValue>(roots: &[&Cell<V>], threads: Threads) {
    use rayon::prelude::*;
    let mut levels: Vec<Vec<&Cell<V>>> = Vec::new();
    let mut values = Vec::new();
    let total = collect_dirty(roots, &mut levels, &mut values);
    if total < 16 {
        // Too few to batch (e.g. one storage trie of one slot).
        for r in roots {
            node_ref(r);
        }
        return;
    }
    // A batch this large goes to the pool even inside a piece: one contract's storage written
    // in thousands of slots would otherwise be hashed by one thread, and its levels are wide
    // enough to be worth waking the pool for.
    let threads = if total >= POOL_BATCH {
        Threads::Pool
    } else {
        threads
    };
    // The leaves' values first (an account leaf's storage root), then the levels from the
    // farthest up.
    V::prepare_batch(&values, threads);
    for level in levels.iter().rev() {
        // Each chunk of 64 nodes is encoded into one buffer (not one per node), then its
        // nodes of 32 bytes or more are hashed together, and each node's reference is set by
        // the thread that encoded it (its line is in that core's cache, not the caller's).
        let hash_chunk = |chunk: &[&Cell<V>]| {
            // Room for a full branch a node: grown by reallocation, the buffer was copied
            // once or twice a chunk of branches, into memory the heap had not touched yet.
            let mut rlp = Vec::with_capacity(chunk.len() * BRANCH_RLP_MAX);
            let mut ends = Vec::with_capacity(chunk.len());
            // Encoding a branch reads its cell, its children's box, then each child's
            // reference in the child's own cell (16 lines, mostly cold, for a branch above
            // the cached levels); a leaf reads its cell and its value (an account's storage
            // root). Each read depends on the one before, so they are asked for in stages:
            // the cell six nodes ahead, what the cell points to four ahead (by then the cell
            // is in), the children's references two ahead (by then the box is in).
            for (i, c) in chunk.iter().enumerate() {
                if let Some(ahead) = chunk.get(i + 6) {
                    proofkit_core::memory::prefetch_read_all(*ahead);
                }
                if let Some(ahead) = chunk.get(i + 4) {
                    prefetch_box_or_value(ahead);
                }
                if let Some(ahead) = chunk.get(i + 2) {
                    prefetch_child_refs(ahead);
                }
                encode(c, &mut rlp);
                ends.push(rlp.len());
            }
            let node = |i: usize| &rlp[if i == 0 { 0 } else { ends[i - 1] }..ends[i]];
            let long: Vec<&[u8]> = (0..chunk.len())
                .map(node)
                .filter(|e| e.len() >= 32)
                .collect();
            let mut h = crate::keccak::keccak256_many(&long).into_iter();
            for (i, c) in chunk.iter().enumerate() {
                let e = node(i);
                let r = if e.len() >= 32 {
                    NodeRef {
                        len: 32,
                        buf: h.next().expect("one hash per long node"),
                    }
                } else {
                    NodeRef::from_rlp(e)
                };
                c.cached.set(r);
            }
        };
        match threads {
            Threads::Pool => level.par_chunks(64).for_each(hash_chunk),
            Threads::Caller => level.chunks(64).for_each(hash_chunk),
        }
    }
}

/// Frees subtrees that left a trie (what [`Trie::prune_in_place`] replaced by stored nodes),
/// a level at a time across all of them. Dropping them one by one follows each subtree's path
/// down a cold line at a time (the cell, its children's box, the child's cell, a leaf's
/// storage trie, ...), and a pruned subtree is a thin path of such cells; here every subtree's
/// cells of one level are taken in turn, each asked for some cells ahead (and a branch's
/// children a few cells ahead once its cell is in), so that the misses of different subtrees
/// overlap. Shared cells only lose an owner, as with a plain drop.
pub fn drop_subtrees<V: TrieValue>(roots: Vec<Child<V>>) {
    /// How far ahead a cell is asked for, and how far ahead its children's box.
    const CELL_AHEAD: usize = 16;
    const BOX_AHEAD: usize = 8;
    let mut level: Vec<Arc<Cell<V>>> = roots
        .into_iter()
        .filter_map(|c| match c {
            Child::Mem(a, ..) => Some(a),
            Child::Stored(..) => None,
        })
        .collect();
    // The leaves' values (an account's storage trie) are dropped CELL_AHEAD leaves after
    // they are asked for: a queue that short instead of a vector of every value, dropped at
    // the end, which grew by reallocation into memory the kernel faulted in and zeroed (1% of
    // a 10,000-block run's samples, session 39).
    let mut values: VecDeque<V> = VecDeque::with_capacity(CELL_AHEAD + 1);
    while !level.is_empty() {
        let mut next = Vec::with_capacity(level.len());
        // Taken from the back (`pop`), so "ahead" is towards the front.
        while let Some(mut arc) = level.pop() {
            let n = level.len();
            if let Some(a) = n.checked_sub(CELL_AHEAD).map(|i| &level[i]) {
                prefetch_cell(a);
            }
            if let Some(a) = n.checked_sub(BOX_AHEAD).map(|i| &level[i]) {
                prefetch_box_or_value(a);
            }
            let Some(cell) = crate::unique::get_mut(&mut arc) else {
                continue; // another version holds it: dropping `arc` releases one owner
            };
            match std::mem::replace(&mut cell.node, Node::Hole) {
                Node::Branch { children } => {
                    next.extend(children.into_iter().flatten().filter_map(|c| match c {
                        Child::Mem(a, ..) => Some(a),
                        Child::Stored(..) => None,
                    }))
                }
                Node::Extension { child, .. } => {
                    if let Child::Mem(a, ..) = child {
                        next.push(a);
                    }
                }
                Node::Leaf(Leaf { value, .. }) => {
                    value.prefetch();
                    values.push_back(value);
                    if values.len() > CELL_AHEAD {
                        drop(values.pop_front());
                    }
                }
                Node::Hole => {}
            }
        }
        level = next;
    }
    drop(values);
}

/// Asks for the lines of `c`'s cell that a walk reads first (its counts, flags and reference,
/// then its node); a hint only.
fn prefetch_cell<V>(c: &Arc<Cell<V>>) {
    // The counts sit just before the value in an `Arc`'s allocation; the flags and the
    // reference end before byte 48 of the cell, so the first two lines asked for hold them
    // wherever the allocation starts.
    const _: () =
        assert!(std::mem::offset_of!(Cell<()>, cached) + std::mem::size_of::<RefCache>() <= 48);
    let p = Arc::as_ptr(c).cast::<u8>();
    for offset in [-16isize, 48, 112] {
        proofkit_core::memory::prefetch_address(p, offset as usize);
    }
}

/// Asks for the lines of `c`'s cell that pruning it reads: its flags and cached reference,
/// then its node's kind; a hint only.
fn prefetch_for_pruning<V>(c: &Arc<Cell<V>>) {
    let p = Arc::as_ptr(c).cast::<u8>();
    proofkit_core::memory::prefetch_address(p, std::mem::offset_of!(Cell<V>, flags));
    proofkit_core::memory::prefetch_address(p, std::mem::offset_of!(Cell<V>, node));
}

/// Asks for the nodes on the paths below `tops` (whose cells were asked for) that follow the
/// slots `slots(level, node)` names in each node, `levels` levels down, a level at a time
/// across all the paths: each level's children boxes (the slots followed), then the cells in
/// those slots, then the next level, so that the misses of different paths overlap instead of
/// coming one after another as a walk goes down one path at a time. A path stops at a node
/// flagged `skip`, and at a child whose slot `follow(level, slot's copy length)` refuses
/// (level 0: the children of `tops`). A hint only: it reads the cells it passes, nothing else.
fn prefetch_unpruned_paths<V>(
    tops: Vec<&Cell<V>>,
    levels: usize,
    skip: u8,
    slots: impl Fn(usize, &Cell<V>) -> u16,
    follow: impl Fn(usize, &CopyLen) -> bool,
) {
    let mut level = tops;
    for depth in 0..levels {
        for c in &level {
            prefetch_slots(c, slots(depth, c));
        }
        let mut next = Vec::with_capacity(2 * level.len());
        for c in &level {
            if let Node::Branch { children } = &c.node {
                for j in slots_in(slots(depth, c)) {
                    if let Some(Child::Mem(g, len, _)) = &children[j] {
                        if follow(depth, len) {
                            prefetch_cell(g);
                            next.push(&**g);
                        }
                    }
                }
            }
        }
        if depth + 1 < levels {
            next.retain(|g| !g.has(skip));
        }
        level = next;
    }
}

/// Asks for the lines of a branch's children box that hold the slots in `mask` (not the
/// whole box: ten lines a branch filled the line-fill buffers); nothing for other nodes. A
/// hint only (reads the cell).
fn prefetch_slots<V>(c: &Cell<V>, mask: u16) {
    if let Node::Branch { children } = &c.node {
        let base = (&**children as *const Children<V>).cast::<u8>();
        let size = std::mem::size_of::<Option<Child<V>>>();
        // Each line once: neighbouring slots share lines.
        let mut last = usize::MAX;
        for i in slots_in(mask) {
            for offset in [i * size, i * size + size - 1] {
                let line = (base as usize).wrapping_add(offset) >> 6;
                if line != last {
                    proofkit_core::memory::prefetch_address(base, offset);
                    last = line;
                }
            }
        }
    }
}

/// Asks for what encoding `c` reads after its cell: a branch's children box, or a leaf
/// value's own lines (see [`TrieValue::prefetch`]); a hint only (reads the cell).
fn prefetch_box_or_value<V: TrieValue>(c: &Cell<V>) {
    match &c.node {
        Node::Leaf(Leaf { value, .. }) => value.prefetch(),
        _ => prefetch_children_box(c),
    }
}

/// Asks for a branch's children box (every line of it); nothing for other nodes. A hint only
/// (reads the cell).
fn prefetch_children_box<V>(c: &Cell<V>) {
    if let Node::Branch { children } = &c.node {
        proofkit_core::memory::prefetch_read_all(&**children);
    }
}

/// Asks for the lines holding the cached references of a branch's children in memory; a
/// hint only.
fn prefetch_child_refs<V>(cell: &Cell<V>) {
    if let Node::Branch { children } = &cell.node {
        let offset = std::mem::offset_of!(Cell<V>, cached);
        for c in children.iter().flatten() {
            // A child whose reference is copied in the slot is not read.
            if let Child::Mem(c, len, _) = c {
                if len.is_set() {
                    continue;
                }
                let p = Arc::as_ptr(c).cast::<u8>();
                proofkit_core::memory::prefetch_address(p, offset);
                proofkit_core::memory::prefetch_address(p, offset + 32);
            }
        }
    }
}

/// The nodes in memory under `c`, each stored node counting `stored`.
fn count_nodes<V>(c: &Child<V>, stored: usize) -> usize {
    let Child::Mem(cell, ..) = c else {
        return stored;
    };
    1 + match &cell.node {
        Node::Extension { child, .. } => count_nodes(child, stored),
        Node::Branch { children } => children
            .iter()
            .flatten()
            .map(|c| count_nodes(c, stored))
            .sum(),
        _ => 0,
    }
}

/// Files every node without a cached reference under `roots` by its distance from its root
/// (a node's children are one further: hashing the levels from the last one up hashes every
/// child before its parent), and the values of those that are leaves in `values`; returns
/// how many nodes. A level is read as a list, each cell asked for eight entries ahead and
/// its children's box four ahead, so that the misses overlap (a walk down the paths waits
/// for the cell, then the box, at every node).
fn collect_dirty<'a, V: TrieValue>(
    roots: &[&'a Cell<V>],
    levels: &mut Vec<Vec<&'a Cell<V>>>,
    values: &mut Vec<&'a V>,
) -> usize {
    let mut count = 0;
    let mut candidates: Vec<&'a Cell<V>> = roots.to_vec();
    while !candidates.is_empty() {
        let mut next = Vec::with_capacity(candidates.len() + 16);
        let mut level = Vec::with_capacity(candidates.len());
        for (i, &cell) in candidates.iter().enumerate() {
            if let Some(ahead) = candidates.get(i + 8) {
                proofkit_core::memory::prefetch_read_all(*ahead);
            }
            if let Some(ahead) = candidates.get(i + 4) {
                prefetch_box_or_value(ahead);
            }
            if cell.cached.is_set() {
                continue;
            }
            match &cell.node {
                Node::Leaf(Leaf { value, .. }) => values.push(value),
                Node::Extension { child, .. } => {
                    if let Child::Mem(c, ..) = child {
                        next.push(&**c);
                    }
                }
                Node::Branch { children } => {
                    for i in slots_in(cell.dirty_slots) {
                        if let Some(Child::Mem(c, ..)) = &children[i] {
                            next.push(&**c);
                        }
                    }
                }
                Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
            }
            level.push(cell);
        }
        count += level.len();
        levels.push(level);
        candidates = next;
    }
    count
}

fn encode<V: TrieValue>(cell: &Cell<V>, out: &mut Vec<u8>) {
    match &cell.node {
        Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
        Node::Leaf(Leaf { path, value }) => {
            // The value's bytes straight into `out` (no buffer of their own).
            let start = out.len();
            value.leaf_bytes(out);
            wrap_leaf_value(path, start, out);
        }
        Node::Extension { path, child } => encode_extension(path, &child_ref(child), out),
        Node::Branch { children } => {
            encode_branch_with(|i| children[i].as_ref().map(child_ref), out)
        }
    }
}

/// Appends the RLP of a leaf node: `[hex_prefix(path, leaf), value]`, `value` being the
/// leaf's bytes (itself RLP for an account).
pub fn encode_leaf(path: &[u8], value: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(value);
    wrap_leaf_value(path, start, out);
}

/// Turns the value bytes at `out[start..]` into the RLP of a leaf node over `path`: the
/// headers are written after the value and rotated in front of it.
pub(crate) fn wrap_leaf_value(path: &[u8], start: usize, out: &mut Vec<u8>) {
    let value_end = out.len();
    let value_len = value_end - start;
    let hp = HexPrefix::new(path, true);
    let hp = hp.as_slice();
    rlp::encode_list_header(
        out,
        rlp::bytes_len(hp) + rlp::bytes_len(&out[start..value_end]),
    );
    rlp::encode_bytes(out, hp);
    if !(value_len == 1 && out[start] < 0x80) {
        rlp::encode_string_header(out, value_len);
    }
    let head = out.len() - value_end;
    out[start..].rotate_right(head);
}

/// Appends the RLP of an extension node over the node referenced by `child`.
pub fn encode_extension(path: &[u8], child: &NodeRef, out: &mut Vec<u8>) {
    let hp = HexPrefix::new(path, false);
    let hp = hp.as_slice();
    rlp::encode_list_header(out, rlp::bytes_len(hp) + child.encoded_len());
    rlp::encode_bytes(out, hp);
    child.encode(out);
}

/// Appends the RLP of a branch node (no value: keys all have the same length) with children
/// `refs`.
pub fn encode_branch(refs: &[Option<NodeRef>; 16], out: &mut Vec<u8>) {
    encode_branch_with(|i| refs[i], out);
}

/// [`encode_branch`] with the children's references given by `child` (slot to reference),
/// each asked for once. The payload is written into a buffer on the stack after room for the
/// longest list header (3 bytes: a payload is at most 16 x 33 + 1 bytes), the header put
/// right before it, and the whole appended at once: summing the references' lengths first
/// and pushing them one by one, with an array of the 16 references built before, was more
/// than half of a branch's encoding (~4% of the CPU at 10,000 blocks, session 38).
fn encode_branch_with(mut child: impl FnMut(usize) -> Option<NodeRef>, out: &mut Vec<u8>) {
    const HEAD: usize = 3;
    let mut buf = [0u8; HEAD + 16 * 33 + 1];
    let mut o = HEAD;
    for i in 0..16 {
        match child(i) {
            None => {
                buf[o] = 0x80;
                o += 1;
            }
            Some(r) if r.is_hash() => {
                buf[o] = 0xa0;
                buf[o + 1..o + 33].copy_from_slice(&r.buf);
                o += 33;
            }
            Some(r) => {
                let b = r.bytes();
                buf[o..o + b.len()].copy_from_slice(b);
                o += b.len();
            }
        }
    }
    buf[o] = 0x80;
    o += 1;
    let len = o - HEAD;
    let start = if len <= 55 {
        buf[2] = 0xc0 + len as u8;
        2
    } else if len < 256 {
        buf[1..3].copy_from_slice(&[0xf8, len as u8]);
        1
    } else {
        buf[..3].copy_from_slice(&[0xf9, (len >> 8) as u8, len as u8]);
        0
    };
    out.extend_from_slice(&buf[start..o]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct Raw(Vec<u8>);
    impl TrieValue for Raw {
        fn leaf_bytes(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.0);
        }
    }

    /// The account trie's cell layout the walks and the allocator count on: an account leaf's
    /// path at the start of the allocation's second line (one `prefetch_cell` asks for, with
    /// the node's kind), and the `Arc`'s allocation within mimalloc's 320-byte class.
    #[test]
    fn an_account_leaf_cell_keeps_its_path_on_the_first_lines() {
        use crate::account::{Account, AccountLeaf};
        let cell = Cell::new(Node::Leaf(Leaf {
            path: Nibbles::from(&[1u8, 2][..]),
            value: AccountLeaf {
                account: Account {
                    nonce: 1,
                    balance: [0; 32],
                    code_hash: crate::keccak::KECCAK_EMPTY,
                },
                storage: crate::storage_trie::StorageTrie::new(),
            },
        }));
        let base = Arc::as_ptr(&cell) as usize;
        let Node::Leaf(leaf) = &cell.node else {
            unreachable!()
        };
        let path_start = &leaf.path as *const Nibbles as usize - base;
        // The counts take 16 bytes before the cell; lines from the allocation's start. A path
        // of up to 60 nibbles (an account leaf's, below the root) then ends on line 1.
        assert!(
            (64..=72).contains(&(16 + path_start)),
            "path starts at byte {} of the allocation",
            16 + path_start
        );
        assert!(16 + std::mem::size_of::<Cell<AccountLeaf>>() <= 320);
    }

    /// A stored node loaded to be written starts as one loaded clean and then touched (the
    /// path an insertion took before session 33): no reference, no flag, no dirty slot,
    /// every slot unpruned; so the roots and the pruning see the same masks either way.
    #[test]
    fn a_node_loaded_for_a_write_is_a_clean_node_touched() {
        let r = NodeRef::from_rlp(&[0xc2, 0x80, 0x80]);
        let leaf = || {
            Node::Leaf(Leaf {
                path: Nibbles::from(&[1u8, 2, 3][..]),
                value: Raw(vec![7; 40]),
            })
        };
        let mut clean = Cell::clean(leaf(), r, STORED);
        let clean = Arc::get_mut(&mut clean).expect("unique");
        assert!(clean.cached.is_set() && clean.has(STORED));
        clean.touch();
        let loaded = Cell::loaded_for_write(leaf());
        for c in [&*clean, &loaded] {
            assert_eq!(c.cached.get(), None);
            assert_eq!(c.flags.load(Ordering::Relaxed), 0);
            assert_eq!((c.dirty_slots, c.unpruned_slots), (0, ALL_SLOTS));
        }
    }

    /// The records walk marks in its parent's slot each leaf and branch it marks stored (with
    /// its kind), only where the slot holds a copy of the reference; a write through a slot
    /// drops its mark; pruning replaces a marked child by the stored node of that kind and
    /// reference, leaving the root and the nodes in memory as the pruning by the cells' flags
    /// does.
    #[test]
    fn slot_marks_name_stored_children_until_they_change() {
        fn marks<V>(c: &Child<V>, depth: usize, out: &mut Vec<(usize, Option<StoredKind>, bool)>) {
            let Child::Mem(cell, ..) = c else { return };
            let kids: Vec<&Child<V>> = match &cell.node {
                Node::Branch { children } => children.iter().flatten().collect(),
                Node::Extension { child, .. } => vec![child],
                _ => vec![],
            };
            for k in kids {
                if let Child::Mem(kc, len, _) = k {
                    let kind = match &kc.node {
                        Node::Leaf(..) => Some(StoredKind::Leaf),
                        Node::Branch { .. } => Some(StoredKind::Branch),
                        _ => None,
                    };
                    // (depth, kind of a leaf or branch, whether the slot's mark says so)
                    let ok = match len.stored_kind() {
                        Some(m) => Some(m) == kind && kc.has(STORED) && len.is_set(),
                        None => false,
                    };
                    out.push((depth + 1, kind, ok));
                }
                marks(k, depth + 1, out);
            }
        }
        let key = |i: u32| nibbles(&keccak256(&i.to_le_bytes()));
        let mut t: Trie<Raw> = Trie::new();
        for i in 0..2000 {
            t.insert(&key(i), Raw(vec![0x82, i as u8, (i >> 8) as u8]), &NoLoader)
                .unwrap();
        }
        let mut found = Vec::new();
        marks(t.root.as_ref().unwrap(), 0, &mut found);
        assert!(found.iter().all(|m| !m.2), "no mark before a walk");
        t.root_hash();
        t.take_dirty(|_, _| {});
        let mut found = Vec::new();
        marks(t.root.as_ref().unwrap(), 0, &mut found);
        // Every leaf and branch in memory is marked, with its kind.
        assert!(found.iter().filter(|m| m.1.is_some()).all(|m| m.2));
        let leaves = found
            .iter()
            .filter(|m| m.1 == Some(StoredKind::Leaf))
            .count();
        let branches = found
            .iter()
            .filter(|m| m.1 == Some(StoredKind::Branch))
            .count();
        assert!(leaves == 2000 && branches > 100, "{leaves} {branches}");
        // Writes drop the marks on their paths: one key's path, and a new key's.
        t.insert(&key(7), Raw(vec![0x81]), &NoLoader).unwrap();
        t.insert(&key(5000), Raw(vec![0x81]), &NoLoader).unwrap();
        let mut found = Vec::new();
        marks(t.root.as_ref().unwrap(), 0, &mut found);
        let unmarked = found.iter().filter(|m| m.1.is_some() && !m.2).count();
        assert!((2..=12).contains(&unmarked), "{unmarked}");
        // Pruning by the marks leaves what pruning by the flags leaves, and the same root.
        let root = t.root_hash();
        for keep in [1, 2, 3, 4] {
            let mut p = t.clone();
            let want = p.pruned(keep);
            let mut dropped = Vec::new();
            // In place, the marks are used in cells pruning holds alone (a clone of `t` shares
            // them all and takes the copying path), so each depth prunes a trie built afresh.
            let mut q = Trie::new();
            for i in 0..2000 {
                q.insert(&key(i), Raw(vec![0x82, i as u8, (i >> 8) as u8]), &NoLoader)
                    .unwrap();
            }
            q.root_hash();
            q.take_dirty(|_, _| {});
            q.insert(&key(7), Raw(vec![0x81]), &NoLoader).unwrap();
            q.insert(&key(5000), Raw(vec![0x81]), &NoLoader).unwrap();
            assert_eq!(q.root_hash(), root);
            let want_q = q.pruned(keep);
            q.prune_in_place(keep, &mut dropped);
            assert!(!dropped.is_empty());
            assert_eq!(mem_nodes(&q), mem_nodes(&want_q), "keep {keep}");
            assert_eq!(mem_nodes(&q), mem_nodes(&want), "keep {keep}");
            assert_eq!(q.root_hash(), root);
            p.prune_in_place(keep, &mut Vec::new());
            assert_eq!(p.root_hash(), root);
        }
    }

    /// Pruning visits only the slots the records walk passed since the last pruning: paths
    /// written after the walk wait for the next one (pruning them found only unstored nodes),
    /// and what the walk passed is pruned as pruning by the cells' flags prunes it.
    #[test]
    fn pruning_visits_only_the_slots_the_walk_passed() {
        let key = |i: u32| nibbles(&keccak256(&i.to_le_bytes()));
        let value = |i: u32| Raw(vec![0x82, i as u8, (i >> 8) as u8]);
        let root_cell = |t: &Trie<Raw>| match &t.root {
            Some(Child::Mem(c, ..)) => Arc::clone(c),
            _ => unreachable!("a branch in memory"),
        };
        let mut t: Trie<Raw> = Trie::new();
        for i in 0..3000 {
            t.insert(&key(i), value(i), &NoLoader).unwrap();
        }
        t.root_hash();
        t.take_dirty(|_, _| {});
        // The walk passed every child of the root; pruning (keep 3) visits them all and
        // leaves what pruning by the flags leaves.
        assert_eq!(
            root_cell(&t).walked_slots.load(Ordering::Relaxed),
            ALL_SLOTS
        );
        let want = t.pruned(3);
        let mut dropped = Vec::new();
        t.prune_in_place(3, &mut dropped);
        assert!(dropped.len() > 2000, "{}", dropped.len());
        assert_eq!(mem_nodes(&t), mem_nodes(&want));
        assert_eq!(root_cell(&t).walked_slots.load(Ordering::Relaxed), 0);
        // Writes after the walk (keys under three nibbles no key had, so that nothing stored
        // is loaded): their slots are unpruned but not walked, so pruning passes them by,
        // which keeps what pruning by the flags keeps (their nodes are not stored).
        let taken: std::collections::HashSet<[u8; 3]> =
            (0..3000).map(|i| key(i)[..3].try_into().unwrap()).collect();
        let fresh: Vec<u32> = (3000..)
            .filter(|&i| !taken.contains(&<[u8; 3]>::try_from(&key(i)[..3]).unwrap()))
            .take(40)
            .collect();
        for &i in &fresh {
            t.insert(&key(i), value(i), &NoLoader).unwrap();
        }
        let root = t.root_hash();
        let cell = root_cell(&t);
        assert_ne!(cell.unpruned_slots, 0);
        assert_eq!(cell.prunable_slots(), 0);
        drop(cell);
        let want = t.pruned(3);
        let mut dropped = Vec::new();
        t.prune_in_place(3, &mut dropped);
        assert!(dropped.is_empty());
        assert_eq!(mem_nodes(&t), mem_nodes(&want));
        // Once the walk passed them, they are pruned like the rest.
        t.take_dirty(|_, _| {});
        let want = t.pruned(3);
        t.prune_in_place(3, &mut dropped);
        assert!(!dropped.is_empty());
        assert_eq!(mem_nodes(&t), mem_nodes(&want));
        assert_eq!(t.root_hash(), root);
    }

    /// A record decoded straight into a branch's children gives the children that decoding it
    /// into entries first gives; a record with an extension path over the room left, a
    /// truncated one, one with trailing bytes and one with a single child are refused.
    #[test]
    fn records_decode_straight_into_children() {
        let hash = |b: u8| NodeRef::from_bytes(&[b; 32]).unwrap();
        let embedded = NodeRef::from_bytes(&[0xc2, 0x20, 0x01]).unwrap();
        let path: Nibbles = [1u8, 2, 3, 4, 5].as_slice().into();
        let mut entries: [Option<ChildEntry>; 16] = Default::default();
        entries[0] = Some(ChildEntry::Leaf(hash(1)));
        entries[3] = Some(ChildEntry::Branch(hash(2)));
        entries[9] = Some(ChildEntry::Extension(path, hash(3)));
        entries[15] = Some(ChildEntry::Leaf(embedded));
        let bits: u16 = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.is_some())
            .map(|(i, _)| 1 << i)
            .sum();
        let mut rec = bits.to_le_bytes().to_vec();
        for e in entries.iter().flatten() {
            encode_entry(e, &mut rec);
        }
        let want: Box<Children<Raw>> = record_children(&decode_record(&rec).unwrap());
        let got: Box<Children<Raw>> = decode_record_children(&rec, 5).unwrap();
        for (w, g) in want.iter().zip(got.iter()) {
            assert_eq!(w.is_some(), g.is_some());
            if let (Some(w), Some(g)) = (w, g) {
                assert_eq!(child_ref(w), child_ref(g));
                assert_eq!(
                    matches!(w, Child::Stored(StoredKind::Leaf, _)),
                    matches!(g, Child::Stored(StoredKind::Leaf, _))
                );
                assert_eq!(matches!(w, Child::Mem(..)), matches!(g, Child::Mem(..)));
            }
        }
        // The extension's five nibbles need room for five.
        assert!(decode_record_children::<Raw>(&rec, 4).is_none());
        assert!(decode_record_children::<Raw>(&rec[..rec.len() - 1], 5).is_none());
        let mut trailing = rec.clone();
        trailing.push(0);
        assert!(decode_record_children::<Raw>(&trailing, 5).is_none());
        let mut single = 1u16.to_le_bytes().to_vec();
        encode_entry(&ChildEntry::Leaf(hash(1)), &mut single);
        assert!(decode_record_children::<Raw>(&single, 5).is_none());
    }

    /// A value that counts its drops (clones included), to see which leaves a drop freed.
    #[derive(Clone)]
    struct Counted(Vec<u8>, Arc<std::sync::atomic::AtomicUsize>);
    impl TrieValue for Counted {
        fn leaf_bytes(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.0);
        }
    }
    impl Drop for Counted {
        fn drop(&mut self) {
            self.1.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The leaf cells in memory under `c`.
    fn leaf_cells<V>(c: &Child<V>, out: &mut std::collections::HashSet<usize>) {
        let Child::Mem(cell, ..) = c else { return };
        match &cell.node {
            Node::Leaf(..) => {
                out.insert(Arc::as_ptr(cell) as usize);
            }
            Node::Extension { child, .. } => leaf_cells(child, out),
            Node::Branch { children } => children.iter().flatten().for_each(|c| leaf_cells(c, out)),
            Node::Hole => {}
        }
    }

    #[test]
    fn dropping_pruned_subtrees_frees_exactly_the_cells_no_version_holds() {
        let drops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let value = |i: u32| Counted(vec![0x82, i as u8, (i >> 8) as u8], Arc::clone(&drops));
        let key = |i: u32| nibbles(&keccak256(&i.to_le_bytes()));
        for keep in [0, 1, 2, 3] {
            let mut t = Trie::new();
            for i in 0..3000 {
                t.insert(&key(i), value(i), &NoLoader).unwrap();
            }
            t.root_hash();
            t.take_dirty(|_, _| {});
            // An older version shares every cell; the writes below copy their paths.
            let older = t.clone();
            let older_root = older.root_hash();
            for i in (0..3000).step_by(7).chain(5000..5500) {
                t.insert(&key(i), value(i + 1), &NoLoader).unwrap();
            }
            let root = t.root_hash();
            t.take_dirty(|_, _| {});
            let mut dropped = Vec::new();
            t.prune_in_place(keep, &mut dropped);
            assert!(!dropped.is_empty(), "keep {keep}");
            let (mut gone, mut held) = (Default::default(), Default::default());
            dropped.iter().for_each(|c| leaf_cells(c, &mut gone));
            for r in [&older.root, &t.root].into_iter().flatten() {
                leaf_cells(r, &mut held);
            }
            let freed = gone.difference(&held).count();
            assert!(freed > 400, "keep {keep}: {freed}");
            let before = drops.load(Ordering::Relaxed);
            drop_subtrees(dropped);
            assert_eq!(drops.load(Ordering::Relaxed) - before, freed, "keep {keep}");
            // What the versions still hold is intact.
            assert_eq!(older.root_hash(), older_root);
            assert_eq!(t.root_hash(), root);
            for i in (0..3000).step_by(97) {
                assert_eq!(older.get(&key(i)).map(|v| v.0[1]), Some(i as u8));
            }
        }
    }

    #[test]
    fn extension_entries_longer_than_a_key_are_malformed() {
        // Tag, path length, packed path, reference length, a 32-byte hash.
        let entry = |n: usize| {
            let mut b = vec![TAG_EXTENSION, n as u8];
            b.extend(std::iter::repeat_n(0x12, n / 2));
            if n % 2 == 1 {
                b.push(0x10);
            }
            b.push(32);
            b.extend_from_slice(&[7; 32]);
            b
        };
        let e = decode_entry(&mut &entry(63)[..]).expect("63 nibbles fit under a branch");
        assert!(matches!(e, ChildEntry::Extension(ref p, _) if p.len() == 63));
        assert!(decode_entry(&mut &entry(64)[..]).is_none());
        assert!(decode_entry(&mut &entry(200)[..]).is_none());
    }

    #[test]
    fn hex_prefix_round_trips() {
        for len in 0..6 {
            for leaf in [false, true] {
                let path: Vec<u8> = (0..len as u8).map(|i| (i * 7) & 15).collect();
                let hp = hex_prefix(&path, leaf);
                assert_eq!(decode_hex_prefix(&hp), Some((path, leaf)));
            }
        }
        assert_eq!(hex_prefix(&[1, 2, 3, 4, 5], false), vec![0x11, 0x23, 0x45]);
        // Paths longer than a 32-byte key's 64 nibbles take the heap form, same encoding.
        for len in [63usize, 64, 65, 66, 101, 200] {
            for leaf in [false, true] {
                let path: Vec<u8> = (0..len).map(|i| (i * 5 % 16) as u8).collect();
                let hp = hex_prefix(&path, leaf);
                assert_eq!(hp.len(), len / 2 + 1);
                assert_eq!(decode_hex_prefix(&hp), Some((path, leaf)));
            }
        }
        assert_eq!(
            hex_prefix(&[0, 15, 1, 12, 11, 8], true),
            vec![0x20, 0x0f, 0x1c, 0xb8]
        );
        assert_eq!(decode_hex_prefix(&[0x4f]), None);
    }

    #[test]
    fn leaf_nodes_encode_in_place_as_their_rlp_spelled_out() {
        // Values of every header form (empty, one byte below and above 0x80, 55 and 56 bytes
        // on either side of the long-string header, 300 bytes), paths of odd and even length,
        // appended after bytes already in the buffer.
        for len in [0usize, 1, 2, 31, 55, 56, 57, 120, 300] {
            for first in [0x00u8, 0x05, 0x7F, 0x80, 0xC3] {
                for path_len in [0usize, 1, 2, 7, 64] {
                    let value: Vec<u8> = (0..len).map(|i| first.wrapping_add(i as u8)).collect();
                    let path: Vec<u8> = (0..path_len).map(|i| (i * 7 % 16) as u8).collect();
                    let cell = Cell::new(Node::Leaf(Leaf {
                        path: path[..].into(),
                        value: Raw(value.clone()),
                    }));
                    let mut got = vec![0xAA, 0xBB];
                    encode(&cell, &mut got);
                    let mut via_encode_leaf = vec![0xAA, 0xBB];
                    encode_leaf(&path, &value, &mut via_encode_leaf);
                    assert_eq!(got, via_encode_leaf);
                    // The leaf's RLP spelled out: [hex_prefix(path, leaf), value].
                    let mut payload = Vec::new();
                    rlp::encode_bytes(&mut payload, &hex_prefix(&path, true));
                    rlp::encode_bytes(&mut payload, &value);
                    let mut want = vec![0xAA, 0xBB];
                    rlp::encode_list_header(&mut want, payload.len());
                    want.extend_from_slice(&payload);
                    assert_eq!(
                        got, want,
                        "value {len} bytes from {first:#x}, path {path_len}"
                    );
                }
            }
        }
    }

    #[test]
    fn insert_remove_keeps_canonical_shape() {
        let mut t = Trie::new();
        assert_eq!(t.root_hash(), EMPTY_ROOT);
        let keys: Vec<B256> = (0u8..40).map(|i| keccak256(&[i])).collect();
        for k in &keys {
            t.insert(&nibbles(k), Raw(vec![0x01]), &NoLoader).unwrap();
        }
        let full = t.root_hash();
        let mut t2 = t.clone();
        t2.insert(&nibbles(&keccak256(b"x")), Raw(vec![0x02]), &NoLoader)
            .unwrap();
        assert!(t2.remove(&nibbles(&keccak256(b"x")), &NoLoader).unwrap());
        assert!(!t2.remove(&nibbles(&keccak256(b"x")), &NoLoader).unwrap());
        assert_eq!(t2.root_hash(), full, "insert then remove restores the root");
        for k in &keys {
            assert!(t2.remove(&nibbles(k), &NoLoader).unwrap());
        }
        assert!(t2.is_empty());
        assert_eq!(t2.root_hash(), EMPTY_ROOT);
        assert_eq!(t.root_hash(), full, "the older version is untouched");
        assert!(t.get(&nibbles(&keys[3])).is_some());
    }

    /// The nodes without a cached reference, by a walk of every node in memory.
    fn unhashed<V>(c: &Child<V>) -> usize {
        let Child::Mem(cell, ..) = c else { return 0 };
        let below = match &cell.node {
            Node::Extension { child, .. } => unhashed(child),
            Node::Branch { children } => children.iter().flatten().map(unhashed).sum(),
            _ => 0,
        };
        below + usize::from(!cell.cached.is_set())
    }

    /// The nodes of `t` in memory, stored ones not counted.
    fn mem_nodes<V>(t: &Trie<V>) -> usize {
        t.root.as_ref().map_or(0, |r| count_nodes(r, 0))
    }

    /// The dirty-slot masks name every child that lacks a reference: the walk that collects
    /// a root's work (which reads only those slots) finds exactly the nodes a full walk
    /// finds, after inserts, updates, removals and writes to versions sharing nodes, hashed
    /// or not in between. (A slot missing from a mask would not change a root, only leave its
    /// subtree to be hashed one node at a time; this test is what notices it.)
    #[test]
    fn dirty_slots_name_every_unhashed_child() {
        let key = |i: u32| nibbles(&keccak256(&i.to_le_bytes()));
        let check = |t: &Trie<Raw>, what: &str| {
            let Some(root) = &t.root else { return };
            let Child::Mem(cell, ..) = root else { return };
            let (mut levels, mut values) = (Vec::new(), Vec::new());
            assert_eq!(
                collect_dirty(&[&**cell], &mut levels, &mut values),
                unhashed(root),
                "{what}"
            );
        };
        let mut t = Trie::new();
        for i in 0..600 {
            t.insert(&key(i), Raw(vec![1]), &NoLoader).unwrap();
        }
        check(&t, "fresh");
        t.root_hash();
        check(&t, "hashed");
        let mut versions = vec![t.clone()];
        for round in 0..12u32 {
            let mut v = versions.last().unwrap().clone();
            for j in 0..40 {
                let i = (round * 97 + j * 31) % 900;
                match (i + round) % 4 {
                    0 => {
                        v.remove(&key(i), &NoLoader).unwrap();
                    }
                    1 => {
                        if let Some(x) = v.get_mut(&key(i), &NoLoader).unwrap() {
                            x.0.push(round as u8);
                        }
                    }
                    _ => v
                        .insert(&key(i), Raw(vec![2, round as u8]), &NoLoader)
                        .unwrap(),
                }
            }
            check(&v, &format!("round {round}, before its root"));
            if round % 3 != 2 {
                v.root_hash();
                check(&v, &format!("round {round}, after its root"));
            }
            // An older version written to again: its copies share nodes with the newer one.
            let mut older = versions[versions.len() / 2].clone();
            older
                .insert(&key(1000 + round), Raw(vec![3]), &NoLoader)
                .unwrap();
            check(&older, &format!("round {round}, older version"));
            versions.push(v);
        }
    }

    /// A branch's encoding is the RLP list of its 16 slots and an empty value, whatever the
    /// payload's length (a short list, one- and two-byte long headers): the same bytes as
    /// the items encoded one by one after a header for their summed length, and 17 items
    /// when decoded.
    #[test]
    fn branches_encode_as_rlp_lists_of_every_length() {
        let hash = |i: u8| NodeRef {
            len: 32,
            buf: [i; 32],
        };
        // An embedded node of `n` bytes: a list of `n - 1` empty strings.
        let embedded = |n: usize| {
            let mut b = vec![0x80u8; n];
            b[0] = 0xc0 + (n - 1) as u8;
            NodeRef::from_bytes(&b).unwrap()
        };
        let cases: Vec<[Option<NodeRef>; 16]> = vec![
            std::array::from_fn(|_| None),
            std::array::from_fn(|i| (i % 7 == 0).then(|| embedded(3))),
            std::array::from_fn(|i| (i < 2).then(|| embedded(31))),
            std::array::from_fn(|i| (i < 3).then(|| hash(i as u8))),
            std::array::from_fn(|i| (i % 2 == 0).then(|| hash(i as u8))),
            std::array::from_fn(|i| Some(hash(i as u8))),
            std::array::from_fn(|i| Some(if i == 5 { embedded(20) } else { hash(i as u8) })),
        ];
        let mut heads = std::collections::BTreeSet::new();
        for refs in &cases {
            let mut payload = Vec::new();
            for r in refs {
                match r {
                    Some(r) if r.is_hash() => rlp::encode_bytes(&mut payload, &r.buf),
                    Some(r) => payload.extend_from_slice(r.bytes()),
                    None => rlp::encode_bytes(&mut payload, &[]),
                }
            }
            rlp::encode_bytes(&mut payload, &[]);
            let mut want = Vec::new();
            rlp::encode_list_header(&mut want, payload.len());
            want.extend_from_slice(&payload);
            let mut got = vec![0xee];
            encode_branch(refs, &mut got);
            assert_eq!(got[0], 0xee, "appended after what the buffer held");
            assert_eq!(got[1..], want[..]);
            assert_eq!(rlp::decode_list(&got[1..]).unwrap().len(), 17);
            heads.insert(match got[1] {
                0xc0..=0xf7 => 0,
                0xf8 => 1,
                _ => 2,
            });
        }
        assert_eq!(heads.len(), 3, "every header form was tried");
    }

    /// `find_mut` finds what `get_mut` finds; for an absent key (a leaf with another path, an
    /// extension it leaves, an empty slot, a shorter key) it returns `None` and the root stays
    /// the same, though the path it walked was made writable.
    #[test]
    fn find_mut_agrees_with_get_mut_and_keeps_the_root() {
        let key = |i: u32| nibbles(&keccak256(&i.to_le_bytes()));
        let mut t: Trie<Raw> = Trie::new();
        for i in 0..500 {
            t.insert(&key(i), Raw(vec![1, i as u8]), &NoLoader).unwrap();
        }
        // An extension: two keys sharing their first 40 nibbles.
        let mut a = key(9000);
        let mut b = a;
        b[63] ^= 1;
        t.insert(&a, Raw(vec![7]), &NoLoader).unwrap();
        t.insert(&b, Raw(vec![8]), &NoLoader).unwrap();
        let root = t.root_hash();
        for i in (0..500).step_by(7) {
            let mut u = t.clone();
            let found = u.find_mut(&key(i), &NoLoader).unwrap().map(|r| r.0.clone());
            assert_eq!(found, Some(vec![1, i as u8]));
            assert_eq!(u.root_hash(), root);
        }
        a[20] ^= 1; // leaves the extension that `a` and `b` share
        let (far, farther) = (key(100_000), key(100_001));
        let absents: [&[u8]; 4] = [&far, &farther, &a, &key(3)[..10]];
        for absent in absents {
            let mut u = t.clone();
            assert!(u.get_mut(absent, &NoLoader).unwrap().is_none());
            assert!(u.find_mut(absent, &NoLoader).unwrap().is_none());
            assert_eq!(u.root_hash(), root);
        }
        // A present key changed through `find_mut` changes the root as an insert does.
        let mut u = t.clone();
        *u.find_mut(&b, &NoLoader).unwrap().unwrap() = Raw(vec![9]);
        t.insert(&b, Raw(vec![9]), &NoLoader).unwrap();
        assert_eq!(u.root_hash(), t.root_hash());
        assert!(Trie::<Raw>::new()
            .find_mut(&a, &NoLoader)
            .unwrap()
            .is_none());
    }

    /// A cell's cached reference set through a shared cell by several threads at once (each
    /// setting the same bytes, as threads hashing the same node would): a reader sees none
    /// or the whole reference, never a length with other bytes; `&mut` clears it.
    #[test]
    fn ref_cache_is_set_whole_from_many_threads() {
        for len in [1u8, 31, 32] {
            let mut buf = [0u8; 32];
            for (i, b) in buf.iter_mut().enumerate().take(len as usize) {
                *b = 0xa0 ^ i as u8;
            }
            let r = NodeRef { len, buf };
            let mut cache = RefCache::new();
            assert_eq!(cache.get(), None);
            std::thread::scope(|s| {
                for _ in 0..3 {
                    s.spawn(|| cache.set(r));
                }
                s.spawn(|| {
                    for _ in 0..10_000 {
                        if let Some(seen) = cache.get() {
                            assert_eq!(seen, r);
                        }
                    }
                });
            });
            assert!(cache.is_set());
            assert_eq!(cache.get_or_init(|| unreachable!("set already")), r);
            cache = RefCache::new();
            assert!(!cache.is_set());
            assert_eq!(cache.get_or_init(|| r), r);
        }
    }

    /// `share_out` calls its function once on every item, however the pool's threads join
    /// (none, one, or late), and returns only when every call has returned.
    #[test]
    fn share_out_calls_every_item_once() {
        use std::sync::atomic::AtomicU32;
        for n in [0usize, 1, 2, 17, 300] {
            let items: Vec<usize> = (0..n).collect();
            let calls: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
            share_out(&items, |&i| {
                if i % 5 == 0 {
                    // Some slow items, so that another thread takes the ones after them.
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                calls[i].fetch_add(1, Ordering::Relaxed);
            });
            let counts: Vec<u32> = calls.iter().map(|c| c.load(Ordering::Relaxed)).collect();
            assert_eq!(counts, vec![1; n], "{n} items");
        }
    }

    /// The root hashed in pieces (the root's written subtrees taken by the threads in turn)
    /// equals the root hashed a level at a time on the pool, and the one hashed a level at a
    /// time on the calling thread: three tries written alike, each hashed one way, for a
    /// fresh trie and after updates and removals.
    #[test]
    fn pieces_and_levels_hash_alike() {
        let key = |i: u32| nibbles(&keccak256(&i.to_le_bytes()));
        let mut tries: [Trie<Raw>; 3] = [Trie::new(), Trie::new(), Trie::new()];
        let mut roots = Vec::new();
        for round in 0..4u32 {
            for t in &mut tries {
                if round == 0 {
                    for i in 0..3000 {
                        t.insert(&key(i), Raw(vec![1, i as u8]), &NoLoader).unwrap();
                    }
                }
                for j in 0..500 * u32::from(round > 0) {
                    let i = (round * 7919 + j * 13) % 4000;
                    if j % 3 == 0 {
                        t.remove(&key(i), &NoLoader).unwrap();
                    } else {
                        t.insert(&key(i), Raw(vec![2, round as u8]), &NoLoader)
                            .unwrap();
                    }
                }
            }
            let cells: Vec<Arc<Cell<Raw>>> = tries
                .iter()
                .map(|t| match &t.root {
                    Some(Child::Mem(c, ..)) => Arc::clone(c),
                    _ => panic!("a trie of many leaves has its root in memory"),
                })
                .collect();
            // The pieces are a real split: several of the root's children were written.
            assert!(slots_in(cells[0].dirty_slots).count() > 1, "round {round}");
            let in_pieces = tries[0].root_hash();
            hash_dirty_many(&[&*cells[1]], Threads::Pool);
            hash_dirty_many(&[&*cells[2]], Threads::Caller);
            let by_level = [tries[1].root_hash(), tries[2].root_hash()];
            assert_eq!(by_level, [in_pieces; 2], "round {round}");
            roots.push(in_pieces);
        }
        roots.dedup();
        assert_eq!(roots.len(), 4, "each round changed the root");
    }

    /// A branch's record written straight from its children's cells is the encoding of their
    /// entries, for every kind of child: leaves, branches and extensions in memory, and
    /// leaves and branches pruned to stored references.
    #[test]
    fn branch_records_are_their_children_entries_encoded() {
        let key = |i: u32| nibbles(&keccak256(&i.to_le_bytes()));
        let mut t = Trie::new();
        for i in 0..400 {
            t.insert(&key(i), Raw(vec![1; 40]), &NoLoader).unwrap();
        }
        t.root_hash();
        t.take_dirty(|_, _| {});
        // Written after the records were taken: kept in memory by the pruning below, beside
        // siblings that become stored references. Each key's twin differs in its last nibble
        // only, so the pair hangs below an extension.
        for i in 1000..1030 {
            let k = key(i);
            let mut twin = k;
            twin[63] ^= 1;
            t.insert(&k, Raw(vec![2]), &NoLoader).unwrap();
            t.insert(&twin, Raw(vec![3]), &NoLoader).unwrap();
        }
        t.root_hash();
        let pruned = t.pruned(3);
        fn visit(c: &Child<Raw>, seen: &mut [usize; 5]) {
            let Child::Mem(cell, ..) = c else { return };
            match &cell.node {
                Node::Extension { child, .. } => visit(child, seen),
                Node::Branch { children } => {
                    let entries: [Option<ChildEntry>; 16] =
                        std::array::from_fn(|i| children[i].as_ref().map(child_entry));
                    assert_eq!(branch_record(children), encode_record(&entries));
                    for c in children.iter().flatten() {
                        let kind = match c {
                            Child::Stored(StoredKind::Leaf, _) => 0,
                            Child::Stored(StoredKind::Branch, _) => 1,
                            Child::Mem(m, ..) => match &m.node {
                                Node::Leaf(..) => 2,
                                Node::Branch { .. } => 3,
                                _ => 4,
                            },
                        };
                        seen[kind] += 1;
                        visit(c, seen);
                    }
                }
                _ => {}
            }
        }
        let mut seen = [0; 5];
        for trie in [&t, &pruned] {
            visit(trie.root.as_ref().unwrap(), &mut seen);
        }
        assert!(seen.iter().all(|&n| n > 0), "every kind of child: {seen:?}");
    }

    #[test]
    fn unstored_leaves_are_those_written_since_the_records_were_taken() {
        let leaves = |t: &Trie<Raw>| {
            let mut v = Vec::new();
            t.for_each_unstored_leaf(|p, r| v.push((p.to_vec(), r.0.clone())));
            v
        };
        let mut t = Trie::new();
        let keys: Vec<[u8; 64]> = (0u16..300)
            .map(|i| nibbles(&keccak256(&i.to_le_bytes())))
            .collect();
        for (i, k) in keys.iter().enumerate() {
            t.insert(k, Raw(vec![i as u8]), &NoLoader).unwrap();
        }
        let all = leaves(&t);
        assert_eq!(
            all.len(),
            keys.len(),
            "before any records were taken: every leaf"
        );
        assert!(all.windows(2).all(|w| w[0].0 < w[1].0), "in path order");
        t.root_hash();
        let mut taken = Vec::new();
        t.take_dirty_with_leaves(|_, _| {}, |p, r| taken.push((p.to_vec(), r.0.clone())));
        assert_eq!(taken, all, "the record walk visits the same leaves");
        assert!(leaves(&t).is_empty(), "every leaf is stored now");
        // Changes: two updates, one new key, one removal next to a leaf that then moves up.
        t.insert(&keys[5], Raw(vec![0xaa]), &NoLoader).unwrap();
        *t.get_mut(&keys[9], &NoLoader).unwrap().unwrap() = Raw(vec![0xbb]);
        let fresh = nibbles(&keccak256(b"fresh"));
        t.insert(&fresh, Raw(vec![0xcc]), &NoLoader).unwrap();
        assert!(t.remove(&keys[17], &NoLoader).unwrap());
        let got = leaves(&t);
        for (k, v) in [(&keys[5], 0xaa), (&keys[9], 0xbb), (&fresh, 0xcc)] {
            assert!(
                got.contains(&(k.to_vec(), vec![v])),
                "a written leaf is listed"
            );
        }
        assert!(
            !got.iter().any(|(p, _)| p[..] == keys[17][..]),
            "a removed leaf is not"
        );
        for (p, v) in &got {
            assert_eq!(
                t.get(p).map(|r| &r.0),
                Some(v),
                "a listed leaf is in the trie"
            );
        }
        assert!(
            got.len() <= 5,
            "only what the changes touched: {}",
            got.len()
        );
        t.root_hash();
        // The two halves together: the same leaves, and the records of one whole walk.
        let whole = {
            // The same trie built apart (a clone would share the nodes and their marks).
            let mut u = Trie::new();
            for (i, k) in keys.iter().enumerate() {
                u.insert(k, Raw(vec![i as u8]), &NoLoader).unwrap();
            }
            u.root_hash();
            u.take_dirty(|_, _| {});
            u.insert(&keys[5], Raw(vec![0xaa]), &NoLoader).unwrap();
            *u.get_mut(&keys[9], &NoLoader).unwrap().unwrap() = Raw(vec![0xbb]);
            u.insert(&fresh, Raw(vec![0xcc]), &NoLoader).unwrap();
            assert!(u.remove(&keys[17], &NoLoader).unwrap());
            assert_eq!(u.root_hash(), t.root_hash());
            let mut records = Vec::new();
            u.take_dirty(|p, r| records.push((p.to_vec(), r.to_vec())));
            records
        };
        let (mut taken, mut records) = (Vec::new(), Vec::new());
        for half in [0, 1] {
            t.take_dirty_half(
                half,
                NO_DEPTHS,
                |p, r| records.push((p.to_vec(), r.to_vec())),
                |p, r| taken.push((p.to_vec(), r.0.clone())),
            );
        }
        t.took_both_halves();
        assert_eq!(taken, got, "after the changes too");
        assert_eq!(records, whole);
        assert!(
            !records.is_empty() && records[0].0.is_empty(),
            "the root's first"
        );
        assert!(leaves(&t).is_empty());
    }

    /// A walk that leaves out the records of some depths visits only the unpruned slots of
    /// their branches: it yields the leaves a full walk yields and the same records but for
    /// those depths, whether the trie was pruned before (the masks exact, as a finalization
    /// walks) or not (the masks a superset).
    #[test]
    fn a_recordless_walk_visits_what_a_full_walk_visits() {
        let keys: Vec<[u8; 64]> = (0u16..3000)
            .map(|i| nibbles(&keccak256(&i.to_le_bytes())))
            .collect();
        let fresh: Vec<[u8; 64]> = (0u16..40)
            .map(|i| nibbles(&keccak256(&(60000 - i).to_le_bytes())))
            .collect();
        // The same changes on a trie built apart each time (a clone shares the marks).
        let build = |prune_first: bool| {
            let mut t = Trie::new();
            for (i, k) in keys.iter().enumerate() {
                t.insert(k, Raw(vec![i as u8]), &NoLoader).unwrap();
            }
            t.root_hash();
            t.take_dirty(|_, _| {});
            // Nothing is replaced by a stored node (no loader here): the masks are what
            // pruning leaves.
            t.prune_in_place(64, &mut Vec::new());
            for (i, k) in fresh.iter().enumerate() {
                t.insert(k, Raw(vec![0xf0, i as u8]), &NoLoader).unwrap();
            }
            for k in keys.iter().step_by(97) {
                *t.get_mut(k, &NoLoader).unwrap().unwrap() = Raw(vec![0xee]);
            }
            assert!(t.remove(&keys[11], &NoLoader).unwrap());
            t.root_hash();
            if prune_first {
                t.prune_in_place(64, &mut Vec::new());
            }
            t
        };
        let walk = |t: &Trie<Raw>, recordless: std::ops::Range<usize>| {
            let (mut records, mut leaves) = (Vec::new(), Vec::new());
            for half in [0, 1] {
                t.take_dirty_half(
                    half,
                    recordless.clone(),
                    |p, r| records.push((p.to_vec(), r.to_vec())),
                    |p, v| leaves.push((p.to_vec(), v.0.clone())),
                );
            }
            t.took_both_halves();
            (records, leaves)
        };
        for prune_first in [true, false] {
            let (full_records, full_leaves) = walk(&build(prune_first), NO_DEPTHS);
            let (records, leaves) = walk(&build(prune_first), 2..4);
            assert_eq!(leaves, full_leaves, "pruned first: {prune_first}");
            assert!(leaves.len() >= fresh.len() + keys.len() / 97);
            let expected: Vec<_> = full_records
                .into_iter()
                .filter(|(p, _)| !(2..4).contains(&p.len()))
                .collect();
            assert_eq!(records, expected, "pruned first: {prune_first}");
            assert!(records.iter().any(|(p, _)| p.len() == 4));
        }
    }

    /// The references copied into the parents' slots follow every change: after random
    /// inserts, updates and removals, on versions that share nodes and in tries pruned in
    /// place between blocks, each version's root is the root of a trie built afresh from its
    /// keys, and an older version's root does not move when a newer one changes.
    #[test]
    fn copied_child_references_follow_every_change() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let key = |i: u32| nibbles(&keccak256(&i.to_le_bytes()));
        let fresh_root = |m: &std::collections::BTreeMap<u32, u8>| {
            let mut t = Trie::new();
            for (k, v) in m {
                t.insert(&key(*k), Raw(vec![*v; 1 + (*v as usize % 40)]), &NoLoader)
                    .unwrap();
            }
            t.root_hash()
        };
        let mut t = Trie::new();
        let mut model = std::collections::BTreeMap::new();
        let mut versions: Vec<(Trie<Raw>, B256, std::collections::BTreeMap<u32, u8>)> = Vec::new();
        for block in 0..40 {
            for _ in 0..60 {
                let k = rng.gen_range(0..600u32);
                if rng.gen_bool(0.2) && model.contains_key(&k) {
                    assert!(t.remove(&key(k), &NoLoader).unwrap());
                    model.remove(&k);
                } else {
                    let v: u8 = rng.gen();
                    t.insert(&key(k), Raw(vec![v; 1 + (v as usize % 40)]), &NoLoader)
                        .unwrap();
                    model.insert(k, v);
                }
            }
            let root = t.root_hash();
            assert_eq!(root, fresh_root(&model), "block {block}");
            if block % 3 == 0 {
                t.take_dirty(|_, _| {});
                t.prune_in_place(64, &mut Vec::new());
            }
            // Every fourth block keeps a version that the next blocks share nodes with.
            if block % 4 == 0 {
                versions.push((t.clone(), root, model.clone()));
            }
        }
        for (v, root, m) in &versions {
            assert_eq!(v.root_hash(), *root);
            assert_eq!(*root, fresh_root(m));
        }
    }

    /// A store for the paged-trie test: branch records by position and leaves by full path.
    #[derive(Default)]
    struct MapStore {
        records: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
        leaves: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    }

    impl Loader<Raw> for MapStore {
        fn load(&self, pos: &[u8], kind: StoredKind) -> Result<LoadedNode<Raw>, LoadError> {
            match kind {
                StoredKind::Leaf => {
                    let (k, v) = self
                        .leaves
                        .range(pos.to_vec()..)
                        .next()
                        .filter(|(k, _)| k.starts_with(pos))
                        .ok_or_else(|| LoadError::new(pos, "no leaf"))?;
                    Ok(LoadedNode::Leaf {
                        path: k[pos.len()..].into(),
                        value: Raw(v.clone()),
                    })
                }
                StoredKind::Branch => {
                    let children = self
                        .records
                        .get(pos)
                        .and_then(|r| decode_record_children(r, 64))
                        .ok_or_else(|| LoadError::new(pos, "no record"))?;
                    Ok(LoadedNode::Branch { children })
                }
            }
        }
        fn exists(&self, path: &[u8]) -> Result<bool, LoadError> {
            Ok(self.leaves.contains_key(path))
        }
    }

    /// A loader that notes the first node it is asked for (its depth and kind).
    struct FirstLoad<'a>(&'a MapStore, std::cell::Cell<Option<(usize, StoredKind)>>);

    impl Loader<Raw> for FirstLoad<'_> {
        fn load(&self, pos: &[u8], kind: StoredKind) -> Result<LoadedNode<Raw>, LoadError> {
            if self.1.get().is_none() {
                self.1.set(Some((pos.len(), kind)));
            }
            self.0.load(pos, kind)
        }
        fn exists(&self, path: &[u8]) -> Result<bool, LoadError> {
            self.0.exists(path)
        }
    }

    #[test]
    fn a_pruned_trie_loads_what_it_writes_through() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let mut store = MapStore::default();
        // The reference: never pruned. The paged one: pruned below `keep` after every round,
        // its records and leaves written to `store` as finalization would.
        let mut full: Trie<Raw> = Trie::new();
        let mut keys: Vec<[u8; 64]> = Vec::new();
        // Paths `prefetch_paths` found entering a stored leaf, a stored branch, or none.
        let mut named_kinds = [0usize; 3];
        for keep in [0usize, 1, 2, 3] {
            let mut paged = full.clone();
            for round in 0..12 {
                // An older version kept through some rounds: writes then copy nodes that
                // pruning left in memory, and pruning meets shared nodes.
                let _older = (round % 4 == 0).then(|| paged.clone());
                let mut changed = Vec::new();
                for _ in 0..rng.gen_range(1..60) {
                    if rng.gen_bool(0.3) && !keys.is_empty() {
                        let k = keys.swap_remove(rng.gen_range(0..keys.len()));
                        assert!(full.remove(&k, &NoLoader).unwrap());
                        assert!(paged.remove(&k, &store).unwrap());
                        changed.push((k, None));
                    } else {
                        // Short keys sharing long prefixes: extensions and embedded leaves.
                        let mut k = [0u8; 64];
                        for n in k.iter_mut().take(rng.gen_range(1..6)) {
                            *n = rng.gen_range(0..3);
                        }
                        k[63] = rng.gen_range(0..16);
                        if rng.gen_bool(0.5) {
                            k = nibbles(&rng.gen());
                        }
                        let v = Raw(vec![0x80 + rng.gen_range(1..40u8); 1]);
                        if !keys.contains(&k) {
                            keys.push(k);
                        }
                        full.insert(&k, v.clone(), &NoLoader).unwrap();
                        paged.insert(&k, v.clone(), &store).unwrap();
                        changed.push((k, Some(v)));
                    }
                }
                assert_eq!(
                    paged.root_hash(),
                    full.root_hash(),
                    "keep {keep} round {round}"
                );
                // Finalize: leaves, then dirty records; stale records on removed paths go.
                for (k, v) in &changed {
                    match v {
                        Some(v) => store.leaves.insert(k.to_vec(), v.0.clone()),
                        None => store.leaves.remove(k.as_slice()),
                    };
                }
                store.records.retain(|pos, _| full.lookup_branch(pos));
                // Some rounds leave their nodes unstored: pruning keeps them in memory, and
                // must reach them again once a later round stores them.
                if round % 4 != 3 {
                    paged.take_dirty(|pos, rec| {
                        store.records.insert(pos.to_vec(), rec.to_vec());
                    });
                }
                // In place (the unpruned-slot masks choose the children it visits), leaving
                // in memory exactly what the full walk of `pruned` leaves.
                let want = paged.pruned(keep);
                paged.prune_in_place(keep, &mut Vec::new());
                assert_eq!(
                    mem_nodes(&paged),
                    mem_nodes(&want),
                    "keep {keep} round {round}"
                );
                assert_eq!(paged.root_hash(), full.root_hash());
                // The stored node `prefetch_paths` names for a path is the one a write
                // through it loads first (present keys and new ones; all paths in one call).
                let mut probes: Vec<[u8; 64]> = keys.iter().take(20).copied().collect();
                probes.extend((0..20).map(|_| nibbles(&rng.gen())));
                let probe_refs: Vec<&[u8]> = probes.iter().map(|p| &p[..]).collect();
                let named = paged.prefetch_paths(&probe_refs);
                assert_eq!(named.len(), probes.len());
                for (k, named) in probes.iter().zip(named) {
                    let first = FirstLoad(&store, std::cell::Cell::new(None));
                    let mut p = paged.clone();
                    p.insert(k, Raw(vec![0x81]), &first).unwrap();
                    assert_eq!(named, first.1.get(), "keep {keep} round {round} key {k:?}");
                    match named {
                        Some((_, StoredKind::Leaf)) => named_kinds[0] += 1,
                        Some((_, StoredKind::Branch)) => named_kinds[1] += 1,
                        None => named_kinds[2] += 1,
                    }
                }
                for k in keys.iter().take(10) {
                    let mut p = paged.clone();
                    assert!(p.get_mut(k, &store).unwrap().is_some());
                    assert_eq!(
                        paged.load_value(k, &store).unwrap().map(|v| v.0),
                        full.get(k).map(|v| v.0.clone())
                    );
                    assert_eq!(
                        paged.proof(k, &store).unwrap(),
                        full.proof(k, &NoLoader).unwrap()
                    );
                }
            }
            full = paged.clone();
            let _ = &mut full;
            full = {
                // Back to a wholly in-memory reference for the next depth.
                let mut t = Trie::new();
                for k in &keys {
                    let v = paged.load_value(k, &store).unwrap().unwrap();
                    t.insert(k, v, &NoLoader).unwrap();
                }
                assert_eq!(t.root_hash(), paged.root_hash());
                t
            };
        }
        assert!(named_kinds.iter().all(|&n| n > 20), "{named_kinds:?}");
    }
}
