//! The `em` solver's chunk pool shared by its threads ([`crate::em`]).
//!
//! Every thread of an `em` step writes rows into chunks taken from one pool and reads the
//! chunks of the buckets it consumes, which other threads wrote in the step before. Which
//! chunk a thread may touch changes chunk by chunk at run time, so the pool cannot be split
//! into per-thread slices; each thread gets a [`PoolRef`] instead, a bounds-checked view of
//! the whole pool whose slices live only as long as one row's access.
//!
//! The ownership protocol `em` keeps (and the reason the views may alias):
//!
//! * during a step, a chunk of the layer being consumed is touched only by the thread that
//!   consumes its bucket (buckets are split between threads), and it goes to that thread's
//!   free list when freed; the one exception, a chunk holding the heads of two neighbouring
//!   buckets that two threads consume, is only read by both and freed after the step;
//! * a chunk taken from a thread's free list, or from the shared bump counter (an atomic
//!   `fetch_add`: each id once), belongs to that thread until the step ends;
//! * steps end with the threads joined (`std::thread::scope`), which orders every write of a
//!   step before every read of the next.
//!
//! So no byte is written by one thread and accessed by another within a step, and no two
//! slices handed out by one view are alive at once (they borrow the view). With one thread
//! the view is exactly a `&mut [u8]`.
#![allow(unsafe_code)]

use std::marker::PhantomData;

/// The pool's memory, lent out as [`PoolRef`]s.
pub(crate) struct Pool<'a> {
    ptr: *mut u8,
    len: usize,
    _mem: PhantomData<&'a mut [u8]>,
}

impl<'a> Pool<'a> {
    pub(crate) fn new(mem: &'a mut [u8]) -> Self {
        Pool {
            ptr: mem.as_mut_ptr(),
            len: mem.len(),
            _mem: PhantomData,
        }
    }

    /// `n` views of the pool, for `n` threads that keep the protocol of the module doc.
    /// They borrow the pool mutably, so views of two calls never coexist.
    pub(crate) fn views(&mut self, n: usize) -> Vec<PoolRef<'_>> {
        (0..n)
            .map(|_| PoolRef {
                ptr: self.ptr,
                len: self.len,
                _mem: PhantomData,
            })
            .collect()
    }
}

/// One thread's view of the pool (see the module doc).
pub(crate) struct PoolRef<'p> {
    ptr: *mut u8,
    len: usize,
    _mem: PhantomData<&'p mut [u8]>,
}

// SAFETY: a view is a pointer into the pool, which outlives it (`'p`); within a step a
// thread writes only chunks that no other thread accesses, and chunks read by two threads
// are written by none (module doc), so moving a view to another thread creates no data race.
unsafe impl Send for PoolRef<'_> {}

#[cold]
#[inline(never)]
fn out_of_pool(at: usize, len: usize, pool: usize) -> ! {
    panic!("pool access {at}+{len} past {pool}")
}

impl PoolRef<'_> {
    #[inline(always)]
    fn check(&self, at: usize, len: usize) {
        // Exact (`self.len - at` is evaluated only when `at <= self.len`); the panic and its
        // message are out of line, which keeps the hot loops' code small (an inline
        // `assert!` with a formatted message cost ~5% more instructions in `em`).
        if at > self.len || len > self.len - at {
            out_of_pool(at, len, self.len);
        }
    }

    /// A view of the same pool borrowing this one, to be held by value in a hot loop: its
    /// pointer and length then stay in registers, where a view behind a reference is
    /// reloaded after every write through it (the compiler cannot tell the write does not
    /// reach the view itself).
    #[inline(always)]
    pub(crate) fn reborrow(&mut self) -> PoolRef<'_> {
        PoolRef {
            ptr: self.ptr,
            len: self.len,
            _mem: PhantomData,
        }
    }

    /// The `len` bytes at `at`.
    #[inline(always)]
    pub(crate) fn bytes(&self, at: usize, len: usize) -> &[u8] {
        self.check(at, len);
        // SAFETY: in bounds (checked above); no other thread writes these bytes during the
        // step (module doc), and this view's mutable slices borrow it mutably, so none is
        // alive now.
        unsafe { std::slice::from_raw_parts(self.ptr.add(at), len) }
    }

    /// The `len` bytes at `at`, writable.
    #[inline(always)]
    pub(crate) fn bytes_mut(&mut self, at: usize, len: usize) -> &mut [u8] {
        self.check(at, len);
        // SAFETY: in bounds (checked above); no other thread accesses these bytes during the
        // step (module doc), and the slice borrows this view mutably, so it is the only one.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), len) }
    }

    /// Hints that the cache line at `at` will be needed soon, into L2 (no access: any `at`
    /// is fine).
    #[inline(always)]
    pub(crate) fn prefetch_l2(&self, at: usize) {
        if at < self.len {
            proofkit_core::memory::prefetch_address_l2(self.ptr, at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views_read_and_write_their_bytes() {
        let mut mem = vec![0u8; 64];
        let mut pool = Pool::new(&mut mem);
        let mut views = pool.views(2);
        let (a, b) = views.split_at_mut(1);
        std::thread::scope(|s| {
            s.spawn(|| a[0].bytes_mut(0, 32).fill(1));
            s.spawn(|| b[0].bytes_mut(32, 32).fill(2));
        });
        assert_eq!(views[0].bytes(31, 2), [1, 2]);
        drop(views);
        assert_eq!(mem[..32], [1; 32]);
        assert_eq!(mem[32..], [2; 32]);
    }

    #[test]
    #[should_panic(expected = "past")]
    fn access_past_the_pool_panics() {
        let mut mem = vec![0u8; 16];
        let mut pool = Pool::new(&mut mem);
        pool.views(1)[0].bytes(12, 8);
    }
}
