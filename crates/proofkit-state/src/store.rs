//! A copy-on-write page store on one memory-mapped file: an ordered map from keys of 1 to 64
//! bytes (here keccak256(address), and keccak256(address) ++ keccak256(slot)) to values of up to
//! 255 bytes, kept as a radix tree of 4 KiB pages that routes on one key byte per level.
//!
//! File layout (all integers little-endian):
//! ```text
//! page 0, page 1: meta (written alternately; the valid one with the higher generation wins)
//!   0..8    magic "PKSTATE\0"      8..12  version = 1      12..16 page size = 4096
//!   16..24  generation             24..32 block number     32..64 state root
//!   64..68  root page (0 = empty)  68..72 page count (high-water mark)
//!   72..104 keccak256(bytes 0..72)
//! branch page: 0 kind = 1 | 1 depth | 2..8 zero | 8..1036 257 x u32 child page (0 = none):
//!   slot 0 holds the key of length `depth`, slot 1 + b the keys whose byte at `depth` is b; a
//!   run of neighbouring slots may share one leaf page (a leaf covers a range of slots, so
//!   splitting a full leaf does not scatter it into 256 near-empty pages); a branch child has a
//!   slot of its own
//! leaf page:   0 kind = 2 | 1 depth | 2..4 count u16 | 4..8 zero | entries, sorted by key:
//!   [key_len u8][value_len u8][key][value] ...
//! ```
//!
//! Copy-on-write: a change never writes a page the last committed root can reach; changed pages
//! are written to pages from the free list or past the high-water mark, and the old ones are
//! freed. A page freed by commit `g` was reachable from root `g - 1` only, so it is reused from
//! commit `g + 1` on: whichever of the two meta pages survives a crash, its pages are intact.
//! A page allocated and freed within one commit is reusable at once. On open, every page the
//! durable root cannot reach is free.
//!
//! Commit levels: `None` writes the meta page and flushes nothing (safe against a killed
//! process, not against power loss); `FlushData` flushes the data pages before writing the meta
//! page (a power loss may lose the newest root, never corrupt an older one); `FlushDataAndRoot`
//! also flushes the meta page (the commit is durable when `commit` returns).
#![deny(unsafe_code)]

use crate::keccak::{keccak256, B256, EMPTY_ROOT};
use crate::mapping::map_file;
use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
use std::path::Path;
use thiserror::Error;

pub const PAGE: usize = 4096;
const MAGIC: [u8; 8] = *b"PKSTATE\0";
const VERSION: u32 = 1;
const BRANCH: u8 = 1;
const LEAF: u8 = 2;
const HEADER: usize = 8;
const FANOUT: usize = 257;
/// The longest key.
pub const MAX_KEY: usize = 64;
/// The longest value.
pub const MAX_VALUE: usize = 255;
const FILE_NAME: &str = "state.pk";

/// How much of a commit reaches the disk before `commit` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CommitLevel {
    None,
    FlushData,
    FlushDataAndRoot,
}

impl std::str::FromStr for CommitLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(CommitLevel::None),
            "flush-data" => Ok(CommitLevel::FlushData),
            "flush-data-and-root" => Ok(CommitLevel::FlushDataAndRoot),
            _ => Err(format!(
                "unknown commit level {s:?} (none, flush-data, flush-data-and-root)"
            )),
        }
    }
}

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("not a proofkit state store: {0}")]
    NotAStore(String),
    #[error("corrupt store: {0}")]
    Corrupt(String),
    #[error("key of {0} bytes (1 to 64 allowed)")]
    BadKey(usize),
    #[error("value of {0} bytes (at most 255 allowed)")]
    BadValue(usize),
    #[error("the store is full (2^32 pages)")]
    Full,
}

/// The durable header of the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub generation: u64,
    pub block_number: u64,
    pub state_root: B256,
    pub root_page: u32,
    pub page_count: u32,
}

impl Meta {
    fn empty() -> Meta {
        Meta {
            generation: 0,
            block_number: 0,
            state_root: EMPTY_ROOT,
            root_page: 0,
            page_count: 2,
        }
    }

    fn write(&self, page: &mut [u8]) {
        page[..PAGE].fill(0);
        page[0..8].copy_from_slice(&MAGIC);
        page[8..12].copy_from_slice(&VERSION.to_le_bytes());
        page[12..16].copy_from_slice(&(PAGE as u32).to_le_bytes());
        page[16..24].copy_from_slice(&self.generation.to_le_bytes());
        page[24..32].copy_from_slice(&self.block_number.to_le_bytes());
        page[32..64].copy_from_slice(&self.state_root);
        page[64..68].copy_from_slice(&self.root_page.to_le_bytes());
        page[68..72].copy_from_slice(&self.page_count.to_le_bytes());
        let sum = keccak256(&page[0..72]);
        page[72..104].copy_from_slice(&sum);
    }

