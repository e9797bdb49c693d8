//! External memory for the `em` mode: index-pointer tables appended to one temporary file and
//! streamed back in order when solutions are traced back (the general solver), or the
//! trees of [`crate::em`] written at known offsets and read back one by one.
//!
//! ```text
//!  file:  | table 0 (len0 x w0 bytes, little-endian) | table 1 | ... |
//!  index: Vec<(offset, entries, width)> kept in memory
//! ```
#![deny(unsafe_code)]

use crate::solver::PtrTable;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A temporary file of pointer tables, removed on drop.
pub struct SpillFile {
    path: PathBuf,
    file: File,
    end: u64,
}

/// Where one table lies in the spill file.
#[derive(Clone, Copy, Debug)]
pub struct SpilledTable {
    offset: u64,
    len: usize,
    width: usize,
}

const CHUNK: usize = 1 << 20;

impl SpillFile {
    /// Creates a new file in `dir` (the system temp dir when `None`).
    pub fn create(dir: Option<&Path>) -> std::io::Result<Self> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = dir
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir);
        let name = format!(
            "proofkit-equihash-{}-{}.spill",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok(SpillFile { path, file, end: 0 })
    }

    /// Appends `table` and returns where it lies.
    pub fn write(&mut self, table: &PtrTable) -> std::io::Result<SpilledTable> {
        let width = table.width();
        let len = table.len();
        let offset = self.end;
        self.file.seek(SeekFrom::Start(offset))?;
        let mut w = BufWriter::with_capacity(CHUNK, &mut self.file);
        let mut buf = Vec::with_capacity(CHUNK);
        for i in 0..len {
            let v = table.get(i);
            buf.extend_from_slice(&v.to_le_bytes()[..width]);
            if buf.len() >= CHUNK {
                w.write_all(&buf)?;
                buf.clear();
            }
        }
        w.write_all(&buf)?;
        w.flush()?;
        drop(w);
        self.end = offset + (len * width) as u64;
        Ok(SpilledTable { offset, len, width })
    }

    /// Looks up `positions` (any order) in a spilled table, streaming the file once.
    pub fn lookup(&mut self, t: SpilledTable, positions: &[u64]) -> std::io::Result<Vec<u64>> {
        let mut order: Vec<(u64, usize)> =
            positions.iter().enumerate().map(|(i, &p)| (p, i)).collect();
        order.sort_unstable();
        let mut out = vec![0u64; positions.len()];
        let per_chunk = CHUNK / t.width;
        let mut buf = vec![0u8; per_chunk * t.width];
        let mut next = 0;
        let mut start = 0usize;
        self.file.seek(SeekFrom::Start(t.offset))?;
        while start < t.len && next < order.len() {
            let count = per_chunk.min(t.len - start);
            let bytes = &mut buf[..count * t.width];
            self.file.read_exact(bytes)?;
            while next < order.len() && (order[next].0 as usize) < start + count {
                let (p, i) = order[next];
                let at = (p as usize - start) * t.width;
                let mut v = [0u8; 8];
                v[..t.width].copy_from_slice(&bytes[at..at + t.width]);
                out[i] = u64::from_le_bytes(v);
                next += 1;
            }
            start += count;
        }
        if next < order.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "position beyond spilled table",
            ));
        }
        Ok(out)
    }
}

impl SpillFile {
    /// Where the file is (it is removed when the `SpillFile` is dropped).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `bytes` at `offset` with a plain positioned write (no mapping: mapped file
    /// pages would count in the process's resident set). Threads may write disjoint ranges
    /// at once; a later solve writes over the pages of an earlier one instead of freeing
    /// and allocating them again.
    pub(crate) fn write_at(&self, bytes: &[u8], offset: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.write_all_at(bytes, offset)
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub(crate) fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.read_exact_at(buf, offset)
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
