//! `librandomx.so.0`: the C API of `randomx.h` (tevador/RandomX v2.0, `src/randomx.h` and
//! `src/randomx.cpp` are the specification of its semantics) on top of [`proofkit_randomx`], so
//! that C and C++ programs built against the reference header run unchanged with
//! `LD_LIBRARY_PATH` pointing here. Our own header is `include/randomx.h`.
//!
//! Same flag values, opaque structures and functions as the reference; NULL is returned where
//! the reference returns NULL (allocation failure, hugetlb pages unavailable under
//! `RANDOMX_FLAG_LARGE_PAGES`, an Argon2 implementation flag the CPU lacks, hardware AES asked
//! for on a CPU without it, a light VM without an initialised cache, a full-memory VM without a
//! dataset). Where the reference would crash or hit an `assert` (NULL pointers, item ranges
//! outside the dataset, an uninitialised cache), these functions do nothing instead; see
//! README.md for the full list of differences. No Rust panic crosses the boundary: every entry
//! point runs under [`std::panic::catch_unwind`] and returns its "nothing done" value on a panic.
//!
//! `RANDOMX_FLAG_JIT` (and `RANDOMX_FLAG_SECURE`, W^X pages) select the engine's x86-64 JIT for
//! VM programs; where it cannot run (another architecture, `PROOFKIT_FORCE_PORTABLE`, v2 without
//! AES-NI, no executable memory) the VM runs the portable interpreter instead. On a cache the
//! JIT flag is accepted and ignored. The `RANDOMX_FLAG_ARGON2_*` flags are checked against the
//! CPU and then fill the cache with the library's one Argon2 implementation.
#![allow(non_camel_case_types)]

mod fpenv;

