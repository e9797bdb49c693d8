//! The RandomX virtual machine (specs.md chapter 4) and the hash of chapter 2: scratchpad fill
//! with AesGenerator1R, a chain of `RANDOMX_PROGRAM_COUNT` programs from AesGenerator4R, the
//! scratchpad fingerprint with AesHash1R and the final Blake2b. One VM per thread; the Cache or
//! Dataset it reads is shared read-only.
#![deny(unsafe_code)]

pub mod float;
pub mod interpreter;
#[cfg(target_arch = "x86_64")]
pub mod jit_x86_64;
pub mod light_batch;
pub mod mxcsr;

use crate::aes::Aes;
use crate::blake::{hash256, hash512};
use crate::cache::Cache;
use crate::config::*;
use crate::dataset::Dataset;
use crate::Error;
use proofkit_core::memory::{LargeBuffer, PageKind, PagePolicy};
use std::sync::Arc;

/// What a VM reads dataset items from: a Cache (light mode, items computed on the fly) or a
/// Dataset (fast mode).
#[derive(Clone, Debug)]
pub enum DatasetSource {
    Light(Arc<Cache>),
    Fast(Arc<Dataset>),
}

impl DatasetSource {
    /// Which dataset read the JIT compiles for this source.
    #[cfg(target_arch = "x86_64")]
    pub(crate) fn jit_mode(&self) -> jit_x86_64::JitMode {
        match self {
            DatasetSource::Fast(_) => jit_x86_64::JitMode::Fast,
            DatasetSource::Light(_) => jit_x86_64::JitMode::Light,
        }
    }

    /// `r[0..8] ^=` dataset item `item` (computed from the cache in light mode).
    #[inline(always)]
    pub(crate) fn xor_item(&self, item: u64, r: &mut [u64; 9]) {
        match self {
            DatasetSource::Light(c) => {
                let it = light_batch::item(c, item);
                for i in 0..8 {
                    r[i] ^= it[i];
                }
            }
            DatasetSource::Fast(d) => {
                let it = d.item(item);
                for i in 0..8 {
                    r[i] ^= it[i];
                }
            }
        }
    }
}

/// The register file hashed at the end of each program (specs.md chapter 2): r0-r7, f0-f3,
/// e0-e3, a0-a3, each FP register as (low, high) doubles.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RegisterFile {
    pub r: [u64; 8],
    pub f: [[f64; 2]; 4],
    pub e: [[f64; 2]; 4],
    pub a: [[f64; 2]; 4],
}

impl RegisterFile {
    pub fn to_bytes(&self) -> [u8; 256] {
        let mut b = [0u8; 256];
        for i in 0..8 {
            b[8 * i..8 * i + 8].copy_from_slice(&self.r[i].to_le_bytes());
        }
        for (g, group) in [&self.f, &self.e, &self.a].into_iter().enumerate() {
            for i in 0..4 {
                for h in 0..2 {
                    let o = 64 + 64 * g + 16 * i + 8 * h;
                    b[o..o + 8].copy_from_slice(&group[i][h].to_bits().to_le_bytes());
                }
            }
        }
        b
    }
}

/// Options of a VM.
#[derive(Clone, Copy, Debug)]
pub struct VmOptions {
    pub version: Version,
    pub aes: Aes,
    pub pages: PagePolicy,
    /// Compile programs to x86-64 machine code (ignored elsewhere, and when
    /// `PROOFKIT_FORCE_PORTABLE` is set).
    pub jit: bool,
    /// W^X JIT pages, flipped between writable and executable per program
    /// (RANDOMX_FLAG_SECURE); otherwise one read-write-execute region is reused.
    pub secure: bool,
    /// How the JIT implements CFROUND's rounding modes (x86-64 only).
    pub rounding: JitRounding,
}

impl Default for VmOptions {
    fn default() -> Self {
        VmOptions {
            version: Version::V1,
            aes: Aes::detect(),
            pages: PagePolicy::Transparent,
            jit: true,
            secure: false,
            rounding: JitRounding::Auto,
        }
    }
}

