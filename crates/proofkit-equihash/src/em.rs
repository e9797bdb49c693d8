//! The `em` mode's fast path: the external-memory layout of the CIP paper ("Memory
//! Optimizations of Wagner's Algorithm", ePrint 2025/2141, the CIP-EM solver) on the bucket
//! machinery of [`crate::fast`] (its [`Plan`], chain tables, pair codes, two-phase pairing
//! and hash kernels).
//!
//! Only rows are in memory, and only those of the layer being consumed and of the layer being
//! produced: a bucket's rows are copied out and its chunks freed before its pairs are merged,
//! so the two layers together hold about one layer's rows at any time. Rows live in chunks of
//! one pool; a bucket is a list of chunks (linked through their last 4 bytes) filled in slot
//! order, and freed chunks go on a LIFO list kept in the chunks themselves, so the memory
//! touched is the most rows ever alive plus one partly filled chunk per bucket. Rows are
//! byte-packed: for (200,9) 26 bytes at layers 0 and 1 (layer 0 keeps only the low 16 bits
//! of the string index), so the 2^21 rows of a layer take 52 MiB.
//!
//! ```text
//!  pool:   | chunk | chunk | ... |   chunk: rows, then 4 bytes (link to the bucket's next chunk)
//!  row of layer r: | hash bits [r*c + B, n), big-endian, ceil(bits/8) bytes | tree, tb bytes LE |
//!  tree:   layer 0: the low B + 6 bits of the string index (16 for (200,9), 24 for (144,5));
//!          layer r >= 1: bucket of the pair at layer r-1 << P | pair(slot a, slot b),
//!          P = 32 - B where that names enough slot ids (4-byte trees), else wider
//!          (`Plan::wide`, e.g. (144,5): P = 21, 5-byte trees)
//!  file:   | layer 0's trees (full indices) | layer 1's | ... | layer k-1's |,
//!          each layer in (bucket, slot) order
//! ```
//!
//! Each layer's trees are written to the temporary file with plain positioned writes while the
//! layer is consumed (in bucket order, so sequentially; a mapped file would count in the
//! resident set), and read back only for the candidates' trees at the end. Slot `s` of bucket
//! `b` at layer `r` is entry `(rows of buckets < b) + s` of layer `r`'s part of the file.
//!
//! This path runs on one thread; like [`crate::fast`] it returns `None` (the caller then runs
//! the general solver) when a bucket outgrows the slot ids a pair code can name, the pool
//! runs out of chunks, or two layer-0 rows of a bucket are 2^(B+6) or more indices apart.
#![deny(unsafe_code)]

use crate::fast::{
    for_each_string, list_partners, merge_rows, pair_code, pair_decode, Chains, Plan, MAX_WORDS,
    NIL,
};
use crate::hash::HashGen;
use crate::spill::SpillFile;
use proofkit_core::memory::{prefetch_read, LargeBuffer, PagePolicy};
use std::io;
use std::path::{Path, PathBuf};

/// Rows of layer 0 (the longest) per chunk, with few buckets and with many. Chunks are small
/// because every bucket of the two live layers holds one partly filled chunk: 40 rows of
/// (200,9)'s 26-byte layers 0 and 1 make 1,044-byte chunks (1,024 buckets: about 1 MB partly
/// filled), and those layers lose nothing to chunk ends (rows do not straddle chunks); with
/// 2^16 buckets ((144,5)'s wide plan) 40 rows would leave about 64 MiB in partly filled
/// chunks, 13 rows of 19 bytes about 16 MiB (at 2% more chunk ends and links).
const CHUNK_ROWS: usize = 40;
const CHUNK_ROWS_MANY_BUCKETS: usize = 13;
/// Tree bytes buffered before a write.
const FLUSH: usize = 64 << 10;

