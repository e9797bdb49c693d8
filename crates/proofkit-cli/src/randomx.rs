//! `proofkit randomx ...`

use crate::util::CliResult;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CliResult {
    Err("randomx: under construction".into())
}

pub fn main_bench(_json: bool) -> CliResult {
    Ok(())
}
