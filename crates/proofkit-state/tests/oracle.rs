//! State roots, reorgs and proofs checked against `alloy-trie` (the oracle: its `HashBuilder`
//! over sorted keys, its `TrieAccount` RLP and its proof verifier) on random workloads.

use alloy_primitives::{Bytes, B256 as AB256, U256 as AU256};
use alloy_trie::{HashBuilder, Nibbles, TrieAccount};
use proofkit_state::db::Block;
use proofkit_state::proof::{get_proof, verify, ProofError};
use proofkit_state::{
    keccak256, u256, Account, AccountWithStorage, Address, BlockId, Db, DbOptions, State, B256,
    EMPTY_ROOT, U256,
};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::collections::BTreeMap;

/// The model: plain maps.
#[derive(Clone, Default)]
struct Model {
    accounts: BTreeMap<Address, (Account, BTreeMap<B256, U256>)>,
}

fn alloy_storage_root(slots: &BTreeMap<B256, U256>) -> AB256 {
    let mut sorted: Vec<(B256, &U256)> = slots.iter().map(|(s, v)| (keccak256(s), v)).collect();
    sorted.sort();
    let mut hb = HashBuilder::default();
    for (k, v) in sorted {
        hb.add_leaf(
            Nibbles::unpack(k),
            &alloy_rlp::encode(AU256::from_be_bytes(*v)),
        );
    }
    hb.root()
}

fn oracle_root(m: &Model) -> B256 {
    let mut sorted: Vec<(B256, Vec<u8>)> = m
        .accounts
        .iter()
        .map(|(a, (acc, slots))| {
            let ta = TrieAccount {
                nonce: acc.nonce,
                balance: AU256::from_be_bytes(acc.balance),
                storage_root: alloy_storage_root(slots),
                code_hash: AB256::from(acc.code_hash),
            };
            (keccak256(a), alloy_rlp::encode(ta))
        })
        .collect();
    sorted.sort();
    let mut hb = HashBuilder::default();
    for (k, v) in &sorted {
        hb.add_leaf(Nibbles::unpack(k), v);
    }
    hb.root().0
}

/// One random block: new accounts, updates, deletions, slot writes and zeroing, written to the
/// writer and the model alike.
fn random_block(rng: &mut SmallRng, m: &mut Model, w: &mut proofkit_state::Writer, n: usize) {
    for _ in 0..n {
        let known: Vec<Address> = m.accounts.keys().copied().collect();
        let pick = |rng: &mut SmallRng| known[rng.gen_range(0..known.len())];
        match rng.gen_range(0..10) {
            0..=3 => {
                let a: Address = rng.gen();
                let acc = Account {
                    nonce: rng.gen_range(0..3),
                    balance: if rng.gen_bool(0.2) {
                        [rng.gen(); 32]
                    } else {
                        u256(rng.gen_range(0..1 << 40))
                    },
                    code_hash: if rng.gen_bool(0.1) {
                        rng.gen()
                    } else {
                        proofkit_state::KECCAK_EMPTY
                    },
                };
                w.set_account(&a, Some(acc));
                m.accounts.entry(a).or_default().0 = acc;
            }
            4 if !known.is_empty() => {
                let a = pick(rng);
                let mut acc = m.accounts[&a].0;
                acc.nonce += 1;
                w.set_account(&a, Some(acc));
                m.accounts.get_mut(&a).unwrap().0 = acc;
            }
            5 if !known.is_empty() => {
                let a = pick(rng);
                w.set_account(&a, None);
                m.accounts.remove(&a);
            }
            6..=8 if !known.is_empty() => {
                let a = pick(rng);
                for _ in 0..rng.gen_range(1..8) {
                    let slot: B256 = if rng.gen_bool(0.5) {
                        u256(rng.gen_range(0..8))
                    } else {
                        rng.gen()
                    };
                    let value = if rng.gen_bool(0.25) {
                        [0; 32]
                    } else {
                        u256(rng.gen_range(1..1000))
                    };
                    w.set_storage(&a, &slot, &value).unwrap();
                    let slots = &mut m.accounts.get_mut(&a).unwrap().1;
                    if value == [0; 32] {
                        slots.remove(&slot);
                    } else {
                        slots.insert(slot, value);
                    }
                }
            }
            _ if !known.is_empty() => {
                // Zero every slot of an account: its storage root goes back to empty.
                let a = pick(rng);
                let slots: Vec<B256> = m.accounts[&a].1.keys().copied().collect();
                for s in slots {
                    w.set_storage(&a, &s, &[0; 32]).unwrap();
                }
                m.accounts.get_mut(&a).unwrap().1.clear();
            }
            _ => {}
        }
    }
}

fn assert_reads(state: &State, m: &Model) {
    for (a, (acc, slots)) in &m.accounts {
        assert_eq!(state.account(a), Some(*acc));
        for (s, v) in slots {
            assert_eq!(state.storage(a, s), *v);
        }
    }
}

#[test]
fn empty_trie_root() {
    let db = Db::open(None, DbOptions::default()).unwrap();
    assert_eq!(db.root(db.finalized()).unwrap(), EMPTY_ROOT);
    assert_eq!(State::new().root(), HashBuilder::default().root().0);
}

/// Options keeping `levels` nibbles of the account trie in memory after finalization (0: all
/// of it in the page store, so every write loads its path).
fn paged(levels: usize) -> DbOptions {
    DbOptions {
        cached_levels: levels,
        ..Default::default()
    }
}

