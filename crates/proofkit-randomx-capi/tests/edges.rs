//! Edge cases of the C entry points, called through the rlib (no C compiler needed): the NULL
//! returns of randomx.h, NULL arguments, dataset ranges outside the dataset, flags that do not
//! apply to a VM's mode, and in-place re-keying of a cache no VM uses.

use randomx::*;
use std::ptr::{null, null_mut};

#[test]
fn null_returns_and_ignored_calls() {
    // SAFETY: every pointer passed is NULL or a live handle from this library, and buffers are
    // local arrays of the sizes the API requires.
    unsafe {
        assert!(randomx_create_vm(RANDOMX_FLAG_DEFAULT, null_mut(), null_mut()).is_null());
        assert!(randomx_create_vm(RANDOMX_FLAG_FULL_MEM, null_mut(), null_mut()).is_null());
        let cache = randomx_alloc_cache(RANDOMX_FLAG_JIT);
        assert!(!cache.is_null());
        assert!(!randomx_get_cache_memory(cache).is_null());
        assert!(
            randomx_create_vm(RANDOMX_FLAG_DEFAULT, cache, null_mut()).is_null(),
            "a light VM needs a keyed cache"
        );
        randomx_init_cache(cache, null(), 5); // NULL key with a size: ignored
        assert!(randomx_create_vm(RANDOMX_FLAG_DEFAULT, cache, null_mut()).is_null());

        // Keyed, no VM holds it: a new key re-keys in place (same memory).
        randomx_init_cache(cache, b"first".as_ptr().cast(), 5);
        let mem = randomx_get_cache_memory(cache);
        randomx_init_cache(cache, b"second".as_ptr().cast(), 6);
        assert_eq!(randomx_get_cache_memory(cache), mem);

        // The dataset: ranges outside it leave it untouched, a valid range is written.
        let ds = randomx_alloc_dataset(RANDOMX_FLAG_DEFAULT);
        assert!(!ds.is_null());
        let words = randomx_get_dataset_memory(ds) as *const u64;
        let n = randomx_dataset_item_count();
        assert_eq!(n, 34_078_719);
        randomx_init_dataset(ds, cache, n, 1);
        randomx_init_dataset(ds, cache, n - 1, 2);
        randomx_init_dataset(ds, cache, 1, std::ffi::c_ulong::MAX);
        randomx_init_dataset(ds, null_mut(), 0, 1);
        assert_eq!(*words.add(8), 0, "item 1 untouched");
        assert_eq!(*words.add(8 * (n as usize - 1)), 0, "last item untouched");
        randomx_init_dataset(ds, cache, 1, 1);
        assert_ne!(*words.add(8), 0, "item 1 written");

        // Several threads on disjoint ranges give what one thread gives.
        let serial = randomx_alloc_dataset(RANDOMX_FLAG_DEFAULT);
        randomx_init_dataset(serial, cache, 2, 2000);
        let (ds_addr, cache_addr) = (ds as usize, cache as usize);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                // The four ranges are disjoint (see the SAFETY comment of the block).
                s.spawn(move || {
                    randomx_init_dataset(
                        ds_addr as *mut randomx_dataset,
                        cache_addr as *mut randomx_cache,
                        (2 + 500 * t) as std::ffi::c_ulong,
                        500,
                    )
                });
            }
        });
        let serial_words = randomx_get_dataset_memory(serial) as *const u64;
        for w in 16..8 * 2002 {
            assert_eq!(*words.add(w), *serial_words.add(w), "word {w}");
        }
        randomx_release_dataset(serial);

        // RANDOMX_FLAG_JIT selects the JIT where it can run, and only then.
        let jit = randomx_create_vm(RANDOMX_FLAG_JIT, cache, null_mut());
        let expect_jit = cfg!(target_arch = "x86_64")
            && !proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE");
        assert_eq!(vm_uses_jit(jit), expect_jit);
        let plain = randomx_create_vm(RANDOMX_FLAG_HARD_AES, cache, null_mut());
        assert!(!vm_uses_jit(plain));
        randomx_destroy_vm(jit);
        randomx_destroy_vm(plain);

        // A full-memory VM ignores set_cache; a light VM ignores set_dataset.
        let full = randomx_create_vm(RANDOMX_FLAG_FULL_MEM | RANDOMX_FLAG_V2, null_mut(), ds);
        assert!(!full.is_null());
        randomx_vm_set_cache(full, cache);
        let light = randomx_create_vm(RANDOMX_FLAG_DEFAULT, cache, null_mut());
        assert!(!light.is_null());
        randomx_vm_set_dataset(light, ds);
        let mut a = [0u8; 32];
        let mut b = [0u8; 32];
        randomx_calculate_hash(full, null(), 0, a.as_mut_ptr().cast());
        randomx_release_dataset(ds); // the VM keeps the dataset alive
        randomx_calculate_hash(full, null(), 0, b.as_mut_ptr().cast());
        assert_eq!(a, b);
        assert_ne!(a, [0; 32]);

        // NULL arguments are ignored.
        let mut out = [0xAAu8; 32];
        randomx_calculate_hash(light, null(), 3, out.as_mut_ptr().cast());
        randomx_calculate_hash(null_mut(), b"x".as_ptr().cast(), 1, out.as_mut_ptr().cast());
        randomx_calculate_hash_next(light, null(), 1, out.as_mut_ptr().cast());
        randomx_calculate_commitment(null(), 1, a.as_ptr().cast(), out.as_mut_ptr().cast());
        assert_eq!(out, [0xAA; 32]);

        randomx_destroy_vm(full);
        randomx_destroy_vm(light);
        randomx_release_cache(cache);
    }
}

