//! `proofkit randomx mine`: solo mining against monerod (`--daemon`), pool mining over stratum
//! (`--pool`, repeatable for failover), a JSON config file (`--config`), a read-only JSON API
//! (`--api-port`), or, with `--blob-hex`, a search of one fixed blob; and `randomx bench
//! --xmrig N`, xmrig's benchmark hash sum. The miner itself is the proofkit-miner crate.

use crate::randomx::Pages;
use crate::util::{progress_bar, text_or_hex, CliResult, ExitCode};
use proofkit_miner::config::{ApiConfig, DaemonConfig, MinerConfig};
use proofkit_miner::daemon::{run_solo, SoloConfig};
use proofkit_miner::engine::{Engine, EngineConfig, Mode};
use proofkit_miner::stats::{fmt_rate, Status};
use proofkit_miner::stratum::{run_pool, PoolConfig, StratumConfig};
use proofkit_miner::target::Target;
use proofkit_randomx::{Cache, DatasetSource, LightBatch, Version, Vm, VmOptions, LIGHT_BATCH_VMS};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct MineArgs {
    /// Solo mining: monerod's RPC, e.g. http://127.0.0.1:18081
    #[arg(long)]
    daemon: Option<String>,
    /// Solo mining: the address block rewards go to
    #[arg(long)]
    wallet: Option<String>,
    /// Pool mining: stratum+tcp://host:port or stratum+ssl://host:port; repeat for failover
    #[arg(long = "pool", short = 'o')]
    pools: Vec<String>,
    /// Pool login (usually the wallet address)
    #[arg(long, short = 'u', default_value = "x")]
    user: String,
    /// Pool password
    #[arg(long, short = 'p', default_value = "x")]
    pass: String,
    #[arg(long)]
    rig_id: Option<String>,
    /// SHA-256 of the pool's TLS certificate (pins a self-signed certificate)
    #[arg(long)]
    tls_fingerprint: Option<String>,
    /// JSON config file with the same settings (flags given as well override it)
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Serve the read-only JSON API on 127.0.0.1:PORT (GET /1/summary; 0 picks a free port)
    #[arg(long)]
    api_port: Option<u16>,
    /// Require `Authorization: Bearer TOKEN` on the API
    #[arg(long)]
    api_token: Option<String>,
    /// Seconds between hashrate lines
    #[arg(long)]
    print_time: Option<u64>,
    /// Key (seed hash) as text (fixed-blob search)
    #[arg(long)]
    key: Option<String>,
    /// Key (seed hash) as hex (fixed-blob search)
    #[arg(long)]
    key_hex: Option<String>,
    /// The hashing blob, hex (fixed-blob search)
    #[arg(long)]
    blob_hex: Option<String>,
    /// Byte offset of the 4-byte little-endian nonce in the blob (39 for Monero)
    #[arg(long, default_value_t = 39)]
    nonce_offset: usize,
    /// Target as pools send it: 4 bytes (8 hex digits) or 8 bytes (16 hex digits), little-endian;
    /// a hash meets it when its last 8 bytes, read little-endian, are below the 64-bit target
    #[arg(long)]
    target: Option<String>,
    /// Hashing threads (one VM each); default: all CPUs
    #[arg(long)]
    threads: Option<usize>,
    /// Light mode (no 2 GiB dataset; for verification-grade machines and tests)
    #[arg(long)]
    light: bool,
    #[arg(long)]
    v2: bool,
    /// Fixed-blob search: stop after this many results
    #[arg(long, default_value_t = 1)]
    count: usize,
    /// Give up after this many seconds (fixed-blob search: exit code 1 if short of --count)
    #[arg(long)]
    max_seconds: Option<f64>,
    /// Fixed-blob search: first nonce tried
    #[arg(long, default_value_t = 0)]
    start_nonce: u32,
    #[arg(long, value_enum)]
    pages: Option<Pages>,
}

fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

fn usage(msg: impl Into<String>) -> Box<dyn std::error::Error + Send + Sync> {
    ExitCode(2, msg.into()).into()
}