    /// The meta in `page`, or `None` when torn or never written.
    fn read(page: &[u8]) -> Option<Meta> {
        if page[0..8] != MAGIC || keccak256(&page[0..72])[..] != page[72..104] {
            return None;
        }
        let u32_at = |o: usize| u32::from_le_bytes(page[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(page[o..o + 8].try_into().expect("8 bytes"));
        if u32_at(8) != VERSION || u32_at(12) != PAGE as u32 {
            return None;
        }
        Some(Meta {
            generation: u64_at(16),
            block_number: u64_at(24),
            state_root: page[32..64].try_into().expect("32 bytes"),
            root_page: u32_at(64),
            page_count: u32_at(68),
        })
    }
}

/// One write to the store; within a batch, sorted by key, a prefix deletion first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Deletes every key that starts with the given bytes (an account and its storage).
    DelPrefix(Vec<u8>),
    Del(Vec<u8>),
    Put(Vec<u8>, Vec<u8>),
}

impl Op {
    fn key(&self) -> &[u8] {
        match self {
            Op::DelPrefix(k) | Op::Del(k) | Op::Put(k, _) => k,
        }
    }
    fn rank(&self) -> u8 {
        match self {
            Op::DelPrefix(_) => 0,
            Op::Del(_) => 1,
            Op::Put(..) => 2,
        }
    }
}

/// Pages allocated since the last commit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Pages past the old high-water mark (the file grew).
    pub new_pages: u64,
    /// Pages taken from the free list.
    pub reused_pages: u64,
}

/// What [`Store::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub page_count: u64,
    pub branch_pages: u64,
    pub leaf_pages: u64,
    pub free_pages: u64,
    pub entries: u64,
}

pub struct Store {
    map: MmapMut,
    file: Option<File>,
    /// The last committed meta.
    meta: Meta,
    root_page: u32,
    page_count: u32,
    /// Reusable now.
    free: Vec<u32>,
    /// Freed since the last commit, reachable from the committed root: reusable after the commit.
    pending: Vec<u32>,
    /// Allocated since the last commit: a bitmap by page, and the list to clear it.
    fresh_bits: Vec<u64>,
    fresh: Vec<u32>,
    stats: CommitStats,
}

/// The child slot of `key` in a branch at `depth`: 0 for the key that ends there, else
/// 1 + its byte at `depth` (so slots follow key order).
fn slot(key: &[u8], depth: usize) -> usize {
    if key.len() > depth {
        key[depth] as usize + 1
    } else {
        0
    }
}

/// The distinct children of a branch in slot order: (first slot, last slot, page).
fn runs(children: &[u32; FANOUT]) -> impl Iterator<Item = (usize, usize, u32)> + '_ {
    let mut s = 0;
    std::iter::from_fn(move || {
        if s >= FANOUT {
            return None;
        }
        let lo = s;
        while s + 1 < FANOUT && children[s + 1] == children[lo] {
            s += 1;
        }
        s += 1;
        Some((lo, s - 1, children[lo]))
    })
}

/// Bytes a list of entries takes in a leaf page.
fn entries_size(entries: &[(&[u8], &[u8])]) -> usize {
    entries.iter().map(|(k, v)| 2 + k.len() + v.len()).sum()
}

const LEAF_CAPACITY: usize = PAGE - HEADER;

/// Sorted (key, value) pairs borrowed from a page copy and a batch.
type Entries<'a> = Vec<(&'a [u8], &'a [u8])>;

impl Store {
    /// Opens (creating when absent) the store in directory `dir`, or an in-memory store (an
    /// anonymous mapping, nothing persisted) when `dir` is `None`.
    pub fn open(dir: Option<&Path>) -> Result<Store, StoreError> {
        Store::open_reserving(dir, 0)
    }

