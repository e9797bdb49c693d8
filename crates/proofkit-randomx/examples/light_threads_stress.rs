//! Stress for the JIT's code installation: two threads hashing in light mode (first/next/last
//! batches) on one shared Cache that the main thread replaces every PERIOD ms, and a third VM
//! hashing every 20 ms (as a miner's share check does). Before `ProgramCode::load` serialized
//! the instruction stream this crashed in 3 of 4 runs within a minute (SIGSEGV, SIGBUS or
//! SIGILL inside a program, session 12). `cargo run --release -p proofkit-randomx --example
//! light_threads_stress -- KEYS PERIOD_MS`; `HUNT_PAGES=small` puts the VMs on 4 KiB pages,
//! `HUNT_SECURE=1` runs them in W^X mode.
use proofkit_randomx::{Cache, DatasetSource, PagePolicy, Vm, VmOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

fn main() {
    let keys: u64 = std::env::args().nth(1).map_or(20, |a| a.parse().unwrap());
    let per_key_ms: u64 = std::env::args().nth(2).map_or(3000, |a| a.parse().unwrap());
    let current: Arc<RwLock<Arc<Cache>>> = Arc::new(RwLock::new(Arc::new(
        Cache::new(b"key 0", PagePolicy::Transparent).unwrap(),
    )));
    let gen = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicU64::new(0));
    let hashes = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for t in 0..2u8 {
        let (current, gen, stop, hashes) =
            (current.clone(), gen.clone(), stop.clone(), hashes.clone());
        handles.push(std::thread::spawn(move || {
            let mut vm: Option<Vm> = None;
            let mut seen = u64::MAX;
            let mut blob = vec![t; 76];
            let mut n = 0u32;
            while stop.load(Ordering::Acquire) == 0 {
                let g = gen.load(Ordering::Acquire);
                if g != seen {
                    seen = g;
                    let c = current.read().unwrap().clone();
                    match vm.as_mut() {
                        Some(v) => v.set_source(DatasetSource::Light(c)).unwrap(),
                        None => vm = Some(Vm::new(DatasetSource::Light(c), opts()).unwrap()),
                    }
                }
                let v = vm.as_mut().unwrap();
                blob[39..43].copy_from_slice(&n.to_le_bytes());
                v.hash_first(&blob);
                for _ in 0..8 {
                    n = n.wrapping_add(1);
                    blob[39..43].copy_from_slice(&n.to_le_bytes());
                    if gen.load(Ordering::Relaxed) != seen {
                        break;
                    }
                    v.hash_next(&blob).unwrap();
                    hashes.fetch_add(1, Ordering::Relaxed);
                }
                v.hash_last().unwrap();
            }
        }));
    }
    {
        // A verifier: one more VM on the current cache, hashing now and then (as the miner's
        // share check does).
        let (current, stop) = (current.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            let mut vm: Option<(Vm, usize)> = None;
            let mut i = 0u32;
            while stop.load(Ordering::Acquire) == 0 {
                let c = current.read().unwrap().clone();
                let id = Arc::as_ptr(&c) as usize;
                match vm.as_mut() {
                    Some((v, cid)) if *cid != id => {
                        v.set_source(DatasetSource::Light(c)).unwrap();
                        *cid = id;
                    }
                    Some(_) => drop(c),
                    None => vm = Some((Vm::new(DatasetSource::Light(c), opts()).unwrap(), id)),
                }
                i += 1;
                vm.as_mut().unwrap().0.hash(&i.to_le_bytes());
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }));
    }
    for k in 1..=keys {
        std::thread::sleep(std::time::Duration::from_millis(per_key_ms));
        let key = format!("key {k}");
        let c = Arc::new(Cache::new(key.as_bytes(), PagePolicy::Transparent).unwrap());
        *current.write().unwrap() = c;
        gen.fetch_add(1, Ordering::AcqRel);
        eprintln!("key {k}, {} hashes", hashes.load(Ordering::Relaxed));
    }
    stop.store(1, Ordering::Release);
    for h in handles {
        h.join().unwrap();
    }
    println!("done");
}

fn opts() -> VmOptions {
    let pages = if std::env::var("HUNT_PAGES").is_ok_and(|v| v == "small") {
        PagePolicy::SmallOnly
    } else {
        PagePolicy::Transparent
    };
    VmOptions {
        pages,
        secure: std::env::var("HUNT_SECURE").is_ok(),
        ..Default::default()
    }
}
