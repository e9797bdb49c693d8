//! CPU time consumed by the calling thread (`CLOCK_THREAD_CPUTIME_ID`) or the whole process
//! (`CLOCK_PROCESS_CPUTIME_ID`): benchmark clocks that do not count time spent descheduled, for
//! timings on a shared, loaded machine.

use std::time::Duration;

/// The calling thread's CPU time so far; `None` where the clock is unavailable.
pub fn thread_cpu_time() -> Option<Duration> {
    #[cfg(target_os = "linux")]
    {
        clock(libc::CLOCK_THREAD_CPUTIME_ID)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// The CPU time of all the process's threads so far; `None` where the clock is unavailable.
pub fn process_cpu_time() -> Option<Duration> {
    #[cfg(target_os = "linux")]
    {
        clock(libc::CLOCK_PROCESS_CPUTIME_ID)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(target_os = "linux")]
fn clock(id: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into memory we own.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

#[cfg(test)]
mod tests {
    #[test]
    fn advances_with_work() {
        let a = super::thread_cpu_time().unwrap();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let b = super::thread_cpu_time().unwrap();
        assert!(b > a, "{x}");
        assert!(super::process_cpu_time().unwrap() >= b - a);
    }
}
