//! Small helpers shared by the subcommands.

use proofkit_core::report::Report;
use std::fmt;

/// The boxed error every subcommand returns.
pub type CliResult = Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// An error that asks for a specific process exit code (e.g. `verify` exits 1 on an invalid
/// proof with the reason on stderr; usage and I/O errors exit 2).
#[derive(Debug)]
pub struct ExitCode(pub i32, pub String);

impl fmt::Display for ExitCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.1)
    }
}

impl std::error::Error for ExitCode {}

/// Bytes from a `--x TEXT | --x-hex HEX` pair of options (exactly one must be given).
pub fn text_or_hex(
    name: &str,
    text: &Option<String>,
    hex_text: &Option<String>,
) -> Result<Vec<u8>, String> {
    match (text, hex_text) {
        (Some(t), None) => Ok(t.as_bytes().to_vec()),
        (None, Some(h)) => decode_hex(name, h),
        (Some(_), Some(_)) => Err(format!("give either --{name} or --{name}-hex, not both")),
        (None, None) => Err(format!("missing --{name} or --{name}-hex")),
    }
}

/// Decodes hex (an optional `0x` prefix allowed), naming the option in the error.
pub fn decode_hex(name: &str, h: &str) -> Result<Vec<u8>, String> {
    let h = h.strip_prefix("0x").unwrap_or(h);
    hex::decode(h).map_err(|e| format!("--{name}-hex: {e}"))
}

/// Prints a report as JSON (one object) or as a markdown table with a title.
pub fn emit(report: &Report, json: bool, title: &str) {
    if json {
        println!("{}", report.to_json());
    } else {
        println!("\n## {title}\n");
        print!("{}", report.to_markdown());
    }
}

/// A progress bar on a terminal, hidden otherwise or when `quiet` (JSON mode).
pub fn progress_bar(len: u64, message: &str, quiet: bool) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if quiet || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(len);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {percent:>3}% {elapsed_precise} eta {eta}",
        )
        .expect("static template is valid")
        .progress_chars("=> "),
    );
    pb.set_message(message.to_string());
    pb
}
