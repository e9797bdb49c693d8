//! `proofkit randomx hash | bench`: RandomX hashes from the command line and the benchmark
//! beside the reference librandomx.
//!
//! Each benchmark measurement runs in a child process (`proofkit randomx bench-one`, hidden) so
//! that peak RSS/USS belong to one implementation and one configuration only.

use crate::util::{emit, progress_bar, text_or_hex, CliResult, ExitCode};
use clap::{Subcommand, ValueEnum};
use proofkit_core::peak;
use proofkit_core::report::{median, Report};
use proofkit_randomx::peer::{LibRandomx, FLAG_FULL_MEM, FLAG_LARGE_PAGES, FLAG_V2};
use proofkit_randomx::{
    Aes, Cache, Dataset, DatasetSource, LightBatch, PageKind, PagePolicy, Version, Vm, VmOptions,
    LIGHT_BATCH_VMS,
};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the RandomX hash of an input under a key, as hex on one line
    Hash(HashArgs),
    /// Hash rate, cache and dataset initialisation beside the system librandomx
    Bench(BenchArgs),
    /// Mine: solo against monerod, on stratum pools, or nonces of one fixed blob
    Mine(Box<crate::randomx_mine::MineArgs>),
    /// The design document's analyses: tables, JSON and plots (chain, pipeline, runtime, ...)
    Analyze(crate::randomx_analyze::AnalyzeArgs),
    /// One measurement in this process (used by `bench`; prints one JSON object)
    #[command(hide = true)]
    BenchOne(BenchOneArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Pages {
    /// 4 KiB pages only
    Small,
    /// Transparent huge pages via madvise (no configuration needed)
    Thp,
    /// Reserved hugetlb pages (1 GiB ones for the dataset when three are free, else 2 MiB ones
    /// from vm.nr_hugepages), else THP, else 4 KiB
    Hugetlb,
}

impl Pages {
    pub(crate) fn policy(self) -> PagePolicy {
        match self {
            Pages::Small => PagePolicy::SmallOnly,
            Pages::Thp => PagePolicy::Transparent,
            Pages::Hugetlb => PagePolicy::HugetlbFirst,
        }
    }
}

#[derive(clap::Args)]
struct HashArgs {
    /// Key as text
    #[arg(long)]
    key: Option<String>,
    /// Key as hex
    #[arg(long)]
    key_hex: Option<String>,
    /// Input as text
    #[arg(long)]
    input: Option<String>,
    /// Input as hex
    #[arg(long)]
    input_hex: Option<String>,
    /// RandomX v2 (RANDOMX_FLAG_V2)
    #[arg(long)]
    v2: bool,
    /// Fast mode: build the 2080 MiB dataset first (light mode otherwise)
    #[arg(long)]
    fast: bool,
    /// Threads for the dataset build
    #[arg(long, default_value_t = default_threads())]
    threads: usize,
    /// Page size for cache, dataset and scratchpad
    #[arg(long, value_enum, default_value_t = Pages::Thp)]
    pages: Pages,
    /// Use software AES even where the CPU has AES-NI
    #[arg(long)]
    soft_aes: bool,
    /// Print page sizes, AES path and timings on stderr
    #[arg(long, short)]
    verbose: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    Light,
    Fast,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// light (256 MiB cache) or fast (2080 MiB dataset)
    #[arg(long, value_enum, default_value_t = Mode::Light)]
    mode: Mode,
    /// Hashing threads (one VM each)
    #[arg(long, default_value_t = default_threads())]
    threads: usize,
    /// Hashes per run (all threads together)
    #[arg(long)]
    hashes: Option<u64>,
    /// Repetitions per implementation; the table shows medians
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Also measure the system librandomx in the same run
    #[arg(long)]
    peer: bool,
    /// RandomX v2 (the Debian librandomx 1.1.10 has no v2: its row is then skipped)
    #[arg(long)]
    v2: bool,
    #[arg(long, value_enum, default_value_t = Pages::Thp)]
    pages: Pages,
    /// One JSON object instead of a table
    #[arg(long)]
    json: bool,
    /// xmrig's benchmark hash sum over 1M, 250K or N nonces instead (one thread: the chained
    /// variant); compare with xmrig's published table
    #[arg(long)]
    xmrig: Option<String>,
}

#[derive(clap::Args)]
struct BenchOneArgs {
    #[arg(long)]
    implementation: String,
    #[arg(long, value_enum)]
    mode: Mode,
    #[arg(long)]
    threads: usize,
    #[arg(long)]
    hashes: u64,
    #[arg(long)]
    v2: bool,
    #[arg(long, value_enum)]
    pages: Pages,
}

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

pub fn run(args: Args) -> CliResult {
    match args.cmd {
        Cmd::Hash(a) => hash(a),
        Cmd::Bench(a) => bench(a),
        Cmd::Mine(a) => crate::randomx_mine::mine(*a),
        Cmd::Analyze(a) => crate::randomx_analyze::run(a),
        Cmd::BenchOne(a) => {
            let v = match a.implementation.as_str() {
                "proofkit" | LIGHT_BATCH_IMPL => bench_proofkit(&a)?,
                "librandomx" => bench_peer(&a)?,
                other => return Err(format!("unknown implementation {other}").into()),
            };
            println!("{v}");
            Ok(())
        }
    }
}

fn version(v2: bool) -> Version {
    if v2 {
        Version::V2
    } else {
        Version::V1
    }
}

/// Builds the dataset with a progress bar on a terminal.
pub(crate) fn build_dataset(
    cache: &Cache,
    pages: Pages,
    threads: usize,
    quiet: bool,
) -> Result<Dataset, proofkit_randomx::Error> {
    let pb = progress_bar(
        proofkit_randomx::config::DATASET_ITEM_COUNT,
        "dataset",
        quiet,
    );
    let d = Dataset::build(cache, pages.policy(), threads, &|done, _| {
        pb.set_position(done)
    });
    pb.finish_and_clear();
    d
}

fn hash(a: HashArgs) -> CliResult {
    let key = text_or_hex("key", &a.key, &a.key_hex)?;
    let input = text_or_hex("input", &a.input, &a.input_hex)?;
    let t0 = Instant::now();
    let cache = Arc::new(Cache::new(&key, a.pages.policy())?);
    let cache_s = t0.elapsed().as_secs_f64();
    let cache_pages = cache.page_kind();
    let aes = if a.soft_aes {
        Aes::Software
    } else {
        Aes::detect()
    };
    let (source, dataset_info) = if a.fast {
        let t1 = Instant::now();
        let d = build_dataset(&cache, a.pages, a.threads, !a.verbose)?;
        let info = format!(
            "dataset {} pages, built in {:.2} s on {} threads",
            d.page_kind(),
            t1.elapsed().as_secs_f64(),
            a.threads
        );
        drop(cache);
        (DatasetSource::Fast(Arc::new(d)), Some(info))
    } else {
        (DatasetSource::Light(cache.clone()), None)
    };
    let mut vm = Vm::new(
        source,
        VmOptions {
            version: version(a.v2),
            aes,
            pages: a.pages.policy(),
            ..Default::default()
        },
    )?;
    let t2 = Instant::now();
    let h = vm.hash(&input);
    if a.verbose {
        eprintln!(
            "mode: {}, version: {:?}, AES: {}",
            if a.fast { "fast" } else { "light" },
            vm.version(),
            aes.name()
        );
        eprintln!("cache: {cache_pages} pages, initialised in {cache_s:.3} s");
        if let Some(i) = dataset_info {
            eprintln!("{i}");
        }
        eprintln!(
            "scratchpad: {} pages; hash took {:.2} ms",
            vm.scratchpad_pages(),
            t2.elapsed().as_secs_f64() * 1e3
        );
    }
    println!("{}", hex::encode(h));
    Ok(())
}

fn default_hashes(mode: Mode, threads: usize) -> u64 {
    match mode {
        // The batch row's four VMs per thread fault in their scratchpads and JIT pages during
        // their first hashes (~12 ms per VM on THP here): a run of a few hashes understates it.
        Mode::Light => 32 * threads as u64,
        Mode::Fast => 500 * threads as u64,
    }
}

/// Runs `hashes` hashes on `threads` threads, each with its own VM built by `make_vm`, and
/// returns the wall time and the number of hashes done (whole rounds of `threads`). Inputs are
/// distinct 76-byte blobs (a Monero block header's size).
/// One call of the batch API (`hash_first`, `hash_next`, `hash_last`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Batch {
    First,
    Next,
    Last,
}

