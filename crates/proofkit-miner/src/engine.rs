//! The hashing engine: per worker thread one RandomX VM reading the shared Dataset (fast mode),
//! or a `LightBatch` of several VMs reading the shared Cache (light mode: their dataset items
//! computed together, about twice one VM's throughput).
//!
//! A new job is published by swapping an `Arc<Work>` and bumping a generation counter that each
//! worker reads before every hash (light mode: every group of `LIGHT_BATCH_VMS` hashes), so a
//! job switch costs at most the hashes in flight. A new seed
//! hash first re-keys a Cache (about a second of Argon2d; the workers idle meanwhile because every
//! hash of the old key is stale), then mining resumes at once in light mode while the fast-mode
//! Dataset for the new key is built on background threads; the workers move onto it when it is
//! ready. Nonces come from one atomic counter per job, in chunks, so threads never repeat one.

use crate::job::Job;
use crate::Error;
use proofkit_randomx::{
    Cache, Dataset, DatasetSource, LightBatch, PageKind, PagePolicy, Vm, VmOptions, LIGHT_BATCH_VMS,
};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Light: hash from the 256 MiB Cache (items computed per access). Fast: build the 2080 MiB
/// Dataset for each key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Light,
    Fast,
}

#[derive(Clone, Copy, Debug)]
pub struct EngineConfig {
    pub threads: usize,
    pub mode: Mode,
    pub pages: PagePolicy,
    /// Pin worker i to the i-th allowed CPU.
    pub pin: bool,
}

/// A hash that met its job's goal, found by a worker.
#[derive(Clone, Debug)]
pub struct Found {
    pub job: Arc<Job>,
    pub nonce: u32,
    pub hash: [u8; 32],
}

/// Memory facts for the start-up summary and the API.
#[derive(Clone, Debug, Default)]
pub struct MemoryInfo {
    pub cache_pages: Option<PageKind>,
    pub dataset_pages: Option<PageKind>,
    pub scratchpad_pages: Vec<PageKind>,
    /// Seconds the last Dataset build took.
    pub dataset_init_s: Option<f64>,
    /// Seconds the last Cache (re)key took.
    pub cache_init_s: Option<f64>,
    /// "light" or "fast": what the workers hash from now.
    pub hashing_from: &'static str,
}

impl MemoryInfo {
    /// 2 MiB pages obtained as huge pages, and 2 MiB pages wanted, over Cache, Dataset and
    /// scratchpads (xmrig's "huge pages" figure).
    pub fn huge_pages(&self) -> (u64, u64) {
        const MIB2: u64 = 2 << 20;
        let mut got = 0;
        let mut want = 0;
        let mut add = |kind: PageKind, bytes: u64| {
            let n = bytes.div_ceil(MIB2);
            want += n;
            if kind.is_large() {
                got += n;
            }
        };
        if let Some(k) = self.cache_pages {
            add(k, proofkit_randomx::config::CACHE_SIZE as u64);
        }
        if let Some(k) = self.dataset_pages {
            add(k, proofkit_randomx::config::DATASET_SIZE);
        }
        for &k in &self.scratchpad_pages {
            add(k, proofkit_randomx::config::SCRATCHPAD_L3 as u64);
        }
        (got, want)
    }
}

/// A job with the memory its key needs and its nonce counter.
struct Work {
    job: Arc<Job>,
    source: DatasetSource,
    next_nonce: Arc<AtomicU64>,
}

/// The key material of the current seed.
struct Keyed {
    seed: [u8; 32],
    cache: Arc<Cache>,
    dataset: Option<Arc<Dataset>>,
}

struct Shared {
    cfg: EngineConfig,
    work: RwLock<Option<Arc<Work>>>,
    generation: AtomicU64,
    keyed: Mutex<Option<Keyed>>,
    /// Bumped on each seed change so a background Dataset build for an old key is dropped.
    key_epoch: AtomicU64,
    stop: AtomicBool,
    hashes: AtomicU64,
    info: Mutex<MemoryInfo>,
    found: Mutex<Sender<Found>>,
    verifier: Mutex<Option<Vm>>,
}

