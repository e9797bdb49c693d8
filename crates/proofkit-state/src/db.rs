//! Blocks over the store: a tree of unfinalized blocks in memory above the last finalized one,
//! each a [`State`] version sharing nodes with its parent, and the page store below.
//!
//! * [`Db::begin`] opens a block on any known block (the finalized one or an unfinalized one:
//!   building on another parent is a reorg); the returned [`Writer`] reads its own writes.
//! * [`Db::commit`] computes the block's state root (hashing only what it wrote) and keeps it.
//! * [`Db::state`] reads any known block; a [`State`] is `Send + Sync` and O(1) to clone, so a
//!   reader thread can hold one while the writer goes on.
//! * [`Db::finalize`] writes the blocks from the finalized one up to the given block into the
//!   store in one commit at the configured [`CommitLevel`], then forgets the forks that do not
//!   descend from it.
//! * [`Db::open`] reopens a store at its durable root, rebuilding the trie from the stored
//!   accounts and slots and checking the rebuilt root against the root in the meta page.
#![deny(unsafe_code)]

use crate::account::Account;
use crate::keccak::{keccak256, B256};
use crate::state::{Address, State, WriteLog, Writer};
use crate::store::{CheckReport, CommitLevel, CommitStats, Op, Store, StoreError};
use std::collections::HashMap;
use std::path::Path;
use thiserror::Error;

/// A block known to the database (unique for the life of a `Db`).
pub type BlockId = u64;

#[derive(Debug, Error)]
pub enum DbError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("unknown block {0} (finalized away, pruned, or never committed)")]
    UnknownBlock(BlockId),
    #[error("block {0} does not descend from the finalized block")]
    NotDescendant(BlockId),
    #[error("stored state root {stored} differs from the rebuilt root {rebuilt}")]
    RootMismatch { stored: String, rebuilt: String },
    #[error("corrupt record under key {0}")]
    CorruptRecord(String),
    #[error(transparent)]
    State(#[from] crate::state::StateError),
}

#[derive(Clone, Copy, Debug)]
pub struct DbOptions {
    pub commit_level: CommitLevel,
    /// Finalized blocks (before the newest) that stay readable through [`Db::state`].
    pub history: usize,
    /// For an in-memory database: address space to reserve for pages (0: grow as needed).
    pub memory_reserve: usize,
}

impl Default for DbOptions {
    fn default() -> Self {
        DbOptions {
            commit_level: CommitLevel::FlushDataAndRoot,
            history: 0,
            memory_reserve: 0,
        }
    }
}

struct Committed {
    parent: BlockId,
    number: u64,
    state: State,
    root: B256,
    log: WriteLog,
}

/// A block being written: a [`Writer`] on its parent's state.
pub struct Block {
    parent: BlockId,
    number: u64,
    pub writer: Writer,
}

impl std::ops::Deref for Block {
    type Target = Writer;
    fn deref(&self) -> &Writer {
        &self.writer
    }
}

impl std::ops::DerefMut for Block {
    fn deref_mut(&mut self) -> &mut Writer {
        &mut self.writer
    }
}

impl Block {
    pub fn number(&self) -> u64 {
        self.number
    }
}

pub struct Db {
    store: Store,
    level: CommitLevel,
    history: usize,
    finalized: BlockId,
    blocks: HashMap<BlockId, Committed>,
    next_id: BlockId,
}

impl Db {
    /// Opens the database in `dir` (created when absent), or in memory when `None`.
    pub fn open(dir: Option<&Path>, options: DbOptions) -> Result<Db, DbError> {
        let store = Store::open_reserving(dir, options.memory_reserve)?;
        let meta = store.meta();
        let state = rebuild(&store)?;
        let rebuilt = state.root();
        if rebuilt != meta.state_root {
            return Err(DbError::RootMismatch {
                stored: hex::encode(meta.state_root),
                rebuilt: hex::encode(rebuilt),
            });
        }
        let mut blocks = HashMap::new();
        blocks.insert(
            0,
            Committed {
                parent: 0,
                number: meta.block_number,
                state,
                root: rebuilt,
                log: WriteLog::new(),
            },
        );
        Ok(Db {
            store,
            level: options.commit_level,
            history: options.history,
            finalized: 0,
            blocks,
            next_id: 1,
        })
    }

    /// The last finalized block.
    pub fn finalized(&self) -> BlockId {
        self.finalized
    }

    fn get(&self, id: BlockId) -> Result<&Committed, DbError> {
        self.blocks.get(&id).ok_or(DbError::UnknownBlock(id))
    }

    /// The state after block `id`.
    pub fn state(&self, id: BlockId) -> Result<&State, DbError> {
        Ok(&self.get(id)?.state)
    }

    /// The state root after block `id`.
    pub fn root(&self, id: BlockId) -> Result<B256, DbError> {
        Ok(self.get(id)?.root)
    }

    /// The block number of `id`.
    pub fn number(&self, id: BlockId) -> Result<u64, DbError> {
        Ok(self.get(id)?.number)
    }

    /// Opens a block on `parent`.
    pub fn begin(&self, parent: BlockId) -> Result<Block, DbError> {
        let p = self.get(parent)?;
        if p.number < self.get(self.finalized)?.number {
            return Err(DbError::NotDescendant(parent));
        }
        Ok(Block {
            parent,
            number: p.number + 1,
            writer: Writer::new(p.state.clone()),
        })
    }

