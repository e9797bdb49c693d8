//! The RandomX Cache (specs.md 7.1 and 7.2): the 256 MiB Argon2d memory of a key plus the eight
//! SuperscalarHash programs generated from it, and dataset item generation from them (7.3), which
//! light mode runs for every dataset read and fast mode runs once per item to build the Dataset.
#![deny(unsafe_code)]

use crate::blake::BlakeGenerator;
use crate::config::{CACHE_ACCESSES, CACHE_ITEM_COUNT, CACHE_SIZE};
use crate::superscalar::SuperscalarProgram;
use crate::Error;
use proofkit_core::memory::{LargeBuffer, PageKind, PagePolicy};

/// Register initialisation constants of 7.3 step 1.
const ITEM_MUL: u64 = 6364136223846793005;
const ITEM_XOR: [u64; 7] = [
    9298411001130361340,
    12065312585734608966,
    9306329213124626780,
    5281919268842080866,
    10536153434571861004,
    3398623926847679864,
    9549104520008361294,
];

/// A key's cache. Immutable once built; [`Cache::reinit`] re-keys it in place.
pub struct Cache {
    memory: LargeBuffer,
    key: Vec<u8>,
    programs: Vec<SuperscalarProgram>,
    /// The programs compiled to machine code, when the JIT is available and allowed.
    #[cfg(target_arch = "x86_64")]
    compiled: Option<crate::jit::superscalar_x86_64::CompiledSuperscalar>,
    /// The programs compiled for eight items at once (AVX-512), for building datasets.
    #[cfg(target_arch = "x86_64")]
    vector: Option<crate::jit::superscalar_avx512::SuperscalarAvx512>,
    use_jit: bool,
}

/// Whether SuperscalarHash runs compiled (x86-64, unless `PROOFKIT_FORCE_PORTABLE` is set).
fn jit_allowed() -> bool {
    cfg!(target_arch = "x86_64") && !proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE")
}

impl Cache {
    /// Allocates and initialises the cache for `key` (any length: Argon2 takes it whole, the
    /// SuperscalarHash generator its first 60 bytes).
    pub fn new(key: &[u8], pages: PagePolicy) -> Result<Self, Error> {
        let mut c = Self::alloc(pages)?;
        c.fill(key)?;
        Ok(c)
    }

    /// Like [`Cache::new`], choosing whether SuperscalarHash is compiled (`jit`) or interpreted.
    pub fn with_jit(key: &[u8], pages: PagePolicy, jit: bool) -> Result<Self, Error> {
        let mut c = Self::alloc(pages)?;
        c.use_jit = jit && cfg!(target_arch = "x86_64");
        c.fill(key)?;
        Ok(c)
    }

    /// An allocated cache with no key yet (for the C API's alloc/init split).
    pub fn alloc(pages: PagePolicy) -> Result<Self, Error> {
        Ok(Cache {
            memory: LargeBuffer::new(CACHE_SIZE, pages)?,
            key: Vec::new(),
            programs: Vec::new(),
            #[cfg(target_arch = "x86_64")]
            compiled: None,
            #[cfg(target_arch = "x86_64")]
            vector: None,
            use_jit: jit_allowed(),
        })
    }

    /// Re-keys the cache; a no-op when `key` is the current key.
    pub fn reinit(&mut self, key: &[u8]) -> Result<(), Error> {
        if self.is_initialized() && self.key == key {
            return Ok(());
        }
        self.fill(key)
    }