/// Hashes `hashes` inputs on `threads` pinned threads through the batch API (as miners run):
/// per thread one `First`, then `Next` for every further input, then `Last`. Returns the
/// wall time and the number of hashes completed.
fn run_threads<V: Send>(
    threads: usize,
    hashes: u64,
    make_vm: impl Fn(usize) -> V + Sync,
    hash: impl Fn(&mut V, &[u8], Batch) + Sync,
) -> (f64, u64) {
    let per = hashes.div_ceil(threads as u64).max(1);
    let vms: Vec<V> = (0..threads).map(&make_vm).collect();
    let t = Instant::now();
    std::thread::scope(|s| {
        for (i, mut vm) in vms.into_iter().enumerate() {
            let hash = &hash;
            s.spawn(move || {
                proofkit_core::affinity::pin_current_thread(i);
                for n in 0..per {
                    let step = if n == 0 { Batch::First } else { Batch::Next };
                    hash(&mut vm, &bench_blob(i, n), step);
                }
                hash(&mut vm, &[], Batch::Last);
            });
        }
    });
    (t.elapsed().as_secs_f64(), per * threads as u64)
}

/// Input `n` of benchmark thread `thread`: a 76-byte blob (a Monero block header's size), the
/// thread in its first byte and `n` where a miner's nonce would be. Both runners hash these.
fn bench_blob(thread: usize, n: u64) -> [u8; 76] {
    let mut blob = [0u8; 76];
    blob[0] = thread as u8;
    blob[39..47].copy_from_slice(&n.to_le_bytes());
    blob
}