/// Memory and file kept between solves.
pub(crate) struct EmSpace {
    pool: LargeBuffer,
    file: SpillFile,
    dir: Option<PathBuf>,
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

/// The chunk allocator: a LIFO free list over a bump pointer. The list is kept in the free
/// chunks themselves (the next free chunk in a chunk's first 4 bytes), so that it costs no
/// memory beyond the pool.
struct Alloc {
    free: u32,
    bump: u32,
    cap: u32,
    /// Bytes per chunk.
    chunk: usize,
}

impl Alloc {
    #[inline]
    fn take(&mut self, mem: &[u8]) -> Option<u32> {
        if self.free != NO_CHUNK {
            let c = self.free;
            self.free = read_u32(mem, c as usize * self.chunk);
            return Some(c);
        }
        if self.bump < self.cap {
            self.bump += 1;
            return Some(self.bump - 1);
        }
        None
    }

    #[inline]
    fn give(&mut self, mem: &mut [u8], c: u32) {
        write_u32(mem, c as usize * self.chunk, self.free);
        self.free = c;
    }
}

/// One layer's buckets. A bucket's chunks form a list linked through their last 4 bytes
/// (written when the next chunk is taken, after the chunk's last row), so that the lists
/// cost no memory beyond the pool (per-bucket vectors of chunk ids were ~0.6 MB of heap).
struct Layer {
    /// First chunk and number of chunks of each bucket.
    head: Vec<u32>,
    nchunks: Vec<u32>,
    /// Rows per bucket, set by [`Layer::count`] once the layer is complete.
    counts: Vec<u32>,
    /// Byte offset of the next row of each bucket, and the end of its last chunk's rows
    /// (equal when a new chunk is needed).
    at: Vec<u32>,
    end: Vec<u32>,
}

impl Layer {
    fn new(nb: usize) -> Self {
        Layer {
            head: vec![NO_CHUNK; nb],
            nchunks: vec![0; nb],
            counts: vec![0; nb],
            at: vec![0; nb],
            end: vec![0; nb],
        }
    }

    /// Empties every bucket (its chunks must have been freed).
    fn clear(&mut self) {
        self.head.fill(NO_CHUNK);
        self.nchunks.fill(0);
        self.at.fill(0);
        self.end.fill(0);
    }

    fn rows(&self) -> usize {
        self.counts.iter().map(|&c| c as usize).sum()
    }

    /// Sets the row counts from the chunks once the layer is written; false when a bucket
    /// holds more rows than the `ids` slot ids that pair codes (and chain tables) can name.
    fn count(&mut self, stride: usize, rpc: usize, ids: usize, chunk: usize) -> bool {
        let mut ok = true;
        for b in 0..self.head.len() {
            let n = match self.nchunks[b] as usize {
                0 => 0,
                k => {
                    // The last chunk holds at least one row, so `at - 1` lies inside it.
                    let last = (self.at[b] as usize - 1) / chunk;
                    (k - 1) * rpc + (self.at[b] as usize - last * chunk) / stride
                }
            };
            ok &= n <= ids;
            self.counts[b] = n as u32;
        }
        ok
    }

    /// The byte offset of a new row of bucket `b`; `None` when the pool is exhausted.
    #[inline(always)]
    fn place(
        &mut self,
        alloc: &mut Alloc,
        mem: &mut [u8],
        b: usize,
        stride: usize,
        rpc: usize,
    ) -> Option<usize> {
        let mut at = self.at[b];
        if at == self.end[b] {
            let c = alloc.take(mem)?;
            if self.nchunks[b] == 0 {
                self.head[b] = c;
            } else {
                let last = (at as usize - 1) / alloc.chunk;
                write_u32(mem, last * alloc.chunk + alloc.chunk - 4, c);
            }
            self.nchunks[b] += 1;
            at = c * alloc.chunk as u32;
            self.end[b] = at + (rpc * stride) as u32;
        }
        self.at[b] = at + stride as u32;
        Some(at as usize)
    }

