//! The Merkle-Patricia trie of the Ethereum Yellow Paper (appendix D), as a persistent
//! (structurally shared) tree of reference-counted nodes, each caching its own node reference
//! (the keccak256 of its RLP, or the RLP itself when shorter than 32 bytes).
//!
//! * Paths are nibble strings; in the secure trie every key is the 64 nibbles of a keccak256,
//!   so branches never carry a value and no key is a prefix of another.
//! * Writes go through `Arc::make_mut`: a node shared with an older version (a parent block) is
//!   copied, a node only this version holds is changed in place. Each write drops the cached
//!   reference of the nodes on its path, so computing the root after a block re-hashes only the
//!   paths the block wrote: the cost grows with the writes, not with the size of the state.
//! * Node encodings: leaf `[hp(path, leaf), value]`, extension `[hp(path), child]`, branch
//!   `[c0..c15, ""]`; a child whose RLP is shorter than 32 bytes is embedded, longer ones are
//!   referenced by hash; the root is always hashed.
#![deny(unsafe_code)]

use crate::keccak::{keccak256, B256, EMPTY_ROOT};
use crate::rlp;
use std::sync::{Arc, OnceLock};

/// A value stored in a leaf.
pub trait TrieValue: Clone + Send + Sync {
    /// Appends the bytes the leaf carries as its second item (itself RLP, e.g. an account list).
    fn leaf_bytes(&self, out: &mut Vec<u8>);

    /// Called with the values of the leaves about to be encoded together, so that work inside
    /// them (an account's storage root) can be batched first.
    fn prepare_batch(_values: &[&Self]) {}
}

/// How a parent refers to a node: its hash, or its RLP when that is shorter than 32 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeRef {
    len: u8,
    buf: [u8; 32],
}