    fn fill(&mut self, key: &[u8]) -> Result<(), Error> {
        self.programs.clear();
        crate::argon2_fill::fill(&mut self.memory, key)
            .map_err(|e| Error::Argon2(e.to_string()))?;
        let mut gen = BlakeGenerator::new(key, 0);
        self.programs = (0..CACHE_ACCESSES)
            .map(|_| SuperscalarProgram::generate(&mut gen))
            .collect();
        #[cfg(target_arch = "x86_64")]
        {
            // A JIT failure (no executable memory, e.g. under a strict W^X policy) falls back
            // to the portable executor.
            self.compiled = if self.use_jit {
                crate::jit::superscalar_x86_64::CompiledSuperscalar::compile(&self.programs).ok()
            } else {
                None
            };
            self.vector = if self.use_jit {
                crate::jit::superscalar_avx512::SuperscalarAvx512::compile(&self.programs)
                    .ok()
                    .flatten()
            } else {
                None
            };
        }
        self.key = key.to_vec();
        Ok(())
    }

    pub fn is_initialized(&self) -> bool {
        self.programs.len() == CACHE_ACCESSES
    }

    pub fn key(&self) -> &[u8] {
        &self.key
    }

    pub fn page_kind(&self) -> PageKind {
        self.memory.kind()
    }

    /// The Argon2 memory as little-endian u64 words.
    pub fn words(&self) -> &[u64] {
        self.memory.as_u64_slice()
    }

    /// The raw memory (for the C API's `randomx_get_cache_memory`).
    pub fn memory_ptr(&self) -> *const u8 {
        self.memory.as_ptr()
    }

    /// True when SuperscalarHash runs as compiled machine code.
    pub fn superscalar_jit(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            self.compiled.is_some()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    pub fn programs(&self) -> &[SuperscalarProgram] {
        &self.programs
    }

    /// Dataset item `item` (specs.md 7.3).
    #[inline]
    pub fn dataset_item(&self, item: u64) -> [u64; 8] {
        debug_assert!(self.is_initialized());
        let words = self.words();
        let r0 = item.wrapping_add(1).wrapping_mul(ITEM_MUL);
        let mut r = [r0, 0, 0, 0, 0, 0, 0, 0];
        for i in 0..7 {
            r[i + 1] = r0 ^ ITEM_XOR[i];
        }
        let mut cache_index = item;
        for (i, prog) in self.programs.iter().enumerate() {
            let base = ((cache_index % CACHE_ITEM_COUNT) * 8) as usize;
            let mix = &words[base..base + 8];
            // Start the (DRAM-latency) read now, so that it overlaps the program's execution.
            proofkit_core::memory::prefetch_read(&mix[0]);
            #[cfg(target_arch = "x86_64")]
            match &self.compiled {
                Some(c) => c.execute(i, &mut r),
                None => prog.execute(&mut r),
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                let _ = i;
                prog.execute(&mut r);
            }
            for j in 0..8 {
                r[j] ^= mix[j];
            }
            cache_index = r[prog.address_register];
        }
        r
    }
}

impl Cache {
    /// `N` consecutive dataset items from `first`, computed interleaved: program `i` runs for
    /// every item before program `i + 1`, so that the `N` independent cache-line reads of each
    /// step are in flight together instead of one after another.
    #[inline]
    pub fn dataset_items<const N: usize>(&self, first: u64) -> [[u64; 8]; N] {
        self.dataset_items_at(std::array::from_fn(|k| first + k as u64))
    }

