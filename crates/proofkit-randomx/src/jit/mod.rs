//! Run-time code generation for x86-64: executable memory with W^X discipline and a small
//! checked assembler, plus the SuperscalarHash compiler built on them.
//!
//! Code is written into a [`WritableCode`] (read-write, never executable) and then sealed into an
//! [`ExecutableCode`] (read-execute, never writable): the two states are distinct types, so no
//! page is ever writable and executable at once.
#![allow(unsafe_code)]

pub mod asm;
pub mod evex;
pub mod superscalar_avx512;
pub mod superscalar_x86_64;

/// A read-write code buffer being assembled.
pub struct WritableCode {
    ptr: *mut u8,
    cap: usize,
    len: usize,
}

/// Sealed, read-execute machine code.
pub struct ExecutableCode {
    ptr: *mut u8,
    cap: usize,
}

// SAFETY: the mapping is owned exclusively and immutable once sealed.
unsafe impl Send for ExecutableCode {}
// SAFETY: shared references only execute the code.
unsafe impl Sync for ExecutableCode {}

#[derive(Debug, thiserror::Error)]
pub enum JitError {
    #[error("cannot map code memory: {0}")]
    Map(std::io::Error),
    #[error("cannot make code executable: {0}")]
    Protect(std::io::Error),
    #[error("JIT unavailable on this platform")]
    Unsupported,
}

impl WritableCode {
    pub fn new(cap: usize) -> Result<Self, JitError> {
        let cap = cap.div_ceil(4096) * 4096;
        // SAFETY: anonymous private mapping, result checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                cap,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(JitError::Map(std::io::Error::last_os_error()));
        }
        Ok(WritableCode {
            ptr: p as *mut u8,
            cap,
            len: 0,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends bytes. Panics on overflow: callers size the buffer from a proven upper bound.
    pub fn emit(&mut self, bytes: &[u8]) {
        assert!(self.len + bytes.len() <= self.cap, "JIT buffer overflow");
        // SAFETY: bounds checked above; the mapping is writable in this state.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(self.len), bytes.len())
        };
        self.len += bytes.len();
    }

    /// The bytes written so far (for golden-bytes tests).
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the first len bytes were written by emit.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Makes the buffer read-execute.
    pub fn seal(self) -> Result<ExecutableCode, JitError> {
        let (ptr, cap) = (self.ptr, self.cap);
        std::mem::forget(self);
        // SAFETY: ptr/cap is our mapping; after this no write goes through it.
        if unsafe {
            libc::mprotect(
                ptr as *mut libc::c_void,
                cap,
                libc::PROT_READ | libc::PROT_EXEC,
            )
        } != 0
        {
            let e = std::io::Error::last_os_error();
            // SAFETY: unmapping our own mapping.
            unsafe { libc::munmap(ptr as *mut libc::c_void, cap) };
            return Err(JitError::Protect(e));
        }
        Ok(ExecutableCode { ptr, cap })
    }
}

impl Drop for WritableCode {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.cap) };
    }
}

impl ExecutableCode {
    /// Address of byte `offset` of the code.
    pub fn entry(&self, offset: usize) -> *const u8 {
        assert!(offset < self.cap);
        // SAFETY: inside the mapping.
        unsafe { self.ptr.add(offset) }
    }
}

impl Drop for ExecutableCode {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.cap) };
    }
}
