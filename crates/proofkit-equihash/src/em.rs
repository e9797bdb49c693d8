//! The `em` mode's fast path: the external-memory layout of the CIP paper ("Memory
//! Optimizations of Wagner's Algorithm", ePrint 2025/2141, the CIP-EM solver) on the bucket
//! machinery of [`crate::fast`] (its [`Plan`], chain tables, pair codes, two-phase pairing
//! and hash kernels).
//!
//! Only rows are in memory, and only those of the layer being consumed and of the layer being
//! produced: a bucket's rows are copied out and its chunks freed before its pairs are merged,
//! so the two layers together hold about one layer's rows at any time. Rows live in chunks of
//! one pool; a bucket is a list of segments filled in slot order ([`Layer`]: a head in a
//! chunk shared with the neighbouring bucket, full chunks linked through their last 4 bytes,
//! and once the layer is complete a tail packed with other buckets' tails), and freed chunks
//! go on a LIFO list kept in the chunks themselves, so the memory touched is the most rows
//! ever alive plus about half a chunk per list (the lists being at different points of
//! their chunks). Rows are
//! byte-packed: for (200,9) 26 bytes at layers 0 and 1 (layer 0 keeps only the low 16 bits
//! of the string index), so the 2^21 rows of a layer take 52 MiB.
//!
//! ```text
//!  pool:   | chunk | chunk | ... |   chunk: rows, then 4 bytes (link to the bucket's next chunk)
//!  heads:  | bucket 2p's rows 0..x | (empty) | bucket 2p+1's rows | (link unused) |
//!  pack:   | tail of b | tail of b+1 ... | link |  | ... tail of b+5 | ... |
//!  row of layer r: | hash bits [r*c + B, n), big-endian, ceil(bits/8) bytes | tree, tb bytes LE |
//!  tree:   layer 0: the low B + 6 bits of the string index (16 for (200,9), 24 for (144,5));
//!          layer r >= 1: bucket of the pair at layer r-1 << P | pair(slot a, slot b),
//!          P = 32 - B where that names enough slot ids (4-byte trees), else wider
//!          (`Plan::wide`, e.g. (144,5): P = 21, 5-byte trees)
//!  file:   | layer 0's trees (full indices) | layer 1's | ... | layer k-2's |,
//!          each layer in (bucket, slot) order, in writes cut at 64 KiB file offsets
//! ```
//!
//! Each layer's trees are written to the temporary file with plain positioned writes while the
//! layer is consumed (in bucket order, so sequentially; a mapped file would count in the
//! resident set), and read back only for the candidates' trees at the end. The last layer's
//! trees are not written: the final step takes its candidates' trees from their rows. Slot
//! `s` of bucket `b` at layer `r` is entry `(rows of buckets < b) + s` of layer `r`'s part of
//! the file.
//! The `full` mode runs the same solver with the trees in memory ([`Store::Memory`]: the
//! file's bytes in one buffer) where [`crate::fast`] has no plan ((144,5), (192,7)).
//!
//! Threads: each layer's buckets are split between the threads (equal rows), and each thread
//! writes the rows it makes into its own chunk lists (one list per bucket per thread, a
//! bucket's rows being the lists in thread order), takes chunks from its own free list (and
//! a shared bump counter) and writes its buckets' trees to its own part of the layer's file
//! region (known once the layer's rows are counted). The pool is shared through
//! [`crate::pool`]'s views (this solver's only unsafe code), under the ownership rules given there.
//!
//! The `pr` mode keeps only the trees of the layers from its height
//! on; tracing back rebuilds the others for the candidates by re-running the layers below
//! each ([`Pass::Pick`]).
//!
//! Like [`crate::fast`] this path returns `None` (the caller then runs the general solver)
//! when a bucket outgrows the slot ids a pair code can name, the pool runs out of chunks, or
//! two layer-0 rows of a bucket list are 2^(B+6) or more indices apart.
#![deny(unsafe_code)]

use crate::fast::{
    for_each_string, for_each_string_bytes, list_partners, pair_code, pair_decode, with_kernel,
    Chains, KernelJob, Plan, RowKernel, MAX_WORDS, NIL,
};
use crate::hash::HashGen;
use crate::pool::{Pool, PoolRef};
use crate::spill::SpillFile;
use proofkit_core::memory::{LargeBuffer, PagePolicy};
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Rows of layer 0 (the longest) per chunk, with few buckets and with many. Every list of
/// the two live layers holds a partly filled chunk, half a chunk on average ([`Layer`]): 56
/// rows of (200,9)'s 26-byte layers 0 and 1 make 1,460-byte chunks (1,024 lists: ~0.75 MB
/// partly filled), and those layers lose nothing to chunk ends (rows do not straddle chunks).
/// Each chunk end costs the writer a new segment and the walks a link: 56 rows ran 4-8%
/// faster than 40 (em/full in one process 0.90-0.94 against 0.87; session 17) for ~+150 kB
/// of peak RSS; 64-80 rows gained no more and cost up to +400 kB. With 2^16 buckets
/// ((144,5)'s wide plan) 40 rows would leave about 64 MiB in partly filled chunks, 13 rows
/// of 19 bytes about 16 MiB (at 2% more chunk ends and links).
const CHUNK_ROWS: usize = 56;
const CHUNK_ROWS_MANY_BUCKETS: usize = 13;
/// Trees go to the file in writes of whole aligned blocks of this size (the buffer holds a
/// block and the trees of a bucket or two). The page cache then keeps the file in folios of
/// that size where the file system has large folios (ext4 on this machine's Linux 6.18),
/// one per write, whose bookkeeping costs far less than sixteen 4 KiB pages'. Writes cut
/// wherever the buffer filled left the file in small folios, and a quarter of `em`'s kernel
/// time went to `mark_buffer_dirty` and page lookups (session 12: 2.8% of its samples in
/// the write path, from 4.1%).
const FLUSH: usize = 64 << 10;
/// The tree buffer: a block and room for the trees of the largest buckets.
const TREE_BUF: usize = FLUSH + (32 << 10);

/// Where the trees go.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Store<'a> {
    /// A temporary file in this directory (the system's temp dir for `None`): the `em` mode.
    File(Option<&'a Path>),
    /// A buffer in memory, laid out as the file: the `full` mode.
    Memory,
}

/// The trees of a solve, as [`Store`] says.
enum Trees {
    File {
        file: SpillFile,
        dir: Option<PathBuf>,
    },
    /// Sized for the most trees the pool's rows can have (untouched pages cost nothing;
    /// transparent huge pages: far fewer faults than 4 KiB pages).
    Memory(LargeBuffer),
}

impl Trees {
    fn new(store: Store, bytes: usize) -> io::Result<Self> {
        Ok(match store {
            Store::File(dir) => Trees::File {
                file: SpillFile::create(dir)?,
                dir: dir.map(Path::to_path_buf),
            },
            Store::Memory => Trees::Memory(
                LargeBuffer::new(bytes.max(1), PagePolicy::Transparent)
                    .map_err(|e| io::Error::other(e.to_string()))?,
            ),
        })
    }

    /// Whether these trees are kept as `store` says (in memory: in room for `bytes`).
    fn fits(&self, store: Store, bytes: usize) -> bool {
        match (self, store) {
            (Trees::File { dir, .. }, Store::File(want)) => dir.as_deref() == want,
            (Trees::Memory(buf), Store::Memory) => buf.len() >= bytes,
            _ => false,
        }
    }

    /// Writers for the parts `cuts[t]..cuts[t + 1]` of the bytes from `start` on.
    fn sinks(&mut self, start: u64, cuts: &[u64]) -> io::Result<Vec<Sink<'_>>> {
        Ok(match self {
            Trees::File { file, .. } => {
                let file = &*file;
                cuts[..cuts.len() - 1]
                    .iter()
                    .map(|&c| Sink::File {
                        file,
                        at: start + c,
                    })
                    .collect()
            }
            Trees::Memory(buf) => {
                let end = (start + cuts[cuts.len() - 1]) as usize;
                let all = buf.as_mut_slice();
                if all.len() < end {
                    // Not expected: the buffer holds the trees of every row the pool can hold.
                    return Err(io::Error::other("trees past their buffer"));
                }
                let mut rest = &mut all[start as usize..end];
                let mut out = Vec::with_capacity(cuts.len() - 1);
                for w in cuts.windows(2) {
                    let (part, tail) = rest.split_at_mut((w[1] - w[0]) as usize);
                    out.push(Sink::Mem { mem: part, at: 0 });
                    rest = tail;
                }
                out
            }
        })
    }

    fn source(&self) -> Source<'_> {
        match self {
            Trees::File { file, .. } => Source::File(file),
            Trees::Memory(buf) => Source::Mem(buf.as_slice()),
        }
    }
}

/// Memory (and file) kept between solves.
pub(crate) struct EmSpace {
    pool: LargeBuffer,
    trees: Trees,
    /// Chunks of the pool the last solve's first pass touched (its extent, to a batch of
    /// fresh chunks per thread).
    chunks: u32,
}

/// Row geometry of each layer.
struct Geo {
    /// Hash bytes.
    hb: Vec<usize>,
    /// Tree bytes in a row: layer 0 keeps the low `8 * tb[0]` bits of the string index
    /// (2 bytes for (200,9), 3 for (144,5)); a bucket's indices increase, and the full index
    /// is the previous row's plus the difference of the low bits, from the bucket's first
    /// index (kept in `Scratch::base`; a gap of 2^(8 tb) or more between two rows of a
    /// bucket, about e^-64 per row, sends the solve to the general solver). That makes
    /// (200,9)'s layer-0 rows 26 bytes instead of 27.
    tb: Vec<usize>,
    /// Tree bytes in the file (layer 0: the full index).
    ftb: Vec<usize>,
    /// Row bytes (`hb + tb`, at least the `4 * hw` bytes that row words are written as).
    stride: Vec<usize>,
    /// Rows per chunk.
    rpc: Vec<usize>,
    /// Bytes per chunk: rows, then the 4-byte link.
    chunk: usize,
    /// Valid bits of the last hash word (the bytes after a row's hash hold its tree).
    mask: Vec<u32>,
    /// Bits of a tree's pair code (below the bucket bits): `32 - B` where the plan's pair
    /// codes fit 32 bits (trees of 4 bytes), more for [`Plan::wide`] plans.
    pair_bits: u32,
}

impl Geo {
    fn new(plan: &Plan, index_bits: u32) -> Self {
        let ids = plan.ids().max(2) as u64;
        // The largest pair code, of slot ids (ids - 2, ids - 1).
        let top = (ids - 1) * (ids - 2) / 2 + ids - 2;
        let pair_bits = (64 - top.leading_zeros()).max(32u32.saturating_sub(plan.bb));
        let tree_bytes = (plan.bb + pair_bits).div_ceil(8) as usize;
        let mut g = Geo {
            hb: vec![],
            tb: vec![],
            ftb: vec![],
            stride: vec![],
            rpc: vec![],
            mask: vec![],
            pair_bits,
            chunk: 0,
        };
        for r in 0..plan.k {
            let bits = (plan.n - r * plan.c - plan.bb) as usize;
            let hw = plan.hw[r as usize];
            let hb = bits.div_ceil(8);
            let ftb = if r == 0 {
                (index_bits as usize).div_ceil(8)
            } else {
                tree_bytes
            };
            // Above layer 0, `tb == ftb` (at least 4 > 4 * hw - hb).
            // A bucket's indices are about 2^B apart: 6 more bits make a gap past them about
            // e^-64 per row.
            let low = (plan.bb as usize + 6).div_ceil(8);
            let tb = if r == 0 { ftb.min(low) } else { ftb }.max(4 * hw - hb);
            g.hb.push(hb);
            g.tb.push(tb);
            g.ftb.push(ftb);
            g.stride.push(hb + tb);
            g.mask.push(if bits.is_multiple_of(32) {
                u32::MAX
            } else {
                u32::MAX << (32 - bits % 32)
            });
        }
        let rows = if plan.nb() > 4096 {
            CHUNK_ROWS_MANY_BUCKETS
        } else {
            CHUNK_ROWS
        };
        g.chunk = 4 + rows * g.stride.iter().max().expect("k >= 1");
        // Writes of a row's last word or tree may run 4 bytes past it.
        g.rpc = g.stride.iter().map(|s| (g.chunk - 4) / s).collect();
        g
    }
}

