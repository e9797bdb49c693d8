//! Appendix D, "Scratchpad entropy analysis": the final scratchpads of several hashes (after the
//! 8 programs) are compressed together with LZMA at the highest setting (xz preset 9 | extreme;
//! the document used 7-Zip's LZMA2 ultra mode) and the compressed size is compared with the
//! original (the document: 99.98%). The same compressor run on as many bytes from the operating
//! system's random generator is the control: what "incompressible" looks like with this
//! container. A byte-frequency (order-0) Shannon entropy is reported beside it: slightly below
//! the control's, because every iteration stores F registers (doubles XORed with E), whose
//! exponent bytes are far from uniform; LZMA cannot turn that small bias into a smaller file.

use crate::{figures_table, Analysis, Error, Figure};
use proofkit_randomx::analysis::AnalysisVm;
use serde::Serialize;
use std::io::{Read, Write};
use std::path::Path;

pub const DOCUMENT_RATIO: f64 = 0.9998;

/// liblzma's `LZMA_PRESET_EXTREME` flag (lzma/container.h), which xz2 does not re-export.
pub const PRESET_EXTREME: u32 = 0x8000_0000;

/// LZMA preset 9 with the extreme flag.
pub fn compress_max(data: &[u8]) -> Result<Vec<u8>, Error> {
    let stream =
        xz2::stream::Stream::new_easy_encoder(9 | PRESET_EXTREME, xz2::stream::Check::Crc64)
            .map_err(|e| Error::Io(std::io::Error::other(e)))?;
    let mut enc = xz2::write::XzEncoder::new_stream(Vec::new(), stream);
    enc.write_all(data)?;
    Ok(enc.finish()?)
}

/// Order-0 entropy in bits per byte.
pub fn byte_entropy(data: &[u8]) -> f64 {
    let mut counts = [0u64; 256];
    for &b in data {
        counts[b as usize] += 1;
    }
    let n = data.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

#[derive(Clone, Debug, Serialize)]
pub struct EntropyAnalysis {
    pub scratchpads: usize,
    pub original_bytes: usize,
    pub compressed_bytes: usize,
    pub ratio: f64,
    pub control_compressed_bytes: usize,
    pub control_ratio: f64,
    pub bits_per_byte: f64,
    pub control_bits_per_byte: f64,
}

/// Compresses the final scratchpads of `scratchpads` hashes (inputs `entropy {i}`) run on `vm`.
pub fn run(vm: &mut AnalysisVm, scratchpads: usize) -> Result<EntropyAnalysis, Error> {
    crate::check_samples(scratchpads, 1)?;
    let mut all = Vec::with_capacity(scratchpads * vm.scratchpad().len());
    for i in 0..scratchpads {
        vm.hash_timed(format!("entropy {i}").as_bytes());
        all.extend_from_slice(vm.scratchpad());
    }
    let compressed = compress_max(&all)?.len();
    let mut control = vec![0u8; all.len()];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut control)?;
    let control_compressed = compress_max(&control)?.len();
    Ok(EntropyAnalysis {
        scratchpads,
        original_bytes: all.len(),
        compressed_bytes: compressed,
        ratio: compressed as f64 / all.len() as f64,
        control_compressed_bytes: control_compressed,
        control_ratio: control_compressed as f64 / control.len() as f64,
        bits_per_byte: byte_entropy(&all),
        control_bits_per_byte: byte_entropy(&control),
    })
}

impl Analysis for EntropyAnalysis {
    fn figures(&self) -> Vec<Figure> {
        vec![
            Figure::new(
                "compressed / original (LZMA 9e)",
                "",
                Some(DOCUMENT_RATIO),
                self.ratio,
            ),
            Figure::new(
                "same for /dev/urandom bytes (control)",
                "",
                None,
                self.control_ratio,
            ),
            Figure::new("order-0 entropy", "bits/byte", None, self.bits_per_byte),
            Figure::new(
                "order-0 entropy of the control",
                "bits/byte",
                None,
                self.control_bits_per_byte,
            ),
        ]
    }

    fn to_text(&self) -> String {
        format!(
            "## Appendix D: scratchpad entropy ({} scratchpads, {} bytes -> {} bytes; control {} bytes)\n\n{}",
            self.scratchpads,
            self.original_bytes,
            self.compressed_bytes,
            self.control_compressed_bytes,
            figures_table(&self.figures())
        )
    }

    fn plot(&self, _path: &Path) -> Result<(), Error> {
        Err(Error::NoPlot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compressor_compresses_redundant_data_and_not_random_data() {
        let zeros = vec![0u8; 1 << 16];
        assert!(compress_max(&zeros).unwrap().len() < 1000);
        assert_eq!(byte_entropy(&zeros), 0.0);
        let all_bytes: Vec<u8> = (0..=255u8).cycle().take(1 << 16).collect();
        assert!((byte_entropy(&all_bytes) - 8.0).abs() < 1e-9);
        // The output is a valid xz stream that decodes to the input.
        let text = b"RandomX scratchpad entropy ".repeat(100);
        let packed = compress_max(&text).unwrap();
        let mut out = Vec::new();
        xz2::read::XzDecoder::new(&packed[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, text);
    }
}
