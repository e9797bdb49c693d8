//! The process's heap allocator, chosen per command: mimalloc for `state` and `bench`, the
//! system's (glibc malloc) for the rest; `PROOFKIT_ALLOCATOR=system|mimalloc` overrides.
//!
//! Why per command: the state engine allocates trie nodes, paths and store records by the
//! million, and mimalloc runs `proofkit state bench` on ~1.19x less CPU than glibc (session
//! 10, 2,000 blocks in memory side by side; crates/proofkit-state/README.md). But mimalloc's
//! arenas add 1-16 MB of resident memory, and Equihash `em`'s whole point is a peak RSS under
//! 60 MiB (61,120 kB on glibc, 77,208 kB on mimalloc). The `bench` command measures Equihash
//! in child processes (`equihash bench-child`, on glibc), so it can take mimalloc for state.
//!
//! mimalloc runs with purging off (`mi_option_purge_delay` = -1, unless `MIMALLOC_PURGE_DELAY`
//! says otherwise): by default it returns freed memory to the OS after a delay and the next
//! allocation there faults in fresh huge pages, zeroed by the kernel (7% of a state run's
//! samples in `clear_page_erms`); kept, the state bench took 8% less CPU (36.3 / 36.6
//! against 39.6 / 39.7 s over 1,500 blocks) for 1-3% more peak RSS.
//!
//! The choice is made by an ELF constructor that reads `argv` and `envp` before `main` (and
//! before anything allocates) and is never changed afterwards, so every block is freed by the
//! allocator that gave it. A constructor that finds something already allocated keeps the
//! system allocator. Targets without glibc's constructor arguments keep it always.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set (once, before the first allocation) when mimalloc serves the process.
static MIMALLOC: AtomicBool = AtomicBool::new(false);
/// Set by the first allocation: the choice can no longer change.
static ALLOCATED: AtomicBool = AtomicBool::new(false);

/// The environment variable that overrides the choice.
pub const OVERRIDE: &str = "PROOFKIT_ALLOCATOR";

/// The allocator serving this process.
pub fn name() -> &'static str {
    if MIMALLOC.load(Ordering::Relaxed) {
        "mimalloc"
    } else {
        "system"
    }
}

/// The allocator a command and an override value select; `Err` for an unknown override.
pub fn choice(command: Option<&[u8]>, over: Option<&[u8]>) -> Result<bool, ()> {
    match over {
        Some(b"mimalloc") => Ok(true),
        Some(b"system") => Ok(false),
        Some(_) => Err(()),
        None => Ok(matches!(command, Some(b"state" | b"bench"))),
    }
}

/// The system allocator, for a new block: from now on the choice cannot change.
#[inline(always)]
fn system() -> System {
    if !ALLOCATED.load(Ordering::Relaxed) {
        ALLOCATED.store(true, Ordering::Relaxed);
    }
    System
}

/// The `#[global_allocator]`: mimalloc or the system's, as `choose` decided.
pub struct PerCommand;

