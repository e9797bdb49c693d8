//! The fast path of the `full` mode: a Wagner solver whose index pointers live inside the
//! slots of two alternating heaps, so that memory is two layers of rows and nothing else.
//!
//! Facts taken from Tromp's solvers (tromp/equihash, `equi_miner.h`), implemented anew:
//! rows of layer `r` live in heap `r % 2`, bucketed by the leading `B` bits of digit `r`;
//! a slot holds the row's remaining hash bits at its start and the tree words (pair codes) of
//! the layers stored in that heap at its end, one word per layer, growing leftwards. A heap's
//! slot stride is the largest `hash words + 1 + r/2` over its layers ([`Plan::new`]), so
//! writing layer `r + 2` never overwrites the tree words of layers `r, r - 2, ...` (rows
//! shrink by `2c` bits every two layers, so the stride is that of layer 0 or 1 in practice):
//!
//! ```text
//!  slot of heap 0 for (200,9):  layer 0: h h h h h h t0
//!                               layer 2: h h h h h t2 t0
//!                               layer 4: h h h h t4 t2 t0
//!  tree word (layer r >= 1): bucket of the pair (B bits) | pair(slot a, slot b)
//!  pair(a, b) = b(b-1)/2 + a for a < b (Cantor's pairing, so that 2 slot ids of S values
//!  take about 2 log2 S - 1 bits); layer 0: the string index
//! ```
//!
//! Heaps are split by thread: thread `t` owns slots `[t*cap, (t+1)*cap)` of every bucket (as
//! one contiguous region), so threads write without atomics; a bucket's slot id is
//! `t*cap + s`. Rows past a region's capacity go to the layer's overflow store, named by the
//! slot ids left above `threads*cap` that pair codes can still hold; only when those run out
//! does [`solve`] return `None` (the caller then runs the general solver; nothing is ever
//! dropped). Parameters whose pair codes do not fit 32 bits have no plan and use the general
//! solver.
//!
//! As in the general solver, every pair of a collision group is merged (3-way and larger
//! collisions give all their trees) and pairs of identical rows (XOR zero on every remaining
//! bit) are not kept.
#![deny(unsafe_code)]

#[cfg(target_arch = "x86_64")]
mod avx512;
/// Without x86-64 the portable kernel only.
#[cfg(not(target_arch = "x86_64"))]
mod avx512 {
    pub(super) fn available() -> bool {
        false
    }
    pub(super) use super::{fill_layer0, merge};
}

use crate::hash::{HashGen, BLOCK_BYTES};
use proofkit_core::memory::{LargeBuffer, PagePolicy};
use std::sync::atomic::{AtomicBool, Ordering};

/// Rest bits (chain heads per bucket: `2^R`) at most this.
pub(crate) const MAX_REST_BITS: u32 = 10;
/// Hash words per row at most this (n - B <= 256).
pub(crate) const MAX_WORDS: usize = 8;
pub(crate) const NIL: u16 = u16::MAX;

/// Lists the pairs `(older id << 16) | newer` of a row just pushed to its chain (`q0`: the
/// chain's previous row, `NIL` if none) into `pairs` from `np`: the first three partners
/// without branches (about one partner per row, so most rows need no loop), the rest in a
/// loop; `pairs` grows when needed. Shared by `full`'s and `em`'s pairing phase.
#[inline(always)]
pub(crate) fn list_partners(
    chains: &Chains,
    q0: u16,
    newer: u32,
    pairs: &mut Vec<u32>,
    np: &mut usize,
) {
    if *np + 3 > pairs.len() {
        pairs.resize(2 * pairs.len() + 3, 0);
    }
    let q1 = chains.older(q0);
    let q2 = chains.older(q1);
    pairs[*np] = (q0 as u32) << 16 | newer;
    *np += (q0 != NIL) as usize;
    pairs[*np] = (q1 as u32) << 16 | newer;
    *np += (q1 != NIL) as usize;
    pairs[*np] = (q2 as u32) << 16 | newer;
    *np += (q2 != NIL) as usize;
    let mut q = chains.older(q2);
    while q != NIL {
        if *np == pairs.len() {
            pairs.resize(2 * pairs.len(), 0);
        }
        pairs[*np] = (q as u32) << 16 | newer;
        *np += 1;
        q = chains.older(q);
    }
}

/// Generates the strings of hash blocks `blocks` in index order and calls `f(index, bucket,
/// words)` for each ([`split_string`]'s bucket and words); stops when `f` returns false and
/// returns whether it never did. Shared by `full`'s and `em`'s layer 0.
#[inline(always)]
pub(crate) fn for_each_string(
    gen: &HashGen,
    blocks: std::ops::Range<usize>,
    bb: u32,
    hw: usize,
    last_mask: u32,
    mut f: impl FnMut(u64, usize, &[u32; MAX_WORDS]) -> bool,
) -> bool {
    let mut words = [0u32; MAX_WORDS];
    for_each_string_bytes(gen, blocks, |index, bytes| {
        let b = split_string(bytes, bb, hw, last_mask, &mut words);
        f(index, b, &words)
    })
}

/// As [`for_each_string`], calling `f(index, bytes)` with the string's first 48 bytes (bytes
/// past the string are those of the next string or zero).
#[inline(always)]
pub(crate) fn for_each_string_bytes(
    gen: &HashGen,
    blocks: std::ops::Range<usize>,
    mut f: impl FnMut(u64, &[u8]) -> bool,
) -> bool {
    const BATCH: usize = 64;
    let p = gen.params();
    let per = p.indices_per_hash() as usize;
    let sl = p.string_len();
    let total = p.num_indices();
    // One block past the batch, so that a string's 48 bytes can be read in place: its tail
    // reaches into the next block (or that spare one), bits the callers mask off. Copying a
    // block into a padded buffer first made every read of the second string wait on the
    // copy's stores (a failed store-to-load forwarding: a fifth of layer 0's time).
    let mut buf = vec![[0u8; BLOCK_BYTES]; BATCH + 1];
    let mut g = blocks.start;
    while g < blocks.end {
        let m = (blocks.end - g).min(BATCH);
        gen.blocks(g as u32, &mut buf[..m]);
        let flat = buf.as_flattened();
        for j in 0..m {
            for s in 0..per {
                let index = ((g + j) * per + s) as u64;
                if index >= total {
                    break;
                }
                let at = j * BLOCK_BYTES + s * sl;
                if !f(index, &flat[at..at + 48]) {
                    return false;
                }
            }
        }
        g += m;
    }
    true
}

/// The bucket (leading `bb` bits) and the hash words after it (`hw` big-endian 32-bit words,
/// the last ANDed with `last_mask`: bits past n come from the next string or the padding) of
/// the string whose first 48 bytes are `str_bytes`. Shared by `full`'s and `em`'s layer 0.
#[inline(always)]
pub(crate) fn split_string(
    str_bytes: &[u8],
    bb: u32,
    hw: usize,
    last_mask: u32,
    words: &mut [u32; MAX_WORDS],
) -> usize {
    let mut q = [0u64; 7];
    for (i, v) in q[..6].iter_mut().enumerate() {
        *v = u64::from_be_bytes(str_bytes[8 * i..8 * i + 8].try_into().expect("8"));
    }
    let b = if bb == 0 {
        0
    } else {
        (q[0] >> (64 - bb)) as usize
    };
    for (w, d) in words[..hw].iter_mut().enumerate() {
        let bit = bb as usize + 32 * w;
        let (i, off) = (bit / 64, bit % 64);
        let v = if off == 0 {
            q[i]
        } else {
            (q[i] << off) | (q[i + 1] >> (64 - off))
        };
        *d = (v >> 32) as u32;
    }
    words[hw - 1] &= last_mask;
    b
}

