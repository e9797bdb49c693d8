//! Blocks over the store: a tree of unfinalized blocks in memory above the last finalized one,
//! each a [`State`] version sharing nodes with its parent, and the page store below, which
//! holds the finalized accounts, slots and trie nodes (with their hashes): memory keeps the top
//! [`DbOptions::cached_levels`] nibbles of the account trie and what unfinalized blocks wrote.
//!
//! * [`Db::begin`] opens a block on any known block (the finalized one or an unfinalized one:
//!   building on another parent is a reorg); the returned [`Writer`] reads its own writes.
//! * [`Db::commit`] computes the block's state root (hashing only what it wrote) and keeps it.
//! * [`Db::state`] reads any known block; a [`State`] is `Send + Sync` and O(1) to clone, so a
//!   reader thread can hold one while the writer goes on.
//! * With [`DbOptions::keep_parent_states`] off, a block takes its unfinalized parent's trie
//!   over instead of sharing it (its writes change nodes in place); a parent's state is
//!   rebuilt from the nearest state and the blocks' write logs when it is needed again.
//! * [`Db::finalize`] writes the blocks from the finalized one up to the given block into the
//!   store in one commit at the configured [`CommitLevel`] (their accounts and slots, and the
//!   records of the trie branches they changed), forgets the forks that do not descend from
//!   it, and drops the finalized state's subtrees from memory.
//! * Past finalized states stay readable ([`DbOptions::history`]; a `State` a reader holds too):
//!   each holds a [`crate::store::Snapshot`] of its store root, whose pages are not reused
//!   while it lives.
//! * [`Db::open`] reopens a store at its durable root (by default first verifying it in full,
//!   as [`Db::check`] does).
//! * Pipelined finalization ([`DbOptions::pipeline`]): [`Db::finalize`] drops the forks and
//!   prunes the finalized state on the calling thread, and leaves the rest to a job on a
//!   thread of its own while the caller goes on with the next blocks on the other core:
//!   building the store writes from the finalized state, applying them to the pages (the
//!   copy-on-write, the largest part), and the store commit (free list, the flushes of the
//!   commit level, the meta page). The blocks built meanwhile read the previous store root
//!   (their snapshots) and the chain's nodes in memory. The next `finalize` (or [`Db::sync`])
//!   waits for the job, then moves the states onto the root it applied; the chain's nodes
//!   are pruned from memory by that next finalization. The durability contract is the
//!   store's (a kill leaves the last durable root), only later: a finalization is durable
//!   once the next `finalize` or `sync` returned. Had the job failed, that call returns its
//!   error.
#![deny(unsafe_code)]

use crate::account::{Account, AccountLeaf};
use crate::hash_builder::{root_hash, HashBuilder, OutOfOrder, Root};
use crate::keccak::{keccak256, B256};
use crate::rlp;
use crate::state::{
    decode_account_record, is_recordless, pack, put_record_key, record_key, record_position,
    AccountWrite, Address, State, WriteLog, Writer, RECORDLESS_DEPTHS, ROOT_ENTRY_KEY,
};
use crate::store::Snapshot;
use crate::store::{Batch, CheckReport, CommitLevel, CommitStats, Store, StoreError};
use crate::trie::{encode_branch, encode_entry, encode_record, ChildEntry, Lookup, NodeRef};
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::path::Path;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard};
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
    #[error("corrupt record: {0}")]
    CorruptRecord(String),
    #[error("a finalization failed ({0}); reopen the database")]
    Failed(String),
    #[error(transparent)]
    State(#[from] crate::state::StateError),
}

#[derive(Clone, Copy, Debug)]
pub struct DbOptions {
    pub commit_level: CommitLevel,
    /// Finalized blocks (before the newest) that stay readable through [`Db::state`].
    pub history: usize,
    /// For an in-memory database: the most address space its pages may take (0: 64 GiB;
    /// memory is only used as pages are written).
    pub memory_reserve: usize,
    /// For an in-memory database: bytes of its pages backed with memory when it is opened (0:
    /// none; pages are backed as they are first written). Paprika's in-memory database clears
    /// its whole size at creation; this is that, for a run whose first touches of memory
    /// should not be timed.
    pub memory_prefault: usize,
    /// Nibbles of the account trie kept in memory above the page store after finalization
    /// (6: the ~1M depth-5 branches at 50M accounts and their children's references; the rest
    /// is loaded from the store when written through). The depths of
    /// [`crate::state::RECORDLESS_DEPTHS`] have no records: with fewer levels a write through
    /// one of them rebuilds it from its children (sixteen lookups or more).
    pub cached_levels: usize,
    /// Verify the whole store when opening it (as [`Db::check`]: every record read, the root
    /// recomputed, every stored trie node compared); linear in the state's size.
    pub verify_on_open: bool,
    /// Build, apply and commit each finalization's store writes on a thread of its own beside
    /// the next blocks (see the module doc): [`Db::finalize`] returns before they are applied
    /// (reads of the store through the `Db` wait for them), and returns the page counts of the
    /// finalization before it.
    pub pipeline: bool,
    /// Every committed block keeps its own trie version, sharing nodes with its parent's
    /// (`true`, the default). With `false`, a block opened on an unfinalized parent takes the
    /// parent's trie over instead: its writes change the nodes in place (no copy of each
    /// shared node on a write's path, no older version to drop at finalization), and the
    /// parent's state is rebuilt, when it is read, built on again or finalized, from the
    /// nearest ancestor that holds one and the write logs of the blocks between (checked
    /// against the parent's committed root). For a chain built and finalized at its tip
    /// (no finality lag, few reads of older blocks); with a finality lag each finalization
    /// rebuilds its target's state. With no [`DbOptions::history`] the block opened on the
    /// finalized block takes its state over too: [`Db::finalize`] then builds the store writes
    /// itself (the job would otherwise hold a version of the trie, and the next blocks would
    /// copy every node they write through), and the finalized block's state is read from the
    /// store (after the finalization's job, when one is running).
    pub keep_parent_states: bool,
    /// Run the pipelined finalization's thread ([`DbOptions::pipeline`]) in Linux's
    /// `SCHED_IDLE` class, as RocksDB can its compaction threads: it then takes a core only
    /// when no other thread wants it, and the threads of the next blocks (this one's, and the
    /// rayon pool's that help with its writes and roots) take the core from it as soon as they
    /// wake, instead of waiting for its time slice to end (~0.5 ms on this 2-vCPU VM, as long
    /// as half a block's roots). Off by default: on a machine whose cores other programs keep
    /// busy, such a thread may wait long, and [`Db::finalize`] and [`Db::sync`] wait for it.
    /// Elsewhere than Linux it does nothing.
    pub idle_priority_job: bool,
}

