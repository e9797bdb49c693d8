//! `proofkit bench`: the main job. A short run of every engine's benchmark beside its peer,
//! printing the tables of the seed documents; a few minutes on 2 cores.

use crate::util::CliResult;

#[derive(clap::Args)]
pub struct Args {
    /// Print each engine's report as one JSON object per line instead of tables
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CliResult {
    crate::randomx::main_bench(args.json)?;
    crate::state::main_bench(args.json)?;
    crate::equihash::main_bench(args.json)?;
    crate::vdf::main_bench(args.json)?;
    Ok(())
}
