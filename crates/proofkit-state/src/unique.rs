//! `Arc::make_mut` and `Arc::get_mut` for the trie's cells without a locked instruction when
//! the `Arc` is the only owner, the common case: each block takes its parent's trie over
//! (session 20), so nearly every cell a write reaches belongs to one version alone.
//!
//! Why not the standard library's: both take a lock on the weak count (`lock cmpxchg`) before
//! they read the strong count. A locked instruction waits for every store before it to reach
//! the cache, and the block thread's writes come in bursts of stores into cold lines (a cell
//! just decoded, a box of children rewritten): the locked check in `materialize_for_write`
//! was ~8% of the block thread's samples at 10,000 blocks (session 42). Here the counts are
//! read with plain loads; only a shared cell takes the standard path.
//!
//! The crate never makes a `Weak` of a cell, but the check below does not rely on it.
#![allow(unsafe_code)]

use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

/// Whether `arc` is the only owner of its value: one strong count (ours) and no weak one.
/// No other owner can appear while `arc` is borrowed mutably: a new `Arc` is a clone of an
/// existing one (ours is the only one, and borrowed), and a new `Weak` a downgrade of one.
#[inline(always)]
fn is_unique<T>(arc: &mut Arc<T>) -> bool {
    if Arc::strong_count(arc) == 1 && Arc::weak_count(arc) == 0 {
        // Pairs with the release decrement of the owners dropped before (on any thread), as
        // the standard library's acquire does: their uses of the value happen before ours.
        fence(Ordering::Acquire);
        true
    } else {
        false
    }
}

/// The value of `arc`, which [`is_unique`] found to be its only owner.
///
/// # Safety
/// `is_unique(arc)` returned true, and `arc` has not been cloned or downgraded since.
#[inline(always)]
unsafe fn unique_value<T>(arc: &mut Arc<T>) -> &mut T {
    // SAFETY: `arc` is the value's only owner (the caller's contract) and is borrowed mutably
    // for the result's lifetime, so nothing else reads or writes the value meanwhile; the
    // pointer is the allocation's own (`Arc::as_ptr` makes no reference to the value).
    unsafe { &mut *(Arc::as_ptr(arc) as *mut T) }
}

/// [`Arc::make_mut`]: the value in place when `arc` is its only owner, else a clone of it.
#[inline(always)]
pub(crate) fn make_mut<T: Clone>(arc: &mut Arc<T>) -> &mut T {
    if is_unique(arc) {
        // SAFETY: `is_unique` just returned true.
        return unsafe { unique_value(arc) };
    }
    Arc::make_mut(arc)
}

/// [`Arc::get_mut`]: the value when `arc` is its only owner.
#[inline(always)]
pub(crate) fn get_mut<T>(arc: &mut Arc<T>) -> Option<&mut T> {
    // SAFETY: `is_unique` just returned true.
    is_unique(arc).then(|| unsafe { unique_value(arc) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unique_value_is_changed_in_place() {
        let mut a = Arc::new(vec![1u8, 2, 3]);
        let at = Arc::as_ptr(&a);
        make_mut(&mut a).push(4);
        get_mut(&mut a).expect("unique").push(5);
        assert_eq!(Arc::as_ptr(&a), at);
        assert_eq!(*a, [1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_shared_value_is_copied_and_the_other_owner_keeps_it() {
        let mut a = Arc::new(vec![1u8, 2, 3]);
        let b = Arc::clone(&a);
        assert!(get_mut(&mut a).is_none());
        make_mut(&mut a).push(4);
        assert_eq!((&a[..], &b[..]), (&[1, 2, 3, 4][..], &[1, 2, 3][..]));
        assert!(!Arc::ptr_eq(&a, &b));
        // A weak owner: not unique either (the standard path decides what happens to it).
        let mut c = Arc::new(vec![9u8]);
        let w = Arc::downgrade(&c);
        assert!(get_mut(&mut c).is_none());
        make_mut(&mut c).push(8);
        assert_eq!(*c, [9, 8]);
        assert!(w.upgrade().is_none_or(|v| *v == [9]));
    }

    #[test]
    fn an_owner_dropped_on_another_thread_leaves_the_value_unique() {
        // The other thread reads the value before it lets go; the change here comes after.
        for _ in 0..1000 {
            let mut a = Arc::new([0u64; 8]);
            let b = Arc::clone(&a);
            let t = std::thread::spawn(move || b.iter().sum::<u64>());
            assert_eq!(t.join().unwrap(), 0);
            make_mut(&mut a)[0] = 1;
            assert!(get_mut(&mut a).is_some());
            assert_eq!(a[0], 1);
        }
    }
}
