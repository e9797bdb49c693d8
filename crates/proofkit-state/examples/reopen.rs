//! What a reopened database's first reads and writes cost: `cargo run --release -p
//! proofkit-state --example reopen -- DIR [BLOCKS]` on a database that `proofkit state bench
//! --path DIR --keep` (or the `paprika` example) left. Opens it without verification, then times
//! proofs of accounts the bench wrote (each loads the nodes on its path that memory does not
//! hold yet) and BLOCKS (default 4) more blocks of the bench's workload (1,000 new accounts with
//! one slot each), each finalized. `PK_CACHED_LEVELS` as in the `paprika` example.
use proofkit_state::bench::addresses;
use proofkit_state::proof::{get_proof, verify};
use proofkit_state::{u256, Account, Db, DbOptions};
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("usage: reopen DIR [BLOCKS]"));
    let blocks: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(4);
    let options = DbOptions {
        verify_on_open: false,
        cached_levels: std::env::var("PK_CACHED_LEVELS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(DbOptions::default().cached_levels),
        ..Default::default()
    };
    let t = Instant::now();
    let mut db = Db::open(Some(&dir), options).expect("open");
    let top = db.number(db.finalized()).expect("the finalized block");
    println!("open: {:.1} ms (block {top})", ms(t));
    let root = db.root(db.finalized()).expect("root");
    for (k, b) in [(1u64, 1u64), (2, top / 2), (3, top), (4, 1), (5, top / 3)] {
        let a = addresses(b.max(1), k, k + 1)[0];
        let t = Instant::now();
        let p = get_proof(db.state(db.finalized()).expect("state"), &a, &[u256(0)]);
        let took = ms(t);
        verify(&root, &p).expect("a valid proof");
        println!("proof {k} (an account of block {}): {took:.2} ms", b.max(1));
    }
    let mut parent = db.finalized();
    for n in top + 1..=top + blocks {
        let t = Instant::now();
        let mut block = db.begin(parent).expect("begin");
        let account = Account {
            nonce: 0,
            balance: u256(n),
            ..Default::default()
        };
        let addrs = addresses(n, 0, 1000);
        let accounts: Vec<_> = addrs.iter().map(|a| (*a, Some(account))).collect();
        block.set_accounts(&accounts);
        let slots: Vec<_> = (0u64..)
            .zip(&addrs)
            .map(|(i, a)| (*a, u256(0), u256(n * 1_000_000 + i * 16 + 1)))
            .collect();
        block.set_storages(&slots).expect("slots");
        let (id, _) = db.commit(block).expect("commit");
        db.finalize(id).expect("finalize");
        parent = id;
        println!("block {n}: {:.1} ms", ms(t));
    }
    db.sync().expect("sync");
}