    /// Returns the chunks of bucket `b` to the free list.
    fn free(&mut self, alloc: &mut Alloc, mem: &mut [u8], b: usize) {
        let mut c = self.head[b];
        for i in 0..self.nchunks[b] {
            let next = if i + 1 < self.nchunks[b] {
                read_u32(mem, c as usize * alloc.chunk + alloc.chunk - 4)
            } else {
                NO_CHUNK
            };
            alloc.give(mem, c);
            c = next;
        }
        self.head[b] = NO_CHUNK;
        self.nchunks[b] = 0;
    }
}

/// Trees on their way to the file.
struct TreeOut<'f> {
    file: &'f mut SpillFile,
    buf: Vec<u8>,
    len: usize,
    /// Bytes written to the file so far.
    total: u64,
}

impl TreeOut<'_> {
    /// Makes room for `bytes` more.
    fn reserve(&mut self, bytes: usize) -> io::Result<()> {
        if self.len + bytes + 8 > self.buf.len() {
            self.flush()?;
            if bytes + 8 > self.buf.len() {
                self.buf.resize(bytes + 8, 0);
            }
        }
        Ok(())
    }

    /// Appends the low `tb` bytes of `v` (room reserved).
    #[inline(always)]
    fn put(&mut self, v: u64, tb: usize) {
        self.buf[self.len..self.len + 8].copy_from_slice(&v.to_le_bytes());
        self.len += tb;
    }

    fn flush(&mut self) -> io::Result<()> {
        self.total += self.len as u64;
        self.file.append(&self.buf[..self.len])?;
        self.len = 0;
        Ok(())
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
        Some(fast) if fast.bb + 8 <= c + 1 => Some(fast),
        _ => Plan::wide(p, (c + 1).saturating_sub(9), 2048),
    }
}

/// Solves with `plan` (made for one thread), keeping the pool and the file in `keep`.
/// `Ok(None)`: a bucket outgrew its slot ids (the caller runs the general solver).
pub(crate) fn solve(
    gen: &HashGen,
    plan: &Plan,
    dir: Option<&Path>,
    keep: &mut Option<EmSpace>,
) -> io::Result<Option<Found>> {
    let p = gen.params();
    let geo = Geo::new(plan, p.index_bits());
    let rows = p.num_indices() as usize;
    // Rows alive at once: one layer and the part of the next made so far; the top layers of
    // (200,9) grow by up to ~20%, and a chunk loses less than one row.
    let min_rpc = *geo.rpc.iter().min().expect("k >= 2");
    let cap = (rows as f64 * 2.6 / min_rpc as f64) as usize + 4 * plan.nb() + 16;
    // Reads of row words may look up to 4 bytes past a chunk.
    let bytes = cap * geo.chunk + 64;
    if bytes > u32::MAX as usize {
        // Row offsets are u32; no plan comes near this (pair codes limit a layer's rows).
        return Ok(None);
    }
    let space = match keep.take() {
        Some(s) if s.pool.len() >= bytes && s.dir.as_deref() == dir => s,
        _ => {
            // Drop the old file before making a new one.
            *keep = None;
            EmSpace {
                pool: LargeBuffer::new(bytes, PagePolicy::Transparent)
                    .map_err(|e| io::Error::other(e.to_string()))?,
                file: SpillFile::create(dir)?,
                dir: dir.map(Path::to_path_buf),
            }
        }
    };
    let mut space = space;
    space.file.rewind();
    let out = run(gen, plan, &geo, &mut space, cap as u32);
    *keep = Some(space);
    out
}

