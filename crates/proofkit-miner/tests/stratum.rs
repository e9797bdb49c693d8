//! The stratum client against pools written here from the protocol description (xmrig's
//! dialect): login, jobs, shares checked by the pool with the reference librandomx, stale jobs,
//! bad targets, malformed JSON, unknown algorithms, over-long blobs and lines, disconnects and
//! reconnects, failover to the next pool, and TLS with a pinned self-signed certificate.

use proofkit_miner::engine::{Engine, EngineConfig, Mode};
use proofkit_miner::stats::{Shares, Status};
use proofkit_miner::stratum::{run_pool, PoolConfig, StratumConfig};
use proofkit_randomx::{Cache, PagePolicy, Version, Vm};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const SEED: [u8; 32] = [0x11; 32];
/// Compact target of difficulty 4: a share every few light-mode hashes.
const TARGET: &str = "ffffff3f";

/// Hashes as the pool checks them: the system librandomx (the reference), else proofkit's own
/// light VM (announced on stderr).
type HashFn = Box<dyn FnMut(&[u8]) -> [u8; 32] + Send>;
struct PoolHasher(Mutex<HashFn>);

fn pool_hasher() -> &'static PoolHasher {
    static H: OnceLock<PoolHasher> = OnceLock::new();
    H.get_or_init(|| {
        if let Ok(lib) = proofkit_randomx::peer::LibRandomx::load() {
            let lib: &'static _ = Box::leak(Box::new(lib));
            let flags = lib.recommended_flags();
            let cache: &'static _ = Box::leak(Box::new(lib.cache(flags, &SEED).unwrap()));
            let mut vm = lib.vm(flags, Some(cache), None).unwrap();
            PoolHasher(Mutex::new(Box::new(move |b| vm.hash(b))))
        } else {
            eprintln!("note: no system librandomx; the test pool checks shares with proofkit's VM");
            let cache = Arc::new(Cache::new(&SEED, PagePolicy::Transparent).unwrap());
            let mut vm = Vm::light(cache, Version::V1).unwrap();
            PoolHasher(Mutex::new(Box::new(move |b| vm.hash(b))))
        }
    })
}

fn blob(tag: u8) -> Vec<u8> {
    let mut b: Vec<u8> = (0..76u8).map(|i| i.wrapping_mul(7) ^ tag).collect();
    b[39..43].fill(0);
    b
}

fn job(id: &str, tag: u8) -> Value {
    json!({"blob": hex::encode(blob(tag)), "job_id": id, "target": TARGET,
           "seed_hash": hex::encode(SEED), "height": 100, "algo": "rx/0", "id": "sess"})
}

/// Checks a submit as a pool does; returns the error message to answer, if any.
fn check_share(p: &Value, jobs: &[(&str, u8)]) -> Result<(), String> {
    let id = p["job_id"].as_str().ok_or("no job_id")?;
    let tag = jobs.iter().find(|(j, _)| *j == id).ok_or("unknown job")?.1;
    let nonce = hex::decode(p["nonce"].as_str().ok_or("no nonce")?).map_err(|e| e.to_string())?;
    let result: [u8; 32] = hex::decode(p["result"].as_str().ok_or("no result")?)
        .ok()
        .and_then(|r| r.try_into().ok())
        .ok_or("bad result")?;
    if nonce.len() != 4 || p["id"] != "sess" || p["algo"] != "rx/0" {
        return Err(format!("bad submit {p}"));
    }
    let mut b = blob(tag);
    b[39..43].copy_from_slice(&nonce);
    let h = (pool_hasher().0.lock().unwrap())(&b);
    if h != result {
        return Err("wrong hash".into());
    }
    let t = proofkit_miner::target::Target::parse_hex(TARGET).unwrap();
    if !t.is_met_by(&h) {
        return Err("low difficulty share".into());
    }
    Ok(())
}

/// One connection to the test pool, plain or TLS.
struct PoolConn {
    r: BufReader<Box<dyn ReadWrite>>,
}

trait ReadWrite: Read + Write + Send {}
impl<T: Read + Write + Send> ReadWrite for T {}

impl PoolConn {
    /// The next message, or None on timeout/close.
    fn recv(&mut self, limit: Duration) -> Option<Value> {
        let t = Instant::now();
        let mut line = String::new();
        while t.elapsed() < limit {
            match self.r.read_line(&mut line) {
                Ok(0) => return None,
                Ok(_) if line.ends_with('\n') => return Some(serde_json::from_str(&line).unwrap()),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => return None,
            }
        }
        None
    }

    fn send_raw(&mut self, s: &str) {
        let w = self.r.get_mut();
        let _ = w.write_all(s.as_bytes());
        let _ = w.flush();
    }

