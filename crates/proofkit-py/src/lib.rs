//! The native part of the `proofkit` Python package (`proofkit._proofkit`): PyO3 bindings of
//! the public Rust APIs of the engines, one submodule each:
//!
//! | submodule | wraps | Python module |
//! |---|---|---|
//! | [`randomx`] | `proofkit-randomx` (Cache, Dataset, VM, commitment) | `proofkit.randomx` |
//! | [`equihash`] | `proofkit-equihash` (solve, verify, minimal encoding) | `proofkit.equihash` |
//! | [`vdf`] | `proofkit-vdf` (chain, prove, verify) | `proofkit.vdf` |
//! | [`state`] | `proofkit-state` (Db, blocks, proofs) | `proofkit.state` |
//!
//! The Python-facing API, its docstrings and type stubs live in `python/proofkit/`; the
//! contract is issue 8 of the project. Conventions kept by every binding here:
//!
//! * heavy work runs with the interpreter detached ([`detached`]), so other Python threads run
//!   meanwhile and several threads can hash or solve at once;
//! * every error is a Python exception: the engines' typed errors become the classes of
//!   `proofkit.errors` (with a `kind` naming the variant), argument mistakes become
//!   `ValueError`/`TypeError`, and a Rust panic becomes `ProofkitError` instead of unwinding
//!   into the interpreter.
#![deny(unsafe_code)]

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyMemoryView};
use std::borrow::Cow;
use std::panic::{catch_unwind, AssertUnwindSafe};

pub mod equihash;
pub mod randomx;
pub mod state;
pub mod vdf;

/// Builds an exception of class `class` of `proofkit.errors`: `class(message, kind)`, then sets
/// the extra attributes.
pub(crate) fn error(
    py: Python<'_>,
    class: &str,
    message: String,
    kind: &str,
    extra: &[(&str, Py<PyAny>)],
) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let cls = py.import("proofkit.errors")?.getattr(class)?;
        let value = cls.call1((message.clone(), kind))?;
        for (name, v) in extra {
            value.setattr(*name, v)?;
        }
        Ok(PyErr::from_value(value))
    })();
    // Without the Python half of the package (the extension imported on its own), fall back
    // to RuntimeError rather than losing the message.
    made.unwrap_or_else(|e| e)
}

/// Runs `f` with the interpreter detached (other Python threads run meanwhile), turning a
/// panic into `ProofkitError` instead of letting it unwind into Python.
pub(crate) fn detached<T: Send, F: FnOnce() -> T + Send>(py: Python<'_>, f: F) -> PyResult<T> {
    let out = py.detach(move || catch_unwind(AssertUnwindSafe(f)));
    out.map_err(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        error(
            py,
            "ProofkitError",
            format!("internal error (please report): {what}"),
            "Internal",
            &[],
        )
    })
}

/// The bytes of a bytes-like argument (`bytes` without a copy; `bytearray`, `memoryview`
/// copied). `str` and `int` are refused: `bytes(5)` would silently mean five zero bytes.
pub(crate) fn bytes_arg<'a>(obj: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Cow::Borrowed(b.as_bytes()));
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(Cow::Owned(b.to_vec()));
    }
    if obj.is_instance_of::<PyMemoryView>() {
        let b = obj.call_method0("tobytes")?;
        let b = b.cast::<PyBytes>()?;
        return Ok(Cow::Owned(b.as_bytes().to_vec()));
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes, bytearray or memoryview, not {}",
        obj.get_type().name()?
    )))
}

/// A bytes-like argument of exactly `N` bytes.
pub(crate) fn fixed_arg<const N: usize>(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<[u8; N]> {
    let b = bytes_arg(obj, what)?;
    b.as_ref()
        .try_into()
        .map_err(|_| PyValueError::new_err(format!("{what} must be {N} bytes, got {}", b.len())))
}

#[pymodule]
fn _proofkit(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    for (name, add) in [
        (
            "randomx",
            randomx::register as fn(&Bound<'_, PyModule>) -> PyResult<()>,
        ),
        ("equihash", equihash::register),
        ("vdf", vdf::register),
        ("state", state::register),
    ] {
        let sub = PyModule::new(py, name)?;
        add(&sub)?;
        m.add_submodule(&sub)?;
    }
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