impl Default for DbOptions {
    fn default() -> Self {
        DbOptions {
            commit_level: CommitLevel::FlushDataAndRoot,
            history: 0,
            memory_reserve: 0,
            memory_prefault: 0,
            cached_levels: 6,
            verify_on_open: true,
            pipeline: false,
            keep_parent_states: true,
            idle_priority_job: false,
        }
    }
}

struct Committed {
    parent: BlockId,
    number: u64,
    /// Empty once handed to a child block (`DbOptions::keep_parent_states` off) until it is
    /// rebuilt (the finalized block's from the store).
    state: OnceLock<State>,
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

/// Where finalization spent its time so far (CPU seconds of the thread that ran each phase),
/// for profiling: building the store writes, applying them to the pages, the store commit
/// (free list, flushes, meta page), on the job's thread when pipelined; dropping the states
/// finalized away, and pruning the finalized trie and moving the states onto the new store
/// root, on the calling thread and the rayon pool (the process's CPU seconds meanwhile: no
/// job runs then).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FinalizeTimes {
    /// On the finalizing thread (the job's when pipelined, unless the next block takes the
    /// finalized state over: see [`DbOptions::keep_parent_states`]): merging the chain's write
    /// logs, then, for the first half of the key space, the walk below and the accounts'
    /// writes (the second half runs on a thread of its own meanwhile, not counted).
    pub build_ops: f64,
    /// The walk of the account trie's changed nodes in the first half of the key space: their
    /// branches' records encoded and the leaves not in the store listed (part of `build_ops`).
    pub account_records: f64,
    pub apply: f64,
    pub commit: f64,
    /// Dropping the states finalized away (their nodes no other state shares).
    pub retire: f64,
    /// Pruning the finalized trie to the cached levels, moving states onto the new root.
    pub rebase: f64,
}

fn thread_seconds() -> f64 {
    proofkit_core::cputime::thread_cpu_time().map_or(0.0, |d| d.as_secs_f64())
}

fn process_seconds() -> f64 {
    proofkit_core::cputime::process_cpu_time().map_or(0.0, |d| d.as_secs_f64())
}

/// What a finalization's store job starts from: the store writes, or the finalized state and
/// the chain's write logs to build them from.
enum JobInput {
    Ops(Vec<Batch>),
    Walk { state: State, logs: Vec<WriteLog> },
}

/// What a finalization's store job hands back: the commit's page counts, a snapshot of the
/// root it applied (for the states to move onto) and its CPU seconds by phase.
struct Landed {
    stats: CommitStats,
    snap: Arc<Snapshot>,
    times: FinalizeTimes,
}

/// A finalization's store job running on its own thread: its result comes through `landed`
/// as soon as the commit is done, and the thread then frees the subtrees the pruning before it
/// replaced (the block thread, which may be waiting for the result, need not wait for the
/// frees too: they were ~0.4 ms a block at 3,000 blocks).
struct InFlight {
    thread: std::thread::JoinHandle<()>,
    /// In a mutex only so that a `Db` stays `Sync` (readers share it across threads).
    landed: std::sync::Mutex<std::sync::mpsc::Receiver<Result<Landed, DbError>>>,
}

impl InFlight {
    /// The job's result; a panic in the job is raised again here.
    fn wait(self) -> Result<Landed, DbError> {
        let landed = self
            .landed
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        match landed.recv() {
            Ok(r) => r,
            // The thread ended without a result: it panicked.
            Err(_) => match self.thread.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => unreachable!("a job sends its result before it ends"),
            },
        }
    }
}

pub struct Db {
    /// Shared with a pipelined commit's thread, which holds it for writing while it runs
    /// (readers of the store through the `Db` wait for it; states read their own snapshots).
    store: Arc<RwLock<Store>>,
    in_flight: Option<InFlight>,
    pipeline: bool,
    idle_priority_job: bool,
    times: FinalizeTimes,
    level: CommitLevel,
    history: usize,
    cached_levels: usize,
    keep_parent_states: bool,
    /// Accounts the last block committed wrote (room a new block's log starts with).
    last_block_accounts: usize,
    finalized: BlockId,
    blocks: HashMap<BlockId, Committed>,
    next_id: BlockId,
    /// Set once a finalization failed: the blocks in memory count as finalized what the store
    /// may not hold (and the job marked their nodes stored), so every later call that writes
    /// or finalizes refuses instead of building on them.
    failed: Option<String>,
}

impl Db {
    /// Opens the database in `dir` (created when absent), or in memory when `None`.
    pub fn open(dir: Option<&Path>, options: DbOptions) -> Result<Db, DbError> {
        let store = Store::open_with(dir, options.memory_reserve, options.memory_prefault)?;
        let meta = store.meta();
        if meta.version < crate::store::VERSION && meta.root_page != 0 {
            return Err(DbError::Store(crate::store::StoreError::NotAStore(
                format!(
                    "a database of store format version {}: it keeps records of account-trie \
                 branches that version {} leaves out and rebuilds from their children (those \
                 at depths {} to {}); rebuild the database from its source",
                    meta.version,
                    crate::store::VERSION,
                    RECORDLESS_DEPTHS.start,
                    RECORDLESS_DEPTHS.end - 1
                ),
            )));
        }
        if options.verify_on_open {
            verify(&store)?;
        }
        let state = State::from_snapshot(store.snapshot())?;
        let root = state.root();
        if root != meta.state_root {
            return Err(DbError::RootMismatch {
                stored: hex::encode(meta.state_root),
                rebuilt: hex::encode(root),
            });
        }
        let mut blocks = HashMap::new();
        blocks.insert(
            0,
            Committed {
                parent: 0,
                number: meta.block_number,
                state: OnceLock::from(state),
                root,
                log: WriteLog::default(),
            },
        );
        Ok(Db {
            store: Arc::new(RwLock::new(store)),
            in_flight: None,
            pipeline: options.pipeline,
            idle_priority_job: options.idle_priority_job,
            times: FinalizeTimes::default(),
            level: options.commit_level,
            history: options.history,
            cached_levels: options.cached_levels,
            keep_parent_states: options.keep_parent_states,
            last_block_accounts: 0,
            finalized: 0,
            blocks,
            next_id: 1,
            failed: None,
        })
    }