/// No chunk.
const NO_CHUNK: u32 = u32::MAX;

#[inline(always)]
fn read_u32(mem: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(mem[at..at + 4].try_into().expect("4 bytes"))
}

#[inline(always)]
fn write_u32(mem: &mut [u8], at: usize, v: u32) {
    mem[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes a tree of `tb` bytes at `at`: 4 bytes when `tb <= 4`, else 8 (the bytes past `tb`
/// land in the next row's space, not yet written, or the chunk's link, written later: at
/// most 4 bytes past the row, as `Geo` allows, since `tb >= 4`).
#[inline(always)]
fn write_tree(mem: &mut [u8], at: usize, tree: u64, tb: usize) {
    if tb <= 4 {
        write_u32(mem, at, tree as u32);
    } else {
        mem[at..at + 8].copy_from_slice(&tree.to_le_bytes());
    }
}

/// Reads a tree of `tb` bytes at `at` (the inverse of [`write_tree`]; callers mask).
#[inline(always)]
fn read_tree(mem: &[u8], at: usize, tb: usize) -> u64 {
    if tb <= 4 {
        read_u32(mem, at) as u64
    } else {
        u64::from_le_bytes(mem[at..at + 8].try_into().expect("8 bytes"))
    }
}

/// The low `8 * bytes` bits.
fn byte_mask(bytes: usize) -> u64 {
    if bytes >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * bytes)) - 1
    }
}

/// One thread's chunk allocator: a LIFO free list over fresh chunks, taken from a bump
/// counter shared by the threads `BUMP_BATCH` at a time (a fresh chunk every few rows of
/// layer 0 would bounce the counter's cache line between the threads). The list is kept in
/// the free chunks themselves (the next free chunk in a chunk's first 4 bytes), so that it
/// costs no memory beyond the pool.
struct Alloc<'b> {
    free: u32,
    /// This thread's fresh chunks `fresh.0..fresh.1`.
    fresh: (u32, u32),
    bump: &'b AtomicU32,
    cap: u32,
    /// Bytes per chunk.
    chunk: usize,
    /// Chunks freed during a step that another thread may still read: returned to the free
    /// list once the step is over ([`Layer::free`]).
    deferred: Vec<u32>,
}

/// Fresh chunks a thread takes at once: at most this many per thread are left untouched
/// when the pool runs out (the pool has a margin of many times that).
const BUMP_BATCH: u32 = 32;

impl Alloc<'_> {
    #[inline]
    fn take(&mut self, mem: &PoolRef) -> Option<u32> {
        if self.free != NO_CHUNK {
            let c = self.free;
            self.free = read_u32(mem.bytes(c as usize * self.chunk, 4), 0);
            return Some(c);
        }
        if self.fresh.0 == self.fresh.1 {
            // Each id once (the counter only grows), so fresh chunks are this thread's.
            let c = self.bump.fetch_add(BUMP_BATCH, Ordering::Relaxed);
            if c >= self.cap {
                return None;
            }
            self.fresh = (c, c.saturating_add(BUMP_BATCH).min(self.cap));
        }
        self.fresh.0 += 1;
        Some(self.fresh.0 - 1)
    }

    #[inline]
    fn give(&mut self, mem: &mut PoolRef, c: u32) {
        write_u32(mem.bytes_mut(c as usize * self.chunk, 4), 0, self.free);
        self.free = c;
    }
}

/// One thread's lists of a layer's buckets (the bucket's rows are the lists of the threads
/// in thread order). A list's rows lie in three kinds of segment, in slot order:
///
/// * its **head**: the first rows, in a chunk shared with the list of the neighbouring
///   bucket (buckets `2p` and `2p + 1` split a chunk at a row that varies with `p`, see
///   [`head_of`]);
/// * full **regular** chunks, linked through their last 4 bytes (written when the next
///   chunk is taken, after the chunk's last row);
/// * once the layer is complete, its **tail**: the rows of its last, partly filled chunk,
///   moved by [`compact`] into a pack of chunks shared by the tails of consecutive buckets.
///
/// Why: every list holds a partly filled chunk while it grows, half a chunk on average if
/// the lists are at different points of their chunks, but lists that start together fill
/// their chunks together, so at the start of a step all (200,9)'s 1,024 output lists held an
/// empty chunk at once (+900 chunks over the layer's rows, 0.9 MiB, the peak of `em`'s
/// pool), beside the input's 1,024 partly filled last chunks. Heads of different sizes put
/// the lists at different points from the start, and packed tails leave a complete layer
/// without empty space. The lists cost no memory beyond the pool apart from these vectors
/// (per-bucket vectors of chunk ids were ~0.6 MB of heap).
struct Layer {
    /// Byte offset of each list's head segment (`NO_AT`: no row yet); its room is
    /// [`Layer::head_rows`].
    hstart: Vec<u32>,
    /// First regular chunk and number of regular chunks of each list.
    first: Vec<u32>,
    nchunks: Vec<u32>,
    /// The chunk holding the heads of each pair of lists ([`head_of`]), `NO_CHUNK` until the
    /// first of them has a row.
    pair: Vec<u32>,
    /// Rows per bucket, set by [`Layer::count`] once the layer is complete.
    counts: Vec<u32>,
    /// Byte offset of the next row of each bucket, and the end of its current segment
    /// (equal when a new segment is needed).
    at: Vec<u32>,
    end: Vec<u32>,
    /// Byte offset of each list's tail in the pack (`NO_AT`: none), and whether the tail's
    /// last pack chunk goes free with it (else the next tail in the pack frees it).
    tail: Vec<u32>,
    tail_closes: Vec<bool>,
    /// Layer 0: the first string index of each list.
    base: Vec<u32>,
}

/// No row (a list without a head yet, or without a tail).
const NO_AT: u32 = u32::MAX;

/// Where the head of bucket `b`'s list goes: `(pair, first row, rows)`. Buckets `2p` and
/// `2p + 1` share chunk `pair[p]`: rows `0..x_p` and `x_p + 1..rpc`, with `x_p` spread over
/// `1..rpc - 1` by a hash of `p` so that the lists reach the ends of their chunks at
/// different times. Row `x_p` stays empty: the writes of a row may run 4 bytes past it
/// (`Geo`), which must not reach the other list's rows. A bucket without a partner (the
/// last of an odd number), or chunks of under three rows, take a chunk alone.
#[inline]
fn head_of(b: usize, nb: usize, rpc: usize) -> (usize, usize, usize) {
    if rpc < 3 {
        return (b, 0, rpc);
    }
    let p = b / 2;
    if b == nb - 1 && b.is_multiple_of(2) {
        return (p, 0, rpc);
    }
    let x = 1 + (p as u32).wrapping_mul(0x9e37_79b9).rotate_right(16) as usize % (rpc - 2);
    if b.is_multiple_of(2) {
        (p, 0, x)
    } else {
        (p, x + 1, rpc - x - 1)
    }
}

/// The bucket whose consumption frees the chunk of `b`'s head, and the first bucket of the
/// pair (see [`head_of`]).
#[inline]
fn pair_span(b: usize, nb: usize, rpc: usize) -> (usize, usize) {
    // A head alone has the whole chunk; a shared one never does.
    if head_of(b, nb, rpc).2 == rpc {
        (b, b)
    } else {
        (b | 1, b & !1)
    }
}

impl Layer {
    /// Rows of bucket `b`'s head ([`head_of`]).
    #[inline]
    fn head_rows(&self, b: usize, rpc: usize) -> usize {
        head_of(b, self.hstart.len(), rpc).2
    }

    fn new(nb: usize) -> Self {
        Layer {
            hstart: vec![NO_AT; nb],
            first: vec![NO_CHUNK; nb],
            nchunks: vec![0; nb],
            pair: vec![NO_CHUNK; nb],
            counts: vec![0; nb],
            at: vec![0; nb],
            end: vec![0; nb],
            tail: vec![NO_AT; nb],
            tail_closes: vec![false; nb],
            base: vec![0; nb],
        }
    }

    /// Empties every bucket (its chunks must have been freed).
    fn clear(&mut self) {
        self.hstart.fill(NO_AT);
        self.first.fill(NO_CHUNK);
        self.nchunks.fill(0);
        self.pair.fill(NO_CHUNK);
        self.at.fill(0);
        self.end.fill(0);
        self.tail.fill(NO_AT);
        self.tail_closes.fill(false);
    }

    /// Sets the row counts from the segments once the lists are written.
    fn count(&mut self, stride: usize, rpc: usize, chunk: usize) {
        for b in 0..self.hstart.len() {
            let at = self.at[b] as usize;
            let n = if self.hstart[b] == NO_AT {
                0
            } else if self.nchunks[b] == 0 {
                (at - self.hstart[b] as usize) / stride
            } else {
                // The last chunk holds at least one row, so `at - 1` lies inside it.
                let last = (at - 1) / chunk;
                self.head_rows(b, rpc)
                    + (self.nchunks[b] as usize - 1) * rpc
                    + (at - last * chunk) / stride
            };
            self.counts[b] = n as u32;
        }
    }

    /// The byte offset of a new row of bucket `b`; `None` when the pool is exhausted.
    #[inline(always)]
    fn place(
        &mut self,
        alloc: &mut Alloc,
        mem: &mut PoolRef,
        b: usize,
        stride: usize,
        rpc: usize,
    ) -> Option<usize> {
        let at = self.at[b];
        if at == self.end[b] {
            return self.open(alloc, mem, b, stride, rpc);
        }
        self.at[b] = at + stride as u32;
        Some(at as usize)
    }

    /// [`Layer::place`] at the end of a segment: the head, else a new regular chunk.
    #[inline(never)]
    fn open(
        &mut self,
        alloc: &mut Alloc,
        mem: &mut PoolRef,
        b: usize,
        stride: usize,
        rpc: usize,
    ) -> Option<usize> {
        let cb = alloc.chunk;
        // The new segment's first byte and rows.
        let (at, rows) = if self.hstart[b] == NO_AT {
            let (p, row0, cap) = head_of(b, self.hstart.len(), rpc);
            if self.pair[p] == NO_CHUNK {
                self.pair[p] = alloc.take(mem)?;
            }
            let at = (self.pair[p] as usize * cb + row0 * stride) as u32;
            self.hstart[b] = at;
            (at, cap)
        } else {
            let c = alloc.take(mem)?;
            if self.nchunks[b] == 0 {
                self.first[b] = c;
            } else {
                let last = (self.at[b] as usize - 1) / cb;
                write_u32(mem.bytes_mut(last * cb + cb - 4, 4), 0, c);
            }
            self.nchunks[b] += 1;
            (c * cb as u32, rpc)
        };
        self.end[b] = at + (rows * stride) as u32;
        self.at[b] = at + stride as u32;
        Some(at as usize)
    }