/// The light-mode row with a [`LightBatch`] of [`LIGHT_BATCH_VMS`] VMs per thread.
const LIGHT_BATCH_IMPL: &str = "proofkit-batch";

/// Hashes `hashes` inputs on `threads` pinned threads, each hashing its share through one
/// `LightBatch` in calls of `per_call` inputs (the blobs `run_threads` uses). Returns the wall
/// time and the number of hashes.
fn run_batches(
    threads: usize,
    hashes: u64,
    per_call: usize,
    make_batch: impl Fn() -> LightBatch,
) -> (f64, u64) {
    let per = hashes.div_ceil(threads as u64).max(1);
    let batches: Vec<LightBatch> = (0..threads).map(|_| make_batch()).collect();
    let t = Instant::now();
    std::thread::scope(|s| {
        for (i, mut batch) in batches.into_iter().enumerate() {
            s.spawn(move || {
                proofkit_core::affinity::pin_current_thread(i);
                let blobs: Vec<[u8; 76]> = (0..per).map(|n| bench_blob(i, n)).collect();
                for call in blobs.chunks(per_call) {
                    std::hint::black_box(batch.hash_many(call));
                }
            });
        }
    });
    (t.elapsed().as_secs_f64(), per * threads as u64)
}

fn bench_proofkit(a: &BenchOneArgs) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
    let uss = peak::UssSampler::start(std::time::Duration::from_millis(20));
    let key = b"proofkit benchmark key";
    let t0 = Instant::now();
    let cache = Arc::new(Cache::new(key, a.pages.policy())?);
    let cache_s = t0.elapsed().as_secs_f64();
    let (source, dataset_s, pages) = match a.mode {
        Mode::Light => (DatasetSource::Light(cache.clone()), None, cache.page_kind()),
        Mode::Fast => {
            let t1 = Instant::now();
            let d = Dataset::build(&cache, a.pages.policy(), a.threads, &|_, _| {})?;
            let s = t1.elapsed().as_secs_f64();
            let k = d.page_kind();
            (DatasetSource::Fast(Arc::new(d)), Some(s), k)
        }
    };
    drop(cache);
    let aes = Aes::detect();
    let opts = VmOptions {
        version: version(a.v2),
        aes,
        pages: a.pages.policy(),
        ..Default::default()
    };
    let (secs, hashes) = match &source {
        DatasetSource::Light(cache) if a.implementation == LIGHT_BATCH_IMPL => {
            run_batches(a.threads, a.hashes, 4 * LIGHT_BATCH_VMS, || {
                LightBatch::new(cache.clone(), opts, LIGHT_BATCH_VMS).expect("light batch")
            })
        }
        _ => run_threads(
            a.threads,
            a.hashes,
            |_| Vm::new(source.clone(), opts).expect("vm"),
            |vm, b, step| match step {
                Batch::First => vm.hash_first(b),
                Batch::Next => {
                    std::hint::black_box(vm.hash_next(b).expect("batch started"));
                }
                Batch::Last => {
                    std::hint::black_box(vm.hash_last().expect("batch started"));
                }
            },
        ),
    };
    Ok(json!({
        "impl": a.implementation,
        "cache_init_s": cache_s,
        "dataset_init_s": dataset_s,
        "hashes": hashes,
        "seconds": secs,
        "pages": pages.to_string(),
        "aes": aes.name(),
        "peak_rss_kb": peak::peak_rss_kb(),
        "peak_uss_kb": uss.finish(),
    }))
}