impl NodeRef {
    fn from_rlp(rlp: &[u8]) -> Self {
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

#[derive(Clone)]
enum Node<V> {
    Leaf {
        path: Box<[u8]>,
        value: V,
    },
    Extension {
        path: Box<[u8]>,
        child: Arc<Cell<V>>,
    },
    /// Boxed, so that leaves (most nodes) stay small.
    Branch {
        children: Box<Children<V>>,
    },
    /// Stands in for a node while it is rebuilt in place; never seen outside `insert_arc` and
    /// `remove_slot`.
    Hole,
}

type Children<V> = [Option<Arc<Cell<V>>>; 16];

/// A node and its cached reference.
pub struct Cell<V> {
    node: Node<V>,
    cached: OnceLock<NodeRef>,
}

impl<V: Clone> Clone for Cell<V> {
    fn clone(&self) -> Self {
        // The copy is about to be changed: it starts without a cached reference.
        Cell {
            node: self.node.clone(),
            cached: OnceLock::new(),
        }
    }
}

impl<V> Cell<V> {
    fn new(node: Node<V>) -> Arc<Self> {
        Arc::new(Cell {
            node,
            cached: OnceLock::new(),
        })
    }
}

/// A trie version; cloning is O(1) and shares every node.
pub struct Trie<V> {
    root: Option<Arc<Cell<V>>>,
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

fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn concat(a: &[u8], b: &[u8]) -> Box<[u8]> {
    let mut v = Vec::with_capacity(a.len() + b.len());
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    v.into_boxed_slice()
}

/// Hex-prefix encoding (Yellow Paper appendix C).
pub fn hex_prefix(path: &[u8], leaf: bool) -> Vec<u8> {
    let flag = if leaf { 2u8 } else { 0 };
    let mut out = Vec::with_capacity(path.len() / 2 + 1);
    let rest = if path.len() % 2 == 1 {
        out.push(((flag | 1) << 4) | path[0]);
        &path[1..]
    } else {
        out.push(flag << 4);
        path
    };
    for pair in rest.chunks(2) {
        out.push((pair[0] << 4) | pair[1]);
    }
    out
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

    /// The value at `path`.
    pub fn get(&self, path: &[u8]) -> Option<&V> {
        let mut cur = self.root.as_ref()?;
        let mut path = path;
        loop {
            match &cur.node {
                Node::Hole => return None,
                Node::Leaf { path: p, value } => return (**p == *path).then_some(value),
                Node::Extension { path: p, child } => {
                    path = path.strip_prefix(&**p)?;
                    cur = child;
                }
                Node::Branch { children } => {
                    let (&i, rest) = path.split_first()?;
                    cur = children[i as usize].as_ref()?;
                    path = rest;
                }
            }
        }
    }

    /// The value at `path` for changing in place: nodes on the path shared with other versions
    /// are copied first, and their cached references dropped. Call only for a present key (an
    /// absent one would copy nodes for nothing): it returns `None` then.
    pub fn get_mut(&mut self, path: &[u8]) -> Option<&mut V> {
        self.get(path)?;
        let mut cur = Arc::make_mut(self.root.as_mut()?);
        let mut path = path;
        loop {
            cur.cached = OnceLock::new();
            match &mut cur.node {
                Node::Hole => return None,
                Node::Leaf { value, .. } => return Some(value),
                Node::Extension { path: p, child } => {
                    path = &path[p.len()..];
                    cur = Arc::make_mut(child);
                }
                Node::Branch { children } => {
                    let c = children[path[0] as usize].as_mut()?;
                    path = &path[1..];
                    cur = Arc::make_mut(c);
                }
            }
        }
    }

    /// Sets the value at `path` (all keys of one trie must have the same length).
    pub fn insert(&mut self, path: &[u8], value: V) {
        insert_slot(&mut self.root, path, value);
    }

    /// Removes the value at `path`; returns whether it was present.
    pub fn remove(&mut self, path: &[u8]) -> bool {
        if self.get(path).is_none() {
            return false;
        }
        remove_slot(&mut self.root, path);
        true
    }

    /// The root hash (the empty-trie root when empty), hashing the nodes written since the last
    /// call; the top of the tree is hashed on the rayon pool.
    pub fn root_hash(&self) -> B256 {
        match &self.root {
            None => EMPTY_ROOT,
            Some(cell) => {
                if cell.cached.get().is_none() {
                    hash_dirty(cell);
                }
                let r = node_ref(cell);
                if r.is_hash() {
                    r.buf
                } else {
                    keccak256(r.bytes())
                }
            }
        }
    }

    /// The RLP of the nodes on the way to `path` that are referenced by hash (the root first), as
    /// `eth_getProof` lists them; embedded nodes are inside their parents.
    pub fn proof(&self, path: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let Some(mut cur) = self.root.as_ref() else {
            return out;
        };
        let mut path = path;
        let mut first = true;
        loop {
            if first || node_ref(cur).is_hash() {
                let mut rlp = Vec::new();
                encode(cur, &mut rlp);
                out.push(rlp);
            }
            first = false;
            match &cur.node {
                Node::Hole => return out,
                Node::Leaf { .. } => return out,
                Node::Extension { path: p, child } => {
                    let Some(rest) = path.strip_prefix(&**p) else {
                        return out;
                    };
                    path = rest;
                    cur = child;
                }
                Node::Branch { children } => {
                    let Some((&i, rest)) = path.split_first() else {
                        return out;
                    };
                    let Some(c) = children[i as usize].as_ref() else {
                        return out;
                    };
                    cur = c;
                    path = rest;
                }
            }
        }
    }

    /// Computes the root references of many tries together (batched hashing).
    pub fn hash_many(tries: &[&Trie<V>]) {
        let roots: Vec<&Cell<V>> = tries
            .iter()
            .filter_map(|t| t.root.as_deref())
            .filter(|c| c.cached.get().is_none())
            .collect();
        if !roots.is_empty() {
            hash_dirty_many(&roots);
        }
    }

    /// Visits every (path, value) in path order.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &V)) {
        fn walk<V>(cell: &Cell<V>, prefix: &mut Vec<u8>, f: &mut dyn FnMut(&[u8], &V)) {
            match &cell.node {
                Node::Hole => {}
                Node::Leaf { path, value } => {
                    let n = prefix.len();
                    prefix.extend_from_slice(path);
                    f(prefix, value);
                    prefix.truncate(n);
                }
                Node::Extension { path, child } => {
                    let n = prefix.len();
                    prefix.extend_from_slice(path);
                    walk(child, prefix, f);
                    prefix.truncate(n);
                }
                Node::Branch { children } => {
                    for (i, c) in children.iter().enumerate() {
                        if let Some(c) = c {
                            prefix.push(i as u8);
                            walk(c, prefix, f);
                            prefix.pop();
                        }
                    }
                }
            }
        }
        if let Some(r) = &self.root {
            walk(r, &mut Vec::with_capacity(64), &mut f);
        }
    }
}

fn new_leaf<V>(path: &[u8], value: V) -> Arc<Cell<V>> {
    Cell::new(Node::Leaf {
        path: path.into(),
        value,
    })
}

fn placeholder<V>() -> Node<V> {
    Node::Hole
}

fn insert_slot<V: TrieValue>(slot: &mut Option<Arc<Cell<V>>>, path: &[u8], value: V) {
    match slot {
        None => *slot = Some(new_leaf(path, value)),
        Some(arc) => insert_arc(arc, path, value),
    }
}

fn insert_arc<V: TrieValue>(arc: &mut Arc<Cell<V>>, path: &[u8], value: V) {
    let cell = Arc::make_mut(arc);
    cell.cached = OnceLock::new();
    let node = std::mem::replace(&mut cell.node, placeholder());
    cell.node = match node {
        Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
        Node::Leaf {
            path: lp,
            value: lv,
        } => {
            if *lp == *path {
                Node::Leaf { path: lp, value }
            } else {
                let c = common_prefix(&lp, path);
                let mut children: Box<Children<V>> = Default::default();
                children[lp[c] as usize] = Some(new_leaf(&lp[c + 1..], lv));
                children[path[c] as usize] = Some(new_leaf(&path[c + 1..], value));
                wrap_extension(&path[..c], Node::Branch { children })
            }
        }
        Node::Extension {
            path: ep,
            mut child,
        } => {
            let c = common_prefix(&ep, path);
            if c == ep.len() {
                insert_arc(&mut child, &path[c..], value);
                Node::Extension { path: ep, child }
            } else {
                let mut children: Box<Children<V>> = Default::default();
                let rest = &ep[c + 1..];
                children[ep[c] as usize] = Some(if rest.is_empty() {
                    child
                } else {
                    Cell::new(Node::Extension {
                        path: rest.into(),
                        child,
                    })
                });
                children[path[c] as usize] = Some(new_leaf(&path[c + 1..], value));
                wrap_extension(&path[..c], Node::Branch { children })
            }
        }
        Node::Branch { mut children } => {
            insert_slot(&mut children[path[0] as usize], &path[1..], value);
            Node::Branch { children }
        }
    };
}

fn wrap_extension<V>(prefix: &[u8], branch: Node<V>) -> Node<V> {
    if prefix.is_empty() {
        branch
    } else {
        Node::Extension {
            path: prefix.into(),
            child: Cell::new(branch),
        }
    }
}

/// Removes `path`, which must be present; keeps the trie canonical (no branch with a single
/// child, no extension pointing at a leaf or an extension).
fn remove_slot<V: TrieValue>(slot: &mut Option<Arc<Cell<V>>>, path: &[u8]) {
    let Some(arc) = slot else { return };
    if matches!(arc.node, Node::Leaf { .. }) {
        *slot = None;
        return;
    }
    let cell = Arc::make_mut(arc);
    cell.cached = OnceLock::new();
    let node = std::mem::replace(&mut cell.node, placeholder());
    cell.node = match node {
        Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
        Node::Leaf { .. } => unreachable!("handled above"),
        Node::Extension { path: ep, child } => {
            let mut c = Some(child);
            remove_slot(&mut c, &path[ep.len()..]);
            // A branch below an extension holds two or more keys, so one is left.
            let child = c.expect("an extension's branch keeps at least one key");
            prepend(&ep, child)
        }
        Node::Branch { mut children } => {
            remove_slot(&mut children[path[0] as usize], &path[1..]);
            let mut live = children.iter().enumerate().filter(|(_, c)| c.is_some());
            let first = live.next().map(|(i, _)| i);
            let more = live.next().is_some();
            match (first, more) {
                (Some(i), false) => {
                    let only = children[i].take().expect("counted above");
                    prepend(&[i as u8], only)
                }
                _ => Node::Branch { children },
            }
        }
    };
}

/// The node `prefix ++ child`: merges into a leaf or an extension child, or extends a branch.
fn prepend<V: TrieValue>(prefix: &[u8], child: Arc<Cell<V>>) -> Node<V> {
    match &child.node {
        Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
        Node::Leaf { path, value } => Node::Leaf {
            path: concat(prefix, path),
            value: value.clone(),
        },
        Node::Extension { path, child: grand } => Node::Extension {
            path: concat(prefix, path),
            child: grand.clone(),
        },
        Node::Branch { .. } => Node::Extension {
            path: prefix.into(),
            child,
        },
    }
}

fn node_ref<V: TrieValue>(cell: &Cell<V>) -> NodeRef {
    *cell.cached.get_or_init(|| {
        let mut rlp = Vec::with_capacity(600);
        encode(cell, &mut rlp);
        NodeRef::from_rlp(&rlp)
    })
}

/// Computes the references of every node written since the last root, level by level from
/// the leaves up (the nodes of one height are independent): each level is RLP-encoded on the
/// rayon pool, then hashed eight at a time ([`crate::keccak_x8`]) on the pool.
fn hash_dirty<V: TrieValue>(root: &Cell<V>) {
    hash_dirty_many(&[root]);
}

/// [`hash_dirty`] for the roots of many tries at once (their nodes batch together).
fn hash_dirty_many<V: TrieValue>(roots: &[&Cell<V>]) {
    use rayon::prelude::*;
    let mut levels: Vec<Vec<&Cell<V>>> = Vec::new();
    let mut total = 0;
    for r in roots {
        total += collect_dirty(r, &mut levels);
    }
    if total < 16 {
        // Too few to batch (e.g. one storage trie of one slot).
        for r in roots {
            node_ref(r);
        }
        return;
    }
    for (height, level) in levels.iter().enumerate() {
        if height == 0 {
            let values: Vec<&V> = level
                .iter()
                .filter_map(|c| match &c.node {
                    Node::Leaf { value, .. } => Some(value),
                    _ => None,
                })
                .collect();
            V::prepare_batch(&values);
        }
        let encoded: Vec<Vec<u8>> = level
            .par_iter()
            .map(|c| {
                let mut v = Vec::with_capacity(600);
                encode(c, &mut v);
                v
            })
            .collect();
        let refs: Vec<NodeRef> = encoded
            .par_chunks(64)
            .flat_map_iter(|chunk| {
                let long: Vec<&[u8]> = chunk
                    .iter()
                    .filter(|e| e.len() >= 32)
                    .map(|e| &e[..])
                    .collect();
                let mut hashes = vec![[0u8; 32]; long.len()];
                crate::keccak_x8::keccak256_batch(&long, &mut hashes);
                let mut h = hashes.into_iter();
                chunk
                    .iter()
                    .map(|e| {
                        if e.len() >= 32 {
                            NodeRef {
                                len: 32,
                                buf: h.next().expect("one hash per long node"),
                            }
                        } else {
                            NodeRef::from_rlp(e)
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        for (c, r) in level.iter().zip(refs) {
            // A node reached twice in one level is not possible in a tree; `set` fails only then.
            let _ = c.cached.set(r);
        }
    }
}

/// Files every node without a cached reference under its height (leaves 0); returns how many.
fn collect_dirty<'a, V>(cell: &'a Cell<V>, levels: &mut Vec<Vec<&'a Cell<V>>>) -> usize {
    fn walk<'a, V>(
        cell: &'a Cell<V>,
        levels: &mut Vec<Vec<&'a Cell<V>>>,
        count: &mut usize,
    ) -> Option<usize> {
        if cell.cached.get().is_some() {
            return None;
        }
        let h = match &cell.node {
            Node::Leaf { .. } => 0,
            Node::Extension { child, .. } => walk(child, levels, count).map_or(0, |h| h + 1),
            Node::Branch { children } => {
                let mut h = None;
                for c in children.iter().flatten() {
                    if let Some(ch) = walk(c, levels, count) {
                        h = Some(h.map_or(ch, |x: usize| x.max(ch)));
                    }
                }
                h.map_or(0, |h| h + 1)
            }
            Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
        };
        if levels.len() <= h {
            levels.resize_with(h + 1, Vec::new);
        }
        levels[h].push(cell);
        *count += 1;
        Some(h)
    }
    let mut count = 0;
    walk(cell, levels, &mut count);
    count
}

fn encode<V: TrieValue>(cell: &Cell<V>, out: &mut Vec<u8>) {
    match &cell.node {
        Node::Hole => unreachable!("a hole only exists while its node is rebuilt"),
        Node::Leaf { path, value } => {
            let hp = hex_prefix(path, true);
            let mut v = Vec::with_capacity(120);
            value.leaf_bytes(&mut v);
            rlp::encode_list_header(out, rlp::bytes_len(&hp) + rlp::bytes_len(&v));
            rlp::encode_bytes(out, &hp);
            rlp::encode_bytes(out, &v);
        }
        Node::Extension { path, child } => {
            let hp = hex_prefix(path, false);
            let r = node_ref(child);
            rlp::encode_list_header(out, rlp::bytes_len(&hp) + r.encoded_len());
            rlp::encode_bytes(out, &hp);
            r.encode(out);
        }
        Node::Branch { children } => {
            let refs: [Option<NodeRef>; 16] =
                std::array::from_fn(|i| children[i].as_ref().map(|c| node_ref(c)));
            let len = 1 + refs
                .iter()
                .map(|r| r.map_or(1, |r| r.encoded_len()))
                .sum::<usize>();
            rlp::encode_list_header(out, len);
            for r in &refs {
                match r {
                    Some(r) => r.encode(out),
                    None => out.push(0x80),
                }
            }
            out.push(0x80);
        }
    }
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
        assert_eq!(
            hex_prefix(&[0, 15, 1, 12, 11, 8], true),
            vec![0x20, 0x0f, 0x1c, 0xb8]
        );
        assert_eq!(decode_hex_prefix(&[0x4f]), None);
    }

    #[test]
    fn insert_remove_keeps_canonical_shape() {
        let mut t = Trie::new();
        assert_eq!(t.root_hash(), EMPTY_ROOT);
        let keys: Vec<B256> = (0u8..40).map(|i| keccak256(&[i])).collect();
        for k in &keys {
            t.insert(&nibbles(k), Raw(vec![0x01]));
        }
        let full = t.root_hash();
        let mut t2 = t.clone();
        t2.insert(&nibbles(&keccak256(b"x")), Raw(vec![0x02]));
        assert!(t2.remove(&nibbles(&keccak256(b"x"))));
        assert!(!t2.remove(&nibbles(&keccak256(b"x"))));
        assert_eq!(t2.root_hash(), full, "insert then remove restores the root");
        for k in &keys {
            assert!(t2.remove(&nibbles(k)));
        }
        assert!(t2.is_empty());
        assert_eq!(t2.root_hash(), EMPTY_ROOT);
        assert_eq!(t.root_hash(), full, "the older version is untouched");
        assert!(t.get(&nibbles(&keys[3])).is_some());
    }
}
