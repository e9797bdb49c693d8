//! A multi-threaded Wagner solver that finds every solution of one `(input, nonce)`.
//!
//! Layer `r` (r = 0..k-1) holds one row per partial tree of `2^r` strings whose XOR is zero on
//! digits `0..r`. Rows are stored bucket-major by the leading `B` bits of digit `r` (Tromp's
//! bucket sort), so a row keeps only the bits `[r*c + B, n)` (c = n/(k+1)) left-aligned in
//! big-endian u32 words: the rest of digit `r` is the top `c - B` bits of word 0. Each thread
//! writes its own region, so threads never share a slot:
//!
//! ```text
//!  rows:  | thread 0: bucket 0 [cap slots] | bucket 1 | ... | thread 1: bucket 0 | ... |
//!  table: one entry per slot: layer 0 -> string index; layer r>0 -> code of the pair
//!         (bucket, slot a, slot b) of layer r-1 that was merged: bucket<<2u | a<<u | b
//! ```
//!
//! Step `r` groups each bucket by the rest of digit `r`, merges every pair of a group (all
//! pairs, so 3-way and larger collisions give all their trees) and scatters the XOR shifted
//! by `c` bits into the buckets of digit `r+1`. The last step pairs rows equal on both final
//! digits. Candidates are traced back through the index-pointer tables to `2^k` indices,
//! put in the canonical order (left subtree's first index below the right one's) and kept
//! when all indices are distinct.
//!
//! Memory modes ([`Mode`]): `Full` keeps every table; `Pr { height: h }` keeps none of the
//! tables of layers `0..h` and recomputes each by re-running the layers below it while
//! tracing back (the CIP "post-retrieval" trade-off: `h(h+1)/2` extra layer steps); `Em`
//! spills every table to a temporary file and streams it back. Where `fast` has a
//! plan, `Full` runs it; `Em` runs `em` (the CIP-EM layout, multi-threaded) where it has
//! one, and so does `Full` where `fast`'s buckets would be too small ((144,5), (192,7)),
//! with the trees in memory, and `Pr` wherever `em` has a plan (the trees of the layers
//! from the height on in memory, the others rebuilt by re-running `em`'s layers). Elsewhere,
//! or when a fast path gives up, the general solver runs; [`solve_general`] runs it alone
//! (`Pr` at height 0 is its `full`).
#![deny(unsafe_code)]

use crate::hash::{to_words, HashGen, BLOCK_BYTES};
use crate::spill::{SpillFile, SpilledTable};
use proofkit_core::memory::{LargeBuffer, PagePolicy};
use std::path::PathBuf;

/// About `2^9` rows per bucket (2^12 buckets for (200,9), as in Tromp's solvers): the rest
/// of a digit below the bucket bits is then at most 8 bits, the size of the chain heads.
const ROWS_PER_BUCKET_BITS: u32 = 9;

/// How index-pointer tables are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// All tables in memory.
    Full,
    /// Tables of layers below `height` are dropped and recomputed when tracing back.
    Pr { height: u32 },
    /// Tables spilled to a temporary file.
    Em,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Full => f.write_str("full"),
            Mode::Pr { height } => write!(f, "pr(h={height})"),
            Mode::Em => f.write_str("em"),
        }
    }
}

/// Solver settings.
#[derive(Clone, Debug)]
pub struct SolverConfig {
    pub mode: Mode,
    /// Worker threads (at least 1).
    pub threads: usize,
    /// Directory for the `em` spill file (system temp dir when `None`).
    pub spill_dir: Option<PathBuf>,
}