/// Geometry of one solve.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) n: u32,
    pub(crate) k: u32,
    pub(crate) c: u32,
    /// Bucket bits B.
    pub(crate) bb: u32,
    /// Rest bits R = c - B.
    pub(crate) rb: u32,
    pub(crate) threads: usize,
    /// Slots per (thread, bucket) region of a heap.
    pub(crate) cap: usize,
    /// Overflow slot ids per (thread, bucket): ids `spb + t*extra ..` name rows kept in the
    /// layer's overflow store.
    pub(crate) extra: usize,
    /// Hash words of layer r's rows (bits `[r*c + B, n)`).
    pub(crate) hw: Vec<usize>,
    /// Slot stride (u32 words) of heap 0 and heap 1.
    sw: [usize; 2],
    /// Merge with the portable row kernel even where the AVX-512 one runs (tests).
    pub(crate) portable: bool,
}

pub(crate) fn pair_code(a: usize, b: usize) -> u32 {
    debug_assert!(a < b);
    (b * (b - 1) / 2 + a) as u32
}

pub(crate) fn pair_decode(code: u32) -> (usize, usize) {
    let code = code as u64;
    // b = floor((1 + sqrt(1 + 8 code)) / 2), corrected for float rounding.
    let mut b = ((1.0 + (1.0 + 8.0 * code as f64).sqrt()) / 2.0) as u64;
    while b > 1 && b * (b - 1) / 2 > code {
        b -= 1;
    }
    while (b + 1) * b / 2 <= code {
        b += 1;
    }
    ((code - b * (b - 1) / 2) as usize, b as usize)
}

impl Plan {
    /// The plan for `(n, k)` with `threads` threads, or `None` when the pair codes would not
    /// fit 32 bits or rows are too long for the fast path.
    pub(crate) fn new(p: crate::Params, threads: usize) -> Option<Plan> {
        let (n, k, c) = (p.n(), p.k(), p.collision_bits());
        if k < 2 || threads == 0 || threads > 64 || c + 1 > 32 {
            return None;
        }
        // The fewest buckets (most rows per bucket) whose pair codes still fit 32 bits.
        for bb in c.saturating_sub(MAX_REST_BITS)..c {
            let rb = c - bb;
            let m = (1u64 << (c + 1 - bb)) as f64 / threads as f64;
            // The heap holds the first layers (which grow by well under 1%) with 4 standard
            // deviations of margin; the top layers grow by up to ~20% for (200,9) (each
            // layer's excess roughly doubles) and spill their short rows to the overflow store.
            let cap = (m + 4.0 * m.sqrt() + 4.0).ceil() as usize;
            let spb = threads * cap;
            // Slot ids S whose pairs fit the 32 - B bits left by the bucket.
            let pair_space = 1u64 << (32 - bb);
            let max_ids = (((1.0 + (1.0 + 8.0 * pair_space as f64).sqrt()) / 2.0) as u64)
                .saturating_sub(1)
                .min(NIL as u64 - 1) as usize;
            if max_ids <= spb {
                continue;
            }
            let extra = (max_ids - spb) / threads;
            if (extra as f64) < 0.2 * m + 5.0 * m.sqrt() {
                continue;
            }
            let hw: Vec<usize> = (0..k)
                .map(|r| ((n - r * c - bb) as usize).div_ceil(32))
                .collect();
            if hw[0] > MAX_WORDS {
                return None;
            }
            let mut sw = [0usize; 2];
            for (r, &h) in hw.iter().enumerate() {
                sw[r % 2] = sw[r % 2].max(h + 1 + r / 2);
            }
            return Some(Plan {
                n,
                k,
                c,
                bb,
                rb,
                threads,
                cap,
                extra,
                hw,
                sw,
                portable: false,
            });
        }
        None
    }

    /// A one-thread plan for [`crate::em`] only, whose trees are byte-packed and may exceed
    /// 32 bits: `bb` bucket bits and `ids` slot ids per bucket (no heap, no overflow store).
    /// `None` when the rows are too long or the rest of the digit exceeds the chain tables.
    pub(crate) fn wide(p: crate::Params, bb: u32, ids: usize) -> Option<Plan> {
        let (n, k, c) = (p.n(), p.k(), p.collision_bits());
        if k < 2 || bb > c || c - bb > MAX_REST_BITS || ids >= NIL as usize {
            return None;
        }
        let hw: Vec<usize> = (0..k)
            .map(|r| ((n - r * c - bb) as usize).div_ceil(32))
            .collect();
        if hw[0] > MAX_WORDS {
            return None;
        }
        Some(Plan {
            n,
            k,
            c,
            bb,
            rb: c - bb,
            threads: 1,
            cap: ids,
            extra: 0,
            hw,
            sw: [0, 0],
            portable: false,
        })
    }

    pub(crate) fn nb(&self) -> usize {
        1 << self.bb
    }

    /// Heap slot ids per bucket.
    fn spb(&self) -> usize {
        self.threads * self.cap
    }

    /// All slot ids per bucket (heap and overflow).
    pub(crate) fn ids(&self) -> usize {
        self.spb() + self.threads * self.extra
    }

    /// Slots per heap.
    fn slots(&self) -> usize {
        self.nb() * self.spb()
    }

    /// Heap bytes in all.
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        self.slots() * (self.sw[0] + self.sw[1]) * 4
    }

    /// Slot index of (bucket, heap id): regions are thread-major.
    #[inline]
    fn slot(&self, b: usize, id: usize) -> usize {
        let (t, s) = (id / self.cap, id % self.cap);
        (t * self.nb() + b) * self.cap + s
    }

    /// Word of layer `r`'s tree inside a slot.
    #[inline]
    fn tree_word(&self, r: u32) -> usize {
        self.sw[(r % 2) as usize] - 1 - (r / 2) as usize
    }
}

/// Rows of one layer and thread past their region's capacity: records of
/// `[bucket, id, tree, hash words...]`, sorted by bucket once the layer is complete.
/// Aligned to a cache line: the threads' stores sit side by side in a `Vec`, and each push
/// writes its length (two threads pushing to one line would pass it back and forth).
#[derive(Default)]
#[repr(align(64))]
struct Overflow {
    stride: usize,
    recs: Vec<u32>,
    /// Record ranges per bucket (`nb + 1` entries) once sorted.
    offs: Vec<u32>,
}

impl Overflow {
    fn new(hw: usize) -> Self {
        Overflow {
            stride: 3 + hw,
            ..Default::default()
        }
    }

    fn push(&mut self, b: usize, id: usize, tree: u32, words: &[u32]) {
        self.recs.push(b as u32);
        self.recs.push(id as u32);
        self.recs.push(tree);
        self.recs.extend_from_slice(words);
    }

    /// Counting sort of the records by bucket.
    fn sort(&mut self, nb: usize) {
        let st = self.stride;
        let n = self.recs.len() / st;
        let mut offs = vec![0u32; nb + 1];
        for i in 0..n {
            offs[self.recs[i * st] as usize + 1] += 1;
        }
        for b in 0..nb {
            offs[b + 1] += offs[b];
        }
        let mut fill = offs.clone();
        let mut sorted = vec![0u32; self.recs.len()];
        for i in 0..n {
            let b = self.recs[i * st] as usize;
            let at = fill[b] as usize;
            fill[b] += 1;
            sorted[at * st..(at + 1) * st].copy_from_slice(&self.recs[i * st..(i + 1) * st]);
        }
        self.recs = sorted;
        self.offs = offs;
    }

