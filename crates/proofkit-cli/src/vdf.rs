//! `proofkit vdf ...`: recursive SHA-256 chains, checkpointed proofs, parallel verification and
//! the kernel benchmark (beside the `sha2` crate for one chain and `tape-sha256` for many).

use crate::util::{decode_hex, emit, progress_bar, CliResult, ExitCode};
use proofkit_core::report::{median, Report};
use proofkit_vdf::{
    available, best_many, best_single, sha256, Kernel, KernelToken, Proof, VerifyError,
};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand)]
enum Cmd {
    /// Runs N links of h <- SHA256(h) and prints the end hash as hex
    Chain {
        #[arg(long)]
        start_hex: String,
        #[arg(long)]
        iters: u64,
        /// Kernel to use (default: the fastest single-chain kernel); see `bench`
        #[arg(long)]
        kernel: Option<String>,
    },
    /// Runs the chain and writes a checkpointed proof
    Prove {
        #[arg(long)]
        start_hex: String,
        #[arg(long)]
        iters: u64,
        /// Links per segment (a checkpoint every S links)
        #[arg(long)]
        segment: u64,
        #[arg(long)]
        out: PathBuf,
        /// 32-byte values infused first, in order: h <- SHA256(h || value)
        #[arg(long = "infuse-hex")]
        infuse_hex: Vec<String>,
        /// Also write the proof as JSON
        #[arg(long)]
        json_out: Option<PathBuf>,
    },
    /// Verifies a proof file (binary, or the JSON form); exit 0 when valid, 1 when not
    Verify {
        file: PathBuf,
        /// Worker threads (0: all cores)
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Kernel to use (default: the fastest many-chain kernel)
        #[arg(long)]
        kernel: Option<String>,
        /// Also require this start hash (before infusions)
        #[arg(long)]
        start_hex: Option<String>,
        /// Also require this iteration count
        #[arg(long)]
        iters: Option<u64>,
        /// Print the result as JSON
        #[arg(long)]
        json: bool,
    },
    /// MH/s and cycles per block of every kernel, beside sha2 and tape-sha256
    Bench {
        #[arg(long)]
        json: bool,
        /// Include the peers (sha2, tape-sha256); on by default in this build
        #[arg(long)]
        peer: bool,
        /// Timed runs per row (the median is reported)
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Seconds per timed run (iterations are calibrated to it)
        #[arg(long, default_value_t = 0.25)]
        seconds: f64,
        /// Also prove and verify a full MMX-sized proof: 600M links, 250k-link segments
        #[arg(long)]
        mmx: bool,
    },
}

fn hash_arg(name: &str, h: &str) -> Result<[u8; 32], Box<dyn std::error::Error + Send + Sync>> {
    let b = decode_hex(name, h)?;
    let n = b.len();
    b.try_into()
        .map_err(|_| format!("--{name}-hex must be 32 bytes, got {n}").into())
}

fn kernel_arg(
    name: &Option<String>,
    default: KernelToken,
) -> Result<KernelToken, Box<dyn std::error::Error + Send + Sync>> {
    match name {
        None => Ok(default),
        Some(n) => {
            let k = Kernel::from_name(n).ok_or_else(|| {
                format!(
                    "unknown kernel {n:?}; kernels: {}",
                    Kernel::ALL.map(|k| k.name()).join(", ")
                )
            })?;
            k.token()
                .ok_or_else(|| format!("kernel {n} needs {}, which this CPU lacks", k.isa()).into())
        }
    }
}