use fpenv::FpGuard;
use proofkit_randomx::config::DATASET_ITEM_COUNT;
use proofkit_randomx::{
    Aes, Cache, Dataset, DatasetSource, PageKind, PagePolicy, Version, Vm, VmOptions,
};
use std::ffi::{c_int, c_ulong, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `randomx_flags` (a C enum: `int`-sized).
pub type randomx_flags = c_int;

pub const RANDOMX_FLAG_DEFAULT: randomx_flags = 0;
pub const RANDOMX_FLAG_LARGE_PAGES: randomx_flags = 1;
pub const RANDOMX_FLAG_HARD_AES: randomx_flags = 2;
pub const RANDOMX_FLAG_FULL_MEM: randomx_flags = 4;
pub const RANDOMX_FLAG_JIT: randomx_flags = 8;
pub const RANDOMX_FLAG_SECURE: randomx_flags = 16;
pub const RANDOMX_FLAG_ARGON2_SSSE3: randomx_flags = 32;
pub const RANDOMX_FLAG_ARGON2_AVX2: randomx_flags = 64;
pub const RANDOMX_FLAG_ARGON2: randomx_flags = 96;
pub const RANDOMX_FLAG_V2: randomx_flags = 128;

pub const RANDOMX_HASH_SIZE: usize = 32;
pub const RANDOMX_DATASET_ITEM_SIZE: usize = 64;

/// What a cache handle and the light VMs created from it share: the current [`Cache`]. A
/// re-key with a different key while VMs still hold the old `Arc<Cache>` builds a fresh cache
/// and swaps it in; each VM picks the new one up at its next hash (the reference's VMs read the
/// cache's memory directly, so they too see a re-key at once).
struct CacheShared {
    /// `None` only after a re-key whose allocation failed.
    slot: RwLock<Option<Arc<Cache>>>,
    pages: PagePolicy,
}

impl CacheShared {
    fn read(&self) -> RwLockReadGuard<'_, Option<Arc<Cache>>> {
        // A poisoned lock only means a panic happened elsewhere; the Option is always valid.
        self.slot.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Option<Arc<Cache>>> {
        self.slot.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The current cache if it has a key.
    fn current(&self) -> Option<Arc<Cache>> {
        self.read().as_ref().filter(|c| c.is_initialized()).cloned()
    }
}

/// Opaque `randomx_cache`.
pub struct randomx_cache {
    shared: Arc<CacheShared>,
}

/// Opaque `randomx_dataset`.
pub struct randomx_dataset {
    dataset: Arc<Dataset>,
}

/// Opaque `randomx_vm`.
pub struct randomx_vm {
    vm: Vm,
    /// The cache handle a light VM follows (None for full-memory VMs).
    cache: Option<Arc<CacheShared>>,
    full_mem: bool,
}

impl randomx_vm {
    /// Light VMs: switch to the cache handle's current cache if it was re-keyed.
    fn sync_cache(&mut self) {
        let Some(shared) = &self.cache else { return };
        let Some(current) = shared.current() else {
            return;
        };
        let same = matches!(self.vm.source(), DatasetSource::Light(c) if Arc::ptr_eq(c, &current));
        if !same {
            // Cannot fail: `current` is initialised.
            let _ = self.vm.set_source(DatasetSource::Light(current));
        }
    }
}

/// True when `machine` runs programs as JIT-compiled code (for tests; not exported by the C
/// library).
///
/// # Safety
/// `machine` is NULL or a live VM not in use by another thread.
pub unsafe fn vm_uses_jit(machine: *const randomx_vm) -> bool {
    // SAFETY: NULL or a live VM, by the caller's contract.
    unsafe { machine.as_ref() }.is_some_and(|m| m.vm.uses_jit())
}

/// Runs an entry point's body, turning a panic into `fallback`.
fn ffi<R>(fallback: R, body: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(fallback)
}

fn has(flags: randomx_flags, flag: randomx_flags) -> bool {
    flags & flag != 0
}

fn page_policy(flags: randomx_flags) -> PagePolicy {
    if has(flags, RANDOMX_FLAG_LARGE_PAGES) {
        PagePolicy::HugetlbFirst
    } else {
        PagePolicy::Transparent
    }
}

/// `RANDOMX_FLAG_LARGE_PAGES` means hugetlb pages or failure, as in the reference.
fn pages_ok(flags: randomx_flags, got: PageKind) -> bool {
    !has(flags, RANDOMX_FLAG_LARGE_PAGES) || got.is_hugetlb()
}

fn force_portable() -> bool {
    proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE")
}

/// `len` bytes at `p`, treating (NULL, 0) as the empty slice; None for (NULL, non-zero).
///
/// # Safety
/// A non-NULL `p` must be valid for reads of `len` bytes for `'a`.
unsafe fn bytes<'a>(p: *const c_void, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    if p.is_null() || len > isize::MAX as usize {
        return None;
    }
    // SAFETY: non-NULL and, by the caller's contract, valid for `len` bytes.
    Some(unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}

/// Writes a 32-byte result to a caller's buffer.
///
/// # Safety
/// `out` must be non-NULL and valid for writes of 32 bytes.
unsafe fn write_hash(out: *mut c_void, h: &[u8; 32]) {
    // SAFETY: the caller guarantees 32 writable bytes at `out`; `h` is a distinct local array.
    unsafe { ptr::copy_nonoverlapping(h.as_ptr(), out as *mut u8, RANDOMX_HASH_SIZE) };
}

/// The recommended flags for this machine, computed as the reference does: `JIT` on the
/// architectures where the reference has a JIT (proofkit's runs on x86-64; elsewhere the flag
/// falls back to the interpreter),
/// `HARD_AES` with AES-NI, `ARGON2_AVX2`/`ARGON2_SSSE3` with those instruction sets. Under
/// `PROOFKIT_FORCE_PORTABLE` only the JIT flag remains.
#[no_mangle]
pub extern "C" fn randomx_get_flags() -> randomx_flags {
    ffi(RANDOMX_FLAG_DEFAULT, || {
        let mut flags = if cfg!(any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "riscv64"
        )) {
            RANDOMX_FLAG_JIT
        } else {
            RANDOMX_FLAG_DEFAULT
        };
        if force_portable() {
            return flags;
        }
        let cpu = proofkit_core::cpu::features();
        if Aes::hardware().is_some() {
            flags |= RANDOMX_FLAG_HARD_AES;
        }
        if cpu.avx2 {
            flags |= RANDOMX_FLAG_ARGON2_AVX2;
        }
        if cpu.ssse3 {
            flags |= RANDOMX_FLAG_ARGON2_SSSE3;
        }
        flags
    })
}

