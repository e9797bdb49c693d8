//! Pool mining over xmrig's stratum dialect: newline-delimited JSON-RPC 2.0 over TCP or TLS.
//!
//! Client to pool: `login` {login, pass, agent, algo[], rigid}; `submit` {id, job_id, nonce (8 hex
//! digits, the nonce bytes as in the blob), result (64 hex digits), algo; for `rx/2` also
//! `commitment`}; `keepalived` {id}. Pool to client: the `login` result {id, job, status,
//! extensions}, `job` notifications {blob, job_id, target, seed_hash, height, algo}, and results
//! of `submit` ({status: "OK"} or an error object).
//!
//! Every result is re-hashed and checked against the job's target before it is submitted; bad
//! input from a pool (malformed JSON, unknown algorithms, over-long blobs or targets) is logged
//! and skipped. A pool that fails is retried `retries` times with exponential backoff, then the
//! next pool of the list is tried (failover), round-robin.

use crate::engine::{Engine, Found};
use crate::job::{parse_seed_hash, Algo, Goal, Job, MAX_BLOB, MONERO_NONCE_OFFSET};
use crate::stats::Status;
use crate::target::Target;
use crate::{log, Error};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest line accepted from a pool (a job is well under 2 kB).
pub const MAX_LINE: usize = 64 * 1024;

/// One pool of the failover list.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PoolConfig {
    /// `stratum+tcp://host:port` or `stratum+ssl://host:port` (a bare `host:port` is TCP).
    pub url: String,
    #[serde(default = "default_user")]
    pub user: String,
    #[serde(default = "default_pass")]
    pub pass: String,
    #[serde(default)]
    pub rig_id: Option<String>,
    /// SHA-256 of the pool's TLS certificate (hex): pins a self-signed certificate, as xmrig's
    /// `tls-fingerprint`. Without it the certificate must chain to a public root (webpki-roots).
    #[serde(default)]
    pub tls_fingerprint: Option<String>,
}

fn default_user() -> String {
    "x".into()
}

fn default_pass() -> String {
    "x".into()
}

/// Pool mining settings.
#[derive(Clone, Debug)]
pub struct StratumConfig {
    pub pools: Vec<PoolConfig>,
    /// Failed attempts on one pool before moving to the next.
    pub retries: u32,
    /// First pause after a failure; doubles up to `max_backoff`.
    pub retry_pause: Duration,
    pub max_backoff: Duration,
    /// A `keepalived` is sent after this long without sending anything.
    pub keepalive: Duration,
    /// The connection is dropped after this long without a line from the pool (and the login
    /// must be answered within it).
    pub timeout: Duration,
}

impl StratumConfig {
    pub fn new(pools: Vec<PoolConfig>) -> StratumConfig {
        StratumConfig {
            pools,
            retries: 5,
            retry_pause: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            keepalive: Duration::from_secs(60),
            timeout: Duration::from_secs(300),
        }
    }
}

/// A parsed pool URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolUrl {
    pub host: String,
    pub port: u16,
    pub tls: bool,
}

pub fn parse_pool_url(url: &str) -> Result<PoolUrl, Error> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("stratum+ssl://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("stratum+tcp://") {
        (false, r)
    } else if url.contains("://") {
        return Err(Error::Config(format!(
            "{url:?}: pools are stratum+tcp:// or stratum+ssl://"
        )));
    } else {
        (false, url)
    };
    let rest = rest.trim_end_matches('/');
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| Error::Config(format!("{url:?}: no port")))?;
    let port = port
        .parse()
        .map_err(|_| Error::Config(format!("{url:?}: bad port")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(Error::Config(format!("{url:?}: no host")));
    }
    Ok(PoolUrl {
        host: host.to_string(),
        port,
        tls,
    })
}

