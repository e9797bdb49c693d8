//! CPU feature detection. Detection runs once; the result is a plain value that engines turn
//! into their own unforgeable kernel tokens.
#![deny(unsafe_code)]

use std::sync::OnceLock;

/// The x86-64 features proofkit's kernels care about. On other architectures every flag is false.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CpuFeatures {
    pub aes: bool,
    pub ssse3: bool,
    pub sse41: bool,
    pub avx2: bool,
    pub avx512f: bool,
    pub avx512vl: bool,
    pub avx512bw: bool,
    pub sha: bool,
    pub bmi2: bool,
    /// The SERIALIZE instruction (CPUID.07H:EDX[14]); not a kernel feature, so not in
    /// [`CpuFeatures::names`].
    pub serialize: bool,
}

impl CpuFeatures {
    /// Lists the present features by name, for start-up banners.
    pub fn names(&self) -> Vec<&'static str> {
        let all = [
            (self.aes, "aes"),
            (self.ssse3, "ssse3"),
            (self.sse41, "sse4.1"),
            (self.avx2, "avx2"),
            (self.avx512f, "avx512f"),
            (self.avx512vl, "avx512vl"),
            (self.avx512bw, "avx512bw"),
            (self.sha, "sha"),
            (self.bmi2, "bmi2"),
        ];
        all.iter().filter(|(on, _)| *on).map(|(_, n)| *n).collect()
    }
}

#[cfg(target_arch = "x86_64")]
fn detect() -> CpuFeatures {
    CpuFeatures {
        aes: std::arch::is_x86_feature_detected!("aes"),
        ssse3: std::arch::is_x86_feature_detected!("ssse3"),
        sse41: std::arch::is_x86_feature_detected!("sse4.1"),
        avx2: std::arch::is_x86_feature_detected!("avx2"),
        avx512f: std::arch::is_x86_feature_detected!("avx512f"),
        avx512vl: std::arch::is_x86_feature_detected!("avx512vl"),
        avx512bw: std::arch::is_x86_feature_detected!("avx512bw"),
        sha: std::arch::is_x86_feature_detected!("sha"),
        bmi2: std::arch::is_x86_feature_detected!("bmi2"),
        // Not among `is_x86_feature_detected!`'s names; an unsupported leaf 7 reads as zeros.
        serialize: std::arch::x86_64::__cpuid_count(7, 0).edx & (1 << 14) != 0,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> CpuFeatures {
    CpuFeatures::default()
}

/// The features of the CPU this process runs on, detected on first call.
pub fn features() -> CpuFeatures {
    static FEATURES: OnceLock<CpuFeatures> = OnceLock::new();
    *FEATURES.get_or_init(detect)
}

/// The CPU's model name from `/proc/cpuinfo`, or "unknown".
pub fn model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// True when the environment variable `name` is set to something other than "" or "0": the
/// switch used for forcing fallbacks (`PROOFKIT_FORCE_PORTABLE=1`, ...).
pub fn env_flag(name: &str) -> bool {
    std::env::var(name)
        .map(|v| !v.is_empty() && v != "0")
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_is_stable_and_consistent() {
        let a = features();
        assert_eq!(a, features());
        // AVX-512BW implies AVX-512F implies AVX2 on every shipping CPU.
        if a.avx512bw {
            assert!(a.avx512f);
        }
        if a.avx512f {
            assert!(a.avx2);
        }
        assert_eq!(
            a.names().len(),
            [a.aes, a.ssse3, a.sse41, a.avx2, a.avx512f, a.avx512vl, a.avx512bw, a.sha, a.bmi2]
                .iter()
                .filter(|x| **x)
                .count()
        );
    }
}