pub fn mine(a: MineArgs) -> CliResult {
    if a.daemon.is_some() || !a.pools.is_empty() || a.config.is_some() {
        return mine_network(a);
    }
    if a.blob_hex.is_none() {
        return Err(usage(
            "give --daemon URL --wallet ADDR, --pool URL, --config FILE, or --blob-hex with --target",
        ));
    }
    mine_blob(a)
}

fn pages_of(p: &str) -> Pages {
    match p {
        "small" => Pages::Small,
        "hugetlb" => Pages::Hugetlb,
        _ => Pages::Thp,
    }
}

/// The config file overridden by the flags.
fn merged_config(a: &MineArgs) -> Result<MinerConfig, Box<dyn std::error::Error + Send + Sync>> {
    let mut c = match &a.config {
        Some(p) => MinerConfig::load(p).map_err(|e| usage(e.to_string()))?,
        None => MinerConfig::default(),
    };
    if let Some(t) = a.threads {
        c.threads = Some(t);
    }
    if a.light {
        c.mode = Some(Mode::Light);
    }
    if let Some(p) = a.pages {
        c.pages = Some(format!("{p:?}").to_lowercase());
    }
    if let Some(t) = a.print_time {
        c.print_time = Some(t);
    }
    if let Some(url) = &a.daemon {
        let wallet = a
            .wallet
            .clone()
            .or_else(|| c.daemon.as_ref().map(|d| d.wallet.clone()))
            .ok_or_else(|| usage("--daemon needs --wallet ADDRESS"))?;
        c.daemon = Some(DaemonConfig {
            url: url.clone(),
            wallet,
            poll_ms: c.daemon.as_ref().and_then(|d| d.poll_ms),
        });
    } else if let (Some(w), Some(d)) = (&a.wallet, c.daemon.as_mut()) {
        d.wallet = w.clone();
    }
    if !a.pools.is_empty() {
        c.pools = a
            .pools
            .iter()
            .map(|url| PoolConfig {
                url: url.clone(),
                user: a.user.clone(),
                pass: a.pass.clone(),
                rig_id: a.rig_id.clone(),
                tls_fingerprint: a.tls_fingerprint.clone(),
            })
            .collect();
    }
    if a.api_port.is_some() || a.api_token.is_some() {
        let old = c.api.take();
        c.api = Some(ApiConfig {
            port: a.api_port.or(old.as_ref().map(|o| o.port)).unwrap_or(0),
            token: a.api_token.clone().or(old.and_then(|o| o.token)),
        });
    }
    c.check().map_err(|e| usage(e.to_string()))?;
    if c.daemon.is_none() && c.pools.is_empty() {
        return Err(usage("the config gives neither a daemon nor pools"));
    }
    Ok(c)
}