    /// The dataset items numbered `items`, computed interleaved (see [`Cache::dataset_items`]).
    #[inline]
    pub fn dataset_items_at<const N: usize>(&self, items: [u64; N]) -> [[u64; 8]; N] {
        debug_assert!(self.is_initialized());
        let words = self.words();
        let mut regs = [[0u64; 8]; N];
        let mut index = [0u64; N];
        for k in 0..N {
            let item = items[k];
            let r0 = item.wrapping_add(1).wrapping_mul(ITEM_MUL);
            regs[k][0] = r0;
            for i in 0..7 {
                regs[k][i + 1] = r0 ^ ITEM_XOR[i];
            }
            index[k] = item;
        }
        for (i, prog) in self.programs.iter().enumerate() {
            let mut mix = [[0u64; 8]; N];
            for k in 0..N {
                let base = ((index[k] % CACHE_ITEM_COUNT) * 8) as usize;
                proofkit_core::memory::prefetch_read(&words[base]);
            }
            for k in 0..N {
                let base = ((index[k] % CACHE_ITEM_COUNT) * 8) as usize;
                mix[k].copy_from_slice(&words[base..base + 8]);
            }
            for r in regs.iter_mut() {
                #[cfg(target_arch = "x86_64")]
                match &self.compiled {
                    Some(c) => c.execute(i, r),
                    None => prog.execute(r),
                }
                #[cfg(not(target_arch = "x86_64"))]
                prog.execute(r);
            }
            for k in 0..N {
                for j in 0..8 {
                    regs[k][j] ^= mix[k][j];
                }
                index[k] = regs[k][prog.address_register];
            }
        }
        regs
    }
}

impl Cache {
    /// True when dataset builds compute eight items per instruction (AVX-512 SuperscalarHash).
    pub fn superscalar_vector(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            self.vector.is_some()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Writes items `first ..` into `out` (8 words per item): groups of
    /// [`VECTOR_GROUP_ITEMS`] through the AVX-512 programs where available (four batches of
    /// eight in turn, so that each batch's cache lines arrive while the others compute), the
    /// rest through [`Cache::dataset_items`] / [`Cache::dataset_item`].
    pub fn dataset_items_into(&self, first: u64, out: &mut [u64]) {
        debug_assert!(self.is_initialized() && out.len() % 8 == 0);
        let mut item = first;
        let mut rest = out;
        #[cfg(target_arch = "x86_64")]
        if let Some(vector) = &self.vector {
            use crate::jit::superscalar_avx512::Lanes8;
            let mut groups = rest.chunks_exact_mut(8 * VECTOR_GROUP_ITEMS);
            let mut lanes: [Lanes8; VECTOR_GROUP_ITEMS / 8] = Default::default();
            for group in &mut groups {
                for (b, l) in lanes.iter_mut().enumerate() {
                    for k in 0..8 {
                        start_lane(l, k, item + (8 * b + k) as u64);
                    }
                }
                self.run_lanes(vector, &mut lanes);
                for (b, l) in lanes.iter().enumerate() {
                    for k in 0..8 {
                        let dst = &mut group[8 * (8 * b + k)..8 * (8 * b + k + 1)];
                        for (j, w) in dst.iter_mut().enumerate() {
                            *w = l.r[j][k];
                        }
                    }
                }
                item += VECTOR_GROUP_ITEMS as u64;
            }
            rest = groups.into_remainder();
        }
        let mut batches = rest.chunks_exact_mut(8 * SCALAR_BATCH_ITEMS);
        for batch in &mut batches {
            let items = self.dataset_items::<SCALAR_BATCH_ITEMS>(item);
            for (dst, src) in batch.chunks_exact_mut(8).zip(items.iter()) {
                dst.copy_from_slice(src);
            }
            item += SCALAR_BATCH_ITEMS as u64;
        }
        for dst in batches.into_remainder().chunks_exact_mut(8) {
            dst.copy_from_slice(&self.dataset_item(item));
            item += 1;
        }
    }
}

impl Cache {
    /// Two dataset items computed together (light mode's current and next reads): in two lanes
    /// of the AVX-512 programs where available (their cost is the programs' latency, about the
    /// same for one lane as for eight, and shorter than two interleaved scalar items), else
    /// interleaved scalar.
    pub fn dataset_item_pair(&self, a: u64, b: u64) -> [[u64; 8]; 2] {
        #[cfg(target_arch = "x86_64")]
        if let Some(vector) = &self.vector {
            use crate::jit::superscalar_avx512::Lanes8;
            let words = self.words();
            let mut l = Lanes8::default();
            for k in 0..8 {
                // Lanes 2-7 repeat the pair: the same lines, no extra memory traffic.
                start_lane(&mut l, k, if k % 2 == 0 { a } else { b });
            }
            vector.chain(&mut l, words);
            return [
                std::array::from_fn(|j| l.r[j][0]),
                std::array::from_fn(|j| l.r[j][1]),
            ];
        }
        self.dataset_items_at([a, b])
    }
}

impl Cache {
    /// The dataset items numbered `items` into `out` (one per item), all computed together:
    /// light-mode batches ask for the current items of many VMs at once. Batches of eight run
    /// in lanes of the AVX-512 programs where available, up to four batches in turn per step
    /// (each batch's cache lines arrive while the others compute; a short last batch repeats
    /// its first item in the spare lanes), else sixteen interleaved scalar items at a time.
    pub fn dataset_items_many(&self, items: &[u64], out: &mut [[u64; 8]]) {
        assert_eq!(items.len(), out.len(), "one output per item");
        debug_assert!(self.is_initialized());
        #[cfg(target_arch = "x86_64")]
        if let Some(vector) = &self.vector {
            use crate::jit::superscalar_avx512::Lanes8;
            let mut lanes: [Lanes8; VECTOR_GROUP_ITEMS / 8] = Default::default();
            for (group, dst) in items
                .chunks(VECTOR_GROUP_ITEMS)
                .zip(out.chunks_mut(VECTOR_GROUP_ITEMS))
            {
                let batches = group.len().div_ceil(8);
                for (b, l) in lanes.iter_mut().take(batches).enumerate() {
                    let batch = &group[8 * b..group.len().min(8 * b + 8)];
                    for k in 0..8 {
                        start_lane(l, k, *batch.get(k).unwrap_or(&batch[0]));
                    }
                }
                self.run_lanes(vector, &mut lanes[..batches]);
                for (k, item) in dst.iter_mut().enumerate() {
                    let l = &lanes[k / 8];
                    *item = std::array::from_fn(|j| l.r[j][k % 8]);
                }
            }
            return;
        }
        const N: usize = SCALAR_BATCH_ITEMS;
        for (batch, dst) in items.chunks(N).zip(out.chunks_mut(N)) {
            let numbers: [u64; N] = std::array::from_fn(|k| *batch.get(k).unwrap_or(&batch[0]));
            let values = self.dataset_items_at(numbers);
            dst.copy_from_slice(&values[..dst.len()]);
        }
    }
}

/// Lane `k` of `lanes` at the start of dataset item `n` (7.3 step 1), its first cache line
/// prefetched.
#[cfg(target_arch = "x86_64")]
fn start_lane(lanes: &mut crate::jit::superscalar_avx512::Lanes8, k: usize, n: u64) {
    let r0 = n.wrapping_add(1).wrapping_mul(ITEM_MUL);
    lanes.r[0][k] = r0;
    for j in 1..8 {
        lanes.r[j][k] = r0 ^ ITEM_XOR[j - 1];
    }
    lanes.index[k] = (n % CACHE_ITEM_COUNT) * 8;
}

#[cfg(target_arch = "x86_64")]
impl Cache {
    /// Every program on the batches of `lanes` in turn (each batch's cache lines arrive while
    /// the others compute), their first lines prefetched first.
    fn run_lanes(
        &self,
        vector: &crate::jit::superscalar_avx512::SuperscalarAvx512,
        lanes: &mut [crate::jit::superscalar_avx512::Lanes8],
    ) {
        let words = self.words();
        for l in lanes.iter() {
            for &index in &l.index {
                proofkit_core::memory::prefetch_read(&words[index as usize]);
            }
        }
        for i in 0..self.programs.len() {
            for l in lanes.iter_mut() {
                vector.step(i, l, words);
            }
        }
    }
}

/// Items per group of the vector build: four batches of eight lanes.
pub const VECTOR_GROUP_ITEMS: usize = 32;

/// Items per interleaved batch of the scalar build: sixteen independent items keep sixteen
/// cache-line reads in flight per SuperscalarHash step (the scalar build is bound by their
/// latency as much as by arithmetic). CPU time per item on the Zen 4 of the README
/// (`cargo run --release -p proofkit-randomx --example item_timing`): 1 at a time ~1.3 us,
/// 8 ~0.73 us, 16 ~0.65 us, 32 no better.
const SCALAR_BATCH_ITEMS: usize = 16;

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("key_len", &self.key.len())
            .field("pages", &self.memory.kind())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_items_equal_single_items() {
        let cache = Cache::new(b"interleave", PagePolicy::Transparent).unwrap();
        for first in [0u64, 12345, crate::config::DATASET_ITEM_COUNT - 8] {
            let pair = cache.dataset_item_pair(first + 3, first);
            assert_eq!(
                pair,
                [cache.dataset_item(first + 3), cache.dataset_item(first)]
            );
            let batch = cache.dataset_items::<8>(first);
            for (k, item) in batch.iter().enumerate() {
                assert_eq!(
                    *item,
                    cache.dataset_item(first + k as u64),
                    "item {}",
                    first + k as u64
                );
            }
        }
    }

