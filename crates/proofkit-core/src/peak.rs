//! Peak memory of this process: peak RSS from the kernel's high-water mark (`VmHWM`), USS (the
//! pages only this process maps: `Private_Clean + Private_Dirty`) from `/proc/self/smaps_rollup`.
//! The kernel keeps no USS high-water mark, so [`UssSampler`] samples it on a background thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn status_field_kb(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l[field.len()..].split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Peak resident set size of this process in KiB (`VmHWM`), or 0 where unavailable.
pub fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| status_field_kb(&s, "VmHWM:"))
        .unwrap_or(0)
}

/// Current resident set size in KiB (`VmRSS`).
pub fn current_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| status_field_kb(&s, "VmRSS:"))
        .unwrap_or(0)
}

/// Current unique set size in KiB, or 0 where `/proc/self/smaps_rollup` is unavailable.
pub fn current_uss_kb() -> u64 {
    match std::fs::read_to_string("/proc/self/smaps_rollup") {
        Ok(s) => {
            status_field_kb(&s, "Private_Clean:").unwrap_or(0)
                + status_field_kb(&s, "Private_Dirty:").unwrap_or(0)
        }
        Err(_) => 0,
    }
}

/// Resets the kernel's RSS high-water mark (`echo 5 > /proc/self/clear_refs`), so that
/// [`peak_rss_kb`] measures from now. Returns false where the kernel refuses.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Samples USS every `period` on a background thread and remembers the largest value; stops on
/// [`UssSampler::finish`] or drop.
pub struct UssSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl UssSampler {
    pub fn start(period: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(current_uss_kb()));
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(current_uss_kb(), Ordering::Relaxed);
                std::thread::sleep(period);
            }
        });
        UssSampler {
            stop,
            peak,
            thread: Some(thread),
        }
    }

    /// Stops sampling and returns the peak USS in KiB (including one last sample).
    pub fn finish(mut self) -> u64 {
        self.stop_thread();
        self.peak.fetch_max(current_uss_kb(), Ordering::Relaxed);
        self.peak.load(Ordering::Relaxed)
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for UssSampler {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touching_memory_raises_peaks() {
        let sampler = UssSampler::start(Duration::from_millis(1));
        let before = peak_rss_kb();
        let mut v = vec![0u8; 64 << 20];
        for i in (0..v.len()).step_by(4096) {
            v[i] = i as u8;
        }
        std::thread::sleep(Duration::from_millis(20));
        let uss = sampler.finish();
        std::hint::black_box(&v);
        assert!(
            peak_rss_kb() >= 60 * 1024,
            "peak rss {} before {}",
            peak_rss_kb(),
            before
        );
        assert!(uss >= 60 * 1024, "uss {uss}");
    }

    #[test]
    fn parses_status_fields() {
        let text = "Name:\tx\nVmHWM:\t  1234 kB\nVmRSS:\t 99 kB\n";
        assert_eq!(status_field_kb(text, "VmHWM:"), Some(1234));
        assert_eq!(status_field_kb(text, "VmRSS:"), Some(99));
        assert_eq!(status_field_kb(text, "VmSwap:"), None);
    }
}