    /// Commits a block: computes its state root and keeps it (unfinalized) under a new id.
    pub fn commit(&mut self, block: Block) -> Result<(BlockId, B256), DbError> {
        self.get(block.parent)?;
        let root = block.writer.state.root();
        let id = self.next_id;
        self.next_id += 1;
        let (state, log) = block.writer.into_parts();
        self.blocks.insert(
            id,
            Committed {
                parent: block.parent,
                number: block.number,
                state,
                root,
                log,
            },
        );
        Ok((id, root))
    }

    /// Writes the blocks from the finalized one up to `id` to the store in one commit, makes
    /// `id` the finalized block, and drops every block that does not descend from it.
    pub fn finalize(&mut self, id: BlockId) -> Result<CommitStats, DbError> {
        let mut chain = Vec::new();
        let mut cur = id;
        while cur != self.finalized {
            chain.push(cur);
            let b = self.get(cur)?;
            if b.number <= self.get(self.finalized)?.number {
                return Err(DbError::NotDescendant(id));
            }
            cur = b.parent;
        }
        for &b in chain.iter().rev() {
            let block = self.blocks.get_mut(&b).expect("on the chain just walked");
            let log = std::mem::take(&mut block.log);
            self.store.apply(store_ops(&log))?;
        }
        let target = &self.blocks[&id];
        let stats = self.store.commit(target.number, target.root, self.level)?;
        // Keep `id` and its descendants.
        let mut keep: HashMap<BlockId, bool> = HashMap::new();
        keep.insert(id, true);
        let ids: Vec<BlockId> = self.blocks.keys().copied().collect();
        for b in ids {
            let mut path = Vec::new();
            let mut cur = b;
            let verdict = loop {
                if let Some(&k) = keep.get(&cur) {
                    break k;
                }
                path.push(cur);
                match self.blocks.get(&cur) {
                    Some(c) if c.number > target.number => cur = c.parent,
                    _ => break false,
                }
            };
            for p in path {
                keep.insert(p, verdict);
            }
        }
        // The newest `history` finalized ancestors stay readable (not buildable on); marked
        // after the descendants were found, so forks off them are still dropped.
        let mut cur = target.parent;
        for _ in 0..self.history {
            match self.blocks.get(&cur) {
                Some(c) if c.number < target.number => {
                    keep.insert(cur, true);
                    cur = c.parent;
                }
                _ => break,
            }
        }
        self.blocks
            .retain(|b, _| keep.get(b).copied().unwrap_or(false));
        if let Some(f) = self.blocks.get_mut(&id) {
            f.log = WriteLog::new();
        }
        self.finalized = id;
        Ok(stats)
    }

    /// Reads an account from the store (the finalized state), not from the in-memory trie.
    pub fn stored_account(&self, addr: &Address) -> Result<Option<Account>, DbError> {
        let k = keccak256(addr);
        match self.store.get(&k)? {
            None => Ok(None),
            Some(v) => Account::from_store(&v)
                .map(Some)
                .map_err(|_| DbError::CorruptRecord(hex::encode(k))),
        }
    }

    /// Walks every page of the store, checks the page tree, rebuilds the trie from the stored
    /// records and compares its root with the durable root.
    pub fn check(&self) -> Result<(CheckReport, B256), DbError> {
        let report = self.store.check()?;
        let state = rebuild(&self.store)?;
        let meta = self.store.meta();
        if state.root() != meta.state_root {
            return Err(DbError::RootMismatch {
                stored: hex::encode(meta.state_root),
                rebuilt: hex::encode(state.root()),
            });
        }
        Ok((report, meta.state_root))
    }

    /// The page store (statistics, space used).
    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// The store writes of one block's log: keys are hashed addresses and hashed address ++ hashed
/// slot; an account deleted in the block deletes its whole key range first.
pub fn store_ops(log: &WriteLog) -> Vec<Op> {
    let mut ops = Vec::new();
    for (haddr, w) in log {
        if w.wiped {
            ops.push(Op::DelPrefix(haddr.to_vec()));
        }
        match &w.account {
            Some(a) => {
                let mut v = Vec::with_capacity(48);
                a.to_store(&mut v);
                ops.push(Op::Put(haddr.to_vec(), v));
            }
            None if !w.wiped => ops.push(Op::Del(haddr.to_vec())),
            None => {}
        }
        for (hslot, value) in &w.storage {
            let mut k = Vec::with_capacity(64);
            k.extend_from_slice(haddr);
            k.extend_from_slice(hslot);
            let t = crate::rlp::trim(value);
            if t.is_empty() {
                ops.push(Op::Del(k));
            } else {
                ops.push(Op::Put(k, t.to_vec()));
            }
        }
    }
    ops
}

/// The state held by the store.
fn rebuild(store: &Store) -> Result<State, DbError> {
    let mut state = State::new();
    let mut err = None;
    store.for_each(|k, v| {
        if err.is_some() {
            return;
        }
        let r = match k.len() {
            32 => match Account::from_store(v) {
                Ok(a) => {
                    state.set_account_hashed(&k.try_into().expect("32 bytes"), Some(a));
                    Ok(())
                }
                Err(_) => Err(DbError::CorruptRecord(hex::encode(k))),
            },
            64 if !v.is_empty() && v.len() <= 32 => {
                let mut value = [0u8; 32];
                value[32 - v.len()..].copy_from_slice(v);
                state
                    .set_storage_hashed(
                        &k[..32].try_into().expect("32"),
                        &k[32..].try_into().expect("32"),
                        &value,
                    )
                    .map_err(DbError::from)
            }
            _ => Err(DbError::CorruptRecord(hex::encode(k))),
        };
        if let Err(e) = r {
            err = Some(e);
        }
    })?;
    match err {
        Some(e) => Err(e),
        None => Ok(state),
    }
}
