//! `proofkit.state`: the Ethereum state database of `proofkit_state` (a directory, or memory):
//! blocks begun on any unfinalized parent, account and storage reads and writes, commit to a
//! state root, finalize to the page store, `eth_getProof`-shaped proofs and their verifier.
//!
//! Balances, nonces and storage values are Python ints; addresses are 20 bytes and slots 32
//! bytes (or an int, as a 32-byte big-endian slot number). `DbError` variants become
//! `StateError` with `kind` the variant's name; a closed database raises
//! `StateError(kind="Closed")`.

use crate::{detached, error, fixed_arg};
use proofkit_state::proof::{self, AccountProof, StorageProof};
use proofkit_state::{Account, Address, BlockId, CommitLevel, Db, DbError, DbOptions, B256, U256};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyInt, PyList, PyTuple};
use std::sync::{Mutex, MutexGuard};

fn db_error(py: Python<'_>, e: DbError) -> PyErr {
    let kind = match &e {
        DbError::Store(_) => "Store",
        DbError::UnknownBlock(_) => "UnknownBlock",
        DbError::NotDescendant(_) => "NotDescendant",
        DbError::RootMismatch { .. } => "RootMismatch",
        DbError::CorruptRecord(_) => "CorruptRecord",
        DbError::Failed(_) => "Failed",
        DbError::State(_) => "NoSuchAccount",
    };
    error(py, "StateError", e.to_string(), kind, &[])
}

fn closed(py: Python<'_>) -> PyErr {
    error(
        py,
        "StateError",
        "the database is closed".into(),
        "Closed",
        &[],
    )
}

fn block_closed(py: Python<'_>) -> PyErr {
    error(
        py,
        "StateError",
        "the block was already committed or discarded".into(),
        "BlockClosed",
        &[],
    )
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A non-negative int below 2^256 as 32 big-endian bytes.
fn u256_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<U256> {
    if !obj.is_instance_of::<PyInt>() {
        return Err(PyTypeError::new_err(format!("{what} must be an int")));
    }
    let b = obj
        .call_method1("to_bytes", (32, "big"))
        .map_err(|_| PyValueError::new_err(format!("{what} must be in 0 .. 2^256")))?;
    fixed_arg(&b, what)
}

fn u256_int<'py>(py: Python<'py>, v: &U256) -> PyResult<Bound<'py, PyAny>> {
    py.get_type::<PyInt>()
        .call_method1("from_bytes", (PyBytes::new(py, v), "big"))
}

/// A slot: 32 bytes, or an int slot number.
fn slot_arg(obj: &Bound<'_, PyAny>) -> PyResult<B256> {
    if obj.is_instance_of::<PyInt>() {
        return u256_arg(obj, "slot");
    }
    fixed_arg(obj, "slot")
}

fn address_arg(obj: &Bound<'_, PyAny>) -> PyResult<Address> {
    fixed_arg(obj, "address")
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// An account's own fields (its storage is read with `get_storage`).
#[pyclass(module = "proofkit.state", name = "Account", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct PyAccount {
    inner: Account,
}

#[pymethods]
impl PyAccount {
    #[new]
    #[pyo3(signature = (nonce = 0, balance = None, code_hash = None))]
    fn new(
        nonce: u64,
        balance: Option<&Bound<'_, PyAny>>,
        code_hash: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut a = Account {
            nonce,
            ..Default::default()
        };
        if let Some(b) = balance {
            a.balance = u256_arg(b, "balance")?;
        }
        if let Some(c) = code_hash {
            a.code_hash = fixed_arg(c, "code_hash")?;
        }
        Ok(PyAccount { inner: a })
    }

    #[getter]
    fn nonce(&self) -> u64 {
        self.inner.nonce
    }

    #[getter]
    fn balance<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        u256_int(py, &self.inner.balance)
    }

    #[getter]
    fn code_hash<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.code_hash)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Account(nonce={}, balance={}, code_hash=0x{})",
            self.inner.nonce,
            u256_int(py, &self.inner.balance)?,
            hex(&self.inner.code_hash)
        ))
    }
}

