//! A minimal HTTP/1.1 client (one POST per connection) and request reader, enough for monerod's
//! JSON-RPC on loopback and the read-only API.
//!
//! Written here rather than taken from a crate: the miner needs one request shape against one
//! server on 127.0.0.1, and the HTTP client crates (ureq, reqwest) bring tens of crates (URL
//! parsing, cookie jars, compression, their own TLS stacks) to a 2-core build for no gain.

use crate::Error;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// The largest response body accepted (a block template is a few kB; 16 MiB leaves room for big
/// mempools without letting a broken server exhaust memory).
pub const MAX_BODY: usize = 16 << 20;

/// `http://host:port[/path]` split into (host:port, path).
pub fn split_url(url: &str) -> Result<(String, String), Error> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| Error::Config(format!("{url:?}: only http:// daemon URLs are supported")))?;
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if hostport.is_empty() {
        return Err(Error::Config(format!("{url:?}: no host")));
    }
    let hostport = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    Ok((hostport, path.to_string()))
}

/// POSTs `body` (JSON) to `path` on `hostport` and returns the status code and body.
pub fn post_json(
    hostport: &str,
    path: &str,
    body: &[u8],
    timeout: Duration,
) -> Result<(u16, Vec<u8>), Error> {
    let addr = hostport
        .to_socket_addrs()
        .map_err(|e| Error::Daemon(format!("{hostport}: {e}")))?
        .next()
        .ok_or_else(|| Error::Daemon(format!("{hostport}: no address")))?;
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    read_response(BufReader::new(s))
}

fn read_response(mut r: impl BufRead) -> Result<(u16, Vec<u8>), Error> {
    let mut line = String::new();
    r.by_ref().take(8192).read_line(&mut line)?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| Error::Daemon(format!("bad HTTP status line {:?}", line.trim())))?;
    let headers = read_headers(&mut r)?;
    let len = header(&headers, "content-length")
        .map(|v| {
            v.parse::<usize>()
                .map_err(|_| Error::Daemon(format!("bad Content-Length {v:?}")))
        })
        .transpose()?;
    let mut body = Vec::new();
    match len {
        Some(n) if n > MAX_BODY => {
            return Err(Error::Daemon(format!("response of {n} bytes is too large")))
        }
        Some(n) => {
            body.resize(n, 0);
            r.read_exact(&mut body)?;
        }
        None => {
            r.take(MAX_BODY as u64 + 1).read_to_end(&mut body)?;
            if body.len() > MAX_BODY {
                return Err(Error::Daemon("response too large".into()));
            }
        }
    }
    Ok((status, body))
}

/// Reads header lines up to the blank line, lower-casing names; at most 100 lines of 8 kB.
pub fn read_headers(r: &mut impl BufRead) -> Result<Vec<(String, String)>, Error> {
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        let n = r.by_ref().take(8192).read_line(&mut line)?;
        if n == 0 || line == "\r\n" || line == "\n" {
            return Ok(headers);
        }
        if headers.len() >= 100 {
            return Err(Error::Daemon("more than 100 HTTP headers".into()));
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
}

pub fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            split_url("http://127.0.0.1:18081").unwrap(),
            ("127.0.0.1:18081".into(), "/".into())
        );
        assert_eq!(
            split_url("http://node/json_rpc").unwrap(),
            ("node:80".into(), "/json_rpc".into())
        );
        assert!(split_url("https://x").is_err());
        assert!(split_url("http://").is_err());
    }

    #[test]
    fn responses() {
        let ok = b"HTTP/1.1 200 Ok\r\nContent-Length: 2\r\n\r\n{}";
        assert_eq!(read_response(&ok[..]).unwrap(), (200, b"{}".to_vec()));
        let no_len = b"HTTP/1.1 500 Err\r\n\r\nabc";
        assert_eq!(read_response(&no_len[..]).unwrap(), (500, b"abc".to_vec()));
        assert!(read_response(&b"garbage\r\n\r\n"[..]).is_err());
        let short = b"HTTP/1.1 200 Ok\r\nContent-Length: 10\r\n\r\nabc";
        assert!(read_response(&short[..]).is_err());
        let huge = b"HTTP/1.1 200 Ok\r\nContent-Length: 999999999999\r\n\r\n";
        assert!(read_response(&huge[..]).is_err());
    }
}
