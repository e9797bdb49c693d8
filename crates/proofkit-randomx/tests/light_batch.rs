//! `LightBatch` (many light-mode VMs on one thread, their dataset items computed together)
//! against one VM per hash and against the reference's vectors.

mod common;

use common::{cache, field_bytes, vectors};
#[cfg(target_arch = "x86_64")]
use common::{mxcsr, set_mxcsr};
use proofkit_randomx::{DatasetSource, Error, JitRounding, LightBatch, Version, Vm, VmOptions};
use rand::{Rng, SeedableRng};

fn random_inputs(seed: u64, count: usize) -> Vec<Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..count)
        .map(|i| {
            // Empty, block-header-sized and longer than one Blake2b block.
            let len = [0, 76, 200][i % 3] + rng.gen_range(0..4);
            (0..len).map(|_| rng.gen()).collect()
        })
        .collect()
}

fn one_by_one(opts: VmOptions, inputs: &[Vec<u8>]) -> Vec<[u8; 32]> {
    let mut vm = Vm::new(DatasetSource::Light(cache(b"light batch")), opts).unwrap();
    inputs.iter().map(|i| vm.hash(i)).collect()
}

/// Every configuration of the VM through batches of 1, 3 and 8 VMs, with more and fewer inputs
/// than VMs, equals one VM hashing the inputs one by one; a batch is reused across calls.
#[test]
fn batch_hashes_equal_single_vm_hashes() {
    // Under PROOFKIT_FORCE_PORTABLE every VM interprets (~20x slower): fewer inputs.
    let jit = Vm::light(cache(b"light batch"), Version::V1)
        .unwrap()
        .uses_jit();
    let inputs = random_inputs(7, if jit { 13 } else { 4 });
    let n = inputs.len();
    for version in [Version::V1, Version::V2] {
        let opts = VmOptions {
            version,
            ..Default::default()
        };
        let want = one_by_one(opts, &inputs);
        for vms in [1, 3, 8] {
            let mut batch = LightBatch::new(cache(b"light batch"), opts, vms).unwrap();
            assert_eq!(batch.vms(), vms);
            assert_eq!(batch.hash_many(&inputs), want, "{version:?}, {vms} VMs");
            // The VMs did wait for each other: each round served every VM still hashing, two
            // items each (the JIT's current and next).
            let r = batch.last_call();
            let per_vm = if batch.uses_jit() { 2 } else { 1 };
            assert!(r.rounds >= 16384 * n as u64 / 2 / vms as u64, "{r:?}");
            assert!(
                r.items > r.rounds * (per_vm * vms as u64 - 1) / 2,
                "{vms} VMs: {r:?}"
            );
            // Fewer inputs than VMs, then none, on the same batch.
            assert_eq!(batch.hash_many(&inputs[..2]), want[..2], "{version:?}");
            assert_eq!(batch.hash_many::<Vec<u8>>(&[]), Vec::<[u8; 32]>::new());
            assert_eq!(batch.vms(), vms, "every VM comes back");
        }
        // The JIT's other rounding strategy and the interpreter (single-item requests).
        for (with_jit, rounding) in [(true, JitRounding::Embedded), (false, JitRounding::Auto)] {
            let opts = VmOptions {
                jit: with_jit,
                rounding,
                ..opts
            };
            let mut batch = LightBatch::new(cache(b"light batch"), opts, 4).unwrap();
            let some = &inputs[..n.min(5)];
            assert_eq!(
                batch.hash_many(some),
                want[..some.len()],
                "{version:?} jit {with_jit} {rounding:?}"
            );
            let r = batch.last_call();
            let per_vm = if batch.uses_jit() { 2 } else { 1 };
            assert_eq!(batch.uses_jit(), with_jit && jit);
            assert!(
                r.items > r.rounds * (per_vm * 4 - 1) / 2,
                "jit {with_jit}: {r:?}"
            );
        }
    }
}

/// The reference implementation's hash vectors, each key's inputs in one batch.
#[test]
fn batch_hashes_equal_reference_vectors() {
    let Some(v) = vectors() else { return };
    let hashes = v["hashes"].as_array().unwrap();
    let mut keys: Vec<Vec<u8>> = hashes.iter().map(|h| field_bytes(h, "key")).collect();
    keys.dedup();
    let mut checked = 0;
    for key in keys {
        let cases: Vec<_> = hashes
            .iter()
            .filter(|h| field_bytes(h, "key") == key)
            .collect();
        let inputs: Vec<Vec<u8>> = cases.iter().map(|h| field_bytes(h, "input")).collect();
        for (version, name) in [(Version::V1, "v1"), (Version::V2, "v2")] {
            let opts = VmOptions {
                version,
                ..Default::default()
            };
            let mut batch = LightBatch::new(cache(&key), opts, 8).unwrap();
            let got = batch.hash_many(&inputs);
            for (h, case) in got.iter().zip(&cases) {
                assert_eq!(hex::encode(h), case[name].as_str().unwrap(), "{name}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * hashes.len());
}

/// A batch leaves the caller's floating-point environment as it found it (the VMs suspend
/// inside their programs with their own rounding modes set, and a VM starting its next program
/// saves whatever mode it finds as its caller's). With the JIT, also when the caller runs in a
/// rounding mode other than nearest: the interpreter, like all Rust float code, assumes nearest.
#[cfg(target_arch = "x86_64")]
#[test]
fn batch_preserves_caller_rounding_mode() {
    let inputs = random_inputs(11, 6);
    let opts = VmOptions::default();
    let want = one_by_one(opts, &inputs);
    let mut batch = LightBatch::new(cache(b"light batch"), opts, 3).unwrap();
    let before = mxcsr();
    let modes: &[u32] = if batch.uses_jit() {
        &[0, 0x6000, 0x2000]
    } else {
        &[0]
    };
    for &rc in modes {
        // RC (bits 13-14): 00 nearest, 01 down, 11 toward zero.
        set_mxcsr((before & !0x6000) | rc);
        let got = batch.hash_many(&inputs);
        let during = mxcsr();
        set_mxcsr(before);
        assert_eq!(got, want, "caller's RC {rc:#x}");
        assert_eq!(
            during & !0x3F,
            ((before & !0x6000) | rc) & !0x3F,
            "caller's mode kept"
        );
    }
    let x = std::hint::black_box(0.1f64) + std::hint::black_box(0.2f64);
    assert_eq!(x, 0.30000000000000004);
}

#[test]
fn empty_batch_is_an_error() {
    let err = LightBatch::new(cache(b"light batch"), VmOptions::default(), 0).err();
    assert!(matches!(err, Some(Error::EmptyBatch)), "{err:?}");
}

/// A batch moves between threads (a Python object, a worker pool): it holds no coroutine
/// between calls, only VMs and unused stacks.
#[test]
fn batch_is_send() {
    fn send<T: Send>() {}
    send::<LightBatch>();
}