    /// The last finalized block.
    pub fn finalized(&self) -> BlockId {
        self.finalized
    }

    fn get(&self, id: BlockId) -> Result<&Committed, DbError> {
        self.blocks.get(&id).ok_or(DbError::UnknownBlock(id))
    }

    /// The state after block `id` (rebuilt first if it was handed to a child block: see
    /// [`DbOptions::keep_parent_states`]).
    pub fn state(&self, id: BlockId) -> Result<&State, DbError> {
        let c = self.get(id)?;
        if let Some(s) = c.state.get() {
            return Ok(s);
        }
        let rebuilt = self.rebuild(id)?;
        // Another thread may have rebuilt it meanwhile: the same state either way.
        let _ = c.state.set(rebuilt);
        Ok(c.state.get().expect("set above"))
    }

    /// The state after block `id` rebuilt from the nearest ancestor that holds one (the
    /// finalized block at the furthest): a version of that state with the write logs of the
    /// blocks after it replayed in order, its root checked against `id`'s committed root.
    fn rebuild(&self, id: BlockId) -> Result<State, DbError> {
        let mut logs = Vec::new();
        let mut cur = id;
        let mut state = loop {
            let c = self.get(cur)?;
            if let Some(s) = c.state.get() {
                break s.clone();
            }
            if cur == self.finalized {
                // Taken over by the block built on it (see `begin`): read from the store.
                break self.finalized_from_store()?;
            }
            logs.push(&c.log);
            cur = c.parent;
        };
        for log in logs.iter().rev() {
            state.replay(log)?;
        }
        let (rebuilt, committed) = (state.root(), self.get(id)?.root);
        if rebuilt != committed {
            return Err(DbError::RootMismatch {
                stored: hex::encode(committed),
                rebuilt: hex::encode(rebuilt),
            });
        }
        Ok(state)
    }

    /// The finalized block's state over the store's root, once the finalization's job (when
    /// one is running) has applied it: what a block built on the finalized block took over
    /// (see [`Db::begin`]), for a read of it or another block on it.
    fn finalized_from_store(&self) -> Result<State, DbError> {
        // The job holds the store for writing until its commit is done.
        let snap = self.store().snapshot();
        let f = self.get(self.finalized)?;
        let meta = snap.meta();
        if meta.state_root != f.root || meta.block_number != f.number {
            return Err(DbError::Failed(format!(
                "the store holds block {} (root {}), not the finalized block {} (its \
                 finalization failed; reopen the database)",
                meta.block_number,
                hex::encode(meta.state_root),
                f.number
            )));
        }
        Ok(State::from_snapshot(snap)?)
    }

    /// Whether a block built on the finalized block takes its state over (see
    /// [`DbOptions::keep_parent_states`]): no finalized state is kept readable besides it.
    fn takes_finalized_state(&self) -> bool {
        !self.keep_parent_states && self.history == 0
    }

    /// The state root after block `id`.
    pub fn root(&self, id: BlockId) -> Result<B256, DbError> {
        Ok(self.get(id)?.root)
    }

    /// The block number of `id`.
    pub fn number(&self, id: BlockId) -> Result<u64, DbError> {
        Ok(self.get(id)?.number)
    }

    fn usable(&self) -> Result<(), DbError> {
        match &self.failed {
            Some(e) => Err(DbError::Failed(e.clone())),
            None => Ok(()),
        }
    }

    /// Records a finalization's error, which every later write or finalization reports.
    fn fail(&mut self, e: DbError) -> DbError {
        self.failed.get_or_insert_with(|| e.to_string());
        e
    }

    /// Opens a block on `parent` (with [`DbOptions::keep_parent_states`] off, taking over an
    /// unfinalized parent's state).
    pub fn begin(&mut self, parent: BlockId) -> Result<Block, DbError> {
        self.usable()?;
        let p = self.get(parent)?;
        if p.number < self.get(self.finalized)?.number {
            return Err(DbError::NotDescendant(parent));
        }
        let number = p.number + 1;
        let state = if self.keep_parent_states
            || (parent == self.finalized && !self.takes_finalized_state())
        {
            self.state(parent)?.clone()
        } else {
            match self.blocks.get_mut(&parent).and_then(|c| c.state.take()) {
                Some(s) => s,
                None => self.rebuild(parent)?,
            }
        };
        Ok(Block {
            parent,
            number,
            writer: Writer::with_capacity(state, self.last_block_accounts),
        })
    }

    /// Commits a block: computes its state root and keeps it (unfinalized) under a new id.
    pub fn commit(&mut self, block: Block) -> Result<(BlockId, B256), DbError> {
        self.usable()?;
        self.get(block.parent)?;
        let root = block.writer.state.root();
        let id = self.next_id;
        self.next_id += 1;
        let (state, log) = block.writer.into_parts()?;
        self.last_block_accounts = log.len();
        self.blocks.insert(
            id,
            Committed {
                parent: block.parent,
                number: block.number,
                state: OnceLock::from(state),
                root,
                log,
            },
        );
        Ok((id, root))
    }

