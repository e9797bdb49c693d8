//! `proofkit`: one subcommand per engine, plus `bench`, the main job (a short run of every
//! engine's benchmark beside its peer). Errors are printed as one line; the exit code is non-zero.
#![deny(unsafe_code)]

use clap::{Parser, Subcommand};

mod alloc;
mod bench;
mod equihash;
mod randomx;
mod randomx_analyze;
mod randomx_mine;
mod state;
mod state_peer;
mod util;
mod vdf;

#[derive(Parser)]
#[command(
    name = "proofkit",
    version,
    about = "Proof-of-work, VDF and state-root engines"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// RandomX (Monero's proof of work, v1 and v2)
    Randomx(randomx::Args),
    /// Ethereum state: Merkle-Patricia roots, proofs, a paged store, the Paprika benchmark
    State(state::Args),
    /// Equihash (Zcash proof of work): solve, verify, bench
    Equihash(equihash::Args),
    /// Recursive SHA-256 VDF: chain, prove, verify, bench
    Vdf(vdf::Args),
    /// The main job: every engine's benchmark beside its peer
    Bench(bench::Args),
}

#[global_allocator]
static GLOBAL: alloc::PerCommand = alloc::PerCommand;

fn main() {
    if let Some(v) = std::env::var_os(alloc::OVERRIDE) {
        if alloc::choice(None, Some(v.as_encoded_bytes())).is_err() {
            eprintln!(
                "proofkit: {}={} is not an allocator (system or mimalloc)",
                alloc::OVERRIDE,
                v.to_string_lossy()
            );
            std::process::exit(2);
        }
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Randomx(a) => randomx::run(a),
        Command::State(a) => state::run(a),
        Command::Equihash(a) => equihash::run(a),
        Command::Vdf(a) => vdf::run(a),
        Command::Bench(a) => bench::run(a),
    };
    if let Err(e) = result {
        eprintln!("proofkit: {e}");
        std::process::exit(match e.downcast_ref::<util::ExitCode>() {
            Some(c) => c.0,
            None => 2,
        });
    }
}
