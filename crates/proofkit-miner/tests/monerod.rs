//! Solo mining against a real Monero node: monerod (Debian's `monero` package) in regtest mode on
//! free loopback ports, started by the test.
//!
//! One chain, three runs of monerod on it:
//! 1. monerod loads proofkit's `librandomx.so.0` (LD_LIBRARY_PATH) and grows the chain at
//!    difficulty 1 with `generateblocks` to a few blocks before the first seed-hash change
//!    (height 2113, where the key becomes the id of block 2048);
//! 2. the same node at difficulty 100 (`--keep-fakechain`): proofkit's miner mines 5 blocks and
//!    monerod, hashing with proofkit's library, accepts them;
//! 3. monerod on the system librandomx (the reference implementation) at difficulty 100: the miner
//!    mines across the seed-hash change (re-keying while it runs) and every block is accepted by
//!    the reference; a block with a wrong nonce is rejected.

use proofkit_miner::daemon::{run_solo, Client, SoloConfig};
use proofkit_miner::engine::{Engine, EngineConfig, Mode};
use proofkit_miner::job::Goal;
use proofkit_miner::stats::Status;
use proofkit_randomx::{Cache, PagePolicy, Version, Vm};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The Monero General Fund's address: any valid mainnet address will do for regtest.
const WALLET: &str = "44AFFq5kSiGBoZ4NMDwYtN18obc8AemS33DBLWs3H7otXft3XjrpDtQGv7SqSsaBYBb98uNbr2VBBEt7f2wfn3RVGQBEP3A";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn have_monerod() -> bool {
    Command::new("monerod")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A directory holding `librandomx.so.0` -> the cdylib cargo built beside this test binary
/// (proofkit-randomx-capi is a dev-dependency, so `cargo test` builds it into `deps/`).
fn proofkit_library_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let built = [
        deps.join("librandomx.so"),
        deps.parent().unwrap().join("librandomx.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("proofkit-randomx-capi's cdylib beside the test binary");
    let dir = std::env::temp_dir().join(format!("proofkit-miner-lib-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&built, dir.join("librandomx.so.0")).unwrap();
    dir
}

struct Monerod {
    child: Child,
    client: Client,
    url: String,
    log: PathBuf,
}

impl Monerod {
    fn start(data: &Path, difficulty: u64, keep_fakechain: bool, lib: Option<&Path>) -> Monerod {
        let (rpc, p2p) = (free_port(), free_port());
        let log = data.with_extension(format!("log-{rpc}"));
        let mut cmd = Command::new("monerod");
        cmd.args(["--regtest", "--offline", "--fixed-difficulty"])
            .arg(difficulty.to_string())
            .arg("--data-dir")
            .arg(data)
            .args(["--rpc-bind-ip", "127.0.0.1", "--rpc-bind-port"])
            .arg(rpc.to_string())
            .args(["--p2p-bind-ip", "127.0.0.1", "--p2p-bind-port"])
            .arg(p2p.to_string())
            .args([
                "--no-zmq",
                "--no-igd",
                "--non-interactive",
                "--check-updates",
                "disabled",
                "--disable-dns-checkpoints",
                "--log-level",
                "0",
            ]);
        if keep_fakechain {
            cmd.arg("--keep-fakechain");
        }
        match lib {
            Some(l) => cmd.env("LD_LIBRARY_PATH", l),
            None => cmd.env_remove("LD_LIBRARY_PATH"),
        };
        let out = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .expect("monerod starts");
        let url = format!("http://127.0.0.1:{rpc}");
        let mut m = Monerod {
            child,
            client: Client::new(&url).unwrap(),
            url,
            log,
        };
        let t = Instant::now();
        loop {
            if m.client.height().is_ok() {
                break;
            }
            if let Ok(Some(st)) = m.child.try_wait() {
                panic!("monerod exited ({st}): {}", m.log_tail());
            }
            assert!(
                t.elapsed() < Duration::from_secs(180),
                "monerod RPC not up: {}",
                m.log_tail()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        m
    }

    fn log_tail(&self) -> String {
        let s = std::fs::read_to_string(&self.log).unwrap_or_default();
        s[s.len().saturating_sub(3000)..].to_string()
    }

    /// The path of the librandomx this monerod process has mapped.
    fn librandomx_path(&self) -> String {
        let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.child.id())).unwrap();
        maps.lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("librandomx") || p.contains("deps/librandomx"))
            .unwrap_or("(none)")
            .to_string()
    }

    /// Stops monerod through its RPC (clean database close) and waits for it.
    fn stop(mut self) {
        let _ = self.client.stop_daemon();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(60) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Monerod {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// proofkit's miner running against a daemon on its own thread.
struct Miner {
    stop: Arc<AtomicBool>,
    status: Arc<Status>,
    thread: Option<JoinHandle<()>>,
}

impl Miner {
    fn start(url: &str) -> Miner {
        let stop = Arc::new(AtomicBool::new(false));
        let status = Arc::new(Status::new());
        let mut cfg = SoloConfig::new(url, WALLET);
        cfg.poll = Duration::from_millis(300);
        let (st, stat) = (stop.clone(), status.clone());
        let thread = std::thread::spawn(move || {
            let (tx, rx) = std::sync::mpsc::channel();
            let engine = Engine::start(
                EngineConfig {
                    threads: 2,
                    mode: Mode::Light,
                    pages: PagePolicy::Transparent,
                    pin: false,
                },
                tx,
            )
            .unwrap();
            run_solo(&cfg, &engine, &rx, &stat, &st).unwrap();
            engine.stop();
        });
        Miner {
            stop,
            status,
            thread: Some(thread),
        }
    }

    /// Waits until `done` holds (checked every 200 ms) or panics after `limit`.
    fn wait_for(&self, what: &str, limit: Duration, mut done: impl FnMut(&Status) -> bool) {
        let t = Instant::now();
        while !done(&self.status) {
            assert!(
                t.elapsed() < limit,
                "{what}: not reached in {limit:?} ({:?})",
                self.status.shares()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn finish(mut self) -> proofkit_miner::stats::Shares {
        self.stop.store(true, Ordering::Release);
        self.thread.take().unwrap().join().expect("miner thread");
        self.status.shares()
    }
}

#[test]
fn solo_mining_on_regtest_with_both_libraries_across_a_seed_change() {
    if !have_monerod() {
        eprintln!("skipped: monerod not installed (apt-get install monero)");
        return;
    }
    let root = std::env::temp_dir().join(format!("proofkit-miner-regtest-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let data = root.join("chain");
    let ours = proofkit_library_dir();
    const GROW_TO: u64 = 2105;

    // 1. monerod on proofkit's librandomx grows the chain at difficulty 1.
    let t = Instant::now();
    let node = Monerod::start(&data, 1, false, Some(&ours));
    assert!(
        node.librandomx_path().contains("deps/librandomx.so"),
        "monerod did not load proofkit's library: {}",
        node.librandomx_path()
    );
    let genesis_seed = node.client.get_block_template(WALLET, 8).unwrap().seed_hash;
    let slow = node.client.clone().with_timeout(Duration::from_secs(900));
    while node.client.height().unwrap() < GROW_TO {
        let h = node.client.height().unwrap();
        slow.generate_blocks((GROW_TO - h).min(250), WALLET)
            .unwrap();
    }
    eprintln!(
        "grown to {GROW_TO} blocks in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    node.stop();

    // 2. The same library at difficulty 100: proofkit's miner, verified by proofkit's library
    //    inside monerod.
    let node = Monerod::start(&data, 100, true, Some(&ours));
    assert!(node.librandomx_path().contains("deps/librandomx.so"));
    assert_eq!(
        node.client.height().unwrap(),
        GROW_TO,
        "--keep-fakechain kept the chain"
    );
    let miner = Miner::start(&node.url);
    miner.wait_for(
        "5 blocks on proofkit's library",
        Duration::from_secs(300),
        |s| s.shares().accepted >= 5,
    );
    let shares = miner.finish();
    let h2 = node.client.height().unwrap();
    assert!(h2 >= GROW_TO + 5, "height {h2}");
    assert_eq!(
        shares.accepted,
        h2 - GROW_TO,
        "each accepted block is on the chain"
    );
    assert_eq!(shares.rejected, 0, "{shares:?}");
    for h in GROW_TO..h2 {
        let hdr = node.client.block_header(h).unwrap();
        assert_eq!(hdr["difficulty"], 100, "block {h}: {hdr}");
    }
    node.stop();

    // 3. The reference librandomx at difficulty 100: mine across the seed-hash change.
    let node = Monerod::start(&data, 100, true, None);
    let lib = node.librandomx_path();
    assert!(
        lib.contains("librandomx.so.0") && !lib.contains("deps/"),
        "monerod should use the system librandomx, maps say {lib}"
    );
    let before = node.client.get_block_template(WALLET, 8).unwrap();
    assert_eq!(before.seed_hash, genesis_seed, "the first epoch's key");
    let miner = Miner::start(&node.url);
    // Until two blocks on the new key are in.
    let client = node.client.clone();
    let mut seed_changed_at = None;
    miner.wait_for(
        "two blocks after the seed change",
        Duration::from_secs(600),
        |_| {
            let t = client.get_block_template(WALLET, 8).unwrap();
            if t.seed_hash != genesis_seed && seed_changed_at.is_none() {
                seed_changed_at = Some(t.height);
            }
            seed_changed_at.is_some_and(|h| t.height >= h + 2)
        },
    );
    let shares = miner.finish();
    let change = seed_changed_at.unwrap();
    assert_eq!(change, 2113, "the key changes at height 2048 + 64 + 1");
    let h3 = node.client.height().unwrap();
    assert_eq!(shares.accepted, h3 - h2, "{shares:?}");
    assert_eq!(shares.rejected, 0, "{shares:?}");
    let new_seed = node.client.block_header(2048).unwrap()["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let after = node.client.get_block_template(WALLET, 8).unwrap();
    assert_eq!(
        hex::encode(after.seed_hash),
        new_seed,
        "key = id of block 2048"
    );

    // A wrong nonce: one whose hash misses the difficulty (checked with the library here), which
    // the miner would never submit, is refused by the node.
    let cache = Arc::new(Cache::new(&after.seed_hash, PagePolicy::Transparent).unwrap());
    let mut vm = Vm::light(cache, Version::V1).unwrap();
    let goal = Goal::Block(after.difficulty);
    let mut nonce = 0u32;
    loop {
        let mut b = after.blockhashing_blob.clone();
        b[after.nonce_offset..after.nonce_offset + 4].copy_from_slice(&nonce.to_le_bytes());
        if !goal.is_met_by(&vm.hash(&b)) {
            break;
        }
        nonce += 1;
    }
    let mut block = after.blocktemplate_blob.clone();
    block[after.nonce_offset..after.nonce_offset + 4].copy_from_slice(&nonce.to_le_bytes());
    assert!(
        !node.client.submit_block(&block).unwrap(),
        "a block below difficulty was accepted"
    );
    assert_eq!(node.client.height().unwrap(), h3);
    node.stop();
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(&ours);
    eprintln!("total {:.0} s", t.elapsed().as_secs_f64());
}