/// How the x86-64 JIT implements the rounding modes that CFROUND selects (the module doc of
/// `jit_x86_64` has the details and the measurements).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JitRounding {
    /// `Embedded` on AMD CPUs with AVX-512F (512-bit operations cost them no clock speed), else
    /// `Mxcsr`; the environment variable `PROOFKIT_JIT_ROUNDING=mxcsr|embedded` overrides.
    #[default]
    Auto,
    /// CFROUND writes MXCSR, as in the reference.
    Mxcsr,
    /// MXCSR never changes: four copies of the loop, one per mode, with AVX-512 static
    /// rounding; CFROUND jumps between them. Falls back to `Mxcsr` without AVX-512F. Only for
    /// AMD: on an Intel Xeon (family 6 model 207) it measured 20x slower than `Mxcsr`, the
    /// loop's legacy-SSE instructions running after 512-bit operations.
    Embedded,
}

/// A generated, decoded program and its configuration.
struct PreparedProgram {
    code: Vec<interpreter::Bytecode>,
    cfg: ProgramConfig,
}

/// Program configuration derived from the 128-byte entropy block (specs.md 4.5): the address
/// registers, datasetOffset, the E mask, the start values of `ma` and `mx`, the `a` registers.
pub(crate) struct ProgramConfig {
    pub(crate) read_reg: [usize; 4],
    pub(crate) dataset_offset: u64,
    pub(crate) e_mask: [u64; 2],
    pub(crate) ma: u32,
    pub(crate) mx: u32,
    pub(crate) a: [[f64; 2]; 4],
}

impl ProgramConfig {
    pub(crate) fn from_entropy(ent: &[u64; 16]) -> Self {
        let small_positive_float = |entropy: u64| {
            let exponent = ((entropy >> 59) + 1023) & 0x7ff;
            f64::from_bits((exponent << 52) | (entropy & ((1 << 52) - 1)))
        };
        let float_mask = |entropy: u64| {
            let exponent = 0x300 | ((entropy >> 60) << 4);
            (entropy & ((1 << 22) - 1)) | (exponent << 52)
        };
        let sel = ent[12];
        ProgramConfig {
            read_reg: [
                (sel & 1) as usize,
                2 + ((sel >> 1) & 1) as usize,
                4 + ((sel >> 2) & 1) as usize,
                6 + ((sel >> 3) & 1) as usize,
            ],
            dataset_offset: (ent[13] % DATASET_EXTRA_ITEMS) * 64,
            e_mask: [float_mask(ent[14]), float_mask(ent[15])],
            ma: (ent[8] & CACHE_LINE_ALIGN_MASK) as u32,
            mx: ent[10] as u32,
            a: std::array::from_fn(|i| {
                [
                    small_positive_float(ent[2 * i]),
                    small_positive_float(ent[2 * i + 1]),
                ]
            }),
        }
    }
}

/// A RandomX virtual machine.
pub struct Vm {
    source: DatasetSource,
    opts: VmOptions,
    scratchpad: LargeBuffer,
    regs: RegisterFile,
    /// Generator state / chain seed (`tempHash` of the batch API).
    seed: [u8; 64],
    program_bytes: Vec<u8>,
    /// The decoded program, reused from program to program.
    bytecode: Vec<interpreter::Bytecode>,
    batch_pending: bool,
    #[cfg(target_arch = "x86_64")]
    jit: Option<(jit_x86_64::ProgramCode, Box<jit_x86_64::JitState>, Vec<u8>)>,
}

/// Whether the VM JIT can run: x86-64, allowed, and (for v2's AES mixing inside the loop) a CPU
/// with AES-NI.
#[cfg(target_arch = "x86_64")]
fn jit_usable(opts: &VmOptions) -> bool {
    opts.jit
        && !proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE")
        && (opts.version == Version::V1 || Aes::hardware().is_some())
}

