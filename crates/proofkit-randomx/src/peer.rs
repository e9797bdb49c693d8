//! The yardstick: the system's reference `librandomx` (Debian `librandomx0`), loaded at run time
//! with `dlopen`. Used only by benchmarks and differential tests, never to compute proofkit's
//! own results.
#![allow(unsafe_code)]

use libloading::{Library, Symbol};
use std::ffi::c_void;

pub const FLAG_DEFAULT: u32 = 0;
pub const FLAG_LARGE_PAGES: u32 = 1;
pub const FLAG_HARD_AES: u32 = 2;
pub const FLAG_FULL_MEM: u32 = 4;
pub const FLAG_JIT: u32 = 8;
pub const FLAG_V2: u32 = 128;

/// Where the Debian package installs the library; `PROOFKIT_PEER_LIBRANDOMX` overrides it.
pub const DEFAULT_PATH: &str = "/usr/lib/x86_64-linux-gnu/librandomx.so.0";

type GetFlags = unsafe extern "C" fn() -> u32;
type AllocCache = unsafe extern "C" fn(u32) -> *mut c_void;
type InitCache = unsafe extern "C" fn(*mut c_void, *const c_void, usize);
type Release = unsafe extern "C" fn(*mut c_void);
type AllocDataset = unsafe extern "C" fn(u32) -> *mut c_void;
type InitDataset =
    unsafe extern "C" fn(*mut c_void, *mut c_void, std::ffi::c_ulong, std::ffi::c_ulong);
type ItemCount = unsafe extern "C" fn() -> std::ffi::c_ulong;
type GetMemory = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type CreateVm = unsafe extern "C" fn(u32, *mut c_void, *mut c_void) -> *mut c_void;
type CalcHash = unsafe extern "C" fn(*mut c_void, *const c_void, usize, *mut c_void);

/// A loaded reference library.
pub struct LibRandomx {
    lib: Library,
    pub path: String,
}

/// An initialised cache of the reference library.
pub struct PeerCache<'a> {
    lib: &'a LibRandomx,
    ptr: *mut c_void,
}

/// An initialised dataset of the reference library.
pub struct PeerDataset<'a> {
    lib: &'a LibRandomx,
    ptr: *mut c_void,
}

/// A VM of the reference library.
pub struct PeerVm<'a> {
    lib: &'a LibRandomx,
    ptr: *mut c_void,
}

// SAFETY: the reference library's caches and datasets are read-only after initialisation and
// documented as shareable between threads; VMs are used by one thread at a time (&mut).
unsafe impl Send for PeerCache<'_> {}
// SAFETY: see above.
unsafe impl Sync for PeerCache<'_> {}
// SAFETY: see above.
unsafe impl Send for PeerDataset<'_> {}
// SAFETY: see above.
unsafe impl Sync for PeerDataset<'_> {}
// SAFETY: see above.
unsafe impl Send for PeerVm<'_> {}

impl LibRandomx {
    /// Loads the library from `PROOFKIT_PEER_LIBRANDOMX` or [`DEFAULT_PATH`].
    pub fn load() -> Result<Self, String> {
        let path =
            std::env::var("PROOFKIT_PEER_LIBRANDOMX").unwrap_or_else(|_| DEFAULT_PATH.into());
        // SAFETY: loading a shared library runs its initialisers; librandomx's are benign C++
        // static constructors.
        let lib = unsafe { Library::new(&path) }.map_err(|e| format!("cannot load {path}: {e}"))?;
        Ok(LibRandomx { lib, path })
    }