/// Allocates a cache (256 MiB). NULL on allocation failure, on `LARGE_PAGES` without hugetlb
/// pages, and on an Argon2 flag naming an instruction set the CPU lacks (`ARGON2_AVX2` wins
/// when both are set, as in the reference).
#[no_mangle]
pub extern "C" fn randomx_alloc_cache(flags: randomx_flags) -> *mut randomx_cache {
    ffi(ptr::null_mut(), || {
        let cpu = proofkit_core::cpu::features();
        if has(flags, RANDOMX_FLAG_ARGON2_AVX2) {
            if !cpu.avx2 {
                return ptr::null_mut();
            }
        } else if has(flags, RANDOMX_FLAG_ARGON2_SSSE3) && !cpu.ssse3 {
            return ptr::null_mut();
        }
        let pages = page_policy(flags);
        let cache = match Cache::alloc(pages) {
            Ok(c) if pages_ok(flags, c.page_kind()) => c,
            _ => return ptr::null_mut(),
        };
        let shared = Arc::new(CacheShared {
            slot: RwLock::new(Some(Arc::new(cache))),
            pages,
        });
        Box::into_raw(Box::new(randomx_cache { shared }))
    })
}

/// Keys the cache; a no-op when it already holds `key`. Does nothing on a NULL cache or a NULL
/// key with a non-zero size.
///
/// # Safety
/// `cache` is NULL or from [`randomx_alloc_cache`] and not released; `key` is valid for
/// `key_size` bytes; no other thread uses this cache handle during the call.
#[no_mangle]
pub unsafe extern "C" fn randomx_init_cache(
    cache: *mut randomx_cache,
    key: *const c_void,
    key_size: usize,
) {
    ffi((), || {
        // SAFETY: NULL or a live handle, by the caller's contract.
        let Some(cache) = (unsafe { cache.as_ref() }) else {
            return;
        };
        // SAFETY: `key` is valid for `key_size` bytes by the caller's contract.
        let Some(key) = (unsafe { bytes(key, key_size) }) else {
            return;
        };
        let shared = &cache.shared;
        {
            let mut slot = shared.write();
            if let Some(current) = slot.as_mut() {
                if current.is_initialized() && current.key() == key {
                    return;
                }
                if let Some(exclusive) = Arc::get_mut(current) {
                    // No VM holds this cache: re-key it in place. On an error the cache is left
                    // without a key (VM creation then returns NULL).
                    let _ = exclusive.reinit(key);
                    return;
                }
            }
        }
        // VMs still hold the current cache (or a previous re-key failed): build a new one
        // without holding the lock, so that VMs hashing meanwhile are not blocked, then swap it
        // in; the VMs switch to it at their next hash.
        let fresh = Cache::new(key, shared.pages).ok().map(Arc::new);
        *shared.write() = fresh;
    })
}

/// The cache's Argon2 memory (`RANDOMX_ARGON_MEMORY` KiB), or NULL for a NULL cache.
///
/// # Safety
/// `cache` is NULL or a live handle from [`randomx_alloc_cache`].
#[no_mangle]
pub unsafe extern "C" fn randomx_get_cache_memory(cache: *mut randomx_cache) -> *mut c_void {
    ffi(ptr::null_mut(), || {
        // SAFETY: NULL or a live handle, by the caller's contract.
        let Some(cache) = (unsafe { cache.as_ref() }) else {
            return ptr::null_mut();
        };
        let slot = cache.shared.read();
        slot.as_ref()
            .map_or(ptr::null_mut(), |c| c.memory_ptr() as *mut c_void)
    })
}

/// Releases a cache handle. VMs created from it keep their cache alive until destroyed.
///
/// # Safety
/// `cache` is NULL or a live handle from [`randomx_alloc_cache`], released only once.
#[no_mangle]
pub unsafe extern "C" fn randomx_release_cache(cache: *mut randomx_cache) {
    ffi((), || {
        if !cache.is_null() {
            // SAFETY: a pointer from Box::into_raw in randomx_alloc_cache, released once.
            drop(unsafe { Box::from_raw(cache) });
        }
    })
}

/// Allocates the dataset (2080 MiB, zero-filled, pages touched only when written). NULL on
/// allocation failure or on `LARGE_PAGES` without hugetlb pages; other flags are ignored.
#[no_mangle]
pub extern "C" fn randomx_alloc_dataset(flags: randomx_flags) -> *mut randomx_dataset {
    ffi(ptr::null_mut(), || {
        match Dataset::alloc(page_policy(flags)) {
            Ok(d) if pages_ok(flags, d.page_kind()) => Box::into_raw(Box::new(randomx_dataset {
                dataset: Arc::new(d),
            })),
            _ => ptr::null_mut(),
        }
    })
}

