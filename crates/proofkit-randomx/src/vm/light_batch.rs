//! Light-mode hashing of many inputs on one thread: several VMs, each running its hashes in a
//! coroutine (a stack of its own), each suspended at its dataset reads; the items all of them
//! wait for are then computed together, eight per instruction in the AVX-512 lanes of
//! [`Cache::dataset_items_many`].
//!
//! Why: light mode spends ~80% of a hash computing dataset items (specs.md 7.3), and one VM can
//! keep at most two of them in flight: the item an iteration reads is chosen by the registers
//! of the iteration before. A SuperscalarHash program fills a 3-4-wide core by itself, so two
//! items interleaved cost about what two cost apart (~1,040 ns each here), while in vector
//! lanes they cost ~500-640 ns each (`item_timing`, `dataset_timing`). Only throughput gains:
//! each hash takes as long as its slowest neighbour's round of reads, so a lone hash (a node
//! verifying one block) should use [`Vm::hash`].
//!
//! The VMs run the unchanged JIT or interpreter; only where a light-mode VM fetches items does
//! it look at [`CURRENT`], which is set only while one of the batch's coroutines runs. A panic
//! inside a VM (none is expected) aborts the process rather than unwinding whenever a VM is
//! suspended at that moment: dropping it would unwind through the JIT's frames, whose item
//! callback is `extern "sysv64"` (no unwinding), and Rust aborts there.
#![allow(unsafe_code)]

use super::mxcsr;
use super::{Vm, VmOptions};
use crate::cache::Cache;
use crate::Error;
use corosensei::stack::DefaultStack;
use corosensei::{Coroutine, CoroutineResult, Yielder};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

/// What a suspended VM waits for: `count` (1 or 2) dataset items.
#[derive(Clone, Copy, Debug)]
struct Request {
    items: [u64; 2],
    count: usize,
}

/// The items of a [`Request`], in its order.
type Reply = [[u64; 8]; 2];

/// VMs per batch that measured fastest here: a JIT VM asks for two items every other
/// iteration, so four fill the eight lanes of one vector batch. CPU time per hash against one
/// VM (`light_batch_timing`): 2 VMs 1.55x, 3 1.80x, 4 1.90x, 5 1.53x, 6 1.65x, 8 1.70x (the
/// sixteen items of 8 VMs take two vector batches, and their scratchpads no longer share L2).
pub const DEFAULT_VMS: usize = 4;

/// Stack of each coroutine: a hash needs a few KiB (the JIT's frame, AES and Blake2b state, the
/// program compiler); pages never touched stay unmapped, and a guard page ends it.
const STACK_BYTES: usize = 256 * 1024;

thread_local! {
    /// The yielder of the batch coroutine running on this thread, null outside one.
    static CURRENT: Cell<*const Yielder<Reply, Request>> = const { Cell::new(std::ptr::null()) };
}

/// Hands `request` to the batch running this VM and waits for the items; `None` when this VM is
/// not in a batch (compute the items yourself).
fn exchange(request: Request) -> Option<Reply> {
    let yielder = CURRENT.get();
    if yielder.is_null() {
        return None;
    }
    CURRENT.set(std::ptr::null());
    // SAFETY: CURRENT is non-null only while the coroutine owning this yielder runs (it is set
    // when the coroutine starts and when `suspend` returns into it here, cleared before it
    // suspends or returns), so the yielder is alive and this is that coroutine's stack.
    let reply = unsafe { &*yielder }.suspend(request);
    CURRENT.set(yielder);
    Some(reply)
}

/// Dataset items `a` and `b` (light mode's current and next read), from the batch when this VM
/// runs in one.
pub(crate) fn item_pair(cache: &Cache, a: u64, b: u64) -> [[u64; 8]; 2] {
    match exchange(Request {
        items: [a, b],
        count: 2,
    }) {
        Some(reply) => reply,
        None => cache.dataset_item_pair(a, b),
    }
}

/// Dataset item `a` (the interpreter's light-mode read), from the batch when this VM runs in
/// one.
pub(crate) fn item(cache: &Cache, a: u64) -> [u64; 8] {
    match exchange(Request {
        items: [a, a],
        count: 1,
    }) {
        Some(reply) => reply[0],
        None => cache.dataset_item(a),
    }
}

/// Light-mode VMs on one cache that hash a list of inputs together on the calling thread (see
/// the module doc). Results equal [`Vm::hash`]'s.
pub struct LightBatch {
    cache: Arc<Cache>,
    vms: Vec<Vm>,
    stacks: Vec<DefaultStack>,
    last_call: Rounds,
}

/// How the items of one [`LightBatch::hash_many`] call were computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rounds {
    /// Times the VMs all waited and their items were computed together.
    pub rounds: u64,
    /// Items computed in those rounds (a JIT VM asks for two every other iteration, the
    /// interpreter for one every iteration).
    pub items: u64,
}

