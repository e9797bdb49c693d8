//! The only `unsafe` of the crate: mapping the store's file into memory (memmap2 marks it unsafe
//! because another process could change or truncate the file under the mapping).

use memmap2::MmapMut;
use std::fs::File;
use std::io;

/// Maps the whole of `file` read-write, shared.
pub(crate) fn map_file(file: &File) -> io::Result<MmapMut> {
    // SAFETY: the store owns the file for its whole life (it is opened by `Store::open` inside the
    // store's own directory and never truncated while mapped: it only grows, and every growth
    // drops the old mapping before mapping again); the mapping is only read through bounds-checked
    // slices. Other processes writing the same file concurrently are not supported (documented).
    unsafe { MmapMut::map_mut(file) }
}