impl Default for SolverConfig {
    fn default() -> Self {
        SolverConfig {
            mode: Mode::Full,
            threads: 1,
            spill_dir: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SolveError {
    #[error("parameters {0} need 2^{1} strings; this solver handles at most 2^26")]
    TooLarge(crate::Params, u32),
    #[error("post-retrieval height {height} must be below k = {k}")]
    BadHeight { height: u32, k: u32 },
    #[error("layer {layer} grew to {rows} rows (expected about {expected}); giving up")]
    Blowup {
        layer: u32,
        rows: usize,
        expected: usize,
    },
    #[error("spill file: {0}")]
    Io(#[from] std::io::Error),
}

/// Counters of one run.
#[derive(Clone, Debug, Default)]
pub struct SolveStats {
    /// Rows per layer (0..k-1) in the main run.
    pub layer_rows: Vec<usize>,
    /// Pairs equal on the final digits.
    pub candidates: usize,
    /// Candidates rejected for repeated indices.
    pub duplicate_rejected: usize,
    /// Layer steps run again to rebuild dropped tables (`pr` mode).
    pub recomputed_steps: usize,
    /// Layers re-run with a larger bucket capacity after an overflow.
    pub capacity_retries: usize,
    /// The solve ran on the fast path ([`crate::fast`]).
    pub fast_path: bool,
    /// The fast path overflowed a bucket region and the general solver ran instead.
    pub fast_overflow: bool,
}

/// An index-pointer table: one entry per slot of a layer, 4 or 8 bytes wide, in a large-page
/// buffer (the scattered writes of a step touch thousands of pages at once).
pub struct PtrTable {
    buf: LargeBuffer,
    len: usize,
    wide: bool,
}

fn large(bytes: usize) -> LargeBuffer {
    large_with(bytes, PagePolicy::Transparent)
}

fn large_with(bytes: usize, policy: PagePolicy) -> LargeBuffer {
    // Mapping fails only when the machine is out of address space; there is no smaller
    // fallback that would let the solver go on.
    LargeBuffer::new(bytes.max(1), policy).expect("cannot map solver memory")
}

impl PtrTable {
    fn zeroed(len: usize, wide: bool) -> Self {
        // 4 KiB pages: the slack slots of each bucket are never touched, so they cost no memory.
        PtrTable {
            buf: large_with(len * if wide { 8 } else { 4 }, PagePolicy::SmallOnly),
            len,
            wide,
        }
    }

    #[inline]
    pub fn get(&self, i: usize) -> u64 {
        if self.wide {
            self.buf.as_u64_slice()[i]
        } else {
            self.buf.as_u32_slice()[i] as u64
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes per entry.
    pub fn width(&self) -> usize {
        if self.wide {
            8
        } else {
            4
        }
    }
}

/// Geometry of one layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    threads: usize,
    bucket_bits: u32,
    /// Slots per (thread, bucket) segment.
    cap: usize,
    /// u32 words per row.
    stride: usize,
}

impl Layout {
    fn nb(&self) -> usize {
        1 << self.bucket_bits
    }
    fn region_slots(&self) -> usize {
        self.nb() * self.cap
    }
    fn slots(&self) -> usize {
        self.threads * self.region_slots()
    }
    /// Bits of a slot number within a bucket across all threads (`thread * cap + slot`).
    fn u_bits(&self) -> u32 {
        usize::BITS - (self.threads * self.cap - 1).leading_zeros()
    }
    fn code_bits(&self) -> u32 {
        self.bucket_bits + 2 * self.u_bits()
    }
    #[inline]
    fn pos(&self, b: usize, u: usize) -> usize {
        let (t, s) = (u / self.cap, u % self.cap);
        (t * self.nb() + b) * self.cap + s
    }
    /// The two slot positions of a pair code.
    #[inline]
    fn decode(&self, code: u64) -> (usize, usize) {
        let ub = self.u_bits();
        let mask = (1u64 << ub) - 1;
        let b = (code >> (2 * ub)) as usize;
        (
            self.pos(b, ((code >> ub) & mask) as usize),
            self.pos(b, (code & mask) as usize),
        )
    }
}

struct Layer {
    layout: Layout,
    rows: LargeBuffer,
    /// Rows per (thread, bucket) segment; at most `cap` once a step succeeded.
    counts: Vec<u32>,
    /// Slot-field width of this layer's pair codes (the layer below's `u_bits`; 0 for layer 0).
    child_ub: u32,
}

impl Layer {
    fn total(&self) -> usize {
        self.counts.iter().map(|&c| c as usize).sum()
    }
}

/// The solver for one `(params, pers, input, nonce)`.
pub struct Solver<'a> {
    gen: &'a HashGen,
    cfg: SolverConfig,
    n: u32,
    k: u32,
    c: u32,
    bucket_bits: u32,
    /// Expected rows per layer: `2^(c+1)`.
    expected: usize,
}

fn words_for(bits: u32) -> usize {
    (bits as usize).div_ceil(32).max(1)
}

fn initial_cap(expected: usize, threads: usize, nb: usize) -> usize {
    let avg = expected as f64 / (threads * nb) as f64;
    (avg + 5.0 * avg.sqrt() + 8.0).ceil() as usize
}

/// Finds every solution; see [`Solver`].
pub fn solve(gen: &HashGen, cfg: &SolverConfig) -> Result<(Vec<Vec<u32>>, SolveStats), SolveError> {
    solve_in(gen, cfg, &mut Workspace::default())
}

/// As [`solve`], keeping the fast path's memory in `ws` for the next solve (a loop over
/// nonces then maps and faults in its ~135 MB for (200,9) once, not per nonce).
pub fn solve_in(
    gen: &HashGen,
    cfg: &SolverConfig,
    ws: &mut Workspace,
) -> Result<(Vec<Vec<u32>>, SolveStats), SolveError> {
    Solver::new(gen, cfg.clone())?.run_in(ws)
}

/// The general solver alone, whatever the parameters' fast paths: what [`solve`] runs where
/// no fast path has a plan or one gives up, exposed to cross-check the fast paths against
/// (it shares their definition of a solution, not their layout or arithmetic).
pub fn solve_general(
    gen: &HashGen,
    cfg: &SolverConfig,
) -> Result<(Vec<Vec<u32>>, SolveStats), SolveError> {
    Solver::new(gen, cfg.clone())?.run_general(SolveStats::default())
}

/// Memory kept between solves (see [`solve_in`]); empty until the first solve.
#[derive(Default)]
pub struct Workspace {
    heaps: Option<[LargeBuffer; 2]>,
    em: Option<crate::em::EmSpace>,
}

impl<'a> Solver<'a> {
    pub fn new(gen: &'a HashGen, mut cfg: SolverConfig) -> Result<Self, SolveError> {
        let p = gen.params();
        if p.index_bits() > 26 {
            return Err(SolveError::TooLarge(p, p.index_bits()));
        }
        if let Mode::Pr { height } = cfg.mode {
            if height >= p.k() {
                return Err(SolveError::BadHeight { height, k: p.k() });
            }
        }
        cfg.threads = cfg.threads.max(1);
        let c = p.collision_bits();
        // About 2^9 rows per bucket, as in Tromp's solvers (2^12 buckets for (200,9)).
        let bucket_bits = (c + 1).saturating_sub(ROWS_PER_BUCKET_BITS).min(c);
        Ok(Solver {
            gen,
            cfg,
            n: p.n(),
            k: p.k(),
            c,
            bucket_bits,
            expected: 1 << (c + 1),
        })
    }

    fn layout(&self, r: u32, cap: usize) -> Layout {
        Layout {
            threads: self.cfg.threads,
            bucket_bits: self.bucket_bits,
            cap,
            stride: words_for(self.n - r * self.c - self.bucket_bits),
        }
    }

    /// Splits bucket range among threads.
    fn bucket_range(&self, t: usize) -> std::ops::Range<usize> {
        let nb = 1usize << self.bucket_bits;
        let th = self.cfg.threads;
        (t * nb / th)..((t + 1) * nb / th)
    }

    /// Layer 0: every string, bucketed by the top bits of digit 0; the table holds indices.
    fn layer0(&self, stats: &mut SolveStats) -> (Layer, PtrTable) {
        let mut spare: Option<LargeBuffer> = None;
        let th = self.cfg.threads;
        let nb = 1usize << self.bucket_bits;
        let mut cap = initial_cap(self.expected, th, nb);
        loop {
            let layout = self.layout(0, cap);
            let mut rows = reuse(spare.take(), layout.slots() * layout.stride * 4);
            let mut table = PtrTable::zeroed(layout.slots(), false);
            let mut counts = vec![0u32; th * nb];
            let blocks = self.gen.num_blocks() as usize;
            let work = |t: usize, rows: &mut [u32], table: &mut [u32], counts: &mut [u32]| {
                self.fill_layer0(
                    layout,
                    t * blocks / th..(t + 1) * blocks / th,
                    rows,
                    table,
                    counts,
                )
            };
            let rs = layout.region_slots();
            run_regions(
                th,
                &mut rows.as_u32_slice_mut()[..rs * th * layout.stride],
                rs * layout.stride,
                &mut table.buf.as_u32_slice_mut()[..rs * th],
                rs,
                &mut counts,
                nb,
                work,
            );
            let max = counts.iter().copied().max().unwrap_or(0) as usize;
            if max <= cap {
                return (
                    Layer {
                        layout,
                        rows,
                        counts,
                        child_ub: 0,
                    },
                    table,
                );
            }
            spare = Some(rows);
            stats.capacity_retries += 1;
            cap = max + max / 8 + 8;
        }
    }

    fn fill_layer0(
        &self,
        layout: Layout,
        blocks: std::ops::Range<usize>,
        rows: &mut [u32],
        table: &mut [u32],
        counts: &mut [u32],
    ) {
        let p = self.gen.params();
        let per = p.indices_per_hash() as usize;
        let sl = p.string_len();
        let stride = layout.stride;
        let shift = 32 - self.bucket_bits;
        let mut buf = vec![[0u8; BLOCK_BYTES]; 64];
        let mut full = vec![0u32; (self.n as usize).div_ceil(32) + 1];
        let mut words = vec![0u32; stride];
        let bb = self.bucket_bits;
        let mut g = blocks.start;
        while g < blocks.end {
            let m = (blocks.end - g).min(buf.len());
            self.gen.blocks(g as u32, &mut buf[..m]);
            for (j, blk) in buf[..m].iter().enumerate() {
                for s in 0..per {
                    let index = ((g + j) * per + s) as u64;
                    if index >= p.num_indices() {
                        break;
                    }
                    to_words(&blk[s * sl..(s + 1) * sl], &mut full);
                    let b = if bb == 0 {
                        0
                    } else {
                        (full[0] >> shift) as usize
                    };
                    // The bucket bits are implied by the position: rows start after them.
                    for (w, o) in words.iter_mut().enumerate() {
                        *o = if bb == 0 {
                            full[w]
                        } else {
                            (full[w] << bb) | (full[w + 1] >> (32 - bb))
                        };
                    }
                    let slot = counts[b] as usize;
                    counts[b] += 1;
                    if slot < layout.cap {
                        let at = b * layout.cap + slot;
                        rows[at * stride..(at + 1) * stride].copy_from_slice(&words);
                        table[at] = index as u32;
                    }
                }
            }
            g += m;
        }
    }

    /// Step `r` (0 <= r < k-1): merges colliding rows of layer `r` into layer `r + 1`.
    fn step(
        &self,
        inp: &Layer,
        inp_table: &PtrTable,
        r: u32,
        stats: &mut SolveStats,
        mut spare: Option<LargeBuffer>,
    ) -> Result<(Layer, PtrTable), SolveError> {
        let th = self.cfg.threads;
        let nb = 1usize << self.bucket_bits;
        // Layers grow a little at the top (trees repeating an index deeper than one level are
        // only removed at the end): size the next layer from this one to avoid re-runs.
        let estimate = (inp.total() as f64 * 1.06).max(self.expected as f64) as usize;
        let mut cap = initial_cap(estimate, th, nb);
        let wide = inp.layout.code_bits() > 32;
        loop {
            let layout = self.layout(r + 1, cap);
            let mut rows = reuse(spare.take(), layout.slots() * layout.stride * 4);
            let mut table = PtrTable::zeroed(layout.slots(), wide);
            let mut counts = vec![0u32; th * nb];
            let rs = layout.region_slots();
            let row_words = &mut rows.as_u32_slice_mut()[..rs * th * layout.stride];
            match wide {
                false => {
                    let tab = &mut table.buf.as_u32_slice_mut()[..rs * th];
                    let work = |t, rows: &mut [u32], tab: &mut [u32], counts: &mut [u32]| {
                        self.merge(
                            inp,
                            inp_table,
                            r,
                            layout,
                            t,
                            rows,
                            tab,
                            counts,
                            &mut |_, _, _| {},
                        )
                    };
                    run_regions(
                        th,
                        row_words,
                        rs * layout.stride,
                        tab,
                        rs,
                        &mut counts,
                        nb,
                        work,
                    );
                }
                true => {
                    let tab = &mut table.buf.as_u64_slice_mut()[..rs * th];
                    let work = |t, rows: &mut [u32], tab: &mut [u64], counts: &mut [u32]| {
                        self.merge(
                            inp,
                            inp_table,
                            r,
                            layout,
                            t,
                            rows,
                            tab,
                            counts,
                            &mut |_, _, _| {},
                        )
                    };
                    run_regions(
                        th,
                        row_words,
                        rs * layout.stride,
                        tab,
                        rs,
                        &mut counts,
                        nb,
                        work,
                    );
                }
            }
            let max = counts.iter().copied().max().unwrap_or(0) as usize;
            if max <= cap {
                return Ok((
                    Layer {
                        layout,
                        rows,
                        counts,
                        child_ub: inp.layout.u_bits(),
                    },
                    table,
                ));
            }
            let total: usize = counts.iter().map(|&c| c as usize).sum();
            if total > 8 * self.expected {
                return Err(SolveError::Blowup {
                    layer: r + 1,
                    rows: total,
                    expected: self.expected,
                });
            }
            stats.capacity_retries += 1;
            cap = max + max / 8 + 8;
            spare = Some(rows);
        }
    }

    /// The final step: pairs of layer `k-1` rows equal on the last two digits, as pair codes.
    fn final_step(&self, inp: &Layer, inp_table: &PtrTable) -> Vec<u64> {
        let th = self.cfg.threads;
        let mut found: Vec<Vec<u64>> = vec![Vec::new(); th];
        let r = self.k - 1;
        let dummy = self.layout(self.k, 1);
        std::thread::scope(|s| {
            for (t, out) in found.iter_mut().enumerate() {
                let mut job = move || {
                    let mut none = [0u32; 0];
                    let mut nc = [0u32; 0];
                    self.merge(
                        inp,
                        inp_table,
                        r,
                        dummy,
                        t,
                        &mut [],
                        &mut none,
                        &mut nc,
                        &mut |_, _, code| out.push(code),
                    );
                };
                if th == 1 {
                    job();
                } else {
                    s.spawn(job);
                }
            }
        });
        found.concat()
    }

    /// Merges the buckets of thread `t` of layer `r`. For a non-final layer, writes rows of
    /// layer `r+1` into this thread's region; for the final one, reports each pair code.
    #[allow(clippy::too_many_arguments)]
    fn merge<P: PtrWord>(
        &self,
        inp: &Layer,
        inp_table: &PtrTable,
        r: u32,
        out: Layout,
        t: usize,
        rows: &mut [u32],
        table: &mut [P],
        counts: &mut [u32],
        found: &mut dyn FnMut(usize, usize, u64),
    ) {
        macro_rules! go {
            ($($w:literal)*) => {
                match inp.layout.stride {
                    $($w => self.merge_w::<P, $w>(inp, inp_table, r, out, t, rows, table, counts, found),)*
                    _ => self.merge_w::<P, 0>(inp, inp_table, r, out, t, rows, table, counts, found),
                }
            };
        }
        go!(1 2 3 4 5 6 7 8)
    }

    /// [`Solver::merge`] for rows of `W` words (`W = 0`: the stride read at run time).
    #[allow(clippy::too_many_arguments)]
    fn merge_w<P: PtrWord, const W: usize>(
        &self,
        inp: &Layer,
        inp_table: &PtrTable,
        r: u32,
        out: Layout,
        t: usize,
        rows: &mut [u32],
        table: &mut [P],
        counts: &mut [u32],
        found: &mut dyn FnMut(usize, usize, u64),
    ) {
        const NONE: u32 = u32::MAX;
        let il = inp.layout;
        let fin = r == self.k - 1;
        let c = self.c;
        let bb = self.bucket_bits;
        let si = if W == 0 { il.stride } else { W };
        let so = out.stride;
        let ub = il.u_bits();
        // Rows of one bucket are chained by the rest of digit r below the bucket bits (at most
        // 8 bits, see `Solver::new`); the last step also compares digit k.
        let rest_bits = c - bb;
        let check_dupes = r >= 1;
        let out_shift = 32 - bb;
        let nb = il.nb();
        let in_rows = inp.rows.as_u32_slice();
        let per_bucket = il.cap * il.threads;
        let mut head = vec![NONE; 1 << rest_bits];
        let mut next = vec![NONE; per_bucket];
        let mut pos_of = vec![0u32; per_bucket];
        let mut u_of = vec![0u32; per_bucket];
        let mut last_of = vec![0u32; if fin { per_bucket } else { 0 }];
        let mut x = vec![0u32; si + 1];
        for b in self.bucket_range(t) {
            head.fill(NONE);
            let mut m = 0usize;
            for tt in 0..il.threads {
                let cnt = inp.counts[tt * nb + b] as usize;
                let base = (tt * nb + b) * il.cap;
                for s in 0..cnt {
                    let pos = base + s;
                    let w0 = in_rows[pos * si];
                    let key = (w0 >> (32 - rest_bits)) as usize;
                    let last = if fin {
                        crate::verify::bits_at(&in_rows[pos * si..(pos + 1) * si], rest_bits, c)
                    } else {
                        0
                    };
                    let u = tt * il.cap + s;
                    let mut q = head[key];
                    while q != NONE {
                        let qi = q as usize;
                        q = next[qi];
                        if fin && last_of[qi] != last {
                            continue;
                        }
                        let pa = pos_of[qi] as usize;
                        if check_dupes
                            && shares_child(inp_table.get(pa), inp_table.get(pos), inp.child_ub)
                        {
                            continue;
                        }
                        let code = ((b as u64) << (2 * ub)) | ((u_of[qi] as u64) << ub) | u as u64;
                        if fin {
                            found(pa, pos, code);
                            continue;
                        }
                        let ra = &in_rows[pa * si..pa * si + si];
                        let rb = &in_rows[pos * si..pos * si + si];
                        let mut any = 0u32;
                        for w in 0..si {
                            x[w] = ra[w] ^ rb[w];
                            any |= if w == 0 { x[w] << rest_bits } else { x[w] };
                        }
                        // Identical rows (the same strings paired in different orders) XOR to
                        // zero everywhere: the result repeats indices and would collide with
                        // every other such row at every later layer. Drop it, as Tromp does.
                        if any == 0 {
                            continue;
                        }
                        let ob = if bb == 0 {
                            0
                        } else {
                            (((x[0] << rest_bits) | (x[1] >> (32 - rest_bits))) >> out_shift)
                                as usize
                        };
                        let slot = counts[ob] as usize;
                        counts[ob] += 1;
                        if slot < out.cap {
                            let at = ob * out.cap + slot;
                            let dst = &mut rows[at * so..at * so + so];
                            for w in 0..so {
                                dst[w] = (x[w] << c) | (x[w + 1] >> (32 - c));
                            }
                            table[at] = P::from_u64(code);
                        }
                    }
                    next[m] = head[key];
                    head[key] = m as u32;
                    pos_of[m] = pos as u32;
                    u_of[m] = u as u32;
                    if fin {
                        last_of[m] = last;
                    }
                    m += 1;
                }
            }
        }
    }

    /// Runs hash generation and steps up to layer `j`, returning that layer's table only.
    fn rebuild_table(&self, j: u32, stats: &mut SolveStats) -> Result<PtrTable, SolveError> {
        let mut scratch = SolveStats::default();
        let (mut layer, mut table) = self.layer0(&mut scratch);
        let mut spare = None;
        for r in 0..j {
            let (next, next_table) = self.step(&layer, &table, r, &mut scratch, spare.take())?;
            spare = Some(std::mem::replace(&mut layer, next).rows);
            table = next_table;
            stats.recomputed_steps += 1;
        }
        stats.recomputed_steps += 1;
        Ok(table)
    }

    pub fn run(&self) -> Result<(Vec<Vec<u32>>, SolveStats), SolveError> {
        self.run_in(&mut Workspace::default())
    }

    /// [`Solver::run`] with memory kept in `ws` between solves.
    pub fn run_in(&self, ws: &mut Workspace) -> Result<(Vec<Vec<u32>>, SolveStats), SolveError> {
        let mut stats = SolveStats::default();
        let p = self.gen.params();
        let th = self.cfg.threads;
        // Which fast path runs: `fast` for `full` where it has a plan, else `em`'s layout
        // with its trees in memory ((144,5), (192,7)); `em`'s layout (trees in the file)
        // for `em`; for `pr`, `em`'s layout with the trees of the layers from the height on
        // in memory (the pool holds one layer of rows, so memory falls with the height as
        // in the CIP paper's APR curve; the general solver keeps two layers of rows).
        let wide = !crate::em::fast_is_useful(p) && crate::em::plan(p).is_some();
        let em_store = match self.cfg.mode {
            Mode::Full => match crate::fast::Plan::new(p, th).filter(|_| !wide) {
                Some(plan) => {
                    match crate::fast::solve(self.gen, &plan, &mut ws.heaps) {
                        Some(found) => {
                            let sols = finish_found(found, &mut stats);
                            return Ok((sols, stats));
                        }
                        None => stats.fast_overflow = true,
                    }
                    None
                }
                None => Some((crate::em::Store::Memory, 0)),
            },
            Mode::Em => Some((crate::em::Store::File(self.cfg.spill_dir.as_deref()), 0)),
            Mode::Pr { height } => Some((crate::em::Store::Memory, height as usize)),
        };
        if let Some((store, height)) = em_store {
            if let Some(plan) = crate::em::plan(p) {
                match crate::em::solve(self.gen, &plan, store, th, height, &mut ws.em)? {
                    Some(found) => {
                        let sols = finish_found(found, &mut stats);
                        return Ok((sols, stats));
                    }
                    None => stats.fast_overflow = true,
                }
            }
        }
        self.run_general(stats)
    }

    /// The general solver alone (what [`Solver::run_in`] falls back to).
    fn run_general(
        &self,
        mut stats: SolveStats,
    ) -> Result<(Vec<Vec<u32>>, SolveStats), SolveError> {
        let k = self.k;
        let mut spill = match self.cfg.mode {
            Mode::Em => Some(SpillFile::create(self.cfg.spill_dir.as_deref())?),
            _ => None,
        };
        let keep_below = match self.cfg.mode {
            Mode::Pr { height } => height,
            _ => 0,
        };
        let mut stored: Vec<Stored> = Vec::with_capacity(k as usize);
        let mut layouts: Vec<Layout> = Vec::with_capacity(k as usize);
        let (mut layer, mut table) = self.layer0(&mut stats);
        let mut spare = None;
        let store =
            |tab: PtrTable, j: u32, spill: &mut Option<SpillFile>| -> Result<Stored, SolveError> {
                Ok(match spill {
                    Some(f) => Stored::Spilled(f.write(&tab)?),
                    None if j < keep_below => Stored::Dropped,
                    None => Stored::Mem(tab),
                })
            };
        for r in 0..k - 1 {
            stats.layer_rows.push(layer.total());
            layouts.push(layer.layout);
            let (next, next_table) = self.step(&layer, &table, r, &mut stats, spare.take())?;
            spare = Some(std::mem::replace(&mut layer, next).rows);
            stored.push(store(
                std::mem::replace(&mut table, next_table),
                r,
                &mut spill,
            )?);
        }
        stats.layer_rows.push(layer.total());
        layouts.push(layer.layout);
        let codes = self.final_step(&layer, &table);
        drop(layer);
        drop(spare);
        stored.push(store(table, k - 1, &mut spill)?);
        stats.candidates = codes.len();

        // Trace back: positions at layer k-1, two per candidate, in tree order.
        let top = layouts[k as usize - 1];
        let mut nodes: Vec<u64> = Vec::with_capacity(codes.len() * 2);
        for &code in &codes {
            let (a, b) = top.decode(code);
            nodes.push(a as u64);
            nodes.push(b as u64);
        }
        for j in (0..k).rev() {
            let values = match std::mem::replace(&mut stored[j as usize], Stored::Dropped) {
                Stored::Mem(tab) => nodes
                    .iter()
                    .map(|&p| tab.get(p as usize))
                    .collect::<Vec<u64>>(),
                Stored::Spilled(s) => spill
                    .as_mut()
                    .expect("spilled tables imply a spill file")
                    .lookup(s, &nodes)?,
                Stored::Dropped => {
                    let tab = self.rebuild_table(j, &mut stats)?;
                    nodes.iter().map(|&p| tab.get(p as usize)).collect()
                }
            };
            if j == 0 {
                nodes = values;
            } else {
                let below = layouts[j as usize - 1];
                nodes = values
                    .iter()
                    .flat_map(|&code| {
                        let (a, b) = below.decode(code);
                        [a as u64, b as u64]
                    })
                    .collect();
            }
        }
        let len = 1usize << k;
        let cands = nodes
            .chunks(len)
            .map(|cand| cand.iter().map(|&v| v as u32).collect())
            .collect();
        let sols = finish(cands, &mut stats);
        Ok((sols, stats))
    }
}

/// The solutions of a fast-path (`full` or `em`) solve, with its counts in `stats`.
fn finish_found(found: crate::fast::Found, stats: &mut SolveStats) -> Vec<Vec<u32>> {
    stats.fast_path = true;
    stats.layer_rows = found.rows;
    stats.candidates = found.cands.len() + found.repeated;
    stats.duplicate_rejected = found.repeated;
    stats.recomputed_steps += found.recomputed_steps;
    finish(found.cands, stats)
}

/// Candidates (index lists in tree order) to solutions: canonical order, distinct indices,
/// sorted and without repeats.
pub(crate) fn finish(cands: Vec<Vec<u32>>, stats: &mut SolveStats) -> Vec<Vec<u32>> {
    let mut sols = Vec::new();
    for mut idx in cands {
        canonicalize(&mut idx);
        let mut sorted = idx.clone();
        sorted.sort_unstable();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            stats.duplicate_rejected += 1;
            continue;
        }
        sols.push(idx);
    }
    sols.sort_unstable();
    sols.dedup();
    sols
}

enum Stored {
    Mem(PtrTable),
    Spilled(SpilledTable),
    Dropped,
}

/// True when two rows of layer `r >= 1`, given by their pair codes into layer `r-1` (slot
/// fields of `ub` bits), were built from a common row of layer `r-1`: merging them would
/// repeat indices.
#[inline]
fn shares_child(ca: u64, cb: u64, ub: u32) -> bool {
    let mask = (1u64 << ub) - 1;
    if ca >> (2 * ub) != cb >> (2 * ub) {
        return false;
    }
    let (a1, a2) = ((ca >> ub) & mask, ca & mask);
    let (b1, b2) = ((cb >> ub) & mask, cb & mask);
    a1 == b1 || a1 == b2 || a2 == b1 || a2 == b2
}

/// Puts a tree of indices in canonical order: at every node the subtree with the smaller
/// first index goes left.
pub fn canonicalize(idx: &mut [u32]) {
    let mut half = 1;
    while half < idx.len() {
        for block in idx.chunks_mut(2 * half) {
            if block[half] < block[0] {
                let (l, r) = block.split_at_mut(half);
                l.swap_with_slice(r);
            }
        }
        half *= 2;
    }
}

/// `buf` when it holds at least `bytes`, else a new buffer.
fn reuse(buf: Option<LargeBuffer>, bytes: usize) -> LargeBuffer {
    match buf {
        Some(b) if b.len() >= bytes => b,
        _ => large(bytes),
    }
}

/// Table entry types.
pub trait PtrWord: Copy + Send + Sync {
    fn from_u64(v: u64) -> Self;
}

impl PtrWord for u32 {
    #[inline]
    fn from_u64(v: u64) -> Self {
        v as u32
    }
}

impl PtrWord for u64 {
    #[inline]
    fn from_u64(v: u64) -> Self {
        v
    }
}

/// Runs `work(t, rows_t, table_t, counts_t)` for every thread over disjoint regions.
#[allow(clippy::too_many_arguments)]
fn run_regions<P: Send, F>(
    threads: usize,
    rows: &mut [u32],
    rows_per: usize,
    table: &mut [P],
    table_per: usize,
    counts: &mut [u32],
    counts_per: usize,
    work: F,
) where
    F: Fn(usize, &mut [u32], &mut [P], &mut [u32]) + Sync,
{
    if threads == 1 {
        work(0, rows, table, counts);
        return;
    }
    std::thread::scope(|s| {
        let work = &work;
        for (t, ((r, tb), c)) in rows
            .chunks_mut(rows_per)
            .zip(table.chunks_mut(table_per))
            .zip(counts.chunks_mut(counts_per))
            .enumerate()
        {
            s.spawn(move || work(t, r, tb, c));
        }
    });
}