    /// [`Store::open`], reserving `reserve` bytes of address space up front for an in-memory
    /// store (pages are only backed once touched), so that it need not be copied as it grows.
    pub fn open_reserving(dir: Option<&Path>, reserve: usize) -> Result<Store, StoreError> {
        let initial = 4096 * PAGE;
        let (map, file, meta) = match dir {
            None => {
                let mut map = MmapMut::map_anon(reserve.max(initial).div_ceil(PAGE) * PAGE)?;
                let meta = Meta::empty();
                meta.write(&mut map[..PAGE]);
                (map, None, meta)
            }
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                let path = dir.join(FILE_NAME);
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)?;
                let len = file.metadata()?.len() as usize;
                if len == 0 {
                    file.set_len(initial as u64)?;
                    let mut map = map_file(&file)?;
                    let meta = Meta::empty();
                    meta.write(&mut map[..PAGE]);
                    map.flush()?;
                    (map, Some(file), meta)
                } else {
                    if len < 2 * PAGE || len % PAGE != 0 {
                        return Err(StoreError::NotAStore(format!(
                            "{} has {len} bytes",
                            path.display()
                        )));
                    }
                    let map = map_file(&file)?;
                    let a = Meta::read(&map[..PAGE]);
                    let b = Meta::read(&map[PAGE..2 * PAGE]);
                    let meta = match (a, b) {
                        (Some(a), Some(b)) => {
                            if a.generation >= b.generation {
                                a
                            } else {
                                b
                            }
                        }
                        (Some(m), None) | (None, Some(m)) => m,
                        (None, None) => {
                            return Err(StoreError::NotAStore(format!(
                                "{}: no valid meta page",
                                path.display()
                            )))
                        }
                    };
                    if meta.page_count as usize * PAGE > len
                        || meta.page_count < 2
                        || meta.root_page >= meta.page_count
                    {
                        return Err(StoreError::Corrupt(format!(
                            "meta page count {} beyond the file",
                            meta.page_count
                        )));
                    }
                    (map, Some(file), meta)
                }
            }
        };
        let mut store = Store {
            map,
            file,
            meta,
            root_page: meta.root_page,
            page_count: meta.page_count,
            free: Vec::new(),
            pending: Vec::new(),
            fresh_bits: Vec::new(),
            fresh: Vec::new(),
            stats: CommitStats::default(),
        };
        let report = store.walk(|_, _| {})?;
        let mut reachable = vec![false; store.page_count as usize];
        store.mark(store.root_page, &mut reachable)?;
        store.free = (2..store.page_count)
            .rev()
            .filter(|&p| !reachable[p as usize])
            .collect();
        debug_assert_eq!(report.free_pages as usize, store.free.len());
        Ok(store)
    }

    /// The last committed meta (block number, state root, generation).
    pub fn meta(&self) -> Meta {
        self.meta
    }

    /// Bytes in use: the high-water mark of pages.
    pub fn space_used(&self) -> u64 {
        self.page_count as u64 * PAGE as u64
    }

    fn page(&self, id: u32) -> &[u8] {
        let o = id as usize * PAGE;
        &self.map[o..o + PAGE]
    }

    fn page_mut(&mut self, id: u32) -> &mut [u8] {
        let o = id as usize * PAGE;
        &mut self.map[o..o + PAGE]
    }

    fn ensure_capacity(&mut self, pages: usize) -> Result<(), StoreError> {
        let need = pages * PAGE;
        if need <= self.map.len() {
            return Ok(());
        }
        let step = self.map.len().clamp(16 << 20, 1 << 30);
        let new_len = (self.map.len() + step).max(need).div_ceil(PAGE) * PAGE;
        match &self.file {
            Some(file) => {
                self.map.flush_async()?;
                file.set_len(new_len as u64)?;
                self.map = map_file(file)?;
            }
            None => {
                let mut m = MmapMut::map_anon(new_len)?;
                m[..self.map.len()].copy_from_slice(&self.map);
                self.map = m;
            }
        }
        Ok(())
    }

    fn alloc(&mut self) -> Result<u32, StoreError> {
        let id = match self.free.pop() {
            Some(id) => {
                self.stats.reused_pages += 1;
                id
            }
            None => {
                let id = self.page_count;
                self.page_count = self.page_count.checked_add(1).ok_or(StoreError::Full)?;
                self.ensure_capacity(self.page_count as usize)?;
                self.stats.new_pages += 1;
                id
            }
        };
        let w = id as usize / 64;
        if w >= self.fresh_bits.len() {
            self.fresh_bits.resize(w + 1024, 0);
        }
        self.fresh_bits[w] |= 1 << (id % 64);
        self.fresh.push(id);
        Ok(id)
    }

    fn release(&mut self, id: u32) {
        let (w, bit) = (id as usize / 64, 1u64 << (id % 64));
        if self.fresh_bits.get(w).is_some_and(|b| b & bit != 0) {
            self.fresh_bits[w] &= !bit;
            self.free.push(id);
        } else {
            self.pending.push(id);
        }
    }

    fn release_subtree(&mut self, id: u32) -> Result<(), StoreError> {
        if id == 0 {
            return Ok(());
        }
        if self.kind(id)? == BRANCH {
            for (_, _, c) in runs(&self.children(id)) {
                self.release_subtree(c)?;
            }
        }
        self.release(id);
        Ok(())
    }

    fn kind(&self, id: u32) -> Result<u8, StoreError> {
        if id < 2 || id >= self.page_count {
            return Err(StoreError::Corrupt(format!("page {id} out of range")));
        }
        match self.page(id)[0] {
            k @ (BRANCH | LEAF) => Ok(k),
            k => Err(StoreError::Corrupt(format!("page {id} has kind {k}"))),
        }
    }

    fn children(&self, id: u32) -> [u32; FANOUT] {
        let p = self.page(id);
        std::array::from_fn(|i| {
            u32::from_le_bytes(
                p[HEADER + 4 * i..HEADER + 4 * i + 4]
                    .try_into()
                    .expect("4 bytes"),
            )
        })
    }

    fn child(&self, id: u32, r: usize) -> u32 {
        let p = self.page(id);
        u32::from_le_bytes(
            p[HEADER + 4 * r..HEADER + 4 * r + 4]
                .try_into()
                .expect("4 bytes"),
        )
    }

    fn leaf_for_each(&self, id: u32, f: impl FnMut(&[u8], &[u8])) -> Result<(), StoreError> {
        parse_leaf(id, self.page(id), f)
    }
}

