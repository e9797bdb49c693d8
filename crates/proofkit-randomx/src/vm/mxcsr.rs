//! The SSE control register (MXCSR): rounding mode and exception masks, read and written around
//! code that changes it (the JIT's programs, other implementations' code in the examples).
#![allow(unsafe_code)]

#[cfg(target_arch = "x86_64")]
pub fn read() -> u32 {
    let mut value = 0u32;
    // SAFETY: stmxcsr writes the 4 bytes of `value`.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut value, options(nostack)) };
    value
}

/// Loads `value` (a value `read` returned, or one built from the fields in bits 0-15).
///
/// # Panics
/// If a reserved bit (16-31) is set, which would make `ldmxcsr` fault.
#[cfg(target_arch = "x86_64")]
pub fn write(value: u32) {
    assert_eq!(value >> 16, 0, "reserved MXCSR bits set: {value:#x}");
    // SAFETY: ldmxcsr reads the 4 bytes of `value`, whose reserved bits are clear (checked).
    unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &value, options(nostack, readonly)) };
}

#[cfg(not(target_arch = "x86_64"))]
pub fn read() -> u32 {
    0
}

#[cfg(not(target_arch = "x86_64"))]
pub fn write(_: u32) {}