/// Items in the dataset: 34,078,719.
#[no_mangle]
pub extern "C" fn randomx_dataset_item_count() -> c_ulong {
    DATASET_ITEM_COUNT as c_ulong
}

/// Computes items `start_item .. start_item + item_count` from `cache`. Several threads may
/// call this at once on disjoint ranges of one dataset. Does nothing on NULL pointers, an
/// unkeyed cache or a range outside the dataset (the reference asserts).
///
/// # Safety
/// `dataset` and `cache` are NULL or live handles; no other thread reads or writes this item
/// range meanwhile (no VM hashes with this dataset until initialisation is complete).
#[no_mangle]
pub unsafe extern "C" fn randomx_init_dataset(
    dataset: *mut randomx_dataset,
    cache: *mut randomx_cache,
    start_item: c_ulong,
    item_count: c_ulong,
) {
    ffi((), || {
        // SAFETY: NULL or live handles, by the caller's contract.
        let (Some(dataset), Some(cache)) = (unsafe { dataset.as_ref() }, unsafe { cache.as_ref() })
        else {
            return;
        };
        let Some(keyed) = cache.shared.current() else {
            return;
        };
        // c_ulong is 32 bits on some targets: widen portably.
        #[allow(clippy::useless_conversion)]
        let (start, count) = (u64::from(start_item), u64::from(item_count));
        // SAFETY: randomx.h makes callers initialise non-overlapping item sequences and not
        // hash with the dataset before it is complete, which is init_range_shared's contract.
        // Range errors come back as Err and leave the dataset untouched.
        let _ = unsafe { dataset.dataset.init_range_shared(&keyed, start, count) };
    })
}

/// The dataset memory (`randomx_dataset_item_count() * 64` bytes), or NULL for NULL.
///
/// # Safety
/// `dataset` is NULL or a live handle from [`randomx_alloc_dataset`].
#[no_mangle]
pub unsafe extern "C" fn randomx_get_dataset_memory(dataset: *mut randomx_dataset) -> *mut c_void {
    ffi(ptr::null_mut(), || {
        // SAFETY: NULL or a live handle, by the caller's contract.
        match unsafe { dataset.as_ref() } {
            Some(d) => d.dataset.memory_ptr() as *mut c_void,
            None => ptr::null_mut(),
        }
    })
}

/// Releases a dataset handle. VMs using it keep it alive until destroyed.
///
/// # Safety
/// `dataset` is NULL or a live handle from [`randomx_alloc_dataset`], released only once.
#[no_mangle]
pub unsafe extern "C" fn randomx_release_dataset(dataset: *mut randomx_dataset) {
    ffi((), || {
        if !dataset.is_null() {
            // SAFETY: a pointer from Box::into_raw in randomx_alloc_dataset, released once.
            drop(unsafe { Box::from_raw(dataset) });
        }
    })
}

/// Creates a VM. NULL when: the scratchpad cannot be allocated (or has no hugetlb pages under
/// `LARGE_PAGES`); `HARD_AES` is set and the CPU has no AES-NI; `FULL_MEM` is set and `dataset`
/// is NULL; `FULL_MEM` is clear and `cache` is NULL or has no key. `V2` selects RandomX v2;
/// without `HARD_AES` the VM uses software AES, as the reference does.
///
/// # Safety
/// `cache` and `dataset` are NULL or live handles.
#[no_mangle]
pub unsafe extern "C" fn randomx_create_vm(
    flags: randomx_flags,
    cache: *mut randomx_cache,
    dataset: *mut randomx_dataset,
) -> *mut randomx_vm {
    ffi(ptr::null_mut(), || {
        let aes = if !has(flags, RANDOMX_FLAG_HARD_AES) || force_portable() {
            Aes::Software
        } else {
            match Aes::hardware() {
                Some(a) => a,
                None => return ptr::null_mut(),
            }
        };
        let version = if has(flags, RANDOMX_FLAG_V2) {
            Version::V2
        } else {
            Version::V1
        };
        let full_mem = has(flags, RANDOMX_FLAG_FULL_MEM);
        let (source, follow) = if full_mem {
            // SAFETY: NULL or a live handle, by the caller's contract.
            let Some(d) = (unsafe { dataset.as_ref() }) else {
                return ptr::null_mut();
            };
            (DatasetSource::Fast(d.dataset.clone()), None)
        } else {
            // SAFETY: NULL or a live handle, by the caller's contract.
            let Some(c) = (unsafe { cache.as_ref() }) else {
                return ptr::null_mut();
            };
            let Some(keyed) = c.shared.current() else {
                return ptr::null_mut();
            };
            (DatasetSource::Light(keyed), Some(c.shared.clone()))
        };
        let opts = VmOptions {
            version,
            aes,
            pages: page_policy(flags),
            jit: has(flags, RANDOMX_FLAG_JIT),
            secure: has(flags, RANDOMX_FLAG_SECURE),
            ..Default::default()
        };
        match Vm::new(source, opts) {
            Ok(vm) if pages_ok(flags, vm.scratchpad_pages()) => {
                Box::into_raw(Box::new(randomx_vm {
                    vm,
                    cache: follow,
                    full_mem,
                }))
            }
            _ => ptr::null_mut(),
        }
    })
}