fn mine_network(a: MineArgs) -> CliResult {
    let c = merged_config(&a)?;
    let threads = c.threads.unwrap_or_else(default_threads);
    let mode = c.mode.unwrap_or(Mode::Fast);
    let pages = pages_of(c.pages.as_deref().unwrap_or("thp"));
    let print_time = Duration::from_secs(c.print_time.unwrap_or(10).max(1));
    let cpu = proofkit_core::cpu::features();
    eprintln!(
        " * ABOUT        proofkit-miner {}",
        env!("CARGO_PKG_VERSION")
    );
    eprintln!(
        " * CPU          {} (AES {}, {})",
        proofkit_core::cpu::model_name(),
        if proofkit_randomx::Aes::hardware().is_some() {
            "yes"
        } else {
            "no"
        },
        cpu.names().join(" ")
    );
    eprintln!(
        " * THREADS      {threads}, mode {}, pages {}",
        format!("{mode:?}").to_lowercase(),
        format!("{pages:?}").to_lowercase()
    );
    if let Some(d) = &c.daemon {
        eprintln!(" * DAEMON       {} (solo, wallet {})", d.url, d.wallet);
    }
    for (i, p) in c.pools.iter().enumerate() {
        eprintln!(" * POOL #{:<6} {} user {}", i + 1, p.url, p.user);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let engine = Arc::new(Engine::start(
        EngineConfig {
            threads,
            mode,
            pages: pages.policy(),
            pin: true,
        },
        tx,
    )?);
    let status = Arc::new(Status::new());
    let _api = match &c.api {
        Some(api) => {
            let (st, en) = (status.clone(), engine.clone());
            let server = proofkit_miner::api::serve(
                api.port,
                api.token.clone(),
                Arc::new(move || proofkit_miner::summary(&st, &en, threads)),
            )?;
            eprintln!(
                " * API          http://{}/1/summary{}",
                server.addr,
                if api.token.is_some() {
                    " (bearer token)"
                } else {
                    ""
                }
            );
            Some(server)
        }
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let printer = {
        let (st, en, stop) = (status.clone(), engine.clone(), stop.clone());
        std::thread::spawn(move || report_loop(&st, &en, &stop, print_time))
    };
    if let Some(m) = a.max_seconds {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs_f64(m.max(0.0)));
            stop.store(true, Ordering::Release);
        });
    }
    let r = if let Some(d) = &c.daemon {
        let mut cfg = SoloConfig::new(&d.url, &d.wallet);
        if let Some(ms) = d.poll_ms {
            cfg.poll = Duration::from_millis(ms.max(50));
        }
        run_solo(&cfg, &engine, &rx, &status, &stop)
    } else {
        run_pool(
            &StratumConfig::new(c.pools.clone()),
            &engine,
            &rx,
            &status,
            &stop,
        )
    };
    stop.store(true, Ordering::Release);
    let _ = printer.join();
    let s = status.shares();
    eprintln!(
        "{} hashes, accepted {} rejected {} (not submitted: {})",
        engine.hashes(),
        s.accepted,
        s.rejected,
        s.dropped
    );
    r.map_err(|e| usage(e.to_string()))
}

/// Samples the hash counter each second; prints xmrig-style hashrate lines every
/// `print_time`, and the memory facts when they change (key switch, dataset ready).
fn report_loop(status: &Status, engine: &Engine, stop: &AtomicBool, print_time: Duration) {
    let mut last_print = Instant::now();
    let mut last_mem = String::new();
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(250));
        status.sample(engine.hashes());
        let m = engine.memory_info();
        let (got, want) = m.huge_pages();
        let mem = format!(
            "randomx  {} mode, cache {}{}, dataset {}{}, huge pages {}% {got}/{want}",
            m.hashing_from,
            m.cache_pages.map(|k| k.to_string()).unwrap_or("-".into()),
            m.cache_init_s
                .map(|s| format!(" (init {s:.1} s)"))
                .unwrap_or_default(),
            m.dataset_pages.map(|k| k.to_string()).unwrap_or("-".into()),
            m.dataset_init_s
                .map(|s| format!(" (init {s:.1} s)"))
                .unwrap_or_default(),
            (100 * got).checked_div(want).unwrap_or(0),
        );
        if m.cache_pages.is_some() && mem != last_mem {
            proofkit_miner::log(format_args!("{mem}"));
            last_mem = mem;
        }
        if last_print.elapsed() >= print_time {
            last_print = Instant::now();
            let r = status.rates();
            proofkit_miner::log(format_args!(
                "speed 10s/60s/15m {} {} {} H/s max {:.1} H/s",
                fmt_rate(r[0]),
                fmt_rate(r[1]),
                fmt_rate(r[2]),
                status.highest()
            ));
        }
    }
}