    /// Returns the chunks of bucket `b` to `alloc`'s free list once its rows are copied out
    /// (the lists stay as they are until [`Layer::clear`]: they are not read again): its
    /// regular chunks, the pack chunks its tail closes, and the chunk of its pair's heads if
    /// `b` is the pair's last bucket. That chunk goes to `alloc.deferred` instead when the
    /// pair's first bucket is another thread's (before `from`, the first bucket of this
    /// thread's range): that thread may still read it.
    #[allow(clippy::too_many_arguments)]
    fn free(
        &self,
        alloc: &mut Alloc,
        mem: &mut PoolRef,
        b: usize,
        stride: usize,
        rpc: usize,
        from: usize,
    ) {
        let cb = alloc.chunk;
        let mut c = self.first[b];
        for i in 0..self.nchunks[b] {
            let next = if i + 1 < self.nchunks[b] {
                read_u32(mem.bytes(c as usize * cb + cb - 4, 4), 0)
            } else {
                NO_CHUNK
            };
            alloc.give(mem, c);
            c = next;
        }
        if self.tail[b] != NO_AT {
            let n =
                self.counts[b] as usize - self.head_rows(b, rpc) - self.nchunks[b] as usize * rpc;
            let mut c = self.tail[b] as usize / cb;
            // Rows of the tail past the start of its first pack chunk.
            let mut rows = n + (self.tail[b] as usize - c * cb) / stride;
            loop {
                let more = rows > rpc;
                let next = if more {
                    read_u32(mem.bytes(c * cb + cb - 4, 4), 0) as usize
                } else {
                    usize::MAX
                };
                if more || self.tail_closes[b] {
                    alloc.give(mem, c as u32);
                }
                if !more {
                    break;
                }
                rows -= rpc;
                c = next;
            }
        }
        let nb = self.hstart.len();
        let (last, first) = pair_span(b, nb, rpc);
        let p = head_of(b, nb, rpc).0;
        if b == last && self.pair[p] != NO_CHUNK {
            if first >= from {
                alloc.give(mem, self.pair[p]);
            } else {
                alloc.deferred.push(self.pair[p]);
            }
        }
    }
}
/// Rows of each bucket in all the threads' lists; false when one holds more rows than the
/// `ids` slot ids that pair codes (and chain tables) can name.
fn bucket_rows(lists: &[Layer], ids: usize) -> (Vec<u32>, bool) {
    let mut rows = lists[0].counts.clone();
    for l in &lists[1..] {
        for (r, &c) in rows.iter_mut().zip(&l.counts) {
            *r += c;
        }
    }
    let ok = rows.iter().all(|&r| r as usize <= ids);
    (rows, ok)
}

/// Prefix sums (`len + 1` entries).
fn prefix(counts: &[u32]) -> Vec<u64> {
    let mut acc = 0u64;
    let mut v = Vec::with_capacity(counts.len() + 1);
    v.push(0);
    for &x in counts {
        acc += x as u64;
        v.push(acc);
    }
    v
}

/// Bucket ranges of about equal rows for `threads` threads, from the rows' prefix sums.
fn split_buckets(prefix: &[u64], threads: usize) -> Vec<Range<usize>> {
    let nb = prefix.len() - 1;
    let total = prefix[nb];
    let mut cuts = vec![0usize];
    for t in 1..threads {
        let want = total * t as u64 / threads as u64;
        let b = prefix.partition_point(|&p| p < want).min(nb);
        cuts.push(b.max(*cuts.last().expect("one cut")));
    }
    cuts.push(nb);
    cuts.windows(2).map(|w| w[0]..w[1]).collect()
}

/// One thread's writer of its part of a layer's trees.
enum Sink<'a> {
    File {
        file: &'a SpillFile,
        at: u64,
    },
    Mem {
        mem: &'a mut [u8],
        at: usize,
    },
    /// Trees not kept (`pr`'s layers below its height, re-runs' other layers).
    Discard,
    /// A re-run's layer: the trees at positions `wanted` (sorted; `pos` is the position of
    /// the next tree written) go to `picked`.
    Pick {
        wanted: &'a [u64],
        pos: u64,
        ftb: usize,
        picked: Vec<u64>,
    },
}

/// Where the trees are read back from.
enum Source<'a> {
    File(&'a SpillFile),
    Mem(&'a [u8]),
}

impl Source<'_> {
    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        match self {
            Source::File(f) => f.read_at(buf, at),
            Source::Mem(m) => {
                let at = at as usize;
                let src = m.get(at..at + buf.len()).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidData, "tree past the stored trees")
                })?;
                buf.copy_from_slice(src);
                Ok(())
            }
        }
    }
}

/// Trees on their way to a [`Sink`].
struct TreeOut<'f> {
    sink: Sink<'f>,
    buf: &'f mut Vec<u8>,
    len: usize,
}

impl TreeOut<'_> {
    /// Makes room for `bytes` more.
    fn reserve(&mut self, bytes: usize) -> io::Result<()> {
        if self.len + bytes + 8 > self.buf.len() {
            self.flush_blocks()?;
            if self.len + bytes + 8 > self.buf.len() {
                self.buf.resize(self.len + bytes + 8, 0);
            }
        }
        Ok(())
    }

    /// Writes the buffered trees up to the last [`FLUSH`] boundary of the file they pass
    /// (all of them for the other sinks), keeping the rest for the next write.
    fn flush_blocks(&mut self) -> io::Result<()> {
        let Sink::File { at, .. } = self.sink else {
            return self.flush();
        };
        let cut = ((at + self.len as u64) & !(FLUSH as u64 - 1)).saturating_sub(at) as usize;
        if cut == 0 {
            return Ok(());
        }
        let rest = self.len - cut;
        self.len = cut;
        self.flush()?;
        self.buf.copy_within(cut..cut + rest, 0);
        self.len = rest;
        Ok(())
    }

    /// The free part of the buffer, to be filled from its start and passed to
    /// [`TreeOut::advance`] (a hot loop then keeps its position in a register).
    #[inline(always)]
    fn room(&mut self) -> &mut [u8] {
        &mut self.buf[self.len..]
    }

    /// Takes `bytes` bytes written to [`TreeOut::room`] (room reserved).
    #[inline(always)]
    fn advance(&mut self, bytes: usize) {
        self.len += bytes;
    }

    fn flush(&mut self) -> io::Result<()> {
        let bytes = &self.buf[..self.len];
        match &mut self.sink {
            Sink::File { file, at } => {
                file.write_at(bytes, *at)?;
                *at += bytes.len() as u64;
            }
            Sink::Mem { mem, at } => {
                // The part was sized from the layer's row counts: the rows written fill it.
                mem[*at..*at + bytes.len()].copy_from_slice(bytes);
                *at += bytes.len();
            }
            Sink::Discard => {}
            Sink::Pick {
                wanted,
                pos,
                ftb,
                picked,
            } => {
                let end = *pos + (bytes.len() / *ftb) as u64;
                while let Some((&w, rest)) = wanted.split_first() {
                    if w >= end {
                        break;
                    }
                    let at = (w - *pos) as usize * *ftb;
                    let mut v = [0u8; 8];
                    v[..*ftb].copy_from_slice(&bytes[at..at + *ftb]);
                    picked.push(u64::from_le_bytes(v));
                    *wanted = rest;
                }
                *pos = end;
            }
        }
        self.len = 0;
        Ok(())
    }

    /// Flushes; the picked trees for a [`Sink::Pick`] (else none).
    fn finish(mut self) -> io::Result<Vec<u64>> {
        self.flush()?;
        Ok(match self.sink {
            Sink::Pick { picked, .. } => picked,
            _ => Vec::new(),
        })
    }
}

/// What [`solve`] found, as [`crate::fast::Found`].
pub(crate) use crate::fast::Found;

/// The plan `em` runs with: [`crate::fast`]'s one-thread plan where its buckets hold 2^8 or
/// more rows on average ((200,9), (96,5), (48,5)), else a [`Plan::wide`] one. For (144,5) and
/// (192,7) (2^25 strings, 24-bit digits) a 32-bit pair code needs 2^21 buckets of 16 rows,
/// and every bucket holds a partly filled chunk (2 GB); the wide plan has about 2^9 rows per
/// bucket (B = c + 1 - 9: rest bits 8, as the general solver's chains) and 2,048 slot ids
/// (four times a bucket's mean rows, about 20 standard deviations), with trees of more than
/// 4 bytes: for (144,5) B = 16, pair codes of 21 bits and trees of 5 bytes, rows of 19 bytes
/// at layer 0 (128 hash bits and 24 low index bits: a bucket's indices are about 2^16
/// apart) and 18 at layer 1 (104 hash bits and the tree), so layer 0 is 608 MiB. Other
/// bucket bits would not shorten layer 0's rows (B fewer hash bits, B more gap bits), and
/// more would add partly filled chunks (one per bucket).
pub(crate) fn plan(p: crate::Params) -> Option<Plan> {
    let c = p.collision_bits();
    match Plan::new(p, 1) {
        Some(fast) if useful(&fast, c) => Some(fast),
        _ => Plan::wide(p, (c + 1).saturating_sub(9), 2048),
    }
}

/// Whether [`crate::fast`]'s plan for `p` has buckets of useful size (2^8 or more rows on
/// average): where it has not ((144,5), (192,7)), `full` runs this solver with its trees in
/// memory.
pub(crate) fn fast_is_useful(p: crate::Params) -> bool {
    Plan::new(p, 1).is_some_and(|f| useful(&f, p.collision_bits()))
}

fn useful(fast: &Plan, c: u32) -> bool {
    fast.bb + 8 <= c + 1
}

/// Solves with `plan` on `threads` threads, the trees kept as `store` says except those of
/// layers below `height` (`pr`: rebuilt for the candidates by re-running the layers below
/// them), the pool (and file) kept in `keep` for the next solve. `Ok(None)`: a bucket
/// outgrew its slot ids (the caller runs the general solver).
pub(crate) fn solve(
    gen: &HashGen,
    plan: &Plan,
    store: Store,
    threads: usize,
    height: usize,
    keep: &mut Option<EmSpace>,
) -> io::Result<Option<Found>> {
    let p = gen.params();
    if plan.c >= 32 {
        // Digits must fit a word (the merge's shifts); no plan with useful buckets has more.
        return Ok(None);
    }
    let threads = threads.clamp(1, 64);
    let geo = Geo::new(plan, p.index_bits());
    let rows = p.num_indices() as usize;
    // Rows alive at once: one layer and the part of the next made so far; the top layers of
    // (200,9) grow by up to ~20%, and a chunk loses less than one row. Each thread's lists
    // of the two live layers hold a partly filled chunk per bucket, and each thread may hold
    // up to a batch of fresh chunks it has not used.
    let min_rpc = *geo.rpc.iter().min().expect("k >= 2");
    let cap = (rows as f64 * 2.6 / min_rpc as f64) as usize
        + (2 * threads + 2) * plan.nb()
        + threads * BUMP_BATCH as usize
        + 16;
    // Reads of row words may look up to 4 bytes past a chunk.
    let bytes = cap * geo.chunk + 64;
    if bytes > u32::MAX as usize {
        // Row offsets are u32; no plan comes near this (pair codes limit a layer's rows).
        return Ok(None);
    }
    // In memory: room for the trees of every row the pool can hold, in each layer (a layer's
    // rows are all in the pool at once), and no more than the slot ids can name.
    let tree_bytes: usize = (0..plan.k as usize)
        .map(|r| (cap * geo.rpc[r]).min(plan.nb() * plan.ids()) * geo.ftb[r])
        .sum();
    let mut space = match keep.take() {
        Some(s) if s.pool.len() >= bytes && s.trees.fits(store, tree_bytes) => s,
        _ => {
            // Drop the old file (or buffer) before making a new one.
            *keep = None;
            let mut pool = LargeBuffer::new(bytes, PagePolicy::Transparent)
                .map_err(|e| io::Error::other(e.to_string()))?;
            // Layer 0's rows fill the pool's first huge pages; past them the extent used
            // depends on the nonce, and a huge page there would be resident whole: (200,9)
            // touched 53.65 MiB of 27 huge pages (54 MiB), and the 0.35 MiB unused was most
            // of `em`'s margin under its 60 MiB bound. 4 KiB pages past layer 0's rows.
            pool.small_pages_from(rows.div_ceil(geo.rpc[0]) * geo.chunk);
            EmSpace {
                pool,
                trees: Trees::new(store, tree_bytes)?,
                chunks: 0,
            }
        }
    };
    let out = run(gen, plan, &geo, &mut space, cap as u32, threads, height);
    *keep = Some(space);
    out
}

