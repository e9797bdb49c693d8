//! `proofkit state bench --peer geth`: go-ethereum's own state database (core/state over triedb
//! with the path scheme, on pebble or in memory) driven through the same Paprika workload by the
//! Go harness in `bench/peers/geth/`, run after proofkit's own run. Its rows go into the same
//! table, and the two final state roots are compared: equal roots cross-check proofkit's Merkle
//! roots against geth's.
//!
//! The harness is built with `go build` next to the running `proofkit` binary (in the cargo
//! target directory) and rebuilt only when its sources are newer than the binary. Without `go`
//! on PATH the peer is skipped with a message.

use proofkit_core::report::Report;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::SystemTime;

/// The harness's source directory: `PROOFKIT_GETH_HARNESS_DIR`, else the repository's copy.
fn harness_source() -> PathBuf {
    std::env::var_os("PROOFKIT_GETH_HARNESS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/peers/geth");
            std::fs::canonicalize(&p).unwrap_or(p)
        })
}

/// The peers `state bench --peer` knows.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum PeerName {
    /// go-ethereum's state database through bench/peers/geth (needs Go)
    Geth,
}

/// What the peer's run needs from the bench command.
pub struct Workload<'a> {
    pub blocks: u64,
    pub accounts_per_block: u64,
    pub storage_per_account: u64,
    pub rows: u64,
    /// The directory the bench was given (`--path`); in memory when `None`.
    pub path: Option<&'a Path>,
    pub keep: bool,
    pub json: bool,
}

/// The peer's final figures, for the ratios and the root check.
pub struct GethRun {
    pub version: String,
    pub final_root: String,
    pub blocks_per_s: f64,
    pub read_back_seconds: f64,
}

/// Outcome of looking for the Go toolchain.
pub enum Peer {
    Ran(GethRun),
    Skipped(String),
}

fn go_available() -> bool {
    Command::new("go")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn newest_source(dir: &Path) -> Result<SystemTime, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        format!(
            "geth harness source {}: {e} (set PROOFKIT_GETH_HARNESS_DIR to bench/peers/geth)",
            dir.display()
        )
    })?;
    let mut newest = SystemTime::UNIX_EPOCH;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.ends_with(".go") || name == "go.mod" || name == "go.sum" {
            if let Ok(m) = e.metadata().and_then(|m| m.modified()) {
                newest = newest.max(m);
            }
        }
    }
    Ok(newest)
}

/// Builds the harness beside the running binary unless an up-to-date build is there.
pub fn build_harness() -> Result<PathBuf, String> {
    let src = harness_source();
    let newest = newest_source(&src)?;
    let exe = std::env::current_exe().map_err(|e| format!("locating proofkit: {e}"))?;
    let out = exe
        .parent()
        .ok_or("proofkit's own path has no directory")?
        .join("geth-state-peer");
    let fresh = std::fs::metadata(&out)
        .and_then(|m| m.modified())
        .is_ok_and(|built| built >= newest);
    if fresh {
        return Ok(out);
    }
    eprintln!(
        "building the go-ethereum peer ({}); the first build downloads and compiles go-ethereum (minutes)",
        src.display()
    );
    // Built under a private name and renamed, so that concurrent builds never run a torn file.
    let tmp = out.with_extension(format!("tmp-{}", std::process::id()));
    let status = Command::new("go")
        .arg("build")
        .arg("-trimpath")
        .arg("-o")
        .arg(&tmp)
        .arg(".")
        .current_dir(&src)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| format!("running go build: {e}"))?;
    if !status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "go build of the geth harness failed ({status}) in {}",
            src.display()
        ));
    }
    std::fs::rename(&tmp, &out).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(out)
}

fn field<'a>(line: &'a Value, key: &str) -> Result<&'a Value, String> {
    line.get(key)
        .ok_or_else(|| format!("geth harness: line without {key:?}: {line}"))
}

fn num(line: &Value, key: &str) -> Result<f64, String> {
    field(line, key)?
        .as_f64()
        .ok_or_else(|| format!("geth harness: {key:?} is not a number: {line}"))
}