/// The database. Use it as a context manager (or call `close`): closing unmaps the store and
/// releases the file; every later call raises `StateError(kind="Closed")`.
#[pyclass(module = "proofkit.state", name = "Db", frozen)]
pub struct PyDb {
    inner: Mutex<Option<Db>>,
}

impl PyDb {
    fn with<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Db) -> Result<T, DbError>,
    ) -> PyResult<T> {
        let mut g = lock(&self.inner);
        let db = g.as_mut().ok_or_else(|| closed(py))?;
        f(db).map_err(|e| db_error(py, e))
    }
}

fn proof_dict<'py>(py: Python<'py>, p: &AccountProof) -> PyResult<Bound<'py, PyDict>> {
    let nodes = |v: &Vec<Vec<u8>>| v.iter().map(|n| PyBytes::new(py, n)).collect::<Vec<_>>();
    let d = PyDict::new(py);
    d.set_item("address", PyBytes::new(py, &p.address))?;
    d.set_item("nonce", p.nonce)?;
    d.set_item("balance", u256_int(py, &p.balance)?)?;
    d.set_item("code_hash", PyBytes::new(py, &p.code_hash))?;
    d.set_item("storage_hash", PyBytes::new(py, &p.storage_hash))?;
    d.set_item("account_proof", nodes(&p.account_proof))?;
    let sp = PyList::empty(py);
    for s in &p.storage_proof {
        let e = PyDict::new(py);
        e.set_item("key", PyBytes::new(py, &s.key))?;
        e.set_item("value", u256_int(py, &s.value)?)?;
        e.set_item("proof", nodes(&s.proof))?;
        sp.append(e)?;
    }
    d.set_item("storage_proof", sp)?;
    Ok(d)
}

fn item<'py>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Bound<'py, PyAny>> {
    d.get_item(key)?
        .ok_or_else(|| PyValueError::new_err(format!("proof lacks {key:?}")))
}

fn nodes_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<u8>>> {
    let list: Vec<Bound<'_, PyAny>> = obj
        .extract()
        .map_err(|_| PyTypeError::new_err("proof nodes must be a list of bytes"))?;
    list.iter()
        .map(|n| crate::bytes_arg(n, "proof node").map(|b| b.into_owned()))
        .collect()
}

fn proof_arg(d: &Bound<'_, PyDict>) -> PyResult<AccountProof> {
    let storage: Vec<Bound<'_, PyDict>> = item(d, "storage_proof")?
        .extract()
        .map_err(|_| PyTypeError::new_err("storage_proof must be a list of dicts"))?;
    Ok(AccountProof {
        address: address_arg(&item(d, "address")?)?,
        nonce: item(d, "nonce")?
            .extract()
            .map_err(|_| PyValueError::new_err("nonce must be an int in 0 .. 2^64"))?,
        balance: u256_arg(&item(d, "balance")?, "balance")?,
        code_hash: fixed_arg(&item(d, "code_hash")?, "code_hash")?,
        storage_hash: fixed_arg(&item(d, "storage_hash")?, "storage_hash")?,
        account_proof: nodes_arg(&item(d, "account_proof")?)?,
        storage_proof: storage
            .iter()
            .map(|s| {
                Ok(StorageProof {
                    key: slot_arg(&item(s, "key")?)?,
                    value: u256_arg(&item(s, "value")?, "value")?,
                    proof: nodes_arg(&item(s, "proof")?)?,
                })
            })
            .collect::<PyResult<_>>()?,
    })
}

