//! Merkle proofs in the form of `eth_getProof` (EIP-1186): the RLP of the hashed nodes from the
//! root down the key's path, for an account in the state trie and for slots in its storage
//! trie, and a verifier that walks a proof from a trusted root.
#![deny(unsafe_code)]

use crate::account::{Account, U256};
use crate::keccak::{keccak256, B256, KECCAK_EMPTY};
use crate::rlp::{self, Item};
use crate::state::{Address, State, StateError};
use crate::trie::{decode_hex_prefix, nibbles};
use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ProofError {
    #[error("proof node {0} does not hash to the reference its parent holds")]
    HashMismatch(usize),
    #[error("proof ends before the path does")]
    Truncated,
    #[error("proof has {0} nodes past the end of the path")]
    Trailing(usize),
    #[error("malformed node {0}: {1}")]
    Malformed(usize, String),
    #[error("the proven value differs from the claimed one")]
    ValueMismatch,
}

/// The proof of one storage slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageProof {
    pub key: B256,
    pub value: U256,
    pub proof: Vec<Vec<u8>>,
}

/// An `eth_getProof` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountProof {
    pub address: Address,
    /// The account's fields (all zero / empty hashes for an absent account).
    pub nonce: u64,
    pub balance: U256,
    pub code_hash: B256,
    pub storage_hash: B256,
    pub account_proof: Vec<Vec<u8>>,
    pub storage_proof: Vec<StorageProof>,
}

/// Builds the proof of `addr` and of `slots` in `state` (panics only if the state's store
/// was damaged after opening; see [`try_get_proof`]).
pub fn get_proof(state: &State, addr: &Address, slots: &[B256]) -> AccountProof {
    try_get_proof(state, addr, slots)
        .expect("the state store was damaged after it was opened (use try_get_proof)")
}

/// [`get_proof`], with the store's read errors.
pub fn try_get_proof(
    state: &State,
    addr: &Address,
    slots: &[B256],
) -> Result<AccountProof, StateError> {
    let haddr = keccak256(addr);
    let leaf = state.account_leaf(&haddr)?;
    let account = leaf.as_ref().map(|l| l.account).unwrap_or_default();
    let storage_hash = leaf
        .as_ref()
        .map_or(crate::keccak::EMPTY_ROOT, |l| l.storage.root_hash());
    let mut storage_proof = Vec::with_capacity(slots.len());
    for slot in slots {
        let hslot = keccak256(slot);
        storage_proof.push(match &leaf {
            Some(l) => StorageProof {
                key: *slot,
                value: state.try_storage_hashed(&haddr, &hslot)?,
                proof: state.storage_proof(&haddr, l, &hslot)?,
            },
            None => StorageProof {
                key: *slot,
                value: [0; 32],
                proof: Vec::new(),
            },
        });
    }
    Ok(AccountProof {
        address: *addr,
        nonce: account.nonce,
        balance: account.balance,
        code_hash: if leaf.is_some() {
            account.code_hash
        } else {
            KECCAK_EMPTY
        },
        storage_hash,
        account_proof: state.account_proof(&haddr)?,
        storage_proof,
    })
}