    fn send(&mut self, v: Value) {
        self.send_raw(&format!("{v}\n"));
    }

    /// Reads the login and answers it with `first_job`.
    fn login(&mut self, first_job: Value) -> Value {
        let m = self.recv(Duration::from_secs(30)).expect("login");
        assert_eq!(m["method"], "login", "{m}");
        self.send(json!({"id": m["id"], "jsonrpc": "2.0", "error": null,
            "result": {"id": "sess", "job": first_job, "status": "OK", "extensions": ["keepalive"]}}));
        m
    }

    fn reply_ok(&mut self, m: &Value) {
        self.send(
            json!({"id": m["id"], "jsonrpc": "2.0", "error": null, "result": {"status": "OK"}}),
        );
    }

    fn reply_err(&mut self, m: &Value, msg: &str) {
        self.send(json!({"id": m["id"], "jsonrpc": "2.0", "error": {"code": -1, "message": msg}}));
    }
}

type Handler = Box<dyn FnMut(PoolConn, usize) + Send>;

/// A test pool: accepts up to `max_conns` connections, each handled by `handler` in turn.
struct TestPool {
    port: u16,
    thread: Option<JoinHandle<()>>,
}

impl TestPool {
    fn start(
        max_conns: usize,
        tls: Option<Arc<rustls::ServerConfig>>,
        mut handler: Handler,
    ) -> TestPool {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let thread = std::thread::spawn(move || {
            for i in 0..max_conns {
                let Ok((s, _)) = l.accept() else { return };
                s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                let stream: Box<dyn ReadWrite> = match &tls {
                    Some(cfg) => Box::new(rustls::StreamOwned::new(
                        rustls::ServerConnection::new(cfg.clone()).unwrap(),
                        s,
                    )),
                    None => Box::new(s),
                };
                handler(
                    PoolConn {
                        r: BufReader::new(stream),
                    },
                    i,
                );
            }
            // The listener closes here: later connections are refused.
        });
        TestPool {
            port,
            thread: Some(thread),
        }
    }

    fn url(&self, tls: bool) -> String {
        format!(
            "stratum+{}://127.0.0.1:{}",
            if tls { "ssl" } else { "tcp" },
            self.port
        )
    }

    fn join(mut self) {
        self.thread.take().unwrap().join().expect("pool thread");
    }
}

struct Client {
    stop: Arc<AtomicBool>,
    status: Arc<Status>,
    thread: Option<JoinHandle<()>>,
}

fn pool(url: String) -> PoolConfig {
    PoolConfig {
        url,
        user: "wallet".into(),
        pass: "x".into(),
        rig_id: None,
        tls_fingerprint: None,
    }
}

fn start_client(pools: Vec<PoolConfig>) -> Client {
    let stop = Arc::new(AtomicBool::new(false));
    let status = Arc::new(Status::new());
    let mut cfg = StratumConfig::new(pools);
    cfg.retries = 2;
    cfg.retry_pause = Duration::from_millis(100);
    cfg.max_backoff = Duration::from_millis(400);
    cfg.keepalive = Duration::from_secs(1);
    cfg.timeout = Duration::from_secs(20);
    let (st, stat) = (stop.clone(), status.clone());
    let thread = std::thread::spawn(move || {
        let (tx, rx) = std::sync::mpsc::channel();
        let engine = Engine::start(
            EngineConfig {
                threads: 1,
                mode: Mode::Light,
                pages: PagePolicy::Transparent,
                pin: false,
            },
            tx,
        )
        .unwrap();
        run_pool(&cfg, &engine, &rx, &stat, &st).unwrap();
        engine.stop();
    });
    Client {
        stop,
        status,
        thread: Some(thread),
    }
}

impl Client {
    fn finish(mut self) -> Shares {
        self.stop.store(true, Ordering::Release);
        self.thread.take().unwrap().join().expect("client thread");
        self.status.shares()
    }
}

/// Serves submits (checked with `check_share`) until `n` were accepted or `limit` passed;
/// returns every message seen.
fn serve_shares(c: &mut PoolConn, jobs: &[(&str, u8)], n: usize, limit: Duration) -> Vec<Value> {
    let t = Instant::now();
    let mut seen = Vec::new();
    let mut ok = 0;
    while ok < n && t.elapsed() < limit {
        let Some(m) = c.recv(Duration::from_millis(200)) else {
            continue;
        };
        match m["method"].as_str() {
            Some("submit") => match check_share(&m["params"], jobs) {
                Ok(()) => {
                    c.reply_ok(&m);
                    ok += 1;
                }
                Err(e) => c.reply_err(&m, &e),
            },
            Some("keepalived") => c.send(json!({"id": m["id"], "jsonrpc": "2.0", "error": null,
                "result": {"status": "KEEPALIVED"}})),
            _ => {}
        }
        seen.push(m);
    }
    assert!(ok >= n, "only {ok} of {n} shares in {limit:?}");
    seen
}