impl Vm {
    pub fn new(source: DatasetSource, opts: VmOptions) -> Result<Self, Error> {
        if let DatasetSource::Light(c) = &source {
            if !c.is_initialized() {
                return Err(Error::CacheNotInitialized);
            }
        }
        Ok(Vm {
            source,
            opts,
            scratchpad: LargeBuffer::new(SCRATCHPAD_L3, opts.pages)?,
            regs: RegisterFile::default(),
            seed: [0; 64],
            program_bytes: vec![0; 128 + 8 * PROGRAM_MAX_SIZE],
            bytecode: Vec::with_capacity(PROGRAM_MAX_SIZE),
            batch_pending: false,
            #[cfg(target_arch = "x86_64")]
            jit: if jit_usable(&opts) {
                // No executable memory (a strict W^X policy): the interpreter runs instead.
                jit_x86_64::ProgramCode::with_pages(opts.secure, opts.pages)
                    .ok()
                    .map(|c| (c, Box::default(), Vec::new()))
            } else {
                None
            },
        })
    }

    /// A light-mode VM on `cache`.
    pub fn light(cache: Arc<Cache>, version: Version) -> Result<Self, Error> {
        Self::new(
            DatasetSource::Light(cache),
            VmOptions {
                version,
                ..Default::default()
            },
        )
    }

    /// A fast-mode VM on `dataset`.
    pub fn fast(dataset: Arc<Dataset>, version: Version) -> Result<Self, Error> {
        Self::new(
            DatasetSource::Fast(dataset),
            VmOptions {
                version,
                ..Default::default()
            },
        )
    }

    pub fn set_source(&mut self, source: DatasetSource) -> Result<(), Error> {
        if let DatasetSource::Light(c) = &source {
            if !c.is_initialized() {
                return Err(Error::CacheNotInitialized);
            }
        }
        self.source = source;
        Ok(())
    }

    pub fn source(&self) -> &DatasetSource {
        &self.source
    }

    pub fn set_version(&mut self, v: Version) {
        self.opts.version = v;
        #[cfg(target_arch = "x86_64")]
        if self.jit.is_some() && !jit_usable(&self.opts) {
            self.jit = None;
        }
    }

