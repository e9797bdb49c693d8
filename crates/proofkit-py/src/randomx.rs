//! `proofkit.randomx`: a cyrx-shaped API (`Cache(flags).init(key)`, `Dataset`,
//! `VM(flags, cache=..., dataset=...)`, `hash`, `hash_first/next/last`, the `randomx.h` flag
//! values) over `proofkit_randomx`, plus one-call helpers with a small cache of recent keys.
//!
//! Flags keep their `randomx.h` meaning where proofkit has the choice: `JIT` (compiled
//! programs and SuperscalarHash; interpreted without it), `HARD_AES` (AES-NI; software AES
//! without it), `LARGE_PAGES` (hugetlb pages first), `FULL_MEM` (fast mode), `SECURE` (W^X
//! JIT pages), `V2`. The `ARGON2_*` bits are accepted and ignored: proofkit picks its Argon2
//! kernel at run time.

use crate::{bytes_arg, detached, error, fixed_arg};
use proofkit_randomx::config::DATASET_ITEM_COUNT;
use proofkit_randomx::{
    Aes, Cache, Dataset, DatasetSource, Error, LightBatch, PagePolicy, Version, Vm, VmOptions,
    LIGHT_BATCH_VMS,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::sync::{Arc, Mutex, MutexGuard};

pub const FLAG_DEFAULT: u32 = 0;
pub const FLAG_LARGE_PAGES: u32 = 1;
pub const FLAG_HARD_AES: u32 = 2;
pub const FLAG_FULL_MEM: u32 = 4;
pub const FLAG_JIT: u32 = 8;
pub const FLAG_SECURE: u32 = 16;
pub const FLAG_ARGON2_SSSE3: u32 = 32;
pub const FLAG_ARGON2_AVX2: u32 = 64;
pub const FLAG_ARGON2: u32 = 96;
pub const FLAG_V2: u32 = 128;
const ALL_FLAGS: u32 = 255;

fn rx_error(py: Python<'_>, e: Error) -> PyErr {
    let kind = match &e {
        Error::Memory(_) => "Memory",
        Error::Argon2(_) => "Argon2",
        Error::CacheNotInitialized => "CacheNotInitialized",
        Error::ItemRange { .. } => "ItemRange",
        Error::NoPendingHash => "NoPendingHash",
        Error::EmptyBatch => "EmptyBatch",
        Error::CoroutineStack(_) => "CoroutineStack",
    };
    error(py, "RandomxError", e.to_string(), kind, &[])
}

fn check_flags(flags: u32) -> PyResult<u32> {
    if flags & !ALL_FLAGS != 0 {
        return Err(PyValueError::new_err(format!(
            "unknown RandomX flag bits {:#x}",
            flags & !ALL_FLAGS
        )));
    }
    Ok(flags)
}

fn pages(flags: u32) -> PagePolicy {
    if flags & FLAG_LARGE_PAGES != 0 {
        PagePolicy::HugetlbFirst
    } else {
        PagePolicy::Transparent
    }
}

fn version(flags: u32) -> Version {
    if flags & FLAG_V2 != 0 {
        Version::V2
    } else {
        Version::V1
    }
}

/// A lock that survives a panic of an earlier holder (the panic was already reported as
/// `ProofkitError`; the value behind it is still a whole cache, dataset or VM).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The flags recommended for this machine (like `randomx_get_flags`): hardware AES and the
/// JIT where available, and the Argon2 bits the reference would pick.
#[pyfunction]
fn get_flags() -> u32 {
    let mut f = 0;
    if Aes::hardware().is_some() {
        f |= FLAG_HARD_AES;
    }
    #[cfg(target_arch = "x86_64")]
    {
        f |= FLAG_JIT;
        if std::is_x86_feature_detected!("ssse3") {
            f |= FLAG_ARGON2_SSSE3;
        }
        if std::is_x86_feature_detected!("avx2") {
            f |= FLAG_ARGON2_AVX2;
        }
    }
    f
}

/// Items in the fast-mode dataset.
#[pyfunction]
fn dataset_item_count() -> u64 {
    DATASET_ITEM_COUNT
}

/// The RandomX v2 commitment `Blake2b-256(input || hash)`.
#[pyfunction]
fn commitment<'py>(
    py: Python<'py>,
    input: &Bound<'py, PyAny>,
    hash: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let input = bytes_arg(input, "input")?;
    let hash: [u8; 32] = fixed_arg(hash, "hash")?;
    Ok(PyBytes::new(
        py,
        &proofkit_randomx::commitment(&input, &hash),
    ))
}