/// Reads (and ignores) for a second before the connection is dropped, so that the close is a
/// FIN after the answers already sent rather than a reset that could discard them.
fn linger(c: &mut PoolConn) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(1) {
        let _ = c.recv(Duration::from_millis(100));
    }
}

#[test]
fn login_jobs_shares_stale_jobs_and_keepalive() {
    let log: Arc<Mutex<Vec<Value>>> = Arc::default();
    let l2 = log.clone();
    let p = TestPool::start(
        1,
        None,
        Box::new(move |mut c, _| {
            let login = c.login(job("A", 1));
            let params = &login["params"];
            assert_eq!(params["login"], "wallet");
            assert!(params["agent"]
                .as_str()
                .unwrap()
                .starts_with("proofkit-miner/"));
            assert!(params["algo"].as_array().unwrap().contains(&json!("rx/0")));
            let mut seen = serve_shares(&mut c, &[("A", 1)], 3, Duration::from_secs(120));
            // Job B replaces A: shares for A that still arrive are refused as stale.
            c.send(json!({"jsonrpc": "2.0", "method": "job", "params": job("B", 2)}));
            let t = Instant::now();
            let mut b_ok = 0;
            while b_ok < 3 && t.elapsed() < Duration::from_secs(120) {
                let Some(m) = c.recv(Duration::from_millis(200)) else {
                    continue;
                };
                if m["method"] == "submit" {
                    if m["params"]["job_id"] == "B" {
                        check_share(&m["params"], &[("B", 2)]).unwrap();
                        c.reply_ok(&m);
                        b_ok += 1;
                    } else {
                        c.reply_err(&m, "Stale job");
                    }
                } else if m["method"] == "keepalived" {
                    c.send(json!({"id": m["id"], "jsonrpc": "2.0", "error": null,
                        "result": {"status": "KEEPALIVED"}}));
                }
                seen.push(m);
            }
            assert_eq!(b_ok, 3, "shares for job B");
            // A job no hash meets (target 1): the client goes quiet and, after 1 s without
            // sending, keeps the session alive.
            let mut hard = job("Q", 9);
            hard["target"] = json!("0100000000000000");
            c.send(json!({"jsonrpc": "2.0", "method": "job", "params": hard}));
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(10) {
                if let Some(m) = c.recv(Duration::from_millis(200)) {
                    let ka = m["method"] == "keepalived";
                    seen.push(m);
                    if ka {
                        break;
                    }
                }
            }
            l2.lock().unwrap().extend(seen);
        }),
    );
    let client = start_client(vec![pool(p.url(false))]);
    p.join();
    let shares = client.finish();
    let log = log.lock().unwrap();
    assert!(
        log.iter().any(|m| m["method"] == "keepalived"),
        "no keepalived"
    );
    let a_after_b = log.iter().filter(|m| m["params"]["job_id"] == "A").count();
    assert!(shares.accepted >= 6, "{shares:?}");
    assert_eq!(shares.rejected as usize + 3, a_after_b, "{shares:?}");
}

#[test]
fn bad_input_from_the_pool_is_logged_and_skipped() {
    let submits: Arc<Mutex<Vec<Value>>> = Arc::default();
    let s2 = submits.clone();
    let p = TestPool::start(
        1,
        None,
        Box::new(move |mut c, _| {
            // The login's own job has an unknown algorithm: no work yet.
            let mut unknown = job("U", 3);
            unknown["algo"] = json!("cn/r");
            c.login(unknown);
            let bad_jobs = [
                ("target", json!("zz")),
                ("target", json!("00112233445566778899")),
                ("target", json!("00000000")),
                ("target", json!("aabbcc")),
                ("blob", json!("ab".repeat(500))),
                ("blob", json!("abcd")),
                ("algo", json!("rx/wow")),
                ("seed_hash", json!("1234")),
            ];
            for (k, v) in bad_jobs {
                let mut j = job("BAD", 4);
                j[k] = v;
                c.send(json!({"jsonrpc": "2.0", "method": "job", "params": j}));
            }
            c.send_raw("{this is not json\n");
            c.send_raw("[1, 2, 3]\n");
            c.send_raw("\n");
            c.send(json!({"id": 999, "jsonrpc": "2.0", "result": {"status": "OK"}}));
            c.send(json!({"jsonrpc": "2.0", "method": "job", "params": {"job_id": 5}}));
            // No work has been valid so far: nothing may be submitted.
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(3) {
                if let Some(m) = c.recv(Duration::from_millis(100)) {
                    assert_ne!(m["method"], "submit", "a share for an invalid job: {m}");
                }
            }
            c.send(json!({"jsonrpc": "2.0", "method": "job", "params": job("G", 5)}));
            let seen = serve_shares(&mut c, &[("G", 5)], 2, Duration::from_secs(120));
            linger(&mut c);
            s2.lock()
                .unwrap()
                .extend(seen.into_iter().filter(|m| m["method"] == "submit"));
        }),
    );
    let client = start_client(vec![pool(p.url(false))]);
    p.join();
    let shares = client.finish();
    for m in submits.lock().unwrap().iter() {
        assert_eq!(m["params"]["job_id"], "G", "{m}");
    }
    assert!(shares.accepted >= 2 && shares.rejected == 0, "{shares:?}");
}

