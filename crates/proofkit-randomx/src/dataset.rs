//! The 2080 MiB Dataset of fast mode (specs.md chapter 7): every item computed from the Cache,
//! in parallel on all cores, with a progress callback.
#![allow(unsafe_code)]

use crate::cache::Cache;
use crate::config::{DATASET_ITEM_COUNT, DATASET_SIZE};
use crate::Error;
use proofkit_core::memory::{LargeBuffer, PageKind, PagePolicy};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Items per work unit of the parallel build (and per progress report).
const CHUNK_ITEMS: u64 = 1 << 15;

pub struct Dataset {
    memory: LargeBuffer,
}

impl Dataset {
    /// Allocates the dataset (uninitialised: all zero).
    pub fn alloc(pages: PagePolicy) -> Result<Self, Error> {
        Ok(Dataset {
            memory: LargeBuffer::new(DATASET_SIZE as usize, pages)?,
        })
    }

    /// Allocates and builds the dataset from `cache` on `threads` threads, calling
    /// `progress(done_items, total_items)` as work completes.
    pub fn build(
        cache: &Cache,
        pages: PagePolicy,
        threads: usize,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<Self, Error> {
        let mut d = Self::alloc(pages)?;
        d.init_parallel(cache, threads, progress)?;
        Ok(d)
    }

    /// Like [`Dataset::build`], but gives up as soon as `cancel()` returns true (checked before
    /// every work unit of `CHUNK_ITEMS` items): `Ok(None)`. For a miner whose key changed again
    /// while the previous key's dataset was still being built.
    pub fn build_cancellable(
        cache: &Cache,
        pages: PagePolicy,
        threads: usize,
        progress: &(dyn Fn(u64, u64) + Sync),
        cancel: &(dyn Fn() -> bool + Sync),
    ) -> Result<Option<Self>, Error> {
        let mut d = Self::alloc(pages)?;
        Ok(d.init_parallel_until(cache, threads, progress, cancel)?
            .then_some(d))
    }

    /// Computes every item from `cache` on `threads` threads.
    pub fn init_parallel(
        &mut self,
        cache: &Cache,
        threads: usize,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<(), Error> {
        self.init_parallel_until(cache, threads, progress, &|| false)
            .map(|_| ())
    }

    /// [`Dataset::init_parallel`] checking `cancel` before each work unit; true when complete.
    fn init_parallel_until(
        &mut self,
        cache: &Cache,
        threads: usize,
        progress: &(dyn Fn(u64, u64) + Sync),
        cancel: &(dyn Fn() -> bool + Sync),
    ) -> Result<bool, Error> {
        if !cache.is_initialized() {
            return Err(Error::CacheNotInitialized);
        }
        let threads = threads.max(1);
        let words = self.memory.as_u64_slice_mut();
        let chunks = Mutex::new(words.chunks_mut((CHUNK_ITEMS * 8) as usize).enumerate());
        let done = AtomicU64::new(0);
        let cancelled = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            for t in 0..threads {
                let (chunks, done, cancelled) = (&chunks, &done, &cancelled);
                s.spawn(move || {
                    proofkit_core::affinity::pin_current_thread(t);
                    loop {
                        if cancel() {
                            cancelled.store(true, Ordering::Relaxed);
                            break;
                        }
                        let next = chunks.lock().unwrap_or_else(|p| p.into_inner()).next();
                        let Some((ci, chunk)) = next else { break };
                        let first = ci as u64 * CHUNK_ITEMS;
                        fill_items(cache, first, chunk);
                        let n = done.fetch_add((chunk.len() / 8) as u64, Ordering::Relaxed)
                            + (chunk.len() / 8) as u64;
                        progress(n, DATASET_ITEM_COUNT);
                    }
                });
            }
        });
        Ok(!cancelled.into_inner())
    }

    /// Computes items `start .. start + count` (the C API's `randomx_init_dataset`).
    pub fn init_range(&mut self, cache: &Cache, start: u64, count: u64) -> Result<(), Error> {
        let end = checked_range(cache, start, count)?;
        let words = &mut self.memory.as_u64_slice_mut()[(start * 8) as usize..(end * 8) as usize];
        fill_items(cache, start, words);
        Ok(())
    }

    /// Like [`Dataset::init_range`] through a shared reference, so that several threads can
    /// initialise disjoint ranges of one dataset (what C callers of `randomx_init_dataset` do).
    ///
    /// # Safety
    /// No other thread may read or write items `start .. start + count` during the call.
    pub unsafe fn init_range_shared(
        &self,
        cache: &Cache,
        start: u64,
        count: u64,
    ) -> Result<(), Error> {
        let end = checked_range(cache, start, count)?;
        let base = self.memory.as_ptr() as *mut u64;
        // Whole batches through a buffer (interleaved, see `fill_items`), then the rest.
        let mut i = start;
        let mut buf = [0u64; 8 * BATCH];
        while i < end {
            let n = (end - i).min(BATCH as u64) as usize;
            fill_items(cache, i, &mut buf[..8 * n]);
            // SAFETY: i + n <= end <= DATASET_ITEM_COUNT, so the 8n words lie inside the
            // mapping; the caller guarantees exclusive access to this range.
            unsafe {
                std::ptr::copy_nonoverlapping(buf.as_ptr(), base.add((i * 8) as usize), 8 * n)
            };
            i += n as u64;
        }
        Ok(())
    }

    /// Item `i` (i < DATASET_ITEM_COUNT).
    #[inline(always)]
    pub fn item(&self, i: u64) -> &[u64] {
        let w = self.memory.as_u64_slice();
        let b = (i * 8) as usize;
        &w[b..b + 8]
    }

    pub fn page_kind(&self) -> PageKind {
        self.memory.kind()
    }

    pub fn memory_ptr(&self) -> *const u8 {
        self.memory.as_ptr()
    }
}

/// The end of items `start .. start + count`, if they lie in the dataset and `cache` has a key.
fn checked_range(cache: &Cache, start: u64, count: u64) -> Result<u64, Error> {
    let end = start
        .checked_add(count)
        .filter(|&e| e <= DATASET_ITEM_COUNT)
        .ok_or(Error::ItemRange { start, count })?;
    if !cache.is_initialized() {
        return Err(Error::CacheNotInitialized);
    }
    Ok(end)
}

/// Items per buffered group of [`Dataset::init_range_shared`]: a multiple of the vector build's
/// group.
const BATCH: usize = 4 * crate::cache::VECTOR_GROUP_ITEMS;

/// Writes items `first ..` into `words` (8 words per item).
fn fill_items(cache: &Cache, first: u64, words: &mut [u64]) {
    cache.dataset_items_into(first, words);
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("pages", &self.memory.kind())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cancelled build stops within one work unit per thread and returns `None`.
    #[test]
    fn cancelled_build_returns_none() {
        let cache = Cache::new(b"cancel", PagePolicy::Transparent).unwrap();
        let calls = AtomicU64::new(0);
        let cancel = || calls.fetch_add(1, Ordering::Relaxed) >= 2;
        let built =
            Dataset::build_cancellable(&cache, PagePolicy::Transparent, 2, &|_, _| {}, &cancel)
                .unwrap();
        assert!(built.is_none());
        assert!(calls.load(Ordering::Relaxed) <= 5, "stopped early");
    }
}