fn run(
    gen: &HashGen,
    plan: &Plan,
    geo: &Geo,
    space: &mut EmSpace,
    cap: u32,
) -> io::Result<Option<Found>> {
    let nb = plan.nb();
    let k = plan.k as usize;
    let mem = space.pool.as_mut_slice();
    let mut alloc = Alloc {
        free: NO_CHUNK,
        bump: 0,
        cap,
        chunk: geo.chunk,
    };
    let mut trees = TreeOut {
        file: &mut space.file,
        buf: vec![0u8; FLUSH],
        len: 0,
        total: 0,
    };
    let mut cur = Layer::new(nb);
    let mut next = Layer::new(nb);
    let mut scratch = Scratch::new(plan);
    if !layer0(gen, plan, geo, mem, &mut alloc, &mut cur, &mut scratch.base)
        || !cur.count(geo.stride[0], geo.rpc[0], plan.ids(), geo.chunk)
    {
        return Ok(None);
    }
    let mut rows = Vec::with_capacity(k);
    // Where each layer's trees start in the file, and its rows per bucket.
    let mut starts = Vec::with_capacity(k);
    let mut counts: Vec<Vec<u32>> = Vec::with_capacity(k);
    for r in 0..k - 1 {
        rows.push(cur.rows());
        starts.push(trees.total + trees.len as u64);
        counts.push(cur.counts.clone());
        next.clear();
        if !step(
            plan,
            geo,
            r,
            mem,
            &mut alloc,
            &mut cur,
            &mut next,
            &mut trees,
            &mut scratch,
        )? {
            return Ok(None);
        }
        if !next.count(geo.stride[r + 1], geo.rpc[r + 1], plan.ids(), geo.chunk) {
            return Ok(None);
        }
        std::mem::swap(&mut cur, &mut next);
    }
    rows.push(cur.rows());
    starts.push(trees.total + trees.len as u64);
    counts.push(cur.counts.clone());
    let cands = final_step(plan, geo, mem, &cur, &mut trees, &mut scratch)?;
    trees.flush()?;
    let file = &*trees.file;
    let book = Book {
        plan,
        geo,
        file,
        starts,
        prefix: counts
            .iter()
            .map(|c| {
                let mut acc = 0u64;
                let mut v = Vec::with_capacity(nb + 1);
                v.push(0);
                for &x in c {
                    acc += x as u64;
                    v.push(acc);
                }
                v
            })
            .collect(),
    };
    let mut out = Vec::with_capacity(cands.len());
    let mut repeated = 0;
    let mut ex = Expansion::default();
    for (b, a, c) in cands {
        match ex.leaves(&book, b, a, c)? {
            Some(idx) => out.push(idx),
            None => repeated += 1,
        }
    }
    Ok(Some(Found {
        cands: out,
        rows,
        repeated,
    }))
}

/// Per-step scratch tables.
struct Scratch {
    chains: Chains,
    pairs: Vec<u32>,
    seen: Vec<u8>,
    items: Vec<u32>,
    /// The rows of the bucket being merged, `hw` words each.
    rows: Vec<u32>,
    /// The first string index of each layer-0 bucket.
    base: Vec<u32>,
}

impl Scratch {
    fn new(plan: &Plan) -> Self {
        Scratch {
            chains: Chains::new(),
            pairs: vec![0u32; 2 * plan.ids() + 3],
            seen: Vec::new(),
            items: Vec::new(),
            rows: Vec::new(),
            base: vec![0; plan.nb()],
        }
    }
}

/// Layer 0: every string, bucketed by its first B bits; the tree is the index.
fn layer0(
    gen: &HashGen,
    plan: &Plan,
    geo: &Geo,
    mem: &mut [u8],
    alloc: &mut Alloc,
    lay: &mut Layer,
    base: &mut [u32],
) -> bool {
    match (plan.bb, plan.hw[0]) {
        (10, 6) => fill_layer0::<10, 6, true>(gen, plan, geo, mem, alloc, lay, base),
        _ => fill_layer0::<0, 0, false>(gen, plan, geo, mem, alloc, lay, base),
    }
}