/// Runs `work(t, item)` for every item, item `t` on thread `t` (0 on this one).
fn on_threads<T: Send, R: Send>(items: Vec<T>, work: impl Fn(usize, T) -> R + Sync) -> Vec<R> {
    if items.len() == 1 {
        return items.into_iter().map(|x| work(0, x)).collect();
    }
    std::thread::scope(|s| {
        let work = &work;
        let mut items = items.into_iter().enumerate();
        let first = items.next().expect("one item");
        let handles: Vec<_> = items.map(|(t, x)| s.spawn(move || work(t, x))).collect();
        let mut out = vec![work(first.0, first.1)];
        out.extend(
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))),
        );
        out
    })
}

/// Layer `r`'s trees: its start in the store, each thread's buckets, and the thread's part
/// of the layer's bytes.
fn tree_parts(prefix: &[u64], ftb: usize, threads: usize) -> (Vec<Range<usize>>, Vec<u64>) {
    let ranges = split_buckets(prefix, threads);
    let mut cuts: Vec<u64> = ranges
        .iter()
        .map(|r| prefix[r.start] * ftb as u64)
        .collect();
    cuts.push(prefix[prefix.len() - 1] * ftb as u64);
    (ranges, cuts)
}

/// What one pass over the layers does with the trees.
#[derive(Clone, Copy)]
enum Pass<'w> {
    /// The solve: every layer's trees go to the store, except those of layers below
    /// `height` (`pr`), which are dropped.
    Solve { height: usize },
    /// A re-run of layers `0..=layer` for `pr`'s trace-back: only the trees of `layer` at
    /// the positions `wanted` (sorted, distinct) are kept.
    Pick { layer: usize, wanted: &'w [u64] },
}

/// What a pass found.
struct PassOut {
    /// Rows per layer.
    rows: Vec<usize>,
    /// Where each layer's trees start in the store (layers whose trees are kept).
    starts: Vec<u64>,
    /// Each layer's rows in buckets before `b`.
    prefixes: Vec<Vec<u64>>,
    cands: Vec<Candidate>,
    /// `Pass::Pick`: the trees at the wanted positions, in their order.
    picked: Vec<u64>,
    /// Chunks taken from the bump counter: the pool's extent.
    chunks: u32,
}

fn run(
    gen: &HashGen,
    plan: &Plan,
    geo: &Geo,
    space: &mut EmSpace,
    cap: u32,
    threads: usize,
    height: usize,
) -> io::Result<Option<Found>> {
    let EmSpace {
        pool,
        trees,
        chunks,
    } = space;
    let pass = Pass::Solve { height };
    let Some(out) = layers(gen, plan, geo, pool, Some(trees), cap, threads, pass)? else {
        return Ok(None);
    };
    *chunks = out.chunks;
    let book = Book {
        plan,
        geo,
        trees: trees.source(),
        height,
        starts: out.starts,
        prefix: out.prefixes,
    };
    // Layers below `height` kept no trees: re-run the layers up to each, picking the trees
    // the candidates need (the CIP post-retrieval trade-off).
    let mut recomputed_steps = 0;
    let mut rerun = |layer: usize, wanted: &[u64]| -> io::Result<Vec<u64>> {
        recomputed_steps += layer + 1;
        let pass = Pass::Pick { layer, wanted };
        match layers(gen, plan, geo, pool, None, cap, threads, pass)? {
            Some(o) if o.picked.len() == wanted.len() => Ok(o.picked),
            // The solve is deterministic: a re-run that differs is a bug, not bad input.
            _ => Err(io::Error::other("a re-run layer differs from the solve")),
        }
    };
    let (cands, repeated) = trace_back(&book, &out.cands, &mut rerun)?;
    Ok(Some(Found {
        cands,
        rows: out.rows,
        repeated,
        recomputed_steps,
    }))
}

/// One pass over the layers (see [`Pass`]); `trees` is the store for `Pass::Solve`.
/// `Ok(None)`: a bucket outgrew its slot ids or the pool ran out.
#[allow(clippy::too_many_arguments)]
fn layers(
    gen: &HashGen,
    plan: &Plan,
    geo: &Geo,
    pool: &mut LargeBuffer,
    mut trees: Option<&mut Trees>,
    cap: u32,
    threads: usize,
    pass: Pass,
) -> io::Result<Option<PassOut>> {
    let nb = plan.nb();
    let k = plan.k as usize;
    let mut pool = Pool::new(pool.as_mut_slice());
    let mut views = pool.views(threads);
    let bump = AtomicU32::new(0);
    let mut allocs: Vec<Alloc> = (0..threads)
        .map(|_| Alloc {
            free: NO_CHUNK,
            fresh: (0, 0),
            bump: &bump,
            cap,
            chunk: geo.chunk,
            deferred: Vec::new(),
        })
        .collect();
    let mut cur: Vec<Layer> = (0..threads).map(|_| Layer::new(nb)).collect();
    let mut next: Vec<Layer> = (0..threads).map(|_| Layer::new(nb)).collect();
    let mut scratch: Vec<Scratch> = (0..threads).map(|_| Scratch::new(plan)).collect();
    let blocks = gen.num_blocks() as usize;
    let jobs = views.iter_mut().zip(&mut allocs).zip(&mut cur);
    let ok = on_threads(jobs.collect(), |t, ((view, alloc), lay)| {
        let part = t * blocks / threads..(t + 1) * blocks / threads;
        layer0(gen, plan, geo, part, view, alloc, lay)
    });
    if ok.contains(&false) {
        return Ok(None);
    }
    let mut out = PassOut {
        rows: Vec::with_capacity(k),
        starts: Vec::with_capacity(k),
        prefixes: Vec::with_capacity(k),
        cands: Vec::new(),
        picked: Vec::new(),
        chunks: 0,
    };
    let mut start = 0u64;
    let mut pack_buf = Vec::new();
    let last = match pass {
        Pass::Solve { .. } => k - 1,
        Pass::Pick { layer, .. } => layer,
    };
    for r in 0..=last {
        for l in &mut cur {
            l.count(geo.stride[r], geo.rpc[r], geo.chunk);
        }
        // Slot ids name rows in pair codes, except at the last layer: its pairs are the
        // candidates, which carry their rows' trees, so its buckets are limited only by the
        // chains' 16-bit ids. The last layer grows the most ((200,9): up to 2.8M rows in
        // 30 nonces, a bucket of 2,943 rows against 2,895 slot ids), and a bucket past the
        // limit sends the solve to the general solver and its memory.
        let ids = if r + 1 == k { NIL as usize } else { plan.ids() };
        let (counts, fits) = bucket_rows(&cur, ids);
        if !fits {
            return Ok(None);
        }
        let pre = prefix(&counts);
        out.rows.push(pre[nb] as usize);
        let (ranges, cuts) = tree_parts(&pre, geo.ftb[r], threads);
        let walking = Walking {
            stride: geo.stride[r],
            rpc: geo.rpc[r],
            chunk: geo.chunk,
        };
        if compact(
            &mut cur,
            &mut views,
            &mut allocs,
            &ranges,
            &walking,
            &mut pack_buf,
        )
        .is_none()
        {
            return Ok(None);
        }
        out.starts.push(start);
        let sinks: Vec<Sink> = match (pass, trees.as_deref_mut()) {
            (Pass::Solve { height }, Some(trees)) if r >= height && r + 1 < k => {
                let s = trees.sinks(start, &cuts)?;
                start += cuts[threads];
                s
            }
            (Pass::Pick { layer, wanted }, _) if r == layer => ranges
                .iter()
                .map(|b| {
                    let (lo, hi) = (pre[b.start], pre[b.end]);
                    let from = wanted.partition_point(|&p| p < lo);
                    let to = wanted.partition_point(|&p| p < hi);
                    Sink::Pick {
                        wanted: &wanted[from..to],
                        pos: lo,
                        ftb: geo.ftb[r],
                        picked: Vec::with_capacity(to - from),
                    }
                })
                .collect(),
            _ => (0..threads).map(|_| Sink::Discard).collect(),
        };
        out.prefixes.push(pre);
        let lists = &cur;
        if r + 1 < k {
            for l in &mut next {
                l.clear();
            }
            let jobs = views
                .iter_mut()
                .zip(&mut allocs)
                .zip(&mut next)
                .zip(&mut scratch)
                .zip(sinks)
                .zip(ranges);
            let done = on_threads(
                jobs.collect(),
                |_, (((((view, alloc), next), s), sink), buckets)| {
                    let mut trees = TreeOut {
                        sink,
                        buf: &mut s.tree_buf,
                        len: 0,
                    };
                    let ok = step(
                        plan,
                        geo,
                        r,
                        view,
                        alloc,
                        lists,
                        next,
                        &mut trees,
                        &mut s.work,
                        buckets,
                    )?;
                    Ok::<_, io::Error>((ok, trees.finish()?))
                },
            );
            for d in done {
                let (ok, picked) = d?;
                if !ok {
                    return Ok(None);
                }
                out.picked.extend(picked);
            }
            // Heads shared with another thread's bucket, now read by both.
            for (alloc, view) in allocs.iter_mut().zip(&mut views) {
                for c in std::mem::take(&mut alloc.deferred) {
                    alloc.give(view, c);
                }
            }
        } else {
            // The last layer's trees are not stored: the final step reads those of its
            // candidates from their rows.
            drop(sinks);
            let jobs = views.iter_mut().zip(&mut scratch).zip(ranges);
            let found = on_threads(jobs.collect(), |_, ((view, s), buckets)| {
                final_step(plan, geo, view, lists, &mut s.work, buckets)
            });
            for c in found {
                out.cands.extend(c);
            }
        }
        if r + 1 < k {
            std::mem::swap(&mut cur, &mut next);
        }
    }
    out.chunks = bump.load(Ordering::Relaxed).min(cap);
    Ok(Some(out))
}

/// One thread's scratch: its step tables and its tree buffer.
struct Scratch {
    work: Work,
    tree_buf: Vec<u8>,
}

impl Scratch {
    /// The tables take their largest size at once (untouched pages cost nothing): tables
    /// grown bucket by bucket left holes in the heap that added up to ~0.3 MB of peak RSS
    /// over ten (200,9) solves, against `em`'s 60 MB bound.
    fn new(plan: &Plan) -> Self {
        let ids = plan.ids();
        let widest = plan.hw.iter().copied().max().unwrap_or(1);
        Scratch {
            work: Work {
                chains: Chains::new(),
                pairs: vec![0u32; 3 * ids + 3],
                seen: Vec::new(),
                items: Vec::with_capacity(2 * ids),
                rows: vec![0u32; ids * widest],
            },
            tree_buf: vec![0u8; TREE_BUF],
        }
    }
}

/// Per-step scratch tables.
struct Work {
    chains: Chains,
    pairs: Vec<u32>,
    seen: Vec<u8>,
    items: Vec<u32>,
    /// The rows of the bucket being merged, `hw` words each.
    rows: Vec<u32>,
}