#[test]
fn reconnect_after_a_disconnect_then_failover_to_the_next_pool() {
    let logins_a = Arc::new(Mutex::new(0));
    let la = logins_a.clone();
    // Pool A: the first connection drops after one share, the second after a line longer than
    // any stratum message; then A is gone (connections refused).
    let a = TestPool::start(
        2,
        None,
        Box::new(move |mut c, i| {
            c.login(job("A", 6));
            *la.lock().unwrap() += 1;
            serve_shares(&mut c, &[("A", 6)], 1, Duration::from_secs(120));
            if i == 1 {
                c.send_raw(&"x".repeat(100_000));
                // The client must hang up: reads end.
                let t = Instant::now();
                while c.recv(Duration::from_millis(100)).is_some()
                    && t.elapsed() < Duration::from_secs(10)
                {}
            }
        }),
    );
    let b_shares = Arc::new(Mutex::new(0));
    let bs = b_shares.clone();
    let b = TestPool::start(
        1,
        None,
        Box::new(move |mut c, _| {
            c.login(job("B", 7));
            serve_shares(&mut c, &[("B", 7)], 2, Duration::from_secs(120));
            *bs.lock().unwrap() += 2;
            linger(&mut c);
        }),
    );
    let client = start_client(vec![pool(a.url(false)), pool(b.url(false))]);
    a.join();
    b.join();
    let shares = client.finish();
    assert_eq!(*logins_a.lock().unwrap(), 2, "A reconnected once");
    assert_eq!(*b_shares.lock().unwrap(), 2, "failover to B");
    // B's two answers are read before B's handler returns; A's may be lost when A resets the
    // connection with the client's next submit unread (the client then cannot know the outcome).
    assert!(shares.accepted >= 2 && shares.rejected == 0, "{shares:?}");
}

fn self_signed() -> (Arc<rustls::ServerConfig>, String) {
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let der = ck.cert.der().clone();
    use sha2::Digest;
    let fp = hex::encode(sha2::Sha256::digest(der.as_ref()));
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.key_pair.serialize_der().into());
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![der], key)
    .unwrap();
    (Arc::new(cfg), fp)
}

#[test]
fn tls_with_a_pinned_self_signed_certificate() {
    let (cfg, fp) = self_signed();
    let got = Arc::new(Mutex::new(false));
    let g = got.clone();
    let p = TestPool::start(
        1,
        Some(cfg.clone()),
        Box::new(move |mut c, _| {
            c.login(job("T", 8));
            serve_shares(&mut c, &[("T", 8)], 2, Duration::from_secs(120));
            linger(&mut c);
            *g.lock().unwrap() = true;
        }),
    );
    let mut pc = pool(p.url(true));
    pc.tls_fingerprint = Some(fp.clone());
    let client = start_client(vec![pc]);
    p.join();
    let shares = client.finish();
    assert!(*got.lock().unwrap());
    assert!(shares.accepted >= 2, "{shares:?}");

    // A different pin: the handshake fails and no login ever reaches the pool; without a pin the
    // self-signed certificate fails the public-root check the same way.
    for pin in [Some("00".repeat(32)), None] {
        let logged = Arc::new(Mutex::new(false));
        let l = logged.clone();
        let p = TestPool::start(
            1,
            Some(cfg.clone()),
            Box::new(move |mut c, _| {
                if c.recv(Duration::from_secs(3)).is_some() {
                    *l.lock().unwrap() = true;
                }
            }),
        );
        let mut pc = pool(p.url(true));
        pc.tls_fingerprint = pin;
        let client = start_client(vec![pc]);
        p.join();
        std::thread::sleep(Duration::from_millis(300));
        let st = client.status.connection();
        let shares = client.finish();
        assert!(
            !*logged.lock().unwrap(),
            "login sent over an unverified TLS connection"
        );
        assert!(st.connected_since.is_none());
        assert_eq!(shares.accepted + shares.rejected, 0);
    }
}
