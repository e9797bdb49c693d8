//! Proof verification on damaged and made-up proofs never panics, however the nodes are
//! broken: truncated, lengthened, bytes changed, RLP headers claiming more or less than
//! there is. Against the true root every damaged proof is rejected; the root is otherwise the
//! hash of the damaged first node, so that the damage reaches the decoder rather than failing
//! the first hash check. (`tests/oracle.rs` has the single-byte tampering cases.)

use proofkit_state::keccak::keccak256;
use proofkit_state::proof::{get_proof, verify, verify_path};
use proofkit_state::{u256, Account, Db, DbOptions};
use rand::{rngs::SmallRng, Rng, SeedableRng};

/// RLP prefixes that start lists and strings of every form, short and long.
const PREFIXES: [u8; 8] = [0xf8, 0xf9, 0xfa, 0xff, 0xc0, 0xf7, 0xb8, 0xbf];

fn damage(rng: &mut SmallRng, node: &mut Vec<u8>) {
    match rng.gen_range(0..5) {
        0 if !node.is_empty() => {
            let at = rng.gen_range(0..node.len());
            node[at] = rng.gen();
        }
        1 if !node.is_empty() => node.truncate(rng.gen_range(0..node.len())),
        2 => node.insert(rng.gen_range(0..=node.len()), rng.gen()),
        3 if !node.is_empty() => {
            let at = rng.gen_range(0..node.len().min(4));
            node[at] = PREFIXES[rng.gen_range(0..PREFIXES.len())];
        }
        _ => node.extend((0..rng.gen_range(0..40)).map(|_| rng.gen::<u8>())),
    }
}

#[test]
fn damaged_proofs_give_errors_never_a_panic() {
    let mut rng = SmallRng::seed_from_u64(1);
    let mut db = Db::open(None, DbOptions::default()).unwrap();
    let mut b = db.begin(db.finalized()).unwrap();
    let addrs: Vec<[u8; 20]> = (0..300).map(|_| rng.gen()).collect();
    for (i, a) in addrs.iter().enumerate() {
        let account = Account {
            nonce: i as u64,
            balance: u256(5),
            ..Default::default()
        };
        b.writer.set_account(a, Some(account));
        for s in 0..i % 7 {
            b.writer.set_storage(a, &u256(s as u64), &u256(9)).unwrap();
        }
    }
    let (id, root) = db.commit(b).unwrap();
    let state = db.state(id).unwrap();
    let mut rejected = 0;
    const CASES: usize = 20_000;
    for _ in 0..CASES {
        let a = addrs[rng.gen_range(0..addrs.len())];
        let honest = get_proof(state, &a, &[u256(rng.gen_range(0..8))]);
        assert_eq!(verify(&root, &honest), Ok(()));
        let mut p = honest.clone();
        let storage = rng.gen_bool(0.5) && !p.storage_proof[0].proof.is_empty();
        let nodes = if storage {
            &mut p.storage_proof[0].proof
        } else {
            &mut p.account_proof
        };
        for _ in 0..rng.gen_range(1..4) {
            let k = rng.gen_range(0..nodes.len());
            damage(&mut rng, &mut nodes[k]);
        }
        let first = keccak256(&nodes[0]);
        let _ = verify_path(&first, &keccak256(&a), nodes);
        if !storage && rng.gen_bool(0.5) {
            // A root made for the damaged first node: the proof may even hold for it.
            let _ = verify(&first, &p);
        } else {
            // Against the true root, any change is rejected (some damage rewrites a byte
            // with the value it had).
            let r = verify(&root, &p);
            assert!(r.is_err() || p == honest, "damaged proof accepted: {p:?}");
            rejected += usize::from(r.is_err());
        }
    }
    assert!(rejected > CASES / 3, "{rejected} of {CASES} rejected");
}

#[test]
fn made_up_nodes_give_errors_never_a_panic() {
    let mut rng = SmallRng::seed_from_u64(2);
    let (mut errors, mut absent, mut present) = (0, 0, 0);
    for _ in 0..100_000 {
        let nodes: Vec<Vec<u8>> = (0..rng.gen_range(1..4))
            .map(|_| {
                let mut n: Vec<u8> = (0..rng.gen_range(0..600)).map(|_| rng.gen()).collect();
                if n.len() > 3 && rng.gen_bool(0.7) {
                    // A long list header claiming about the rest, then items: hashes and
                    // short strings of any length byte.
                    let body = n.len() - 4 + rng.gen_range(0..3);
                    n[..3].copy_from_slice(&[0xf9, (body >> 8) as u8, body as u8]);
                    let mut at = 3;
                    while at + 33 < n.len() {
                        if rng.gen_bool(0.5) {
                            n[at] = 0xa0;
                            at += 33;
                        } else {
                            let len = rng.gen_range(0..56u8);
                            n[at] = 0x80 + len;
                            at += 1 + len as usize;
                        }
                    }
                }
                n
            })
            .collect();
        let key: [u8; 32] = rng.gen();
        match verify_path(&keccak256(&nodes[0]), &key, &nodes) {
            Err(_) => errors += 1,
            Ok(None) => absent += 1,
            Ok(Some(_)) => present += 1,
        }
    }
    // Random bytes rarely decode at all; one that decodes as a branch without the key's
    // nibble is a valid proof of absence for its own hash.
    assert!(
        errors > 99_000,
        "errors {errors}, absent {absent}, present {present}"
    );
}