/// The running engine; dropping it stops the workers.
pub struct Engine {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

/// Nonces a worker takes from the job's counter at a time.
const CHUNK: u64 = 16;

impl Engine {
    /// Starts `cfg.threads` idle workers; results go to `found`.
    pub fn start(cfg: EngineConfig, found: Sender<Found>) -> Result<Engine, Error> {
        if cfg.threads == 0 {
            return Err(Error::Config("threads must be at least 1".into()));
        }
        let shared = Arc::new(Shared {
            cfg,
            work: RwLock::new(None),
            generation: AtomicU64::new(0),
            keyed: Mutex::new(None),
            key_epoch: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            hashes: AtomicU64::new(0),
            info: Mutex::new(MemoryInfo {
                hashing_from: "idle",
                ..Default::default()
            }),
            found: Mutex::new(found),
            verifier: Mutex::new(None),
        });
        let cpus = proofkit_core::affinity::allowed_cpus();
        let workers = (0..cfg.threads)
            .map(|i| {
                let s = shared.clone();
                let cpu = cpus.get(i % cpus.len().max(1)).copied();
                std::thread::Builder::new()
                    .name(format!("miner-{i}"))
                    .spawn(move || {
                        if let (true, Some(c)) = (s.cfg.pin, cpu) {
                            proofkit_core::affinity::pin_current_thread(c);
                        }
                        worker(&s)
                    })
                    .map_err(Error::Io)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Engine { shared, workers })
    }

    /// Makes `job` the work of every thread. A new seed hash re-keys the Cache first (blocking
    /// for the Argon2d fill) and, in fast mode, starts the Dataset build in the background.
    pub fn set_job(&self, job: Job) -> Result<(), Error> {
        job.validate()?;
        let sh = &self.shared;
        let mut keyed = sh.keyed.lock().expect("keyed lock");
        let same_key = keyed.as_ref().is_some_and(|k| k.seed == job.seed_hash);
        if !same_key {
            // Stop hashing the old key now: every hash of it is stale.
            *sh.work.write().expect("work lock") = None;
            sh.generation.fetch_add(1, Ordering::AcqRel);
            let epoch = sh.key_epoch.fetch_add(1, Ordering::AcqRel) + 1;
            let t = Instant::now();
            // Re-key the old Cache in place when no VM holds it any more (saves the 256 MiB
            // allocation); otherwise allocate a fresh one.
            let old = keyed.take();
            let cache = match old.and_then(|k| Arc::try_unwrap(k.cache).ok()) {
                Some(mut c) => {
                    c.reinit(&job.seed_hash)?;
                    c
                }
                None => Cache::new(&job.seed_hash, sh.cfg.pages)?,
            };
            let cache = Arc::new(cache);
            {
                let mut info = sh.info.lock().expect("info lock");
                info.cache_pages = Some(cache.page_kind());
                info.cache_init_s = Some(t.elapsed().as_secs_f64());
                info.dataset_pages = None;
                info.hashing_from = "light";
            }
            *sh.verifier.lock().expect("verifier lock") = None;
            *keyed = Some(Keyed {
                seed: job.seed_hash,
                cache: cache.clone(),
                dataset: None,
            });
            if sh.cfg.mode == Mode::Fast {
                spawn_dataset_build(sh.clone(), cache, job.seed_hash, epoch);
            }
        }
        let k = keyed.as_ref().expect("keyed above");
        let source = match &k.dataset {
            Some(d) => DatasetSource::Fast(d.clone()),
            None => DatasetSource::Light(k.cache.clone()),
        };
        *sh.work.write().expect("work lock") = Some(Arc::new(Work {
            job: Arc::new(job),
            source,
            next_nonce: Arc::new(AtomicU64::new(0)),
        }));
        sh.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Stops hashing until the next `set_job` (a pool or daemon that went away).
    pub fn pause(&self) {
        *self.shared.work.write().expect("work lock") = None;
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// The job being hashed now.
    pub fn current_job(&self) -> Option<Arc<Job>> {
        self.shared
            .work
            .read()
            .expect("work lock")
            .as_ref()
            .map(|w| w.job.clone())
    }

    /// Hashes done so far by all workers.
    pub fn hashes(&self) -> u64 {
        self.shared.hashes.load(Ordering::Relaxed)
    }

    pub fn memory_info(&self) -> MemoryInfo {
        self.shared.info.lock().expect("info lock").clone()
    }

    /// Whether the workers hash from a fast-mode Dataset now.
    pub fn dataset_ready(&self) -> bool {
        self.shared
            .keyed
            .lock()
            .expect("keyed lock")
            .as_ref()
            .is_some_and(|k| k.dataset.is_some())
    }

    /// Recomputes the hash of a found nonce with a separate light-mode VM and checks it against
    /// the job's goal: nothing is submitted on a worker's word alone. Errors when the job's key is
    /// no longer loaded (the result is stale).
    pub fn verify(&self, f: &Found) -> Result<bool, Error> {
        let cache = {
            let keyed = self.shared.keyed.lock().expect("keyed lock");
            match keyed.as_ref() {
                Some(k) if k.seed == f.job.seed_hash => k.cache.clone(),
                _ => {
                    return Err(Error::Stale(
                        "the job's seed hash is no longer loaded".into(),
                    ))
                }
            }
        };
        let mut v = self.shared.verifier.lock().expect("verifier lock");
        let opts = VmOptions {
            version: f.job.algo.version(),
            pages: self.shared.cfg.pages,
            ..Default::default()
        };
        let vm = match v.as_mut() {
            Some(vm) => {
                vm.set_source(DatasetSource::Light(cache))?;
                vm.set_version(opts.version);
                vm
            }
            None => v.insert(Vm::new(DatasetSource::Light(cache), opts)?),
        };
        let h = vm.hash(&f.job.blob_with_nonce(f.nonce));
        Ok(h == f.hash && f.job.goal.is_met_by(&h))
    }

    /// Stops and joins the workers.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.key_epoch.fetch_add(1, Ordering::AcqRel);
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn spawn_dataset_build(sh: Arc<Shared>, cache: Arc<Cache>, seed: [u8; 32], epoch: u64) {
    std::thread::spawn(move || {
        let t = Instant::now();
        // The build shares the CPUs with the light-mode workers until it is done.
        let stale = || sh.key_epoch.load(Ordering::Acquire) != epoch;
        // A newer key makes this build pointless: it stops at the next work unit.
        let built =
            Dataset::build_cancellable(&cache, sh.cfg.pages, sh.cfg.threads, &|_, _| {}, &stale);
        let d = match built {
            Ok(Some(d)) => Arc::new(d),
            Ok(None) => return,
            Err(e) => {
                eprintln!("dataset build failed, staying in light mode: {e}");
                return;
            }
        };
        let mut keyed = sh.keyed.lock().expect("keyed lock");
        if stale() {
            return;
        }
        let Some(k) = keyed.as_mut().filter(|k| k.seed == seed) else {
            return;
        };
        k.dataset = Some(d.clone());
        {
            let mut info = sh.info.lock().expect("info lock");
            info.dataset_pages = Some(d.page_kind());
            info.dataset_init_s = Some(t.elapsed().as_secs_f64());
            info.hashing_from = "fast";
        }
        let mut w = sh.work.write().expect("work lock");
        if let Some(cur) = w.as_ref().filter(|cur| cur.job.seed_hash == seed) {
            *w = Some(Arc::new(Work {
                job: cur.job.clone(),
                source: DatasetSource::Fast(d),
                next_nonce: cur.next_nonce.clone(),
            }));
            sh.generation.fetch_add(1, Ordering::AcqRel);
        }
    });
}

fn worker(sh: &Shared) {
    let found_tx = sh.found.lock().expect("found lock").clone();
    // Counts a hash of `nonce` and sends it on when it meets the job's goal.
    let report = |w: &Work, nonce: u64, hash: [u8; 32]| {
        sh.hashes.fetch_add(1, Ordering::Relaxed);
        if w.job.goal.is_met_by(&hash) {
            let _ = found_tx.send(Found {
                job: w.job.clone(),
                nonce: nonce as u32,
                hash,
            });
        }
    };
    let mut vm: Option<Vm> = None;
    // Light mode hashes through a LightBatch (about twice one VM's throughput): several nonces
    // at a time, so a job switch waits for one group of LIGHT_BATCH_VMS hashes.
    let mut batch: Option<LightBatch> = None;
    let mut seen = u64::MAX;
    let mut work: Option<Arc<Work>> = None;
    let mut blob = Vec::new();
    while !sh.stop.load(Ordering::Acquire) {
        let g = sh.generation.load(Ordering::Acquire);
        if g != seen {
            seen = g;
            work = sh.work.read().expect("work lock").clone();
            if work.is_none() {
                // Let go of the cache at once, so that a new key can re-key it in place.
                batch = None;
            }
            if let Some(w) = work.clone() {
                let version = w.job.algo.version();
                if let DatasetSource::Light(cache) = &w.source {
                    let same = batch
                        .as_ref()
                        .is_some_and(|b| Arc::ptr_eq(b.cache(), cache) && b.version() == version);
                    if !same {
                        let opts = VmOptions {
                            version,
                            pages: sh.cfg.pages,
                            ..Default::default()
                        };
                        batch = None;
                        match LightBatch::new(cache.clone(), opts, LIGHT_BATCH_VMS) {
                            Ok(b) => {
                                let mut info = sh.info.lock().expect("info lock");
                                // One entry per worker (its batch or its VM).
                                if info.scratchpad_pages.len() < sh.cfg.threads {
                                    info.scratchpad_pages.push(b.scratchpad_pages());
                                }
                                batch = Some(b);
                            }
                            Err(e) => eprintln!("worker: cannot create a light-mode batch: {e}"),
                        }
                    }
                    // The fast-mode VM, if any, would keep the old dataset alive.
                    vm = None;
                    blob.clone_from(&w.job.blob);
                    if batch.is_none() {
                        work = None;
                    }
                    continue;
                }
                batch = None;
                let ready = match vm.as_mut() {
                    Some(v) => {
                        let ok = v.set_source(w.source.clone()).is_ok();
                        v.set_version(version);
                        ok
                    }
                    None => {
                        let opts = VmOptions {
                            version,
                            pages: sh.cfg.pages,
                            ..Default::default()
                        };
                        match Vm::new(w.source.clone(), opts) {
                            Ok(v) => {
                                let mut info = sh.info.lock().expect("info lock");
                                if info.scratchpad_pages.len() < sh.cfg.threads {
                                    info.scratchpad_pages.push(v.scratchpad_pages());
                                }
                                drop(info);
                                vm = Some(v);
                                true
                            }
                            Err(e) => {
                                eprintln!("worker: cannot create a VM: {e}");
                                false
                            }
                        }
                    }
                };
                blob.clone_from(&w.job.blob);
                if !ready {
                    work = None;
                }
            }
        }
        if let (Some(w), Some(b)) = (work.as_ref(), batch.as_mut()) {
            let start = w.next_nonce.fetch_add(CHUNK, Ordering::Relaxed);
            if start > u32::MAX as u64 {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            let end = (start + CHUNK).min(1 << 32);
            let mut n = start;
            while n < end && sh.generation.load(Ordering::Relaxed) == seen {
                let group = n..(n + LIGHT_BATCH_VMS as u64).min(end);
                let blobs: Vec<Vec<u8>> = group
                    .clone()
                    .map(|k| w.job.blob_with_nonce(k as u32))
                    .collect();
                for (k, h) in group.clone().zip(b.hash_many(&blobs)) {
                    report(w, k, h);
                }
                n = group.end;
            }
            continue;
        }
        let (Some(w), Some(v)) = (work.as_ref(), vm.as_mut()) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let start = w.next_nonce.fetch_add(CHUNK, Ordering::Relaxed);
        if start > u32::MAX as u64 {
            // Nonce space exhausted: wait for the next job.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let end = (start + CHUNK).min(1 << 32);
        let off = w.job.nonce_offset;
        blob[off..off + 4].copy_from_slice(&(start as u32).to_le_bytes());
        v.hash_first(&blob);
        let mut n = start;
        loop {
            let next = n + 1;
            let h = if next < end && sh.generation.load(Ordering::Relaxed) == seen {
                blob[off..off + 4].copy_from_slice(&(next as u32).to_le_bytes());
                v.hash_next(&blob)
            } else {
                v.hash_last()
            };
            report(w, n, h.expect("a hash is pending"));
            if next >= end || sh.generation.load(Ordering::Relaxed) != seen {
                // A hash started by hash_next for the old job is simply abandoned: the next
                // hash_first starts over.
                break;
            }
            n = next;
        }
    }
}