/// The original search of one fixed blob (no network).
fn mine_blob(a: MineArgs) -> CliResult {
    let key = text_or_hex("key", &a.key, &a.key_hex)?;
    let blob = crate::util::decode_hex("blob", a.blob_hex.as_deref().expect("checked"))?;
    let threads = a.threads.unwrap_or_else(default_threads);
    let pages = a.pages.unwrap_or(Pages::Thp);
    if a.nonce_offset
        .checked_add(4)
        .is_none_or(|end| end > blob.len())
    {
        return Err(usage(format!(
            "--nonce-offset {} leaves no room for a 4-byte nonce in a {}-byte blob",
            a.nonce_offset,
            blob.len()
        )));
    }
    let target = a
        .target
        .as_deref()
        .ok_or_else(|| usage("--blob-hex needs --target"))
        .and_then(|t| Target::parse_hex(t).map_err(|e| usage(format!("--target: {e}"))))?;
    if threads == 0 || a.count == 0 {
        return Err(usage("--threads and --count must be at least 1"));
    }
    let source = hashing_source(&key, a.light, pages, threads)?;
    let opts = VmOptions {
        version: if a.v2 { Version::V2 } else { Version::V1 },
        pages: pages.policy(),
        ..Default::default()
    };
    let stop = AtomicBool::new(false);
    let hashes = AtomicU64::new(0);
    let (tx, rx) = std::sync::mpsc::channel::<(u32, [u8; 32])>();
    let nthreads = threads as u32;
    let start = Instant::now();
    let found = std::thread::scope(
        |s| -> Result<usize, Box<dyn std::error::Error + Send + Sync>> {
            for t in 0..nthreads {
                let (source, stop, hashes, tx, blob) =
                    (source.clone(), &stop, &hashes, tx.clone(), blob.clone());
                let offset = a.nonce_offset;
                let first = a.start_nonce.wrapping_add(t);
                s.spawn(move || {
                    proofkit_core::affinity::pin_current_thread(t as usize);
                    if let DatasetSource::Light(cache) = &source {
                        // Light mode: several nonces at a time through one LightBatch (about
                        // twice one VM's throughput).
                        let mut batch = match LightBatch::new(cache.clone(), opts, LIGHT_BATCH_VMS)
                        {
                            Ok(b) => b,
                            Err(e) => {
                                eprintln!("thread {t}: {e}");
                                return;
                            }
                        };
                        let mut nonce = first;
                        while !stop.load(Ordering::Relaxed) {
                            let nonces: Vec<u32> = (0..LIGHT_BATCH_VMS as u32)
                                .map(|k| nonce.wrapping_add(k.wrapping_mul(nthreads)))
                                .collect();
                            let blobs: Vec<Vec<u8>> = nonces
                                .iter()
                                .map(|n| {
                                    let mut b = blob.clone();
                                    b[offset..offset + 4].copy_from_slice(&n.to_le_bytes());
                                    b
                                })
                                .collect();
                            let found = batch.hash_many(&blobs);
                            hashes.fetch_add(found.len() as u64, Ordering::Relaxed);
                            for (n, h) in nonces.iter().zip(found) {
                                if target.is_met_by(&h) && tx.send((*n, h)).is_err() {
                                    return;
                                }
                            }
                            nonce =
                                nonce.wrapping_add(nthreads.wrapping_mul(LIGHT_BATCH_VMS as u32));
                        }
                        return;
                    }
                    let mut vm = match Vm::new(source, opts) {
                        Ok(vm) => vm,
                        Err(e) => {
                            eprintln!("thread {t}: {e}");
                            return;
                        }
                    };
                    let mut blob = blob;
                    let mut nonce = first;
                    blob[offset..offset + 4].copy_from_slice(&nonce.to_le_bytes());
                    vm.hash_first(&blob);
                    while !stop.load(Ordering::Relaxed) {
                        let next = nonce.wrapping_add(nthreads);
                        blob[offset..offset + 4].copy_from_slice(&next.to_le_bytes());
                        let h = vm.hash_next(&blob).expect("batch started");
                        hashes.fetch_add(1, Ordering::Relaxed);
                        if target.is_met_by(&h) && tx.send((nonce, h)).is_err() {
                            break;
                        }
                        nonce = next;
                    }
                });
            }
            drop(tx);
            let mut found = 0;
            let mut last_report = Instant::now();
            let mut last_hashes = 0;
            loop {
                match rx.recv_timeout(Duration::from_millis(200)) {
                    Ok((nonce, h)) => {
                        let mut b = blob.clone();
                        b[a.nonce_offset..a.nonce_offset + 4].copy_from_slice(&nonce.to_le_bytes());
                        println!(
                            "{}",
                            json!({"nonce": nonce, "nonce_hex": hex::encode(nonce.to_le_bytes()), "hash": hex::encode(h), "blob_hex": hex::encode(&b)})
                        );
                        found += 1;
                        if found >= a.count {
                            break;
                        }
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                }
                if last_report.elapsed().as_secs_f64() >= 1.0 {
                    let n = hashes.load(Ordering::Relaxed);
                    let dt = last_report.elapsed().as_secs_f64();
                    eprintln!(
                        "speed {:.1} H/s ({} hashes, {:.0} s)",
                        (n - last_hashes) as f64 / dt,
                        n,
                        start.elapsed().as_secs_f64()
                    );
                    last_report = Instant::now();
                    last_hashes = n;
                }
                if a.max_seconds
                    .is_some_and(|m| start.elapsed().as_secs_f64() >= m)
                {
                    break;
                }
            }
            stop.store(true, Ordering::Relaxed);
            Ok(found)
        },
    )?;
    let n = hashes.load(Ordering::Relaxed);
    eprintln!(
        "{} hashes in {:.1} s: {:.1} H/s, {found} found",
        n,
        start.elapsed().as_secs_f64(),
        n as f64 / start.elapsed().as_secs_f64()
    );
    if found < a.count {
        return Err(ExitCode(
            1,
            format!("found {found} of {} results before the time limit", a.count),
        )
        .into());
    }
    Ok(())
}

/// The cache for `key` (light mode), or the dataset built from it on `threads` threads, with its
/// build time on stderr.
fn hashing_source(
    key: &[u8],
    light: bool,
    pages: Pages,
    threads: usize,
) -> Result<DatasetSource, Box<dyn std::error::Error + Send + Sync>> {
    let t0 = Instant::now();
    let cache = Arc::new(Cache::new(key, pages.policy())?);
    if light {
        return Ok(DatasetSource::Light(cache));
    }
    let d = crate::randomx::build_dataset(&cache, pages, threads, false)?;
    eprintln!(
        "dataset ready in {:.1} s ({} pages)",
        t0.elapsed().as_secs_f64(),
        d.page_kind()
    );
    Ok(DatasetSource::Fast(Arc::new(d)))
}

/// `randomx bench --xmrig N`: xmrig's benchmark hash sum over N nonces (one thread: the chained
/// variant). Exits 1 when N has a published value and the sum differs.
pub fn xmrig_bench(count: &str, threads: usize, light: bool, pages: Pages) -> CliResult {
    use proofkit_miner::xmrig;
    let n = xmrig::parse_count(count).map_err(|e| usage(format!("--xmrig {e}")))?;
    if threads == 0 {
        return Err(usage("--threads must be at least 1"));
    }
    let source = hashing_source(&xmrig::KEY, light, pages, threads)?;
    let opts = VmOptions {
        pages: pages.policy(),
        ..Default::default()
    };
    let pb = progress_bar(n, "xmrig bench", false);
    let t1 = Instant::now();
    let one = threads == 1;
    let sum = if one {
        xmrig::sum_one_thread(&source, opts, n, &|d| pb.set_position(d))?
    } else {
        xmrig::sum(&source, opts, n, threads, &|d| pb.set_position(d))?
    };
    pb.finish_and_clear();
    let secs = t1.elapsed().as_secs_f64();
    let published = xmrig::published(n, one);
    println!(
        "rx/0 {count} ({} nonces, {} mode, {threads} thread{}): hash sum {sum:016X} in {secs:.1} s ({:.1} H/s){}",
        n,
        if light { "light" } else { "fast" },
        if one { ", chained one-thread variant" } else { "s" },
        n as f64 / secs,
        match published {
            Some(p) if p == sum => " - matches xmrig's published value".to_string(),
            Some(p) => format!(" - DIFFERS from xmrig's published {p:016X}"),
            None => " (xmrig publishes no value for this count)".to_string(),
        }
    );
    match published {
        Some(p) if p != sum => Err(ExitCode(1, format!("hash sum {sum:016X} != {p:016X}")).into()),
        _ => Ok(()),
    }
}
