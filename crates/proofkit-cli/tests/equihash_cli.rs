//! `proofkit equihash` as a user runs it: solutions on stdout, one per line, and a reader that
//! stops early (`proofkit equihash solve ... | head -1`) ends the output without a panic.

use std::process::{Command, Stdio};

/// `proofkit equihash <command>` on the (96,5) instance "block header", nonce 0.
fn equihash(command: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_proofkit"));
    cmd.args(["equihash", command, "--n", "96", "--k", "5"]);
    cmd.args(["--input", "block header", "--nonce", "0"]);
    cmd
}

#[test]
fn solve_prints_every_solution_and_verify_accepts_it() {
    let out = equihash("solve").output().expect("run proofkit");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // shared/vectors/equihash.json lists more than one solution for this instance.
    assert!(lines.len() > 1, "{text}");
    let out = equihash("verify")
        .args(["--solution-hex", lines[0]])
        .output()
        .expect("run proofkit");
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "valid\n");
}

/// The read end of stdout is closed before the solver prints: the write fails with EPIPE
/// (Rust ignores SIGPIPE), which must end the command quietly with status 0.
#[test]
fn closed_stdout_is_not_a_panic() {
    for json in [false, true] {
        let mut cmd = equihash("solve");
        if json {
            cmd.arg("--json");
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run proofkit");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait for proofkit");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "json {json}: {err}");
        assert!(out.status.success(), "json {json}: {:?} {err}", out.status);
    }
}

/// `bench --runs 3` measures every mode three times (alternating) and reports the round of
/// median Sol/s; `--runs 0` is refused by the argument parser.
#[test]
fn bench_runs_rounds_and_reports_the_median() {
    let bench = |runs: &str| {
        Command::new(env!("CARGO_BIN_EXE_proofkit"))
            .args(["equihash", "bench", "--variant", "48_5", "--iters", "2"])
            .args(["--runs", runs, "--json"])
            .output()
            .expect("run proofkit")
    };
    let out = bench("3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = v.to_string();
    assert!(text.contains("\"runs\":3"), "{text}");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "full, pr and em: {text}");
    for row in rows {
        let each: Vec<f64> = row["sol_per_s_of_each_run"]
            .as_array()
            .expect("one Sol/s per run")
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(each.len(), 3, "{row}");
        let mut sorted = each.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(row["Sol/s"].as_f64().unwrap(), sorted[1], "{row}");
    }
    // Rows in the seed's order (em is run right after full, but listed last), and em/full
    // of each round with their median.
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["full", "pr", "em"], "{text}");
    let each = |r: &serde_json::Value| -> Vec<f64> {
        r["sol_per_s_of_each_run"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let want: Vec<f64> = each(&rows[2])
        .iter()
        .zip(each(&rows[0]))
        .map(|(e, f)| (e / f * 1000.0).round() / 1000.0)
        .collect();
    let by_round: Vec<f64> = v["info"]["em/full by round"]
        .as_array()
        .expect("em/full by round")
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(by_round, want, "{text}");
    let mut sorted = want.clone();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(
        v["info"]["em/full median of rounds"].as_f64(),
        Some(sorted[1])
    );
    let out = bench("0");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--runs"));
}
