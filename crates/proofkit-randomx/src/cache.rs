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