    /// Writes the blocks from the finalized one up to `id` to the store in one commit, makes
    /// `id` the finalized block, and drops every block that does not descend from it. With
    /// [`DbOptions::pipeline`], first waits for the previous finalization and returns its page
    /// counts (zero for the first), and leaves this one's store writes and commit running.
    /// After an error from a finalization (returned by this call, or, pipelined, by the next
    /// `finalize` or `sync`) the database must be reopened: the store is at its last durable
    /// root, while the blocks in memory already count the chain as finalized.
    pub fn finalize(&mut self, id: BlockId) -> Result<CommitStats, DbError> {
        // Refuses once a finalization failed (no job starts after one).
        let previous = self.sync()?;
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
        // The states that stay (`id`'s, and the `history` newest finalized ancestors'), rebuilt
        // while the logs they may need are there (oldest first: each from the one before).
        let mut stay = vec![id];
        let mut cur = self.blocks[&id].parent;
        let target_number = self.blocks[&id].number;
        for _ in 0..self.history {
            match self.blocks.get(&cur) {
                Some(c) if c.number < target_number => {
                    stay.push(cur);
                    cur = c.parent;
                }
                _ => break,
            }
        }
        for &b in stay.iter().rev() {
            self.state(b)?;
        }
        // The chain's write logs, oldest first; merged where the store writes are built, by
        // halves of the key space on two threads (see `ChainWrites::merge_half`).
        let logs: Vec<WriteLog> = chain
            .iter()
            .rev()
            .map(|b| std::mem::take(&mut self.blocks.get_mut(b).expect("on the chain").log))
            .collect();
        let (number, root, level) = {
            let target = &self.blocks[&id];
            (target.number, target.root, self.level)
        };
        let t3 = process_seconds();
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
                    Some(c) if c.number > number => cur = c.parent,
                    _ => break false,
                }
            };
            for p in path {
                keep.insert(p, verdict);
            }
        }
        // The newest `history` finalized ancestors (found above) stay readable (not buildable
        // on); marked after the descendants were found, so forks off them are still dropped.
        for &b in &stay[1..] {
            keep.insert(b, true);
        }
        // Dropped before the pruning below, so that the finalized trie's nodes are its own
        // again and are pruned in place; on the pool, the blocks split between its threads
        // (the previous job has landed and the next has not started: the other core is idle).
        let retired: Vec<BlockId> = self
            .blocks
            .keys()
            .filter(|b| !keep.get(b).copied().unwrap_or(false))
            .copied()
            .collect();
        let retired: Vec<Committed> = retired
            .iter()
            .filter_map(|b| self.blocks.remove(b))
            .collect();
        {
            use rayon::prelude::*;
            retired.into_par_iter().for_each(drop);
        }
        self.times.retire += process_seconds() - t3;
        self.finalized = id;
        // The finalized state drops from memory the subtrees the store already holds (what
        // the previous finalizations wrote); what this chain wrote is stored by the job below
        // and pruned by the next finalization (or when the job lands, if nothing was built on
        // `id` by then).
        let t4 = process_seconds();
        let takes_over = self.takes_finalized_state();
        let target = self.blocks.get_mut(&id).expect("kept above");
        target.log = WriteLog::default();
        let target = target.state.get_mut().expect("rebuilt above");
        let pruned = target.prune(self.cached_levels);
        self.times.rebase += process_seconds() - t4;
        // When the next block takes the finalized state over, the store writes are built here,
        // before it starts: a job holding a version of the trie would make the next blocks copy
        // every node they write through (and the finalization after drop the old versions), 9%
        // of the CPU at 10,000 blocks. Otherwise the job builds them beside the next blocks.
        let input = if takes_over {
            let t = thread_seconds();
            let mut records = 0.0;
            let ops = chain_ops(target, logs, &mut records);
            self.times.build_ops += thread_seconds() - t;
            self.times.account_records += records;
            JobInput::Ops(ops.map_err(|e| self.fail(e))?)
        } else {
            JobInput::Walk {
                state: target.clone(),
                logs,
            }
        };
        let store = Arc::clone(&self.store);
        // Builds the chain's store writes from `id`'s state, applies them and commits. The
        // blocks built meanwhile read their snapshots (the store root before this one) and the
        // chain's nodes in memory, and nothing prunes a trie until the job has landed: the job
        // marks the chain's nodes stored as it writes them, which only a pruning acts on.
        let job = move |locked: Option<SyncSender<()>>| -> Result<Landed, DbError> {
            let mut store = store.write().unwrap_or_else(PoisonError::into_inner);
            if let Some(tx) = locked {
                let _ = tx.send(());
            }
            let mut times = FinalizeTimes::default();
            let t0 = thread_seconds();
            let ops = match input {
                JobInput::Ops(ops) => ops,
                JobInput::Walk { state, logs } => {
                    chain_ops(&state, logs, &mut times.account_records)?
                }
            };
            let t1 = thread_seconds();
            store.apply_batches(&ops)?;
            let t2 = thread_seconds();
            let snap = store.working_snapshot(number, root);
            let stats = store.commit(number, root, level)?;
            times.build_ops = t1 - t0;
            times.apply = t2 - t1;
            times.commit = thread_seconds() - t2;
            Ok(Landed { stats, snap, times })
        };
        if self.pipeline {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            let (landed_tx, landed) = std::sync::mpsc::sync_channel(1);
            let idle = self.idle_priority_job;
            let thread = std::thread::spawn(move || {
                if idle {
                    // Best effort: a thread left at its normal priority only runs later.
                    proofkit_core::affinity::set_current_thread_idle();
                }
                let _ = landed_tx.send(job(Some(tx)));
                // The pruned subtrees are freed here, off the block thread, once the result
                // is out.
                crate::trie::drop_subtrees(pruned);
            });
            self.in_flight = Some(InFlight {
                thread,
                landed: std::sync::Mutex::new(landed),
            });
            // Returns once the job holds the store, so that reads of the store through the
            // `Db` (which wait for it) see this finalization.
            let _ = rx.recv();
            Ok(previous.unwrap_or_default())
        } else {
            let landed = job(None);
            crate::trie::drop_subtrees(pruned);
            let landed = landed.map_err(|e| self.fail(e))?;
            Ok(self.land(landed))
        }
    }

    /// Waits for a pipelined finalization still running (see [`DbOptions::pipeline`]); once
    /// this returns, the last finalization is durable at the commit level. Returns that
    /// commit's page counts (`None`: none was running), or its error (the store is then at its
    /// last durable root; reopen the database).
    pub fn sync(&mut self) -> Result<Option<CommitStats>, DbError> {
        let Some(job) = self.in_flight.take() else {
            self.usable()?;
            return Ok(None);
        };
        // A panic in the job is raised here, as a finalization on this thread would have.
        let landed = job.wait().map_err(|e| self.fail(e))?;
        Ok(Some(self.land(landed)))
    }

    /// Moves the finalized block and its descendants onto the root a finalization's job
    /// applied (their stored nodes are the same in it), and prunes the finalized state when
    /// no block was built on it meanwhile (else the next finalization prunes its own target).
    fn land(&mut self, landed: Landed) -> CommitStats {
        self.times.build_ops += landed.times.build_ops;
        self.times.account_records += landed.times.account_records;
        self.times.apply += landed.times.apply;
        self.times.commit += landed.times.commit;
        let t = thread_seconds();
        let number = self.blocks[&self.finalized].number;
        let alone = !self.blocks.values().any(|c| c.number > number);
        for (&b, c) in self.blocks.iter_mut() {
            let Some(state) = c.state.get_mut() else {
                // Handed to a child; rebuilt (onto this root) from an ancestor's state.
                continue;
            };
            if b == self.finalized {
                state.rebase(landed.snap.clone(), alone.then_some(self.cached_levels));
            } else if c.number > number {
                state.rebase(landed.snap.clone(), None);
            }
        }
        self.times.rebase += thread_seconds() - t;
        landed.stats
    }

    /// Reads an account from the store (the finalized state), not from the in-memory trie.
    pub fn stored_account(&self, addr: &Address) -> Result<Option<Account>, DbError> {
        let k = keccak256(addr);
        match self.store().get(&k)? {
            None => Ok(None),
            Some(v) => decode_account_record(&v)
                .map(|(a, _)| Some(a))
                .ok_or_else(|| DbError::CorruptRecord(format!("key {}", hex::encode(k)))),
        }
    }

    /// [`Db::stored_account`] for many addresses, their keys hashed eight at a time
    /// ([`crate::keccak_x8`]) and looked up in key order ([`Store::get_many`]); the results
    /// are in the order of `addrs`. The larger the batch, the more of its keys share pages.
    pub fn stored_accounts(&self, addrs: &[Address]) -> Result<Vec<Option<Account>>, DbError> {
        let msgs: Vec<&[u8]> = addrs.iter().map(|a| &a[..]).collect();
        let keys = crate::keccak::keccak256_many(&msgs);
        let refs: Vec<&[u8]> = keys.iter().map(|k| &k[..]).collect();
        let mut found = vec![None; addrs.len()];
        let mut bad = None;
        self.store()
            .get_many(&refs, |i, v| match decode_account_record(v) {
                Some((a, _)) => found[i] = Some(a),
                None => bad = Some(i),
            })?;
        match bad {
            Some(i) => Err(DbError::CorruptRecord(format!(
                "key {}",
                hex::encode(keys[i])
            ))),
            None => Ok(found),
        }
    }

    /// Walks every page of the store, checks the page tree and the free list, rebuilds the
    /// trie from the stored accounts and slots, compares its root with the durable root and
    /// every stored trie node with the rebuilt one.
    pub fn check(&self) -> Result<(CheckReport, B256), DbError> {
        let store = self.store();
        let report = verify(&store)?;
        Ok((report, store.meta().state_root))
    }

    /// Where finalization spent its time so far.
    pub fn finalize_times(&self) -> FinalizeTimes {
        self.times
    }

    /// The page store (statistics, space used), read-locked: waits while a pipelined
    /// finalization writes it.
    pub fn store(&self) -> RwLockReadGuard<'_, Store> {
        self.store.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Db {
    /// Lets a pipelined finalization finish its commit (a kill instead leaves the store at its
    /// last durable root). Its error, if any, cannot be returned here: call [`Db::sync`] to
    /// see it.
    fn drop(&mut self) {
        if let Some(job) = self.in_flight.take() {
            let _ = job.thread.join();
        }
    }
}

