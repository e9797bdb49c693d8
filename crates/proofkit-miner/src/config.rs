//! The JSON configuration file: every command-line setting of the miner, so that
//! `proofkit randomx mine --config FILE` equals the flags (flags given as well override it).
//!
//! ```json
//! {
//!   "threads": 2, "mode": "fast", "pages": "thp", "print_time": 60,
//!   "daemon": {"url": "http://127.0.0.1:18081", "wallet": "4...", "poll_ms": 1000},
//!   "pools": [{"url": "stratum+ssl://pool.example:443", "user": "4...", "pass": "x",
//!              "tls_fingerprint": null}],
//!   "api": {"port": 18088, "token": "secret"}
//! }
//! ```
//! Exactly one of `daemon` and `pools` is given.

use crate::engine::Mode;
use crate::stratum::PoolConfig;
use crate::Error;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MinerConfig {
    #[serde(default)]
    pub threads: Option<usize>,
    #[serde(default)]
    pub mode: Option<Mode>,
    /// "small", "thp" or "hugetlb".
    #[serde(default)]
    pub pages: Option<String>,
    /// Seconds between hashrate lines.
    #[serde(default)]
    pub print_time: Option<u64>,
    #[serde(default)]
    pub daemon: Option<DaemonConfig>,
    #[serde(default)]
    pub pools: Vec<PoolConfig>,
    #[serde(default)]
    pub api: Option<ApiConfig>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    pub url: String,
    pub wallet: String,
    #[serde(default)]
    pub poll_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    #[serde(default)]
    pub port: u16,
    #[serde(default)]
    pub token: Option<String>,
}

impl MinerConfig {
    pub fn parse(text: &str) -> Result<MinerConfig, Error> {
        let c: MinerConfig =
            serde_json::from_str(text).map_err(|e| Error::Config(format!("config file: {e}")))?;
        c.check()?;
        Ok(c)
    }

    pub fn load(path: &std::path::Path) -> Result<MinerConfig, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
        Self::parse(&text)
    }

    /// Rejects contradictory settings.
    pub fn check(&self) -> Result<(), Error> {
        if self.daemon.is_some() && !self.pools.is_empty() {
            return Err(Error::Config(
                "give either a daemon (solo mining) or pools, not both".into(),
            ));
        }
        if self.threads == Some(0) {
            return Err(Error::Config("threads must be at least 1".into()));
        }
        if let Some(p) = &self.pages {
            if !["small", "thp", "hugetlb"].contains(&p.as_str()) {
                return Err(Error::Config(format!("pages {p:?}: small, thp or hugetlb")));
            }
        }
        for p in &self.pools {
            crate::stratum::parse_pool_url(&p.url)?;
        }
        if let Some(d) = &self.daemon {
            crate::http::split_url(&d.url)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_parses() {
        let text = r#"{
          "threads": 2, "mode": "fast", "pages": "thp", "print_time": 60,
          "pools": [{"url": "stratum+ssl://pool.example:443", "user": "4abc", "pass": "x",
                     "tls_fingerprint": null}],
          "api": {"port": 18088, "token": "secret"}
        }"#;
        let c = MinerConfig::parse(text).unwrap();
        assert_eq!(c.threads, Some(2));
        assert_eq!(c.mode, Some(Mode::Fast));
        assert_eq!(c.pools[0].user, "4abc");
        assert_eq!(c.api.unwrap().token.as_deref(), Some("secret"));
    }

    #[test]
    fn bad_configs_are_errors() {
        for bad in [
            "{",
            r#"{"threads": 0}"#,
            r#"{"thread": 2}"#,
            r#"{"mode": "turbo"}"#,
            r#"{"pages": "giant"}"#,
            r#"{"pools": [{"url": "http://x:1"}]}"#,
            r#"{"daemon": {"url": "http://a:1", "wallet": "w"}, "pools": [{"url": "a:1"}]}"#,
        ] {
            assert!(MinerConfig::parse(bad).is_err(), "{bad}");
        }
    }
}
