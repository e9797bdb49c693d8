//! `proofkit randomx analyze <what>`: the RandomX design document's analyses (crate
//! `proofkit-randomx-lab`) as text tables, JSON (`--json`) or a PNG picture (`--plot FILE.png`).

use crate::util::CliResult;
use clap::ValueEnum;
use proofkit_randomx::analysis::AnalysisVm;
use proofkit_randomx::{Cache, Dataset, DatasetSource, PagePolicy, Version};
use proofkit_randomx_lab::{chain, entropy, memory, pipeline, rng, runtime, superscalar, Analysis};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum What {
    /// Appendix A: chained programs vs mining strategies (closed form and Monte Carlo)
    Chain,
    /// Appendix B: 3-stage CPU model, 10 designs (cycles, IPC)
    Pipeline,
    /// Appendix C: program and hash runtime distribution, per-hash breakdown
    Runtime,
    /// Appendix D: final scratchpads through LZMA 9e
    Entropy,
    /// Appendix E: SuperscalarHash size, multiplications, dependency chain, bit sensitivity
    Superscalar,
    /// Appendix F: AesGenerator1R/4R through dieharder
    Rng,
    /// Chapters 2.8.3, 2.8.2, 2.5.1: scratchpad reads/writes, write map, F/E values
    Memory,
}

#[derive(clap::Args)]
pub struct AnalyzeArgs {
    #[arg(value_enum)]
    what: What,
    /// Sample size: chain = valid hashes per strategy (1000000), pipeline = programs (10000),
    /// runtime = hashes (1000 light, 10000 fast), entropy = scratchpads (16), superscalar =
    /// keys (1000), rng = dieharder p-values per test (dieharder's default), memory = hashes (16)
    #[arg(long)]
    samples: Option<usize>,
    /// Print one JSON object instead of tables
    #[arg(long)]
    json: bool,
    /// Draw the analysis's picture into this PNG file (chain, pipeline, runtime, superscalar,
    /// memory; runtime and memory also write FILE-hash.png / FILE-fe.png)
    #[arg(long)]
    plot: Option<PathBuf>,
    /// runtime, entropy, memory: fast mode (builds the 2 GiB dataset) instead of light mode
    #[arg(long)]
    fast: bool,
    /// runtime, entropy, memory: RandomX v2 programs
    #[arg(long)]
    v2: bool,
    /// runtime, entropy, memory: the cache key
    #[arg(long, default_value = "proofkit randomx analyze")]
    key: String,
    /// rng: dieharder test numbers (`dieharder -l`), comma-separated
    #[arg(long, value_delimiter = ',')]
    tests: Vec<u32>,
    /// Threads for the dataset build (--fast)
    #[arg(long)]
    threads: Option<usize>,
}

fn vm_for(
    a: &AnalyzeArgs,
) -> Result<(AnalysisVm, DatasetSource), Box<dyn std::error::Error + Send + Sync>> {
    let cache = Arc::new(Cache::new(a.key.as_bytes(), PagePolicy::Transparent)?);
    let source = if a.fast {
        let threads = a.threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        });
        DatasetSource::Fast(Arc::new(Dataset::build(
            &cache,
            PagePolicy::Transparent,
            threads,
            &|_, _| {},
        )?))
    } else {
        DatasetSource::Light(cache)
    };
    let version = if a.v2 { Version::V2 } else { Version::V1 };
    Ok((AnalysisVm::new(source.clone(), version, true)?, source))
}

pub fn run(a: AnalyzeArgs) -> CliResult {
    if let Some(p) = &a.plot {
        if p.extension().and_then(|e| e.to_str()) != Some("png") {
            return Err(format!("--plot: {} must end in .png", p.display()).into());
        }
        if matches!(a.what, What::Entropy | What::Rng) {
            return Err(format!("--plot: {}", proofkit_randomx_lab::Error::NoPlot).into());
        }
    }
    let n = a.samples;
    let result: Box<dyn ErasedAnalysis> = match a.what {
        What::Chain => Box::new(chain::run(n.unwrap_or(1_000_000), 1)?),
        What::Pipeline => Box::new(pipeline::run(n.unwrap_or(10_000))?),
        What::Superscalar => {
            let keys = n.unwrap_or(1000);
            Box::new(superscalar::run(keys, keys.min(16), 200)?)
        }
        What::Rng => {
            let tests = if a.tests.is_empty() {
                rng::DEFAULT_TESTS.to_vec()
            } else {
                a.tests.clone()
            };
            let p = n
                .map(|p| u32::try_from(p).map_err(|_| "--samples: too large for dieharder -p"))
                .transpose()?;
            Box::new(rng::run(&tests, p)?)
        }
        What::Runtime => {
            let (mut vm, source) = vm_for(&a)?;
            let default = if a.fast { 10_000 } else { 1000 };
            Box::new(runtime::run(&mut vm, &source, n.unwrap_or(default))?)
        }
        What::Entropy => {
            let (mut vm, _) = vm_for(&a)?;
            Box::new(entropy::run(&mut vm, n.unwrap_or(16))?)
        }
        What::Memory => {
            let (mut vm, _) = vm_for(&a)?;
            Box::new(memory::run(&mut vm, n.unwrap_or(16), 8)?)
        }
    };
    if a.json {
        println!("{}", result.json());
    } else {
        println!("{}", result.text());
    }
    if let Some(p) = &a.plot {
        result.draw(p)?;
        if !a.json {
            println!("plot written to {}", p.display());
        }
    }
    Ok(())
}

/// [`Analysis`] without its `Serialize` supertrait, so results can be boxed.
trait ErasedAnalysis {
    fn json(&self) -> String;
    fn text(&self) -> String;
    fn draw(&self, path: &std::path::Path) -> Result<(), proofkit_randomx_lab::Error>;
}

impl<T: Analysis> ErasedAnalysis for T {
    fn json(&self) -> String {
        self.to_json()
    }
    fn text(&self) -> String {
        self.to_text()
    }
    fn draw(&self, path: &std::path::Path) -> Result<(), proofkit_randomx_lab::Error> {
        self.plot(path)
    }
}