fn fill_layer0<const BB: u32, const HW: usize, const SPEC: bool>(
    gen: &HashGen,
    plan: &Plan,
    geo: &Geo,
    mem: &mut [u8],
    alloc: &mut Alloc,
    lay: &mut Layer,
    base: &mut [u32],
) -> bool {
    let p = gen.params();
    let (bb, hw) = if SPEC {
        (BB, HW)
    } else {
        (plan.bb, plan.hw[0])
    };
    let (stride, rpc, hb, tb, mask) =
        (geo.stride[0], geo.rpc[0], geo.hb[0], geo.tb[0], geo.mask[0]);
    // The largest gap from a bucket's previous index that the low `8 * tb` bits of an index
    // can carry (a bucket's first index is kept whole in `base`).
    let reach = if 8 * tb >= 32 {
        u64::MAX
    } else {
        1u64 << (8 * tb)
    };
    let exact = 8 * tb as u32 >= p.index_bits();
    let mut last = vec![u64::MAX; plan.nb()];
    for_each_string(
        gen,
        0..gen.num_blocks() as usize,
        bb,
        hw,
        mask,
        |index, b, words| {
            if last[b] == u64::MAX {
                base[b] = index as u32;
            } else if !exact && index - last[b] >= reach {
                return false;
            }
            last[b] = index;
            let Some(at) = lay.place(alloc, mem, b, stride, rpc) else {
                return false;
            };
            // The row's last word and its index may run past it (by less than 4 bytes, see
            // `Geo`): rows are written in slot order, so only the next row's bytes, not yet
            // written, are overwritten.
            let dst = &mut mem[at..at + 4 * hw.max(1) + 4];
            for w in 0..hw {
                dst[4 * w..4 * w + 4].copy_from_slice(&words[w].to_be_bytes());
            }
            dst[hb..hb + 4].copy_from_slice(&(index as u32).to_le_bytes());
            prefetch_after(mem, at);
            true
        },
    )
}

/// As [`crate::fast`]'s `prefetch_next_rows`: the cache line after a row just written to a
/// bucket, so that the bucket's next rows hit the cache.
#[inline(always)]
fn prefetch_after(mem: &[u8], at: usize) {
    if let Some(v) = mem.get(at + 64) {
        prefetch_read(v);
    }
}

#[inline(always)]
fn prefetch_address(mem: &[u8], at: usize) {
    if let Some(v) = mem.get(at) {
        prefetch_read(v);
    }
}

/// The `W` hash words of the row at `at` (the last one with the tree's bytes in its low
/// bits: callers mask).
#[inline(always)]
fn load<const W: usize>(mem: &[u8], at: usize) -> [u32; W] {
    let s = &mem[at..at + 4 * W];
    let mut x = [0u32; W];
    for (w, v) in x.iter_mut().enumerate() {
        *v = u32::from_be_bytes(s[4 * w..4 * w + 4].try_into().expect("4 bytes"));
    }
    x
}

/// Visits the rows of bucket `b` in slot order: `f(slot id, byte offset, bytes)`, the bytes
/// from the row's start to 4 bytes past its end (still in its chunk, see `Geo`).
#[inline(always)]
fn for_rows(
    mem: &[u8],
    lay: &Layer,
    b: usize,
    stride: usize,
    rpc: usize,
    chunk_bytes: usize,
    mut f: impl FnMut(usize, usize, &[u8]),
) {
    let count = lay.counts[b] as usize;
    let mut id = 0;
    let mut ch = lay.head[b] as usize;
    for i in 0..lay.nchunks[b] as usize {
        let base = ch * chunk_bytes;
        let chunk = &mem[base..base + chunk_bytes];
        let next = if i + 1 < lay.nchunks[b] as usize {
            read_u32(chunk, chunk_bytes - 4) as usize
        } else {
            usize::MAX
        };
        // The chunks of a bucket are scattered, so the hardware prefetchers lose the stream
        // at each chunk's end: ask for the next chunk's lines now.
        if next != usize::MAX {
            for line in (0..chunk_bytes + 63).step_by(64) {
                prefetch_address(mem, next * chunk_bytes + line);
            }
        }
        let here = (count - id).min(rpc);
        for j in 0..here {
            f(
                id + j,
                base + j * stride,
                &chunk[j * stride..j * stride + stride + 4],
            );
        }
        id += here;
        ch = next;
    }
}