    /// True when programs run as compiled machine code.
    /// The page size the JIT's code lives on (`None` when the interpreter runs).
    pub fn code_pages(&self) -> Option<PageKind> {
        #[cfg(target_arch = "x86_64")]
        {
            self.jit.as_ref().map(|(c, _, _)| c.page_kind())
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }

    pub fn uses_jit(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            self.jit.is_some()
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    pub fn version(&self) -> Version {
        self.opts.version
    }

    pub fn aes(&self) -> Aes {
        self.opts.aes
    }

    pub fn scratchpad_pages(&self) -> PageKind {
        self.scratchpad.kind()
    }

    /// The RandomX hash of `input`.
    pub fn hash(&mut self, input: &[u8]) -> [u8; 32] {
        self.begin(input);
        self.run_chain();
        self.finish()
    }

    /// Batch API: starts hashing `input`; the result comes from the next `hash_next`/`hash_last`.
    pub fn hash_first(&mut self, input: &[u8]) {
        self.begin(input);
        self.batch_pending = true;
    }

    /// Batch API: finishes the pending hash (returned) and starts hashing `next_input`.
    /// Without a pending hash (no `hash_first`), returns `Error::NoPendingHash`.
    pub fn hash_next(&mut self, next_input: &[u8]) -> Result<[u8; 32], Error> {
        if !self.batch_pending {
            return Err(Error::NoPendingHash);
        }
        self.run_chain();
        Ok(self.finish_then_begin(next_input))
    }

    /// Steps 12-14 of this hash and steps 2-4 of the next in one pass over the scratchpad.
    fn finish_then_begin(&mut self, next_input: &[u8]) -> [u8; 32] {
        self.seed = hash512(next_input);
        let fp = self
            .opts
            .aes
            .hash_1r_then_fill_1r(self.scratchpad.as_mut_slice(), &mut self.seed);
        self.final_hash(fp)
    }

    /// Batch API: finishes the pending hash.
    pub fn hash_last(&mut self) -> Result<[u8; 32], Error> {
        if !self.batch_pending {
            return Err(Error::NoPendingHash);
        }
        self.batch_pending = false;
        self.run_chain();
        Ok(self.finish())
    }

    /// Runs one program generated from `seed` on a scratchpad filled from `seed`, with
    /// `iterations` loop iterations and initial rounding mode `fprc`; returns the register file,
    /// the final `fprc` and the scratchpad's AesHash1R. For differential tests and fuzzing of the
    /// JIT against the interpreter.
    #[doc(hidden)]
    pub fn debug_run_program(
        &mut self,
        seed: &[u8; 64],
        fprc: u32,
        iterations: usize,
    ) -> (RegisterFile, u32, [u8; 64]) {
        self.seed = *seed;
        let aes = self.opts.aes;
        let mut fill_state = *seed;
        aes.fill_1r(&mut fill_state, self.scratchpad.as_mut_slice());
        let mut fprc = fprc & 3;
        self.run_program(&mut fprc, iterations);
        (self.regs, fprc, aes.hash_1r(self.scratchpad.as_slice()))
    }

    /// Steps 2-4 of chapter 2: seed and scratchpad.
    fn begin(&mut self, input: &[u8]) {
        self.seed = hash512(input);
        let aes = self.opts.aes;
        aes.fill_1r(&mut self.seed, self.scratchpad.as_mut_slice());
    }

    /// Steps 6-11 of chapter 2.
    fn run_chain(&mut self) {
        let mut fprc = float::ROUND_NEAREST;
        for chain in 0..PROGRAM_COUNT {
            self.run_program(&mut fprc, PROGRAM_ITERATIONS);
            if chain + 1 < PROGRAM_COUNT {
                self.seed = hash512(&self.regs.to_bytes());
            }
        }
    }

    /// Steps 12-14 of chapter 2.
    fn finish(&mut self) -> [u8; 32] {
        let fp = self.opts.aes.hash_1r(self.scratchpad.as_slice());
        self.final_hash(fp)
    }

    /// Step 14: Hash256 of the register file with the scratchpad hash in place of `a`.
    fn final_hash(&self, fp: [u8; 64]) -> [u8; 32] {
        let mut bytes = self.regs.to_bytes();
        bytes[192..].copy_from_slice(&fp);
        hash256(&bytes)
    }

    /// Generates the next program from AesGenerator4R(seed), decodes it and sets the `a`
    /// registers and the configuration (4.5).
    fn prepare_program(&mut self) -> PreparedProgram {
        let size = self.opts.version.program_size();
        let nbytes = 128 + 8 * size;
        let mut gen_state = self.seed;
        self.opts
            .aes
            .fill_4r(&mut gen_state, &mut self.program_bytes[..nbytes]);
        let mut code = std::mem::take(&mut self.bytecode);
        interpreter::decode_bytes_into(&self.program_bytes[128..nbytes], &mut code);
        let ent: [u64; 16] = std::array::from_fn(|i| {
            u64::from_le_bytes(
                self.program_bytes[8 * i..8 * i + 8]
                    .try_into()
                    .expect("8 bytes"),
            )
        });
        let cfg = ProgramConfig::from_entropy(&ent);
        self.regs.a = cfg.a;
        PreparedProgram { code, cfg }
    }

    /// Generates a program from AesGenerator4R(seed) and runs it (4.5, 4.6).
    fn run_program(&mut self, fprc: &mut u32, iterations: usize) {
        let prepared = self.prepare_program();
        self.run_prepared(&prepared, fprc, iterations);
        self.bytecode = prepared.code;
    }

    fn run_prepared(&mut self, prepared: &PreparedProgram, fprc: &mut u32, iterations: usize) {
        let code = &prepared.code;
        let cfg = &prepared.cfg;
        let (mut ma, mut mx) = (cfg.ma, cfg.mx);
        let v2 = self.opts.version == Version::V2;
        let aes = self.opts.aes;

        #[cfg(target_arch = "x86_64")]
        if let Some((region, state, machine_code)) = &mut self.jit {
            let rr = cfg.read_reg.map(|x| x as u8);
            let mode = self.source.jit_mode();
            jit_x86_64::compile_into(machine_code, code, rr, mode, v2, self.opts.rounding);
            let sp = self.scratchpad.as_mut_slice();
            let run = JitRun {
                region,
                state,
                machine_code,
            };
            run.execute(&mut self.regs, sp, &self.source, cfg, fprc, iterations);
            return;
        }
        let mut r = [0u64; 9];
        let mut sp_addr0 = mx;
        let mut sp_addr1 = ma;
        let sp = self.scratchpad.as_mut_slice();
        for _ in 0..iterations {
            // 1-3: scratchpad addresses, integer, F and E registers from the scratchpad.
            (sp_addr0, sp_addr1) =
                load_iteration(&mut self.regs, &mut r, sp, cfg, sp_addr0, sp_addr1);
            // 4: the program.
            interpreter::execute(code, &mut self.regs, &mut r, fprc, sp, &cfg.e_mask, v2);
            // 5-8: dataset read.
            read_dataset(&self.source, cfg, &mut r, &mut ma, &mut mx, v2);
            store_iteration(&mut self.regs, &r, sp, sp_addr0, sp_addr1, aes, v2);
            // 12.
            sp_addr0 = 0;
            sp_addr1 = 0;
        }
        self.regs.r.copy_from_slice(&r[..8]);
    }
}

/// A compiled program and what runs it: the VM's code region and JIT state.
#[cfg(target_arch = "x86_64")]
pub(crate) struct JitRun<'a> {
    pub region: &'a mut jit_x86_64::ProgramCode,
    pub state: &'a mut jit_x86_64::JitState,
    pub machine_code: &'a [u8],
}

#[cfg(target_arch = "x86_64")]
impl JitRun<'_> {
    /// Runs `iterations` loop iterations of the program configured by `cfg` from rounding mode
    /// `fprc`: `r`, `f`, `e` and `fprc` come back updated, `a` is `cfg`'s. Shared by the VM
    /// and the analyses' timed hash.
    pub(crate) fn execute(
        self,
        regs: &mut RegisterFile,
        scratchpad: &mut [u8],
        source: &DatasetSource,
        cfg: &ProgramConfig,
        fprc: &mut u32,
        iterations: usize,
    ) {
        let state = self.state;
        state.r = [0; 8];
        state.a = cfg.a;
        state.e_mask = cfg.e_mask;
        state.mem = cfg.ma as u64 | ((cfg.mx as u64) << 32);
        state.sp_addr = cfg.mx as u64 | ((cfg.ma as u64) << 32);
        state.fprc = *fprc;
        state.iterations = iterations as u64;
        let mode = source.jit_mode();
        jit_x86_64::execute(
            self.region,
            self.machine_code,
            mode,
            state,
            scratchpad,
            source,
            cfg.dataset_offset,
        )
        // Loading code only fails when mprotect does, before anything ran.
        .expect("JIT region protection change failed");
        regs.r = state.r;
        regs.f = state.f;
        regs.e = state.e;
        regs.a = cfg.a;
        *fprc = state.fprc;
    }
}