/// A chain's writes by account, in hashed order: whether any of its blocks wiped the
/// account, and the slots any of them wrote (ascending, once each). Built by sorting the
/// blocks' logs together instead of a map of sets: a finalization merges tens of thousands of
/// accounts, and a set per account was as many allocations (and frees) on the job's thread.
struct ChainWrites {
    /// (hashed address, wiped, the account's range in `slots`), ascending by address.
    accounts: Vec<(B256, bool, std::ops::Range<usize>)>,
    slots: Vec<B256>,
}

impl ChainWrites {
    /// The writes of `logs` to one half of the key space (`half` 0: hashed addresses whose
    /// first byte is below 0x80; 1: the rest). Each half of [`chain_ops`] merges its own on
    /// its own thread: merged whole, the logs were sorted on the block thread while the other
    /// core waited (~4 ms a finalization, 2% of the wall time at 10,000 blocks).
    fn merge_half(logs: &[WriteLog], half: usize) -> ChainWrites {
        // The keys copied out as the tables are read in order: sorting references compared
        // keys through them, each a cold line of a log's table, and so did reading the
        // entries in key order afterwards (asked for a few accounts ahead now).
        let mut all: Vec<(B256, &AccountWrite)> = logs
            .iter()
            .flatten()
            .filter(|(h, _)| usize::from(h[0] >= 0x80) == half)
            .map(|(h, w)| (*h, w))
            .collect();
        all.sort_unstable_by_key(|a| a.0);
        let mut accounts = Vec::with_capacity(all.len());
        let mut slots: Vec<B256> = Vec::with_capacity(all.len());
        let mut at = 0;
        for same in all.chunk_by(|a, b| a.0 == b.0) {
            for (_, w) in all.get(at + 8..at + 8 + same.len()).unwrap_or_default() {
                proofkit_core::memory::prefetch_read_all(*w);
            }
            at += same.len();
            let start = slots.len();
            let mut wiped = false;
            for (_, w) in same {
                wiped |= w.wiped;
                slots.extend(w.storage.keys());
            }
            if same.len() > 1 {
                // Several blocks wrote the account: their slots together, in order, once.
                let mut tail = slots.split_off(start);
                tail.sort_unstable();
                tail.dedup();
                slots.append(&mut tail);
            }
            accounts.push((same[0].0, wiped, start..slots.len()));
        }
        ChainWrites { accounts, slots }
    }

