//! `proofkit equihash solve | verify | bench`: the Equihash engine (crate `proofkit-equihash`).
//!
//! `bench` measures each solver mode in a child process (this binary re-executed with the
//! hidden `bench-child` subcommand), so that the peak RSS of one mode is not the high-water
//! mark of another.

use crate::util::{decode_hex, emit, text_or_hex, CliResult, ExitCode};
use proofkit_core::peak::{peak_rss_kb, UssSampler};
use proofkit_core::report::Report;
use proofkit_equihash::{
    minimal, nonce_from_int, solve, solve_in, HashGen, Mode, Params, SolverConfig, Workspace,
};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Subcommand)]
enum Cmd {
    /// Find every solution for one input and nonce
    Solve(SolveArgs),
    /// Check one solution (exit 0 valid, 1 invalid with the reason on stderr)
    Verify(VerifyArgs),
    /// The seed benchmark: CIP / CIP-PR / CIP-EM-style modes (and the `equihash` crate's solver)
    Bench(BenchArgs),
    /// One benchmark measurement in a fresh process (used by `bench`)
    #[command(hide = true)]
    BenchChild(ChildArgs),
}

#[derive(clap::Args)]
struct Instance {
    #[arg(long)]
    n: u32,
    #[arg(long)]
    k: u32,
    /// The header (input) as text
    #[arg(long)]
    input: Option<String>,
    /// The header (input) as hex
    #[arg(long)]
    input_hex: Option<String>,
    /// The nonce as an integer (encoded as 32 bytes, little-endian)
    #[arg(long)]
    nonce: Option<u128>,
    /// The nonce as hex bytes (used as given; Zcash nonces are 32 bytes)
    #[arg(long)]
    nonce_hex: Option<String>,
    /// BLAKE2b personalization prefix (at most 8 bytes; followed by le32(n) || le32(k))
    #[arg(long, default_value = "ZcashPoW")]
    pers: String,
}