    /// The dataset build path (vector groups where the CPU has AVX-512, then scalar batches,
    /// then single items) equals single items, at both ends of the dataset.
    #[test]
    fn dataset_items_into_equals_single_items() {
        let cache = Cache::new(b"vector build", PagePolicy::Transparent).unwrap();
        if !cache.superscalar_vector() {
            eprintln!("skipped: CPU lacks AVX-512F/DQ (vector build); scalar path checked only");
        }
        let last = crate::config::DATASET_ITEM_COUNT;
        for (first, count) in [(0u64, 32 * 5 + 16 + 3), (777_777, 64), (last - 70, 70)] {
            let mut out = vec![0u64; 8 * count as usize];
            cache.dataset_items_into(first, &mut out);
            for k in 0..count {
                assert_eq!(
                    out[8 * k as usize..8 * k as usize + 8],
                    cache.dataset_item(first + k),
                    "item {}",
                    first + k
                );
            }
        }
    }

    /// Light-mode batches: any count of scattered items (short batches padded, several groups)
    /// equals single items; the same cache through the scalar path when the vector one runs.
    #[test]
    fn dataset_items_many_equals_single_items() {
        let cache = Cache::new(b"many items", PagePolicy::Transparent).unwrap();
        if !cache.superscalar_vector() {
            eprintln!("skipped: CPU lacks AVX-512F/DQ (vector lanes); scalar path checked only");
        }
        let last = crate::config::DATASET_ITEM_COUNT - 1;
        for count in [0usize, 1, 2, 7, 9, 16, 17, 33, 70] {
            // Scattered items, the dataset's last one at the end.
            let items: Vec<u64> = (1..=count as u64)
                .map(|k| match k == count as u64 {
                    true => last,
                    false => k.wrapping_mul(0x9E37_79B9_7F4A_7C15) % last,
                })
                .collect();
            let mut out = vec![[0u64; 8]; count];
            cache.dataset_items_many(&items, &mut out);
            for (item, value) in items.iter().zip(&out) {
                assert_eq!(*value, cache.dataset_item(*item), "item {item} of {count}");
            }
        }
    }

    #[test]
    fn xor_constants_are_the_documented_hash() {
        // 7.3: bytes 8..64 of Hash512("RandomX SuperScalarHash initialize"), r1 += 2^33 + 700,
        // r3 += 2^14.
        let h = crate::blake::hash512(b"RandomX SuperScalarHash initialize");
        let mut c: Vec<u64> = (1..8)
            .map(|i| u64::from_le_bytes(h[8 * i..8 * i + 8].try_into().unwrap()))
            .collect();
        c[0] = c[0].wrapping_add((1 << 33) + 700);
        c[2] = c[2].wrapping_add(1 << 14);
        assert_eq!(c, ITEM_XOR);
    }
}