/// Visits the entries of leaf page `id` (its bytes `p`), checking their bounds.
fn parse_leaf<'a>(
    id: u32,
    p: &'a [u8],
    mut f: impl FnMut(&'a [u8], &'a [u8]),
) -> Result<(), StoreError> {
    {
        let count = u16::from_le_bytes([p[2], p[3]]) as usize;
        let mut o = HEADER;
        for _ in 0..count {
            if o + 2 > PAGE {
                return Err(StoreError::Corrupt(format!("leaf page {id} overruns")));
            }
            let (kl, vl) = (p[o] as usize, p[o + 1] as usize);
            let end = o + 2 + kl + vl;
            if end > PAGE || kl == 0 || kl > MAX_KEY {
                return Err(StoreError::Corrupt(format!("leaf page {id} overruns")));
            }
            f(&p[o + 2..o + 2 + kl], &p[o + 2 + kl..end]);
            o = end;
        }
        Ok(())
    }
}

impl Store {
    /// The value of `key` in the working (possibly uncommitted) tree.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let mut id = self.root_page;
        let mut depth = 0;
        loop {
            if id == 0 {
                return Ok(None);
            }
            if self.kind(id)? == BRANCH {
                id = self.child(id, slot(key, depth));
                depth += 1;
                continue;
            }
            // Records are sorted: stop at the first key not below the one sought.
            let p = self.page(id);
            let count = u16::from_le_bytes([p[2], p[3]]) as usize;
            let mut o = HEADER;
            for _ in 0..count {
                let (kl, vl) = (p[o] as usize, p[o + 1] as usize);
                let end = o + 2 + kl + vl;
                if o + 2 > PAGE || end > PAGE {
                    return Err(StoreError::Corrupt(format!("leaf page {id} overruns")));
                }
                match p[o + 2..o + 2 + kl].cmp(key) {
                    std::cmp::Ordering::Less => o = end,
                    std::cmp::Ordering::Equal => return Ok(Some(p[o + 2 + kl..end].to_vec())),
                    std::cmp::Ordering::Greater => break,
                }
            }
            return Ok(None);
        }
    }

    /// Visits every entry in key order.
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8])) -> Result<(), StoreError> {
        self.walk(|k, v| f(k, v)).map(|_| ())
    }

    /// Walks every reachable page, checking the tree's invariants (kinds, bounds, key order,
    /// routing, no page reached twice), visiting every entry in key order.
    pub fn check(&self) -> Result<CheckReport, StoreError> {
        self.walk(|_, _| {})
    }

    fn walk(&self, mut f: impl FnMut(&[u8], &[u8])) -> Result<CheckReport, StoreError> {
        let mut seen = vec![false; self.page_count as usize];
        let mut report = CheckReport {
            page_count: self.page_count as u64,
            ..Default::default()
        };
        let mut last: Option<Vec<u8>> = None;
        let mut prefix = Vec::new();
        self.walk_page(
            self.root_page,
            0,
            &mut prefix,
            None,
            &mut seen,
            &mut report,
            &mut last,
            &mut f,
        )?;
        report.free_pages = (2..self.page_count as usize).filter(|&p| !seen[p]).count() as u64;
        Ok(report)
    }

    /// `range`: for a leaf, the branch depth and slot range it covers.
    #[allow(clippy::too_many_arguments)]
    fn walk_page(
        &self,
        id: u32,
        depth: usize,
        prefix: &mut Vec<u8>,
        range: Option<(usize, usize, usize)>,
        seen: &mut [bool],
        report: &mut CheckReport,
        last: &mut Option<Vec<u8>>,
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<(), StoreError> {
        if id == 0 {
            return Ok(());
        }
        let kind = self.kind(id)?;
        if std::mem::replace(&mut seen[id as usize], true) {
            return Err(StoreError::Corrupt(format!("page {id} reached twice")));
        }
        if self.page(id)[1] as usize != depth {
            return Err(StoreError::Corrupt(format!(
                "page {id} has depth {} at depth {depth}",
                self.page(id)[1]
            )));
        }
        if kind == BRANCH {
            report.branch_pages += 1;
            if depth >= MAX_KEY || range.is_some_and(|(_, lo, hi)| lo != hi || lo == 0) {
                return Err(StoreError::Corrupt(format!(
                    "branch page {id} in a shared or terminal slot"
                )));
            }
            let children = self.children(id);
            for (lo, hi, c) in runs(&children) {
                if c == 0 {
                    continue;
                }
                if self.kind(c)? == BRANCH {
                    if lo != hi || lo == 0 {
                        return Err(StoreError::Corrupt(format!(
                            "branch page {c} in a shared or terminal slot"
                        )));
                    }
                    prefix.push((lo - 1) as u8);
                    self.walk_page(c, depth + 1, prefix, None, seen, report, last, f)?;
                    prefix.pop();
                } else {
                    self.walk_page(
                        c,
                        depth + 1,
                        prefix,
                        Some((depth, lo, hi)),
                        seen,
                        report,
                        last,
                        f,
                    )?;
                }
            }
            return Ok(());
        }
        report.leaf_pages += 1;
        let mut bad = None;
        self.leaf_for_each(id, |k, v| {
            if bad.is_none() {
                let in_range = range.map_or(true, |(d, lo, hi)| (lo..=hi).contains(&slot(k, d)));
                if !k.starts_with(prefix) || !in_range {
                    bad = Some(format!("leaf page {id} holds a key outside its slots"));
                } else if last.as_deref().is_some_and(|l| l >= k) {
                    bad = Some(format!("leaf page {id}: keys out of order"));
                }
                *last = Some(k.to_vec());
                report.entries += 1;
                f(k, v);
            }
        })?;
        match bad {
            Some(b) => Err(StoreError::Corrupt(b)),
            None => Ok(()),
        }
    }

    fn mark(&self, id: u32, reachable: &mut [bool]) -> Result<(), StoreError> {
        if id == 0 {
            return Ok(());
        }
        let kind = self.kind(id)?;
        reachable[id as usize] = true;
        if kind == BRANCH {
            for (_, _, c) in runs(&self.children(id)) {
                self.mark(c, reachable)?;
            }
        }
        Ok(())
    }

    /// Applies a batch of writes to the working tree (visible to [`Store::get`] at once, durable
    /// after [`Store::commit`]).
    pub fn apply(&mut self, mut ops: Vec<Op>) -> Result<(), StoreError> {
        for op in &ops {
            let k = op.key().len();
            if k == 0 || k > MAX_KEY {
                return Err(StoreError::BadKey(k));
            }
            if let Op::Put(_, v) = op {
                if v.len() > MAX_VALUE {
                    return Err(StoreError::BadValue(v.len()));
                }
            }
        }
        ops.sort_by(|a, b| a.key().cmp(b.key()).then(a.rank().cmp(&b.rank())));
        self.root_page = self.apply_page(self.root_page, 0, &ops)?;
        Ok(())
    }

    fn apply_page(&mut self, id: u32, depth: usize, ops: &[Op]) -> Result<u32, StoreError> {
        if ops.is_empty() {
            return Ok(id);
        }
        if id == 0 || self.kind(id)? == LEAF {
            // The root is a leaf (or empty).
            let mut old = [0u8; PAGE];
            let entries = self.merge_leaf(id, &mut old, ops)?;
            return self.build(depth, &entries);
        }
        if let Op::DelPrefix(p) = &ops[0] {
            if p.len() <= depth {
                // Everything under this page starts with `p`.
                self.release_subtree(id)?;
                return self.apply_page(0, depth, &ops[1..]);
            }
        }
        let children = self.children(id);
        let mut new = children;
        let mut i = 0;
        while i < ops.len() {
            let s = slot(ops[i].key(), depth);
            let c = children[s];
            let (mut lo, mut hi) = (s, s);
            while lo > 0 && children[lo - 1] == c {
                lo -= 1;
            }
            while hi + 1 < FANOUT && children[hi + 1] == c {
                hi += 1;
            }
            let j = i + ops[i..]
                .iter()
                .take_while(|o| slot(o.key(), depth) <= hi)
                .count();
            if c != 0 && self.kind(c)? == BRANCH {
                new[s] = self.apply_page(c, depth + 1, &ops[i..j])?;
            } else {
                let mut old = [0u8; PAGE];
                let entries = self.merge_leaf(c, &mut old, &ops[i..j])?;
                self.pack(depth, lo, hi, &entries, &mut new)?;
            }
            i = j;
        }
        self.release(id);
        if new.iter().all(|&c| c == 0) {
            return Ok(0);
        }
        self.write_branch(depth, &new)
    }

    /// The entries of leaf `id` (0: none; copied into `old`, and the page released) with the
    /// sorted `ops` applied, without allocating per entry.
    fn merge_leaf<'a>(
        &mut self,
        id: u32,
        old: &'a mut [u8; PAGE],
        ops: &'a [Op],
    ) -> Result<Entries<'a>, StoreError> {
        let mut entries: Vec<(&[u8], &[u8])> = Vec::new();
        if id != 0 {
            old.copy_from_slice(self.page(id));
            self.release(id);
        }
        let old: &'a [u8; PAGE] = old;
        if id != 0 {
            parse_leaf(id, old, |k, v| entries.push((k, v)))?;
        }
        let mut out: Vec<(&[u8], &[u8])> = Vec::with_capacity(entries.len() + ops.len());
        let mut e = 0;
        for op in ops {
            let k = op.key();
            while e < entries.len() && entries[e].0 < k {
                out.push(entries[e]);
                e += 1;
            }
            if out.last().is_some_and(|l| l.0 == k) {
                out.pop();
            }
            match op {
                Op::DelPrefix(p) => {
                    while e < entries.len() && entries[e].0.starts_with(p) {
                        e += 1;
                    }
                }
                Op::Del(_) | Op::Put(..) => {
                    if e < entries.len() && entries[e].0 == k {
                        e += 1;
                    }
                    if let Op::Put(_, v) = op {
                        out.push((k, v));
                    }
                }
            }
        }
        out.extend_from_slice(&entries[e..]);
        Ok(out)
    }

    /// Writes `entries` (sorted, sharing their first `depth` bytes) as one leaf page, or as a
    /// branch at `depth` when they overflow a page.
    fn build(&mut self, depth: usize, entries: &[(&[u8], &[u8])]) -> Result<u32, StoreError> {
        if entries.is_empty() {
            return Ok(0);
        }
        if entries_size(entries) <= LEAF_CAPACITY {
            return self.write_leaf(depth, entries);
        }
        let mut children = [0u32; FANOUT];
        self.pack(depth, 0, FANOUT - 1, entries, &mut children)?;
        self.write_branch(depth, &children)
    }

    /// Lays `entries` (all in slots `lo..=hi` of a branch at `depth`) out as leaves that each
    /// cover a run of slots, evenly filled; a slot whose entries alone overflow a page
    /// gets a branch of its own. Every slot of `lo..=hi` is set in `children`.
    fn pack(
        &mut self,
        depth: usize,
        lo: usize,
        hi: usize,
        entries: &[(&[u8], &[u8])],
        children: &mut [u32; FANOUT],
    ) -> Result<(), StoreError> {
        // Split into the fewest leaves that hold the entries, each filled to about the same
        // size (as a B-tree splits), not greedily: a full leaf would split again on the next
        // insert and leave a trail of near-empty pages.
        let total = entries_size(entries);
        let target = total.div_ceil(total.div_ceil(LEAF_CAPACITY).max(1));
        let mut start = lo; // first slot of the leaf being filled
        let mut cur = 0; // first entry of the leaf being filled
        let mut size = 0;
        let mut i = 0;
        while i < entries.len() {
            let s = slot(entries[i].0, depth);
            let j = i + entries[i..]
                .iter()
                .take_while(|(k, _)| slot(k, depth) == s)
                .count();
            let group = entries_size(&entries[i..j]);
            if group > LEAF_CAPACITY {
                self.flush_leaf(depth, start, s - 1, &entries[cur..i], children)?;
                children[s] = self.build(depth + 1, &entries[i..j])?;
                start = s + 1;
                cur = j;
                size = 0;
            } else if size > 0 && size + group > target {
                self.flush_leaf(depth, start, s - 1, &entries[cur..i], children)?;
                start = s;
                cur = i;
                size = group;
            } else {
                size += group;
            }
            i = j;
        }
        if start <= hi {
            self.flush_leaf(depth, start, hi, &entries[cur..], children)?;
        }
        Ok(())
    }

    fn flush_leaf(
        &mut self,
        depth: usize,
        lo: usize,
        hi: usize,
        entries: &[(&[u8], &[u8])],
        children: &mut [u32; FANOUT],
    ) -> Result<(), StoreError> {
        if lo > hi {
            return Ok(());
        }
        let id = if entries.is_empty() {
            0
        } else {
            self.write_leaf(depth + 1, entries)?
        };
        children[lo..=hi].fill(id);
        Ok(())
    }

    fn write_leaf(&mut self, depth: usize, entries: &[(&[u8], &[u8])]) -> Result<u32, StoreError> {
        let id = self.alloc()?;
        let p = self.page_mut(id);
        p[0] = LEAF;
        p[1] = depth as u8;
        p[2..4].copy_from_slice(&(entries.len() as u16).to_le_bytes());
        p[4..HEADER].fill(0);
        let mut o = HEADER;
        for (k, v) in entries {
            p[o] = k.len() as u8;
            p[o + 1] = v.len() as u8;
            p[o + 2..o + 2 + k.len()].copy_from_slice(k);
            p[o + 2 + k.len()..o + 2 + k.len() + v.len()].copy_from_slice(v);
            o += 2 + k.len() + v.len();
        }
        Ok(id)
    }

    fn write_branch(&mut self, depth: usize, children: &[u32; FANOUT]) -> Result<u32, StoreError> {
        let id = self.alloc()?;
        let p = self.page_mut(id);
        p[0] = BRANCH;
        p[1] = depth as u8;
        p[2..HEADER].fill(0);
        for (i, c) in children.iter().enumerate() {
            p[HEADER + 4 * i..HEADER + 4 * i + 4].copy_from_slice(&c.to_le_bytes());
        }
        Ok(id)
    }

    /// Makes the working tree the committed root, with the block number and state root it
    /// stands for; returns the pages allocated since the last commit.
    pub fn commit(
        &mut self,
        block_number: u64,
        state_root: B256,
        level: CommitLevel,
    ) -> Result<CommitStats, StoreError> {
        if level >= CommitLevel::FlushData && self.file.is_some() {
            self.map.flush()?;
        }
        let meta = Meta {
            generation: self.meta.generation + 1,
            block_number,
            state_root,
            root_page: self.root_page,
            page_count: self.page_count,
        };
        let slot = (meta.generation % 2) as usize;
        meta.write(&mut self.map[slot * PAGE..(slot + 1) * PAGE]);
        if level == CommitLevel::FlushDataAndRoot && self.file.is_some() {
            self.map.flush_range(slot * PAGE, PAGE)?;
        }
        self.meta = meta;
        self.free.append(&mut self.pending);
        for id in self.fresh.drain(..) {
            self.fresh_bits[id as usize / 64] = 0;
        }
        Ok(std::mem::take(&mut self.stats))
    }

    /// Pages free for reuse now.
    pub fn free_pages(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use std::collections::{BTreeMap, HashSet};

    fn contents(s: &Store) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = BTreeMap::new();
        s.for_each(|k, v| {
            m.insert(k.to_vec(), v.to_vec());
        })
        .unwrap();
        m
    }

    #[test]
    fn random_batches_match_a_btreemap_and_survive_reopen() {
        let dir = std::env::temp_dir().join(format!("pk-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut s = Store::open(Some(&dir)).unwrap();
        let mut accounts: Vec<[u8; 32]> = Vec::new();
        for round in 0..60u64 {
            let mut ops = Vec::new();
            let mut keys_in_batch = HashSet::new();
            for _ in 0..rng.gen_range(1..400) {
                let choice = rng.gen_range(0..10);
                if choice < 5 || accounts.is_empty() {
                    let a: [u8; 32] = rng.gen();
                    accounts.push(a);
                    let v = vec![rng.gen(); rng.gen_range(1..80)];
                    keys_in_batch.insert(a.to_vec());
                    ops.push(Op::Put(a.to_vec(), v));
                } else {
                    let a = accounts[rng.gen_range(0..accounts.len())];
                    if !keys_in_batch.insert(a.to_vec()) {
                        continue;
                    }
                    if choice < 8 {
                        // Storage under the account (many slots for some accounts).
                        for _ in 0..rng.gen_range(1..60) {
                            let mut k = a.to_vec();
                            k.extend_from_slice(&rng.gen::<[u8; 32]>());
                            ops.push(Op::Put(k, vec![1; 32]));
                        }
                    } else if choice < 9 {
                        ops.push(Op::Del(a.to_vec()));
                    } else {
                        ops.push(Op::DelPrefix(a.to_vec()));
                        ops.push(Op::Put(a.to_vec(), vec![9; 3]));
                    }
                }
            }
            let mut sorted = ops.clone();
            sorted.sort_by(|a, b| a.key().cmp(b.key()).then(a.rank().cmp(&b.rank())));
            for op in &sorted {
                match op {
                    Op::Put(k, v) => {
                        model.insert(k.clone(), v.clone());
                    }
                    Op::Del(k) => {
                        model.remove(k);
                    }
                    Op::DelPrefix(p) => model.retain(|k, _| !k.starts_with(p)),
                }
            }
            s.apply(ops).unwrap();
            s.commit(round, [round as u8; 32], CommitLevel::None)
                .unwrap();
            if round % 20 == 19 {
                assert_eq!(contents(&s), model, "round {round}");
                let report = s.check().unwrap();
                assert_eq!(report.entries as usize, model.len());
                // Leaves split evenly: on average at least a third full.
                let payload: usize = model.iter().map(|(k, v)| 2 + k.len() + v.len()).sum();
                assert!(
                    payload * 3 >= report.leaf_pages as usize * LEAF_CAPACITY,
                    "{report:?}, {payload} bytes"
                );
                drop(s);
                s = Store::open(Some(&dir)).unwrap();
                assert_eq!(s.meta().block_number, round);
                assert_eq!(contents(&s), model);
                for (k, v) in model.iter().take(50) {
                    assert_eq!(s.get(k).unwrap().as_ref(), Some(v));
                }
            }
        }
        // Deleting everything frees every page for reuse.
        let prefixes: std::collections::BTreeSet<Vec<u8>> =
            model.keys().map(|k| k[..32].to_vec()).collect();
        let all: Vec<Op> = prefixes.into_iter().map(Op::DelPrefix).collect();
        s.apply(all).unwrap();
        s.commit(99, EMPTY_ROOT, CommitLevel::FlushDataAndRoot)
            .unwrap();
        assert!(contents(&s).is_empty());
        s.commit(100, EMPTY_ROOT, CommitLevel::FlushDataAndRoot)
            .unwrap();
        assert_eq!(s.free_pages(), s.page_count as usize - 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_keys_and_files_are_errors() {
        let mut s = Store::open(None).unwrap();
        assert!(matches!(
            s.apply(vec![Op::Put(vec![], vec![1])]),
            Err(StoreError::BadKey(0))
        ));
        assert!(matches!(
            s.apply(vec![Op::Put(vec![1; 65], vec![1])]),
            Err(StoreError::BadKey(65))
        ));
        assert!(matches!(
            s.apply(vec![Op::Put(vec![1; 32], vec![1; 256])]),
            Err(StoreError::BadValue(256))
        ));
        let dir = std::env::temp_dir().join(format!("pk-store-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(FILE_NAME), vec![0u8; 3 * PAGE]).unwrap();
        assert!(matches!(
            Store::open(Some(&dir)),
            Err(StoreError::NotAStore(_))
        ));
        std::fs::write(dir.join(FILE_NAME), vec![0u8; 100]).unwrap();
        assert!(matches!(
            Store::open(Some(&dir)),
            Err(StoreError::NotAStore(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_torn_meta_falls_back_to_the_older_root() {
        let dir = std::env::temp_dir().join(format!("pk-store-torn-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut s = Store::open(Some(&dir)).unwrap();
        s.apply(vec![Op::Put(vec![1; 32], vec![1])]).unwrap();
        s.commit(1, [1; 32], CommitLevel::FlushDataAndRoot).unwrap();
        s.apply(vec![Op::Put(vec![1; 32], vec![2])]).unwrap();
        s.commit(2, [2; 32], CommitLevel::FlushDataAndRoot).unwrap();
        let slot = (s.meta().generation % 2) as usize;
        s.map[slot * PAGE + 40] ^= 1;
        s.map.flush().unwrap();
        drop(s);
        let s = Store::open(Some(&dir)).unwrap();
        assert_eq!(s.meta().block_number, 1);
        assert_eq!(s.get(&[1; 32]).unwrap(), Some(vec![1]));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