pub fn run(args: Args) -> CliResult {
    match args.cmd {
        Cmd::Chain {
            start_hex,
            iters,
            kernel,
        } => {
            let start = hash_arg("start", &start_hex)?;
            let tok = kernel_arg(&kernel, best_single())?;
            let mut s = sha256::bytes_to_words(&start);
            tok.run(std::slice::from_mut(&mut s), iters);
            println!("{}", hex::encode(sha256::words_to_bytes(&s)));
            Ok(())
        }
        Cmd::Prove {
            start_hex,
            iters,
            segment,
            out,
            infuse_hex,
            json_out,
        } => {
            let start = hash_arg("start", &start_hex)?;
            let infusions = infuse_hex
                .iter()
                .map(|h| hash_arg("infuse", h))
                .collect::<Result<Vec<_>, _>>()?;
            let pb = progress_bar(iters, "prove", false);
            let t = Instant::now();
            let proof =
                proofkit_vdf::prove(&start, &infusions, iters, segment, &mut |d| pb.inc(d))?;
            pb.finish_and_clear();
            let secs = t.elapsed().as_secs_f64();
            std::fs::write(&out, proof.to_bytes()?)
                .map_err(|e| format!("{}: {e}", out.display()))?;
            if let Some(j) = json_out {
                std::fs::write(&j, serde_json::to_string_pretty(&proof.to_json())? + "\n")
                    .map_err(|e| format!("{}: {e}", j.display()))?;
            }
            eprintln!(
                "{} links, {} checkpoints, {:.2} s ({:.2} MH/s, {})",
                iters,
                proof.checkpoints.len(),
                secs,
                iters as f64 / secs / 1e6,
                best_single().kernel()
            );
            println!("{}", hex::encode(proof.output()));
            Ok(())
        }
        Cmd::Verify {
            file,
            threads,
            kernel,
            start_hex,
            iters,
            json,
        } => {
            let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
            let parsed = if bytes.first() == Some(&b'{') {
                Proof::from_json(&String::from_utf8_lossy(&bytes))
            } else {
                Proof::from_bytes(&bytes)
            };
            let proof = parsed
                .map_err(|e| ExitCode(1, format!("invalid proof {}: {e}", file.display())))?;
            if let Some(h) = start_hex {
                let want = hash_arg("start", &h)?;
                if want != proof.start {
                    return Err(ExitCode(
                        1,
                        format!("proof is for start {}, not {h}", hex::encode(proof.start)),
                    )
                    .into());
                }
            }
            if let Some(n) = iters {
                if n != proof.iterations {
                    return Err(ExitCode(
                        1,
                        format!("proof is for {} iterations, not {n}", proof.iterations),
                    )
                    .into());
                }
            }
            let tok = kernel_arg(&kernel, best_many())?;
            let pb = progress_bar(proof.checkpoints.len() as u64, "verify", json);
            let t = Instant::now();
            let result = proofkit_vdf::verify_with(&proof, threads, tok, &|d| pb.inc(d));
            pb.finish_and_clear();
            let secs = t.elapsed().as_secs_f64();
            match result {
                Ok(()) => {
                    let mhs = proof.iterations as f64 / secs / 1e6;
                    if json {
                        println!(
                            "{}",
                            json!({"valid": true, "iterations": proof.iterations, "segments": proof.checkpoints.len(),
                                   "output_hex": hex::encode(proof.output()), "seconds": secs, "mhs": mhs,
                                   "kernel": tok.kernel().name()})
                        );
                    } else {
                        println!(
                            "valid: {} links in {} segments, output {}, verified in {:.3} s ({:.1} MH/s, {})",
                            proof.iterations,
                            proof.checkpoints.len(),
                            hex::encode(proof.output()),
                            secs,
                            mhs,
                            tok.kernel()
                        );
                    }
                    Ok(())
                }
                Err(e @ VerifyError::BadSegment { .. }) => {
                    Err(ExitCode(1, format!("invalid proof: {e}")).into())
                }
                Err(VerifyError::Malformed(e)) => {
                    Err(ExitCode(1, format!("invalid proof: {e}")).into())
                }
                Err(e) => Err(e.into()),
            }
        }
        Cmd::Bench {
            json,
            peer: _,
            runs,
            seconds,
            mmx,
        } => {
            let proof = if mmx {
                (600_000_000, 250_000)
            } else {
                (60_000_000, 25_000)
            };
            let report = bench(runs.max(1), seconds, proof, json)?;
            emit(&report, json, "Recursive SHA-256 (VDF), one core per row");
            Ok(())
        }
    }
}

/// The nominal clock from /proc/cpuinfo ("cpu MHz" of the first CPU).
fn nominal_mhz() -> f64 {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("cpu MHz"))
                .and_then(|l| l.split(':').nth(1))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