impl Instance {
    fn hash_gen(&self) -> Result<HashGen, Box<dyn std::error::Error + Send + Sync>> {
        let p = Params::new(self.n, self.k)?;
        let input = text_or_hex("input", &self.input, &self.input_hex)?;
        let nonce = match (&self.nonce, &self.nonce_hex) {
            (Some(v), None) => nonce_from_int(*v).to_vec(),
            (None, Some(h)) => decode_hex("nonce", h)?,
            (Some(_), Some(_)) => return Err("give either --nonce or --nonce-hex, not both".into()),
            (None, None) => return Err("missing --nonce or --nonce-hex".into()),
        };
        Ok(HashGen::new(p, self.pers.as_bytes(), &input, &nonce)?)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ModeArg {
    Full,
    Pr,
    Em,
}

#[derive(clap::Args)]
struct SolveArgs {
    #[command(flatten)]
    inst: Instance,
    #[arg(long, value_enum, default_value = "full")]
    mode: ModeArg,
    /// Post-retrieval height for `--mode pr` (0 <= H < k)
    #[arg(long, default_value_t = 1)]
    height: u32,
    #[arg(long, default_value_t = 1)]
    threads: usize,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct VerifyArgs {
    #[command(flatten)]
    inst: Instance,
    /// The minimally encoded solution
    #[arg(long)]
    solution_hex: String,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// N_K, e.g. 200_9, 144_5, 192_7
    #[arg(long, default_value = "200_9")]
    variant: String,
    #[arg(long, default_value_t = 10)]
    iters: u32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Post-retrieval height of the CIP-PR row (default k-1)
    #[arg(long)]
    height: Option<u32>,
    /// Also run the `equihash` crate's solver ((200,9) only)
    #[arg(long)]
    peer: bool,
    /// Rounds of measurements, each running every algorithm (or APR height) once in turn; a row
    /// shows the round of median Sol/s (the lower median for an even count) and the highest
    /// peak memory of all rounds
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// Print the advanced post-retrieval curve (h = 0..k-1) instead of the mode table
    #[arg(long)]
    apr: bool,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct ChildArgs {
    #[arg(long)]
    variant: String,
    #[arg(long)]
    iters: u32,
    #[arg(long)]
    seed: u64,
    #[arg(long)]
    threads: usize,
    /// full | pr | em | peer
    #[arg(long)]
    mode: String,
    #[arg(long, default_value_t = 0)]
    height: u32,
}

pub fn run(args: Args) -> CliResult {
    match args.cmd {
        Cmd::Solve(a) => run_solve(a),
        Cmd::Verify(a) => run_verify(a),
        Cmd::Bench(a) => run_bench(a),
        Cmd::BenchChild(a) => run_child(a),
    }
}

fn mode_of(m: ModeArg, height: u32) -> Mode {
    match m {
        ModeArg::Full => Mode::Full,
        ModeArg::Pr => Mode::Pr { height },
        ModeArg::Em => Mode::Em,
    }
}

fn run_solve(a: SolveArgs) -> CliResult {
    let gen = a.inst.hash_gen()?;
    let p = gen.params();
    let cfg = SolverConfig {
        mode: mode_of(a.mode, a.height),
        threads: a.threads,
        spill_dir: None,
    };
    let start = Instant::now();
    let (sols, stats) = solve(&gen, &cfg)?;
    let seconds = start.elapsed().as_secs_f64();
    let mut list = Vec::new();
    for s in &sols {
        let enc = minimal::encode(p, s)?;
        list.push(json!({"indices": s, "minimal_hex": hex::encode(enc)}));
    }
    if a.json {
        write_stdout(&format!(
            "{}\n",
            json!({"solutions": list, "peak_rss_kb": peak_rss_kb(), "seconds": seconds})
        ))?;
    } else {
        let mut text = String::new();
        for s in &list {
            text.push_str(s["minimal_hex"].as_str().unwrap_or_default());
            text.push('\n');
        }
        write_stdout(&text)?;
        eprintln!(
            "{} solution(s) for Equihash{p} in {seconds:.3} s, mode {}, {} thread(s), peak RSS {} kB, candidates {}, duplicates rejected {}, {stats:?}",
            sols.len(),
            cfg.mode,
            cfg.threads,
            peak_rss_kb(),
            stats.candidates,
            stats.duplicate_rejected
        );
    }
    Ok(())
}

/// Writes `text` to stdout; a reader that went away (`solve ... | head -1`) ends the output
/// quietly instead of panicking as `println!` does on a broken pipe.
fn write_stdout(text: &str) -> CliResult {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

fn run_verify(a: VerifyArgs) -> CliResult {
    let gen = a.inst.hash_gen()?;
    let sol = decode_hex("solution", &a.solution_hex)?;
    match proofkit_equihash::verify_minimal(&gen, &sol) {
        Ok(()) => write_stdout("valid\n"),
        Err(e) => Err(Box::new(ExitCode(1, format!("invalid solution: {e}")))),
    }
}

fn variant_params(v: &str) -> Result<Params, String> {
    let (n, k) = match v {
        "200_9" => (200, 9),
        "144_5" => (144, 5),
        other => {
            let mut it = other.split('_');
            match (
                it.next().and_then(|x| x.parse().ok()),
                it.next().and_then(|x| x.parse().ok()),
            ) {
                (Some(n), Some(k)) => (n, k),
                _ => {
                    return Err(format!(
                        "--variant must look like 200_9 or 144_5, got {other}"
                    ))
                }
            }
        }
    };
    Params::new(n, k).map_err(|e| e.to_string())
}

/// The benchmark's instances: a 108-byte header (the seed, little-endian, then zeros) and
/// nonces 0..iters.
fn bench_header(seed: u64) -> Vec<u8> {
    let mut h = vec![0u8; 108];
    h[..8].copy_from_slice(&seed.to_le_bytes());
    h
}

/// One measurement: `iters` solves, timed, with peak RSS and sampled peak USS of this process.
fn run_child(a: ChildArgs) -> CliResult {
    let p = variant_params(&a.variant)?;
    let header = bench_header(a.seed);
    let sampler = UssSampler::start(Duration::from_millis(5));
    let mut total = 0usize;
    // One workspace for the run, as a miner looping over nonces keeps its memory.
    let mut ws = Workspace::default();
    let start = Instant::now();
    for i in 0..a.iters {
        let nonce = nonce_from_int(i as u128);
        let found = if a.mode == "peer" {
            if (p.n(), p.k()) != (200, 9) {
                return Err("the equihash crate's solver handles (200,9) only".into());
            }
            let mut next = Some(nonce);
            equihash::tromp::solve_200_9(&header, || next.take()).len()
        } else {
            let mode = match a.mode.as_str() {
                "full" => Mode::Full,
                "pr" => Mode::Pr { height: a.height },
                "em" => Mode::Em,
                other => return Err(format!("unknown mode {other}").into()),
            };
            let gen = HashGen::new(p, b"ZcashPoW", &header, &nonce)?;
            solve_in(
                &gen,
                &SolverConfig {
                    mode,
                    threads: a.threads,
                    spill_dir: None,
                },
                &mut ws,
            )?
            .0
            .len()
        };
        total += found;
    }
    let seconds = start.elapsed().as_secs_f64();
    let uss = sampler.finish();
    println!(
        "{}",
        json!({"solutions": total, "seconds": seconds, "peak_rss_kb": peak_rss_kb(), "peak_uss_kb": uss})
    );
    Ok(())
}

fn measure(
    variant: &str,
    iters: u32,
    seed: u64,
    threads: usize,
    mode: &str,
    height: u32,
) -> Result<Value, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args([
            "equihash",
            "bench-child",
            "--variant",
            variant,
            "--iters",
            &iters.to_string(),
            "--seed",
            &seed.to_string(),
        ])
        .args([
            "--threads",
            &threads.to_string(),
            "--mode",
            mode,
            "--height",
            &height.to_string(),
        ])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{mode} child failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.trim()).map_err(|e| format!("{mode} child printed {line:?}: {e}"))
}

fn row(
    report: &mut Report,
    name: &str,
    imp: &str,
    iters: u32,
    m: &Value,
    extra: Vec<(&str, Value)>,
) {
    let secs = m["seconds"].as_f64().unwrap_or(0.0);
    let sols = m["solutions"].as_u64().unwrap_or(0);
    let mut cells = vec![
        ("Algorithm", json!(name)),
        ("impl", json!(imp)),
        (
            "Sol/s",
            json!(if secs > 0.0 { sols as f64 / secs } else { 0.0 }),
        ),
        ("Avg RunTime (s)", json!(secs / iters.max(1) as f64)),
        ("Total solutions", json!(sols)),
        ("Peak RSS (kB)", m["peak_rss_kb"].clone()),
        ("peak_rss_kb", m["peak_rss_kb"].clone()),
        (
            "Peak USS (MB)",
            json!(m["peak_uss_kb"].as_f64().unwrap_or(0.0) / 1024.0),
        ),
    ];
    cells.extend(extra);
    report.push(cells);
}

struct Plan {
    variant: String,
    iters: u32,
    seed: u64,
    threads: usize,
    height: Option<u32>,
    peer: bool,
    runs: u32,
}

fn sol_per_s(m: &Value) -> f64 {
    let secs = m["seconds"].as_f64().unwrap_or(0.0);
    let sols = m["solutions"].as_u64().unwrap_or(0) as f64;
    if secs > 0.0 {
        sols / secs
    } else {
        0.0
    }
}

/// The measurement of median Sol/s among `rounds` (the lower median for an even count), with
/// the highest peak RSS and USS of all of them.
fn median_round(mut rounds: Vec<Value>) -> Value {
    let peak = |key: &str| rounds.iter().filter_map(|m| m[key].as_u64()).max();
    let (rss, uss) = (peak("peak_rss_kb"), peak("peak_uss_kb"));
    rounds.sort_by(|a, b| sol_per_s(a).total_cmp(&sol_per_s(b)));
    let mut m = rounds.swap_remove((rounds.len() - 1) / 2);
    m["peak_rss_kb"] = json!(rss);
    m["peak_uss_kb"] = json!(uss);
    m
}

fn mode_table(
    plan: &Plan,
    quiet: bool,
) -> Result<Report, Box<dyn std::error::Error + Send + Sync>> {
    let p = variant_params(&plan.variant)?;
    let h = plan.height.unwrap_or(p.k() - 1);
    let mut report = Report::new(
        &format!("equihash_{}", plan.variant),
        &[
            "Algorithm",
            "Sol/s",
            "Avg RunTime (s)",
            "Total solutions",
            "Peak RSS (kB)",
            "Peak USS (MB)",
        ],
    );
    let mut runs: Vec<(String, &str, &str, u32)> = vec![
        ("proofkit full".into(), "proofkit", "full", 0),
        (format!("proofkit pr h={h}"), "proofkit", "pr", h),
        ("proofkit em".into(), "proofkit", "em", 0),
    ];
    if plan.peer && (p.n(), p.k()) == (200, 9) {
        runs.push(("equihash crate (Tromp)".into(), "equihash", "peer", 0));
    }
    let pb = crate::util::progress_bar(
        runs.len() as u64 * plan.runs as u64,
        &format!("equihash {}", plan.variant),
        quiet,
    );
    // Rounds alternate the algorithms, so that a slow spell of a shared machine falls on all.
    // Within a round `em` runs right after `full` (the table keeps the seed's order): the
    // issue's ratio is em/full, and a long `pr` run between them let the host's speed change
    // in between (rounds of one bench run gave em/full from 0.66 to 0.86).
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by_key(|&i| match runs[i].2 {
        "full" => 0,
        "em" => 1,
        _ => 2,
    });
    let mut measured: Vec<Vec<Value>> = vec![Vec::new(); runs.len()];
    for _ in 0..plan.runs {
        for &i in &order {
            let (_, _, mode, height) = &runs[i];
            measured[i].push(measure(
                &plan.variant,
                plan.iters,
                plan.seed,
                plan.threads,
                mode,
                *height,
            )?);
            pb.inc(1);
        }
    }
    // em/full of each round (adjacent runs) and their median: steadier than the ratio of
    // the rows' medians when the host's speed changes between rounds.
    let at = |m: &str| runs.iter().position(|r| r.2 == m);
    let paired: Option<Vec<f64>> = at("full").zip(at("em")).map(|(f, e)| {
        measured[f]
            .iter()
            .zip(&measured[e])
            .map(|(f, e)| (sol_per_s(e) / sol_per_s(f) * 1000.0).round() / 1000.0)
            .collect()
    });
    for ((name, imp, mode, _), rounds) in runs.into_iter().zip(measured) {
        let all: Vec<f64> = rounds.iter().map(sol_per_s).collect();
        let m = median_round(rounds);
        row(
            &mut report,
            &name,
            imp,
            plan.iters,
            &m,
            vec![
                ("mode", json!(mode)),
                ("threads", json!(plan.threads)),
                ("sol_per_s_of_each_run", json!(all)),
            ],
        );
    }
    pb.finish_and_clear();
    report.note("iters", plan.iters);
    report.note("seed", plan.seed);
    report.note("threads", plan.threads as u64);
    report.note("runs", plan.runs as u64);
    if let Some(ratios) = paired {
        report.note(
            "em/full median of rounds",
            proofkit_core::report::median(&ratios),
        );
        report.note("em/full by round", ratios);
    }
    if plan.peer && (p.n(), p.k()) != (200, 9) {
        report.note("peer", "the equihash crate's solver handles (200,9) only");
    }
    Ok(report)
}

fn apr_curve(plan: &Plan, quiet: bool) -> Result<Report, Box<dyn std::error::Error + Send + Sync>> {
    let p = variant_params(&plan.variant)?;
    let mut report = Report::new(
        &format!("equihash_apr_{}", plan.variant),
        &[
            "Height",
            "Avg RunTime (s)",
            "Solutions",
            "Sol/s",
            "Peak USS (MB)",
            "Peak RSS (kB)",
        ],
    );
    let pb = crate::util::progress_bar(p.k() as u64, "equihash APR", quiet);
    for h in 0..p.k() {
        let rounds = (0..plan.runs)
            .map(|_| measure(&plan.variant, plan.iters, plan.seed, plan.threads, "pr", h))
            .collect::<Result<Vec<_>, _>>()?;
        let m = median_round(rounds);
        let secs = m["seconds"].as_f64().unwrap_or(0.0);
        let sols = m["solutions"].as_u64().unwrap_or(0);
        report.push(vec![
            ("Height", json!(format!("h={h}"))),
            ("impl", json!("proofkit")),
            ("Avg RunTime (s)", json!(secs / plan.iters.max(1) as f64)),
            ("Solutions", json!(sols)),
            (
                "Sol/s",
                json!(if secs > 0.0 { sols as f64 / secs } else { 0.0 }),
            ),
            (
                "Peak USS (MB)",
                json!(m["peak_uss_kb"].as_f64().unwrap_or(0.0) / 1024.0),
            ),
            ("Peak RSS (kB)", m["peak_rss_kb"].clone()),
            ("peak_rss_kb", m["peak_rss_kb"].clone()),
        ]);
        pb.inc(1);
    }
    pb.finish_and_clear();
    report.note("iters", plan.iters);
    report.note("seed", plan.seed);
    report.note("threads", plan.threads as u64);
    report.note("runs", plan.runs as u64);
    Ok(report)
}

fn run_bench(a: BenchArgs) -> CliResult {
    let plan = Plan {
        variant: a.variant.clone(),
        iters: a.iters,
        seed: a.seed,
        threads: a.threads,
        height: a.height,
        peer: a.peer,
        runs: a.runs,
    };
    if a.apr {
        let r = apr_curve(&plan, a.json)?;
        emit(
            &r,
            a.json,
            &format!(
                "Advanced post-retrieval of Equihash({})",
                a.variant.replace('_', ", ")
            ),
        );
    } else {
        let r = mode_table(&plan, a.json)?;
        emit(
            &r,
            a.json,
            &format!("Equihash({}) solvers", a.variant.replace('_', ", ")),
        );
    }
    Ok(())
}

/// The short version for `proofkit bench`: (200,9), two nonces per mode (`pr` at h=2), with the
/// peer; about 30 s on an idle 2-core machine.
pub fn main_bench(json: bool) -> CliResult {
    let plan = Plan {
        variant: "200_9".into(),
        iters: 2,
        seed: 0,
        threads: 1,
        height: Some(2),
        peer: true,
        runs: 1,
    };
    let r = mode_table(&plan, json)?;
    emit(&r, json, "Equihash(200, 9) solvers (short run)");
    Ok(())
}