    /// Records of bucket `b`.
    fn bucket(&self, b: usize) -> impl Iterator<Item = &[u32]> {
        let st = self.stride;
        let (lo, hi) = if self.offs.is_empty() {
            (0, 0)
        } else {
            (self.offs[b] as usize, self.offs[b + 1] as usize)
        };
        self.recs[lo * st..hi * st].chunks_exact(st)
    }
}

/// The two heaps, the per-thread counts of the current layer and every layer's overflow.
struct Heaps {
    heap: [LargeBuffer; 2],
    /// counts[t][b]: rows (heap and overflow) of thread t in bucket b of the current layer.
    counts: Vec<Vec<u32>>,
    /// overflow[r][t].
    overflow: Vec<Vec<Overflow>>,
}

/// A thread's row counts per bucket, each written once per row it makes, with a cache line
/// of spare capacity behind them, so that no two threads' counts share a line (two threads
/// bumping counts in one line pass it back and forth between their cores).
fn row_counts(nb: usize) -> Vec<u32> {
    let mut counts = Vec::with_capacity(nb + 16);
    counts.resize(nb, 0);
    counts
}

/// Pair codes of the final step: (bucket, slot id a, slot id b) at layer k-1.
type Candidate = (u32, u16, u16);

/// What [`solve`] found.
pub(crate) struct Found {
    /// Candidates as index lists in tree order (not yet canonical or checked for repeated
    /// indices).
    pub cands: Vec<Vec<u32>>,
    /// Rows of each layer.
    pub rows: Vec<usize>,
    /// Candidates dropped while tracing back because a row occurred twice in their tree.
    pub repeated: usize,
    /// Layer steps run again to rebuild dropped trees (`em`'s `pr`; counted as the general
    /// solver counts them: layer 0 is a step).
    pub recomputed_steps: usize,
}

/// Solves with `plan`; `None` when more rows than the slot ids can name fell in one bucket
/// (the caller runs the general solver).
pub(crate) fn solve(
    gen: &HashGen,
    plan: &Plan,
    keep: &mut Option<[LargeBuffer; 2]>,
) -> Option<Found> {
    let slots = plan.slots();
    let need = [slots * plan.sw[0] * 4, slots * plan.sw[1] * 4];
    // Heaps of an earlier solve are reused as they are: only slots below a region's count
    // are ever read, so stale contents do not matter.
    let heap = match keep.take() {
        Some([a, b]) if a.len() >= need[0] && b.len() >= need[1] => [a, b],
        _ => need.map(|bytes| {
            LargeBuffer::new(bytes.max(4), PagePolicy::Transparent)
                .expect("cannot map solver memory")
        }),
    };
    solve_with(gen, plan, heap, keep)
}

fn solve_with(
    gen: &HashGen,
    plan: &Plan,
    heap: [LargeBuffer; 2],
    keep: &mut Option<[LargeBuffer; 2]>,
) -> Option<Found> {
    let mut h = Heaps {
        heap,
        counts: (0..plan.threads).map(|_| row_counts(plan.nb())).collect(),
        overflow: Vec::with_capacity(plan.k as usize),
    };
    let mut rows = Vec::with_capacity(plan.k as usize);
    if !layer0(gen, plan, &mut h) {
        return None;
    }
    for r in 0..plan.k - 1 {
        rows.push(h.counts.iter().flatten().map(|&c| c as usize).sum());
        if !step(plan, &mut h, r) {
            return None;
        }
    }
    rows.push(h.counts.iter().flatten().map(|&c| c as usize).sum());
    let cands = final_step(plan, &h);
    let mut out = Vec::with_capacity(cands.len());
    let mut repeated = 0;
    let mut scratch = Expansion::default();
    for (b, a, c) in cands {
        match scratch.leaves(plan, &h, b, a, c) {
            Some(idx) => out.push(idx),
            None => repeated += 1,
        }
    }
    *keep = Some(h.heap);
    Some(Found {
        cands: out,
        rows,
        repeated,
        recomputed_steps: 0,
    })
}

/// The tree word of slot id `id` of bucket `b` at layer `r`.
fn tree_of(plan: &Plan, h: &Heaps, r: u32, b: usize, id: usize) -> u32 {
    if id < plan.spb() {
        let heap = h.heap[(r % 2) as usize].as_u32_slice();
        let sw = plan.sw[(r % 2) as usize];
        return heap[plan.slot(b, id) * sw + plan.tree_word(r)];
    }
    let t = (id - plan.spb()) / plan.extra;
    h.overflow[r as usize][t]
        .bucket(b)
        .find(|rec| rec[1] as usize == id)
        .map(|rec| rec[2])
        .expect("every overflow id names a stored row")
}

/// Tracing candidates back, one layer at a time.
#[derive(Default)]
struct Expansion {
    /// Rows (bucket << 32 | slot id) of the current layer, in tree order.
    nodes: Vec<u64>,
    below: Vec<u64>,
    sorted: Vec<u64>,
}

impl Expansion {
    /// The leaf indices of candidate `(b, a, c)` of layer k-1 in tree order, or `None` when
    /// a row of some layer occurs twice in the tree. A repeated row repeats its leaves, so
    /// such a candidate could only be rejected later; most candidates of (200,9) (hundreds
    /// per nonce, against about two solutions) are rejected this way within a few layers,
    /// before the scattered reads of the layers below.
    fn leaves(&mut self, plan: &Plan, h: &Heaps, b: u32, a: u16, c: u16) -> Option<Vec<u32>> {
        let b = (b as u64) << 32;
        self.nodes.clear();
        self.nodes.extend([b | a as u64, b | c as u64]);
        let pair_bits = 32 - plan.bb;
        let pair_mask = if pair_bits == 32 {
            u32::MAX
        } else {
            (1u32 << pair_bits) - 1
        };
        for r in (1..plan.k).rev() {
            self.below.clear();
            for &node in &self.nodes {
                let tree = tree_of(plan, h, r, (node >> 32) as usize, node as u32 as usize);
                let pb = if plan.bb == 0 {
                    0
                } else {
                    ((tree >> pair_bits) as u64) << 32
                };
                let (x, y) = pair_decode(tree & pair_mask);
                self.below.extend([pb | x as u64, pb | y as u64]);
            }
            self.sorted.clear();
            self.sorted.extend_from_slice(&self.below);
            self.sorted.sort_unstable();
            if self.sorted.windows(2).any(|w| w[0] == w[1]) {
                return None;
            }
            std::mem::swap(&mut self.nodes, &mut self.below);
        }
        Some(
            self.nodes
                .iter()
                .map(|&node| tree_of(plan, h, 0, (node >> 32) as usize, node as u32 as usize))
                .collect(),
        )
    }
}

/// Runs `work(t, region_t, counts_t, overflow_t)` on each thread's region of `heap`.
fn per_thread<F>(
    plan: &Plan,
    heap: &mut [u32],
    counts: &mut [Vec<u32>],
    ovf: &mut [Overflow],
    work: F,
) where
    F: Fn(usize, &mut [u32], &mut [u32], &mut Overflow) + Sync,
{
    let th = plan.threads;
    let per = heap.len() / th;
    if th == 1 {
        work(0, heap, &mut counts[0], &mut ovf[0]);
        return;
    }
    std::thread::scope(|s| {
        let work = &work;
        let mut it = heap
            .chunks_mut(per)
            .zip(counts.iter_mut())
            .zip(ovf.iter_mut())
            .enumerate();
        let (t0, ((r0, c0), o0)) = it.next().expect("at least one thread");
        for (t, ((r, c), o)) in it {
            s.spawn(move || work(t, r, c, o));
        }
        work(t0, r0, c0, o0);
    });
}

