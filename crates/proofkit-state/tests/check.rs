//! `Db::check` (and the verification at open) against stores whose records were changed behind
//! the database's back, one damage at a time: each must be reported, with the error kind the
//! damage calls for, and the undamaged store must pass.

use proofkit_state::state::{pad, record_key, RECORDLESS_DEPTHS, ROOT_ENTRY_KEY};
use proofkit_state::store::{Op, Store};
use proofkit_state::{u256, Account, CommitLevel, Db, DbError, DbOptions, B256};
use std::path::{Path, PathBuf};

fn addr(i: u64) -> [u8; 20] {
    let mut a = [0u8; 20];
    a[..8].copy_from_slice(&i.to_be_bytes());
    a
}

/// 300 accounts, every third with 40 slots (storage tries with branches), finalized.
fn build(dir: &Path) -> B256 {
    let _ = std::fs::remove_dir_all(dir);
    let mut db = Db::open(Some(dir), DbOptions::default()).unwrap();
    let mut b = db.begin(db.finalized()).unwrap();
    for i in 0..300 {
        let a = addr(i);
        b.writer.set_account(
            &a,
            Some(Account {
                nonce: i,
                balance: u256(1000 + i),
                ..Default::default()
            }),
        );
        if i % 3 == 0 {
            for s in 0..40 {
                b.writer.set_storage(&a, &u256(s), &u256(s + 1)).unwrap();
            }
        }
    }
    let (id, root) = db.commit(b).unwrap();
    db.finalize(id).unwrap();
    let (_, checked) = db.check().unwrap();
    assert_eq!(checked, root);
    root
}

/// The store's keys by length, in key order.
fn keys_of_len(dir: &Path, len: usize) -> Vec<Vec<u8>> {
    let store = Store::open(Some(dir)).unwrap();
    let mut keys = Vec::new();
    store
        .for_each(|k, _| {
            if k.len() == len && k != ROOT_ENTRY_KEY {
                keys.push(k.to_vec());
            }
        })
        .unwrap();
    keys
}

fn value_of(dir: &Path, key: &[u8]) -> Vec<u8> {
    Store::open(Some(dir)).unwrap().get(key).unwrap().unwrap()
}

/// Applies `ops` to the store and commits them under the durable root (or `root`).
fn damage(dir: &Path, ops: Vec<Op>, root: Option<B256>) {
    let mut store = Store::open(Some(dir)).unwrap();
    let meta = store.meta();
    store.apply(ops).unwrap();
    store
        .commit(
            meta.block_number,
            root.unwrap_or(meta.state_root),
            CommitLevel::FlushDataAndRoot,
        )
        .unwrap();
}

/// The error of opening with verification; opening without it and calling `check` must fail
/// too (at the open when the root entry itself is damaged).
fn verify_error(dir: &Path) -> DbError {
    let unverified = DbOptions {
        verify_on_open: false,
        ..DbOptions::default()
    };
    let checked = Db::open(Some(dir), unverified).and_then(|db| db.check().map(|_| ()));
    let opened = Db::open(Some(dir), DbOptions::default()).map(|_| ());
    let (Err(_), Err(e)) = (checked, opened) else {
        panic!("damage not found");
    };
    e
}

fn flip_last(mut v: Vec<u8>) -> Vec<u8> {
    *v.last_mut().unwrap() ^= 1;
    v
}

fn dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("pk-state-check-{name}-{}", std::process::id()))
}