    fn len(&self) -> usize {
        self.accounts.len()
    }

    fn entries<'a>(
        &'a self,
        accounts: &'a [(B256, bool, std::ops::Range<usize>)],
    ) -> impl Iterator<Item = (&'a B256, bool, &'a [B256])> {
        accounts
            .iter()
            .map(|(h, wiped, r)| (h, *wiped, &self.slots[r.clone()]))
    }

    /// The accounts, ascending.
    fn all(&self) -> impl Iterator<Item = (&B256, bool, &[B256])> {
        self.entries(&self.accounts)
    }
}

/// The store writes that take the finalized state to `state`, given what the blocks since
/// wrote (`logs`, oldest first; merged by hashed address: whether it was wiped and the slots
/// written): accounts and slots as they are in `state` (values and trie records are read
/// back from it), the records of the trie branches not in the store yet, deletions of the
/// records a removal left behind, and the root entry.
fn chain_ops(
    state: &State,
    logs: Vec<WriteLog>,
    records_seconds: &mut f64,
) -> Result<Vec<Batch>, DbError> {
    let logs = &logs[..];
    let trie = state.account_trie();
    // One walk of the changed part of the trie yields the branches' records and the leaves
    // not in the store as they are (in hashed order like the merged logs), for the accounts' writes
    // (a walk per purpose read every changed node's cold cell twice). Two halves of the key
    // space, the second on a thread of its own (not the rayon pool: the block thread's roots
    // would queue behind it there): the walk waits on a cold line per node.
    let half = |h: usize| -> Result<(Batch, f64), DbError> {
        let merged = ChainWrites::merge_half(logs, h);
        let t = thread_seconds();
        let mut unstored: Vec<(B256, &AccountLeaf)> = Vec::with_capacity(merged.len());
        // Room for an account's writes and about two branch records an account (the depth-4
        // and depth-5 branches above most new accounts at 50M accounts).
        let mut batch = Batch::with_capacity(merged.len() * 5, merged.len() * (300 + 2 * 600));
        trie.take_dirty_half(
            h,
            RECORDLESS_DEPTHS,
            |pos, rec| {
                batch.put_with(
                    |k| put_record_key(None, pos, k),
                    |v| v.extend_from_slice(rec),
                )
            },
            |path, leaf| unstored.push((pack(path), leaf)),
        );
        let walked = thread_seconds() - t;
        account_ops(state, merged.all(), &unstored, &mut batch)?;
        Ok((batch, walked))
    };
    let (low, high) = std::thread::scope(|s| {
        let high = s.spawn(|| half(1));
        let low = half(0);
        let high = high
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (low, high)
    });
    trie.took_both_halves();
    let (mut low, walked) = low?;
    *records_seconds += walked;
    match trie.root_entry() {
        Some(e) => low.put_with(
            |k| k.extend_from_slice(&ROOT_ENTRY_KEY),
            |v| encode_entry(&e, v),
        ),
        None => low.del(&ROOT_ENTRY_KEY),
    }
    Ok(vec![low, high?.0])
}

/// The writes of the accounts in `merged` (`unstored`: the changed leaves, by hashed address).
fn account_ops<'m>(
    state: &State,
    merged: impl Iterator<Item = (&'m B256, bool, &'m [B256])>,
    unstored: &[(B256, &AccountLeaf)],
    ops: &mut Batch,
) -> Result<(), DbError> {
    let mut next = 0;
    for (haddr, wiped, slots) in merged {
        while unstored.get(next).is_some_and(|(h, _)| h < haddr) {
            next += 1;
        }
        // The leaves' cells went cold since the walk that found them: the lines the next
        // accounts read are asked for a few accounts ahead (the leaf, then the root of its
        // storage trie, whose address is in the leaf). The account's own lines are asked for
        // by name: they lie at the leaf's end, after its inline slot, and with the leaf's lines
        // alone `Account::to_store` still waited on them (1.95% of a 10,000-block run's
        // samples, 0.28% with them; session 45).
        if let Some((_, l)) = unstored.get(next + 16) {
            proofkit_core::memory::prefetch_read_all(*l);
            proofkit_core::memory::prefetch_read_all(&l.account);
        }
        if let Some((_, l)) = unstored.get(next + 8) {
            l.storage.prefetch_root();
        }
        if wiped {
            ops.del_prefix(haddr);
        }
        let found = unstored.get(next).filter(|(h, _)| h == haddr);
        let leaf = match found {
            Some((_, l)) => {
                next += 1;
                *l
            }
            None => match state.written_leaf(haddr) {
                Some(l) => l,
                None => {
                    if state.try_account_hashed(haddr)?.is_some() {
                        return Err(DbError::CorruptRecord(format!(
                            "written account {} not in memory",
                            hex::encode(haddr)
                        )));
                    }
                    if !wiped {
                        ops.del_prefix(haddr);
                    }
                    let path = crate::trie::nibbles(haddr);
                    for d in state.stale_account_positions(haddr) {
                        if !is_recordless(d) {
                            ops.del_with(|k| put_record_key(None, &path[..d], k));
                        }
                    }
                    continue;
                }
            },
        };
        ops.put_with(|k| k.extend_from_slice(haddr), |v| leaf.to_store(v));
        for hslot in slots {
            let slot_key = |k: &mut Vec<u8>| {
                k.extend_from_slice(haddr);
                k.extend_from_slice(hslot);
            };
            let path = crate::trie::nibbles(hslot);
            let value = match leaf.storage.lookup(&path) {
                Lookup::Found(v) => v.to_u256(),
                Lookup::Absent => [0; 32],
                Lookup::Stored => state.try_storage_hashed(haddr, hslot)?,
            };
            let t = crate::rlp::trim(&value);
            if t.is_empty() {
                ops.del_with(slot_key);
                for d in leaf.storage.stale_positions(&path) {
                    ops.del_with(|k| put_record_key(Some(haddr), &path[..d], k));
                }
            } else {
                ops.put_with(slot_key, |v| v.extend_from_slice(t));
            }
        }
        leaf.storage.take_dirty(|pos, rec| {
            ops.put_with(
                |k| put_record_key(Some(haddr), pos, k),
                |v| v.extend_from_slice(rec),
            );
        });
    }
    Ok(())
}