#[pyclass(module = "proofkit.randomx", name = "Cache", frozen)]
pub struct PyCache {
    flags: u32,
    inner: Mutex<Option<Arc<Cache>>>,
}

impl PyCache {
    fn get(&self, py: Python<'_>) -> PyResult<Arc<Cache>> {
        lock(&self.inner)
            .clone()
            .ok_or_else(|| rx_error(py, Error::CacheNotInitialized))
    }
}

#[pymethods]
impl PyCache {
    #[new]
    #[pyo3(signature = (flags = 0))]
    fn new(flags: u32) -> PyResult<Self> {
        Ok(PyCache {
            flags: check_flags(flags)?,
            inner: Mutex::new(None),
        })
    }

    /// Initialises the cache with `key`. When no VM or dataset holds this cache, its memory is
    /// re-keyed in place; otherwise a new cache is built and they keep the old key until
    /// `VM.set_cache` / `Dataset.init` are called with this cache again.
    fn init(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = bytes_arg(key, "key")?.into_owned();
        let (flags, inner) = (self.flags, &self.inner);
        detached(py, move || -> Result<(), Error> {
            let mut slot = lock(inner);
            if let Some(c) = slot.as_mut().and_then(Arc::get_mut) {
                return c.reinit(&key);
            }
            let jit = flags & FLAG_JIT != 0;
            *slot = Some(Arc::new(Cache::with_jit(&key, pages(flags), jit)?));
            Ok(())
        })?
        .map_err(|e| rx_error(py, e))
    }

