//! Pinning threads to cores (Linux `sched_setaffinity`).

/// Pins the calling thread to logical CPU `core` (taken modulo the CPUs this process may use).
/// Returns false when the OS refuses; pinning is an optimisation, never a requirement.
pub fn pin_current_thread(core: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        let allowed = allowed_cpus();
        if allowed.is_empty() {
            return false;
        }
        let cpu = allowed[core % allowed.len()];
        // SAFETY: cpu_set_t is plain data; zeroed is its empty value, CPU_SET writes inside it,
        // and sched_setaffinity(0, ..) only reads the set for the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = core;
        false
    }
}

/// The logical CPUs this process may run on, in increasing order.
pub fn allowed_cpus() -> Vec<usize> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: as above; sched_getaffinity fills the set we own.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
                return Vec::new();
            }
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        (0..std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1))
            .collect()
    }
}

/// Puts the calling thread in Linux's `SCHED_IDLE` class: it runs only when no other thread
/// wants the core, and any thread that wakes takes the core from it at once. Returns false
/// when the OS refuses; a hint, never a requirement.
pub fn set_current_thread_idle() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sched_param is plain data (zero priority, as SCHED_IDLE requires); the call
        // only reads it, for the calling thread (pid 0).
        unsafe {
            let param: libc::sched_param = std::mem::zeroed();
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn can_pin_to_an_allowed_core() {
        let cpus = super::allowed_cpus();
        assert!(!cpus.is_empty());
        let ok = std::thread::spawn(|| super::pin_current_thread(0))
            .join()
            .unwrap();
        assert!(ok);
    }

    /// The thread is in `SCHED_IDLE` afterwards (the kernel says so), and only that thread.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_thread_can_go_idle_priority() {
        // SAFETY: sched_getscheduler(0) only reads the calling thread's policy.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        let before = policy();
        let (ok, after) = std::thread::spawn(move || (super::set_current_thread_idle(), policy()))
            .join()
            .unwrap();
        assert!(ok);
        assert_eq!(after, libc::SCHED_IDLE);
        assert_eq!(policy(), before);
        assert_ne!(before, libc::SCHED_IDLE);
    }
}