#[test]
fn roots_match_alloy_trie_on_random_blocks() {
    for seed in 0..6u64 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut db = Db::open(None, paged([5, 0, 1, 2, 0, 3][seed as usize])).unwrap();
        let mut m = Model::default();
        let mut parent = db.finalized();
        for b in 0..25 {
            let mut block = db.begin(parent).unwrap();
            random_block(&mut rng, &mut m, &mut block, if seed == 0 { 3 } else { 40 });
            let (id, root) = db.commit(block).unwrap();
            assert_eq!(root, oracle_root(&m), "seed {seed} block {b}");
            if b % 7 == 6 || (seed >= 4 && b % 2 == 1) {
                let before = db.state(id).unwrap().nodes_in_memory();
                db.finalize(id).unwrap();
                let after = db.state(id).unwrap().nodes_in_memory();
                // Memory keeps the top `cached_levels` nibbles only.
                let levels = [5, 0, 1, 2, 0, 3][seed as usize];
                if levels == 0 {
                    assert!(after <= 2, "{after} nodes kept");
                }
                assert!(
                    after <= before
                        && after
                            <= (1..=levels)
                                .map(|l| 16usize.pow(l as u32) * 2)
                                .sum::<usize>()
                                + 2
                );
                assert_reads(db.state(id).unwrap(), &m);
            }
            parent = id;
        }
        // Everything, stored trie nodes included, agrees with a rebuild from the records.
        db.check().unwrap();
        assert_reads(db.state(parent).unwrap(), &m);
        // Deleting everything gives the empty root again.
        let mut block = db.begin(parent).unwrap();
        for a in m.accounts.keys() {
            block.set_account(a, None);
        }
        let (id, root) = db.commit(block).unwrap();
        assert_eq!(root, EMPTY_ROOT);
        db.finalize(id).unwrap();
        assert_eq!(db.check().unwrap().1, EMPTY_ROOT);
    }
}

/// A slot write for the batch tests: often one of the three lowest slots (runs of one slot),
/// a fifth of them zero (a delete).
fn random_slot_write(rng: &mut SmallRng) -> (B256, U256) {
    let slot = if rng.gen_bool(0.6) {
        u256(rng.gen_range(0..3))
    } else {
        rng.gen()
    };
    let value = if rng.gen_bool(0.2) {
        [0; 32]
    } else {
        u256(rng.gen_range(1..99))
    };
    (slot, value)
}

/// Commits two blocks written alike on one parent and checks that they reach the same root as
/// the oracle's model `after`, that the second reads as `after`, and, once finalized (its write
/// log drives the store writes), that it still does; returns the second's id.
fn commit_alike(db: &mut Db, one: Block, other: Block, after: &Model, what: &str) -> BlockId {
    let (_, root_one) = db.commit(one).unwrap();
    let (id, root_other) = db.commit(other).unwrap();
    assert_eq!(root_other, root_one, "{what}");
    assert_eq!(root_other, oracle_root(after), "{what}");
    assert_reads(db.state(id).unwrap(), after);
    db.finalize(id).unwrap();
    assert_reads(db.state(id).unwrap(), after);
    id
}

/// `set_accounts` and `set_storages` (keys hashed eight at a time) leave the state, the log and
/// the root exactly as the same writes one by one: repeated addresses (the last write wins),
/// deletions, runs of one slot and zero values; a storage write to a missing account stops the
/// batch with `NoSuchAccount`, the writes before it applied and none after. Both blocks are
/// built on one parent (a fork) and checked against the oracle too.
#[test]
fn batched_writes_are_the_writes_one_by_one() {
    for seed in 0..4u64 {
        let mut rng = SmallRng::seed_from_u64(100 + seed);
        let mut db = Db::open(None, paged(2)).unwrap();
        let mut m = Model::default();
        let mut parent = db.finalized();
        for b in 0..6 {
            let known: Vec<Address> = m.accounts.keys().copied().collect();
            let mut accounts: Vec<(Address, Option<Account>)> = Vec::new();
            for _ in 0..rng.gen_range(1..40) {
                let addr = match rng.gen_range(0..6) {
                    0 if !accounts.is_empty() => accounts[rng.gen_range(0..accounts.len())].0,
                    1 | 2 if !known.is_empty() => known[rng.gen_range(0..known.len())],
                    _ => {
                        // Often the last byte of another address (the writer keeps recent
                        // hashes by it).
                        let mut a: Address = rng.gen();
                        if rng.gen_bool(0.5) {
                            a[19] = rng.gen_range(0..3);
                        }
                        a
                    }
                };
                let account = (!rng.gen_bool(0.15)).then(|| Account {
                    nonce: rng.gen_range(0..4),
                    balance: u256(rng.gen_range(0..1 << 30)),
                    ..Default::default()
                });
                accounts.push((addr, account));
            }
            let mut after = m.clone();
            for (a, acc) in &accounts {
                match acc {
                    Some(acc) => after.accounts.entry(*a).or_default().0 = *acc,
                    None => {
                        after.accounts.remove(a);
                    }
                }
            }
            let live: Vec<Address> = after.accounts.keys().copied().collect();
            let mut slots: Vec<(Address, B256, U256)> = Vec::new();
            for _ in 0..if live.is_empty() {
                0
            } else {
                rng.gen_range(0..60)
            } {
                let a = live[rng.gen_range(0..live.len())];
                let (slot, value) = random_slot_write(&mut rng);
                slots.push((a, slot, value));
            }
            // Odd blocks: a write to an account that does not exist, part way through.
            let missing = (b % 2 == 1).then(|| rng.gen_range(0..=slots.len()));
            if let Some(k) = missing {
                slots.insert(k, (rng.gen(), u256(1), u256(1)));
            }
            let applied = missing.unwrap_or(slots.len());
            for (a, s, v) in &slots[..applied] {
                let st = &mut after.accounts.get_mut(a).unwrap().1;
                if *v == [0; 32] {
                    st.remove(s);
                } else {
                    st.insert(*s, *v);
                }
            }
            let mut one = db.begin(parent).unwrap();
            for (a, acc) in &accounts {
                one.set_account(a, *acc);
            }
            for (a, s, v) in &slots[..applied] {
                one.set_storage(a, s, v).unwrap();
            }
            let mut many = db.begin(parent).unwrap();
            many.set_accounts(&accounts);
            // In two calls: a slot may run on from one call into the next.
            let cut = rng.gen_range(0..=slots.len());
            let result = many
                .set_storages(&slots[..cut])
                .and_then(|()| many.set_storages(&slots[cut..]));
            match missing {
                Some(_) => assert!(matches!(
                    result,
                    Err(proofkit_state::StateError::NoSuchAccount(_))
                )),
                None => result.unwrap(),
            }
            parent = commit_alike(
                &mut db,
                one,
                many,
                &after,
                &format!("seed {seed} block {b}"),
            );
            m = after;
        }
        assert_eq!(db.check().unwrap().1, oracle_root(&m));
    }
}