    /// The key the cache was initialised with (None before `init`).
    #[getter]
    fn key<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        lock(&self.inner)
            .as_ref()
            .map(|c| PyBytes::new(py, c.key()))
    }

    #[getter]
    fn flags(&self) -> u32 {
        self.flags
    }

    fn __repr__(&self) -> String {
        match &*lock(&self.inner) {
            Some(c) => format!("Cache(flags={}, key={:?})", self.flags, hex(c.key())),
            None => format!("Cache(flags={}, uninitialised)", self.flags),
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[pyclass(module = "proofkit.randomx", name = "Dataset", frozen)]
pub struct PyDataset {
    flags: u32,
    inner: Mutex<Option<Arc<Dataset>>>,
}

#[pymethods]
impl PyDataset {
    /// Allocates a dataset (2080 MiB); with `cache`, also builds it (see `init`).
    #[new]
    #[pyo3(signature = (flags = 0, cache = None, threads = None, progress = None))]
    fn new(
        py: Python<'_>,
        flags: u32,
        cache: Option<&PyCache>,
        threads: Option<usize>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let d = PyDataset {
            flags: check_flags(flags)?,
            inner: Mutex::new(None),
        };
        if let Some(c) = cache {
            d.init(py, c, 0, None, threads, progress)?;
        }
        Ok(d)
    }

    /// Computes items `start_item .. start_item + item_count` (default: all) from `cache`.
    /// The whole dataset is built on `threads` threads (default: every core), calling
    /// `progress(done_items, total_items)` as chunks finish.
    #[pyo3(signature = (cache, start_item = 0, item_count = None, threads = None, progress = None))]
    fn init(
        &self,
        py: Python<'_>,
        cache: &PyCache,
        start_item: u64,
        item_count: Option<u64>,
        threads: Option<usize>,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let cache = cache.get(py)?;
        let count = item_count.unwrap_or(DATASET_ITEM_COUNT.saturating_sub(start_item));
        let threads =
            threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        if threads == 0 {
            return Err(PyValueError::new_err("threads must be at least 1"));
        }
        let (flags, inner) = (self.flags, &self.inner);
        // The first exception raised by the progress callback, re-raised after the build.
        let callback_error: Mutex<Option<PyErr>> = Mutex::new(None);
        let result = detached(py, || -> Result<(), Option<Error>> {
            let mut slot = lock(inner);
            if slot.is_none() {
                *slot = Some(Arc::new(Dataset::alloc(pages(flags))?));
            }
            // `None`: VMs share this dataset, so it cannot be written.
            let d = slot.as_mut().and_then(Arc::get_mut).ok_or(None)?;
            if start_item == 0 && count == DATASET_ITEM_COUNT {
                let report = |done: u64, total: u64| {
                    if let Some(cb) = &progress {
                        Python::attach(|py| {
                            if let Err(e) = cb.call1(py, (done, total)) {
                                lock(&callback_error).get_or_insert(e);
                            }
                        });
                    }
                };
                Ok(d.init_parallel(&cache, threads, &report)?)
            } else {
                d.init_range(&cache, start_item, count)?;
                if let Some(cb) = &progress {
                    Python::attach(|py| {
                        if let Err(e) = cb.call1(py, (count, count)) {
                            lock(&callback_error).get_or_insert(e);
                        }
                    });
                }
                Ok(())
            }
        })?;
        match result {
            Err(None) => Err(error(
                py,
                "RandomxError",
                "this Dataset is in use by a VM: drop the VM(s) or create a new Dataset".into(),
                "InUse",
                &[],
            )),
            Err(Some(e)) => Err(rx_error(py, e)),
            Ok(()) => match lock(&callback_error).take() {
                Some(e) => Err(e),
                None => Ok(()),
            },
        }
    }

    #[getter]
    fn flags(&self) -> u32 {
        self.flags
    }

    fn __repr__(&self) -> String {
        let state = if lock(&self.inner).is_some() {
            "allocated"
        } else {
            "unallocated"
        };
        format!("Dataset(flags={}, {state})", self.flags)
    }
}

#[pyclass(module = "proofkit.randomx", name = "VM", frozen)]
pub struct PyVm {
    flags: u32,
    inner: Mutex<Vm>,
}

fn source(
    py: Python<'_>,
    flags: u32,
    cache: Option<&PyCache>,
    dataset: Option<&PyDataset>,
) -> PyResult<DatasetSource> {
    if flags & FLAG_FULL_MEM != 0 {
        let d = dataset
            .and_then(|d| lock(&d.inner).clone())
            .ok_or_else(|| {
                error(
                    py,
                    "RandomxError",
                    "FLAG_FULL_MEM needs an initialised dataset".into(),
                    "NoDataset",
                    &[],
                )
            })?;
        Ok(DatasetSource::Fast(d))
    } else {
        let c = cache.ok_or_else(|| {
            error(
                py,
                "RandomxError",
                "a light-mode VM needs a cache (or pass FLAG_FULL_MEM and a dataset)".into(),
                "CacheNotInitialized",
                &[],
            )
        })?;
        Ok(DatasetSource::Light(c.get(py)?))
    }
}

impl PyVm {
    /// The hash of `input` (for the benchmark helper below).
    fn hash_bytes(&self, input: &[u8]) -> [u8; 32] {
        lock(&self.inner).hash(input)
    }
}

#[pymethods]
impl PyVm {
    #[new]
    #[pyo3(signature = (flags = 0, cache = None, dataset = None))]
    fn new(
        py: Python<'_>,
        flags: u32,
        cache: Option<&PyCache>,
        dataset: Option<&PyDataset>,
    ) -> PyResult<Self> {
        let flags = check_flags(flags)?;
        let src = source(py, flags, cache, dataset)?;
        let vm = Vm::new(src, vm_options(flags)).map_err(|e| rx_error(py, e))?;
        Ok(PyVm {
            flags,
            inner: Mutex::new(vm),
        })
    }

    /// Points a light-mode VM at `cache` (call it after re-keying the cache).
    fn set_cache(&self, py: Python<'_>, cache: &PyCache) -> PyResult<()> {
        let c = cache.get(py)?;
        lock(&self.inner)
            .set_source(DatasetSource::Light(c))
            .map_err(|e| rx_error(py, e))
    }

    /// Points a fast-mode VM at `dataset`.
    fn set_dataset(&self, py: Python<'_>, dataset: &PyDataset) -> PyResult<()> {
        let src = source(py, FLAG_FULL_MEM, None, Some(dataset))?;
        lock(&self.inner)
            .set_source(src)
            .map_err(|e| rx_error(py, e))
    }

    /// The 32-byte RandomX hash of `input`.
    fn hash<'py>(
        &self,
        py: Python<'py>,
        input: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let input = bytes_arg(input, "input")?;
        let inner = &self.inner;
        let out = detached(py, || lock(inner).hash(&input))?;
        Ok(PyBytes::new(py, &out))
    }

    /// Batch API: starts hashing `input` (the result comes from `hash_next`/`hash_last`).
    fn hash_first(&self, py: Python<'_>, input: &Bound<'_, PyAny>) -> PyResult<()> {
        let input = bytes_arg(input, "input")?;
        let inner = &self.inner;
        detached(py, || lock(inner).hash_first(&input))
    }

    /// Batch API: returns the pending hash and starts hashing `input`.
    fn hash_next<'py>(
        &self,
        py: Python<'py>,
        input: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let input = bytes_arg(input, "input")?;
        let inner = &self.inner;
        let out = detached(py, || lock(inner).hash_next(&input))?.map_err(|e| rx_error(py, e))?;
        Ok(PyBytes::new(py, &out))
    }

    /// Batch API: returns the pending hash.
    fn hash_last<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let inner = &self.inner;
        let out = detached(py, || lock(inner).hash_last())?.map_err(|e| rx_error(py, e))?;
        Ok(PyBytes::new(py, &out))
    }

    #[getter]
    fn flags(&self) -> u32 {
        self.flags
    }

    /// True for RandomX v2.
    #[getter]
    fn v2(&self) -> bool {
        lock(&self.inner).version() == Version::V2
    }

    /// True in fast mode (reading a dataset).
    #[getter]
    fn fast(&self) -> bool {
        matches!(lock(&self.inner).source(), DatasetSource::Fast(_))
    }

    /// True when programs run as compiled machine code.
    #[getter]
    fn uses_jit(&self) -> bool {
        lock(&self.inner).uses_jit()
    }

    fn __repr__(&self) -> String {
        format!(
            "VM(flags={}, {}, {})",
            self.flags,
            if self.fast() { "fast" } else { "light" },
            if self.v2() { "v2" } else { "v1" }
        )
    }
}