    fn sym<T>(&self, name: &[u8]) -> Symbol<'_, T> {
        // SAFETY: every symbol is looked up with the signature of its randomx.h declaration.
        unsafe { self.lib.get(name) }
            .unwrap_or_else(|e| panic!("librandomx lacks {}: {e}", String::from_utf8_lossy(name)))
    }

    /// `randomx_get_flags()`: the flags the library recommends for this CPU.
    pub fn recommended_flags(&self) -> u32 {
        // SAFETY: no arguments, returns a value.
        unsafe { self.sym::<GetFlags>(b"randomx_get_flags\0")() }
    }

    pub fn cache(&self, flags: u32, key: &[u8]) -> Option<PeerCache<'_>> {
        // SAFETY: alloc returns NULL on failure (checked); init reads key.len() bytes of key.
        unsafe {
            let p = self.sym::<AllocCache>(b"randomx_alloc_cache\0")(flags);
            if p.is_null() {
                return None;
            }
            self.sym::<InitCache>(b"randomx_init_cache\0")(
                p,
                key.as_ptr() as *const c_void,
                key.len(),
            );
            Some(PeerCache { lib: self, ptr: p })
        }
    }

    pub fn dataset_item_count(&self) -> u64 {
        // SAFETY: no arguments.
        unsafe { self.sym::<ItemCount>(b"randomx_dataset_item_count\0")() }
    }

    /// Allocates a dataset and initialises items `start..start+count` on `threads` threads.
    pub fn dataset(
        &self,
        flags: u32,
        cache: &PeerCache<'_>,
        threads: usize,
    ) -> Option<PeerDataset<'_>> {
        let total = self.dataset_item_count();
        self.dataset_range(flags, cache, 0, total, threads)
    }

    pub fn dataset_range(
        &self,
        flags: u32,
        cache: &PeerCache<'_>,
        start: u64,
        count: u64,
        threads: usize,
    ) -> Option<PeerDataset<'_>> {
        // SAFETY: alloc checked for NULL; init_dataset is documented as callable from several
        // threads on disjoint item ranges of one dataset.
        unsafe {
            let p = self.sym::<AllocDataset>(b"randomx_alloc_dataset\0")(flags);
            if p.is_null() {
                return None;
            }
            let init = self.sym::<InitDataset>(b"randomx_init_dataset\0");
            let threads = threads.max(1) as u64;
            let per = count / threads;
            let (pd, pc) = (p as usize, cache.ptr as usize);
            std::thread::scope(|s| {
                for t in 0..threads {
                    let first = start + t * per;
                    let n = if t + 1 == threads {
                        count - t * per
                    } else {
                        per
                    };
                    let init = &init;
                    s.spawn(move || init(pd as *mut c_void, pc as *mut c_void, first as _, n as _));
                }
            });
            Some(PeerDataset { lib: self, ptr: p })
        }
    }

    pub fn vm<'a>(
        &'a self,
        flags: u32,
        cache: Option<&PeerCache<'a>>,
        dataset: Option<&PeerDataset<'a>>,
    ) -> Option<PeerVm<'a>> {
        // SAFETY: create_vm returns NULL on invalid combinations (checked).
        unsafe {
            let p = self.sym::<CreateVm>(b"randomx_create_vm\0")(
                flags,
                cache.map_or(std::ptr::null_mut(), |c| c.ptr),
                dataset.map_or(std::ptr::null_mut(), |d| d.ptr),
            );
            (!p.is_null()).then_some(PeerVm { lib: self, ptr: p })
        }
    }
}

type CalcHashFirst = unsafe extern "C" fn(*mut c_void, *const c_void, usize);
type CalcHashLast = unsafe extern "C" fn(*mut c_void, *mut c_void);
type Blake2b =
    unsafe extern "C" fn(*mut c_void, usize, *const c_void, usize, *const c_void, usize) -> i32;
type Blake2bLong = unsafe extern "C" fn(*mut c_void, usize, *const c_void, usize) -> i32;

impl LibRandomx {
    /// The library's internal Blake2b (`randomx_blake2b`), where exported.
    pub fn blake2b(&self, out: &mut [u8], input: &[u8]) -> Option<()> {
        // SAFETY: the exported symbol has the blake2b(out, outlen, in, inlen, key, keylen)
        // signature of the reference's blake2.h; out/in are valid for their lengths.
        unsafe {
            let f: Symbol<'_, Blake2b> = self.lib.get(b"randomx_blake2b\0").ok()?;
            (f(
                out.as_mut_ptr() as *mut c_void,
                out.len(),
                input.as_ptr() as *const c_void,
                input.len(),
                std::ptr::null(),
                0,
            ) == 0)
                .then_some(())
        }
    }

    /// The library's Argon2 H' (`randomx_blake2b_long`), where exported.
    pub fn blake2b_long(&self, out: &mut [u8], input: &[u8]) -> Option<()> {
        // SAFETY: blake2b_long(out, outlen, in, inlen) as in the reference's blake2.h.
        unsafe {
            let f: Symbol<'_, Blake2bLong> = self.lib.get(b"randomx_blake2b_long\0").ok()?;
            (f(
                out.as_mut_ptr() as *mut c_void,
                out.len(),
                input.as_ptr() as *const c_void,
                input.len(),
            ) == 0)
                .then_some(())
        }
    }
}

