//! Reads every account of a Paprika run back from an existing store directory and checks it, as
//! the end of `proofkit state bench` does, and says where the time went: `cargo run --release
//! -p proofkit-state --example readback -- DIR BLOCKS [PASSES]` (DIR written by `paprika BLOCKS
//! DIR` with 1,000 accounts per block). Each pass prints its wall time, the process's user and
//! system CPU, its minor and major faults and the thread time per account; the first pass of a
//! fresh process maps the file cold (no page-table entries), the later ones find it mapped.
//! `PK_THREADS` (default: every core) readers, `PK_BATCH` accounts per lookup call (default
//! `bench::READ_BACK_BATCH`).
use proofkit_state::bench::read_back;
use proofkit_state::{Db, DbOptions};
use std::time::Instant;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn usage() -> (f64, f64, i64, i64) {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr());
        u.assume_init()
    };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(u.ru_utime), s(u.ru_stime), u.ru_minflt, u.ru_majflt)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("usage: readback DIR BLOCKS [PASSES]"));
    let blocks: u64 = args.next().and_then(|a| a.parse().ok()).expect("BLOCKS");
    let passes: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let threads = std::env::var("PK_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let batch = std::env::var("PK_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(proofkit_state::bench::READ_BACK_BATCH);
    let t = Instant::now();
    let db = Db::open(
        Some(&dir),
        DbOptions {
            verify_on_open: false,
            ..Default::default()
        },
    )
    .expect("open");
    println!(
        "opened at block {} in {:.2} s",
        db.number(db.finalized()).expect("finalized"),
        t.elapsed().as_secs_f64()
    );
    let accounts = blocks * 1000;
    for pass in 0..passes {
        let (u0, s0, f0, m0) = usage();
        let t = Instant::now();
        read_back(&db, blocks, 1000, threads, batch).expect("read-back");
        let wall = t.elapsed().as_secs_f64();
        let (u1, s1, f1, m1) = usage();
        println!(
            "pass {pass}: {accounts} accounts, {threads} threads, batches of {batch}: {wall:.2} s wall, user {:.2} s, sys {:.2} s, minor faults {}, major {}, {:.2} us of CPU per account",
            u1 - u0,
            s1 - s0,
            f1 - f0,
            m1 - m0,
            (u1 - u0 + s1 - s0) * 1e6 / accounts as f64
        );
    }
}