/// Steps 1-3 of 4.6.2: spAddr0/spAddr1 mixed with the two address registers (their carried
/// values are non-zero only on the first iteration), `r ^=` the 64 bytes at spAddr0, F and E
/// from the 64 bytes at spAddr1. Returns the two addresses. Shared by the interpreter loop and
/// the analyses.
pub(crate) fn load_iteration(
    regs: &mut RegisterFile,
    r: &mut [u64; 9],
    sp: &[u8],
    cfg: &ProgramConfig,
    sp_addr0: u32,
    sp_addr1: u32,
) -> (u32, u32) {
    let word =
        |a: u32| u64::from_le_bytes(sp[a as usize..a as usize + 8].try_into().expect("8 bytes"));
    let sp_mix = r[cfg.read_reg[0]] ^ r[cfg.read_reg[1]];
    let sp_addr0 = (sp_addr0 ^ sp_mix as u32) & SCRATCHPAD_L3_MASK64;
    let sp_addr1 = (sp_addr1 ^ (sp_mix >> 32) as u32) & SCRATCHPAD_L3_MASK64;
    for (i, reg) in r.iter_mut().take(8).enumerate() {
        *reg ^= word(sp_addr0 + 8 * i as u32);
    }
    for i in 0..4 {
        regs.f[i] = interpreter::convert_f(word(sp_addr1 + 8 * i as u32));
        regs.e[i] = interpreter::convert_e(word(sp_addr1 + 8 * (4 + i) as u32), &cfg.e_mask);
    }
    (sp_addr0, sp_addr1)
}