/// Layer 0: every string, bucketed by its first B bits; the tree word is the index.
fn layer0(gen: &HashGen, plan: &Plan, h: &mut Heaps) -> bool {
    let blocks = gen.num_blocks() as usize;
    let th = plan.threads;
    let region_words = plan.nb() * plan.cap * plan.sw[0];
    let heap = &mut h.heap[0].as_u32_slice_mut()[..th * region_words];
    let ok = AtomicBool::new(true);
    let mut ovf: Vec<Overflow> = (0..th).map(|_| Overflow::new(plan.hw[0])).collect();
    per_thread(
        plan,
        heap,
        &mut h.counts,
        &mut ovf,
        |t, region, counts, ovf| {
            counts.fill(0);
            let range = t * blocks / th..(t + 1) * blocks / th;
            // (200,9)'s widths as constants (the bit extraction then uses immediate shifts).
            let simd = avx512::available() && !plan.portable;
            let fill = match (plan.bb, plan.hw[0], simd) {
                // The arms are LAYER0_FIXED.
                (10, 6, true) => avx512::fill_layer0::<10, 6, true>,
                (10, 6, false) => fill_layer0::<10, 6, true>,
                (11, 6, true) => avx512::fill_layer0::<11, 6, true>,
                (11, 6, false) => fill_layer0::<11, 6, true>,
                (12, 6, true) => avx512::fill_layer0::<12, 6, true>,
                (12, 6, false) => fill_layer0::<12, 6, true>,
                _ => fill_layer0::<0, 0, false>,
            };
            if !fill(gen, plan, t, range, region, counts, ovf) {
                ok.store(false, Ordering::Relaxed);
            }
            ovf.sort(plan.nb());
        },
    );
    h.overflow.push(ovf);
    ok.into_inner()
}

/// Where a new row of bucket `b` goes: `Ok(slot)` in the region, `Err(Some(id))` to the
/// overflow store under that slot id, `Err(None)` when the ids are exhausted.
#[inline]
fn place(plan: &Plan, t: usize, counts: &mut [u32], b: usize) -> Result<usize, Option<usize>> {
    let slot = counts[b] as usize;
    counts[b] += 1;
    if slot < plan.cap {
        return Ok(slot);
    }
    let j = slot - plan.cap;
    if j < plan.extra {
        Err(Some(plan.spb() + t * plan.extra + j))
    } else {
        Err(None)
    }
}

/// [`fill_layer0_with`] with the portable kernel.
#[allow(clippy::too_many_arguments)]
fn fill_layer0<const BB: u32, const HW: usize, const SPEC: bool>(
    gen: &HashGen,
    plan: &Plan,
    t: usize,
    blocks: std::ops::Range<usize>,
    region: &mut [u32],
    counts: &mut [u32],
    ovf: &mut Overflow,
) -> bool {
    let c = if SPEC { BB } else { plan.bb };
    fill_layer0_with::<BB, HW, SPEC, Portable>(
        Portable { c },
        gen,
        plan,
        t,
        blocks,
        region,
        counts,
        ovf,
    )
}

/// Layer 0 of thread `t`: the strings of hash blocks `blocks` into its region. Always
/// inlined, so that `avx512`'s instance is compiled with its target features.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn fill_layer0_with<const BB: u32, const HW: usize, const SPEC: bool, K: RowKernel>(
    kern: K,
    gen: &HashGen,
    plan: &Plan,
    t: usize,
    blocks: std::ops::Range<usize>,
    region: &mut [u32],
    counts: &mut [u32],
    ovf: &mut Overflow,
) -> bool {
    let sw = plan.sw[0];
    let (bb, hw) = if SPEC {
        (BB, HW)
    } else {
        (plan.bb, plan.hw[0])
    };
    let tw = plan.tree_word(0);
    let cap = plan.cap;
    let row_bits = plan.n - bb;
    let last_mask = if row_bits.is_multiple_of(32) {
        u32::MAX
    } else {
        u32::MAX << (32 - row_bits % 32)
    };
    let mut ok = true;
    if SPEC {
        // Ruled out once here rather than per row: the kernel's stores stay inside a slot.
        assert!(HW <= sw && tw < sw, "slot layout");
        for_each_string_bytes(gen, blocks, |index, bytes| {
            let (row, b) = kern.string_row::<HW>(bytes, last_mask);
            match place(plan, t, counts, b) {
                Ok(slot) => {
                    let at = (b * cap + slot) * sw;
                    kern.store_slot::<HW>(&mut region[at..at + sw], row, index as u32, tw);
                    prefetch_next_rows(region, at);
                }
                Err(Some(id)) => ovf.push(b, id, index as u32, &kern.words(row)[..HW]),
                Err(None) => ok = false,
            }
            true
        });
        return ok;
    }
    for_each_string(gen, blocks, bb, hw, last_mask, |index, b, words| {
        match place(plan, t, counts, b) {
            Ok(slot) => {
                let at = (b * cap + slot) * sw;
                let dst = &mut region[at..at + sw];
                dst[..hw].copy_from_slice(&words[..hw]);
                dst[tw] = index as u32;
                prefetch_next_rows(region, at);
            }
            Err(Some(id)) => ovf.push(b, id, index as u32, &words[..hw]),
            Err(None) => ok = false,
        }
        true
    });
    ok
}

/// Rows are scattered over the 1,024 (for (200,9)) buckets of a layer, each filled in
/// order; about a thousand rows pass between two writes to one bucket, and the hardware
/// prefetchers follow far fewer streams. Asking for the cache line after the slot just
/// written (16 words on) turns the miss of the bucket's next rows into a cache hit: half the
/// cost of the scattered writes in a stand-alone test of this pattern here. Into L2 only:
/// the thousand writes before the line is used would push it out of L1 anyway, along with
/// the bucket's input rows and chain tables (session 11: 2-3% less CPU per solve than into
/// L1, seven alternating pairs of `ST 200 9 20 1 full`).
#[inline(always)]
fn prefetch_next_rows(region: &[u32], at: usize) {
    if let Some(w) = region.get(at + 16) {
        proofkit_core::memory::prefetch_read_l2(w);
    }
}

/// A step reads its input rows in order, a bucket region (~60 KB) at a time, rows the step
/// before scattered over the whole heap; the hardware prefetchers start over at each region
/// and do not run far enough ahead. Asking for the line 768 bytes (about 27 rows of 28
/// bytes) ahead of the row being read took a step from ~34 to ~29 ms here; 256 bytes gained
/// less, 512 to 1,536 bytes about the same.
#[inline(always)]
fn prefetch_rows_ahead(heap: &[u32], at: usize) {
    if let Some(w) = heap.get(at + 192) {
        proofkit_core::memory::prefetch_read(w);
    }
}