/// Walks `proof` from `root` along the 32-byte key `key` (already hashed) and returns the leaf's
/// value bytes, or `None` when the proof shows the key is absent.
pub fn verify_path(
    root: &B256,
    key: &B256,
    proof: &[Vec<u8>],
) -> Result<Option<Vec<u8>>, ProofError> {
    let path = nibbles(key);
    let mut pos = 0;
    let mut idx = 0;
    // The node to look at next: a hash to find in the proof, or an embedded node.
    let mut want: Result<B256, Vec<u8>> = Ok(*root);
    if *root == crate::keccak::EMPTY_ROOT && proof.is_empty() {
        return Ok(None);
    }
    loop {
        let (node, at) = match &want {
            Ok(h) => {
                let n = proof.get(idx).ok_or(ProofError::Truncated)?;
                if keccak256(n) != *h {
                    return Err(ProofError::HashMismatch(idx));
                }
                idx += 1;
                (n.clone(), idx - 1)
            }
            Err(embedded) => (embedded.clone(), idx.saturating_sub(1)),
        };
        let bad = |m: &str| ProofError::Malformed(at, m.to_string());
        let items = decode_raw_list(&node).map_err(|e| bad(&e.to_string()))?;
        let finish = |v: Option<Vec<u8>>| {
            if idx != proof.len() {
                Err(ProofError::Trailing(proof.len() - idx))
            } else {
                Ok(v)
            }
        };
        match items.len() {
            17 => {
                if pos >= path.len() {
                    return Err(bad("branch past the end of the key"));
                }
                let (child, raw) = items[path[pos] as usize];
                pos += 1;
                match child {
                    Item::String([]) => return finish(None),
                    Item::String(h) if h.len() == 32 => want = Ok(h.try_into().expect("32 bytes")),
                    Item::List(_) => want = Err(raw.to_vec()),
                    _ => return Err(bad("bad child reference")),
                }
            }
            2 => {
                let Item::String(hp) = items[0].0 else {
                    return Err(bad("path is not a string"));
                };
                let (p, is_leaf) = decode_hex_prefix(hp).ok_or_else(|| bad("bad hex prefix"))?;
                let rest = &path[pos..];
                if is_leaf {
                    if rest != &p[..] {
                        return finish(None);
                    }
                    let Item::String(v) = items[1].0 else {
                        return Err(bad("leaf value is not a string"));
                    };
                    return finish(Some(v.to_vec()));
                }
                if p.is_empty() || !rest.starts_with(&p) {
                    return if p.is_empty() {
                        Err(bad("empty extension"))
                    } else {
                        finish(None)
                    };
                }
                pos += p.len();
                match items[1] {
                    (Item::String(h), _) if h.len() == 32 => {
                        want = Ok(h.try_into().expect("32 bytes"))
                    }
                    (Item::List(_), raw) => want = Err(raw.to_vec()),
                    _ => return Err(bad("bad extension child")),
                }
            }
            n => return Err(bad(&format!("node of {n} items"))),
        }
    }
}

fn decode_raw_list(buf: &[u8]) -> Result<Vec<(Item<'_>, &[u8])>, rlp::RlpError> {
    let (item, rest) = rlp::decode(buf)?;
    if !rest.is_empty() {
        return Err(rlp::RlpError::Trailing);
    }
    let Item::List(mut payload) = item else {
        return Err(rlp::RlpError::ExpectedList);
    };
    let mut out = Vec::new();
    while !payload.is_empty() {
        let (it, rest) = rlp::decode(payload)?;
        out.push((it, &payload[..payload.len() - rest.len()]));
        payload = rest;
    }
    Ok(out)
}

/// Verifies an [`AccountProof`] against a trusted state root: the account fields and every
/// storage value must be what the proofs show.
pub fn verify(state_root: &B256, p: &AccountProof) -> Result<(), ProofError> {
    let found = verify_path(state_root, &keccak256(&p.address), &p.account_proof)?;
    let claimed = Account {
        nonce: p.nonce,
        balance: p.balance,
        code_hash: p.code_hash,
    };
    match found {
        Some(v) => {
            let mut expect = Vec::new();
            claimed.rlp(&p.storage_hash, &mut expect);
            if v != expect {
                return Err(ProofError::ValueMismatch);
            }
        }
        None => {
            let absent = p.nonce == 0
                && p.balance == [0; 32]
                && p.code_hash == KECCAK_EMPTY
                && p.storage_hash == crate::keccak::EMPTY_ROOT;
            if !absent {
                return Err(ProofError::ValueMismatch);
            }
        }
    }
    for s in &p.storage_proof {
        let found = verify_path(&p.storage_hash, &keccak256(&s.key), &s.proof)?;
        let value = match found {
            None => [0u8; 32],
            Some(v) => {
                let (item, rest) =
                    rlp::decode(&v).map_err(|e| ProofError::Malformed(0, e.to_string()))?;
                match item {
                    Item::String(b)
                        if rest.is_empty() && b.len() <= 32 && b.first() != Some(&0) =>
                    {
                        let mut x = [0u8; 32];
                        x[32 - b.len()..].copy_from_slice(b);
                        x
                    }
                    _ => return Err(ProofError::Malformed(0, "bad storage value".into())),
                }
            }
        };
        if value != s.value {
            return Err(ProofError::ValueMismatch);
        }
    }
    Ok(())
}
