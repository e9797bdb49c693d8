//! `proofkit.vdf`: the recursive SHA-256 chain, checkpointed proofs (the binary proof file of
//! `proofkit_vdf::proof`, as bytes) and their parallel verification.
//!
//! A proof that does not parse raises `VdfError` whose `kind` names the `ProofError` variant
//! (`"Checksum"`, `"Truncated"`, ...); a segment that does not reach its checkpoint raises
//! `VdfError(kind="BadSegment")` with `segment` and `segments`.

use crate::{detached, error, fixed_arg};
use proofkit_vdf::{Proof, ProofError, VdfError, VerifyError};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use pyo3::IntoPyObjectExt;
use std::sync::Mutex;

fn proof_error(py: Python<'_>, e: &ProofError) -> PyErr {
    let kind = match e {
        ProofError::TooShort { .. } => "TooShort",
        ProofError::BadMagic => "BadMagic",
        ProofError::UnsupportedVersion(_) => "UnsupportedVersion",
        ProofError::Reserved(_) => "Reserved",
        ProofError::ZeroIterations => "ZeroIterations",
        ProofError::ZeroSegment => "ZeroSegment",
        ProofError::CheckpointCount { .. } => "CheckpointCount",
        ProofError::TooManyCheckpoints { .. } => "TooManyCheckpoints",
        ProofError::Truncated { .. } => "Truncated",
        ProofError::TrailingBytes { .. } => "TrailingBytes",
        ProofError::Checksum => "Checksum",
        ProofError::Json(_) => "Json",
    };
    error(py, "VdfError", e.to_string(), kind, &[])
}

fn parse(py: Python<'_>, proof: &Bound<'_, PyAny>) -> PyResult<Proof> {
    let b = crate::bytes_arg(proof, "proof")?;
    Proof::from_bytes(&b).map_err(|e| proof_error(py, &e))
}

/// `iterations` links of `h <- SHA256(h)` from the 32-byte `start`.
#[pyfunction]
fn chain<'py>(
    py: Python<'py>,
    start: &Bound<'py, PyAny>,
    iterations: u64,
) -> PyResult<Bound<'py, PyBytes>> {
    let start: [u8; 32] = fixed_arg(start, "start")?;
    let out = detached(py, || proofkit_vdf::chain(&start, iterations))?;
    Ok(PyBytes::new(py, &out))
}

/// Runs the chain once, recording a checkpoint every `segment` links, and returns the proof
/// file's bytes. `progress(links_done, iterations)` is called about every million links.
#[pyfunction]
#[pyo3(signature = (start, iterations, segment, infusions = Vec::new(), progress = None))]
fn prove<'py>(
    py: Python<'py>,
    start: &Bound<'py, PyAny>,
    iterations: u64,
    segment: u64,
    infusions: Vec<Bound<'py, PyAny>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Bound<'py, PyBytes>> {
    let start: [u8; 32] = fixed_arg(start, "start")?;
    let infusions = infusions
        .iter()
        .map(|v| fixed_arg::<32>(v, "infusion"))
        .collect::<PyResult<Vec<_>>>()?;
    let callback_error: Mutex<Option<PyErr>> = Mutex::new(None);
    let result = detached(py, || {
        let mut done = 0u64;
        let mut report = |step: u64| {
            done += step;
            if let Some(cb) = &progress {
                Python::attach(|py| {
                    if let Err(e) = cb.call1(py, (done, iterations)) {
                        callback_error
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert(e);
                    }
                });
            }
        };
        proofkit_vdf::prove(&start, &infusions, iterations, segment, &mut report)
    })?;
    if let Some(e) = callback_error
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
    {
        return Err(e);
    }
    let proof = result.map_err(|VdfError::Proof(e)| proof_error(py, &e))?;
    let bytes = proof.to_bytes().map_err(|e| proof_error(py, &e))?;
    Ok(PyBytes::new(py, &bytes))
}

/// Verifies every segment of the proof on `threads` threads (0: all cores) and returns the
/// VDF output (the last checkpoint).
#[pyfunction]
#[pyo3(signature = (proof, threads = 0))]
fn verify<'py>(
    py: Python<'py>,
    proof: &Bound<'py, PyAny>,
    threads: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let proof = parse(py, proof)?;
    let res = detached(py, || proofkit_vdf::verify(&proof, threads, &|_| {}))?;
    match res {
        Ok(()) => Ok(PyBytes::new(py, &proof.output())),
        Err(VerifyError::Malformed(e)) => Err(proof_error(py, &e)),
        Err(
            e @ VerifyError::BadSegment {
                index, segments, ..
            },
        ) => Err(error(
            py,
            "VdfError",
            e.to_string(),
            "BadSegment",
            &[
                ("segment", index.into_py_any(py)?),
                ("segments", segments.into_py_any(py)?),
            ],
        )),
        Err(e @ VerifyError::Threads { .. }) => Err(PyValueError::new_err(e.to_string())),
    }
}

/// The fields of a proof file: start, infusions, iterations, segment, checkpoints, seed
/// (the start after infusions) and output.
#[pyfunction]
fn proof_info<'py>(py: Python<'py>, proof: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    let p = parse(py, proof)?;
    let d = PyDict::new(py);
    let b = |x: &[u8; 32]| PyBytes::new(py, x);
    d.set_item("start", b(&p.start))?;
    d.set_item("infusions", p.infusions.iter().map(b).collect::<Vec<_>>())?;
    d.set_item("iterations", p.iterations)?;
    d.set_item("segment", p.segment)?;
    d.set_item(
        "checkpoints",
        p.checkpoints.iter().map(b).collect::<Vec<_>>(),
    )?;
    d.set_item("seed", b(&p.seed()))?;
    d.set_item("output", b(&p.output()))?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(chain, m)?)?;
    m.add_function(wrap_pyfunction!(prove, m)?)?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(proof_info, m)?)?;
    Ok(())
}