/// Points a light VM at `cache` (a no-op when it already uses that cache with that key, and
/// for full-memory VMs, as in the reference). Does nothing on NULL or an unkeyed cache.
///
/// # Safety
/// `machine` and `cache` are NULL or live handles; `machine` is not in use by another thread.
#[no_mangle]
pub unsafe extern "C" fn randomx_vm_set_cache(machine: *mut randomx_vm, cache: *mut randomx_cache) {
    ffi((), || {
        // SAFETY: NULL or live handles; the VM is used by this thread only.
        let (Some(m), Some(c)) = (unsafe { machine.as_mut() }, unsafe { cache.as_ref() }) else {
            return;
        };
        if m.full_mem || c.shared.current().is_none() {
            return;
        }
        m.cache = Some(c.shared.clone());
        m.sync_cache();
    })
}

/// Points a full-memory VM at `dataset` (a no-op for light VMs, as in the reference).
///
/// # Safety
/// `machine` and `dataset` are NULL or live handles; `machine` is not in use by another thread.
#[no_mangle]
pub unsafe extern "C" fn randomx_vm_set_dataset(
    machine: *mut randomx_vm,
    dataset: *mut randomx_dataset,
) {
    ffi((), || {
        // SAFETY: NULL or live handles; the VM is used by this thread only.
        let (Some(m), Some(d)) = (unsafe { machine.as_mut() }, unsafe { dataset.as_ref() }) else {
            return;
        };
        if m.full_mem {
            // Cannot fail for a Fast source.
            let _ = m.vm.set_source(DatasetSource::Fast(d.dataset.clone()));
        }
    })
}

/// Destroys a VM.
///
/// # Safety
/// `machine` is NULL or a live handle from [`randomx_create_vm`], destroyed only once.
#[no_mangle]
pub unsafe extern "C" fn randomx_destroy_vm(machine: *mut randomx_vm) {
    ffi((), || {
        if !machine.is_null() {
            // SAFETY: a pointer from Box::into_raw in randomx_create_vm, destroyed once.
            drop(unsafe { Box::from_raw(machine) });
        }
    })
}

/// Hashes `input` into `output` (32 bytes). Does nothing on a NULL VM or output, or a NULL input
/// with a non-zero size. The caller's floating-point environment is left unchanged.
///
/// # Safety
/// `machine` is NULL or a live VM used by this thread only; `input` is valid for `input_size`
/// bytes; `output` is NULL or valid for 32 bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn randomx_calculate_hash(
    machine: *mut randomx_vm,
    input: *const c_void,
    input_size: usize,
    output: *mut c_void,
) {
    ffi((), || {
        // SAFETY: NULL or a live VM, used by this thread only.
        let Some(m) = (unsafe { machine.as_mut() }) else {
            return;
        };
        // SAFETY: `input` is valid for `input_size` bytes by the caller's contract.
        let Some(input) = (unsafe { bytes(input, input_size) }) else {
            return;
        };
        if output.is_null() {
            return;
        }
        let _fp = FpGuard::enter();
        m.sync_cache();
        let h = m.vm.hash(input);
        // SAFETY: non-NULL and, by the caller's contract, 32 writable bytes.
        unsafe { write_hash(output, &h) };
    })
}

