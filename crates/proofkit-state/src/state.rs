//! The world state: the secure account trie (keyed by keccak256 of the 20-byte address) whose
//! leaves carry each account's secure storage trie (keyed by keccak256 of the 32-byte slot), and
//! the write log of a block (what finalization writes to the page store).
#![deny(unsafe_code)]

use crate::account::{Account, AccountLeaf, StorageValue, U256};
use crate::keccak::{keccak256, B256};
use crate::trie::{nibbles, Trie};
use std::collections::{BTreeMap, HashMap};
use thiserror::Error;

/// A 20-byte account address.
pub type Address = [u8; 20];

/// A write the state cannot take.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum StateError {
    #[error("storage write to account 0x{0} that does not exist")]
    NoSuchAccount(String),
}

/// One version of the world state; cloning is O(1).
#[derive(Clone, Default)]
pub struct State {
    accounts: Trie<AccountLeaf>,
}

/// What a block did to one account (keys are hashed): finalization turns it into store writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccountWrite {
    /// The account (and so its storage) was deleted at some point in the block.
    pub wiped: bool,
    /// The account at the end of the block (`None`: it does not exist).
    pub account: Option<Account>,
    /// Slots written after the last wipe, by hashed slot; zero means deleted.
    pub storage: BTreeMap<B256, U256>,
}

/// A block's writes by hashed address.
pub type WriteLog = HashMap<B256, AccountWrite>;

impl State {
    pub fn new() -> Self {
        State::default()
    }

    /// The state root.
    pub fn root(&self) -> B256 {
        self.accounts.root_hash()
    }

    pub fn account(&self, addr: &Address) -> Option<Account> {
        self.account_hashed(&keccak256(addr))
    }

    pub fn account_hashed(&self, haddr: &B256) -> Option<Account> {
        self.accounts.get(&nibbles(haddr)).map(|l| l.account)
    }

    /// The value of a slot (zero when unset or when the account does not exist).
    pub fn storage(&self, addr: &Address, slot: &B256) -> U256 {
        self.storage_hashed(&keccak256(addr), &keccak256(slot))
    }

    pub fn storage_hashed(&self, haddr: &B256, hslot: &B256) -> U256 {
        self.accounts
            .get(&nibbles(haddr))
            .and_then(|l| l.storage.get(&nibbles(hslot)))
            .map_or([0; 32], |v| v.to_u256())
    }

    /// The storage root of an account (`None` when it does not exist).
    pub fn storage_root(&self, addr: &Address) -> Option<B256> {
        self.accounts
            .get(&nibbles(&keccak256(addr)))
            .map(|l| l.storage.root_hash())
    }

    pub(crate) fn account_trie(&self) -> &Trie<AccountLeaf> {
        &self.accounts
    }

    /// Creates or updates an account (keeping its storage); `None` deletes it with its storage.
    pub fn set_account_hashed(&mut self, haddr: &B256, account: Option<Account>) {
        let path = nibbles(haddr);
        match account {
            None => {
                self.accounts.remove(&path);
            }
            Some(account) => match self.accounts.get_mut(&path) {
                Some(leaf) => leaf.account = account,
                None => self.accounts.insert(
                    &path,
                    AccountLeaf {
                        account,
                        storage: Trie::new(),
                    },
                ),
            },
        }
    }

    /// Writes a slot of an existing account; zero deletes it.
    pub fn set_storage_hashed(
        &mut self,
        haddr: &B256,
        hslot: &B256,
        value: &U256,
    ) -> Result<(), StateError> {
        let path = nibbles(haddr);
        let Some(leaf) = self.accounts.get_mut(&path) else {
            return Err(StateError::NoSuchAccount(hex::encode(haddr)));
        };
        let spath = nibbles(hslot);
        match StorageValue::new(value) {
            Some(v) => leaf.storage.insert(&spath, v),
            None => {
                leaf.storage.remove(&spath);
            }
        }
        Ok(())
    }

    /// Visits every account (hashed address, account, storage trie) in hashed order.
    pub fn for_each_account(&self, mut f: impl FnMut(B256, &Account, &Trie<StorageValue>)) {
        self.accounts
            .for_each(|path, leaf| f(pack(path), &leaf.account, &leaf.storage));
    }
}

/// Packs 64 nibbles back into 32 bytes.
pub fn pack(path: &[u8]) -> B256 {
    let mut k = [0u8; 32];
    for (i, pair) in path.chunks(2).enumerate().take(32) {
        k[i] = (pair[0] << 4) | pair.get(1).copied().unwrap_or(0);
    }
    k
}

/// A state being changed, with the log of its changes: the body of a block.
#[derive(Clone, Default)]
pub struct Writer {
    pub(crate) state: State,
    pub(crate) log: WriteLog,
    /// The last address written and its hash (a block often writes one account several times).
    last: Option<(Address, B256)>,
    /// The last slot written and its hash (many accounts use the same low slots).
    last_slot: Option<(B256, B256)>,
}

impl Writer {
    pub fn new(state: State) -> Self {
        Writer {
            state,
            log: WriteLog::new(),
            last: None,
            last_slot: None,
        }
    }

    fn hash_address(&mut self, addr: &Address) -> B256 {
        match self.last {
            Some((a, h)) if a == *addr => h,
            _ => {
                let h = keccak256(addr);
                self.last = Some((*addr, h));
                h
            }
        }
    }

    /// The state as written so far (read-your-writes).
    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn account(&self, addr: &Address) -> Option<Account> {
        self.state.account(addr)
    }

    pub fn storage(&self, addr: &Address, slot: &B256) -> U256 {
        self.state.storage(addr, slot)
    }

    /// Creates or updates an account (keeping its storage); `None` deletes it and its storage.
    pub fn set_account(&mut self, addr: &Address, account: Option<Account>) {
        let haddr = self.hash_address(addr);
        self.state.set_account_hashed(&haddr, account);
        let w = self.log.entry(haddr).or_default();
        if account.is_none() {
            w.wiped = true;
            w.storage.clear();
        }
        w.account = account;
    }

    /// Writes a storage slot of an existing account; zero deletes it.
    pub fn set_storage(
        &mut self,
        addr: &Address,
        slot: &B256,
        value: &U256,
    ) -> Result<(), StateError> {
        let haddr = self.hash_address(addr);
        let hslot = match self.last_slot {
            Some((s, h)) if s == *slot => h,
            _ => {
                let h = keccak256(slot);
                self.last_slot = Some((*slot, h));
                h
            }
        };
        self.state.set_storage_hashed(&haddr, &hslot, value)?;
        let account = self.state.account_hashed(&haddr);
        let w = self.log.entry(haddr).or_default();
        w.account = account;
        w.storage.insert(hslot, *value);
        Ok(())
    }

    pub(crate) fn into_parts(self) -> (State, WriteLog) {
        (self.state, self.log)
    }

    /// The root of the state as written so far.
    pub fn root(&self) -> B256 {
        self.state.root()
    }
}
