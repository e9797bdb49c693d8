//! A read-only JSON HTTP API on 127.0.0.1 in the shape of xmrig's: `GET /1/summary` (also
//! `/2/summary`) answers hashrate, results, uptime, connection and huge pages. With a token set,
//! requests must carry `Authorization: Bearer <token>` (else 401).

use crate::http::{header, read_headers};
use crate::{log, Error};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Produces the summary document on each request.
pub type SummaryFn = Arc<dyn Fn() -> Value + Send + Sync>;

/// The running API server; dropping it stops it.
pub struct Api {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Listens on `127.0.0.1:port` (0: any free port).
pub fn serve(port: u16, token: Option<String>, summary: SummaryFn) -> Result<Api, Error> {
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let thread = std::thread::Builder::new()
        .name("api".into())
        .spawn(move || {
            while !st.load(Ordering::Acquire) {
                match listener.accept() {
                    Ok((s, _)) => {
                        if let Err(e) = answer(s, token.as_deref(), &summary) {
                            log(format_args!("api: {e}"));
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(25))
                    }
                    Err(e) => {
                        log(format_args!("api: accept: {e}"));
                        std::thread::sleep(Duration::from_millis(100))
                    }
                }
            }
        })?;
    Ok(Api {
        addr,
        stop,
        thread: Some(thread),
    })
}

impl Drop for Api {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn answer(s: TcpStream, token: Option<&str>, summary: &SummaryFn) -> Result<(), Error> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut r = BufReader::new(s.try_clone()?);
    let mut line = String::new();
    r.by_ref().take(8192).read_line(&mut line)?;
    let headers = read_headers(&mut r)?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let authorized = match token {
        None => true,
        Some(t) => header(&headers, "authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|v| v.trim() == t),
    };
    let (code, body) = if !authorized {
        (401, json!({"error": "unauthorized"}))
    } else if method != "GET" {
        (405, json!({"error": "read-only API: GET only"}))
    } else {
        match path {
            "/1/summary" | "/2/summary" | "/" => (200, summary()),
            _ => (
                404,
                json!({"error": "not found", "endpoints": ["/1/summary"]}),
            ),
        }
    };
    let reason = match code {
        200 => "OK",
        401 => "Unauthorized",
        404 => "Not Found",
        _ => "Method Not Allowed",
    };
    let body = serde_json::to_vec_pretty(&body).expect("JSON");
    let mut w = s;
    write!(
        w,
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )?;
    w.write_all(&body)?;
    Ok(())
}
