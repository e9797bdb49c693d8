//! The JSON account list of `proofkit state root --from-json` (`shared/DESIGN.md`):
//! `{"accounts":[{"address":"0x..20 bytes","nonce":N,"balance":"0x...","code_hash":"0x..32 bytes"
//! (optional),"storage":{"0xslot":"0xvalue", ...}}]}`. Numbers may be JSON integers or hex
//! strings; slots and values are hex of up to 32 bytes, left-padded with zeros.
#![deny(unsafe_code)]

use crate::account::{Account, U256};
use crate::keccak::KECCAK_EMPTY;
use crate::state::{Address, State, Writer};
use serde_json::Value;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum GenesisError {
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("accounts[{index}].{field}: {msg}")]
    Field {
        index: usize,
        field: String,
        msg: String,
    },
    #[error("missing top-level \"accounts\" array")]
    NoAccounts,
}

fn hex_bytes(v: &Value, max: usize) -> Result<U256, String> {
    let s = v.as_str().ok_or("expected a hex string")?;
    let h = s
        .strip_prefix("0x")
        .ok_or("expected a 0x-prefixed hex string")?;
    let h = if h.len() % 2 == 1 {
        format!("0{h}")
    } else {
        h.to_string()
    };
    let b = hex::decode(&h).map_err(|e| e.to_string())?;
    if b.len() > max {
        return Err(format!("{} bytes, at most {max} allowed", b.len()));
    }
    let mut out = [0u8; 32];
    out[32 - b.len()..].copy_from_slice(&b);
    Ok(out)
}

fn number(v: &Value, max: usize) -> Result<U256, String> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .map(crate::account::u256)
            .ok_or_else(|| "expected an unsigned integer".into()),
        _ => hex_bytes(v, max),
    }
}

/// The state holding the accounts of a JSON document.
pub fn state_from_json(text: &str) -> Result<State, GenesisError> {
    let doc: Value = serde_json::from_str(text)?;
    let accounts = doc
        .get("accounts")
        .and_then(Value::as_array)
        .ok_or(GenesisError::NoAccounts)?;
    let mut w = Writer::new(State::new());
    for (index, a) in accounts.iter().enumerate() {
        let err = |field: &str, msg: String| GenesisError::Field {
            index,
            field: field.into(),
            msg,
        };
        let addr_v = a
            .get("address")
            .ok_or_else(|| err("address", "missing".into()))?;
        let s = addr_v.as_str().unwrap_or("");
        if s.len() != 42 {
            return Err(err("address", "expected 0x and 40 hex digits".into()));
        }
        let full = hex_bytes(addr_v, 20).map_err(|m| err("address", m))?;
        let addr: Address = full[12..].try_into().expect("20 bytes");
        let nonce = match a.get("nonce") {
            None => 0,
            Some(v) => {
                let n = number(v, 8).map_err(|m| err("nonce", m))?;
                u64::from_be_bytes(n[24..].try_into().expect("8 bytes"))
            }
        };
        let balance = match a.get("balance") {
            None => [0; 32],
            Some(v) => number(v, 32).map_err(|m| err("balance", m))?,
        };
        let code_hash = match a.get("code_hash") {
            None => KECCAK_EMPTY,
            Some(v) => {
                if v.as_str().map(str::len) != Some(66) {
                    return Err(err("code_hash", "expected 0x and 64 hex digits".into()));
                }
                hex_bytes(v, 32).map_err(|m| err("code_hash", m))?
            }
        };
        w.set_account(
            &addr,
            Some(Account {
                nonce,
                balance,
                code_hash,
            }),
        );
        if let Some(st) = a.get("storage") {
            let st = st
                .as_object()
                .ok_or_else(|| err("storage", "expected an object".into()))?;
            for (k, v) in st {
                let slot = hex_bytes(&Value::String(k.clone()), 32)
                    .map_err(|m| err(&format!("storage[{k}]"), m))?;
                let value = number(v, 32).map_err(|m| err(&format!("storage[{k}]"), m))?;
                w.set_storage(&addr, &slot, &value)
                    .expect("the account was just created");
            }
        }
    }
    Ok(w.state().clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::u256;

    #[test]
    fn parses_accounts_and_storage() {
        let text = r#"{"accounts":[
            {"address":"0x0000000000000000000000000000000000000001","nonce":1,"balance":"0x0de0b6b3a7640000",
             "storage":{"0x01":"0x2a","0x0000000000000000000000000000000000000000000000000000000000000002":"0x00"}},
            {"address":"0x00000000000000000000000000000000000000ff","nonce":"0x2","balance":5,
             "code_hash":"0x1111111111111111111111111111111111111111111111111111111111111111"}]}"#;
        let s = state_from_json(text).unwrap();
        let mut w = Writer::new(State::new());
        let a1 = {
            let mut a = [0u8; 20];
            a[19] = 1;
            a
        };
        let a2 = {
            let mut a = [0u8; 20];
            a[19] = 0xff;
            a
        };
        w.set_account(
            &a1,
            Some(Account {
                nonce: 1,
                balance: u256(1_000_000_000_000_000_000),
                code_hash: KECCAK_EMPTY,
            }),
        );
        w.set_storage(&a1, &u256(1), &u256(42)).unwrap();
        w.set_account(
            &a2,
            Some(Account {
                nonce: 2,
                balance: u256(5),
                code_hash: [0x11; 32],
            }),
        );
        assert_eq!(s.root(), w.root());
    }

    #[test]
    fn bad_documents_are_errors() {
        for bad in [
            "{",
            "{}",
            r#"{"accounts":[{"nonce":1}]}"#,
            r#"{"accounts":[{"address":"0x01"}]}"#,
            r#"{"accounts":[{"address":"0x000000000000000000000000000000000000000g"}]}"#,
            r#"{"accounts":[{"address":"0x0000000000000000000000000000000000000001","balance":"0x0101010101010101010101010101010101010101010101010101010101010101ff"}]}"#,
            r#"{"accounts":[{"address":"0x0000000000000000000000000000000000000001","nonce":-1}]}"#,
            r#"{"accounts":[{"address":"0x0000000000000000000000000000000000000001","storage":[]}]}"#,
        ] {
            assert!(state_from_json(bad).is_err(), "{bad}");
        }
    }
}