type StepFn = fn(
    &Plan,
    &Geo,
    usize,
    &mut [u8],
    &mut Alloc,
    &mut Layer,
    &mut Layer,
    &mut TreeOut,
    &mut Scratch,
) -> io::Result<bool>;

/// Step `r`: merges the colliding rows of layer `r` into layer `r + 1`, writing layer `r`'s
/// trees to the file and freeing each bucket once merged.
#[allow(clippy::too_many_arguments)]
fn step(
    plan: &Plan,
    geo: &Geo,
    r: usize,
    mem: &mut [u8],
    alloc: &mut Alloc,
    cur: &mut Layer,
    next: &mut Layer,
    trees: &mut TreeOut,
    s: &mut Scratch,
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
    f(plan, geo, r, mem, alloc, cur, next, trees, s)
}

#[allow(clippy::too_many_arguments)]
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
    plan: &Plan,
    geo: &Geo,
    r: usize,
    mem: &mut [u8],
    alloc: &mut Alloc,
    cur: &mut Layer,
    next: &mut Layer,
    trees: &mut TreeOut,
    s: &mut Scratch,
) -> io::Result<bool> {
    let (c, bb) = if SPEC { (C, BB) } else { (plan.c, plan.bb) };
    let rb = c - bb;
    let pair_bits = if SPEC { 32 - BB } else { geo.pair_bits };
    let ob_shift = 32 - bb.max(1);
    let (cs, cr) = (c, 32 - c);
    let (rpci, tbi, mask, rpco) = (geo.rpc[r], geo.tb[r], geo.mask[r], geo.rpc[r + 1]);
    let (si, hbi, so, hbo) = if SPEC {
        (SI, HBI, SO, HBO)
    } else {
        (geo.stride[r], geo.hb[r], geo.stride[r + 1], geo.hb[r + 1])
    };
    debug_assert!(hbo + 4 <= 4 * WO + 4);
    let (ftb, low_mask) = (
        geo.ftb[r],
        if 8 * tbi >= 32 {
            u32::MAX
        } else {
            (1u32 << (8 * tbi)) - 1
        },
    );
    let tree_mask = byte_mask(ftb);
    let Scratch {
        chains,
        pairs,
        rows,
        base,
        ..
    } = s;
    for b in 0..plan.nb() {
        chains.clear(rb);
        let count = cur.counts[b] as usize;
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
        let mut index = base.get(b).copied().unwrap_or(0);
        {
            let mem: &[u8] = mem;
            for_rows(mem, cur, b, si, rpci, geo.chunk, |id, _, row| {
                if r == 0 {
                    let low = read_u32(row, hbi);
                    index = index.wrapping_add(low.wrapping_sub(index) & low_mask);
                    trees.put(index as u64, ftb);
                } else {
                    trees.put(read_tree(row, hbi, tbi) & tree_mask, ftb);
                }
                let mut x = load::<WI>(row, 0);
                x[WI - 1] &= mask;
                rows[id * WI..id * WI + WI].copy_from_slice(&x);
                let key = (x[0] >> (32 - rb)) as usize;
                let q0 = chains.push_id(key, id as u16);
                list_partners(chains, q0, id as u32, pairs, &mut np);
            });
        }
        // The bucket is copied: its chunks (still in cache) take the next layer's rows.
        cur.free(alloc, mem, b);
        // Phase 2: merge every listed pair.
        for &p in &pairs[..np] {
            let (qi, id) = ((p >> 16) as usize, (p & 0xffff) as usize);
            let rowa: [u32; WI] = rows[qi * WI..qi * WI + WI].try_into().expect("WI");
            let rowb: [u32; WI] = rows[id * WI..id * WI + WI].try_into().expect("WI");
            let Some((x, ob)) = merge_rows(&rowa, &rowb, rb, bb, ob_shift) else {
                continue;
            };
            // Word w of the XOR, zero past the row.
            let xw = |w: usize| if w < WI { x[w] } else { 0 };
            let tree = bucket_tag | pair_code(qi, id) as u64;
            let Some(oat) = next.place(alloc, mem, ob, so, rpco) else {
                return Ok(false);
            };
            // As in layer 0, the last word may run past the row into the next one's bytes
            // (its tree then overwrites them).
            let dst = &mut mem[oat..oat + so + 4];
            for w in 0..WO {
                let v = (x[w] << cs) | (xw(w + 1) >> cr);
                dst[4 * w..4 * w + 4].copy_from_slice(&v.to_be_bytes());
            }
            write_tree(dst, hbo, tree, so - hbo);
            prefetch_after(mem, oat);
        }
    }
    Ok(true)
}

