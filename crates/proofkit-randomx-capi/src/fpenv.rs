//! The floating-point environment at the C boundary (x86-64 backend: MXCSR).
//!
//! The interpreter computes RandomX's four rounding modes in software and therefore needs the
//! CPU in its default state (round to nearest, no flush-to-zero, no denormals-are-zero), which
//! is also what compiled Rust code assumes. A C caller may have changed it (`fesetround`,
//! `_MM_SET_FLUSH_ZERO_MODE`): the reference resets the rounding mode before every hash for the
//! same reason. [`FpGuard`] saves MXCSR, loads the default, and restores the caller's value when
//! dropped, so the caller's rounding mode is unchanged after every entry point (the reference
//! documents that its batch functions "may alter" it; ours never do).

/// MXCSR at process start on x86-64 Linux: all exceptions masked, round to nearest, FTZ/DAZ off.
#[cfg(target_arch = "x86_64")]
const DEFAULT_MXCSR: u32 = 0x1F80;

/// Restores the caller's floating-point control state on drop.
pub struct FpGuard {
    #[cfg(target_arch = "x86_64")]
    saved: u32,
}

impl FpGuard {
    /// Saves the caller's control state and loads the default one.
    #[cfg(target_arch = "x86_64")]
    pub fn enter() -> Self {
        let mut saved: u32 = 0;
        let default = DEFAULT_MXCSR;
        // SAFETY: STMXCSR/LDMXCSR are baseline SSE instructions on every x86-64 CPU; they read
        // and write exactly 4 bytes at the addresses of two live local u32 values. Loading the
        // default value (exceptions masked) cannot raise a floating-point exception.
        unsafe {
            std::arch::asm!(
                "stmxcsr [{s}]",
                "ldmxcsr [{d}]",
                s = in(reg) &mut saved as *mut u32,
                d = in(reg) &default as *const u32,
                options(nostack, preserves_flags),
            );
        }
        FpGuard { saved }
    }

    /// Other architectures: no-op (their default environment is assumed; see the README).
    #[cfg(not(target_arch = "x86_64"))]
    pub fn enter() -> Self {
        FpGuard {}
    }
}

impl Drop for FpGuard {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: reloads the value STMXCSR produced in `enter`, which is a valid MXCSR; reads 4
        // bytes of a live field.
        unsafe {
            std::arch::asm!(
                "ldmxcsr [{s}]",
                s = in(reg) &self.saved as *const u32,
                options(nostack, preserves_flags, readonly),
            );
        }
    }
}
