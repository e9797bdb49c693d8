//! Crash safety: a child process (this test binary, re-run on its ignored `crash_child` test)
//! writes and finalizes blocks and is killed with SIGKILL at random moments, several times; after
//! each kill the database must reopen at the last durable block (or the one being committed),
//! with the root and every account and slot equal to a replay of the same blocks in memory.
//! Half the rounds finalize pipelined (`DbOptions::pipeline`: the store commit runs on a thread
//! of its own, so a finalization is durable once the next one returns).

// The workspace's MSRV (1.80) predates `is_multiple_of`.
#![allow(clippy::manual_is_multiple_of)]

use proofkit_state::{u256, Account, Address, CommitLevel, Db, DbOptions, State, Writer, B256};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const PER_BLOCK: u64 = 40;

fn addr(block: u64, i: u64) -> Address {
    let mut a = [0u8; 20];
    a[..8].copy_from_slice(&block.to_be_bytes());
    a[8..16].copy_from_slice(&i.to_be_bytes());
    a
}

fn slot(i: u64) -> B256 {
    u256(i)
}

/// Block `k`'s writes (they depend only on `k`): new accounts with two slots each, updates of
/// the previous block's accounts, zeroed slots two blocks back, deletions three blocks back.
fn write_block(w: &mut Writer, k: u64) {
    for i in 0..PER_BLOCK {
        let a = addr(k, i);
        w.set_account(
            &a,
            Some(Account {
                nonce: 1,
                balance: u256(k * 1000 + i),
                ..Default::default()
            }),
        );
        w.set_storage(&a, &slot(0), &u256(k + i + 1)).unwrap();
        w.set_storage(&a, &slot(i), &u256(7)).unwrap();
    }
    if k >= 2 {
        for i in 0..PER_BLOCK / 2 {
            let a = addr(k - 1, i);
            if let Some(mut acc) = w.account(&a) {
                acc.nonce += 1;
                w.set_account(&a, Some(acc));
            }
        }
    }
    if k >= 3 {
        for i in (0..PER_BLOCK).step_by(3) {
            let a = addr(k - 2, i);
            if w.account(&a).is_some() {
                w.set_storage(&a, &slot(0), &[0; 32]).unwrap();
            }
        }
    }
    if k >= 4 {
        for i in (0..PER_BLOCK).step_by(5) {
            w.set_account(&addr(k - 3, i), None);
        }
    }
}

fn replay(upto: u64) -> State {
    let mut w = Writer::new(State::new());
    for k in 1..=upto {
        write_block(&mut w, k);
    }
    w.state().clone()
}

#[test]
#[ignore = "the child half of crash_kill_reopen_is_intact; run by it"]
fn crash_child() {
    let Ok(dir) = std::env::var("PK_CRASH_DIR") else {
        return;
    };
    let level: CommitLevel = std::env::var("PK_CRASH_LEVEL").unwrap().parse().unwrap();
    let levels: usize = std::env::var("PK_CRASH_CACHED").unwrap().parse().unwrap();
    let pipeline = std::env::var("PK_CRASH_PIPELINE").unwrap() == "1";
    let mut db = Db::open(
        Some(dir.as_ref()),
        DbOptions {
            commit_level: level,
            cached_levels: levels,
            pipeline,
            ..Default::default()
        },
    )
    .unwrap();
    let mut parent = db.finalized();
    let mut finalized_before = false;
    loop {
        let mut b = db.begin(parent).unwrap();
        let k = b.number();
        write_block(&mut b, k);
        let (id, _) = db.commit(b).unwrap();
        // Finalize with a lag of one block, so forks above the store exist at the kill too.
        if k % 2 == 0 {
            let stats = db.finalize(id).unwrap();
            // Pipelined, `finalize` waited for the previous commit only (none at the first).
            let durable = if pipeline { k - 2 } else { k };
            if !pipeline || finalized_before {
                assert!(stats.new_pages + stats.reused_pages > 0);
                println!("durable {durable}");
                std::io::Write::flush(&mut std::io::stdout()).unwrap();
            }
            finalized_before = true;
        }
        parent = id;
    }
}

#[test]
fn crash_kill_reopen_is_intact() {
    let dir = std::env::temp_dir().join(format!("pk-state-crash-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let exe = std::env::current_exe().unwrap();
    let mut rng = SmallRng::seed_from_u64(std::process::id() as u64);
    let levels = ["none", "flush-data", "flush-data-and-root"];
    let mut last_number = 0;
    for round in 0..8 {
        let pipeline = round >= 4;
        let mut child = Command::new(&exe)
            .args([
                "crash_child",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("PK_CRASH_DIR", &dir)
            .env("PK_CRASH_LEVEL", levels[round % 3])
            // Half the rounds keep no trie node in memory after finalizing: every block loads
            // its paths from the pages the kill may have left behind.
            .env("PK_CRASH_CACHED", if round % 2 == 0 { "0" } else { "5" })
            .env("PK_CRASH_PIPELINE", if pipeline { "1" } else { "0" })
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut last = None;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(n) = line.strip_prefix("durable ") {
                    last = Some(n.parse::<u64>().unwrap());
                }
            }
            last
        });
        std::thread::sleep(Duration::from_millis(rng.gen_range(150..700)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let durable = reader.join().unwrap().unwrap_or(last_number);

        let db = Db::open(Some(&dir), DbOptions::default()).unwrap();
        let n = db.number(db.finalized()).unwrap();
        // The last reported durable block, or the next finalization caught mid-way (pipelined:
        // or the one after it, whose commit may have run before the report).
        let ahead = if pipeline { 4 } else { 2 };
        assert!(
            n == durable || n == durable + 2 || n == durable + ahead,
            "round {round}: reopened at {n}, last durable {durable} (pipelined: {pipeline})"
        );
        assert!(n >= last_number);
        last_number = n;
        let expect = replay(n);
        assert_eq!(
            db.root(db.finalized()).unwrap(),
            expect.root(),
            "round {round}"
        );
        let (report, root) = db.check().unwrap();
        assert_eq!(root, expect.root());
        let got = db.state(db.finalized()).unwrap();
        let mut accounts = 0;
        for k in 1..=n {
            for i in 0..PER_BLOCK {
                let a = addr(k, i);
                assert_eq!(db.stored_account(&a).unwrap(), expect.account(&a));
                assert_eq!(got.account(&a), expect.account(&a));
                accounts += expect.account(&a).is_some() as u64;
                for s in [slot(0), slot(i)] {
                    assert_eq!(got.storage(&a, &s), expect.storage(&a, &s));
                }
            }
        }
        assert!(report.entries >= accounts);
        eprintln!("round {round}: killed after durable {durable}, reopened at block {n}, {accounts} accounts intact (pipelined: {pipeline})");
    }
    assert!(last_number > 0, "the child never finalized a block");
    let _ = std::fs::remove_dir_all(&dir);
}