/// `set_accounts_with_storage` (each account with its slots in one walk) leaves the state, the
/// log and the root exactly as `set_account` and then `set_storage` for each slot do, one by
/// one in the same order: new and existing accounts, an account written twice in one call,
/// zero values (deletes), a slot written twice, accounts without slots; against the oracle,
/// and the finalized store too. Every other block writes 130 to 300 accounts, so that one of
/// its two calls writes the root's subtrees on two threads; with the root in memory, and with
/// no cached levels (the root loaded from the store first).
#[test]
fn accounts_with_storage_are_the_writes_one_by_one() {
    type Slots = Vec<(B256, U256)>;
    for seed in 0..4u64 {
        let mut rng = SmallRng::seed_from_u64(200 + seed);
        let mut db = Db::open(None, paged(if seed % 2 == 0 { 2 } else { 0 })).unwrap();
        let mut m = Model::default();
        let mut parent = db.finalized();
        for b in 0..6 {
            let known: Vec<Address> = m.accounts.keys().copied().collect();
            let mut updates: Vec<(Address, Account, Slots)> = Vec::new();
            let count = if b % 2 == 1 { 130..300 } else { 1..40 };
            for _ in 0..rng.gen_range(count) {
                let addr = match rng.gen_range(0..6) {
                    0 if !updates.is_empty() => updates[rng.gen_range(0..updates.len())].0,
                    1 | 2 if !known.is_empty() => known[rng.gen_range(0..known.len())],
                    _ => rng.gen(),
                };
                let account = Account {
                    nonce: rng.gen_range(0..4),
                    balance: u256(rng.gen_range(0..1 << 30)),
                    ..Default::default()
                };
                let slots = (0..rng.gen_range(0..5))
                    .map(|_| random_slot_write(&mut rng))
                    .collect();
                updates.push((addr, account, slots));
            }
            let mut after = m.clone();
            for (a, account, slots) in &updates {
                let entry = after.accounts.entry(*a).or_default();
                entry.0 = *account;
                for (s, v) in slots {
                    if *v == [0; 32] {
                        entry.1.remove(s);
                    } else {
                        entry.1.insert(*s, *v);
                    }
                }
            }
            let mut one = db.begin(parent).unwrap();
            for (a, account, slots) in &updates {
                one.set_account(a, Some(*account));
                for (s, v) in slots {
                    one.set_storage(a, s, v).unwrap();
                }
            }
            let mut fused = db.begin(parent).unwrap();
            let borrowed: Vec<AccountWithStorage> = updates
                .iter()
                .map(|(a, account, slots)| (*a, *account, &slots[..]))
                .collect();
            // In two calls, split anywhere.
            let cut = rng.gen_range(0..=borrowed.len());
            fused.set_accounts_with_storage(&borrowed[..cut]);
            fused.set_accounts_with_storage(&borrowed[cut..]);
            parent = commit_alike(
                &mut db,
                one,
                fused,
                &after,
                &format!("seed {seed} block {b}"),
            );
            m = after;
        }
        assert_eq!(db.check().unwrap().1, oracle_root(&m));
    }
}

/// Forks, reads at every block, a reorg and reopening; once with every block keeping its trie
/// version and once with each block taking its parent's over (so the reads at `id0`, the
/// second child of `id0` and the finalization rebuild states from the write logs).
#[test]
fn forks_reorgs_and_finality() {
    for keep in [true, false] {
        forks_reorgs_and_finality_with(keep);
    }
}