/// The socket to a pool, plain or TLS.
enum Conn {
    Tcp(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Tcp(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// Accepts exactly the certificate whose SHA-256 is pinned (signatures are still verified, so
/// the server must hold the certificate's key).
#[derive(Debug)]
struct PinnedCert {
    sha256: [u8; 32],
    algs: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl rustls::client::danger::ServerCertVerifier for PinnedCert {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        use sha2::Digest;
        let got: [u8; 32] = sha2::Sha256::digest(end_entity.as_ref()).into();
        if got == self.sha256 {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "certificate fingerprint {} is not the pinned one",
                hex::encode(got)
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algs.supported_schemes()
    }
}

fn tls_config(fingerprint: Option<&str>) -> Result<Arc<rustls::ClientConfig>, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?;
    let cfg = match fingerprint {
        Some(fp) => {
            let sha256: [u8; 32] = hex::decode(fp.replace(':', ""))
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| {
                    Error::Config(format!("tls fingerprint {fp:?}: expected 64 hex digits"))
                })?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(PinnedCert {
                    sha256,
                    algs: provider.signature_verification_algorithms,
                }))
                .with_no_client_auth()
        }
        None => {
            let roots =
                rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    Ok(Arc::new(cfg))
}

fn connect(pool: &PoolConfig, timeout: Duration) -> Result<Conn, Error> {
    let u = parse_pool_url(&pool.url)?;
    let addr = (u.host.as_str(), u.port)
        .to_socket_addrs()
        .map_err(|e| Error::Pool(format!("{}: {e}", pool.url)))?
        .next()
        .ok_or_else(|| Error::Pool(format!("{}: no address", pool.url)))?;
    let tcp = TcpStream::connect_timeout(&addr, timeout)?;
    tcp.set_nodelay(true)?;
    // Short reads: the session loop also serves found results and keepalives.
    tcp.set_read_timeout(Some(Duration::from_millis(50)))?;
    tcp.set_write_timeout(Some(timeout))?;
    if !u.tls {
        return Ok(Conn::Tcp(tcp));
    }
    let cfg = tls_config(pool.tls_fingerprint.as_deref())?;
    let name = rustls::pki_types::ServerName::try_from(u.host.clone())
        .map_err(|e| Error::Tls(format!("{}: {e}", u.host)))?;
    let conn = rustls::ClientConnection::new(cfg, name).map_err(|e| Error::Tls(e.to_string()))?;
    Ok(Conn::Tls(Box::new(rustls::StreamOwned::new(conn, tcp))))
}

/// Parses a `job` object from a pool. `default_algo` applies when the job names none.
pub fn parse_job(p: &Value, default_algo: Algo) -> Result<Job, Error> {
    let bad = |w: String| Error::BadJob(w);
    let field = |name: &str| -> Result<&str, Error> {
        p[name]
            .as_str()
            .ok_or_else(|| bad(format!("no {name} string")))
    };
    let blob_hex = field("blob")?;
    if blob_hex.len() > 2 * MAX_BLOB {
        return Err(bad(format!(
            "blob of {} hex digits is longer than {MAX_BLOB} bytes",
            blob_hex.len()
        )));
    }
    let blob = hex::decode(blob_hex).map_err(|e| bad(format!("blob: {e}")))?;
    let id = field("job_id")?;
    if id.is_empty() || id.len() > 256 {
        return Err(bad("job_id empty or longer than 256 characters".into()));
    }
    let target = Target::parse_hex(field("target")?)?;
    let algo = match p.get("algo").and_then(Value::as_str) {
        Some(a) => Algo::parse(a)?,
        None => default_algo,
    };
    let seed_hash = parse_seed_hash(field("seed_hash")?)?;
    let job = Job {
        id: id.to_string(),
        blob,
        nonce_offset: MONERO_NONCE_OFFSET,
        goal: Goal::Share(target),
        seed_hash,
        height: p["height"].as_u64(),
        algo,
    };
    job.validate()?;
    Ok(job)
}

/// The `params` of a `submit` for a checked result.
pub fn submit_params(session: &str, f: &Found) -> Value {
    let mut p = json!({
        "id": session,
        "job_id": f.job.id,
        "nonce": hex::encode(f.nonce.to_le_bytes()),
        "result": hex::encode(f.hash),
        "algo": f.job.algo.name(),
    });
    if f.job.algo == Algo::Rx2 {
        let c = proofkit_randomx::commitment(&f.job.blob_with_nonce(f.nonce), &f.hash);
        p["commitment"] = json!(hex::encode(c));
    }
    p
}

/// Mines on the pools of `cfg` until `stop` is set.
pub fn run_pool(
    cfg: &StratumConfig,
    engine: &Engine,
    found: &Receiver<Found>,
    status: &Status,
    stop: &AtomicBool,
) -> Result<(), Error> {
    if cfg.pools.is_empty() {
        return Err(Error::Config("no pool given".into()));
    }
    for p in &cfg.pools {
        parse_pool_url(&p.url)?;
        if let Some(fp) = &p.tls_fingerprint {
            tls_config(Some(fp))?;
        }
    }
    let mut idx = 0;
    let mut failures = 0;
    let mut backoff = cfg.retry_pause;
    while !stop.load(Ordering::Acquire) {
        let pool = &cfg.pools[idx];
        let mut logged_in = false;
        let r = session(cfg, pool, engine, found, status, stop, &mut logged_in);
        engine.pause();
        status.set_disconnected();
        if stop.load(Ordering::Acquire) {
            break;
        }
        if logged_in {
            // The pool worked: start the count and the backoff over.
            failures = 0;
            backoff = cfg.retry_pause;
        }
        failures += 1;
        let why = match r {
            Ok(()) => "connection closed".to_string(),
            Err(e) => e.to_string(),
        };
        if failures >= cfg.retries && cfg.pools.len() > 1 {
            let next = (idx + 1) % cfg.pools.len();
            log(format_args!(
                "pool {}: {why}; switching to {}",
                pool.url, cfg.pools[next].url
            ));
            idx = next;
            failures = 0;
        } else {
            log(format_args!(
                "pool {}: {why}; retry in {:.1} s",
                pool.url,
                backoff.as_secs_f64()
            ));
        }
        let until = Instant::now() + backoff;
        while Instant::now() < until && !stop.load(Ordering::Acquire) {
            // Results found before the disconnect are stale now.
            while found.try_recv().is_ok() {}
            std::thread::sleep(Duration::from_millis(20));
        }
        backoff = (backoff * 2).min(cfg.max_backoff);
    }
    Ok(())
}

/// What an outstanding request was.
enum Pending {
    Login,
    Submit { difficulty: u128 },
    Keepalive,
}

struct Session<'a> {
    conn: Conn,
    next_id: u64,
    pending: HashMap<u64, Pending>,
    last_send: Instant,
    session_id: Option<String>,
    algo: Algo,
    engine: &'a Engine,
    status: &'a Status,
    url: &'a str,
}

impl Session<'_> {
    fn send(&mut self, method: &str, params: Value, what: Pending) -> Result<(), Error> {
        let id = self.next_id;
        self.next_id += 1;
        let mut line = json!({"id": id, "jsonrpc": "2.0", "method": method, "params": params})
            .to_string()
            .into_bytes();
        line.push(b'\n');
        self.conn.write_all(&line)?;
        self.conn.flush()?;
        self.pending.insert(id, what);
        self.last_send = Instant::now();
        Ok(())
    }

    fn take_job(&mut self, p: &Value) {
        match parse_job(p, self.algo) {
            Ok(job) => {
                let (diff, height, algo) = (job.goal.difficulty(), job.height, job.algo.name());
                let seed = hex::encode(job.seed_hash);
                let new_seed = self
                    .engine
                    .current_job()
                    .is_none_or(|j| j.seed_hash != job.seed_hash);
                match self.engine.set_job(job) {
                    Ok(()) => {
                        self.status.set_job(diff, height, algo);
                        log(format_args!(
                            "new job from {} diff {diff} algo {algo}{}{}",
                            self.url,
                            height.map(|h| format!(" height {h}")).unwrap_or_default(),
                            if new_seed {
                                format!(" seed {seed}")
                            } else {
                                String::new()
                            }
                        ));
                    }
                    Err(e) => log(format_args!("job from {} skipped: {e}", self.url)),
                }
            }
            Err(e) => log(format_args!("job from {} skipped: {e}", self.url)),
        }
    }

    /// Handles one line from the pool; Err ends the session.
    fn handle_line(&mut self, line: &[u8]) -> Result<(), Error> {
        let v: Value = match serde_json::from_slice(line) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) | Err(_) => {
                log(format_args!(
                    "malformed JSON from {} skipped: {:?}",
                    self.url,
                    String::from_utf8_lossy(&line[..line.len().min(120)])
                ));
                return Ok(());
            }
        };
        if v["method"] == "job" {
            self.take_job(&v["params"]);
            return Ok(());
        }
        let Some(id) = v["id"].as_u64() else {
            log(format_args!(
                "message from {} without a known method or id skipped",
                self.url
            ));
            return Ok(());
        };
        let err = v.get("error").filter(|e| !e.is_null());
        match self.pending.remove(&id) {
            Some(Pending::Login) => {
                if let Some(e) = err {
                    return Err(Error::Pool(format!(
                        "login refused: {}",
                        e["message"].as_str().unwrap_or("no message")
                    )));
                }
                let r = &v["result"];
                let sid = r["id"]
                    .as_str()
                    .ok_or_else(|| Error::Pool("login result without a session id".into()))?;
                self.session_id = Some(sid.to_string());
                self.status.set_connection(self.url, "pool");
                log(format_args!("use pool {} (logged in)", self.url));
                if r.get("job").is_some_and(|j| j.is_object()) {
                    self.take_job(&r["job"]);
                }
            }
            Some(Pending::Submit { difficulty }) => {
                if let Some(e) = err {
                    self.status.reject(difficulty);
                    let s = self.status.shares();
                    log(format_args!(
                        "rejected ({}/{}) diff {difficulty} \"{}\"",
                        s.accepted,
                        s.rejected,
                        e["message"].as_str().unwrap_or("no message")
                    ));
                } else {
                    self.status.accept(difficulty);
                    let s = self.status.shares();
                    log(format_args!(
                        "accepted ({}/{}) diff {difficulty}",
                        s.accepted, s.rejected
                    ));
                }
            }
            Some(Pending::Keepalive) => {}
            None => log(format_args!(
                "answer from {} to unknown request {id} skipped",
                self.url
            )),
        }
        Ok(())
    }

    fn submit(&mut self, f: Found) -> Result<(), Error> {
        let Some(sid) = self.session_id.clone() else {
            self.status.drop_result("not logged in");
            return Ok(());
        };
        let current = self.engine.current_job();
        if !current.is_some_and(|j| Arc::ptr_eq(&j, &f.job)) {
            self.status
                .drop_result(&format!("stale (job {} was replaced)", f.job.id));
            return Ok(());
        }
        match self.engine.verify(&f) {
            Ok(true) => {}
            Ok(false) => {
                self.status.drop_result("failed the local check");
                return Ok(());
            }
            Err(e) => {
                self.status.drop_result(&e.to_string());
                return Ok(());
            }
        }
        let difficulty = f.job.goal.difficulty();
        self.send(
            "submit",
            submit_params(&sid, &f),
            Pending::Submit { difficulty },
        )
    }
}

