//! `proofkit.equihash`: solve and verify Zcash-defined Equihash, and the minimal encoding.
//!
//! A rejected solution raises `EquihashError` whose `kind` is the verifier's
//! `ErrorKind` name (`"Collision"`, `"OutOfOrder"`, ...) with `level` and `position` where the
//! verifier gives them; unusable `(n, k)` or personalization raise `ValueError`.

use crate::{bytes_arg, detached, error};
use proofkit_equihash::minimal::{self, EncodingError};
use proofkit_equihash::{
    nonce_from_int, solve as solve_all, verify_indices, verify_minimal, HashGen, Mode, Params,
    SolveError, SolverConfig, VerifyError,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt};
use pyo3::IntoPyObjectExt;
use std::borrow::Cow;

fn params(n: u32, k: u32) -> PyResult<Params> {
    Params::new(n, k).map_err(|e| PyValueError::new_err(format!("Equihash ({n},{k}): {e}")))
}

/// The nonce: bytes as given, or an int as 32 little-endian bytes (the vectors' `nonce_int`).
fn nonce_arg<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    if obj.is_instance_of::<PyInt>() {
        let v: u128 = obj.extract().map_err(|_| {
            PyValueError::new_err("an int nonce must be in 0 .. 2^128 (pass bytes for more)")
        })?;
        return Ok(Cow::Owned(nonce_from_int(v).to_vec()));
    }
    bytes_arg(obj, "nonce")
}

fn hash_gen(
    n: u32,
    k: u32,
    personalization: &Bound<'_, PyAny>,
    header: &Bound<'_, PyAny>,
    nonce: &Bound<'_, PyAny>,
) -> PyResult<HashGen> {
    let p = params(n, k)?;
    let pers = bytes_arg(personalization, "personalization")?;
    let header = bytes_arg(header, "header")?;
    let nonce = nonce_arg(nonce)?;
    HashGen::new(p, &pers, &header, &nonce).map_err(|e| PyValueError::new_err(e.to_string()))
}

fn verify_error(py: Python<'_>, e: VerifyError) -> PyErr {
    let kind = format!("{:?}", e.kind());
    let mut extra = Vec::new();
    match &e {
        VerifyError::Collision { level, position }
        | VerifyError::OutOfOrder { level, position }
        | VerifyError::DuplicateIdxs { level, position } => {
            extra.push(("level", level.into_py_any(py).expect("int")));
            extra.push(("position", position.into_py_any(py).expect("int")));
        }
        _ => {}
    }
    error(py, "EquihashError", e.to_string(), &kind, &extra)
}

fn encoding_error(py: Python<'_>, e: EncodingError) -> PyErr {
    let kind = match e {
        EncodingError::BadLength { .. } => "BadLength",
        EncodingError::BadCount { .. } => "BadCount",
        EncodingError::IndexOutOfRange { .. } => "IndexOutOfRange",
    };
    error(py, "EquihashError", e.to_string(), kind, &[])
}

/// Indices from a sequence of ints; one outside `0 .. 2^32` is reported as the verifier
/// would report an index too wide for the parameters.
fn indices_arg(py: Python<'_>, obj: &Bound<'_, PyAny>, p: Params) -> PyResult<Vec<u32>> {
    let raw: Vec<i128> = obj
        .extract()
        .map_err(|_| PyTypeError::new_err("indices must be a sequence of ints"))?;
    raw.into_iter()
        .map(|i| {
            u32::try_from(i).map_err(|_| {
                error(
                    py,
                    "EquihashError",
                    format!(
                        "index {i} out of range (must be below 2^{})",
                        p.collision_bits() + 1
                    ),
                    "IndexOutOfRange",
                    &[],
                )
            })
        })
        .collect()
}