fn forks_reorgs_and_finality_with(keep_parent_states: bool) {
    let mut rng = SmallRng::seed_from_u64(42);
    let dir = std::env::temp_dir().join(format!(
        "pk-state-forks-{}-{keep_parent_states}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let options = DbOptions {
        keep_parent_states,
        ..paged(1)
    };
    let mut db = Db::open(Some(&dir), options).unwrap();
    let mut base = Model::default();
    // A finalized base, so the forks write through stored nodes.
    let mut b00 = db.begin(db.finalized()).unwrap();
    random_block(&mut rng, &mut base, &mut b00, 80);
    let (id00, _) = db.commit(b00).unwrap();
    db.finalize(id00).unwrap();
    let mut b0 = db.begin(db.finalized()).unwrap();
    random_block(&mut rng, &mut base, &mut b0, 60);
    let (id0, _) = db.commit(b0).unwrap();

    // Two competing children of id0, and a grandchild on each.
    let (mut ma, mut mb) = (base.clone(), base.clone());
    let mut a1 = db.begin(id0).unwrap();
    random_block(&mut rng, &mut ma, &mut a1, 30);
    let (ida, ra) = db.commit(a1).unwrap();
    let mut b1 = db.begin(id0).unwrap();
    random_block(&mut rng, &mut mb, &mut b1, 30);
    let (idb, rb) = db.commit(b1).unwrap();
    assert_ne!(ra, rb);
    let mut ma2 = ma.clone();
    let mut a2 = db.begin(ida).unwrap();
    random_block(&mut rng, &mut ma2, &mut a2, 30);
    let (ida2, ra2) = db.commit(a2).unwrap();
    let mut mb2 = mb.clone();
    let mut b2 = db.begin(idb).unwrap();
    random_block(&mut rng, &mut mb2, &mut b2, 30);
    let (idb2, rb2) = db.commit(b2).unwrap();

    for (id, m, r) in [
        (ida, &ma, ra),
        (idb, &mb, rb),
        (ida2, &ma2, ra2),
        (idb2, &mb2, rb2),
    ] {
        assert_eq!(r, oracle_root(m));
        assert_eq!(db.root(id).unwrap(), r);
        assert_reads(db.state(id).unwrap(), m);
    }
    assert_eq!(
        db.root(id0).unwrap(),
        oracle_root(&base),
        "the parent is untouched by its children"
    );
    assert_reads(db.state(id0).unwrap(), &base);
    assert_eq!(db.state(id0).unwrap().root(), oracle_root(&base));

    // Finalize the b branch (a reorg away from a): the a branch is dropped.
    db.finalize(idb).unwrap();
    assert!(db.state(ida).is_err() && db.state(ida2).is_err());
    assert!(matches!(
        db.finalize(ida2),
        Err(proofkit_state::DbError::UnknownBlock(_))
    ));
    assert_eq!(db.root(idb2).unwrap(), rb2);
    for a in mb.accounts.keys().take(20) {
        assert_eq!(db.stored_account(a).unwrap(), Some(mb.accounts[a].0));
    }
    db.finalize(idb2).unwrap();
    drop(db);

    let db = Db::open(Some(&dir), options).unwrap();
    assert_eq!(db.root(db.finalized()).unwrap(), rb2);
    assert_eq!(db.number(db.finalized()).unwrap(), 4);
    assert_reads(db.state(db.finalized()).unwrap(), &mb2);
    let (report, root) = db.check().unwrap();
    assert_eq!(root, rb2);
    assert!(report.entries > 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A block whose one contract writes thousands of slots beside many accounts: the contract's
/// storage trie is hashed inside one piece of the root but, being over `trie::POOL_BATCH`
/// nodes, on the pool; the roots equal alloy-trie's, for the block that fills the storage and
/// for one that updates and zeroes part of it.
#[test]
fn a_large_storage_trie_beside_many_accounts_matches_alloy_trie() {
    let mut db = Db::open(None, DbOptions::default()).unwrap();
    let mut m = Model::default();
    let contract: Address = [0xc0; 20];
    let account = |n: u64| Account {
        nonce: n,
        balance: u256(n * 7 + 1),
        ..Default::default()
    };
    let mut parent = db.finalized();
    for round in 0..2u64 {
        let mut block = db.begin(parent).unwrap();
        for i in 0..300u64 {
            let mut a = [0u8; 20];
            a[..8].copy_from_slice(&(i + 1).to_be_bytes());
            block.set_account(&a, Some(account(i + round)));
            m.accounts.entry(a).or_default().0 = account(i + round);
        }
        block.set_account(&contract, Some(account(round)));
        let entry = m.accounts.entry(contract).or_default();
        entry.0 = account(round);
        for s in 0..6000u64 {
            if round == 1 && s % 2 == 1 {
                continue;
            }
            let v = if round == 1 && s % 10 == 0 {
                0
            } else {
                s * 3 + round + 1
            };
            block.set_storage(&contract, &u256(s), &u256(v)).unwrap();
            if v == 0 {
                entry.1.remove(&u256(s));
            } else {
                entry.1.insert(u256(s), u256(v));
            }
        }
        let (id, root) = db.commit(block).unwrap();
        assert_eq!(root, oracle_root(&m), "round {round}");
        parent = id;
    }
    const { assert!(6000 > proofkit_state::trie::POOL_BATCH) };
}

#[test]
fn storage_needs_an_account() {
    let mut db = Db::open(None, DbOptions::default()).unwrap();
    let mut b = db.begin(db.finalized()).unwrap();
    assert!(b.set_storage(&[1; 20], &[2; 32], &u256(3)).is_err());
}

#[test]
fn proofs_verify_match_alloy_and_tampering_fails() {
    let mut rng = SmallRng::seed_from_u64(9);
    let mut db = Db::open(None, paged(0)).unwrap();
    let mut m = Model::default();
    let mut b = db.begin(db.finalized()).unwrap();
    random_block(&mut rng, &mut m, &mut b, 400);
    let (id, root) = db.commit(b).unwrap();
    // Proofs from memory, then from the page store (everything below the root stored).
    let in_memory = db.state(id).unwrap().clone();
    db.finalize(id).unwrap();
    let state = db.state(id).unwrap();
    let mut checked = 0;
    let absent: Address = rng.gen();
    let addrs: Vec<Address> = m
        .accounts
        .keys()
        .copied()
        .take(40)
        .chain([absent])
        .collect();
    for a in &addrs {
        let mut slots: Vec<B256> = m
            .accounts
            .get(a)
            .map(|x| x.1.keys().copied().collect())
            .unwrap_or_default();
        slots.push(rng.gen()); // an absent slot
        let p = get_proof(state, a, &slots);
        assert_eq!(p, get_proof(&in_memory, a, &slots));
        verify(&root, &p).unwrap();
        // alloy-trie's verifier agrees on the account proof.
        let nodes: Vec<Bytes> = p
            .account_proof
            .iter()
            .map(|n| Bytes::from(n.clone()))
            .collect();
        let expected = m.accounts.get(a).map(|_| {
            let mut v = Vec::new();
            Account {
                nonce: p.nonce,
                balance: p.balance,
                code_hash: p.code_hash,
            }
            .rlp(&p.storage_hash, &mut v);
            v
        });
        alloy_trie::proof::verify_proof(
            AB256::from(root),
            Nibbles::unpack(keccak256(a)),
            expected,
            &nodes,
        )
        .unwrap();

        // Tampering: a changed byte in any node, a changed claim, a dropped node.
        for i in 0..p.account_proof.len() {
            let mut t = p.clone();
            let n = &mut t.account_proof[i];
            let j = rng.gen_range(0..n.len());
            n[j] ^= 1 << rng.gen_range(0..8);
            assert!(verify(&root, &t).is_err(), "tampered node {i} accepted");
            checked += 1;
        }
        let mut t = p.clone();
        t.nonce += 1;
        assert_eq!(verify(&root, &t), Err(ProofError::ValueMismatch));
        if !p.account_proof.is_empty() {
            let mut t = p.clone();
            t.account_proof.pop();
            assert!(verify(&root, &t).is_err());
        }
        for k in 0..p.storage_proof.len() {
            let mut t = p.clone();
            t.storage_proof[k].value[31] ^= 1;
            assert!(verify(&root, &t).is_err(), "tampered slot value accepted");
            if !t.storage_proof[k].proof.is_empty() {
                let mut t = p.clone();
                t.storage_proof[k].proof[0][3] ^= 0x10;
                assert!(verify(&root, &t).is_err());
            }
        }
    }
    assert!(checked > 40);
    // A wrong root rejects a valid proof.
    let p = get_proof(state, &addrs[0], &[]);
    assert!(verify(&[7; 32], &p).is_err());
}

#[test]
fn readers_run_beside_the_writer() {
    let mut rng = SmallRng::seed_from_u64(5);
    let mut db = Db::open(None, paged(0)).unwrap();
    let mut m = Model::default();
    let mut b = db.begin(db.finalized()).unwrap();
    random_block(&mut rng, &mut m, &mut b, 200);
    let (id, root) = db.commit(b).unwrap();
    // Finalized: the reader's snapshot reads the page store at that root.
    db.finalize(id).unwrap();
    // A reader holds a snapshot of block `id` on another thread while the writer goes on.
    let snapshot = db.state(id).unwrap().clone();
    let model = m.clone();
    let reader = std::thread::spawn(move || {
        for _ in 0..20 {
            assert_reads(&snapshot, &model);
        }
        snapshot.root()
    });
    let mut parent = id;
    for _ in 0..10 {
        let mut b = db.begin(parent).unwrap();
        random_block(&mut rng, &mut m, &mut b, 50);
        parent = db.commit(b).unwrap().0;
        db.finalize(parent).unwrap();
    }
    assert_eq!(reader.join().unwrap(), root);
    assert_eq!(db.root(parent).unwrap(), oracle_root(&m));
}

#[test]
fn check_finds_a_damaged_page() {
    let dir = std::env::temp_dir().join(format!("pk-state-damage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut rng = SmallRng::seed_from_u64(11);
    let mut db = Db::open(Some(&dir), DbOptions::default()).unwrap();
    let mut m = Model::default();
    let mut b = db.begin(db.finalized()).unwrap();
    random_block(&mut rng, &mut m, &mut b, 300);
    let (id, _) = db.commit(b).unwrap();
    db.finalize(id).unwrap();
    db.check().unwrap();
    drop(db);
    // Flip one byte inside a record (past both meta pages and the page header): either the page
    // tree is now malformed or the rebuilt root differs from the durable one.
    let path = dir.join("state.pk");
    let mut bytes = std::fs::read(&path).unwrap();
    let pages = bytes.len() / 4096;
    let mut damaged = 0;
    for p in 2..pages {
        let page = &bytes[p * 4096..(p + 1) * 4096];
        if page[0] == 2 && u16::from_le_bytes([page[2], page[3]]) > 0 {
            // A leaf (entries from byte 8: [shared u8][literal len u8, 0x80: a zero run][value
            // len, 1 byte under 0x80 or 2][zero count, with a zero run][literal][value]): flip
            // the last byte of its first value.
            let literal = (page[9] & 0x7f) as usize;
            let (vl, mut o) = if page[10] < 0x80 {
                (page[10] as usize, 11)
            } else {
                ((((page[10] & 0x7f) as usize) << 8) | page[11] as usize, 12)
            };
            if page[9] >= 0x80 {
                o += 1;
            }
            assert!(vl > 0, "every stored value has bytes");
            bytes[p * 4096 + o + literal + vl - 1] ^= 0x01;
            damaged += 1;
            break;
        }
    }
    assert_eq!(damaged, 1);
    std::fs::write(&path, &bytes).unwrap();
    assert!(
        Db::open(Some(&dir), DbOptions::default()).is_err(),
        "a damaged value must not open silently"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn history_keeps_past_finalized_roots_readable() {
    let mut rng = SmallRng::seed_from_u64(3);
    let mut db = Db::open(
        None,
        DbOptions {
            history: 2,
            cached_levels: 0,
            ..Default::default()
        },
    )
    .unwrap();
    let mut m = Model::default();
    let mut ids = vec![db.finalized()];
    let mut models = vec![m.clone()];
    for _ in 0..5 {
        let mut b = db.begin(*ids.last().unwrap()).unwrap();
        random_block(&mut rng, &mut m, &mut b, 30);
        let (id, _) = db.commit(b).unwrap();
        db.finalize(id).unwrap();
        ids.push(id);
        models.push(m.clone());
    }
    // The newest finalized block and the two before it are readable; older ones are gone.
    for back in 0..3 {
        let k = ids.len() - 1 - back;
        assert_eq!(db.root(ids[k]).unwrap(), oracle_root(&models[k]));
        assert_reads(db.state(ids[k]).unwrap(), &models[k]);
    }
    assert!(db.state(ids[ids.len() - 4]).is_err());
    // History is for reading: building on it is refused.
    assert!(db.begin(ids[ids.len() - 2]).is_err());
}

/// With [`DbOptions::keep_parent_states`] off each block takes its parent's trie over; every
/// older block's state is rebuilt from the nearest state and the write logs when it is read,
/// built on (a fork far back), finalized behind a lag or kept as history, and equals the
/// oracle's; an account deleted and made again in one block, with new slots, replays so.
#[test]
fn handed_down_states_are_rebuilt_from_the_logs() {
    for pipeline in [false, true] {
        let mut rng = SmallRng::seed_from_u64(21 + pipeline as u64);
        let mut db = Db::open(
            None,
            DbOptions {
                keep_parent_states: false,
                history: 2,
                cached_levels: 1,
                pipeline,
                ..Default::default()
            },
        )
        .unwrap();
        let mut m = Model::default();
        let (mut ids, mut models) = (vec![db.finalized()], vec![m.clone()]);
        let again: Address = [0xa5; 20];
        for b in 0..14 {
            let mut block = db.begin(*ids.last().unwrap()).unwrap();
            random_block(&mut rng, &mut m, &mut block, 25);
            let acc = Account {
                nonce: b,
                ..Default::default()
            };
            if b % 4 == 1 && m.accounts.contains_key(&again) {
                // Deleted and made again: only the slots written after the deletion stay.
                block.set_account(&again, None);
                m.accounts.remove(&again);
            }
            block.set_account(&again, Some(acc));
            block.set_storage(&again, &u256(b), &u256(b + 1)).unwrap();
            let e = m.accounts.entry(again).or_default();
            e.0 = acc;
            e.1.insert(u256(b), u256(b + 1));
            let (id, root) = db.commit(block).unwrap();
            assert_eq!(root, oracle_root(&m), "block {b}");
            ids.push(id);
            models.push(m.clone());
            if b % 5 == 4 {
                // Two blocks behind the newest: its state went to its child.
                db.finalize(ids[ids.len() - 3]).unwrap();
            }
        }
        let finalized = db.finalized();
        let first = ids.iter().position(|&i| i == finalized).unwrap();
        // The finalized block, the history before it and the blocks after it, newest first
        // (each read rebuilds from the nearest state, then holds its own).
        for k in (first.saturating_sub(2)..ids.len()).rev() {
            assert_eq!(db.state(ids[k]).unwrap().root(), oracle_root(&models[k]));
            assert_reads(db.state(ids[k]).unwrap(), &models[k]);
        }
        // A fork on the finalized block's child, whose state its own child took.
        let k = first + 1;
        let mut fork_model = models[k].clone();
        let mut fork = db.begin(ids[k]).unwrap();
        random_block(&mut rng, &mut fork_model, &mut fork, 20);
        let (fork_id, fork_root) = db.commit(fork).unwrap();
        assert_eq!(fork_root, oracle_root(&fork_model));
        db.finalize(fork_id).unwrap();
        db.sync().unwrap();
        assert_reads(db.state(fork_id).unwrap(), &fork_model);
        assert!(
            db.state(*ids.last().unwrap()).is_err(),
            "the other branch is dropped"
        );
        assert_eq!(db.check().unwrap().1, oracle_root(&fork_model));
    }
}

/// With [`DbOptions::keep_parent_states`] off and no history, the block built on the finalized
/// block takes its state over too (the finalization's store writes are then built before it
/// starts); the finalized block is still read, and built on again (a second child), from the
/// store, once the finalization's job has applied it.
#[test]
fn the_finalized_state_taken_over_is_read_from_the_store() {
    for pipeline in [true, false] {
        let mut rng = SmallRng::seed_from_u64(31 + pipeline as u64);
        let mut db = Db::open(
            None,
            DbOptions {
                keep_parent_states: false,
                history: 0,
                cached_levels: 2,
                pipeline,
                ..Default::default()
            },
        )
        .unwrap();
        let mut m = Model::default();
        let mut parent = db.finalized();
        for _ in 0..3 {
            let mut block = db.begin(parent).unwrap();
            random_block(&mut rng, &mut m, &mut block, 40);
            parent = db.commit(block).unwrap().0;
        }
        db.finalize(parent).unwrap();
        let finalized = db.finalized();
        let at_finalized = m.clone();
        // The next block takes the finalized state over (pipelined: while the job runs).
        let mut next = db.begin(finalized).unwrap();
        random_block(&mut rng, &mut m, &mut next, 40);
        let (next_id, next_root) = db.commit(next).unwrap();
        assert_eq!(next_root, oracle_root(&m));
        // The finalized block, read (from the store) after its state was taken.
        let s = db.state(finalized).unwrap();
        assert_eq!(s.root(), oracle_root(&at_finalized));
        assert_reads(s, &at_finalized);
        // A second child of the finalized block, built from the store.
        let mut fork_model = at_finalized.clone();
        let mut fork = db.begin(finalized).unwrap();
        random_block(&mut rng, &mut fork_model, &mut fork, 40);
        let (fork_id, fork_root) = db.commit(fork).unwrap();
        assert_eq!(fork_root, oracle_root(&fork_model));
        assert_reads(db.state(next_id).unwrap(), &m);
        // Finalizing the fork drops the first child.
        db.finalize(fork_id).unwrap();
        db.sync().unwrap();
        assert!(db.state(next_id).is_err());
        assert_reads(db.state(fork_id).unwrap(), &fork_model);
        assert_eq!(db.check().unwrap().1, oracle_root(&fork_model));
    }
}

/// Pipelined finalization: the store writes and commit run on their own thread while the next
/// blocks are written, read and hashed over the previous store root (writes load stored nodes
/// from it); roots equal alloy-trie's, reads agree at every block, forks made meanwhile are
/// dropped, memory is pruned to the cached levels once the last job landed, and after `sync`
/// the store checks out and reopens at the last root.
#[test]
fn pipelined_finalization_matches_alloy_trie_and_reopens() {
    // The second run with each block taking its parent's trie over: the main block then
    // rebuilds the parent's state that the fork beside it took.
    for (seed, levels, keep_parent_states) in [(11u64, 0usize, true), (12, 2, false)] {
        let dir =
            std::env::temp_dir().join(format!("pk-state-pipeline-{}-{seed}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let options = DbOptions {
            cached_levels: levels,
            pipeline: true,
            commit_level: proofkit_state::CommitLevel::FlushData,
            keep_parent_states,
            ..Default::default()
        };
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut db = Db::open(Some(&dir), options).unwrap();
        let mut m = Model::default();
        let mut parent = db.finalized();
        let mut finalized_any = false;
        for b in 0..25 {
            // A fork beside the chain, dropped by the next finalization.
            let mut side_model = Model {
                accounts: m.accounts.clone(),
            };
            let mut side = db.begin(parent).unwrap();
            random_block(&mut rng, &mut side_model, &mut side, 10);
            let (side_id, side_root) = db.commit(side).unwrap();
            assert_eq!(side_root, oracle_root(&side_model), "seed {seed} fork {b}");
            let mut block = db.begin(parent).unwrap();
            random_block(&mut rng, &mut m, &mut block, 30);
            let (id, root) = db.commit(block).unwrap();
            assert_eq!(root, oracle_root(&m), "seed {seed} block {b}");
            assert_reads(db.state(id).unwrap(), &m);
            if b % 3 == 2 {
                let before = db.state(id).unwrap().nodes_in_memory();
                let stats = db.finalize(id).unwrap();
                // What the previous finalization stored is pruned now, this chain's nodes
                // once its job has landed.
                assert!(db.state(id).unwrap().nodes_in_memory() <= before);
                if !finalized_any {
                    assert_eq!(stats.new_pages + stats.reused_pages, 0, "none before");
                }
                finalized_any = true;
                assert!(db.state(side_id).is_err(), "the fork is dropped");
                // Read while the commit may still be running.
                assert_reads(db.state(id).unwrap(), &m);
            }
            parent = id;
        }
        db.finalize(parent).unwrap();
        let stats = db.sync().unwrap().expect("a finalization was running");
        assert!(stats.new_pages + stats.reused_pages > 0);
        assert_eq!(db.sync().unwrap(), None, "nothing left to wait for");
        // Nothing was built on the last finalized block: landing pruned it to the top levels.
        let bound: usize = (1..=levels)
            .map(|l| 16usize.pow(l as u32) * 2)
            .sum::<usize>()
            + 2;
        let kept = db.state(parent).unwrap().nodes_in_memory();
        assert!(kept <= bound, "{kept} nodes kept, cached levels {levels}");
        assert_reads(db.state(parent).unwrap(), &m);
        assert_eq!(db.check().unwrap().1, oracle_root(&m));
        drop(db);
        let db = Db::open(Some(&dir), options).unwrap();
        assert_eq!(db.root(db.finalized()).unwrap(), oracle_root(&m));
        assert_reads(db.state(db.finalized()).unwrap(), &m);
        drop(db);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// A finalization that fails (here: the in-memory store's reserved space runs out) returns the
/// store's error, on the calling thread or, pipelined, from the next `finalize` or `sync`; from
/// then on every write and finalization is refused with `Failed` (the blocks in memory count
/// as finalized what the store does not hold) instead of building on them.
#[test]
fn a_failed_finalization_refuses_later_writes() {
    for pipeline in [false, true] {
        let options = DbOptions {
            // 16 MiB of pages (the smallest reserve) for about 40 MB of records.
            memory_reserve: 1,
            pipeline,
            ..Default::default()
        };
        let mut db = Db::open(None, options).unwrap();
        let mut parent = db.finalized();
        let mut failure = None;
        for b in 0..40u64 {
            let mut block = db.begin(parent).unwrap();
            for i in 0..4_000u64 {
                let a: Address = keccak256(&(b * 4_000 + i).to_le_bytes())[..20]
                    .try_into()
                    .unwrap();
                let acc = Account {
                    nonce: i,
                    ..Default::default()
                };
                block.set_account(&a, Some(acc));
                block.set_storage(&a, &u256(1), &u256(i + 1)).unwrap();
            }
            let (id, _) = db.commit(block).unwrap();
            if let Err(e) = db.finalize(id) {
                failure = Some(e);
                break;
            }
            parent = id;
        }
        let failure = match failure {
            Some(e) => e,
            None => db.sync().expect_err("the store cannot hold it all"),
        };
        assert!(
            matches!(
                failure,
                proofkit_state::DbError::Store(proofkit_state::store::StoreError::Full)
            ),
            "pipelined {pipeline}: {failure}"
        );
        let refused = |r: Result<(), proofkit_state::DbError>| {
            assert!(
                matches!(r, Err(proofkit_state::DbError::Failed(ref m)) if m.contains("full")),
                "pipelined {pipeline}: {r:?}"
            )
        };
        refused(db.begin(db.finalized()).map(drop));
        refused(db.finalize(db.finalized()).map(drop));
        refused(db.sync().map(drop));
    }
}

/// `n` addresses (from `from` on) whose hashed keys start with the nibbles `prefix`.
fn addresses_under(prefix: &[u8], n: usize, from: u64) -> Vec<Address> {
    let nibble = |h: &B256, j: usize| (h[j / 2] >> (4 - 4 * (j & 1))) & 15;
    let mut found = Vec::new();
    let mut i = from;
    while found.len() < n {
        let mut a = [0x5a; 20];
        a[..8].copy_from_slice(&i.to_le_bytes());
        let h = keccak256(&a);
        if prefix.iter().enumerate().all(|(j, &x)| nibble(&h, j) == x) {
            found.push(a);
        }
        i += 1;
    }
    found
}

/// The account trie's branches at depths 4 and 5 have no record in the store
/// (`state::RECORDLESS_DEPTHS`): a load rebuilds one from what lies at its children's
/// positions, a depth-5 child branch rebuilt in turn. 24,000 random accounts make ~3,000
/// depth-4 branches and ~260 depth-5 ones, whose children are leaves, branches (recorded or
/// rebuilt) and a few extensions; two accounts under the position 00000 and one under 0000 put
/// keys where the root entry and the records of the branches above sort among them. With one
/// cached level every write below the root loads its path: the roots match the oracle, no
/// depth-4 or depth-5 record is stored, `check` passes, and after a reopen the reads, proofs and
/// further writes (updates, new accounts, deletions that collapse rebuilt branches) agree with
/// the oracle.
#[test]
fn depth_four_branches_are_rebuilt_from_their_children() {
    use proofkit_state::state::{RECORDLESS_DEPTHS, ROOT_ENTRY_KEY};
    let dir = std::env::temp_dir().join(format!("pk-state-recordless-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let options = DbOptions {
        cached_levels: 1,
        ..Default::default()
    };
    let mut rng = SmallRng::seed_from_u64(44);
    let mut m = Model::default();
    let mut db = Db::open(Some(&dir), options).unwrap();
    let mut searched = addresses_under(&[0, 0, 0, 0, 0], 2, 0);
    searched.extend(addresses_under(&[0, 0, 0, 0], 1, 1 << 32));
    let account = |rng: &mut SmallRng| Account {
        nonce: rng.gen_range(0..5),
        balance: u256(rng.gen_range(0..1 << 40)),
        ..Default::default()
    };
    let mut parent = db.finalized();
    for b in 0..3 {
        let mut block = db.begin(parent).unwrap();
        let mut writes: Vec<(Address, Option<Account>)> = (0..8000)
            .map(|_| (rng.gen(), Some(account(&mut rng))))
            .collect();
        if b == 1 {
            writes.extend(searched.iter().map(|a| (*a, Some(account(&mut rng)))));
        }
        block.set_accounts(&writes);
        for (a, acc) in &writes {
            m.accounts.entry(*a).or_default().0 = acc.unwrap();
        }
        for (a, _) in writes.iter().step_by(50) {
            let (slot, value) = (u256(rng.gen_range(0..4)), u256(rng.gen_range(1..99)));
            block.set_storage(a, &slot, &value).unwrap();
            m.accounts.get_mut(a).unwrap().1.insert(slot, value);
        }
        let (id, root) = db.commit(block).unwrap();
        assert_eq!(root, oracle_root(&m), "block {b}");
        db.finalize(id).unwrap();
        parent = id;
    }
    db.sync().unwrap();
    let mut by_depth = [0usize; 65];
    db.store()
        .for_each(|k, _| {
            if k.len() == 33 && k != ROOT_ENTRY_KEY {
                by_depth[k[32] as usize] += 1;
            }
        })
        .unwrap();
    for d in RECORDLESS_DEPTHS {
        assert_eq!(by_depth[d], 0, "records by depth {by_depth:?}");
    }
    assert!(
        by_depth[3] > 3000 && by_depth[6..].iter().sum::<usize>() > 5,
        "records by depth {by_depth:?}"
    );
    assert_eq!(db.check().unwrap().1, oracle_root(&m));
    drop(db);

    let mut db = Db::open(Some(&dir), options).unwrap();
    let root = db.root(db.finalized()).unwrap();
    assert_eq!(root, oracle_root(&m));
    let state = db.state(db.finalized()).unwrap();
    assert_reads(state, &m);
    let known: Vec<Address> = m.accounts.keys().copied().collect();
    for a in searched.iter().chain(known.iter().step_by(997)) {
        let slots: Vec<B256> = m.accounts[a].1.keys().copied().collect();
        verify(&root, &get_proof(state, a, &slots)).unwrap();
    }
    let mut parent = db.finalized();
    for b in 0..2 {
        let mut block = db.begin(parent).unwrap();
        for a in known.iter().skip(b).step_by(7).chain(&searched) {
            if let Some((acc, _)) = m.accounts.get_mut(a) {
                acc.nonce += 1;
                block.set_account(a, Some(*acc));
            }
        }
        for a in known
            .iter()
            .skip(3 + b)
            .step_by(11)
            .chain(&searched[b..b + 1])
        {
            if m.accounts.remove(a).is_some() {
                block.set_account(a, None);
            }
        }
        random_block(&mut rng, &mut m, &mut block, 300);
        let (id, root) = db.commit(block).unwrap();
        assert_eq!(root, oracle_root(&m), "block {b} after the reopen");
        db.finalize(id).unwrap();
        parent = id;
    }
    assert_reads(db.state(parent).unwrap(), &m);
    assert_eq!(db.check().unwrap().1, oracle_root(&m));
    drop(db);
    std::fs::remove_dir_all(&dir).unwrap();
}