fn session(
    cfg: &StratumConfig,
    pool: &PoolConfig,
    engine: &Engine,
    found: &Receiver<Found>,
    status: &Status,
    stop: &AtomicBool,
    logged_in: &mut bool,
) -> Result<(), Error> {
    let conn = connect(pool, cfg.timeout.min(Duration::from_secs(20)))?;
    let mut s = Session {
        conn,
        next_id: 1,
        pending: HashMap::new(),
        last_send: Instant::now(),
        session_id: None,
        algo: Algo::Rx0,
        engine,
        status,
        url: &pool.url,
    };
    let mut login = json!({
        "login": pool.user,
        "pass": pool.pass,
        "agent": concat!("proofkit-miner/", env!("CARGO_PKG_VERSION")),
        "algo": ["rx/0", "rx/2"],
    });
    if let Some(r) = &pool.rig_id {
        login["rigid"] = json!(r);
    }
    s.send("login", login, Pending::Login)?;
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut last_recv = Instant::now();
    while !stop.load(Ordering::Acquire) {
        match s.conn.read(&mut chunk) {
            Ok(0) => return Err(Error::Pool("the pool closed the connection".into())),
            Ok(n) => {
                last_recv = Instant::now();
                buf.extend_from_slice(&chunk[..n]);
                while let Some(i) = buf.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = buf.drain(..=i).collect();
                    let line = line.trim_ascii();
                    if !line.is_empty() {
                        s.handle_line(line)?;
                        *logged_in |= s.session_id.is_some();
                    }
                }
                if buf.len() > MAX_LINE {
                    return Err(Error::Pool(format!(
                        "a line longer than {MAX_LINE} bytes: not a stratum pool"
                    )));
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
        if last_recv.elapsed() > cfg.timeout {
            return Err(Error::Pool(format!(
                "nothing from the pool for {} s",
                cfg.timeout.as_secs()
            )));
        }
        loop {
            match found.recv_timeout(Duration::from_millis(1)) {
                Ok(f) => s.submit(f)?,
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
        }
        if s.session_id.is_some() && s.last_send.elapsed() >= cfg.keepalive {
            let sid = s.session_id.clone().expect("checked");
            s.send("keepalived", json!({"id": sid}), Pending::Keepalive)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_urls() {
        assert_eq!(
            parse_pool_url("stratum+ssl://pool.example:443").unwrap(),
            PoolUrl {
                host: "pool.example".into(),
                port: 443,
                tls: true
            }
        );
        assert!(!parse_pool_url("127.0.0.1:3333").unwrap().tls);
        for bad in [
            "http://x:1",
            "stratum+tcp://x",
            "stratum+tcp://:1",
            "x:99999",
        ] {
            assert!(parse_pool_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn jobs_from_pools() {
        let good = json!({"blob": "00".repeat(76), "job_id": "7", "target": "b88d0600",
            "seed_hash": "22".repeat(32), "height": 9, "algo": "rx/0"});
        let j = parse_job(&good, Algo::Rx0).unwrap();
        assert_eq!((j.id.as_str(), j.height, j.algo), ("7", Some(9), Algo::Rx0));
        let mut no_algo = good.clone();
        no_algo.as_object_mut().unwrap().remove("algo");
        assert_eq!(parse_job(&no_algo, Algo::Rx2).unwrap().algo, Algo::Rx2);
        for (k, v) in [
            ("blob", json!("00".repeat(MAX_BLOB + 1))),
            ("blob", json!("00".repeat(40))),
            ("blob", json!("xyz")),
            ("target", json!("00112233445566778899")),
            ("target", json!("00000000")),
            ("algo", json!("cn/r")),
            ("seed_hash", json!("22")),
            ("job_id", json!(5)),
        ] {
            let mut b = good.clone();
            b[k] = v;
            assert!(parse_job(&b, Algo::Rx0).is_err(), "{k} accepted");
        }
    }

    #[test]
    fn fingerprints_must_be_sha256() {
        assert!(tls_config(Some("abcd")).is_err());
        assert!(tls_config(Some(&"ab".repeat(32))).is_ok());
        assert!(tls_config(None).is_ok());
    }
}