/// Walks every page of `store` ([`Store::check`]), then streams its records in key order
/// through hash builders (the account trie, and each account's storage while its slots pass
/// by): every branch record the rebuilt tries produce is compared with the stored one as the
/// branch completes, every account's storage-root entry and the root entry likewise, and the
/// rebuilt root with the durable one. Memory: the branches open on the current path and the
/// stored records waiting for them, not the state. The 16 subtrees under the account trie's
/// first nibble are rebuilt apart on the rayon pool and joined in its top branch.
fn verify(store: &Store) -> Result<CheckReport, DbError> {
    use rayon::prelude::*;
    let report = store.check()?;
    let snap = store.snapshot();
    let parts = (0u8..16)
        .into_par_iter()
        .map(|n| {
            let mut check = StreamCheck::new(1);
            check.scan(&snap, &[n << 4], |k| k[0] >> 4 == n)?;
            check.finish()
        })
        .collect::<Result<Vec<Top>, DbError>>()?;
    let root = if parts.iter().filter(|p| p.root.entry.is_some()).count() < 2 {
        // The trie's top is not a branch at the first nibble (at most one subtree): rebuild
        // it whole.
        let mut check = StreamCheck::new(0);
        check.scan(&snap, &[], |_| true)?;
        let top = check.finish()?;
        compare_root_entry(&top.root, &top.stored_root_entry)?;
        top.root.hash
    } else {
        join_parts(parts)?
    };
    let meta = store.meta();
    if root != meta.state_root {
        return Err(DbError::RootMismatch {
            stored: hex::encode(meta.state_root),
            rebuilt: hex::encode(root),
        });
    }
    Ok(report)
}

/// The account trie's top branch from its 16 subtrees: its record and the root entry against
/// the stored ones (both in the first subtree's key range); returns the root hash.
fn join_parts(parts: Vec<Top>) -> Result<B256, DbError> {
    let mut entries: [Option<ChildEntry>; 16] = Default::default();
    let mut refs: [Option<NodeRef>; 16] = [None; 16];
    let (mut stored_record, mut stored_root_entry) = (None, None);
    for (n, part) in parts.into_iter().enumerate() {
        if let Some((e, r)) = part.root.top() {
            entries[n] = Some(e);
            refs[n] = Some(r);
        }
        stored_record = stored_record.or(part.stored_top_record);
        stored_root_entry = stored_root_entry.or(part.stored_root_entry);
    }
    let record = encode_record(&entries);
    if stored_record.as_ref() != Some(&record) {
        return Err(DbError::CorruptRecord(format!(
            "trie node record {} differs from the rebuilt trie",
            hex::encode(record_key(None, &[]))
        )));
    }
    let mut rlp = Vec::with_capacity(600);
    encode_branch(&refs, &mut rlp);
    let top = NodeRef::from_rlp(&rlp);
    let root = Root {
        entry: Some(ChildEntry::Branch(top)),
        reference: Some(top),
        hash: root_hash(&top),
    };
    compare_root_entry(&root, &stored_root_entry)?;
    Ok(root.hash)
}

fn compare_root_entry(root: &Root, stored: &Option<Vec<u8>>) -> Result<(), DbError> {
    let want = root.entry.as_ref().map(|e| {
        let mut v = Vec::new();
        encode_entry(e, &mut v);
        v
    });
    if want != *stored {
        return Err(DbError::CorruptRecord(
            "the account trie's root entry".into(),
        ));
    }
    Ok(())
}

/// What a [`StreamCheck`] leaves: the top of its trie or subtree, and the two records only the
/// whole trie's top can be compared with (the root entry and the top branch's record, when
/// checking a subtree).
struct Top {
    root: Root,
    stored_root_entry: Option<Vec<u8>>,
    stored_top_record: Option<Vec<u8>>,
}

/// The state of [`verify`]'s pass over the records of the account trie or of one subtree.
struct StreamCheck {
    accounts: HashBuilder,
    /// Stored account-trie branch records not matched yet, by nibble path.
    account_records: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The stored root entry, when there is one.
    root_entry: Option<Vec<u8>>,
    /// When checking a subtree: the stored record of the top branch.
    top_record: Option<Vec<u8>>,
    /// The account whose slots and storage records come next.
    open: Option<OpenAccount>,
}

struct OpenAccount {
    haddr: B256,
    account: Account,
    /// The record's bytes after the account: its storage trie's root entry.
    storage_entry: Vec<u8>,
    slots: HashBuilder,
    /// Stored branch records of its storage trie not matched yet, by nibble path.
    records: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl From<OutOfOrder> for DbError {
    fn from(_: OutOfOrder) -> Self {
        DbError::CorruptRecord("keys out of order".into())
    }
}

impl StreamCheck {
    /// A check of the account trie (`shared` 0) or of a subtree under its first `shared`
    /// nibbles.
    fn new(shared: usize) -> Self {
        StreamCheck {
            accounts: HashBuilder::below(shared),
            account_records: BTreeMap::new(),
            root_entry: None,
            top_record: None,
            open: None,
        }
    }

    /// Visits the records from `from` on while `within(key)`.
    fn scan(
        &mut self,
        snap: &Snapshot,
        from: &[u8],
        within: impl Fn(&[u8]) -> bool,
    ) -> Result<(), DbError> {
        let mut err = None;
        snap.scan_from(from, |k, v| {
            if !within(k) {
                return false;
            }
            match self.visit(k, v) {
                Ok(()) => true,
                Err(e) => {
                    err = Some(e);
                    false
                }
            }
        })?;
        err.map_or(Ok(()), Err)
    }