fn vm_options(flags: u32) -> VmOptions {
    VmOptions {
        version: version(flags),
        aes: if flags & FLAG_HARD_AES != 0 {
            Aes::detect()
        } else {
            Aes::Software
        },
        pages: pages(flags),
        jit: flags & FLAG_JIT != 0,
        secure: flags & FLAG_SECURE != 0,
        ..Default::default()
    }
}

/// Several light-mode VMs hashing a list of inputs together on one thread (their dataset items
/// computed in vector lanes): about twice one VM's throughput, each hash no sooner.
#[pyclass(module = "proofkit.randomx", name = "LightBatch", frozen)]
pub struct PyLightBatch {
    flags: u32,
    inner: Mutex<LightBatch>,
}

#[pymethods]
impl PyLightBatch {
    #[new]
    #[pyo3(signature = (flags, cache, vms = LIGHT_BATCH_VMS))]
    fn new(py: Python<'_>, flags: u32, cache: &PyCache, vms: usize) -> PyResult<Self> {
        let flags = check_flags(flags)?;
        if flags & FLAG_FULL_MEM != 0 {
            return Err(PyValueError::new_err(
                "LightBatch is light mode: FLAG_FULL_MEM does not apply",
            ));
        }
        let batch =
            LightBatch::new(cache.get(py)?, vm_options(flags), vms).map_err(|e| rx_error(py, e))?;
        Ok(PyLightBatch {
            flags,
            inner: Mutex::new(batch),
        })
    }

    /// The 32-byte RandomX hash of every input, in order.
    fn hash_many<'py>(
        &self,
        py: Python<'py>,
        inputs: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let inputs = inputs
            .iter()
            .map(|i| bytes_arg(i, "input"))
            .collect::<PyResult<Vec<_>>>()?;
        let inner = &self.inner;
        let out = detached(py, || lock(inner).hash_many(&inputs))?;
        Ok(out.iter().map(|h| PyBytes::new(py, h)).collect())
    }

    /// VMs in the batch (inputs hashed at once).
    #[getter]
    fn vms(&self) -> usize {
        lock(&self.inner).vms()
    }

    #[getter]
    fn flags(&self) -> u32 {
        self.flags
    }

    fn __repr__(&self) -> String {
        format!("LightBatch(flags={}, vms={})", self.flags, self.vms())
    }
}

/// The most recently used caches of the one-call helpers (Monero keeps two: the current and
/// the next seed).
static RECENT: Mutex<Vec<(Vec<u8>, Arc<Cache>)>> = Mutex::new(Vec::new());
const RECENT_KEYS: usize = 2;

fn cache_for(key: &[u8]) -> Result<Arc<Cache>, Error> {
    let mut recent = lock(&RECENT);
    if let Some(i) = recent.iter().position(|(k, _)| k == key) {
        let hit = recent.remove(i);
        let c = hit.1.clone();
        recent.insert(0, hit);
        return Ok(c);
    }
    // Build outside the lock? Two threads asking for one new key would build it twice; the
    // helpers are for occasional calls, so simplicity wins.
    let c = Arc::new(Cache::new(key, PagePolicy::Transparent)?);
    recent.insert(0, (key.to_vec(), c.clone()));
    recent.truncate(RECENT_KEYS);
    Ok(c)
}