#[test]
fn every_damaged_record_is_reported() {
    let d = dir("records");
    let root = build(&d);
    let branch = keys_of_len(&d, 33).into_iter().nth(3).unwrap();
    let account = keys_of_len(&d, 32)[7].clone();
    let slot = keys_of_len(&d, 64)[5].clone();
    let storage_branch = keys_of_len(&d, 65)[0].clone();
    type Damage = Box<dyn Fn() -> (Vec<Op>, Option<B256>)>;
    let cases: Vec<(&str, Damage, &str)> = vec![
        (
            "a changed account-trie record",
            Box::new({
                let (b, d) = (branch.clone(), d.clone());
                move || (vec![Op::Put(b.clone(), flip_last(value_of(&d, &b)))], None)
            }),
            "differs from the rebuilt trie",
        ),
        (
            "a missing account-trie record",
            Box::new({
                let b = branch.clone();
                move || (vec![Op::Del(b.clone())], None)
            }),
            "differs from the rebuilt trie",
        ),
        (
            "a changed top branch record (where the subtrees checked apart join)",
            Box::new({
                let d = d.clone();
                move || {
                    let k = record_key(None, &[]);
                    (vec![Op::Put(k.clone(), flip_last(value_of(&d, &k)))], None)
                }
            }),
            "differs from the rebuilt trie",
        ),
        (
            "a record of no branch",
            Box::new(|| {
                let k = record_key(None, &[0xf, 0xe, 0xd, 0xc, 0xb, 0xa, 9]);
                (vec![Op::Put(k, vec![3, 0, 0, 1, 1, 0, 1, 1])], None)
            }),
            "is not a node of the rebuilt trie",
        ),
        (
            "records at the depths whose branches have none (state::RECORDLESS_DEPTHS), \
             above a stored account",
            Box::new({
                let a = account.clone();
                move || {
                    let nibbles: Vec<u8> = a[..3].iter().flat_map(|b| [b >> 4, b & 15]).collect();
                    let ops = RECORDLESS_DEPTHS
                        .map(|d| {
                            Op::Put(
                                record_key(None, &nibbles[..d]),
                                vec![3, 0, 0, 1, 1, 0, 1, 1],
                            )
                        })
                        .collect();
                    (ops, None)
                }
            }),
            "is not a node of the rebuilt trie",
        ),
        (
            "a record key with a non-zero padding",
            Box::new(|| {
                let mut k = pad(&[1, 2, 3]).to_vec();
                k[5] = 1;
                k.push(3);
                (vec![Op::Put(k, vec![0])], None)
            }),
            "corrupt record",
        ),
        (
            "a changed balance",
            Box::new({
                let (a, d) = (account.clone(), d.clone());
                move || {
                    let mut v = value_of(&d, &a);
                    // The store form: [nonce len][nonce][balance len][balance]...: change the
                    // balance's last byte.
                    let n = v[0] as usize;
                    let last = 1 + n + v[1 + n] as usize;
                    v[last] ^= 1;
                    (vec![Op::Put(a.clone(), v)], None)
                }
            }),
            "differs from the rebuilt trie",
        ),
        (
            "a missing slot",
            Box::new({
                let s = slot.clone();
                move || (vec![Op::Del(s.clone())], None)
            }),
            "",
        ),
        (
            "a slot of no account",
            Box::new(|| {
                let mut k = vec![0xff; 32];
                k.extend_from_slice(&[1; 32]);
                (vec![Op::Put(k, vec![5])], None)
            }),
            "corrupt record",
        ),
        (
            "a changed storage-trie record",
            Box::new({
                let (b, d) = (storage_branch.clone(), d.clone());
                move || (vec![Op::Put(b.clone(), flip_last(value_of(&d, &b)))], None)
            }),
            "differs from the rebuilt trie",
        ),
        (
            "a changed root entry",
            Box::new({
                let d = d.clone();
                move || {
                    let k = ROOT_ENTRY_KEY.to_vec();
                    (vec![Op::Put(k.clone(), flip_last(value_of(&d, &k)))], None)
                }
            }),
            "root entry",
        ),
        (
            "a key of no kind",
            Box::new(|| (vec![Op::Put(vec![7; 40], vec![1])], None)),
            "corrupt record",
        ),
        (
            "another durable root",
            Box::new(|| (vec![], Some([9; 32]))),
            "root",
        ),
    ];
    for (what, make, says) in cases {
        build(&d);
        let (ops, new_root) = make();
        damage(&d, ops, new_root);
        let e = verify_error(&d);
        assert!(
            matches!(e, DbError::CorruptRecord(_) | DbError::RootMismatch { .. }),
            "{what}: {e}"
        );
        assert!(e.to_string().contains(says), "{what}: {e}");
        println!("{what}: {e}");
    }
    assert_eq!(build(&d), root);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_store_of_one_account_is_checked_whole() {
    // One account: the trie's top is a leaf, not a branch joining subtrees.
    let d = dir("one");
    let _ = std::fs::remove_dir_all(&d);
    let mut db = Db::open(Some(&d), DbOptions::default()).unwrap();
    let mut b = db.begin(db.finalized()).unwrap();
    let a = addr(1);
    b.writer.set_account(&a, Some(Account::default()));
    b.writer.set_storage(&a, &u256(1), &u256(2)).unwrap();
    let (id, root) = db.commit(b).unwrap();
    db.finalize(id).unwrap();
    assert_eq!(db.check().unwrap().1, root);
    drop(db);
    let k = ROOT_ENTRY_KEY.to_vec();
    damage(
        &d,
        vec![Op::Put(k.clone(), flip_last(value_of(&d, &k)))],
        None,
    );
    assert!(verify_error(&d).to_string().contains("root entry"));
    let _ = std::fs::remove_dir_all(&d);
}

/// A database that a version-4 build wrote (with a record for each depth-4 and depth-5 branch of
/// the account trie, which version 6 leaves out) is refused at open with both versions named,
/// instead of being opened and its records reported stale; the store itself still reads it.
#[test]
fn a_database_of_store_version_4_is_refused_at_open() {
    let d = dir("v4");
    build(&d);
    let file = d.join("state.pk");
    let mut bytes = std::fs::read(&file).unwrap();
    let mut patched = 0;
    for m in 0..2 {
        let page = &mut bytes[m * 4096..(m + 1) * 4096];
        if page[0..8] == *b"PKSTATE\0" {
            page[8..12].copy_from_slice(&4u32.to_le_bytes());
            let sum = proofkit_state::keccak256(&page[0..80]);
            page[80..112].copy_from_slice(&sum);
            patched += 1;
        }
    }
    assert!(patched > 0);
    std::fs::write(&file, &bytes).unwrap();
    let e = Db::open(Some(&d), DbOptions::default())
        .err()
        .expect("a version-4 database refused")
        .to_string();
    assert!(
        e.contains("store format version 4") && e.contains("version 6"),
        "{e}"
    );
    assert_eq!(Store::open(Some(&d)).unwrap().meta().version, 4);
    let _ = std::fs::remove_dir_all(&d);
}