    fn visit(&mut self, k: &[u8], v: &[u8]) -> Result<(), DbError> {
        let corrupt = || DbError::CorruptRecord(format!("key {}", hex::encode(k)));
        match k.len() {
            32 => {
                self.close_account()?;
                // The rest is the storage trie's root entry, compared as bytes when the
                // account's slots are done.
                let (account, storage_entry) =
                    Account::from_store_prefix(v).map_err(|_| corrupt())?;
                self.open = Some(OpenAccount {
                    haddr: k.try_into().expect("32 bytes"),
                    account,
                    storage_entry: storage_entry.to_vec(),
                    slots: HashBuilder::new(),
                    records: BTreeMap::new(),
                });
            }
            64 | 65 => {
                // A slot or storage record belongs to the account just before it in key order.
                let a = self
                    .open
                    .as_mut()
                    .filter(|a| a.haddr[..] == k[..32])
                    .ok_or_else(corrupt)?;
                if k.len() == 65 {
                    let pos = record_position(&k[32..]).ok_or_else(corrupt)?;
                    a.records.insert(pos, v.to_vec());
                    return Ok(());
                }
                if v.is_empty() || v.len() > 32 || v[0] == 0 {
                    return Err(corrupt());
                }
                let mut leaf = Vec::with_capacity(33);
                rlp::encode_bytes(&mut leaf, v);
                let slot: B256 = k[32..].try_into().expect("32 bytes");
                let (records, owner) = (&mut a.records, Some(&a.haddr));
                a.slots.add(&slot, leaf, &mut |pos, rec| {
                    match_record(records, owner, pos, rec)
                })?;
            }
            33 if k == ROOT_ENTRY_KEY => self.root_entry = Some(v.to_vec()),
            33 => {
                let pos = record_position(k).ok_or_else(corrupt)?;
                if pos.is_empty() && self.accounts.shared() > 0 {
                    self.top_record = Some(v.to_vec());
                } else {
                    self.account_records.insert(pos, v.to_vec());
                }
            }
            _ => return Err(corrupt()),
        }
        Ok(())
    }

    /// Finishes the open account's storage trie, compares its root entry with the record's,
    /// and adds the account's leaf to the account trie.
    fn close_account(&mut self) -> Result<(), DbError> {
        let Some(mut a) = self.open.take() else {
            return Ok(());
        };
        let owner = Some(&a.haddr);
        let storage = a
            .slots
            .finish(&mut |pos, rec| match_record(&mut a.records, owner, pos, rec))?;
        let mut want = Vec::new();
        if let Some(e) = &storage.entry {
            encode_entry(e, &mut want);
        }
        if want != a.storage_entry {
            return Err(DbError::CorruptRecord(format!(
                "storage root of account {}",
                hex::encode(a.haddr)
            )));
        }
        if let Some(pos) = a.records.keys().next() {
            return Err(stale_record(owner, pos));
        }
        let mut leaf = Vec::with_capacity(110);
        a.account.rlp(&storage.hash, &mut leaf);
        let records = &mut self.account_records;
        self.accounts.add(&a.haddr, leaf, &mut |pos, rec| {
            match_record(records, None, pos, rec)
        })
    }

    /// Finishes the account trie (or subtree): every stored record below its top must have
    /// been matched.
    fn finish(mut self) -> Result<Top, DbError> {
        self.close_account()?;
        let records = &mut self.account_records;
        let root = self
            .accounts
            .finish(&mut |pos, rec| match_record(records, None, pos, rec))?;
        if let Some(pos) = self.account_records.keys().next() {
            return Err(stale_record(None, pos));
        }
        Ok(Top {
            root,
            stored_root_entry: self.root_entry,
            stored_top_record: self.top_record,
        })
    }
}

/// Compares the record the rebuilt trie made for the branch at `pos` with the stored one, and
/// requires that no other stored record lies below `pos` (the branches below it are complete).
fn match_record(
    stored: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    owner: Option<&B256>,
    pos: &[u8],
    record: Vec<u8>,
) -> Result<(), DbError> {
    // An account-trie branch at a recordless depth has none: one stored there is stale
    // (found by the range below, which starts at its own position).
    let recordless = owner.is_none() && is_recordless(pos.len());
    if !recordless && stored.remove(pos).as_ref() != Some(&record) {
        return Err(DbError::CorruptRecord(format!(
            "trie node record {} differs from the rebuilt trie",
            hex::encode(record_key(owner, pos))
        )));
    }
    match stored
        .range::<[u8], _>((Bound::Included(pos), Bound::Unbounded))
        .next()
    {
        Some((below, _)) if below.starts_with(pos) => Err(stale_record(owner, below)),
        _ => Ok(()),
    }
}

fn stale_record(owner: Option<&B256>, pos: &[u8]) -> DbError {
    DbError::CorruptRecord(format!(
        "trie node record {} is not a node of the rebuilt trie",
        hex::encode(record_key(owner, pos))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain's logs merged: one entry per account in hashed order, wiped when any block
    /// wiped it, the slots of all its blocks in order and once each; the halves split at 0x80.
    #[test]
    fn a_chains_logs_merge_by_account() {
        let h = |b: u8| [b; 32];
        let write = |wiped: bool, slots: &[u8]| AccountWrite {
            wiped,
            account: None,
            storage: slots.iter().map(|&s| (h(s), [s; 32])).collect(),
        };
        let mut first = WriteLog::default();
        first.insert(h(9), write(false, &[3, 1]));
        first.insert(h(2), write(false, &[]));
        let mut second = WriteLog::default();
        second.insert(h(9), write(true, &[2, 3]));
        second.insert(h(5), write(false, &[7]));
        let mut third = WriteLog::default();
        third.insert(h(9), write(false, &[8]));
        third.insert(h(0x80), write(false, &[4]));
        second.insert(h(0xf0), write(true, &[]));
        let logs = [first, second, third];
        let half = |n: usize| -> Vec<(B256, bool, Vec<B256>)> {
            ChainWrites::merge_half(&logs, n)
                .all()
                .map(|(k, wiped, slots)| (*k, wiped, slots.to_vec()))
                .collect()
        };
        assert_eq!(
            half(0),
            vec![
                (h(2), false, vec![]),
                (h(5), false, vec![h(7)]),
                (h(9), true, vec![h(1), h(2), h(3), h(8)]),
            ]
        );
        assert_eq!(
            half(1),
            vec![(h(0x80), false, vec![h(4)]), (h(0xf0), true, vec![])]
        );
        assert_eq!(ChainWrites::merge_half(&logs, 0).len(), 3);
        assert_eq!(ChainWrites::merge_half(&[], 1).len(), 0);
    }
}