/// Step `r`: merges colliding rows of layer `r` (heap `r%2`) into layer `r+1` (the other).
fn step(plan: &Plan, h: &mut Heaps, r: u32) -> bool {
    let (wi, wo) = (plan.hw[r as usize], plan.hw[r as usize + 1]);
    let [h0, h1] = &mut h.heap;
    let (inp, out) = if r.is_multiple_of(2) {
        (&*h0, h1)
    } else {
        (&*h1, h0)
    };
    let inp = inp.as_u32_slice();
    let counts_in = h.counts.clone();
    let (si, so) = (plan.sw[(r % 2) as usize], plan.sw[((r + 1) % 2) as usize]);
    let region_words = plan.nb() * plan.cap * so;
    let out = &mut out.as_u32_slice_mut()[..plan.threads * region_words];
    let ok = AtomicBool::new(true);
    let ovf_in = &h.overflow[r as usize];
    let mut ovf: Vec<Overflow> = (0..plan.threads).map(|_| Overflow::new(wo)).collect();
    let mut run = |f: MergeFn| {
        per_thread(
            plan,
            out,
            &mut h.counts,
            &mut ovf,
            |t, region, counts, o| {
                let ins = Input {
                    plan,
                    r,
                    heap: inp,
                    counts: &counts_in,
                    ovf: ovf_in,
                };
                if !f(&ins, t, region, counts, o) {
                    ok.store(false, Ordering::Relaxed);
                }
                o.sort(plan.nb());
            },
        )
    };
    // The AVX-512 row kernel where the CPU has it (for the named parameter sets, whose
    // slots are at most 8 words).
    let simd = avx512::available() && !plan.portable;
    let spec = |portable: MergeFn, vector: MergeFn| if simd { vector } else { portable };
    // Digit and bucket widths as constants for the named parameter sets (the shifts then
    // compile to immediates), read from the plan otherwise. The groups are STEP_FIXED.
    macro_rules! go {
        ($(($c:literal $b:literal $si:literal $so:literal): $($i:literal $o:literal),*;)*) => {
            match (plan.c, plan.bb, si, so, wi, wo) {
                $($(($c, $b, $si, $so, $i, $o) => run(spec(
                    merge::<$i, $o, $c, $b, true, $si, $so>,
                    avx512::merge::<$i, $o, $c, $b, true, $si, $so>,
                )),)*)*
                (_, _, _, _, 1, 1) => run(merge::<1, 1, 0, 0, false, 0, 0>),
                (_, _, _, _, 2, 1) => run(merge::<2, 1, 0, 0, false, 0, 0>),
                (_, _, _, _, 2, 2) => run(merge::<2, 2, 0, 0, false, 0, 0>),
                (_, _, _, _, 3, 2) => run(merge::<3, 2, 0, 0, false, 0, 0>),
                (_, _, _, _, 3, 3) => run(merge::<3, 3, 0, 0, false, 0, 0>),
                (_, _, _, _, 4, 3) => run(merge::<4, 3, 0, 0, false, 0, 0>),
                (_, _, _, _, 4, 4) => run(merge::<4, 4, 0, 0, false, 0, 0>),
                (_, _, _, _, 5, 4) => run(merge::<5, 4, 0, 0, false, 0, 0>),
                (_, _, _, _, 5, 5) => run(merge::<5, 5, 0, 0, false, 0, 0>),
                (_, _, _, _, 6, 5) => run(merge::<6, 5, 0, 0, false, 0, 0>),
                (_, _, _, _, 6, 6) => run(merge::<6, 6, 0, 0, false, 0, 0>),
                (_, _, _, _, 7, 6) => run(merge::<7, 6, 0, 0, false, 0, 0>),
                (_, _, _, _, 7, 7) => run(merge::<7, 7, 0, 0, false, 0, 0>),
                (_, _, _, _, 8, 7) => run(merge::<8, 7, 0, 0, false, 0, 0>),
                (_, _, _, _, 8, 8) => run(merge::<8, 8, 0, 0, false, 0, 0>),
                _ => unreachable!("Plan::new limits rows to {MAX_WORDS} words"),
            }
        };
    }
    go!(
        (20 10 7 7): 6 6, 6 5, 5 5, 5 4, 4 4, 4 3, 3 3, 3 2, 2 2, 2 1, 1 1;
        (20 11 7 7): 6 6, 6 5, 5 5, 5 4, 4 4, 4 3, 3 3, 3 2, 2 2, 2 1, 1 1;
        (20 12 7 7): 6 6, 6 5, 5 5, 5 4, 4 4, 4 3, 3 3, 3 2, 2 2, 2 1, 1 1;
        (16 6 4 4): 3 3, 3 2, 2 2, 2 1, 1 1;
        (8 0 4 3): 2 2, 1 1;
        (8 0 3 4): 2 1, 1 1;
    );
    h.overflow.push(ovf);
    ok.into_inner()
}

/// `(c, B, slot stride of heap 0, of heap 1)` of the plans [`step`] has fixed-width merges
/// for (its `go!` groups), and `(B, hash words)` of layer 0's fixed-width fills. A plan
/// outside them runs the portable kernel with widths read at run time: (200,9) on 2 to 7
/// threads takes B = 11 (its regions leave too few overflow ids at B = 10), which had no
/// fixed-width instance until session 11 and so took 1.25x the CPU time of one thread
/// (two threads were 1.5-1.6x one; 1.85x since).
/// `tests::named_parameter_plans_run_fixed_widths` holds the named parameter sets to these
/// lists.
#[cfg(test)]
const STEP_FIXED: [(u32, u32, usize, usize); 6] = [
    (20, 10, 7, 7),
    (20, 11, 7, 7),
    (20, 12, 7, 7),
    (16, 6, 4, 4),
    (8, 0, 4, 3),
    (8, 0, 3, 4),
];
#[cfg(test)]
const LAYER0_FIXED: [(u32, usize); 3] = [(10, 6), (11, 6), (12, 6)];

/// Buckets of thread `t`.
fn bucket_range(plan: &Plan, t: usize) -> std::ops::Range<usize> {
    let (nb, th) = (plan.nb(), plan.threads);
    (t * nb / th)..((t + 1) * nb / th)
}

/// One layer as input of a step.
struct Input<'a> {
    plan: &'a Plan,
    r: u32,
    heap: &'a [u32],
    counts: &'a [Vec<u32>],
    ovf: &'a [Overflow],
}

/// The rows of one bucket chained by the rest of their digit: `heads[key]` is the latest row
/// id with that key, `next[id]` the one before it, `loc[id]` where the row is. Fixed-size
/// tables indexed by masked keys and u16 ids, so that every index is in bounds by its type;
/// rest bits are at most `MAX_REST_BITS` and ids below `NIL` ([`Plan::new`]), so the masks
/// never change a key or an id.
pub(crate) struct Chains {
    heads: Box<[u16; 1 << MAX_REST_BITS]>,
    next: Box<[u16; 1 << 16]>,
    loc: Box<[u32; 1 << 16]>,
}

impl Chains {
    pub(crate) fn new() -> Self {
        fn table<T: Copy + std::fmt::Debug, const N: usize>(v: T) -> Box<[T; N]> {
            vec![v; N].into_boxed_slice().try_into().expect("N entries")
        }
        // `next[id]` is written before it is read, except `next[NIL]` (read by `older(NIL)`):
        // a zeroed table with that one entry set leaves the rest of its 128 KiB untouched
        // (not resident) instead of filling it.
        let mut next = table(0);
        next[NIL as usize] = NIL;
        Chains {
            heads: table(NIL),
            next,
            loc: table(0),
        }
    }

    pub(crate) fn clear(&mut self, rb: u32) {
        self.heads[..1 << rb].fill(NIL);
    }

