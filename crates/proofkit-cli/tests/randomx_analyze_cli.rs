//! `proofkit randomx analyze` run as a user would, each analysis on a small sample: the JSON is
//! parsed and checked, plots are PNG files, and bad usage is a one-line error with exit code 2.

use std::path::PathBuf;
use std::process::Command;

fn proofkit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_proofkit"))
        .args(args)
        .output()
        .expect("run proofkit")
}

fn analyze_json(args: &[&str]) -> serde_json::Value {
    let mut a = vec!["randomx", "analyze"];
    a.extend_from_slice(args);
    a.push("--json");
    let out = proofkit(&a);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn temp_png(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("proofkit-analyze-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn assert_png(p: &PathBuf) {
    let bytes = std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", p.display());
}

#[test]
fn chain_pipeline_superscalar() {
    let v = analyze_json(&["chain", "--samples", "2000"]);
    assert_eq!(v["rows"].as_array().unwrap().len(), 4);
    assert_eq!(v["rows"][3]["n"], 8);
    let n2 = v["rows"][3]["analytic"]["programs"][1].as_f64().unwrap();
    assert!((n2 - 26.97).abs() < 0.01, "{n2}");

    let v = analyze_json(&["pipeline", "--samples", "20"]);
    assert_eq!(v["designs"].as_array().unwrap().len(), 10);
    assert_eq!(v["programs"], 20);

    let v = analyze_json(&["superscalar", "--samples", "2"]);
    assert_eq!(v["programs"], 16);
    assert_eq!(v["sensitivity"].as_array().unwrap().len(), 64);

    // Text output and a plot.
    let png = temp_png("pipeline.png");
    let out = proofkit(&[
        "randomx",
        "analyze",
        "pipeline",
        "--samples",
        "10",
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("| #10 | 4 EXU + 2 MEM, out-of-order, speculative | 64 |"),
        "{text}"
    );
    assert_png(&png);
    std::fs::remove_file(&png).unwrap();
}

#[test]
fn vm_analyses_on_one_hash() {
    let png = temp_png("memory.png");
    let v = analyze_json(&["memory", "--samples", "1", "--plot", png.to_str().unwrap()]);
    assert_eq!(v["programs"], 8);
    let reads = v["reads_per_program"].as_f64().unwrap();
    assert!((25.0..55.0).contains(&reads), "{reads}");
    assert_png(&png);
    let fe = png.with_file_name("memory-fe.png");
    assert_png(&fe);
    std::fs::remove_file(&png).unwrap();
    std::fs::remove_file(&fe).unwrap();

    let v = analyze_json(&["entropy", "--samples", "1"]);
    let ratio = v["ratio"].as_f64().unwrap();
    assert!(ratio > 0.999 && ratio < 1.01, "{ratio}");

    let v = analyze_json(&["runtime", "--samples", "2", "--v2"]);
    assert_eq!(v["mode"], "light");
    assert_eq!(v["program_us"].as_array().unwrap().len(), 16);
}

#[test]
fn rng_short_battery() {
    let have = Command::new("dieharder")
        .arg("-l")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("skipped: dieharder not installed");
        return;
    }
    let v = analyze_json(&["rng", "--tests", "0", "--samples", "3"]);
    let streams = v["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 4);
    for s in streams {
        assert_eq!(s["verdicts"].as_array().unwrap().len(), 1);
    }
}

#[test]
fn bad_usage_is_a_clear_error() {
    for (args, needle) in [
        (
            vec!["randomx", "analyze", "chain", "--plot", "chart.svg"],
            "must end in .png",
        ),
        (
            vec!["randomx", "analyze", "pipeline", "--samples", "0"],
            "sample size must be at least 1",
        ),
        (
            vec!["randomx", "analyze", "chain", "--samples", "many"],
            "invalid value",
        ),
        (vec!["randomx", "analyze", "everything"], "invalid value"),
        (
            vec![
                "randomx",
                "analyze",
                "chain",
                "--samples",
                "10",
                "--plot",
                "/nonexistent-dir/x.png",
            ],
            "plot",
        ),
    ] {
        let out = proofkit(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // An analysis without a picture says so before it runs.
    let out = proofkit(&["randomx", "analyze", "entropy", "--plot", "x.png"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("this analysis has no plot"));
}