impl PeerCache<'_> {
    /// `randomx_init_cache` again on the same allocation (a key change, as nodes do it).
    pub fn reinit(&mut self, key: &[u8]) {
        // SAFETY: ptr is an allocated cache; init reads key.len() bytes.
        unsafe {
            self.lib.sym::<InitCache>(b"randomx_init_cache\0")(
                self.ptr,
                key.as_ptr() as *const c_void,
                key.len(),
            )
        }
    }

    /// Word `i` of the Argon2 memory, where the library exports `randomx_get_cache_memory`
    /// (added in 1.2; Debian's 1.1.10 lacks it).
    pub fn word(&self, i: usize) -> Option<u64> {
        // SAFETY: the symbol has the randomx.h signature; the memory is the 256 MiB buffer and
        // callers pass i < 32 Mi.
        unsafe {
            let get: Symbol<'_, GetMemory> =
                self.lib.lib.get(b"randomx_get_cache_memory\0").ok()?;
            let m = get(self.ptr) as *const u64;
            Some(m.add(i).read_unaligned())
        }
    }
}

impl PeerDataset<'_> {
    /// The dataset's memory (`randomx_get_dataset_memory`), for experiments that run other code
    /// on the same bytes.
    pub fn memory_ptr(&self) -> *const u8 {
        // SAFETY: the symbol has the randomx.h signature and the dataset is alive.
        unsafe { self.lib.sym::<GetMemory>(b"randomx_get_dataset_memory\0")(self.ptr) as *const u8 }
    }

    /// Item `i` of an initialised range.
    pub fn item(&self, i: u64) -> [u64; 8] {
        // SAFETY: the dataset memory holds dataset_item_count() items; callers pass an
        // initialised index.
        unsafe {
            let m = self.memory_ptr() as *const u64;
            std::array::from_fn(|k| m.add(i as usize * 8 + k).read_unaligned())
        }
    }
}

impl PeerVm<'_> {
    /// `randomx_calculate_hash_first`: starts hashing `input` (batch API).
    pub fn hash_first(&mut self, input: &[u8]) {
        // SAFETY: input is input.len() readable bytes.
        unsafe {
            self.lib
                .sym::<CalcHashFirst>(b"randomx_calculate_hash_first\0")(
                self.ptr,
                input.as_ptr() as *const c_void,
                input.len(),
            )
        };
    }

    /// `randomx_calculate_hash_next`: finishes the pending hash and starts `next_input`.
    pub fn hash_next(&mut self, next_input: &[u8]) -> [u8; 32] {
        let mut out = [0u8; 32];
        // SAFETY: next_input is next_input.len() readable bytes, out is 32 writable bytes.
        unsafe {
            self.lib.sym::<CalcHash>(b"randomx_calculate_hash_next\0")(
                self.ptr,
                next_input.as_ptr() as *const c_void,
                next_input.len(),
                out.as_mut_ptr() as *mut c_void,
            )
        };
        out
    }

    /// `randomx_calculate_hash_last`: finishes the pending hash.
    pub fn hash_last(&mut self) -> [u8; 32] {
        let mut out = [0u8; 32];
        // SAFETY: out is 32 writable bytes.
        unsafe {
            self.lib
                .sym::<CalcHashLast>(b"randomx_calculate_hash_last\0")(
                self.ptr,
                out.as_mut_ptr() as *mut c_void,
            )
        };
        out
    }

    pub fn hash(&mut self, input: &[u8]) -> [u8; 32] {
        let mut out = [0u8; 32];
        // SAFETY: input is input.len() readable bytes, out is 32 writable bytes.
        unsafe {
            self.lib.sym::<CalcHash>(b"randomx_calculate_hash\0")(
                self.ptr,
                input.as_ptr() as *const c_void,
                input.len(),
                out.as_mut_ptr() as *mut c_void,
            )
        };
        out
    }
}

impl Drop for PeerVm<'_> {
    fn drop(&mut self) {
        // SAFETY: ptr came from randomx_create_vm and is released once.
        unsafe { self.lib.sym::<Release>(b"randomx_destroy_vm\0")(self.ptr) }
    }
}

impl Drop for PeerDataset<'_> {
    fn drop(&mut self) {
        // SAFETY: ptr came from randomx_alloc_dataset and is released once.
        unsafe { self.lib.sym::<Release>(b"randomx_release_dataset\0")(self.ptr) }
    }
}

impl Drop for PeerCache<'_> {
    fn drop(&mut self) {
        // SAFETY: ptr came from randomx_alloc_cache and is released once.
        unsafe { self.lib.sym::<Release>(b"randomx_release_cache\0")(self.ptr) }
    }
}