/// Pair codes of the final step: (bucket, slot id a, slot id b) at layer k-1.
type Candidate = (u32, u16, u16);

/// The last step: pairs of layer `k-1` rows equal on all their bits; writes the layer's
/// trees.
fn final_step(
    plan: &Plan,
    geo: &Geo,
    mem: &[u8],
    cur: &Layer,
    trees: &mut TreeOut,
    s: &mut Scratch,
) -> io::Result<Vec<Candidate>> {
    let r = plan.k as usize - 1;
    match plan.hw[r] {
        1 => final_merge::<1>(plan, geo, mem, cur, trees, s),
        2 => final_merge::<2>(plan, geo, mem, cur, trees, s),
        3 => final_merge::<3>(plan, geo, mem, cur, trees, s),
        4 => final_merge::<4>(plan, geo, mem, cur, trees, s),
        _ => unreachable!("the last layer holds 2c - B <= 64 bits"),
    }
}

fn final_merge<const W: usize>(
    plan: &Plan,
    geo: &Geo,
    mem: &[u8],
    cur: &Layer,
    trees: &mut TreeOut,
    s: &mut Scratch,
) -> io::Result<Vec<Candidate>> {
    let r = plan.k as usize - 1;
    let rb = plan.rb;
    let (si, rpc, hb, tb, mask) = (geo.stride[r], geo.rpc[r], geo.hb[r], geo.tb[r], geo.mask[r]);
    // As in `fast`: a branch-free count of each bucket's rows per value of their leading
    // `fb` bits; only rows whose value is shared go through the chains.
    let fb = (rb + 5).min(plan.c + rb).min(16);
    let Scratch {
        chains,
        seen,
        items,
        ..
    } = s;
    seen.clear();
    seen.resize(1 << fb, 0);
    let row = |at: usize| {
        let mut x = load::<W>(mem, at);
        x[W - 1] &= mask;
        x
    };
    let filter = |at: usize| (load::<1>(mem, at)[0] >> (32 - fb)) as usize;
    let mut out = Vec::new();
    for b in 0..plan.nb() {
        chains.clear(rb);
        trees.reserve(cur.counts[b] as usize * 8)?;
        items.clear();
        for_rows(mem, cur, b, si, rpc, geo.chunk, |_, at, _| {
            trees.put(read_tree(mem, at + hb, tb) & byte_mask(tb), tb);
            items.push(at as u32);
            let f = filter(at);
            seen[f] = seen[f].saturating_add(1);
        });
        for (id, &at) in items.iter().enumerate() {
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
                    out.push((b as u32, qi as u16, id as u16));
                }
            }
        }
        for &at in items.iter() {
            seen[filter(at as usize)] = 0;
        }
    }
    Ok(out)
}

/// Where each layer's trees are in the file.
struct Book<'a> {
    plan: &'a Plan,
    geo: &'a Geo,
    file: &'a SpillFile,
    /// File offset of each layer's first tree.
    starts: Vec<u64>,
    /// Rows of each layer in buckets before `b` (`nb + 1` entries per layer).
    prefix: Vec<Vec<u64>>,
}

