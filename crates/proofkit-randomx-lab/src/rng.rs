//! Appendix F, "Statistical tests of RNG": AesGenerator1R and AesGenerator4R output, seeded from
//! Blake2b (the document's state, printed by its `rng-tests 1`) and from an all-zero state, fed
//! as raw bytes to Debian's `dieharder -g 200` (stdin input) and the verdicts collected.
//!
//! The document used TestU01 (Crush/BigCrush), which Debian does not package; dieharder is the
//! recognised battery at hand, so the verdicts compare in kind, not test for test: the document
//! reports every generator passing except AesGenerator1R from the zero state, which fails 1 of
//! 144 Crush tests (BirthdaySpacings, t = 3).

use crate::{figures_table, Analysis, Error, Figure};
use proofkit_randomx::analysis::{AesGeneratorKind, AesStream};
use proofkit_randomx::Aes;
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// The Blake2b-derived state of the document's `rng-tests 1` (state0..state3).
pub const DOCUMENT_BLAKE2B_STATE: [&str; 4] = [
    "67e8bbe567a1c18c91a316faf19fab73",
    "39f7c0e0a8d96512c525852124fdc9fe",
    "7abb07b2c90e04f098261e323eee8159",
    "3df534c34cdfbb4e70f8c0e1826f4cf7",
];

/// dieharder tests rated "Good" in its own list (`dieharder -l`), run by default.
pub const DEFAULT_TESTS: [u32; 18] = [
    0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 15, 16, 17, 100, 101, 102, 205,
];

/// The document's state as 64 bytes.
pub fn document_blake2b_state() -> [u8; 64] {
    let mut s = [0u8; 64];
    for (i, h) in DOCUMENT_BLAKE2B_STATE.iter().enumerate() {
        for j in 0..16 {
            // A constant table of hex digits.
            s[16 * i + j] = u8::from_str_radix(&h[2 * j..2 * j + 2], 16).expect("hex constant");
        }
    }
    s
}

/// One dieharder verdict line.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Verdict {
    pub test: String,
    pub ntup: u32,
    pub tsamples: u64,
    pub psamples: u64,
    pub p_value: f64,
    /// PASSED, WEAK or FAILED.
    pub assessment: String,
}

/// Parses dieharder's result table (`name| ntup| tsamples| psamples| p-value| Assessment`).
pub fn parse_verdicts(out: &str) -> Vec<Verdict> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').map(str::trim).collect();
            if f.len() != 6 || !matches!(f[5], "PASSED" | "WEAK" | "FAILED") {
                return None;
            }
            Some(Verdict {
                test: f[0].to_string(),
                ntup: f[1].parse().ok()?,
                tsamples: f[2].parse().ok()?,
                psamples: f[3].parse().ok()?,
                p_value: f[4].parse().ok()?,
                assessment: f[5].to_string(),
            })
        })
        .collect()
}