/// Layer 0: the strings of hash blocks `blocks`, bucketed by their first B bits into `lay`;
/// the tree is the index.
fn layer0(
    gen: &HashGen,
    plan: &Plan,
    geo: &Geo,
    blocks: Range<usize>,
    mem: &mut PoolRef,
    alloc: &mut Alloc,
    lay: &mut Layer,
) -> bool {
    match (plan.bb, plan.hw[0]) {
        (10, 6) => fill_layer0::<10, 6, true>(gen, plan, geo, blocks, mem, alloc, lay),
        _ => fill_layer0::<0, 0, false>(gen, plan, geo, blocks, mem, alloc, lay),
    }
}

/// One thread's layer 0 (see [`layer0`]), for [`with_kernel`].
struct Layer0<'a, 'p, 'b, const BB: u32, const HW: usize, const SPEC: bool> {
    gen: &'a HashGen,
    plan: &'a Plan,
    geo: &'a Geo,
    blocks: Range<usize>,
    mem: &'a mut PoolRef<'p>,
    alloc: &'a mut Alloc<'b>,
    lay: &'a mut Layer,
}

impl<const BB: u32, const HW: usize, const SPEC: bool> KernelJob
    for Layer0<'_, '_, '_, BB, HW, SPEC>
{
    type Out = bool;

    #[inline(always)]
    fn run<K: RowKernel>(self, kern: K) -> bool {
        fill_layer0_with::<BB, HW, SPEC, K>(kern, self)
    }
}

fn fill_layer0<const BB: u32, const HW: usize, const SPEC: bool>(
    gen: &HashGen,
    plan: &Plan,
    geo: &Geo,
    blocks: Range<usize>,
    mem: &mut PoolRef,
    alloc: &mut Alloc,
    lay: &mut Layer,
) -> bool {
    let job = Layer0::<BB, HW, SPEC> {
        gen,
        plan,
        geo,
        blocks,
        mem,
        alloc,
        lay,
    };
    // The kernel splits strings at the bucket bits.
    let bb = if SPEC { BB } else { plan.bb };
    with_kernel(bb, plan.portable, job)
}

/// Layer 0 with the row kernel `kern` (for `SPEC`: the string split and the row store;
/// other parameters split strings word by word). Always inlined, so that the AVX-512
/// instance is compiled with its target features.
#[inline(always)]
fn fill_layer0_with<const BB: u32, const HW: usize, const SPEC: bool, K: RowKernel>(
    kern: K,
    job: Layer0<BB, HW, SPEC>,
) -> bool {
    let Layer0 {
        gen,
        plan,
        geo,
        blocks,
        mem,
        alloc,
        lay,
    } = job;
    let mut local = mem.reborrow();
    let mem = &mut local;
    let p = gen.params();
    let (bb, hw) = if SPEC {
        (BB, HW)
    } else {
        (plan.bb, plan.hw[0])
    };
    let (stride, rpc, hb, tb, mask) =
        (geo.stride[0], geo.rpc[0], geo.hb[0], geo.tb[0], geo.mask[0]);
    // The largest gap from a list's previous index that the low `8 * tb` bits of an index
    // can carry (a list's first index is kept whole in `base`).
    let reach = if 8 * tb >= 32 {
        u64::MAX
    } else {
        1u64 << (8 * tb)
    };
    let exact = 8 * tb as u32 >= p.index_bits();
    let mut last = vec![u64::MAX; plan.nb()];
    // Puts string `index` (bucket `b`) at its place, `$store(dst)` writing its words at
    // the start of the row's bytes (the last word and the index may run past the row by
    // less than 4 bytes, see `Geo`: rows are written in slot order, so only the next row's
    // bytes, not yet written, are overwritten).
    macro_rules! put {
        ($index:expr, $b:expr, $store:expr) => {{
            let (index, b): (u64, usize) = ($index, $b);
            if last[b] == u64::MAX {
                lay.base[b] = index as u32;
            } else if !exact && index - last[b] >= reach {
                return false;
            }
            last[b] = index;
            let Some(at) = lay.place(alloc, mem, b, stride, rpc) else {
                return false;
            };
            let dst = mem.bytes_mut(at, 4 * hw.max(1) + 4);
            $store(&mut *dst);
            dst[hb..hb + 4].copy_from_slice(&(index as u32).to_le_bytes());
            mem.prefetch_l2(at + 64);
            true
        }};
    }
    if SPEC && HW >= 1 && HW < MAX_WORDS {
        return for_each_string_bytes(
            gen,
            blocks,
            #[inline(always)]
            |index, bytes| {
                let (row, b) = kern.string_row::<HW>(bytes, mask);
                put!(index, b, |dst: &mut [u8]| kern.store_be::<HW>(dst, row))
            },
        );
    }
    for_each_string(
        gen,
        blocks,
        bb,
        hw,
        mask,
        #[inline(always)]
        |index, b, words| {
            put!(index, b, |dst: &mut [u8]| {
                for w in 0..hw {
                    dst[4 * w..4 * w + 4].copy_from_slice(&words[w].to_be_bytes());
                }
            })
        },
    )
}

/// The `W` hash words at the start of `row` (the last one with the tree's bytes in its low
/// bits: callers mask).
#[inline(always)]
fn load<const W: usize>(row: &[u8]) -> [u32; W] {
    let s = &row[..4 * W];
    let mut x = [0u32; W];
    for (w, v) in x.iter_mut().enumerate() {
        *v = u32::from_be_bytes(s[4 * w..4 * w + 4].try_into().expect("4 bytes"));
    }
    x
}

/// A run of a list's rows in one chunk: rows `row0..row0 + rows` of the chunk at byte `base`.
#[derive(Clone, Copy)]
struct Seg {
    base: usize,
    row0: usize,
    rows: usize,
}

/// Walks the segments of one list (see [`Layer`]) in slot order. A chunk's link is read
/// only when the walk moves past the chunk, so a walker that asked for the chunk's lines
/// first does not wait on it.
#[derive(Clone, Copy)]
struct ListWalk {
    b: usize,
    /// Rows not yet walked.
    left: usize,
    /// 0: the head is next; 1: regular chunks; 2: the tail.
    stage: u8,
    /// Regular chunks walked.
    done: u32,
    /// The chunk of the last segment walked (whose link leads on).
    last: usize,
}

impl ListWalk {
    fn new(lay: &Layer, b: usize) -> Self {
        ListWalk {
            b,
            left: lay.counts[b] as usize,
            stage: 0,
            done: 0,
            last: 0,
        }
    }

    /// The next segment.
    #[inline(always)]
    fn next(&mut self, mem: &PoolRef, lay: &Layer, g: &Walking) -> Option<Seg> {
        if self.left == 0 {
            return None;
        }
        let (b, cb) = (self.b, g.chunk);
        let w = self;
        let link = |c: usize| read_u32(mem.bytes(c * cb + cb - 4, 4), 0) as usize;
        // The chunk, its first row of the list, and the row past the segment's room.
        let (c, row0, end) = loop {
            match w.stage {
                0 => {
                    w.stage = 1;
                    let at = lay.hstart[b] as usize;
                    if lay.hstart[b] != NO_AT {
                        let c = at / cb;
                        let row0 = (at - c * cb) / g.stride;
                        break (c, row0, row0 + lay.head_rows(b, g.rpc));
                    }
                }
                1 if w.done < lay.nchunks[b] => {
                    let c = if w.done == 0 {
                        lay.first[b] as usize
                    } else {
                        link(w.last)
                    };
                    w.done += 1;
                    break (c, 0, g.rpc);
                }
                1 => {
                    w.stage = 2;
                    let at = lay.tail[b] as usize;
                    let c = at / cb;
                    break (c, (at - c * cb) / g.stride, g.rpc);
                }
                _ => break (link(w.last), 0, g.rpc),
            }
        };
        let rows = w.left.min(end - row0);
        w.left -= rows;
        w.last = c;
        Some(Seg {
            base: c * cb,
            row0,
            rows,
        })
    }
}

/// A layer's row geometry, as the walks need it.
#[derive(Clone, Copy)]
struct Walking {
    stride: usize,
    rpc: usize,
    chunk: usize,
}

/// Visits the rows of bucket `b` in list `lay` in slot order: `f(slot id, byte offset,
/// bytes)`, slot ids from `id0`, the bytes from the row's start to 4 bytes past its end
/// (still in its chunk, see `Geo`).
#[inline(always)]
fn for_rows(
    mem: &PoolRef,
    lay: &Layer,
    b: usize,
    g: &Walking,
    id0: usize,
    mut f: impl FnMut(usize, usize, &[u8]),
) {
    let stride = g.stride;
    let mut id = id0;
    let mut walk = ListWalk::new(lay, b);
    while let Some(s) = walk.next(mem, lay, g) {
        // No prefetch of the next chunk here: `Lookahead` has brought it to L2 while the
        // previous bucket merged, and asking for its lines again (17 prefetches a chunk, as
        // this walk did until session 14) cost ~1.5% of (200,9)'s time and gained nothing on
        // (144,5).
        let chunk = mem.bytes(s.base, g.chunk);
        for j in s.row0..s.row0 + s.rows {
            f(
                id,
                s.base + j * stride,
                &chunk[j * stride..j * stride + stride + 4],
            );
            id += 1;
        }
    }
}

/// Fetches the chunks of the next bucket into L2 one line per call, while the current bucket's
/// pairs are merged (compute on rows already in cache, which leaves the memory idle).
/// Without it the next bucket's chunks are read only when its rows are copied out, and the
/// burst of prefetches for each next chunk waits on the L1 fill buffers (about a sixth of a
/// step's time). The chunk lists are linked, so a chunk's last line (its link) is asked for
/// first and read once the chunk's other lines are on their way.
struct Lookahead {
    /// The list being walked (`lists.len()`: done), its walk and the chunk being fetched.
    list: usize,
    walk: ListWalk,
    base: usize,
    /// The next line of the chunk to ask for (0: the link's line).
    line: usize,
}

impl Lookahead {
    /// For the bucket after `b` in `lists`, if `buckets` (this thread's) has one.
    fn after(
        mem: &PoolRef,
        lists: &[Layer],
        b: usize,
        buckets: &Range<usize>,
        g: &Walking,
    ) -> Self {
        let mut w = Lookahead {
            list: lists.len(),
            walk: ListWalk::new(&lists[0], b),
            base: 0,
            line: 0,
        };
        if b + 1 < buckets.end {
            w.list = 0;
            w.walk = ListWalk::new(&lists[0], b + 1);
            w.enter(mem, lists, g);
        }
        w
    }

    /// Moves to the next segment of the bucket's lists, from the current list on.
    fn enter(&mut self, mem: &PoolRef, lists: &[Layer], g: &Walking) {
        let b = self.walk.b;
        while let Some(l) = lists.get(self.list) {
            if let Some(s) = self.walk.next(mem, l, g) {
                self.base = s.base;
                self.line = 0;
                return;
            }
            self.list += 1;
            self.walk = ListWalk::new(lists.get(self.list).unwrap_or(l), b);
        }
    }

    /// Asks for the bucket's next line.
    #[inline(always)]
    fn advance(&mut self, mem: &PoolRef, lists: &[Layer], g: &Walking) {
        if self.list >= lists.len() {
            return;
        }
        let first = self.base & !63;
        let last = (self.base + g.chunk - 1) & !63;
        let line = if self.line == 0 {
            last
        } else {
            first + 64 * (self.line - 1)
        };
        mem.prefetch_l2(line);
        self.line += 1;
        if first + 64 * (self.line - 1) >= last {
            self.enter(mem, lists, g);
        }
    }
}