#[test]
fn flag_checks() {
    let cpu = proofkit_core::cpu::features();
    // SAFETY: handles from this library, released once.
    unsafe {
        for (flag, have) in [
            (RANDOMX_FLAG_ARGON2_AVX2, cpu.avx2),
            (RANDOMX_FLAG_ARGON2_SSSE3, cpu.ssse3),
            (RANDOMX_FLAG_ARGON2, cpu.avx2),
        ] {
            let c = randomx_alloc_cache(flag);
            assert_eq!(!c.is_null(), have, "flag {flag}");
            randomx_release_cache(c);
        }
        if proofkit_core::memory::free_hugetlb_pages() == 0 {
            assert!(randomx_alloc_cache(RANDOMX_FLAG_LARGE_PAGES).is_null());
            assert!(randomx_alloc_dataset(RANDOMX_FLAG_LARGE_PAGES).is_null());
        } else {
            println!("skipped: hugetlb pages are reserved here; the NULL case is not reachable");
        }
    }
    let f = randomx_get_flags();
    assert_eq!(
        f & (RANDOMX_FLAG_LARGE_PAGES
            | RANDOMX_FLAG_FULL_MEM
            | RANDOMX_FLAG_SECURE
            | RANDOMX_FLAG_V2),
        0
    );
}

#[test]
fn rekey_while_other_threads_hash() {
    // SAFETY: live handles only; each VM is used by one thread at a time; the cache handle is
    // re-keyed by one thread while others create VMs from it and hash, which this library
    // allows (VMs hold their own reference to the cache they run on).
    unsafe {
        let cache = randomx_alloc_cache(RANDOMX_FLAG_DEFAULT);
        randomx_init_cache(cache, b"old".as_ptr().cast(), 3);
        let main_vm = randomx_create_vm(RANDOMX_FLAG_DEFAULT, cache, null_mut());
        let mut old = [0u8; 32];
        randomx_calculate_hash(main_vm, b"abc".as_ptr().cast(), 3, old.as_mut_ptr().cast());
        let cache_addr = cache as usize;
        let results: Vec<[u8; 32]> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(move || {
                        let vm = randomx_create_vm(
                            RANDOMX_FLAG_DEFAULT,
                            cache_addr as *mut randomx_cache,
                            null_mut(),
                        );
                        assert!(!vm.is_null());
                        let mut h = [0u8; 32];
                        randomx_calculate_hash(
                            vm,
                            b"abc".as_ptr().cast(),
                            3,
                            h.as_mut_ptr().cast(),
                        );
                        randomx_destroy_vm(vm);
                        h
                    })
                })
                .collect();
            randomx_init_cache(cache_addr as *mut randomx_cache, b"new".as_ptr().cast(), 3);
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        randomx_vm_set_cache(main_vm, cache);
        let mut new = [0u8; 32];
        randomx_calculate_hash(main_vm, b"abc".as_ptr().cast(), 3, new.as_mut_ptr().cast());
        assert_ne!(old, new);
        for r in results {
            assert!(
                r == old || r == new,
                "a worker's hash is one of the two keys'"
            );
        }
        randomx_destroy_vm(main_vm);
        randomx_release_cache(cache);
    }
}