/// Runs the harness on the workload and adds its rows and notes to `report`.
pub fn run_geth(w: &Workload, report: &mut Report) -> Result<Peer, String> {
    if !go_available() {
        return Ok(Peer::Skipped("skipped: go not installed".into()));
    }
    let harness = build_harness()?;
    let dir = w
        .path
        .map(|p| p.join(format!("geth-state-bench-{}", std::process::id())));
    if let Some(d) = &dir {
        if d.exists() {
            std::fs::remove_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
        }
    }
    let mut cmd = Command::new(&harness);
    cmd.arg(format!("-blocks={}", w.blocks))
        .arg(format!("-accounts-per-block={}", w.accounts_per_block))
        .arg(format!("-storage-per-account={}", w.storage_per_account))
        .arg(format!("-rows={}", w.rows))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(d) = &dir {
        cmd.arg(format!("-dir={}", d.display()));
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{}: {e}", harness.display()))?;
    let pb = crate::util::progress_bar(w.blocks, "geth peer", w.json);
    let stdout = child.stdout.take().expect("piped stdout");
    let mut summary = None;
    let mut parsed = Ok(());
    for line in BufReader::new(stdout).lines() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                parsed = Err(format!("reading the geth harness: {e}"));
                break;
            }
        };
        let v: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                parsed = Err(format!("geth harness printed {line:?}: {e}"));
                break;
            }
        };
        let step = (|| -> Result<(), String> {
            match field(&v, "type")?.as_str() {
                Some("progress") => pb.set_position(num(&v, "block")? as u64),
                Some("row") => report.push(vec![
                    ("impl", json!("go-ethereum")),
                    ("At Block", field(&v, "at_block")?.clone()),
                    ("Avg speed (blocks/s)", json!(num(&v, "blocks_per_s")?)),
                    ("Space used (GB)", json!(num(&v, "space_bytes")? / 1e9)),
                    ("peak_rss_kb", field(&v, "peak_rss_kb")?.clone()),
                ]),
                Some("summary") => summary = Some(v.clone()),
                _ => return Err(format!("geth harness: unknown line {v}")),
            }
            Ok(())
        })();
        if let Err(e) = step {
            parsed = Err(e);
            break;
        }
    }
    if parsed.is_err() {
        let _ = child.kill();
    }
    let status = child.wait().map_err(|e| format!("geth harness: {e}"))?;
    pb.finish_and_clear();
    if let Some(d) = &dir {
        if w.keep {
            eprintln!("geth database kept in {}", d.display());
        } else {
            let _ = std::fs::remove_dir_all(d);
        }
    }
    parsed?;
    if !status.success() {
        return Err(format!("geth harness failed ({status})"));
    }
    let s = summary.ok_or("geth harness ended without a summary line")?;
    let run = GethRun {
        version: field(&s, "geth_version")?
            .as_str()
            .unwrap_or("?")
            .to_string(),
        final_root: field(&s, "final_root")?
            .as_str()
            .ok_or("geth harness: final_root is not a string")?
            .to_lowercase(),
        blocks_per_s: w.blocks as f64 / num(&s, "write_seconds")?,
        read_back_seconds: num(&s, "read_back_seconds")?,
    };
    for (key, note) in [
        ("write_seconds", "geth_write_seconds"),
        ("write_cpu_seconds", "geth_write_cpu_seconds"),
        ("cpu_seconds", "geth_cpu_seconds"),
        ("seconds_in_block_writes", "geth_seconds_in_block_writes"),
        ("seconds_in_commits", "geth_seconds_in_commits"),
        (
            "block_ms_median_first_tenth",
            "geth_block_ms_median_first_tenth",
        ),
        (
            "block_ms_median_last_tenth",
            "geth_block_ms_median_last_tenth",
        ),
        ("flush_seconds", "geth_flush_seconds"),
        ("accounts_read_back", "geth_accounts_read_back"),
        ("read_back_seconds", "geth_read_back_seconds"),
        ("read_back_threads", "geth_read_back_threads"),
        ("peak_rss_kb", "geth_peak_rss_kb"),
        ("state_history", "geth_state_history"),
    ] {
        report.note(note, field(&s, key)?.clone());
    }
    report.note(
        "geth",
        format!(
            "go-ethereum {} core/state + triedb path scheme on {}, node-default caches",
            run.version,
            if w.path.is_some() {
                "pebble"
            } else {
                "a memory database"
            }
        ),
    );
    report.note("geth_final_root", run.final_root.clone());
    Ok(Peer::Ran(run))
}

/// Adds the peer's rows and the root check to the report; an error when the roots differ.
pub fn add_geth(
    w: &Workload,
    report: &mut Report,
    proofkit_root: &[u8; 32],
    proofkit_blocks_per_s: f64,
    proofkit_read_back_seconds: f64,
) -> Result<(), String> {
    match run_geth(w, report)? {
        Peer::Skipped(why) => {
            report.note("geth", why.clone());
            eprintln!("geth peer {why}");
            Ok(())
        }
        Peer::Ran(g) => {
            let ours = format!("0x{}", hex::encode(proofkit_root));
            let check = compare_roots(&ours, &g);
            report.note("state_roots_equal", check.is_ok());
            report.note(
                "speed_ratio_proofkit_over_geth",
                proofkit_blocks_per_s / g.blocks_per_s,
            );
            report.note(
                "read_back_ratio_geth_over_proofkit",
                g.read_back_seconds / proofkit_read_back_seconds,
            );
            report.note(
                "state_root_check",
                match &check {
                    Ok(()) => format!(
                        "equal: proofkit and go-ethereum {} end at {ours}",
                        g.version
                    ),
                    Err(e) => e.clone(),
                },
            );
            check
        }
    }
}

/// Ok when geth's final root (0x-prefixed hex, any case) is proofkit's.
fn compare_roots(proofkit: &str, geth: &GethRun) -> Result<(), String> {
    if proofkit.eq_ignore_ascii_case(&geth.final_root) {
        Ok(())
    } else {
        Err(format!(
            "state roots differ: proofkit {proofkit}, go-ethereum {} {}",
            geth.version, geth.final_root
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geth(root: &str) -> GethRun {
        GethRun {
            version: "1.17.10".into(),
            final_root: root.into(),
            blocks_per_s: 1.0,
            read_back_seconds: 1.0,
        }
    }

    #[test]
    fn roots_compare_by_value_and_differences_are_errors() {
        let a = format!("0x{}", "ab".repeat(32));
        assert!(compare_roots(&a, &geth(&a.to_uppercase().replace("0X", "0x"))).is_ok());
        let mut b = a.clone();
        b.replace_range(65.., "c");
        let e = compare_roots(&a, &geth(&b)).unwrap_err();
        assert!(e.contains("state roots differ") && e.contains(&b), "{e}");
    }
}