/// Batch API: starts hashing `input`; `randomx_calculate_hash_next`/`_last` return its hash.
///
/// # Safety
/// As for [`randomx_calculate_hash`].
#[no_mangle]
pub unsafe extern "C" fn randomx_calculate_hash_first(
    machine: *mut randomx_vm,
    input: *const c_void,
    input_size: usize,
) {
    ffi((), || {
        // SAFETY: NULL or a live VM, used by this thread only.
        let Some(m) = (unsafe { machine.as_mut() }) else {
            return;
        };
        // SAFETY: `input` is valid for `input_size` bytes by the caller's contract.
        let Some(input) = (unsafe { bytes(input, input_size) }) else {
            return;
        };
        let _fp = FpGuard::enter();
        m.sync_cache();
        m.vm.hash_first(input);
    })
}

/// Batch API: writes the hash of the pending input and starts hashing `next_input`. Without a
/// pending input (no `_first` since the last `_last`) it writes 32 zero bytes and starts
/// hashing `next_input`.
///
/// # Safety
/// As for [`randomx_calculate_hash`].
#[no_mangle]
pub unsafe extern "C" fn randomx_calculate_hash_next(
    machine: *mut randomx_vm,
    next_input: *const c_void,
    next_input_size: usize,
    output: *mut c_void,
) {
    ffi((), || {
        // SAFETY: NULL or a live VM, used by this thread only.
        let Some(m) = (unsafe { machine.as_mut() }) else {
            return;
        };
        // SAFETY: `next_input` is valid for `next_input_size` bytes by the caller's contract.
        let Some(next) = (unsafe { bytes(next_input, next_input_size) }) else {
            return;
        };
        if output.is_null() {
            return;
        }
        let _fp = FpGuard::enter();
        m.sync_cache();
        let h = match m.vm.hash_next(next) {
            Ok(h) => h,
            Err(_) => {
                m.vm.hash_first(next);
                [0; 32]
            }
        };
        // SAFETY: non-NULL and, by the caller's contract, 32 writable bytes.
        unsafe { write_hash(output, &h) };
    })
}

/// Batch API: writes the hash of the pending input (32 zero bytes when none is pending).
///
/// # Safety
/// As for [`randomx_calculate_hash`].
#[no_mangle]
pub unsafe extern "C" fn randomx_calculate_hash_last(
    machine: *mut randomx_vm,
    output: *mut c_void,
) {
    ffi((), || {
        // SAFETY: NULL or a live VM, used by this thread only.
        let Some(m) = (unsafe { machine.as_mut() }) else {
            return;
        };
        if output.is_null() {
            return;
        }
        let _fp = FpGuard::enter();
        m.sync_cache();
        let h = m.vm.hash_last().unwrap_or([0; 32]);
        // SAFETY: non-NULL and, by the caller's contract, 32 writable bytes.
        unsafe { write_hash(output, &h) };
    })
}

/// `com_out = Blake2b-256(input || hash_in)`. Does nothing on NULL `hash_in`/`com_out` or a NULL
/// input with a non-zero size.
///
/// # Safety
/// `input` is valid for `input_size` bytes; `hash_in` is NULL or valid for 32 bytes of reads;
/// `com_out` is NULL or valid for 32 bytes of writes.
#[no_mangle]
pub unsafe extern "C" fn randomx_calculate_commitment(
    input: *const c_void,
    input_size: usize,
    hash_in: *const c_void,
    com_out: *mut c_void,
) {
    ffi((), || {
        // SAFETY: valid for `input_size` bytes by the caller's contract.
        let Some(input) = (unsafe { bytes(input, input_size) }) else {
            return;
        };
        if hash_in.is_null() || com_out.is_null() {
            return;
        }
        let mut hash = [0u8; 32];
        // SAFETY: non-NULL and, by the caller's contract, 32 readable bytes; `hash` is a local.
        unsafe { ptr::copy_nonoverlapping(hash_in as *const u8, hash.as_mut_ptr(), 32) };
        let c = proofkit_randomx::commitment(input, &hash);
        // SAFETY: non-NULL and, by the caller's contract, 32 writable bytes.
        unsafe { write_hash(com_out, &c) };
    })
}