/// Moves the rows of each list's last, partly filled regular chunk into packs of chunks
/// (one pack per thread's range of buckets `ranges`, in bucket and list order, the chunks
/// taken from and the old ones given to that thread's allocator), so that a complete layer
/// holds no empty space but the end of each pack (see [`Layer`]). A pack chunk goes free
/// with the last tail that has rows in it, and a thread's pack is read and freed only by
/// that thread, which consumes those buckets.
fn compact(
    lists: &mut [Layer],
    views: &mut [PoolRef],
    allocs: &mut [Alloc],
    ranges: &[Range<usize>],
    g: &Walking,
    buf: &mut Vec<u8>,
) -> Option<()> {
    let (stride, rpc, cb) = (g.stride, g.rpc, g.chunk);
    for (k, buckets) in ranges.iter().enumerate() {
        let (mem, alloc) = (&mut views[k], &mut allocs[k]);
        // The pack chunk being filled and its rows; the list whose tail was put last.
        let (mut pc, mut prow) = (NO_CHUNK as usize, rpc);
        let mut last_tail = None;
        for b in buckets.clone() {
            for (t, lay) in lists.iter_mut().enumerate() {
                let n = lay.counts[b] as usize;
                let k_reg = lay.nchunks[b] as usize;
                if k_reg == 0 {
                    continue;
                }
                let m = n - lay.head_rows(b, rpc) - (k_reg - 1) * rpc;
                if m == rpc {
                    continue;
                }
                let old = (lay.at[b] as usize - 1) / cb;
                buf.clear();
                buf.extend_from_slice(mem.bytes(old * cb, m * stride));
                for (j, row) in buf.chunks_exact(stride).enumerate() {
                    if prow == rpc {
                        let c = alloc.take(mem)? as usize;
                        if pc != NO_CHUNK as usize {
                            write_u32(mem.bytes_mut(pc * cb + cb - 4, 4), 0, c as u32);
                        }
                        (pc, prow) = (c, 0);
                    }
                    if j == 0 {
                        lay.tail[b] = (pc * cb + prow * stride) as u32;
                    }
                    mem.bytes_mut(pc * cb + prow * stride, stride)
                        .copy_from_slice(row);
                    prow += 1;
                }
                lay.tail_closes[b] = prow == rpc;
                lay.nchunks[b] -= 1;
                alloc.give(mem, old as u32);
                last_tail = Some((t, b));
            }
        }
        // The range's last pack chunk goes with its last tail.
        if let Some((t, b)) = last_tail {
            lists[t].tail_closes[b] = true;
        }
    }
    Some(())
}

type StepFn = fn(StepJob) -> io::Result<bool>;

/// Step `r` for the buckets `buckets` of layer `r` (in all the threads' lists `cur`): merges
/// their colliding rows into this thread's lists `next` of layer `r + 1`, writing their
/// trees to `trees` and freeing each bucket once merged.
#[allow(clippy::too_many_arguments)]
fn step(
    plan: &Plan,
    geo: &Geo,
    r: usize,
    mem: &mut PoolRef,
    alloc: &mut Alloc,
    cur: &[Layer],
    next: &mut Layer,
    trees: &mut TreeOut,
    s: &mut Work,
    buckets: Range<usize>,
) -> io::Result<bool> {
    let (wi, wo) = (plan.hw[r], plan.hw[r + 1]);
    let geometry = (geo.stride[r], geo.hb[r], geo.stride[r + 1], geo.hb[r + 1]);
    // (200,9)'s widths and row geometry as constants (shifts and offsets then compile to
    // immediates), read from the plan otherwise.
    let f: StepFn = match (plan.c, plan.bb, wi, wo, geometry) {
        (20, 10, 6, 6, (26, 24, 26, 22)) => merge::<6, 6, 20, 10, true, 26, 24, 26, 22>,
        (20, 10, 6, 5, (26, 22, 23, 19)) => merge::<6, 5, 20, 10, true, 26, 22, 23, 19>,
        (20, 10, 5, 5, (23, 19, 21, 17)) => merge::<5, 5, 20, 10, true, 23, 19, 21, 17>,
        (20, 10, 5, 4, (21, 17, 18, 14)) => merge::<5, 4, 20, 10, true, 21, 17, 18, 14>,
        (20, 10, 4, 3, (18, 14, 16, 12)) => merge::<4, 3, 20, 10, true, 18, 14, 16, 12>,
        (20, 10, 3, 3, (16, 12, 13, 9)) => merge::<3, 3, 20, 10, true, 16, 12, 13, 9>,
        (20, 10, 3, 2, (13, 9, 11, 7)) => merge::<3, 2, 20, 10, true, 13, 9, 11, 7>,
        (20, 10, 2, 1, (11, 7, 8, 4)) => merge::<2, 1, 20, 10, true, 11, 7, 8, 4>,
        (_, _, 1, 1, _) => merge::<1, 1, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 2, 1, _) => merge::<2, 1, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 2, 2, _) => merge::<2, 2, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 3, 2, _) => merge::<3, 2, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 3, 3, _) => merge::<3, 3, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 4, 3, _) => merge::<4, 3, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 4, 4, _) => merge::<4, 4, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 5, 4, _) => merge::<5, 4, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 5, 5, _) => merge::<5, 5, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 6, 5, _) => merge::<6, 5, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 6, 6, _) => merge::<6, 6, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 7, 6, _) => merge::<7, 6, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 7, 7, _) => merge::<7, 7, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 8, 7, _) => merge::<8, 7, 0, 0, false, 0, 0, 0, 0>,
        (_, _, 8, 8, _) => merge::<8, 8, 0, 0, false, 0, 0, 0, 0>,
        _ => unreachable!("Plan::new limits rows to {MAX_WORDS} words"),
    };
    f(StepJob {
        plan,
        geo,
        r,
        mem,
        alloc,
        cur,
        next,
        trees,
        s,
        buckets,
    })
}

/// One thread's part of step `r` (see [`step`]).
struct StepJob<'a, 'p, 'b, 't> {
    plan: &'a Plan,
    geo: &'a Geo,
    r: usize,
    mem: &'a mut PoolRef<'p>,
    alloc: &'a mut Alloc<'b>,
    cur: &'a [Layer],
    next: &'a mut Layer,
    trees: &'a mut TreeOut<'t>,
    s: &'a mut Work,
    buckets: Range<usize>,
}

/// [`StepJob`] with its widths and (200,9)'s row geometry as constants, for [`with_kernel`].
struct Merge<
    'a,
    'p,
    'b,
    't,
    const WI: usize,
    const WO: usize,
    const C: u32,
    const BB: u32,
    const SPEC: bool,
    const SI: usize,
    const HBI: usize,
    const SO: usize,
    const HBO: usize,
>(StepJob<'a, 'p, 'b, 't>);

impl<
        const WI: usize,
        const WO: usize,
        const C: u32,
        const BB: u32,
        const SPEC: bool,
        const SI: usize,
        const HBI: usize,
        const SO: usize,
        const HBO: usize,
    > KernelJob for Merge<'_, '_, '_, '_, WI, WO, C, BB, SPEC, SI, HBI, SO, HBO>
{
    type Out = io::Result<bool>;

    #[inline(always)]
    fn run<K: RowKernel>(self, kern: K) -> io::Result<bool> {
        merge_with::<WI, WO, C, BB, SPEC, SI, HBI, SO, HBO, K>(kern, self.0)
    }
}

/// Step `r` with the AVX-512 row kernel where the CPU has it, else the portable one.
fn merge<
    const WI: usize,
    const WO: usize,
    const C: u32,
    const BB: u32,
    const SPEC: bool,
    const SI: usize,
    const HBI: usize,
    const SO: usize,
    const HBO: usize,
>(
    job: StepJob,
) -> io::Result<bool> {
    let c = if SPEC { C } else { job.plan.c };
    let portable = job.plan.portable;
    with_kernel(
        c,
        portable,
        Merge::<WI, WO, C, BB, SPEC, SI, HBI, SO, HBO>(job),
    )
}

/// The merge of [`step`] with the row kernel `kern` (for digits of `c` bits). Always
/// inlined, so that the AVX-512 instance is compiled with its target features.
#[inline(always)]
fn merge_with<
    const WI: usize,
    const WO: usize,
    const C: u32,
    const BB: u32,
    const SPEC: bool,
    const SI: usize,
    const HBI: usize,
    const SO: usize,
    const HBO: usize,
    K: RowKernel,
>(
    kern: K,
    job: StepJob,
) -> io::Result<bool> {
    let StepJob {
        plan,
        geo,
        r,
        mem,
        alloc,
        cur,
        next,
        trees,
        s,
        buckets,
    } = job;
    let mut local = mem.reborrow();
    let mem = &mut local;
    let (c, bb) = if SPEC { (C, BB) } else { (plan.c, plan.bb) };
    let rb = c - bb;
    let pair_bits = if SPEC { 32 - BB } else { geo.pair_bits };
    let ob_shift = 32 - bb.max(1);
    let (rpci, tbi, mask, rpco) = (geo.rpc[r], geo.tb[r], geo.mask[r], geo.rpc[r + 1]);
    let (si, hbi, so, hbo) = if SPEC {
        (SI, HBI, SO, HBO)
    } else {
        (geo.stride[r], geo.hb[r], geo.stride[r + 1], geo.hb[r + 1])
    };
    // The kernels' loads and stores of row words stay within a row and the 4 bytes past it.
    assert!(
        4 * WI <= si + 4 && 4 * WO <= so + 4 && WI <= MAX_WORDS,
        "row layout"
    );
    let (ftb, low_mask) = (
        geo.ftb[r],
        if 8 * tbi >= 32 {
            u32::MAX
        } else {
            (1u32 << (8 * tbi)) - 1
        },
    );
    let tree_mask = byte_mask(ftb);
    let walking = Walking {
        stride: si,
        rpc: rpci,
        chunk: geo.chunk,
    };
    let Work {
        chains,
        pairs,
        rows,
        ..
    } = s;
    for b in buckets.clone() {
        chains.clear(rb);
        let count: usize = cur.iter().map(|l| l.counts[b] as usize).sum();
        trees.reserve(count * 8)?;
        if rows.len() < count * WI {
            rows.resize(count * WI, 0);
        }
        // Room for three partners of every row, so that only longer chains check.
        if pairs.len() < 3 * count + 3 {
            pairs.resize(3 * count + 3, 0);
        }
        let bucket_tag = if bb == 0 { 0 } else { (b as u64) << pair_bits };
        // Phase 1: the bucket's rows are copied out of their chunks (as aligned words, for
        // the random reads of phase 2) and their trees written out, in slot order; the rows
        // are chained by the rest of their digit and the pairs (older id, newer id) listed
        // in chain order, as in `fast`: the first three partners of a row without branches.
        let mut np = 0;
        let mut id0 = 0;
        // The trees go to the buffer's free part (room for 8 bytes a row reserved above).
        let room = trees.room();
        let mut put = 0;
        for lay in cur {
            let mut index = lay.base[b];
            for_rows(
                mem,
                lay,
                b,
                &walking,
                id0,
                #[inline(always)]
                |id, _, row| {
                    let tree = if r == 0 {
                        let low = read_u32(row, hbi);
                        index = index.wrapping_add(low.wrapping_sub(index) & low_mask);
                        index as u64
                    } else {
                        read_tree(row, hbi, tbi) & tree_mask
                    };
                    room[put..put + 8].copy_from_slice(&tree.to_le_bytes());
                    put += ftb;
                    let (x, x0) = kern.load_be::<WI>(row, mask);
                    kern.store_words::<WI>(&mut rows[id * WI..id * WI + WI], x);
                    let key = (x0 >> (32 - rb)) as usize;
                    let q0 = chains.push_id(key, id as u16);
                    list_partners(chains, q0, id as u32, pairs, &mut np);
                },
            );
            id0 += lay.counts[b] as usize;
        }
        trees.advance(put);
        // The bucket is copied: its chunks (still in cache) take the next layer's rows.
        for lay in cur {
            lay.free(alloc, mem, b, si, rpci, buckets.start);
        }
        // Phase 2: merge every listed pair, fetching the next bucket's rows meanwhile.
        let mut ahead = Lookahead::after(mem, cur, b, &buckets, &walking);
        for &p in &pairs[..np] {
            ahead.advance(mem, cur, &walking);
            let (qi, id) = ((p >> 16) as usize, (p & 0xffff) as usize);
            let rowa = &rows[qi * WI..qi * WI + WI];
            let rowb = &rows[id * WI..id * WI + WI];
            let Some((y, x0)) = kern.xor_next::<WI, WO>(rowa, rowb) else {
                continue;
            };
            // The next bucket: the B bits after the rest of the digit, all in the XOR's
            // first word (c < 32, checked by `solve`).
            let ob = if bb == 0 {
                0
            } else {
                ((x0 << rb) >> ob_shift) as usize
            };
            let tree = bucket_tag | pair_code(qi, id) as u64;
            let Some(oat) = next.place(alloc, mem, ob, so, rpco) else {
                return Ok(false);
            };
            // As in layer 0, the last word may run past the row into the next one's bytes
            // (its tree then overwrites them).
            let dst = mem.bytes_mut(oat, so + 4);
            kern.store_be::<WO>(dst, y);
            write_tree(dst, hbo, tree, so - hbo);
            // As `fast`'s `prefetch_next_rows`: the bucket's next rows then hit the cache.
            mem.prefetch_l2(oat + 64);
        }
    }
    Ok(true)
}