/// Checks an `eth_getProof`-shaped proof (as returned by `Db.get_proof`) against a trusted
/// 32-byte state root; returns None when it holds, raises `StateError` otherwise.
#[pyfunction]
fn verify_proof(
    py: Python<'_>,
    root: &Bound<'_, PyAny>,
    proof: &Bound<'_, PyDict>,
) -> PyResult<()> {
    let root: B256 = fixed_arg(root, "root")?;
    let p = proof_arg(proof)?;
    proof::verify(&root, &p).map_err(|e| {
        let kind = match e {
            proof::ProofError::HashMismatch(_) => "HashMismatch",
            proof::ProofError::Truncated => "Truncated",
            proof::ProofError::Trailing(_) => "Trailing",
            proof::ProofError::Malformed(..) => "Malformed",
            proof::ProofError::ValueMismatch => "ValueMismatch",
        };
        error(py, "StateError", e.to_string(), kind, &[])
    })
}

#[pymethods]
impl PyDb {
    /// Opens the database in directory `path` (created when absent), or in memory when None.
    #[new]
    #[pyo3(signature = (path = None, *, commit_level = "flush-data-and-root", history = 0))]
    fn new(
        py: Python<'_>,
        path: Option<std::path::PathBuf>,
        commit_level: &str,
        history: usize,
    ) -> PyResult<Self> {
        let level: CommitLevel = commit_level.parse().map_err(PyValueError::new_err)?;
        let opts = DbOptions {
            commit_level: level,
            history,
            ..Default::default()
        };
        let db = detached(py, || Db::open(path.as_deref(), opts))?.map_err(|e| db_error(py, e))?;
        Ok(PyDb {
            inner: Mutex::new(Some(db)),
        })
    }

    /// Closes the database (idempotent).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let db = lock(&self.inner).take();
        detached(py, move || drop(db))
    }

    #[getter]
    fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// The id of the last finalized block (the stored state after opening).
    #[getter]
    fn finalized(&self, py: Python<'_>) -> PyResult<BlockId> {
        self.with(py, |db| Ok(db.finalized()))
    }

    /// The state root after block `block` (default: the finalized block).
    #[pyo3(signature = (block = None))]
    fn root<'py>(&self, py: Python<'py>, block: Option<BlockId>) -> PyResult<Bound<'py, PyBytes>> {
        let r = self.with(py, |db| db.root(block.unwrap_or(db.finalized())))?;
        Ok(PyBytes::new(py, &r))
    }

    /// The block number of `block` (default: the finalized block).
    #[pyo3(signature = (block = None))]
    fn number(&self, py: Python<'_>, block: Option<BlockId>) -> PyResult<u64> {
        self.with(py, |db| db.number(block.unwrap_or(db.finalized())))
    }

    /// Opens a block on `parent` (default: the finalized block).
    #[pyo3(signature = (parent = None))]
    fn begin(slf: &Bound<'_, Self>, parent: Option<BlockId>) -> PyResult<PyBlock> {
        let py = slf.py();
        let (parent, block) = slf.get().with(py, |db| {
            let p = parent.unwrap_or(db.finalized());
            Ok((p, db.begin(p)?))
        })?;
        Ok(PyBlock {
            db: slf.clone().unbind(),
            parent,
            number: block.number(),
            state: Mutex::new(BlockState::Open(Box::new(block))),
        })
    }

    /// Writes the blocks up to `block` to the store and makes it the finalized block; forks
    /// not descending from it are dropped. Returns the store's page counts of the commit.
    fn finalize<'py>(&self, py: Python<'py>, block: BlockId) -> PyResult<Bound<'py, PyDict>> {
        let inner = &self.inner;
        let stats = detached(py, || lock(inner).as_mut().map(|db| db.finalize(block)))?
            .ok_or_else(|| closed(py))?
            .map_err(|e| db_error(py, e))?;
        let d = PyDict::new(py);
        d.set_item("new_pages", stats.new_pages)?;
        d.set_item("reused_pages", stats.reused_pages)?;
        Ok(d)
    }

    /// The account at `address` after `block` (default: finalized), or None.
    #[pyo3(signature = (address, block = None))]
    fn get_account(
        &self,
        py: Python<'_>,
        address: &Bound<'_, PyAny>,
        block: Option<BlockId>,
    ) -> PyResult<Option<PyAccount>> {
        let a = address_arg(address)?;
        let acc = self.with(py, |db| {
            Ok(db.state(block.unwrap_or(db.finalized()))?.account(&a))
        })?;
        Ok(acc.map(|inner| PyAccount { inner }))
    }

    /// The value of `slot` of `address` after `block` (default: finalized); 0 when unset.
    #[pyo3(signature = (address, slot, block = None))]
    fn get_storage<'py>(
        &self,
        py: Python<'py>,
        address: &Bound<'py, PyAny>,
        slot: &Bound<'py, PyAny>,
        block: Option<BlockId>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let a = address_arg(address)?;
        let s = slot_arg(slot)?;
        let v = self.with(py, |db| {
            Ok(db.state(block.unwrap_or(db.finalized()))?.storage(&a, &s))
        })?;
        u256_int(py, &v)
    }

    /// The `eth_getProof`-shaped proof of `address` and `slots` after `block` (default:
    /// finalized), as a dict (see `verify_proof`).
    #[pyo3(signature = (address, slots = Vec::new(), block = None))]
    fn get_proof<'py>(
        &self,
        py: Python<'py>,
        address: &Bound<'py, PyAny>,
        slots: Vec<Bound<'py, PyAny>>,
        block: Option<BlockId>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let a = address_arg(address)?;
        let slots = slots.iter().map(slot_arg).collect::<PyResult<Vec<_>>>()?;
        let state = self.with(py, |db| {
            Ok(db.state(block.unwrap_or(db.finalized()))?.clone())
        })?;
        let p = detached(py, || proof::get_proof(&state, &a, &slots))?;
        proof_dict(py, &p)
    }

    /// Walks every page of the store and rebuilds the stored state; returns its root.
    fn check<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let inner = &self.inner;
        let r = detached(py, || lock(inner).as_ref().map(|db| db.check()))?
            .ok_or_else(|| closed(py))?
            .map_err(|e| db_error(py, e))?;
        Ok(PyBytes::new(py, &r.1))
    }

    fn __repr__(&self) -> String {
        match &*lock(&self.inner) {
            Some(db) => format!("Db(finalized={})", db.finalized()),
            None => "Db(closed)".into(),
        }
    }
}