/// Every solution for `header || nonce`, as lists of `2^k` indices.
#[pyfunction]
#[pyo3(signature = (n, k, header, nonce, personalization = None, mode = "full", height = None, threads = 1))]
#[allow(clippy::too_many_arguments)]
fn solve(
    py: Python<'_>,
    n: u32,
    k: u32,
    header: &Bound<'_, PyAny>,
    nonce: &Bound<'_, PyAny>,
    personalization: Option<&Bound<'_, PyAny>>,
    mode: &str,
    height: Option<u32>,
    threads: usize,
) -> PyResult<Vec<Vec<u32>>> {
    let zcash = PyBytes::new(py, proofkit_equihash::ZCASH_PERSONALIZATION);
    let gen = hash_gen(n, k, personalization.unwrap_or(&zcash), header, nonce)?;
    let mode = match (mode, height) {
        ("full", None) => Mode::Full,
        ("em", None) => Mode::Em,
        ("pr", h) => Mode::Pr {
            height: h.unwrap_or(1),
        },
        ("full" | "em", Some(_)) => {
            return Err(PyValueError::new_err("height applies to mode 'pr' only"))
        }
        (m, _) => {
            return Err(PyValueError::new_err(format!(
                "unknown mode {m:?} (full, pr, em)"
            )))
        }
    };
    if threads == 0 {
        return Err(PyValueError::new_err("threads must be at least 1"));
    }
    let cfg = SolverConfig {
        mode,
        threads,
        spill_dir: None,
    };
    let out = detached(py, || solve_all(&gen, &cfg))?;
    out.map(|(sols, _stats)| sols).map_err(|e| {
        let kind = match e {
            SolveError::TooLarge(..) => "TooLarge",
            SolveError::BadHeight { .. } => "BadHeight",
            SolveError::Blowup { .. } => "Blowup",
            SolveError::Io(_) => "Io",
        };
        error(py, "EquihashError", e.to_string(), kind, &[])
    })
}

/// Checks `solution` (minimal-encoded bytes, or a sequence of indices) for `header || nonce`;
/// returns None when valid, raises `EquihashError` with the rejection kind otherwise.
#[pyfunction]
#[pyo3(signature = (n, k, header, nonce, solution, personalization = None))]
fn verify(
    py: Python<'_>,
    n: u32,
    k: u32,
    header: &Bound<'_, PyAny>,
    nonce: &Bound<'_, PyAny>,
    solution: &Bound<'_, PyAny>,
    personalization: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let zcash = PyBytes::new(py, proofkit_equihash::ZCASH_PERSONALIZATION);
    let gen = hash_gen(n, k, personalization.unwrap_or(&zcash), header, nonce)?;
    let res = if let Ok(b) = bytes_arg(solution, "solution") {
        let b = b.into_owned();
        detached(py, || verify_minimal(&gen, &b))?
    } else {
        let idx = indices_arg(py, solution, gen.params())?;
        detached(py, || verify_indices(&gen, &idx))?
    };
    res.map_err(|e| verify_error(py, e))
}

/// Packs `2^k` indices into the minimal encoding.
#[pyfunction]
fn encode_minimal<'py>(
    py: Python<'py>,
    n: u32,
    k: u32,
    indices: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyBytes>> {
    let p = params(n, k)?;
    let idx = indices_arg(py, indices, p)?;
    let b = minimal::encode(p, &idx).map_err(|e| encoding_error(py, e))?;
    Ok(PyBytes::new(py, &b))
}

/// Unpacks a minimal encoding into its `2^k` indices.
#[pyfunction]
fn decode_minimal(py: Python<'_>, n: u32, k: u32, data: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    let p = params(n, k)?;
    let b = bytes_arg(data, "data")?;
    minimal::decode(p, &b).map_err(|e| encoding_error(py, e))
}

/// The derived sizes of `(n, k)`: indices per solution, bits per index, minimal-encoding bytes.
#[pyfunction]
fn params_info(py: Python<'_>, n: u32, k: u32) -> PyResult<Bound<'_, PyDict>> {
    let p = params(n, k)?;
    let d = PyDict::new(py);
    d.set_item("n", n)?;
    d.set_item("k", k)?;
    d.set_item("collision_bits", p.collision_bits())?;
    d.set_item("index_bits", p.index_bits())?;
    d.set_item("solution_len", p.solution_len())?;
    d.set_item("minimal_len", p.minimal_len())?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(solve, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(encode_minimal, m)?)?;
    m.add_function(wrap_pyfunction!(decode_minimal, m)?)?;
    m.add_function(wrap_pyfunction!(params_info, m)?)?;
    m.add(
        "ZCASH_PERSONALIZATION",
        PyBytes::new(m.py(), proofkit_equihash::ZCASH_PERSONALIZATION),
    )?;
    Ok(())
}