fn cpu_seconds() -> f64 {
    proofkit_core::cputime::thread_cpu_time()
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Runs `f(links)` (which computes `lanes * links` hashes) with `links` calibrated to about
/// `seconds` of thread CPU time; returns the MH/s of each of `runs` timed runs.
fn measure(lanes: u64, runs: usize, seconds: f64, mut f: impl FnMut(u64)) -> Vec<f64> {
    let mut links = 2_000u64;
    loop {
        let t = cpu_seconds();
        f(links);
        let dt = cpu_seconds() - t;
        if dt > seconds / 4.0 || links > 1 << 34 {
            links = ((links as f64) * seconds / dt.max(1e-6)).max(1.0) as u64;
            break;
        }
        links *= 4;
    }
    (0..runs)
        .map(|_| {
            let t = cpu_seconds();
            f(links);
            let dt = cpu_seconds() - t;
            (lanes * links) as f64 / dt.max(1e-9) / 1e6
        })
        .collect()
}

fn row(
    report: &mut Report,
    imp: &str,
    kernel: &str,
    lanes: u64,
    mhs: &[f64],
    mhz: f64,
    baseline: Option<f64>,
) -> f64 {
    let m = median(mhs);
    let mut cells = vec![
        ("impl", json!(imp)),
        ("kernel", json!(kernel)),
        ("lanes", json!(lanes)),
        ("MH/s", json!((m * 100.0).round() / 100.0)),
        (
            "MH/s/0.1GHz",
            json!(((m / (mhz / 100.0)) * 1000.0).round() / 1000.0),
        ),
        ("cycles/block", json!((mhz / m * 10.0).round() / 10.0)),
        ("runs", json!(mhs.len())),
        ("peak_rss_kb", json!(proofkit_core::peak::peak_rss_kb())),
    ];
    if let Some(b) = baseline {
        cells.push(("vs peer", json!(format!("{:.2}x", m / b))));
    }
    report.push(cells);
    m
}

/// Every kernel and peer on one pinned core, then proving and verifying (all cores) a proof of
/// `proof.0` links in segments of `proof.1`.
fn bench(
    runs: usize,
    seconds: f64,
    proof: (u64, u64),
    quiet: bool,
) -> Result<Report, Box<dyn std::error::Error + Send + Sync>> {
    let mhz = nominal_mhz();
    let mut report = Report::new(
        "vdf",
        &[
            "impl",
            "kernel",
            "lanes",
            "MH/s",
            "MH/s/0.1GHz",
            "cycles/block",
            "vs peer",
            "runs",
            "peak_rss_kb",
        ],
    );
    report.note(
        "vs_peer",
        "one-lane kernels against sha2 (one chain; it uses SHA-NI where the CPU has it), many-lane kernels against tape-sha256 hash_chains",
    );
    report.note("cpu", proofkit_core::cpu::model_name());
    report.note("nominal_mhz", mhz);
    report.note(
        "method",
        format!(
            "one thread pinned to one core; MH/s = hashes per second of thread CPU time, median of {runs} runs of ~{seconds} s; \
             cycles/block = nominal clock ({mhz:.0} MHz, /proc/cpuinfo \"cpu MHz\") / MH/s, not a measured cycle count"
        ),
    );
    let pb = progress_bar(available().len() as u64 + 4, "bench", quiet);
    // The per-core rows run on one thread pinned to one core; the main thread stays unpinned
    // so that the verification pool below gets every core.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                proofkit_core::affinity::pin_current_thread(0);

                // Peers first: sha2 (one chain) and tape-sha256 (one chain, many chains).
                let sha2_runs = measure(1, runs, seconds, |n| {
                    use sha2::Digest;
                    let mut h = [7u8; 32];
                    for _ in 0..n {
                        h = sha2::Sha256::digest(h).into();
                    }
                    std::hint::black_box(h);
                });
                let sha2_x1 = row(
                    &mut report,
                    "sha2",
                    "Sha256::digest",
                    1,
                    &sha2_runs,
                    mhz,
                    None,
                );
                pb.inc(1);
                let tape_x1 = measure(1, runs, seconds, |n| {
                    std::hint::black_box(tape_sha256::hash_chain(&[7u8; 32], n));
                });
                row(
                    &mut report,
                    "tape-sha256",
                    &format!("hash_chain ({})", tape_sha256::chain_backend()),
                    1,
                    &tape_x1,
                    mhz,
                    None,
                );
                pb.inc(1);
                let tape_chains = 64usize;
                let tape_runs = measure(tape_chains as u64, runs, seconds, |n| {
                    let seeds: Vec<[u8; 32]> = (0..tape_chains).map(|i| [i as u8; 32]).collect();
                    let lens = vec![n; tape_chains];
                    let mut out = vec![[0u8; 32]; tape_chains];
                    tape_sha256::hash_chains(&seeds, &lens, &mut out);
                    std::hint::black_box(out);
                });
                let tape_many = row(
                    &mut report,
                    "tape-sha256",
                    &format!("hash_chains x{tape_chains} ({})", tape_sha256::backend()),
                    tape_chains as u64,
                    &tape_runs,
                    mhz,
                    None,
                );
                pb.inc(1);

                for tok in available() {
                    let lanes = tok.kernel().lanes() as u64;
                    let mhs = measure(lanes, runs, seconds, |n| {
                        let mut states: Vec<[u32; 8]> = (0..lanes as u32).map(|i| [i; 8]).collect();
                        tok.run(&mut states, n);
                        std::hint::black_box(states);
                    });
                    // Single-chain kernels are compared with sha2, many-chain kernels with tape-sha256.
                    let peer = if lanes == 1 { sha2_x1 } else { tape_many };
                    row(
                        &mut report,
                        "proofkit",
                        tok.kernel().name(),
                        lanes,
                        &mhs,
                        mhz,
                        Some(peer),
                    );
                    pb.inc(1);
                }
            })
            .join()
            .expect("benchmark thread panicked")
    });
    report.note("single_chain_kernel", best_single().kernel().name());
    report.note("many_chain_kernel", best_many().kernel().name());

    // Whole-proof verification on every core (2400 segments as in an MMX block).
    let (iters, segment) = proof;
    let mmx = iters == 600_000_000;
    let t = Instant::now();
    let proof = proofkit_vdf::prove(&[9u8; 32], &[], iters, segment, &mut |_| {})?;
    let prove_s = t.elapsed().as_secs_f64();
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let (mut verify_s, mut verify_cpu_s) = (Vec::new(), Vec::new());
    let process_cpu = || {
        proofkit_core::cputime::process_cpu_time()
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    };
    for _ in 0..runs.min(3) {
        let (t, c) = (Instant::now(), process_cpu());
        proofkit_vdf::verify(&proof, 0, &|_| {})?;
        verify_s.push(t.elapsed().as_secs_f64());
        verify_cpu_s.push(process_cpu() - c);
    }
    pb.finish_and_clear();
    let v = median(&verify_s);
    let per_core = iters as f64 / median(&verify_cpu_s) / 1e6;
    report.note(
        "verify_mhs_per_cpu_second",
        (per_core * 10.0).round() / 10.0,
    );
    let full = 600_000_000f64 / (per_core * 1e6 * threads as f64);
    report.note(
        "verify_600M_250k_seconds_if_cores_idle",
        (full * 100.0).round() / 100.0,
    );
    report.note("proof_iterations", iters);
    report.note("proof_segment", segment);
    report.note("prove_seconds_wall", (prove_s * 1000.0).round() / 1000.0);
    report.note("verify_seconds_wall", (v * 1000.0).round() / 1000.0);
    report.note("verify_threads", threads);
    report.note(
        "verify_mhs_wall",
        ((iters as f64 / v / 1e6) * 10.0).round() / 10.0,
    );
    if !mmx {
        let scale = 600_000_000f64 / iters as f64;
        report.note(
            "verify_600M_250k_seconds_extrapolated",
            ((v * scale) * 100.0).round() / 100.0,
        );
    }
    Ok(report)
}

/// The short benchmark for `proofkit bench`: fewer, shorter runs, a 12M-link proof in 2400
/// segments (an MMX block's segment count at 1/50 of its length).
pub fn main_bench(json: bool) -> CliResult {
    let report = bench(3, 0.08, (12_000_000, 5_000), json)?;
    emit(&report, json, "Recursive SHA-256 (VDF), one core per row");
    Ok(())
}