enum BlockState {
    Open(Box<proofkit_state::db::Block>),
    Committed { id: BlockId, root: B256 },
    Discarded,
}

/// A block being written on a parent. `commit()` computes its state root and keeps it under a
/// new block id. As a context manager it commits on a normal exit and is discarded when the
/// body raises.
#[pyclass(module = "proofkit.state", name = "Block", frozen)]
pub struct PyBlock {
    db: Py<PyDb>,
    parent: BlockId,
    number: u64,
    state: Mutex<BlockState>,
}

impl PyBlock {
    fn open<T>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut proofkit_state::db::Block) -> PyResult<T>,
    ) -> PyResult<T> {
        match &mut *lock(&self.state) {
            BlockState::Open(b) => f(b),
            _ => Err(block_closed(py)),
        }
    }
}

#[pymethods]
impl PyBlock {
    #[getter]
    fn parent(&self) -> BlockId {
        self.parent
    }

    #[getter]
    fn number(&self) -> u64 {
        self.number
    }

    /// The id given by `commit` (None before).
    #[getter]
    fn id(&self) -> Option<BlockId> {
        match &*lock(&self.state) {
            BlockState::Committed { id, .. } => Some(*id),
            _ => None,
        }
    }

    /// Creates or updates the account at `address` (keeping its storage).
    #[pyo3(signature = (address, nonce = 0, balance = None, code_hash = None))]
    fn set_account(
        &self,
        py: Python<'_>,
        address: &Bound<'_, PyAny>,
        nonce: u64,
        balance: Option<&Bound<'_, PyAny>>,
        code_hash: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let a = address_arg(address)?;
        let acc = PyAccount::new(nonce, balance, code_hash)?.inner;
        self.open(py, |b| {
            b.set_account(&a, Some(acc));
            Ok(())
        })
    }