impl Book<'_> {
    /// The tree of slot `id` of bucket `b` at layer `r`.
    fn tree(&self, r: usize, b: usize, id: usize) -> io::Result<u64> {
        let tb = self.geo.ftb[r];
        let pos = self.prefix[r][b] + id as u64;
        if pos >= self.prefix[r][b + 1] {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "tree pointer past its bucket",
            ));
        }
        let mut v = [0u8; 8];
        self.file
            .read_at(&mut v[..tb], self.starts[r] + pos * tb as u64)?;
        Ok(u64::from_le_bytes(v))
    }
}

/// Tracing candidates back one layer at a time, as in `fast`, reading trees from the file.
#[derive(Default)]
struct Expansion {
    nodes: Vec<u64>,
    below: Vec<u64>,
    sorted: Vec<u64>,
}

impl Expansion {
    /// The leaf indices of candidate `(b, a, c)` in tree order, or `None` when a row occurs
    /// twice in its tree.
    fn leaves(&mut self, book: &Book, b: u32, a: u16, c: u16) -> io::Result<Option<Vec<u32>>> {
        let plan = book.plan;
        let b = (b as u64) << 32;
        self.nodes.clear();
        self.nodes.extend([b | a as u64, b | c as u64]);
        let pair_bits = book.geo.pair_bits;
        let pair_mask = (1u64 << pair_bits) - 1;
        for r in (1..plan.k as usize).rev() {
            self.below.clear();
            for &node in &self.nodes {
                let tree = book.tree(r, (node >> 32) as usize, node as u32 as usize)?;
                let pb = if plan.bb == 0 {
                    0
                } else {
                    (tree >> pair_bits) << 32
                };
                let (x, y) = pair_decode((tree & pair_mask) as u32);
                self.below.extend([pb | x as u64, pb | y as u64]);
            }
            self.sorted.clear();
            self.sorted.extend_from_slice(&self.below);
            self.sorted.sort_unstable();
            if self.sorted.windows(2).any(|w| w[0] == w[1]) {
                return Ok(None);
            }
            std::mem::swap(&mut self.nodes, &mut self.below);
        }
        self.nodes
            .iter()
            .map(|&node| Ok(book.tree(0, (node >> 32) as usize, node as u32 as usize)? as u32))
            .collect::<io::Result<Vec<u32>>>()
            .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exactly the reference solver's solutions on small parameters, with the pool, file
    /// and stale rows of earlier solves reused; too few slot ids make the solve give up
    /// (the caller then runs the general solver) instead of dropping rows.
    #[test]
    fn matches_the_reference_solver_and_gives_up_rather_than_drop_rows() {
        let p = crate::Params::new(48, 5).unwrap();
        let mut keep = None;
        for nonce in 0..16u128 {
            let gen =
                crate::HashGen::new(p, b"ZcashPoW", b"em", &crate::nonce_from_int(nonce)).unwrap();
            let want = crate::reference::solve(&gen);
            let mut plan = Plan::new(p, 1).unwrap();
            let found = solve(&gen, &plan, None, &mut keep)
                .unwrap()
                .expect("ids suffice");
            assert_eq!(found.rows[0], 512);
            let mut stats = crate::SolveStats::default();
            assert_eq!(
                crate::solver::finish(found.cands, &mut stats),
                want,
                "nonce {nonce}"
            );
            plan.cap = 4;
            plan.extra = 0;
            assert!(solve(&gen, &plan, None, &mut keep).unwrap().is_none());
        }
    }

    /// [`Plan::wide`] plans (trees of more than 4 bytes) on small parameters: exactly the
    /// reference solver's solutions, with the pool and file reused; (144,5) takes the wide
    /// plan with its 19/18-byte rows and 5-byte trees, (200,9) keeps `fast`'s plan.
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
                let found = solve(&gen, &plan, None, &mut keep)
                    .unwrap()
                    .expect("ids suffice");
                let mut stats = crate::SolveStats::default();
                assert_eq!(
                    crate::solver::finish(found.cands, &mut stats),
                    want,
                    "({n},{k}) B={bb} nonce {nonce}"
                );
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
}