    /// Adds row `id` at `at` with `key`; returns the latest earlier row with that key.
    #[inline(always)]
    pub(crate) fn push(&mut self, key: usize, id: u16, at: u32) -> u16 {
        let key = key & ((1 << MAX_REST_BITS) - 1);
        let q = self.heads[key];
        self.next[id as usize] = q;
        self.loc[id as usize] = at;
        self.heads[key] = id;
        q
    }

    /// As [`Chains::push`] for callers that keep rows by id (no location stored).
    #[inline(always)]
    pub(crate) fn push_id(&mut self, key: usize, id: u16) -> u16 {
        let key = key & ((1 << MAX_REST_BITS) - 1);
        let q = self.heads[key];
        self.next[id as usize] = q;
        self.heads[key] = id;
        q
    }

    /// The row chained before `id` (`NIL` for `NIL`: that entry is never written).
    #[inline(always)]
    pub(crate) fn older(&self, id: u16) -> u16 {
        self.next[id as usize]
    }

    /// Where row `id` is.
    #[inline(always)]
    pub(crate) fn at(&self, id: usize) -> u32 {
        self.loc[id as u16 as usize]
    }

    /// The row chained before `id`, and where row `id` is.
    #[inline(always)]
    pub(crate) fn link(&self, id: usize) -> (u16, u32) {
        let id = id as u16 as usize;
        (self.next[id], self.loc[id])
    }
}

/// Marks a `loc` entry as an offset into the bucket's copy of its overflow rows.
const IN_OVERFLOW: u32 = 1 << 31;

/// Lists the rows of bucket `b` in increasing slot id: heap rows, then the overflow rows,
/// copied to `ovf_rows` (`W` words each). Each entry is `(id, loc)`, `loc` the row's word
/// offset in the heap or `IN_OVERFLOW | offset` in `ovf_rows`.
fn rows_of<const W: usize>(
    ins: &Input,
    b: usize,
    items: &mut Vec<(u32, u32)>,
    ovf_rows: &mut Vec<u32>,
) {
    let plan = ins.plan;
    let si = plan.sw[(ins.r % 2) as usize];
    let (cap, nb) = (plan.cap, plan.nb());
    items.clear();
    ovf_rows.clear();
    for tt in 0..plan.threads {
        let cnt = (ins.counts[tt][b] as usize).min(cap);
        let base = (tt * nb + b) * cap;
        items.extend((0..cnt).map(|s| ((tt * cap + s) as u32, ((base + s) * si) as u32)));
    }
    for o in ins.ovf {
        for rec in o.bucket(b) {
            let at = ovf_rows.len();
            ovf_rows.extend_from_slice(&rec[3..3 + W]);
            items.push((rec[1], IN_OVERFLOW | at as u32));
        }
    }
}

#[inline(always)]
fn row_at<const W: usize>(heap: &[u32], ovf_rows: &[u32], loc: u32) -> [u32; W] {
    let src = if loc & IN_OVERFLOW == 0 {
        &heap[loc as usize..loc as usize + W]
    } else {
        let l = (loc & !IN_OVERFLOW) as usize;
        &ovf_rows[l..l + W]
    };
    src.try_into().expect("W words")
}

type MergeFn = fn(&Input, usize, &mut [u32], &mut [u32], &mut Overflow) -> bool;

/// The row arithmetic of [`merge`]'s second phase: the XOR of two rows of `WI` words, shifted
/// left by the digit's `c` bits into the next layer's `WO` words, and the store of such a row
/// with its tree word into a slot. [`Portable`] works on words; `avx512::Avx512` on one
/// 256-bit register (masked loads and stores), chosen at run time. `em` uses it too, with
/// its byte-packed rows ([`RowKernel::load_be`], [`RowKernel::store_be`]).
pub(crate) trait RowKernel: Copy {
    /// A row of the next layer (its first `WO` words matter).
    type Row: Copy;
    /// The next layer's row from rows `a` and `b` (`WI` words each, equal on the rest of
    /// the digit) and the XOR's first word, or `None` for identical rows.
    fn xor_next<const WI: usize, const WO: usize>(
        self,
        a: &[u32],
        b: &[u32],
    ) -> Option<(Self::Row, u32)>;
    /// Writes `y`'s `WO` words to the start of `dst` and `tree` to `dst[tw]`, leaving the
    /// other words (older layers' tree words) as they are.
    fn store_slot<const WO: usize>(self, dst: &mut [u32], y: Self::Row, tree: u32, tw: usize);
    /// `y`'s words.
    fn words(self, y: Self::Row) -> [u32; MAX_WORDS];
    /// Layer 0's row of a string whose first 48 bytes are `bytes` (the `HW` words after the
    /// leading `c` bits, the last ANDed with `last_mask`) and its bucket (the leading `c`
    /// bits); `c` is the bucket bits here.
    fn string_row<const HW: usize>(self, bytes: &[u8], last_mask: u32) -> (Self::Row, usize);
    /// `em`'s packed rows: the `W` big-endian words at the start of `src` (at least `4 W`
    /// bytes), the last ANDed with `last_mask`, and the first of them (after the mask).
    fn load_be<const W: usize>(self, src: &[u8], last_mask: u32) -> (Self::Row, u32);
    /// Writes `y`'s `W` words to `dst[..W]`.
    fn store_words<const W: usize>(self, dst: &mut [u32], y: Self::Row);
    /// Writes `y`'s `W` words big-endian to `dst[..4 W]` (`em`'s packed rows).
    fn store_be<const W: usize>(self, dst: &mut [u8], y: Self::Row);
}

/// Work generic over the [`RowKernel`], run by [`with_kernel`] with the kernel the CPU
/// allows (its `run` is always inlined, so that the AVX-512 instance is compiled with the
/// target features).
pub(crate) trait KernelJob {
    type Out;
    fn run<K: RowKernel>(self, kern: K) -> Self::Out;
}

/// Whether [`with_kernel`] runs the AVX-512 kernel (when not told `portable`).
#[cfg(test)]
pub(crate) fn simd_available() -> bool {
    avx512::available()
}

/// Runs `job` with the AVX-512 kernel for digits of `c` bits where the CPU has AVX-512F/VL
/// (and neither `portable` nor `PROOFKIT_FORCE_PORTABLE` is set), else with the portable one.
pub(crate) fn with_kernel<J: KernelJob>(c: u32, portable: bool, job: J) -> J::Out {
    #[cfg(target_arch = "x86_64")]
    if !portable {
        if let Some(kern) = avx512::Avx512::new(c) {
            return avx512::run_job(kern, job);
        }
    }
    job.run(Portable { c })
}

/// [`RowKernel`] on plain words, for every CPU (and under `PROOFKIT_FORCE_PORTABLE=1`).
#[derive(Clone, Copy)]
pub(crate) struct Portable {
    /// Digit bits c.
    pub(crate) c: u32,
}

impl RowKernel for Portable {
    type Row = [u32; MAX_WORDS];

    #[inline(always)]
    fn xor_next<const WI: usize, const WO: usize>(
        self,
        a: &[u32],
        b: &[u32],
    ) -> Option<(Self::Row, u32)> {
        // One word past the row stays zero, so that the last output word takes zeros.
        let mut x = [0u32; MAX_WORDS + 1];
        for w in 0..WI {
            x[w] = a[w] ^ b[w];
        }
        // The rows agree on the rest of the digit (the leading bits of word 0), so they are
        // identical when every word of the XOR is zero; the last word almost never is.
        if x[WI - 1] == 0 && x[..WI - 1].iter().fold(0, |a, &w| a | w) == 0 {
            return None;
        }
        let mut y = [0u32; MAX_WORDS];
        for w in 0..WO {
            y[w] = (x[w] << self.c) | (x[w + 1] >> (32 - self.c));
        }
        Some((y, x[0]))
    }