    /// Deletes the account at `address` and its storage.
    fn delete_account(&self, py: Python<'_>, address: &Bound<'_, PyAny>) -> PyResult<()> {
        let a = address_arg(address)?;
        self.open(py, |b| {
            b.set_account(&a, None);
            Ok(())
        })
    }

    /// Writes storage `slot` of the existing account at `address`; 0 deletes the slot.
    fn set_storage(
        &self,
        py: Python<'_>,
        address: &Bound<'_, PyAny>,
        slot: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let a = address_arg(address)?;
        let s = slot_arg(slot)?;
        let v = u256_arg(value, "value")?;
        self.open(py, |b| {
            b.set_storage(&a, &s, &v)
                .map_err(|e| db_error(py, DbError::State(e)))
        })
    }

    /// The account at `address` as written so far, or None.
    fn get_account(
        &self,
        py: Python<'_>,
        address: &Bound<'_, PyAny>,
    ) -> PyResult<Option<PyAccount>> {
        let a = address_arg(address)?;
        self.open(py, |b| Ok(b.account(&a).map(|inner| PyAccount { inner })))
    }

    /// The value of `slot` of `address` as written so far.
    fn get_storage<'py>(
        &self,
        py: Python<'py>,
        address: &Bound<'py, PyAny>,
        slot: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let a = address_arg(address)?;
        let s = slot_arg(slot)?;
        let v = self.open(py, |b| Ok(b.storage(&a, &s)))?;
        u256_int(py, &v)
    }

    /// The state root: of the writes so far while open, the committed root after `commit`.
    #[getter]
    fn root<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let state = &self.state;
        let r = detached(py, || match &*lock(state) {
            BlockState::Open(b) => Some(b.root()),
            BlockState::Committed { root, .. } => Some(*root),
            BlockState::Discarded => None,
        })?;
        r.map(|r| PyBytes::new(py, &r))
            .ok_or_else(|| block_closed(py))
    }

    /// Computes the block's state root and keeps the block under a new id; returns
    /// `(id, root)`.
    fn commit<'py>(&self, py: Python<'py>) -> PyResult<(BlockId, Bound<'py, PyBytes>)> {
        let block = {
            let mut g = lock(&self.state);
            match std::mem::replace(&mut *g, BlockState::Discarded) {
                BlockState::Open(b) => b,
                other => {
                    *g = other;
                    return Err(block_closed(py));
                }
            }
        };
        let db = self.db.get();
        let inner = &db.inner;
        let res = detached(py, || lock(inner).as_mut().map(|d| d.commit(*block)))?;
        let (id, root) = res
            .ok_or_else(|| closed(py))?
            .map_err(|e| db_error(py, e))?;
        *lock(&self.state) = BlockState::Committed { id, root };
        Ok((id, PyBytes::new(py, &root)))
    }

    /// Drops the block's writes (no effect once committed).
    fn discard(&self) {
        let mut g = lock(&self.state);
        if matches!(*g, BlockState::Open(_)) {
            *g = BlockState::Discarded;
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type, _exc_value, _traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let open = matches!(*lock(&self.state), BlockState::Open(_));
        if exc_type.is_some_and(|t| !t.is_none()) {
            self.discard();
        } else if open {
            self.commit(py)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let s = match &*lock(&self.state) {
            BlockState::Open(_) => "open".to_string(),
            BlockState::Committed { id, .. } => format!("committed as {id}"),
            BlockState::Discarded => "discarded".to_string(),
        };
        format!("Block(number={}, parent={}, {s})", self.number, self.parent)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyAccount>()?;
    m.add_class::<PyDb>()?;
    m.add_class::<PyBlock>()?;
    m.add_function(wrap_pyfunction!(verify_proof, m)?)?;
    m.add(
        "EMPTY_ROOT",
        PyBytes::new(m.py(), &proofkit_state::EMPTY_ROOT),
    )?;
    m.add(
        "KECCAK_EMPTY",
        PyBytes::new(m.py(), &proofkit_state::KECCAK_EMPTY),
    )?;
    Ok(())
}