/// A pair found by the final step: the trees of its two rows at layer k-1 (older row
/// first), read from the rows, so that the last layer's trees (an eighth of (200,9)'s) never
/// go to the store and the trace back starts a layer lower.
type Candidate = (u64, u64);

/// The last step: pairs of layer `k-1` rows equal on all their bits.
fn final_step(
    plan: &Plan,
    geo: &Geo,
    mem: &PoolRef,
    cur: &[Layer],
    s: &mut Work,
    buckets: Range<usize>,
) -> Vec<Candidate> {
    let r = plan.k as usize - 1;
    match plan.hw[r] {
        1 => final_merge::<1>(plan, geo, mem, cur, s, buckets),
        2 => final_merge::<2>(plan, geo, mem, cur, s, buckets),
        3 => final_merge::<3>(plan, geo, mem, cur, s, buckets),
        4 => final_merge::<4>(plan, geo, mem, cur, s, buckets),
        _ => unreachable!("the last layer holds 2c - B <= 64 bits"),
    }
}

fn final_merge<const W: usize>(
    plan: &Plan,
    geo: &Geo,
    mem: &PoolRef,
    cur: &[Layer],
    s: &mut Work,
    buckets: Range<usize>,
) -> Vec<Candidate> {
    let r = plan.k as usize - 1;
    let rb = plan.rb;
    let (si, rpc, hb, tb, mask) = (geo.stride[r], geo.rpc[r], geo.hb[r], geo.tb[r], geo.mask[r]);
    // As in `fast`: a branch-free count of each bucket's rows per value of their leading
    // `fb` bits; only rows whose value is shared go through the chains.
    let fb = (rb + 5).min(plan.c + rb).min(16);
    let walking = Walking {
        stride: si,
        rpc,
        chunk: geo.chunk,
    };
    let Work {
        chains,
        seen,
        items,
        ..
    } = s;
    seen.clear();
    seen.resize(1 << fb, 0);
    let row = |at: usize| {
        let mut x = load::<W>(mem.bytes(at, 4 * W));
        x[W - 1] &= mask;
        x
    };
    let filter = |at: usize| (load::<1>(mem.bytes(at, 4))[0] >> (32 - fb)) as usize;
    // Reads of a tree may run 4 bytes past its row (`read_tree`, as `Geo` allows).
    let tree = |at: usize| read_tree(mem.bytes(at + hb, 8), 0, tb) & byte_mask(tb);
    let mut out = Vec::new();
    for b in buckets.clone() {
        chains.clear(rb);
        items.clear();
        let mut id0 = 0;
        for lay in cur {
            for_rows(
                mem,
                lay,
                b,
                &walking,
                id0,
                #[inline(always)]
                |_, at, _| {
                    items.push(at as u32);
                    let f = filter(at);
                    seen[f] = seen[f].saturating_add(1);
                },
            );
            id0 += lay.counts[b] as usize;
        }
        // Meanwhile the next bucket's rows are fetched (as in `merge_with`).
        let mut ahead = Lookahead::after(mem, cur, b, &buckets, &walking);
        for (id, &at) in items.iter().enumerate() {
            ahead.advance(mem, cur, &walking);
            let at = at as usize;
            if seen[filter(at)] < 2 {
                continue;
            }
            let rowb = row(at);
            let key = (rowb[0] >> (32 - rb)) as usize;
            let mut q = chains.push(key, id as u16, at as u32);
            while q != NIL {
                let qi = q as usize;
                let (older, qat) = chains.link(qi);
                q = older;
                if row(qat as usize) == rowb {
                    out.push((tree(qat as usize), tree(at)));
                }
            }
        }
        for &at in items.iter() {
            seen[filter(at as usize)] = 0;
        }
    }
    out
}

/// Where each layer's trees are in the store.
struct Book<'a> {
    plan: &'a Plan,
    geo: &'a Geo,
    trees: Source<'a>,
    /// Layers below this one kept no trees.
    height: usize,
    /// Store offset of each layer's first tree (layers from `height` on).
    starts: Vec<u64>,
    /// Rows of each layer in buckets before `b` (`nb + 1` entries per layer).
    prefix: Vec<Vec<u64>>,
}

impl Book<'_> {
    /// The position in layer `r` of slot `id` of bucket `b`.
    fn position(&self, r: usize, b: usize, id: usize) -> io::Result<u64> {
        let pos = self.prefix[r][b] + id as u64;
        if pos >= self.prefix[r][b + 1] {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "tree pointer past its bucket",
            ));
        }
        Ok(pos)
    }

    /// The stored tree at position `pos` of layer `r >= height`.
    fn tree(&self, r: usize, pos: u64) -> io::Result<u64> {
        let tb = self.geo.ftb[r];
        let mut v = [0u8; 8];
        self.trees
            .read_at(&mut v[..tb], self.starts[r] + pos * tb as u64)?;
        Ok(u64::from_le_bytes(v))
    }
}

/// `pr`'s re-run of the layers up to `layer`: the trees at the sorted positions `wanted`.
type Rerun<'a> = dyn FnMut(usize, &[u64]) -> io::Result<Vec<u64>> + 'a;