/// Steps 5-8 of 4.6.2: `mx` (v1) or `ma` (v2) mixed with the two address registers, the dataset
/// item at `ma` XORed into `r`, then `ma` and `mx` swapped (v1 prefetches through `mx`, v2
/// through `ma`: two iterations ahead). Shared by the interpreter loop and the analyses.
pub(crate) fn read_dataset(
    source: &DatasetSource,
    cfg: &ProgramConfig,
    r: &mut [u64; 9],
    ma: &mut u32,
    mx: &mut u32,
    v2: bool,
) {
    let read = *ma as u64 & CACHE_LINE_ALIGN_MASK;
    let mix = (r[cfg.read_reg[2]] ^ r[cfg.read_reg[3]]) as u32;
    if v2 {
        *ma ^= mix;
    } else {
        *mx ^= mix;
    }
    source.xor_item((cfg.dataset_offset + read) / 64, r);
    std::mem::swap(mx, ma);
}

/// Steps 9-11 of 4.6.2: integer registers `r` to the scratchpad at `sp_addr1`, F mixed with E
/// (XOR in v1, AES rounds in v2), F registers to the scratchpad at `sp_addr0`. Shared by the
/// interpreter and the observed interpreter of [`crate::analysis`].
pub(crate) fn store_iteration(
    regs: &mut RegisterFile,
    r: &[u64],
    sp: &mut [u8],
    sp_addr0: u32,
    sp_addr1: u32,
    aes: Aes,
    v2: bool,
) {
    for i in 0..8 {
        let a = sp_addr1 as usize + 8 * i;
        sp[a..a + 8].copy_from_slice(&r[i].to_le_bytes());
    }
    if v2 {
        let mut f: [[u8; 16]; 4] = std::array::from_fn(|i| fp_bytes(regs.f[i]));
        let e: [[u8; 16]; 4] = std::array::from_fn(|i| fp_bytes(regs.e[i]));
        aes.mix_f_e(&mut f, &e);
        for i in 0..4 {
            regs.f[i] = fp_from_bytes(&f[i]);
        }
    } else {
        for i in 0..4 {
            for h in 0..2 {
                regs.f[i][h] = f64::from_bits(regs.f[i][h].to_bits() ^ regs.e[i][h].to_bits());
            }
        }
    }
    for i in 0..4 {
        let a = sp_addr0 as usize + 16 * i;
        sp[a..a + 16].copy_from_slice(&fp_bytes(regs.f[i]));
    }
}

fn fp_bytes(x: [f64; 2]) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&x[0].to_bits().to_le_bytes());
    b[8..].copy_from_slice(&x[1].to_bits().to_le_bytes());
    b
}

fn fp_from_bytes(b: &[u8; 16]) -> [f64; 2] {
    [
        f64::from_bits(u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))),
        f64::from_bits(u64::from_le_bytes(b[8..].try_into().expect("8 bytes"))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// JIT code on each page size (and W^X on large pages) hashes like the interpreter.
    #[test]
    fn jit_code_on_every_page_size() {
        let cache = Arc::new(Cache::new(b"code pages", PagePolicy::Transparent).unwrap());
        let mut reference = Vm::new(
            DatasetSource::Light(cache.clone()),
            VmOptions {
                jit: false,
                ..Default::default()
            },
        )
        .unwrap();
        let want = reference.hash(b"code pages input");
        for pages in [PagePolicy::SmallOnly, PagePolicy::Transparent] {
            for secure in [false, true] {
                let opts = VmOptions {
                    pages,
                    secure,
                    ..Default::default()
                };
                let mut vm = Vm::new(DatasetSource::Light(cache.clone()), opts).unwrap();
                let Some(kind) = vm.code_pages() else {
                    eprintln!("skipped: no JIT on this platform");
                    return;
                };
                if pages == PagePolicy::SmallOnly {
                    assert_eq!(kind, PageKind::Small4K);
                } else if proofkit_core::memory::thp_available() {
                    assert_eq!(kind, PageKind::Transparent2M, "secure {secure}");
                }
                assert_eq!(
                    vm.hash(b"code pages input"),
                    want,
                    "{pages:?} secure {secure}"
                );
            }
        }
    }
}