    #[inline(always)]
    fn store_slot<const WO: usize>(self, dst: &mut [u32], y: Self::Row, tree: u32, tw: usize) {
        dst[..WO].copy_from_slice(&y[..WO]);
        dst[tw] = tree;
    }

    #[inline(always)]
    fn words(self, y: Self::Row) -> [u32; MAX_WORDS] {
        y
    }

    #[inline(always)]
    fn string_row<const HW: usize>(self, bytes: &[u8], last_mask: u32) -> (Self::Row, usize) {
        let mut words = [0u32; MAX_WORDS];
        let b = split_string(bytes, self.c, HW, last_mask, &mut words);
        (words, b)
    }

    #[inline(always)]
    fn load_be<const W: usize>(self, src: &[u8], last_mask: u32) -> (Self::Row, u32) {
        let s = &src[..4 * W];
        let mut y = [0u32; MAX_WORDS];
        for (w, v) in y[..W].iter_mut().enumerate() {
            *v = u32::from_be_bytes(s[4 * w..4 * w + 4].try_into().expect("4 bytes"));
        }
        y[W - 1] &= last_mask;
        (y, y[0])
    }

    #[inline(always)]
    fn store_words<const W: usize>(self, dst: &mut [u32], y: Self::Row) {
        dst[..W].copy_from_slice(&y[..W]);
    }

    #[inline(always)]
    fn store_be<const W: usize>(self, dst: &mut [u8], y: Self::Row) {
        let d = &mut dst[..4 * W];
        for w in 0..W {
            d[4 * w..4 * w + 4].copy_from_slice(&y[w].to_be_bytes());
        }
    }
}

/// [`merge`] with the portable row kernel.
fn merge<
    const WI: usize,
    const WO: usize,
    const C: u32,
    const BB: u32,
    const SPEC: bool,
    const SI: usize,
    const SO: usize,
>(
    ins: &Input,
    t: usize,
    region: &mut [u32],
    counts: &mut [u32],
    ovf_out: &mut Overflow,
) -> bool {
    let c = if SPEC { C } else { ins.plan.c };
    merge_with::<WI, WO, C, BB, SPEC, SI, SO, Portable>(
        Portable { c },
        ins,
        t,
        region,
        counts,
        ovf_out,
    )
}

/// Merges thread `t`'s buckets of layer `r` into its region of layer `r + 1`. `SPEC`: the
/// digit bits `C`, bucket bits `BB` and slot strides `SI` (layer r) and `SO` (layer r+1) are
/// those of the plan, so that shifts are immediates and a slot access is one bounds check.
/// Always inlined, so that `avx512`'s instance is compiled with its target features.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn merge_with<
    const WI: usize,
    const WO: usize,
    const C: u32,
    const BB: u32,
    const SPEC: bool,
    const SI: usize,
    const SO: usize,
    K: RowKernel,
>(
    kern: K,
    ins: &Input,
    t: usize,
    region: &mut [u32],
    counts: &mut [u32],
    ovf_out: &mut Overflow,
) -> bool {
    let plan = ins.plan;
    counts.fill(0);
    let (si, so) = if SPEC {
        (SI, SO)
    } else {
        (
            plan.sw[(ins.r % 2) as usize],
            plan.sw[((ins.r + 1) % 2) as usize],
        )
    };
    let tw = plan.tree_word(ins.r + 1);
    let (c, bb) = if SPEC { (C, BB) } else { (plan.c, plan.bb) };
    let (rb, cap) = (c - bb, plan.cap as u32);
    let pair_bits = 32 - bb;
    let mut chains = Chains::new();
    let mut items = Vec::with_capacity(plan.ids());
    let mut ovf_rows = Vec::new();
    let mut pairs = vec![0u32; 2 * plan.ids()];
    let mut ok = true;
    let heap = ins.heap;
    // Shift of the output bucket bits out of the XOR's first word.
    let ob_shift = 32 - bb.max(1);
    let nb = plan.nb();
    // Row `at` (word offset of a heap slot, or an overflow copy).
    #[inline(always)]
    fn row_in<'a, const WI: usize>(
        heap: &'a [u32],
        si: usize,
        ovf: &'a [u32],
        at: u32,
    ) -> &'a [u32] {
        if at & IN_OVERFLOW == 0 {
            let at = at as usize;
            &heap[at..at + si][..WI]
        } else {
            let l = (at & !IN_OVERFLOW) as usize;
            &ovf[l..l + WI]
        }
    }
    let row = |ovf_rows: &[u32], at: u32| -> [u32; WI] {
        row_in::<WI>(heap, si, ovf_rows, at)
            .try_into()
            .expect("WI words")
    };
    // Ruled out once here rather than per row: the kernels' stores stay inside a slot.
    assert!(WO <= so && tw < so && WI <= MAX_WORDS, "slot layout");
    for b in bucket_range(plan, t) {
        chains.clear(rb);
        let bucket_tag = if bb == 0 { 0 } else { (b as u32) << pair_bits };
        // Overflow rows of this bucket (rare) are copied next to each other; heap rows are
        // read in place.
        ovf_rows.clear();
        items.clear();
        for o in ins.ovf {
            for rec in o.bucket(b) {
                items.push((rec[1], IN_OVERFLOW | ovf_rows.len() as u32));
                ovf_rows.extend_from_slice(&rec[3..3 + WI]);
            }
        }
        // Phase 1: chain the rows by the rest of their digit and list the pairs (older id,
        // newer id) in chain order. The first three partners of a row are listed without
        // branches (the slot is written always and kept when the partner exists), so the
        // unpredictable chain lengths cost a mispredicted branch only for rows with more.
        let mut np = 0;
        macro_rules! chain {
            ($id:expr, $at:expr) => {{
                let (id, at): (usize, u32) = ($id, $at);
                let key = (row(&ovf_rows, at)[0] >> (32 - rb)) as usize;
                let q0 = chains.push(key, id as u16, at);
                list_partners(&chains, q0, id as u32, &mut pairs, &mut np);
            }};
        }
        for tt in 0..plan.threads {
            let cnt = (ins.counts[tt][b] as usize).min(cap as usize);
            let base = (tt * nb + b) * cap as usize;
            for s in 0..cnt {
                prefetch_rows_ahead(heap, (base + s) * si);
                chain!(tt * cap as usize + s, ((base + s) * si) as u32);
            }
        }
        for &(id, at) in &items {
            chain!(id as usize, at);
        }
        // Phase 2: merge every listed pair (a predictable loop).
        for &p in &pairs[..np] {
            let (qi, id) = ((p >> 16) as usize, (p & 0xffff) as usize);
            let rowa = row_in::<WI>(heap, si, &ovf_rows, chains.at(qi));
            let rowb = row_in::<WI>(heap, si, &ovf_rows, chains.at(id));
            let Some((y, x0)) = kern.xor_next::<WI, WO>(rowa, rowb) else {
                continue;
            };
            // The next bucket: the B bits after the rest of the digit, all in the XOR's
            // first word (c < 32).
            let ob = if bb == 0 {
                0
            } else {
                ((x0 << rb) >> ob_shift) as usize
            };
            // Ids come in increasing order, so qi < id.
            let tree = bucket_tag | pair_code(qi, id);
            let slot = counts[ob];
            counts[ob] = slot + 1;
            if slot < cap {
                let oat = (ob * cap as usize + slot as usize) * so;
                kern.store_slot::<WO>(&mut region[oat..oat + so], y, tree, tw);
                prefetch_next_rows(region, oat);
            } else {
                let j = (slot - cap) as usize;
                if j >= plan.extra {
                    ok = false;
                    continue;
                }
                let oid = plan.spb() + t * plan.extra + j;
                ovf_out.push(ob, oid, tree, &kern.words(y)[..WO]);
            }
        }
    }
    ok
}

