//! Accounts and storage values: their RLP in the trie (`[nonce, balance, storage_root,
//! code_hash]`, the value's big-endian bytes without leading zeros) and their compact form in
//! the page store.
//!
//! Store form of an account (the record then goes on with its storage trie's root entry, see
//! `state`):
//! ```text
//! [nonce_len u8][nonce BE, trimmed][bal_len u8][balance BE, trimmed][code? 0 | 1][code_hash 32 if 1]
//! ```
//! A storage value is stored as its trimmed big-endian bytes (never empty: zero deletes).
#![deny(unsafe_code)]

use crate::keccak::{B256, KECCAK_EMPTY};
use crate::rlp;
use crate::storage_trie::StorageTrie;
use crate::trie::{Threads, TrieValue};
use thiserror::Error;

/// A 256-bit unsigned integer as 32 big-endian bytes.
pub type U256 = [u8; 32];

/// A U256 from a u64.
pub fn u256(x: u64) -> U256 {
    let mut v = [0u8; 32];
    v[24..].copy_from_slice(&x.to_be_bytes());
    v
}

/// An account's own fields (its storage lives beside it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Account {
    pub nonce: u64,
    pub balance: U256,
    pub code_hash: B256,
}

impl Default for Account {
    fn default() -> Self {
        Account {
            nonce: 0,
            balance: [0; 32],
            code_hash: KECCAK_EMPTY,
        }
    }
}

/// A stored record that does not decode.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("corrupt account record")]
pub struct CorruptRecord;

impl Account {
    /// The account's RLP list given its storage root.
    pub fn rlp(&self, storage_root: &B256, out: &mut Vec<u8>) {
        let nonce = self.nonce.to_be_bytes();
        let nonce = rlp::trim(&nonce);
        let bal = rlp::trim(&self.balance);
        let len = rlp::bytes_len(nonce) + rlp::bytes_len(bal) + 33 + 33;
        rlp::encode_list_header(out, len);
        rlp::encode_bytes(out, nonce);
        rlp::encode_bytes(out, bal);
        rlp::encode_bytes(out, storage_root);
        rlp::encode_bytes(out, &self.code_hash);
    }

    /// The compact store form.
    pub fn to_store(&self, out: &mut Vec<u8>) {
        let nonce = self.nonce.to_be_bytes();
        let nonce = rlp::trim(&nonce);
        out.push(nonce.len() as u8);
        out.extend_from_slice(nonce);
        let bal = rlp::trim(&self.balance);
        out.push(bal.len() as u8);
        out.extend_from_slice(bal);
        if self.code_hash == KECCAK_EMPTY {
            out.push(0);
        } else {
            out.push(1);
            out.extend_from_slice(&self.code_hash);
        }
    }

    /// Decodes the compact store form.
    pub fn from_store(b: &[u8]) -> Result<Account, CorruptRecord> {
        match Account::from_store_prefix(b)? {
            (a, []) => Ok(a),
            _ => Err(CorruptRecord),
        }
    }

    /// Decodes the compact store form at the front of `b`; returns the bytes after it.
    pub fn from_store_prefix(b: &[u8]) -> Result<(Account, &[u8]), CorruptRecord> {
        let take = |b: &mut &[u8], n: usize| -> Result<Vec<u8>, CorruptRecord> {
            if b.len() < n {
                return Err(CorruptRecord);
            }
            let (h, t) = b.split_at(n);
            *b = t;
            Ok(h.to_vec())
        };
        let mut b = b;
        let n = take(&mut b, 1)?[0] as usize;
        if n > 8 {
            return Err(CorruptRecord);
        }
        let nonce = take(&mut b, n)?
            .iter()
            .fold(0u64, |a, &x| (a << 8) | x as u64);
        let n = take(&mut b, 1)?[0] as usize;
        if n > 32 {
            return Err(CorruptRecord);
        }
        let mut balance = [0u8; 32];
        balance[32 - n..].copy_from_slice(&take(&mut b, n)?);
        let code_hash = match take(&mut b, 1)?[0] {
            0 => KECCAK_EMPTY,
            1 => take(&mut b, 32)?.try_into().map_err(|_| CorruptRecord)?,
            _ => return Err(CorruptRecord),
        };
        Ok((
            Account {
                nonce,
                balance,
                code_hash,
            },
            b,
        ))
    }
}

/// A non-zero storage value (trimmed big-endian bytes), held inline: every slot written is a
/// leaf of a storage trie, and a heap buffer per value was one allocation (and one free when
/// the leaf is pruned) per slot and block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StorageValue {
    len: u8,
    bytes: [u8; 32],
}

impl StorageValue {
    /// `None` for zero (a zero value deletes the slot).
    pub fn new(v: &U256) -> Option<Self> {
        Self::from_trimmed(rlp::trim(v))
    }

    /// The value of trimmed big-endian bytes: `None` unless 1 to 32 bytes long.
    pub fn from_trimmed(t: &[u8]) -> Option<Self> {
        if t.is_empty() || t.len() > 32 {
            return None;
        }
        let mut bytes = [0; 32];
        bytes[..t.len()].copy_from_slice(t);
        Some(StorageValue {
            len: t.len() as u8,
            bytes,
        })
    }

    /// The trimmed big-endian bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    pub fn to_u256(&self) -> U256 {
        let t = self.as_bytes();
        let mut v = [0u8; 32];
        v[32 - t.len()..].copy_from_slice(t);
        v
    }
}

impl TrieValue for StorageValue {
    fn leaf_bytes(&self, out: &mut Vec<u8>) {
        rlp::encode_bytes(out, self.as_bytes());
    }
}

/// A leaf of the account trie: the account and its storage trie (one slot held inline, see
/// [`StorageTrie`]).
#[derive(Clone)]
pub struct AccountLeaf {
    pub account: Account,
    pub storage: StorageTrie,
}

impl TrieValue for AccountLeaf {
    fn leaf_bytes(&self, out: &mut Vec<u8>) {
        self.account.rlp(&self.storage.root_hash(), out);
    }

    /// Hashes the written storage tries of all the accounts together.
    fn prepare_batch(values: &[&Self], threads: Threads) {
        let storages: Vec<&StorageTrie> = values.iter().map(|l| &l.storage).collect();
        StorageTrie::hash_many(&storages, threads);
    }

    /// The storage trie shrinks to its root's reference.
    fn pruned(&self) -> Self {
        AccountLeaf {
            account: self.account,
            storage: self.storage.pruned(),
        }
    }

    /// The storage trie's root cell.
    fn prefetch(&self) {
        self.storage.prefetch_root();
    }
}

impl AccountLeaf {
    /// The store record: the account's store form, then its storage trie's root entry (none
    /// for an empty storage).
    pub fn to_store(&self, out: &mut Vec<u8>) {
        self.account.to_store(out);
        if let Some(e) = self.storage.root_entry() {
            crate::trie::encode_entry(&e, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_form_round_trips() {
        let accounts = [
            Account::default(),
            Account {
                nonce: 1,
                balance: u256(0),
                code_hash: KECCAK_EMPTY,
            },
            Account {
                nonce: u64::MAX,
                balance: [0xff; 32],
                code_hash: [7; 32],
            },
        ];
        for a in accounts {
            let mut v = Vec::new();
            a.to_store(&mut v);
            assert_eq!(Account::from_store(&v), Ok(a));
        }
        assert_eq!(Account::from_store(&[9]), Err(CorruptRecord));
        assert_eq!(Account::from_store(&[0, 0, 2]), Err(CorruptRecord));
        assert_eq!(Account::from_store(&[0, 0, 0, 0]), Err(CorruptRecord));
    }
}