// SAFETY: each method forwards to one allocator, the same for the whole process (`MIMALLOC`
// is written only by `choose`, before the first allocation, see `ALLOCATED`), so a block is
// always resized and freed by the allocator that made it; both allocators uphold
// `GlobalAlloc`'s contract for the layouts they are given (mimalloc's plain `mi_malloc` for
// those `word_aligned` accepts, its aligned calls for the rest; `mi_free` frees either).
// `alloc_zeroed` and `realloc` forward too rather than take the trait's defaults (allocate,
// then fill or copy): calloc's fresh pages stay untouched, which Equihash `em`'s zeroed
// tables count on for its resident set.
unsafe impl GlobalAlloc for PerCommand {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if MIMALLOC.load(Ordering::Relaxed) {
            mi_alloc(layout, false)
        } else {
            system().alloc(layout)
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if MIMALLOC.load(Ordering::Relaxed) {
            mi_alloc(layout, true)
        } else {
            system().alloc_zeroed(layout)
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if MIMALLOC.load(Ordering::Relaxed) {
            mimalloc::MiMalloc.dealloc(ptr, layout)
        } else {
            System.dealloc(ptr, layout)
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if MIMALLOC.load(Ordering::Relaxed) {
            // For a word's alignment `mi_realloc_aligned` is plain `mi_realloc` already.
            mimalloc::MiMalloc.realloc(ptr, layout, new_size)
        } else {
            System.realloc(ptr, layout, new_size)
        }
    }
}

/// Whether plain `mi_malloc` serves `layout`: an alignment of at most a word (every mimalloc
/// block, the smallest being one word, starts on a word boundary) and not above the size.
///
/// Why not the `mimalloc` crate's `alloc` for these: it always calls `mi_malloc_aligned`,
/// whose fast path pops the size class's current page only while that page has a free block
/// at the alignment. Once the page runs dry, a size that is not a power of two (a trie
/// branch's 640-byte children) is not "naturally aligned" to mimalloc, so the request is
/// over-allocated (size + alignment - 1) from the next size class up instead of refilling
/// its own class's pages: the state bench's block thread spent 6.3% of its samples in
/// `mi_theap_malloc_zero_aligned_at_overalloc`. `mi_malloc` refills the class's pages
/// (collecting the blocks other threads freed), as glibc's `malloc` would.
#[inline(always)]
fn word_aligned(layout: Layout) -> bool {
    layout.align() <= std::mem::size_of::<usize>() && layout.align() <= layout.size()
}

/// A block from mimalloc for `layout` (see [`word_aligned`]), zeroed when `zero` is set.
///
/// # Safety
/// As `GlobalAlloc::alloc`.
#[inline(always)]
unsafe fn mi_alloc(layout: Layout, zero: bool) -> *mut u8 {
    match (word_aligned(layout), zero) {
        (true, false) => libmimalloc_sys::mi_malloc(layout.size()).cast(),
        (true, true) => libmimalloc_sys::mi_zalloc(layout.size()).cast(),
        (false, false) => mimalloc::MiMalloc.alloc(layout),
        (false, true) => mimalloc::MiMalloc.alloc_zeroed(layout),
    }
}

/// The bytes of a C string (without its NUL).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that outlives the result.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
unsafe fn c_bytes<'a>(p: *const std::ffi::c_char) -> Option<&'a [u8]> {
    (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_bytes())
}

/// Runs before `main` (glibc passes constructors `argc`, `argv` and `envp`, as Rust's
/// standard library itself relies on for `std::env::args`); allocates nothing.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn choose(
    argc: std::ffi::c_int,
    argv: *const *const std::ffi::c_char,
    envp: *const *const std::ffi::c_char,
) {
    if ALLOCATED.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: glibc passes the process's argument vector (`argc` entries) and its
    // NULL-terminated environment, both alive for the whole process.
    let (command, over, purge_delay_set) = unsafe {
        let command = if argc >= 2 && !argv.is_null() {
            c_bytes(*argv.add(1))
        } else {
            None
        };
        let (mut over, mut purge_delay_set) = (None, false);
        let mut e = envp;
        while !e.is_null() && !(*e).is_null() {
            let kv = c_bytes(*e).unwrap_or_default();
            if let Some(v) = kv.strip_prefix(OVERRIDE.as_bytes()) {
                over = v.strip_prefix(b"=");
            }
            purge_delay_set |= kv.starts_with(b"MIMALLOC_PURGE_DELAY=");
            e = e.add(1);
        }
        (command, over, purge_delay_set)
    };
    // An unknown override keeps the system allocator; `main` reports it.
    if choice(command, over) == Ok(true) {
        if !purge_delay_set {
            // SAFETY: sets one of mimalloc's option values (a static), before any allocation.
            unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
        }
        MIMALLOC.store(true, Ordering::Relaxed);
    }
}

/// mimalloc v3's `mi_option_purge_delay` (its `mi_option_e`; the -sys crate names only older
/// options). The allocator tests read the value back from mimalloc's own option listing.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[used]
#[link_section = ".init_array"]
static CHOOSE: extern "C" fn(
    std::ffi::c_int,
    *const *const std::ffi::c_char,
    *const *const std::ffi::c_char,
) = choose;

#[cfg(test)]
mod tests {
    use super::*;

    /// A trie branch's children (640 bytes, word-aligned) stay in mimalloc's 640-byte class
    /// however many are taken; through `mi_malloc_aligned` they went to the 768-byte class
    /// once the first page of their own ran dry (see `word_aligned`).
    #[test]
    fn word_aligned_blocks_stay_in_their_size_class() {
        let layout = Layout::from_size_align(640, 8).unwrap();
        let blocks: Vec<*mut u8> = (0..5000)
            // SAFETY: a non-zero size; each block is freed below.
            .map(|_| unsafe { mi_alloc(layout, false) })
            .collect();
        for &b in &blocks {
            assert!(!b.is_null() && b as usize % 8 == 0);
            // SAFETY: a live block from mimalloc.
            let usable = unsafe { libmimalloc_sys::mi_usable_size(b.cast()) };
            assert_eq!(usable, 640);
        }
        for b in blocks {
            // SAFETY: from `mi_alloc`, freed once.
            unsafe { libmimalloc_sys::mi_free(b.cast()) };
        }
        // Aligned above a word, or above the size: mimalloc's aligned path, still aligned.
        for (size, align) in [(640, 64), (4, 8), (24, 16)] {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: as above.
            let b = unsafe { mi_alloc(layout, false) };
            assert!(!b.is_null() && b as usize % align == 0, "{size} {align}");
            // SAFETY: as above.
            unsafe { libmimalloc_sys::mi_free(b.cast()) };
        }
    }

    #[test]
    fn commands_and_overrides_pick_the_allocator() {
        assert_eq!(choice(Some(b"state"), None), Ok(true));
        assert_eq!(choice(Some(b"bench"), None), Ok(true));
        assert_eq!(choice(Some(b"equihash"), None), Ok(false));
        assert_eq!(choice(None, None), Ok(false));
        assert_eq!(choice(Some(b"equihash"), Some(b"mimalloc")), Ok(true));
        assert_eq!(choice(Some(b"state"), Some(b"system")), Ok(false));
        assert_eq!(choice(Some(b"state"), Some(b"jemalloc")), Err(()));
    }
}