fn bench_peer(a: &BenchOneArgs) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
    let uss = peak::UssSampler::start(std::time::Duration::from_millis(20));
    let lib = LibRandomx::load()?;
    let mut flags = lib.recommended_flags();
    if a.v2 {
        flags |= FLAG_V2;
    }
    let mut pages = PageKind::Small4K;
    if a.pages == Pages::Hugetlb {
        flags |= FLAG_LARGE_PAGES;
        pages = PageKind::Hugetlb2M;
    }
    let key = b"proofkit benchmark key";
    let t0 = Instant::now();
    let cache = match lib.cache(flags, key) {
        Some(c) => c,
        None if flags & FLAG_LARGE_PAGES != 0 => {
            // The reference returns NULL when hugetlb pages are not reserved: retry with 4 KiB.
            flags &= !FLAG_LARGE_PAGES;
            pages = PageKind::Small4K;
            lib.cache(flags, key)
                .ok_or("librandomx: cannot allocate cache")?
        }
        None => return Err("librandomx: cannot allocate cache".into()),
    };
    let cache_s = t0.elapsed().as_secs_f64();
    let mut dataset = None;
    let mut dataset_s = None;
    if a.mode == Mode::Fast {
        flags |= FLAG_FULL_MEM;
        let t1 = Instant::now();
        dataset = Some(
            lib.dataset(flags, &cache, a.threads)
                .ok_or("librandomx: cannot allocate dataset")?,
        );
        dataset_s = Some(t1.elapsed().as_secs_f64());
    }
    let (secs, hashes) = run_threads(
        a.threads,
        a.hashes,
        |_| {
            lib.vm(flags, Some(&cache), dataset.as_ref())
                .expect("librandomx vm")
        },
        |vm, b, step| match step {
            Batch::First => vm.hash_first(b),
            Batch::Next => {
                std::hint::black_box(vm.hash_next(b));
            }
            Batch::Last => {
                std::hint::black_box(vm.hash_last());
            }
        },
    );
    Ok(json!({
        "impl": "librandomx",
        "cache_init_s": cache_s,
        "dataset_init_s": dataset_s,
        "hashes": hashes,
        "seconds": secs,
        "pages": pages.to_string(),
        "aes": if flags & proofkit_randomx::peer::FLAG_HARD_AES != 0 { "hardware (AES-NI)" } else { "software" },
        "flags": flags,
        "path": lib.path,
        "peak_rss_kb": peak::peak_rss_kb(),
        "peak_uss_kb": uss.finish(),
    }))
}

