//! `proofkit randomx mine` (network modes, config file, API) and `randomx bench --xmrig`.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn proofkit(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_proofkit"))
        .args(args)
        .output()
        .expect("run proofkit")
}

#[test]
fn xmrig_bench_sum_equals_the_library_sum() {
    let out = proofkit(&["randomx", "bench", "--xmrig", "6", "--threads", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let cache = std::sync::Arc::new(
        proofkit_randomx::Cache::new(&[0; 32], proofkit_randomx::PagePolicy::Transparent).unwrap(),
    );
    let src = proofkit_randomx::DatasetSource::Light(cache);
    let want = proofkit_miner::xmrig::sum(&src, Default::default(), 6, 1, &|_| {}).unwrap();
    assert!(text.contains(&format!("hash sum {want:016X}")), "{text}");
    assert!(text.contains("no value for this count"), "{text}");
    let bad = proofkit(&["randomx", "bench", "--xmrig", "1G"]);
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn bad_mining_setups_are_one_line_errors() {
    let dir = std::env::temp_dir().join(format!("proofkit-mine-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad_cfg = dir.join("bad.json");
    std::fs::write(
        &bad_cfg,
        r#"{"threads": 2, "pools": [{"url": "http://nope:1"}]}"#,
    )
    .unwrap();
    let empty_cfg = dir.join("empty.json");
    std::fs::write(&empty_cfg, r#"{"threads": 1}"#).unwrap();
    for args in [
        vec!["randomx", "mine"],
        vec!["randomx", "mine", "--daemon", "http://127.0.0.1:1"],
        vec!["randomx", "mine", "--daemon", "ftp://x", "--wallet", "w"],
        vec!["randomx", "mine", "--pool", "stratum+tcp://nohost"],
        vec!["randomx", "mine", "--config", bad_cfg.to_str().unwrap()],
        vec!["randomx", "mine", "--config", empty_cfg.to_str().unwrap()],
        vec!["randomx", "mine", "--config", "/nonexistent/proofkit.json"],
        vec![
            "randomx",
            "mine",
            "--daemon",
            "http://a:1",
            "--wallet",
            "w",
            "--pool",
            "b:2",
        ],
    ] {
        let out = proofkit(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.starts_with("proofkit: ") && err.trim().lines().count() == 1,
            "{args:?}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn get(port: u16, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n").ok()?;
    let mut r = String::new();
    s.read_to_string(&mut r).ok()?;
    let code = r.split_whitespace().nth(1)?.parse().ok()?;
    Some((code, r.split_once("\r\n\r\n")?.1.to_string()))
}

/// A daemon that is not there: the miner retries with backoff (never hashing), and the API
/// answers meanwhile, behind its token.
#[test]
fn api_summary_while_the_daemon_is_away() {
    // Both ports taken while both listeners are held, so they differ (once the daemon's was
    // dropped first, the API could be given the same port, and the miner found a "daemon").
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let api = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    let api_port = api.local_addr().unwrap().port();
    drop((dead, api));
    let dir = std::env::temp_dir().join(format!("proofkit-mine-api-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("miner.json");
    std::fs::write(
        &cfg,
        format!(
            r#"{{"threads": 1, "mode": "light", "print_time": 1,
                "daemon": {{"url": "http://127.0.0.1:{dead_port}", "wallet": "4abc"}},
                "api": {{"port": {api_port}, "token": "s3cret"}}}}"#
        ),
    )
    .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_proofkit"))
        .args([
            "randomx",
            "mine",
            "--config",
            cfg.to_str().unwrap(),
            "--max-seconds",
            "6",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let mut summary = None;
    while t.elapsed() < Duration::from_secs(5) {
        if let Some(r) = get(api_port, "/1/summary", Some("s3cret")) {
            summary = Some(r);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (code, body) = summary.expect("the API answers");
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["hashes_total"], 0, "no work without a daemon: {v}");
    assert_eq!(v["connection"]["connected"], false);
    assert!(v["hashrate"]["total"].is_array() && v["uptime"].is_u64() && v["hugepages"].is_array());
    assert_eq!(get(api_port, "/1/summary", None).unwrap().0, 401);
    assert_eq!(get(api_port, "/1/summary", Some("wrong")).unwrap().0, 401);
    assert_eq!(get(api_port, "/nope", Some("s3cret")).unwrap().0, 404);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("retrying in"), "{err}");
    assert!(err.contains("speed 10s/60s/15m"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