/// True when a `dieharder` binary runs.
pub fn dieharder_available() -> bool {
    Command::new("dieharder")
        .arg("-l")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `dieharder -g 200 <args>` on the stream of `kind` from `state` and returns its verdicts
/// and the bytes it consumed.
pub fn run_dieharder(
    kind: AesGeneratorKind,
    state: [u8; 64],
    args: &[String],
) -> Result<(Vec<Verdict>, u64), Error> {
    let mut child = Command::new("dieharder")
        .args(["-g", "200"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Dieharder(format!("cannot start dieharder: {e}")))?;
    let mut stdin = child.stdin.take().expect("stdin was piped");
    let feeder = std::thread::spawn(move || {
        let mut stream = AesStream::new(kind, state, Aes::detect());
        let mut buf = vec![0u8; 1 << 20];
        let mut sent = 0u64;
        loop {
            stream.fill(&mut buf);
            // dieharder closes its input when the tests are done: the write fails and we stop.
            if stdin.write_all(&buf).is_err() {
                return sent;
            }
            sent += buf.len() as u64;
        }
    });
    let out = child.wait_with_output()?;
    let sent = feeder.join().unwrap_or(0);
    let text = String::from_utf8_lossy(&out.stdout);
    let verdicts = parse_verdicts(&text);
    if !out.status.success() || verdicts.is_empty() {
        return Err(Error::Dieharder(format!(
            "exit status {}, no verdicts; stderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok((verdicts, sent))
}

/// One generator and seeding through the battery.
#[derive(Clone, Debug, Serialize)]
pub struct StreamResult {
    pub generator: String,
    pub seeding: String,
    pub bytes: u64,
    pub passed: usize,
    pub weak: usize,
    pub failed: usize,
    /// The document's TestU01 result for this generator and seeding.
    pub document: String,
    pub document_failures: usize,
    pub verdicts: Vec<Verdict>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RngAnalysis {
    pub tests: Vec<u32>,
    pub psamples: Option<u32>,
    pub streams: Vec<StreamResult>,
}

/// Runs dieharder tests `tests` (with `psamples` p-values each, or dieharder's default) on
/// the four streams.
pub fn run(tests: &[u32], psamples: Option<u32>) -> Result<RngAnalysis, Error> {
    crate::check_samples(tests.len(), 1)?;
    if let Some(p) = psamples {
        crate::check_samples(p as usize, 1)?;
    }
    if !dieharder_available() {
        return Err(Error::Dieharder(
            "dieharder is not installed (Debian: apt-get install dieharder)".into(),
        ));
    }
    let streams = [
        (
            AesGeneratorKind::OneRound,
            "Blake2b",
            document_blake2b_state(),
            "Crush: all 144 passed",
            0,
        ),
        (
            AesGeneratorKind::OneRound,
            "zero",
            [0u8; 64],
            "Crush: 1 of 144 failed (BirthdaySpacings t=3)",
            1,
        ),
        (
            AesGeneratorKind::FourRounds,
            "Blake2b",
            document_blake2b_state(),
            "BigCrush: all 160 passed",
            0,
        ),
        (
            AesGeneratorKind::FourRounds,
            "zero",
            [0u8; 64],
            "Crush: all 144 passed",
            0,
        ),
    ];
    let mut out = Vec::new();
    for (kind, seeding, state, document, document_failures) in streams {
        let mut verdicts = Vec::new();
        let mut bytes = 0;
        for &t in tests {
            let mut args = vec!["-d".to_string(), t.to_string()];
            if let Some(p) = psamples {
                args.extend(["-p".to_string(), p.to_string()]);
            }
            let (v, b) = run_dieharder(kind, state, &args)?;
            verdicts.extend(v);
            bytes += b;
        }
        let count = |a: &str| verdicts.iter().filter(|v| v.assessment == a).count();
        out.push(StreamResult {
            generator: match kind {
                AesGeneratorKind::OneRound => "AesGenerator1R",
                AesGeneratorKind::FourRounds => "AesGenerator4R",
            }
            .into(),
            seeding: seeding.into(),
            bytes,
            passed: count("PASSED"),
            weak: count("WEAK"),
            failed: count("FAILED"),
            document: document.into(),
            document_failures,
            verdicts,
        });
    }
    Ok(RngAnalysis {
        tests: tests.to_vec(),
        psamples,
        streams: out,
    })
}

impl Analysis for RngAnalysis {
    fn figures(&self) -> Vec<Figure> {
        self.streams
            .iter()
            .map(|s| {
                Figure::new(
                    format!("{} ({} state): tests failed", s.generator, s.seeding),
                    "",
                    Some(s.document_failures as f64),
                    s.failed as f64,
                )
            })
            .collect()
    }

    fn to_text(&self) -> String {
        let mut s = format!(
            "## Appendix F: AesGenerator1R/4R through dieharder (tests {:?}, psamples {})\n\n",
            self.tests,
            self.psamples
                .map_or("default".to_string(), |p| p.to_string())
        );
        s += "| generator | state | bytes read | passed | weak | failed | document (TestU01) |\n|---|---|---|---|---|---|---|\n";
        for r in &self.streams {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.generator, r.seeding, r.bytes, r.passed, r.weak, r.failed, r.document
            );
        }
        s += "\n";
        s += &figures_table(&self.figures());
        s += "\n| generator | state | test | ntup | p-value | verdict |\n|---|---|---|---|---|---|\n";
        for r in &self.streams {
            for v in r.verdicts.iter().filter(|v| v.assessment != "PASSED") {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {:.8} | {} |",
                    r.generator, r.seeding, v.test, v.ntup, v.p_value, v.assessment
                );
            }
        }
        s
    }

    fn plot(&self, _path: &Path) -> Result<(), Error> {
        Err(Error::NoPlot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_verdict_table() {
        let out = "#====#\n        test_name   |ntup| tsamples |psamples|  p-value |Assessment\n#====#\n   diehard_birthdays|   0|       100|     100|0.23753937|  PASSED  \n      rgb_lagged_sum|  31|   1000000|     100|0.00012345|   WEAK   \n   sts_serial|  16|    100000|     100|0.00000000|  FAILED  \nnot a | verdict\n";
        let v = parse_verdicts(out);
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].test, "diehard_birthdays");
        assert_eq!((v[0].ntup, v[0].tsamples, v[0].psamples), (0, 100, 100));
        assert!((v[0].p_value - 0.23753937).abs() < 1e-12);
        assert_eq!(
            v.iter().map(|x| x.assessment.as_str()).collect::<Vec<_>>(),
            ["PASSED", "WEAK", "FAILED"]
        );
    }

    #[test]
    fn document_state_decodes() {
        let s = document_blake2b_state();
        assert_eq!(&s[..4], &[0x67, 0xe8, 0xbb, 0xe5]);
        assert_eq!(s[63], 0xf7);
    }

    #[test]
    fn short_battery_on_all_four_streams() {
        if !dieharder_available() {
            eprintln!("skipped: dieharder not installed");
            return;
        }
        // Birthday spacings with 5 p-values: seconds per stream.
        let r = run(&[0], Some(5)).unwrap();
        assert_eq!(r.streams.len(), 4);
        for s in &r.streams {
            assert_eq!(s.verdicts.len(), 1, "{}", s.generator);
            assert_eq!(s.verdicts[0].test, "diehard_birthdays");
            assert_eq!(s.verdicts[0].psamples, 5);
            assert!(s.bytes > 0);
            assert!((0.0..=1.0).contains(&s.verdicts[0].p_value));
        }
        assert!(run(&[], None).is_err());
    }
}