/// One-call light-mode hash of `data` under `key` (v1, or v2 with `v2=True`). The caches of
/// the two most recent keys are kept.
#[pyfunction]
#[pyo3(signature = (key, data, v2 = false))]
fn hash<'py>(
    py: Python<'py>,
    key: &Bound<'py, PyAny>,
    data: &Bound<'py, PyAny>,
    v2: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let key = bytes_arg(key, "key")?;
    let data = bytes_arg(data, "data")?;
    let v = if v2 { Version::V2 } else { Version::V1 };
    let out = detached(py, || -> Result<[u8; 32], Error> {
        let mut vm = Vm::light(cache_for(&key)?, v)?;
        Ok(vm.hash(&data))
    })?
    .map_err(|e| rx_error(py, e))?;
    Ok(PyBytes::new(py, &out))
}

/// Benchmark helper: hashes `data` `count` times on `vm` from Rust (no Python per call) and
/// returns `(wall_ns, thread_cpu_ns)` of each call, so that `python/bench` can set the cost of
/// a call from Python against the cost of the Rust API itself, on the same VM in one process.
#[pyfunction]
fn _rust_hash_loop(
    py: Python<'_>,
    vm: &PyVm,
    data: &Bound<'_, PyAny>,
    count: usize,
) -> PyResult<Vec<(u64, u64)>> {
    let data = bytes_arg(data, "data")?;
    let cpu = || proofkit_core::cputime::thread_cpu_time().map_or(0, |d| d.as_nanos() as u64);
    detached(py, || {
        (0..count)
            .map(|_| {
                let (c0, t) = (cpu(), std::time::Instant::now());
                std::hint::black_box(vm.hash_bytes(std::hint::black_box(&data)));
                (t.elapsed().as_nanos() as u64, cpu() - c0)
            })
            .collect()
    })
}

/// Benchmark helper: `VM.hash` that also returns the wall and thread-CPU nanoseconds spent
/// inside `Vm::hash`, so that the binding's own cost per call (argument conversion, GIL
/// release and re-acquisition, the result object) is the caller's timing of the call minus
/// these, free of the hash's own variation.
#[pyfunction]
fn _hash_timed<'py>(
    py: Python<'py>,
    vm: &PyVm,
    input: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyBytes>, u64, u64)> {
    let input = bytes_arg(input, "input")?;
    let cpu = || proofkit_core::cputime::thread_cpu_time().map_or(0, |d| d.as_nanos() as u64);
    let (out, wall, cpu_ns) = detached(py, || {
        let (c0, t) = (cpu(), std::time::Instant::now());
        let out = vm.hash_bytes(&input);
        (out, t.elapsed().as_nanos() as u64, cpu() - c0)
    })?;
    Ok((PyBytes::new(py, &out), wall, cpu_ns))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for (name, v) in [
        ("FLAG_DEFAULT", FLAG_DEFAULT),
        ("FLAG_LARGE_PAGES", FLAG_LARGE_PAGES),
        ("FLAG_HARD_AES", FLAG_HARD_AES),
        ("FLAG_FULL_MEM", FLAG_FULL_MEM),
        ("FLAG_JIT", FLAG_JIT),
        ("FLAG_SECURE", FLAG_SECURE),
        ("FLAG_ARGON2_SSSE3", FLAG_ARGON2_SSSE3),
        ("FLAG_ARGON2_AVX2", FLAG_ARGON2_AVX2),
        ("FLAG_ARGON2", FLAG_ARGON2),
        ("FLAG_V2", FLAG_V2),
    ] {
        m.add(name, v)?;
    }
    m.add_class::<PyCache>()?;
    m.add_class::<PyDataset>()?;
    m.add_class::<PyVm>()?;
    m.add_class::<PyLightBatch>()?;
    m.add_function(wrap_pyfunction!(get_flags, m)?)?;
    m.add_function(wrap_pyfunction!(dataset_item_count, m)?)?;
    m.add_function(wrap_pyfunction!(commitment, m)?)?;
    m.add_function(wrap_pyfunction!(hash, m)?)?;
    m.add_function(wrap_pyfunction!(_rust_hash_loop, m)?)?;
    m.add_function(wrap_pyfunction!(_hash_timed, m)?)?;
    Ok(())
}