/// Runs one measurement in a child process and parses its JSON.
fn measure_child(
    implementation: &str,
    mode: Mode,
    threads: usize,
    hashes: u64,
    v2: bool,
    pages: Pages,
) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
    let exe = std::env::current_exe()?;
    let mode_s = format!("{mode:?}").to_lowercase();
    let pages_s = format!("{pages:?}").to_lowercase();
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        "randomx",
        "bench-one",
        "--implementation",
        implementation,
        "--mode",
        &mode_s,
        "--pages",
        &pages_s,
    ]);
    cmd.args([
        "--threads",
        &threads.to_string(),
        "--hashes",
        &hashes.to_string(),
    ]);
    if v2 {
        cmd.arg("--v2");
    }
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!(
            "{implementation} benchmark failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Measures each implementation `runs` times (interleaved, so drift affects both alike) and
/// reports medians.
fn bench_report(
    mode: Mode,
    threads: usize,
    hashes: u64,
    runs: usize,
    v2: bool,
    pages: Pages,
    peer: bool,
    quiet: bool,
) -> Result<Report, Box<dyn std::error::Error + Send + Sync>> {
    let mut impls = vec!["proofkit"];
    if mode == Mode::Light {
        impls.push(LIGHT_BATCH_IMPL);
    }
    let mut report = Report::new(
        "randomx",
        &[
            "impl",
            "mode",
            "version",
            "threads",
            "pages",
            "AES",
            "Cache init (s)",
            "Dataset init (s)",
            "H/s",
            "ms/hash",
            "Peak RSS (kB)",
            "Peak USS (MB)",
        ],
    );
    if peer {
        match LibRandomx::load() {
            Ok(_) if v2 => report.note(
                "librandomx",
                "skipped: the system librandomx has no RandomX v2",
            ),
            Ok(_) => impls.push("librandomx"),
            Err(e) => report.note("librandomx", format!("skipped: {e}")),
        }
    }
    let mut samples: Vec<Vec<Value>> = vec![Vec::new(); impls.len()];
    let pb = progress_bar((runs * impls.len()) as u64, "randomx bench", quiet);
    for _ in 0..runs {
        for (i, name) in impls.iter().enumerate() {
            samples[i].push(measure_child(name, mode, threads, hashes, v2, pages)?);
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    for (name, s) in impls.iter().zip(&samples) {
        let med = |f: &dyn Fn(&Value) -> Option<f64>| -> Option<f64> {
            let xs: Vec<f64> = s.iter().filter_map(f).collect();
            (!xs.is_empty()).then(|| median(&xs))
        };
        let hps =
            med(&|v| Some(v["hashes"].as_f64()? / v["seconds"].as_f64()?)).unwrap_or(f64::NAN);
        let ms =
            med(&|v| Some(v["seconds"].as_f64()? * 1e3 * threads as f64 / v["hashes"].as_f64()?))
                .unwrap_or(f64::NAN);
        report.push(vec![
            ("impl", json!(name)),
            ("mode", json!(format!("{mode:?}").to_lowercase())),
            ("version", json!(if v2 { "v2" } else { "v1" })),
            ("threads", json!(threads)),
            ("pages", s[0]["pages"].clone()),
            ("AES", s[0]["aes"].clone()),
            (
                "Cache init (s)",
                json!(med(&|v| v["cache_init_s"].as_f64())),
            ),
            (
                "Dataset init (s)",
                json!(med(&|v| v["dataset_init_s"].as_f64())),
            ),
            ("H/s", json!(hps)),
            ("ms/hash", json!(ms)),
            (
                "Peak RSS (kB)",
                json!(med(&|v| v["peak_rss_kb"].as_f64()).map(|x| x as u64)),
            ),
            (
                "Peak USS (MB)",
                json!(med(&|v| v["peak_uss_kb"].as_f64()).map(|x| x / 1024.0)),
            ),
        ]);
        report.rows.last_mut().expect("just pushed").insert(
            "peak_rss_kb".into(),
            json!(med(&|v| v["peak_rss_kb"].as_f64()).map(|x| x as u64)),
        );
    }
    report.note("runs", runs as u64);
    report.note("hashes_per_run", hashes);
    report.note("cpu", proofkit_core::cpu::model_name());
    Ok(report)
}

fn bench(a: BenchArgs) -> CliResult {
    if let Some(n) = &a.xmrig {
        return crate::randomx_mine::xmrig_bench(n, a.threads, a.mode == Mode::Light, a.pages);
    }
    if a.threads == 0 || a.runs == 0 {
        return Err(ExitCode(2, "--threads and --runs must be at least 1".into()).into());
    }
    let hashes = a
        .hashes
        .unwrap_or_else(|| default_hashes(a.mode, a.threads));
    let report = bench_report(
        a.mode, a.threads, hashes, a.runs, a.v2, a.pages, a.peer, a.json,
    )?;
    emit(
        &report,
        a.json,
        &format!("RandomX {:?} mode, {} thread(s)", a.mode, a.threads),
    );
    let components = component_report(&report, a.peer)?;
    emit(
        &components,
        a.json,
        "RandomX components (the design document's benchmark table)",
    );
    Ok(())
}

/// The RandomX part of `proofkit bench`: light mode on all threads beside the reference.
pub fn main_bench(json: bool) -> CliResult {
    let threads = default_threads();
    let report = bench_report(
        Mode::Light,
        threads,
        32 * threads as u64,
        3,
        false,
        Pages::Thp,
        true,
        json,
    )?;
    emit(
        &report,
        json,
        &format!("RandomX light mode, {threads} thread(s)"),
    );
    let components = component_report(&report, true)?;
    emit(
        &components,
        json,
        "RandomX components (the design document's benchmark table)",
    );
    Ok(())
}

/// Operations per second of `f`: repeated for at least `min_secs`, median of three runs.
fn rate(mut f: impl FnMut(), min_secs: f64) -> f64 {
    let mut rates = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut n = 0u64;
        while n == 0 || t.elapsed().as_secs_f64() < min_secs {
            f();
            n += 1;
        }
        rates.push(n as f64 / t.elapsed().as_secs_f64());
    }
    median(&rates)
}

const MIB: f64 = 1048576.0;

/// The component table of the design document's benchmark (seed 004): one thread each, except
/// the Dataset column (all threads, fast mode only) and Hash (from the mode benchmark).
fn component_report(
    hash_rows: &Report,
    peer: bool,
) -> Result<Report, Box<dyn std::error::Error + Send + Sync>> {
    use proofkit_randomx::blake;
    let cols = [
        "impl",
        "Hash [H/s]",
        "Blake2b [H/s]",
        "Blake2bLong [H/s]",
        "Argon2d [MB/s]",
        "Aes1R [MB/s]",
        "Aes4R [MB/s]",
        "AesHash1R [H/s]",
        "Superscalar [Prog/s]",
        "Dataset [MB/s]",
    ];
    let mut report = Report::new("randomx-components", &cols);
    let t = 0.3;
    let aes = Aes::detect();
    let input64 = [7u8; 64];
    let input72 = [9u8; 72];
    let mut out1024 = vec![0u8; 1024];
    let mut sp = vec![0u8; proofkit_randomx::config::SCRATCHPAD_L3];
    let mut prog = vec![0u8; 2176];
    let mut state = [1u8; 64];
    let hash_of = |name: &str| {
        hash_rows
            .rows
            .iter()
            .find(|r| r["impl"] == name)
            .map(|r| r["H/s"].clone())
            .unwrap_or(Value::Null)
    };
    let dataset_of = |name: &str| {
        hash_rows
            .rows
            .iter()
            .find(|r| r["impl"] == name)
            .and_then(|r| r["Dataset init (s)"].as_f64())
            .map(|s| json!(2080.0 / s))
            .unwrap_or(Value::Null)
    };
    // Argon2d: each side re-keys one allocation three times per round (as nodes do), the two
    // sides alternating for five rounds so that both see the same machine load; medians.
    let lib = if peer { LibRandomx::load().ok() } else { None };
    let mut cache = Cache::new(b"component bench 0", PagePolicy::Transparent)?;
    let mut peer_cache = match &lib {
        Some(lib) => Some(
            lib.cache(lib.recommended_flags(), b"component bench 0")
                .ok_or("librandomx: cannot allocate cache")?,
        ),
        None => None,
    };
    let (mut argon_ours, mut argon_peer) = (Vec::new(), Vec::new());
    let mut key = 0;
    for _round in 0..5 {
        let t0 = Instant::now();
        for _ in 0..3 {
            key += 1;
            cache.reinit(format!("component bench {key}").as_bytes())?;
        }
        argon_ours.push(256.0 * 3.0 / t0.elapsed().as_secs_f64());
        if let Some(c) = &mut peer_cache {
            let t0 = Instant::now();
            for k in 0..3 {
                c.reinit(format!("component bench {key} {k}").as_bytes());
            }
            argon_peer.push(256.0 * 3.0 / t0.elapsed().as_secs_f64());
        }
    }
    drop(peer_cache);
    let argon = median(&argon_ours);
    let mut gen = proofkit_randomx::blake::BlakeGenerator::new(b"superscalar bench", 0);
    report.push(vec![
        ("impl", json!("proofkit")),
        ("Hash [H/s]", hash_of("proofkit")),
        (
            "Blake2b [H/s]",
            json!(rate(
                || {
                    std::hint::black_box(blake::hash512(&input64));
                },
                t
            )),
        ),
        (
            "Blake2bLong [H/s]",
            json!(rate(|| blake::blake2b_long(&mut out1024, &input72), t)),
        ),
        ("Argon2d [MB/s]", json!(argon)),
        (
            "Aes1R [MB/s]",
            json!(rate(|| aes.fill_1r(&mut state, &mut sp), t) * sp.len() as f64 / MIB),
        ),
        (
            "Aes4R [MB/s]",
            json!(rate(|| aes.fill_4r(&mut state, &mut prog), t) * prog.len() as f64 / MIB),
        ),
        (
            "AesHash1R [H/s]",
            json!(rate(
                || {
                    std::hint::black_box(aes.hash_1r(&sp));
                },
                t
            )),
        ),
        (
            "Superscalar [Prog/s]",
            json!(rate(
                || {
                    std::hint::black_box(
                        proofkit_randomx::superscalar::SuperscalarProgram::generate(&mut gen),
                    );
                },
                t
            )),
        ),
        ("Dataset [MB/s]", dataset_of("proofkit")),
    ]);
    drop(cache);
    if peer {
        if let Some(lib) = &lib {
            let argon = median(&argon_peer);
            let mut out64 = [0u8; 64];
            let b2 = lib.blake2b(&mut out64, &input64).map(|_| {
                rate(
                    || {
                        lib.blake2b(&mut out64, &input64);
                    },
                    t,
                )
            });
            let b2l = lib.blake2b_long(&mut out1024, &input72).map(|_| {
                rate(
                    || {
                        lib.blake2b_long(&mut out1024, &input72);
                    },
                    t,
                )
            });
            report.push(vec![
                ("impl", json!("librandomx")),
                ("Hash [H/s]", hash_of("librandomx")),
                ("Blake2b [H/s]", json!(b2)),
                ("Blake2bLong [H/s]", json!(b2l)),
                ("Argon2d [MB/s]", json!(argon)),
                ("Dataset [MB/s]", dataset_of("librandomx")),
            ]);
            report.note("librandomx", "the AES generators and SuperscalarHash are not exported by the reference library: not measurable through it (---)");
        }
    }
    report.note(
        "threads",
        "1, except Dataset (all threads) and Hash (the mode benchmark above)",
    );
    report.note(
        "Argon2d",
        "256 MiB cache re-keyed in place (Argon2d fill plus SuperscalarHash generation), 3 keys per round, 5 rounds alternating between the implementations, median; default pages (THP for proofkit, 4 KiB for the reference)",
    );
    Ok(report)
}