/// The inputs of one [`LightBatch::hash_many`] call and their results, shared by its coroutines.
struct Work {
    inputs: Vec<Vec<u8>>,
    next: Cell<usize>,
    results: RefCell<Vec<[u8; 32]>>,
}

type VmCoroutine = Coroutine<Reply, Request, Vm, DefaultStack>;

impl LightBatch {
    /// `vms` light-mode VMs on `cache` with `opts`. [`DEFAULT_VMS`] fills the eight lanes of
    /// one vector batch.
    pub fn new(cache: Arc<Cache>, opts: VmOptions, vms: usize) -> Result<Self, Error> {
        if vms == 0 {
            return Err(Error::EmptyBatch);
        }
        let mut batch = LightBatch {
            cache: cache.clone(),
            vms: Vec::with_capacity(vms),
            stacks: Vec::with_capacity(vms),
            last_call: Rounds::default(),
        };
        for _ in 0..vms {
            batch
                .vms
                .push(Vm::new(super::DatasetSource::Light(cache.clone()), opts)?);
            batch.stacks.push(
                DefaultStack::new(STACK_BYTES).map_err(|e| Error::CoroutineStack(e.to_string()))?,
            );
        }
        Ok(batch)
    }

    /// The number of VMs (inputs hashed at once).
    pub fn vms(&self) -> usize {
        self.vms.len()
    }

    /// How the last [`LightBatch::hash_many`] call computed its items.
    pub fn last_call(&self) -> Rounds {
        self.last_call
    }

    /// The cache the VMs read.
    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// The RandomX version the VMs hash.
    pub fn version(&self) -> crate::config::Version {
        self.vms[0].version()
    }

    /// The page size of the VMs' scratchpads.
    pub fn scratchpad_pages(&self) -> proofkit_core::memory::PageKind {
        self.vms[0].scratchpad_pages()
    }

    /// True when the VMs run compiled programs.
    pub fn uses_jit(&self) -> bool {
        self.vms[0].uses_jit()
    }

    /// The RandomX hash of every input, in order.
    pub fn hash_many<I: AsRef<[u8]>>(&mut self, inputs: &[I]) -> Vec<[u8; 32]> {
        // The coroutines own what they use ('static): the inputs are copied once per call.
        let work = Rc::new(Work {
            inputs: inputs.iter().map(|i| i.as_ref().to_vec()).collect(),
            next: Cell::new(0),
            results: RefCell::new(vec![[0; 32]; inputs.len()]),
        });
        let lanes = self.vms.len().min(inputs.len());
        let mut running: Vec<VmCoroutine> = Vec::with_capacity(lanes);
        for _ in 0..lanes {
            let (vm, stack) = (self.vms.pop(), self.stacks.pop());
            let (mut vm, stack) = (vm.expect("one VM per lane"), stack.expect("one stack"));
            let work = work.clone();
            running.push(Coroutine::with_stack(stack, move |yielder, _: Reply| {
                CURRENT.set(yielder);
                loop {
                    let i = work.next.get();
                    let Some(input) = work.inputs.get(i) else {
                        break;
                    };
                    work.next.set(i + 1);
                    let hash = vm.hash(input);
                    work.results.borrow_mut()[i] = hash;
                }
                CURRENT.set(std::ptr::null());
                vm
            }));
        }
        let saved_mxcsr = mxcsr::read();
        let mut waiting: Vec<Option<Request>> = vec![None; lanes];
        let mut reply: Vec<Reply> = vec![[[0; 8]; 2]; lanes];
        let mut items = Vec::with_capacity(2 * lanes);
        let mut values = Vec::with_capacity(2 * lanes);
        self.last_call = Rounds::default();
        loop {
            for (k, co) in running.iter_mut().enumerate() {
                if co.done() {
                    continue;
                }
                let result = co.resume(reply[k]);
                // A VM suspends inside its program with its own rounding mode set (the JIT
                // reloads it on resuming); this thread's code runs with the caller's.
                mxcsr::write(saved_mxcsr);
                match result {
                    CoroutineResult::Yield(request) => waiting[k] = Some(request),
                    CoroutineResult::Return(vm) => self.vms.push(vm),
                }
            }
            items.clear();
            for request in waiting.iter().flatten() {
                items.extend_from_slice(&request.items[..request.count]);
            }
            if items.is_empty() {
                break;
            }
            self.last_call.rounds += 1;
            self.last_call.items += items.len() as u64;
            values.resize(items.len(), [0u64; 8]);
            self.cache.dataset_items_many(&items, &mut values);
            let mut next = 0;
            for (k, request) in waiting.iter_mut().enumerate() {
                if let Some(request) = request.take() {
                    reply[k][..request.count].copy_from_slice(&values[next..next + request.count]);
                    next += request.count;
                }
            }
        }
        for co in running {
            self.stacks.push(co.into_stack());
        }
        Rc::try_unwrap(work)
            .ok()
            .expect("the coroutines are gone")
            .results
            .into_inner()
    }
}