/// The last step: pairs of layer `k-1` rows equal on all their bits (the rest of digit
/// `k-1` and digit `k`).
fn final_step(plan: &Plan, h: &Heaps) -> Vec<Candidate> {
    let r = plan.k - 1;
    let ins = Input {
        plan,
        r,
        heap: h.heap[(r % 2) as usize].as_u32_slice(),
        counts: &h.counts,
        ovf: &h.overflow[r as usize],
    };
    let wi = plan.hw[r as usize];
    let mut found: Vec<Vec<Candidate>> = vec![Vec::new(); plan.threads];
    let job = |t: usize, out: &mut Vec<Candidate>| match wi {
        1 => final_merge::<1>(&ins, t, out),
        2 => final_merge::<2>(&ins, t, out),
        3 => final_merge::<3>(&ins, t, out),
        4 => final_merge::<4>(&ins, t, out),
        _ => unreachable!("the last layer holds 2c - B <= 64 bits"),
    };
    if plan.threads == 1 {
        job(0, &mut found[0]);
    } else {
        std::thread::scope(|s| {
            for (t, out) in found.iter_mut().enumerate() {
                let job = &job;
                s.spawn(move || job(t, out));
            }
        });
    }
    found.concat()
}

fn final_merge<const W: usize>(ins: &Input, t: usize, out: &mut Vec<Candidate>) {
    let plan = ins.plan;
    let rb = plan.rb;
    // Equal rows are rare (a few per bucket at most): a first pass counts the rows of each
    // value of the leading `fb` bits without branches, and only rows whose value is shared
    // go through the chains. Walking a chain for every row costs a mispredicted branch
    // behind a dependent load per row.
    let fb = (rb + 5).min(plan.c + rb).min(16);
    let mut seen = vec![0u8; 1 << fb];
    let mut chains = Chains::new();
    let mut items = Vec::with_capacity(plan.ids());
    let mut ovf_rows = Vec::new();
    let heap = ins.heap;
    for b in bucket_range(plan, t) {
        chains.clear(rb);
        rows_of::<W>(ins, b, &mut items, &mut ovf_rows);
        let filter = |at: u32| (row_at::<W>(heap, &ovf_rows, at)[0] >> (32 - fb)) as usize;
        for &(_, at) in &items {
            prefetch_rows_ahead(heap, at as usize);
            let f = filter(at);
            seen[f] = seen[f].saturating_add(1);
        }
        for &(id, at) in &items {
            if seen[filter(at)] < 2 {
                continue;
            }
            let id = id as usize;
            let rowb = row_at::<W>(heap, &ovf_rows, at);
            let key = (rowb[0] >> (32 - rb)) as usize;
            let mut q = chains.push(key, id as u16, at);
            while q != NIL {
                let qi = q as usize;
                let (older, qat) = chains.link(qi);
                q = older;
                if row_at::<W>(heap, &ovf_rows, qat) == rowb {
                    out.push((b as u32, qi as u16, id as u16));
                }
            }
        }
        for &(_, at) in &items {
            seen[filter(at)] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_code_round_trips() {
        for b in 1..3000usize {
            for a in [0, b / 3, b - 1] {
                assert_eq!(pair_decode(pair_code(a, b)), (a, b));
            }
        }
    }

    /// Tiny regions push most rows through the overflow store; too few overflow ids make
    /// the solve give up (the caller then runs the general solver) rather than drop rows.
    #[test]
    fn overflow_store_keeps_every_row() {
        let p = crate::Params::new(48, 5).unwrap();
        for nonce in 0..12u128 {
            let gen =
                crate::HashGen::new(p, b"ZcashPoW", b"overflow", &crate::nonce_from_int(nonce))
                    .unwrap();
            let want = crate::reference::solve(&gen);
            for threads in [1, 2] {
                let mut plan = Plan::new(p, threads).unwrap();
                let (full_cap, full_extra) = (plan.cap, plan.extra);
                plan.cap = 16;
                plan.extra = full_cap + full_extra - 16;
                let cands = solve(&gen, &plan, &mut None).expect("ids suffice").cands;
                let mut stats = crate::SolveStats::default();
                let got = crate::solver::finish(cands, &mut stats);
                assert_eq!(got, want, "nonce {nonce} threads {threads}");
                plan.extra = 4;
                assert!(solve(&gen, &plan, &mut None).is_none());
            }
        }
    }

    /// The AVX-512 row kernel (where the CPU has it) and the portable one give the same
    /// candidates in the same order, hence the same solutions, on the parameter sets with
    /// compile-time widths, one and two threads.
    #[test]
    fn row_kernels_give_the_same_candidates() {
        if !avx512::available() {
            println!("skipped: CPU lacks avx512f/avx512vl (or PROOFKIT_FORCE_PORTABLE is set)");
            return;
        }
        for (n, k, nonces) in [(48, 5, 0..6u128), (96, 5, 0..3), (200, 9, 0..1)] {
            let p = crate::Params::new(n, k).unwrap();
            for nonce in nonces {
                let gen =
                    crate::HashGen::new(p, b"ZcashPoW", b"kernels", &crate::nonce_from_int(nonce))
                        .unwrap();
                for threads in [1, 2] {
                    let mut plan = Plan::new(p, threads).unwrap();
                    let simd = solve(&gen, &plan, &mut None).expect("fits");
                    plan.portable = true;
                    let port = solve(&gen, &plan, &mut None).expect("fits");
                    assert_eq!(
                        simd.cands, port.cands,
                        "({n},{k}) nonce {nonce} threads {threads}"
                    );
                    assert_eq!(simd.rows, port.rows);
                    assert_eq!(simd.repeated, port.repeated);
                }
            }
        }
    }

    #[test]
    fn plans_for_the_named_parameters() {
        let p = Plan::new(crate::Params::new(200, 9).unwrap(), 1).unwrap();
        assert_eq!((p.bb, p.rb), (10, 10));
        assert!(p.heap_bytes() < 145 << 20, "{}", p.heap_bytes());
        assert!(Plan::new(crate::Params::new(200, 9).unwrap(), 2).is_some());
        assert!(Plan::new(crate::Params::new(96, 5).unwrap(), 1).is_some());
        assert!(Plan::new(crate::Params::new(48, 5).unwrap(), 1).is_some());
    }

    #[test]
    fn named_parameter_plans_run_fixed_widths() {
        for (n, k) in [(200, 9), (96, 5), (48, 5)] {
            for threads in [1, 2, 3, 4, 6, 8] {
                let p = Plan::new(crate::Params::new(n, k).unwrap(), threads).unwrap();
                let widths = (p.c, p.bb, p.sw[0], p.sw[1]);
                assert!(
                    STEP_FIXED.contains(&widths),
                    "({n},{k}) on {threads} threads: {widths:?} has no fixed-width merge"
                );
                if n == 200 {
                    assert!(
                        LAYER0_FIXED.contains(&(p.bb, p.hw[0])),
                        "(200,9) on {threads} threads: B = {} has no fixed-width layer 0",
                        p.bb
                    );
                }
            }
        }
    }
}