/// Traces the candidates back one layer at a time, all together: at each layer below the
/// last (whose trees come with the candidates) the trees of their nodes are read from the
/// store (or, below `book.height`, picked out of a re-run of
/// the layers up to that one by `rerun(layer, sorted positions)`), and a candidate is dropped
/// as soon as a row occurs twice in its tree (as in `fast`). Returns the kept candidates'
/// leaf indices in tree order and the number dropped.
fn trace_back(
    book: &Book,
    cands: &[Candidate],
    rerun: &mut Rerun,
) -> io::Result<(Vec<Vec<u32>>, usize)> {
    let plan = book.plan;
    let k = plan.k as usize;
    let pair_bits = book.geo.pair_bits;
    let pair_mask = (1u64 << pair_bits) - 1;
    let total = cands.len();
    // Each live candidate's trees at layer r, in tree order (at k-1: from the final step).
    let mut trees: Vec<Vec<u64>> = cands.iter().map(|&(a, c)| vec![a, c]).collect();
    let mut sorted = Vec::new();
    for r in (1..k).rev() {
        // Layer r's trees name nodes (bucket << 32 | slot id) of layer r - 1.
        let mut live = Vec::with_capacity(trees.len());
        for t in trees {
            let mut below = Vec::with_capacity(2 * t.len());
            for tree in t {
                let pb = if plan.bb == 0 {
                    0
                } else {
                    (tree >> pair_bits) << 32
                };
                let (x, y) = pair_decode((tree & pair_mask) as u32);
                below.extend([pb | x as u64, pb | y as u64]);
            }
            sorted.clear();
            sorted.extend_from_slice(&below);
            sorted.sort_unstable();
            if !sorted.windows(2).any(|w| w[0] == w[1]) {
                live.push(below);
            }
        }
        let below = r - 1;
        let positions: Vec<Vec<u64>> = live
            .iter()
            .map(|nodes| {
                nodes
                    .iter()
                    .map(|&n| book.position(below, (n >> 32) as usize, n as u32 as usize))
                    .collect::<io::Result<Vec<u64>>>()
            })
            .collect::<io::Result<_>>()?;
        trees = if below >= book.height {
            positions
                .iter()
                .map(|ps| ps.iter().map(|&p| book.tree(below, p)).collect())
                .collect::<io::Result<_>>()?
        } else {
            let mut wanted: Vec<u64> = positions.iter().flatten().copied().collect();
            wanted.sort_unstable();
            wanted.dedup();
            let picked = if wanted.is_empty() {
                Vec::new()
            } else {
                rerun(below, &wanted)?
            };
            positions
                .iter()
                .map(|ps| {
                    ps.iter()
                        .map(|p| picked[wanted.binary_search(p).expect("wanted")])
                        .collect()
                })
                .collect()
        };
    }
    // Layer 0's trees are the leaves' indices.
    let leaves = trees
        .into_iter()
        .map(|t| t.into_iter().map(|v| v as u32).collect())
        .collect::<Vec<Vec<u32>>>();
    let kept = leaves.len();
    Ok((leaves, total - kept))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The solutions of one solve, which must not give up.
    fn solutions(
        gen: &HashGen,
        plan: &Plan,
        store: Store,
        threads: usize,
        keep: &mut Option<EmSpace>,
    ) -> Vec<Vec<u32>> {
        solutions_pr(gen, plan, store, threads, 0, keep)
    }

    /// As [`solutions`], dropping the trees of the layers below `height`.
    fn solutions_pr(
        gen: &HashGen,
        plan: &Plan,
        store: Store,
        threads: usize,
        height: usize,
        keep: &mut Option<EmSpace>,
    ) -> Vec<Vec<u32>> {
        let found = solve(gen, plan, store, threads, height, keep)
            .unwrap()
            .expect("ids suffice");
        assert_eq!(found.rows[0], gen.params().num_indices() as usize);
        let steps = found.recomputed_steps;
        let sols = crate::solver::finish(found.cands, &mut crate::SolveStats::default());
        // A solution is traced through every layer, so each layer below the height was
        // rebuilt once: layers 0..=r for layer r, h(h+1)/2 steps in all.
        if !sols.is_empty() {
            assert_eq!(steps, height * (height + 1) / 2, "height {height}");
        }
        sols
    }

    /// Exactly the reference solver's solutions on small parameters, with the trees in the
    /// file and in memory, on 1, 2 and 3 threads, with the pool, file and stale rows of
    /// earlier solves reused; too few slot ids make the solve give up (the caller then runs
    /// the general solver) instead of dropping rows.
    #[test]
    fn matches_the_reference_solver_and_gives_up_rather_than_drop_rows() {
        let p = crate::Params::new(48, 5).unwrap();
        let mut keep = None;
        for nonce in 0..16u128 {
            let gen =
                crate::HashGen::new(p, b"ZcashPoW", b"em", &crate::nonce_from_int(nonce)).unwrap();
            let want = crate::reference::solve(&gen);
            let mut plan = Plan::new(p, 1).unwrap();
            for store in [Store::File(None), Store::Memory] {
                for threads in 1..=3 {
                    let got = solutions(&gen, &plan, store, threads, &mut keep);
                    assert_eq!(got, want, "nonce {nonce} {store:?} {threads} threads");
                }
            }
            plan.cap = 4;
            plan.extra = 0;
            for threads in 1..=2 {
                let gave_up = solve(&gen, &plan, Store::File(None), threads, 0, &mut keep).unwrap();
                assert!(gave_up.is_none());
            }
        }
    }

    /// The AVX-512 row kernel (where the CPU has it) and the portable one give the same
    /// candidates in the same order, the same layer sizes and the same trees (hence the
    /// same solutions), on (48,5) and (96,5) with `fast`'s plans and wide ones and on
    /// (200,9) (its compile-time row geometry), one and two threads.
    #[test]
    fn row_kernels_give_the_same_candidates() {
        if !crate::fast::simd_available() {
            println!("skipped: CPU lacks avx512f/avx512vl (or PROOFKIT_FORCE_PORTABLE is set)");
            return;
        }
        let mut keep = None;
        for (n, k, nonces) in [(48, 5, 0..4u128), (96, 5, 0..2), (200, 9, 0..1)] {
            let p = crate::Params::new(n, k).unwrap();
            let c = p.collision_bits();
            let mut plans = vec![plan(p).unwrap()];
            if n < 200 {
                plans.push(Plan::wide(p, c + 1 - 9, 2048).unwrap());
            }
            for nonce in nonces {
                let gen =
                    crate::HashGen::new(p, b"ZcashPoW", b"kernels", &crate::nonce_from_int(nonce))
                        .unwrap();
                for mut plan in plans.clone() {
                    for threads in [1, 2] {
                        plan.portable = false;
                        let simd = solve(&gen, &plan, Store::Memory, threads, 0, &mut keep)
                            .unwrap()
                            .expect("ids suffice");
                        plan.portable = true;
                        let port = solve(&gen, &plan, Store::Memory, threads, 0, &mut keep)
                            .unwrap()
                            .expect("ids suffice");
                        let what =
                            format!("({n},{k}) B {} nonce {nonce} threads {threads}", plan.bb);
                        assert_eq!(simd.cands, port.cands, "{what}");
                        assert_eq!(simd.rows, port.rows, "{what}");
                        assert_eq!(simd.repeated, port.repeated, "{what}");
                    }
                }
            }
        }
    }

    /// Threads split buckets by rows: every bucket once, in order, about equal rows.
    #[test]
    fn buckets_split_by_rows() {
        let counts = [5u32, 0, 7, 1, 9, 0, 0, 3];
        let pre = prefix(&counts);
        assert_eq!(pre, [0, 5, 5, 12, 13, 22, 22, 22, 25]);
        for threads in 1..=10 {
            let ranges = split_buckets(&pre, threads);
            assert_eq!(ranges.len(), threads);
            assert_eq!(ranges[0].start, 0);
            assert_eq!(ranges[threads - 1].end, counts.len());
            assert!(ranges.windows(2).all(|w| w[0].end == w[1].start));
        }
        assert_eq!(split_buckets(&pre, 2), [0..3, 3..8]);
        let (_, cuts) = tree_parts(&pre, 5, 2);
        assert_eq!(cuts, [0, 60, 125]);
    }

    /// [`Plan::wide`] plans (trees of more than 4 bytes) on small parameters: exactly the
    /// reference solver's solutions, with the pool and file reused, trees in the file and
    /// in memory, on 1 and 2 threads; (144,5) takes the wide plan with its 19/18-byte rows
    /// and 5-byte trees, (200,9) keeps `fast`'s plan.
    #[test]
    fn wide_plans_match_the_reference_solver() {
        let mut keep = None;
        // (n, k, bucket bits, slot ids): trees of 6 and 5 bytes, and 4 bytes with B = 0.
        for (n, k, bb, ids) in [(96, 5, 12, 60_000), (48, 5, 4, 60_000), (48, 5, 0, 2048)] {
            let p = crate::Params::new(n, k).unwrap();
            let plan = Plan::wide(p, bb, ids).unwrap();
            let g = Geo::new(&plan, p.index_bits());
            assert!(bb + g.pair_bits > 32 || bb == 0, "({n},{k}) B={bb}");
            for nonce in 0..6u128 {
                let gen =
                    crate::HashGen::new(p, b"ZcashPoW", b"wide", &crate::nonce_from_int(nonce))
                        .unwrap();
                let want = crate::reference::solve(&gen);
                for (store, threads) in [
                    (Store::File(None), 1),
                    (Store::Memory, 1),
                    (Store::File(None), 2),
                    (Store::Memory, 2),
                ] {
                    let got = solutions(&gen, &plan, store, threads, &mut keep);
                    assert_eq!(
                        got, want,
                        "({n},{k}) B={bb} nonce {nonce} {store:?} {threads}"
                    );
                }
            }
        }
        let p = crate::Params::new(144, 5).unwrap();
        let wide = plan(p).unwrap();
        let g = Geo::new(&wide, p.index_bits());
        assert_eq!((wide.bb, wide.ids(), g.pair_bits), (16, 2048, 21));
        assert_eq!(g.stride, [19, 18, 15, 12, 9]);
        assert_eq!((g.tb[0], g.ftb[0], g.ftb[1]), (3, 4, 5));
        for r in 0..5 {
            assert!(g.hb[r] + 4 <= 4 * wide.hw[r] + 4 && 4 * wide.hw[r] <= g.stride[r]);
            assert!(g.rpc[r] * g.stride[r] + 4 <= g.chunk);
        }
        let p = crate::Params::new(200, 9).unwrap();
        assert_eq!(plan(p).unwrap().bb, Plan::new(p, 1).unwrap().bb);
    }

    /// Wide plans forced on small parameters, on random instances: exactly the general
    /// solver's solutions (its `full` form, `pr` at height 0), trees in the file and in
    /// memory, on 1 and 2 threads, and with the trees below every height h dropped and
    /// rebuilt (`pr`).
    #[test]
    fn wide_plans_match_the_general_solver_on_random_instances() {
        let general = crate::SolverConfig {
            mode: crate::Mode::Pr { height: 0 },
            threads: 1,
            spill_dir: None,
        };
        let mut keep = None;
        let mut seed = 0x5eed_u64;
        let mut next = move || {
            // xorshift64*: instances only need to differ.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        let mut total = 0;
        for (n, k, bb, ids, count) in [(96, 5, 9, 8192, 8), (48, 5, 2, 2048, 60)] {
            let p = crate::Params::new(n, k).unwrap();
            let plan = Plan::wide(p, bb, ids).unwrap();
            for _ in 0..count {
                let input: Vec<u8> = (0..next() % 100).map(|_| next() as u8).collect();
                let nonce = crate::nonce_from_int(((next() as u128) << 64) | next() as u128);
                let gen = crate::HashGen::new(p, b"ZcashPoW", &input, &nonce).unwrap();
                let (want, stats) = crate::solve_general(&gen, &general).unwrap();
                assert!(!stats.fast_path);
                for (store, threads) in [(Store::Memory, 1), (Store::File(None), 2)] {
                    let got = solutions(&gen, &plan, store, threads, &mut keep);
                    assert_eq!(got, want, "({n},{k}) B={bb} {store:?} {threads}");
                }
                // `pr`: the trees of the layers below h rebuilt by re-running them.
                for h in 1..k as usize {
                    let threads = 1 + h % 2;
                    let got = solutions_pr(&gen, &plan, Store::Memory, threads, h, &mut keep);
                    assert_eq!(got, want, "({n},{k}) B={bb} pr h={h} {threads} threads");
                }
                total += want.len();
            }
        }
        assert!(total > 30, "only {total} solutions compared");
    }

    /// (200,9)'s rows: 26 bytes at layers 0 and 1 (16 low index bits at layer 0), and every
    /// row's words and tree fit its chunk with the 4 bytes that writes may run past it.
    #[test]
    fn geometry_of_200_9() {
        let p = crate::Params::new(200, 9).unwrap();
        let plan = Plan::new(p, 1).unwrap();
        let g = Geo::new(&plan, p.index_bits());
        assert_eq!(g.stride, [26, 26, 23, 21, 18, 16, 13, 11, 8]);
        assert_eq!((g.tb[0], g.ftb[0]), (2, 3));
        for r in 0..9 {
            assert!(g.hb[r] + 4 <= 4 * plan.hw[r] + 4 && 4 * plan.hw[r] <= g.stride[r]);
            assert!(g.rpc[r] * g.stride[r] + 4 <= g.chunk);
        }
    }

    /// Each pair of lists splits its head chunk with an empty row between the two heads
    /// (writes may run 4 bytes past a row), at points spread over the chunk; lone buckets
    /// and chunks of under three rows take a chunk alone; the pair's chunk goes free with
    /// its last bucket.
    #[test]
    fn heads_split_their_chunks_apart_at_spread_points() {
        for (nb, rpc) in [
            (1024, 40),
            (1024, 45),
            (11, 40),
            (7, 3),
            (6, 2),
            (5, 1),
            (1, 40),
        ] {
            let mut even_caps = Vec::new();
            for b in 0..nb {
                let (p, row0, cap) = head_of(b, nb, rpc);
                let (last, first) = pair_span(b, nb, rpc);
                assert!(cap >= 1 && row0 + cap <= rpc, "nb {nb} rpc {rpc} b {b}");
                let alone = rpc < 3 || (b == nb - 1 && b.is_multiple_of(2));
                if alone {
                    assert_eq!((row0, cap, last, first), (0, rpc, b, b));
                    continue;
                }
                assert_eq!((p, first, last), (b / 2, b & !1, b | 1));
                if b % 2 == 0 {
                    let (q, row1, _) = head_of(b + 1, nb, rpc);
                    assert_eq!((q, row0), (p, 0));
                    assert_eq!(row1, cap + 1, "one empty row between the heads");
                    even_caps.push(cap);
                }
            }
            if nb == 1024 {
                // Spread over the chunk: the lists start at different points of their chunks.
                let mean = even_caps.iter().sum::<usize>() as f64 / even_caps.len() as f64;
                assert!((mean - (rpc - 1) as f64 / 2.0).abs() < 2.0, "mean {mean}");
                let distinct = even_caps.iter().collect::<std::collections::BTreeSet<_>>();
                assert_eq!(distinct.len(), rpc - 2, "every split point is used");
            }
        }
    }

    /// The pool's extent is the most rows of a layer plus about half a chunk per list (the
    /// lists' partly filled chunks at different points, their tails packed once a layer is
    /// complete): (200,9) on one and two threads. Before heads and packed tails, every
    /// output list opened an empty chunk at the start of steps 0 and 1 (~1,400 chunks over
    /// the rows for one thread).
    #[test]
    fn pool_extent_is_the_largest_layer_and_half_a_chunk_per_list() {
        let p = crate::Params::new(200, 9).unwrap();
        for threads in [1, 2] {
            let plan = Plan::new(p, threads).unwrap();
            let g = Geo::new(&plan, p.index_bits());
            let mut keep = None;
            for nonce in 0..3u128 {
                let gen =
                    crate::HashGen::new(p, b"ZcashPoW", b"extent", &crate::nonce_from_int(nonce))
                        .unwrap();
                let found = solve(&gen, &plan, Store::File(None), threads, 0, &mut keep)
                    .unwrap()
                    .expect("ids suffice");
                let rows = (0..9)
                    .map(|r| found.rows[r].div_ceil(g.rpc[r]))
                    .max()
                    .unwrap();
                let chunks = keep.as_ref().unwrap().chunks as usize;
                let lists = threads * plan.nb();
                let over = chunks as f64 - rows as f64;
                assert!(over > 0.0, "threads {threads} nonce {nonce}");
                assert!(
                    over < 0.75 * lists as f64 + (threads * BUMP_BATCH as usize) as f64,
                    "threads {threads} nonce {nonce}: {chunks} chunks for {rows} of rows"
                );
            }
        }
    }
}
