//! Hashrate and share statistics as xmrig reports them: hashrate averaged over the last 10 s,
//! 60 s and 15 min, accepted and rejected results with their difficulty.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The averaging windows of xmrig's hashrate line.
pub const WINDOWS: [Duration; 3] = [
    Duration::from_secs(10),
    Duration::from_secs(60),
    Duration::from_secs(900),
];

/// Samples of the total hash count, kept for the longest window.
#[derive(Debug)]
pub struct Hashrate {
    samples: VecDeque<(Instant, u64)>,
    highest: f64,
}

impl Default for Hashrate {
    fn default() -> Self {
        Self::new()
    }
}

impl Hashrate {
    pub fn new() -> Self {
        Hashrate {
            samples: VecDeque::new(),
            highest: 0.0,
        }
    }

    /// Records the running total `hashes` at time `now` (call about once a second).
    pub fn sample(&mut self, now: Instant, hashes: u64) {
        self.samples.push_back((now, hashes));
        while let Some(&(t, _)) = self.samples.front() {
            if now.duration_since(t) > WINDOWS[2] + Duration::from_secs(2) {
                self.samples.pop_front();
            } else {
                break;
            }
        }
        if let Some(r) = self.rate(WINDOWS[0]) {
            self.highest = self.highest.max(r);
        }
    }

    /// Hashes per second over the last `window`, or None until a sample at least `window` old
    /// exists (xmrig prints "n/a" then), except that the shortest window needs only 2 samples.
    pub fn rate(&self, window: Duration) -> Option<f64> {
        let &(t1, h1) = self.samples.back()?;
        let oldest = self.samples.front()?;
        // The newest sample at least `window` before the last one, or the oldest for the first
        // window when the history is shorter.
        let base = self
            .samples
            .iter()
            .rev()
            .find(|(t, _)| t1.duration_since(*t) >= window)
            .or((window <= WINDOWS[0] && oldest.0 < t1).then_some(oldest))?;
        let dt = t1.duration_since(base.0).as_secs_f64();
        (dt > 0.0).then(|| (h1 - base.1) as f64 / dt)
    }

    /// The 10 s / 60 s / 15 min averages.
    pub fn rates(&self) -> [Option<f64>; 3] {
        WINDOWS.map(|w| self.rate(w))
    }

    pub fn highest(&self) -> f64 {
        self.highest
    }
}

/// Accepted and rejected results.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Shares {
    pub accepted: u64,
    pub rejected: u64,
    /// Found but not submitted: stale (the job or key changed) or failing the local check.
    pub dropped: u64,
    /// Sum of the difficulties of accepted results.
    pub accepted_difficulty: u128,
    /// Difficulty of the last job.
    pub current_difficulty: u128,
}

/// Where results go now.
#[derive(Clone, Debug, Default)]
pub struct Connection {
    pub url: String,
    /// "solo" or "pool".
    pub kind: String,
    pub connected_since: Option<Instant>,
    pub algo: String,
    pub height: Option<u64>,
    pub difficulty: u128,
}

/// The miner's state as the hashrate printer and the API see it.
#[derive(Debug)]
pub struct Status {
    pub started: Instant,
    shares: Mutex<Shares>,
    hashrate: Mutex<Hashrate>,
    conn: Mutex<Connection>,
}

impl Default for Status {
    fn default() -> Self {
        Self::new()
    }
}

impl Status {
    pub fn new() -> Status {
        Status {
            started: Instant::now(),
            shares: Mutex::default(),
            hashrate: Mutex::default(),
            conn: Mutex::default(),
        }
    }

    pub fn set_connection(&self, url: &str, kind: &str) {
        let mut c = self.conn.lock().expect("status lock");
        c.url = url.to_string();
        c.kind = kind.to_string();
        c.connected_since = Some(Instant::now());
    }

    pub fn set_disconnected(&self) {
        self.conn.lock().expect("status lock").connected_since = None;
    }

    pub fn set_job(&self, difficulty: u128, height: Option<u64>, algo: &str) {
        let mut c = self.conn.lock().expect("status lock");
        c.difficulty = difficulty;
        c.height = height;
        c.algo = algo.to_string();
        self.shares.lock().expect("status lock").current_difficulty = difficulty;
    }

    pub fn connection(&self) -> Connection {
        self.conn.lock().expect("status lock").clone()
    }

    pub fn accept(&self, difficulty: u128) {
        let mut s = self.shares.lock().expect("status lock");
        s.accepted += 1;
        s.accepted_difficulty += difficulty;
    }

    pub fn reject(&self, _difficulty: u128) {
        self.shares.lock().expect("status lock").rejected += 1;
    }

    /// A result found but not submitted, with the reason (logged).
    pub fn drop_result(&self, why: &str) {
        self.shares.lock().expect("status lock").dropped += 1;
        crate::log(format_args!("result not submitted: {why}"));
    }

    pub fn shares(&self) -> Shares {
        self.shares.lock().expect("status lock").clone()
    }

    /// Records the engine's running hash total (about once a second).
    pub fn sample(&self, hashes: u64) {
        self.hashrate
            .lock()
            .expect("status lock")
            .sample(Instant::now(), hashes);
    }

    pub fn rates(&self) -> [Option<f64>; 3] {
        self.hashrate.lock().expect("status lock").rates()
    }

    pub fn highest(&self) -> f64 {
        self.hashrate.lock().expect("status lock").highest()
    }
}

/// Formats a hashrate as xmrig does ("n/a" when not known yet).
pub fn fmt_rate(r: Option<f64>) -> String {
    match r {
        Some(r) => format!("{r:.1}"),
        None => "n/a".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_averages() {
        let t0 = Instant::now();
        let mut h = Hashrate::new();
        assert_eq!(h.rate(WINDOWS[0]), None);
        // 100 H/s for 70 s, then 200 H/s for 10 s.
        for s in 0..=70u64 {
            h.sample(t0 + Duration::from_secs(s), 100 * s);
        }
        for s in 71..=80u64 {
            h.sample(t0 + Duration::from_secs(s), 7000 + 200 * (s - 70));
        }
        let r = h.rates();
        assert!((r[0].unwrap() - 200.0).abs() < 1e-9);
        // Last 60 s: 50 s at 100 and 10 s at 200.
        assert!((r[1].unwrap() - (5000.0 + 2000.0) / 60.0).abs() < 1e-9);
        assert_eq!(r[2], None, "15 min of history do not exist yet");
        assert!((h.highest() - 200.0).abs() < 1e-9);
        assert_eq!(fmt_rate(None), "n/a");
    }

    #[test]
    fn old_samples_are_dropped() {
        let t0 = Instant::now();
        let mut h = Hashrate::new();
        for s in 0..2000u64 {
            h.sample(t0 + Duration::from_secs(s), s * 3);
        }
        assert!(h.samples.len() <= 904);
        assert!((h.rate(WINDOWS[2]).unwrap() - 3.0).abs() < 1e-9);
    }
}
