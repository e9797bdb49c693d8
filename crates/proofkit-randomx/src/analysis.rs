//! Hooks for the analyses of the RandomX design document (appendices A-F, chapters 2.5.1, 2.8.2
//! and 2.8.3), used by the `proofkit-randomx-lab` crate. Nothing here is on the normal hashing
//! paths: [`AnalysisVm`] is a second driver of the same VM pieces ([`interpreter::decode`] and
//! [`interpreter::execute`], the JIT's `compile_into`/`execute`, the AES generators), so `Vm`
//! pays nothing for the instrumentation.
//!
//! Two ways to run a hash:
//! - [`AnalysisVm::hash_observed`]: the interpreter, one instruction at a time, reporting every
//!   scratchpad read and write (with its address), every branch and the register file at the end
//!   of each iteration to an [`Observer`].
//! - [`AnalysisVm::hash_timed`]: the normal engine (the JIT where it runs, else the
//!   interpreter) with the thread's CPU-time clock read between the phases of chapter 2 (scratchpad fill, program
//!   generation and compilation, execution, register-file hash, scratchpad hash).
//!
//! Both return the hash, and the tests check it against [`crate::Vm::hash`], so what the analyses
//! measure is the real algorithm.
#![deny(unsafe_code)]

use crate::aes::Aes;
use crate::blake::{hash256, hash512, BlakeGenerator};
use crate::config::*;
use crate::program::Program;
use crate::superscalar::SuperscalarProgram;
use crate::vm::interpreter::{self, Bytecode};
use crate::vm::{float, DatasetSource, ProgramConfig, RegisterFile};
use crate::Error;
use proofkit_core::memory::{LargeBuffer, PagePolicy};
use std::time::Instant;

/// The program that AesGenerator4R produces from a 64-byte seed (specs.md 4.5): the generator
/// output of one chain step, parsed.
pub fn generate_program(seed: &[u8; 64], version: crate::Version, aes: Aes) -> Program {
    let size = version.program_size();
    let mut bytes = vec![0u8; 128 + 8 * size];
    let mut state = *seed;
    aes.fill_4r(&mut state, &mut bytes);
    Program::from_bytes(&bytes, size)
}

/// A program's configuration (specs.md 4.5.3-4.5.5), derived from its 128 bytes of entropy: for
/// tools that run compiled programs themselves (the `loop_ab` example).
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramSettings {
    /// readReg0-3: the registers that mix spAddr (0, 1) and the dataset address (2, 3).
    pub read_reg: [u8; 4],
    /// datasetOffset in bytes.
    pub dataset_offset: u64,
    /// The E registers' exponent mask (eMask) for the low and high halves.
    pub e_mask: [u64; 2],
    pub ma: u32,
    pub mx: u32,
    /// The A registers.
    pub a: [[f64; 2]; 4],
}

/// The configuration of the program with this entropy (the first 16 words of its generator
/// output).
pub fn program_settings(entropy: &[u64; 16]) -> ProgramSettings {
    let c = crate::vm::ProgramConfig::from_entropy(entropy);
    ProgramSettings {
        read_reg: c.read_reg.map(|r| r as u8),
        dataset_offset: c.dataset_offset,
        e_mask: c.e_mask,
        ma: c.ma,
        mx: c.mx,
        a: c.a,
    }
}

/// The seed of the first program of a hash: `Hash512(input)` (specs.md chapter 2, step 2). The
/// scratchpad is filled from it first, which advances it, so the first program comes from the
/// generator state after the fill; [`AnalysisVm`] follows that order.
pub fn input_seed(input: &[u8]) -> [u8; 64] {
    hash512(input)
}

/// The `CACHE_ACCESSES` SuperscalarHash programs of a key (specs.md 7.2: BlakeGenerator seeded
/// with the key, nonce 0). Their statistics are the fields of [`SuperscalarProgram`]:
/// instruction count, `mul_count`, `asic_latency` (the longest dependency chain) and
/// `cpu_latency`.
pub fn superscalar_programs(key: &[u8]) -> Vec<SuperscalarProgram> {
    let mut gen = BlakeGenerator::new(key, 0);
    (0..CACHE_ACCESSES)
        .map(|_| SuperscalarProgram::generate(&mut gen))
        .collect()
}

/// Which AES generator a stream runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AesGeneratorKind {
    /// AesGenerator1R (specs.md 3.2): the scratchpad fill.
    OneRound,
    /// AesGenerator4R (specs.md 3.3): the program buffer.
    FourRounds,
}

/// An endless AesGenerator1R/4R output stream from a 64-byte state, for statistical batteries.
#[derive(Clone, Debug)]
pub struct AesStream {
    aes: Aes,
    kind: AesGeneratorKind,
    state: [u8; 64],
}

impl AesStream {
    pub fn new(kind: AesGeneratorKind, state: [u8; 64], aes: Aes) -> Self {
        AesStream { aes, kind, state }
    }

    /// Writes the next `out.len()` bytes of the stream (a multiple of 64).
    pub fn fill(&mut self, out: &mut [u8]) {
        match self.kind {
            AesGeneratorKind::OneRound => self.aes.fill_1r(&mut self.state, out),
            AesGeneratorKind::FourRounds => self.aes.fill_4r(&mut self.state, out),
        }
    }

    pub fn state(&self) -> &[u8; 64] {
        &self.state
    }
}

/// What a scratchpad access is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessKind {
    /// A memory operand of IADD_M, ISUB_M, IMUL_M, IMULH_M, ISMULH_M, IXOR_M, FADD_M, FSUB_M or
    /// FDIV_M (8 bytes).
    Instruction,
    /// ISTORE (8 bytes).
    Store,
    /// Step 2 of specs.md 4.6.2: r0-r7 loaded from `spAddr0` (64 bytes).
    IntegerLoad,
    /// Step 3: F and E loaded from `spAddr1` (64 bytes).
    FloatLoad,
    /// Step 9: r0-r7 stored to `spAddr1` (64 bytes).
    IntegerStore,
    /// Step 11: F (mixed with E) stored to `spAddr0` (64 bytes).
    FloatStore,
}

/// Receives the events of [`AnalysisVm::hash_observed`]. Every method has an empty default.
#[allow(unused_variables)]
pub trait Observer {
    /// Program `index` (0..8) of the chain is about to run.
    fn program_start(&mut self, index: usize, program: &Program, code: &[Bytecode]) {}
    /// Instruction `pc` is about to execute (taken branches make some run more than once).
    fn instruction(&mut self, pc: usize, code: &Bytecode) {}
    /// A scratchpad read of `bytes` bytes at byte offset `addr`.
    fn read(&mut self, addr: u32, bytes: u32, kind: AccessKind) {}
    /// A scratchpad write of `bytes` bytes at byte offset `addr`.
    fn write(&mut self, addr: u32, bytes: u32, kind: AccessKind) {}
    /// A CBRANCH at `pc` was evaluated.
    fn branch(&mut self, pc: usize, taken: bool) {}
    /// The program pass of iteration `iteration` (step 4) has finished; `regs` holds r, F, E and
    /// A at that point, before the F/E mixing of step 10.
    fn iteration_end(&mut self, iteration: usize, regs: &RegisterFile) {}
}

/// An observer that records nothing.
impl Observer for () {}

/// Nanoseconds (thread CPU time, see `clock_ns`) spent in each phase of one hash (specs.md
/// chapter 2).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HashTiming {
    /// Hash512 of the input and the AesGenerator1R scratchpad fill (steps 2-4).
    pub fill_ns: u64,
    /// Per program: AesGenerator4R, decoding and (with the JIT) compilation.
    pub generate_ns: Vec<u64>,
    /// Per program: the 2048 iterations.
    pub execute_ns: Vec<u64>,
    /// Per program: Hash512 of the register file (the last one is the final hash's input).
    pub register_hash_ns: Vec<u64>,
    /// AesHash1R of the scratchpad (step 12).
    pub scratchpad_hash_ns: u64,
    /// The final Hash256 (step 14).
    pub final_ns: u64,
}

impl HashTiming {
    pub fn total_ns(&self) -> u64 {
        self.fill_ns
            + self.generate_ns.iter().sum::<u64>()
            + self.execute_ns.iter().sum::<u64>()
            + self.register_hash_ns.iter().sum::<u64>()
            + self.scratchpad_hash_ns
            + self.final_ns
    }
}

/// The scratchpad address an instruction reads or writes, from the registers before it runs.
pub fn memory_operand(code: &Bytecode, r: &[u64; 9]) -> Option<(u32, AccessKind)> {
    let at = |reg: u8, imm: u64, mask: u32| (r[reg as usize].wrapping_add(imm) as u32) & mask;
    match *code {
        Bytecode::IaddM { src, imm, mask, .. }
        | Bytecode::IsubM { src, imm, mask, .. }
        | Bytecode::ImulM { src, imm, mask, .. }
        | Bytecode::ImulhM { src, imm, mask, .. }
        | Bytecode::IsmulhM { src, imm, mask, .. }
        | Bytecode::IxorM { src, imm, mask, .. }
        | Bytecode::FaddM { src, imm, mask, .. }
        | Bytecode::FsubM { src, imm, mask, .. }
        | Bytecode::FdivM { src, imm, mask, .. } => {
            Some((at(src, imm, mask), AccessKind::Instruction))
        }
        Bytecode::Istore { dst, imm, mask, .. } => Some((at(dst, imm, mask), AccessKind::Store)),
        _ => None,
    }
}

/// The clock of [`AnalysisVm::hash_timed`]: CPU time of the calling thread where the OS has it
/// (time spent descheduled on a busy machine is not counted), else wall-clock time.
fn clock_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    match proofkit_core::cputime::thread_cpu_time() {
        Some(d) => d.as_nanos() as u64,
        None => START.get_or_init(Instant::now).elapsed().as_nanos() as u64,
    }
}

fn elapsed_ns(start: u64) -> u64 {
    clock_ns().saturating_sub(start)
}

/// A VM driver for the analyses: same algorithm as [`crate::Vm`], with observation and timing.
pub struct AnalysisVm {
    source: DatasetSource,
    version: crate::Version,
    aes: Aes,
    scratchpad: LargeBuffer,
    regs: RegisterFile,
    #[cfg(target_arch = "x86_64")]
    jit: Option<(
        crate::vm::jit_x86_64::ProgramCode,
        Box<crate::vm::jit_x86_64::JitState>,
        Vec<u8>,
    )>,
}

impl AnalysisVm {
    /// A driver on `source`; `jit` asks for compiled programs in [`Self::hash_timed`] (granted on
    /// x86-64 with executable memory, unless `PROOFKIT_FORCE_PORTABLE` is set; v2 also needs
    /// AES-NI).
    pub fn new(source: DatasetSource, version: crate::Version, jit: bool) -> Result<Self, Error> {
        if let DatasetSource::Light(c) = &source {
            if !c.is_initialized() {
                return Err(Error::CacheNotInitialized);
            }
        }
        let aes = Aes::detect();
        #[cfg(target_arch = "x86_64")]
        let jit = if jit
            && !proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE")
            && (version == crate::Version::V1 || Aes::hardware().is_some())
        {
            crate::vm::jit_x86_64::ProgramCode::new(false)
                .ok()
                .map(|c| (c, Box::default(), Vec::new()))
        } else {
            None
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = jit;
        Ok(AnalysisVm {
            source,
            version,
            aes,
            scratchpad: LargeBuffer::new(SCRATCHPAD_L3, PagePolicy::Transparent)?,
            regs: RegisterFile::default(),
            #[cfg(target_arch = "x86_64")]
            jit,
        })
    }

    /// True when [`Self::hash_timed`] runs compiled programs.
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

    pub fn version(&self) -> crate::Version {
        self.version
    }

    pub fn aes(&self) -> Aes {
        self.aes
    }

    /// The scratchpad after the last hash (2 MiB).
    pub fn scratchpad(&self) -> &[u8] {
        self.scratchpad.as_slice()
    }

    /// The register file after the last program.
    pub fn registers(&self) -> &RegisterFile {
        &self.regs
    }

    /// The hash of `input` on the interpreter, reporting to `obs`.
    pub fn hash_observed<O: Observer>(&mut self, input: &[u8], obs: &mut O) -> [u8; 32] {
        let mut seed = hash512(input);
        self.aes.fill_1r(&mut seed, self.scratchpad.as_mut_slice());
        let mut fprc = float::ROUND_NEAREST;
        for index in 0..PROGRAM_COUNT {
            let program = generate_program(&seed, self.version, self.aes);
            let code = interpreter::decode(&program);
            obs.program_start(index, &program, &code);
            self.run_observed(&program, &code, &mut fprc, obs);
            seed = hash512(&self.regs.to_bytes());
        }
        self.finish()
    }

    /// The hash of `input` on the normal engine, with the time of each phase.
    pub fn hash_timed(&mut self, input: &[u8]) -> ([u8; 32], HashTiming) {
        let mut t = HashTiming::default();
        let start = clock_ns();
        let mut seed = hash512(input);
        self.aes.fill_1r(&mut seed, self.scratchpad.as_mut_slice());
        t.fill_ns = elapsed_ns(start);
        let mut fprc = float::ROUND_NEAREST;
        for _ in 0..PROGRAM_COUNT {
            let start = clock_ns();
            let program = generate_program(&seed, self.version, self.aes);
            let code = interpreter::decode(&program);
            let cfg = ProgramConfig::from_entropy(&program.entropy);
            #[cfg(target_arch = "x86_64")]
            if let Some((_, _, machine_code)) = &mut self.jit {
                crate::vm::jit_x86_64::compile_into(
                    machine_code,
                    &code,
                    cfg.read_reg.map(|x| x as u8),
                    self.source.jit_mode(),
                    self.version == crate::Version::V2,
                    crate::vm::JitRounding::Auto,
                );
            }
            t.generate_ns.push(elapsed_ns(start));
            let start = clock_ns();
            #[cfg(target_arch = "x86_64")]
            let compiled = if let Some((region, state, machine_code)) = &mut self.jit {
                let run = crate::vm::JitRun {
                    region,
                    state,
                    machine_code,
                };
                let sp = self.scratchpad.as_mut_slice();
                run.execute(
                    &mut self.regs,
                    sp,
                    &self.source,
                    &cfg,
                    &mut fprc,
                    PROGRAM_ITERATIONS,
                );
                true
            } else {
                false
            };
            #[cfg(not(target_arch = "x86_64"))]
            let compiled = false;
            if !compiled {
                self.run_observed(&program, &code, &mut fprc, &mut ());
            }
            t.execute_ns.push(elapsed_ns(start));
            let start = clock_ns();
            seed = hash512(&self.regs.to_bytes());
            t.register_hash_ns.push(elapsed_ns(start));
        }
        let start = clock_ns();
        let fp = self.aes.hash_1r(self.scratchpad.as_slice());
        t.scratchpad_hash_ns = elapsed_ns(start);
        let start = clock_ns();
        let mut bytes = self.regs.to_bytes();
        bytes[192..].copy_from_slice(&fp);
        let out = hash256(&bytes);
        t.final_ns = elapsed_ns(start);
        (out, t)
    }

    /// Steps 12-14 of chapter 2.
    fn finish(&mut self) -> [u8; 32] {
        let fp = self.aes.hash_1r(self.scratchpad.as_slice());
        let mut bytes = self.regs.to_bytes();
        bytes[192..].copy_from_slice(&fp);
        hash256(&bytes)
    }

    /// One program on the interpreter (specs.md 4.6.2), an instruction at a time.
    fn run_observed<O: Observer>(
        &mut self,
        program: &Program,
        code: &[Bytecode],
        fprc: &mut u32,
        obs: &mut O,
    ) {
        let cfg = ProgramConfig::from_entropy(&program.entropy);
        let v2 = self.version == crate::Version::V2;
        let aes = self.aes;
        self.regs.a = cfg.a;
        let (mut ma, mut mx) = (cfg.ma, cfg.mx);
        let mut r = [0u64; 9];
        let mut sp_addr0 = mx;
        let mut sp_addr1 = ma;
        let sp = self.scratchpad.as_mut_slice();
        for iteration in 0..PROGRAM_ITERATIONS {
            (sp_addr0, sp_addr1) =
                crate::vm::load_iteration(&mut self.regs, &mut r, sp, &cfg, sp_addr0, sp_addr1);
            obs.read(sp_addr0, 64, AccessKind::IntegerLoad);
            obs.read(sp_addr1, 64, AccessKind::FloatLoad);
            let mut pc = 0usize;
            while pc < code.len() {
                obs.instruction(pc, &code[pc]);
                if let Bytecode::Cbranch {
                    dst,
                    cimm,
                    cond_mask,
                    target,
                } = code[pc]
                {
                    // The interpreter's jump target indexes the whole program, so branches are
                    // taken here rather than in a one-instruction `execute`.
                    r[dst as usize] = r[dst as usize].wrapping_add(cimm);
                    let taken = r[dst as usize] & cond_mask == 0;
                    obs.branch(pc, taken);
                    pc = if taken { (target + 1) as usize } else { pc + 1 };
                    continue;
                }
                if let Some((a, kind)) = memory_operand(&code[pc], &r) {
                    if kind == AccessKind::Store {
                        obs.write(a, 8, kind);
                    } else {
                        obs.read(a, 8, kind);
                    }
                }
                interpreter::execute(
                    &code[pc..pc + 1],
                    &mut self.regs,
                    &mut r,
                    fprc,
                    sp,
                    &cfg.e_mask,
                    v2,
                );
                pc += 1;
            }
            self.regs.r.copy_from_slice(&r[..8]);
            obs.iteration_end(iteration, &self.regs);
            crate::vm::read_dataset(&self.source, &cfg, &mut r, &mut ma, &mut mx, v2);
            obs.write(sp_addr1, 64, AccessKind::IntegerStore);
            obs.write(sp_addr0, 64, AccessKind::FloatStore);
            crate::vm::store_iteration(&mut self.regs, &r, sp, sp_addr0, sp_addr1, aes, v2);
            sp_addr0 = 0;
            sp_addr1 = 0;
        }
        self.regs.r.copy_from_slice(&r[..8]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_settings_follow_the_configuration_rules() {
        let mut e = [0u64; 16];
        // readReg from bits 0-3 of word 12 (specs.md 4.5.3): 0b1010 picks r0, r3, r4, r7.
        e[12] = 0b1010;
        // datasetOffset = (word 13 mod (DATASET_EXTRA_SIZE / 64 + 1)) * 64.
        e[13] = DATASET_EXTRA_ITEMS + 5;
        // ma: word 8 masked to a 64-byte-aligned dataset address; mx: the low 32 bits of word 10.
        e[8] = 0x1234_5678_9abc_def0;
        e[10] = 0xffff_ffff_0000_1234;
        // eMask: the low 22 bits of words 14/15, exponent 0x300 | (top 4 bits) << 4.
        e[14] = 0xf000_0000_0030_0001;
        e[15] = 0x1000_0000_0000_0002;
        // a0's low half: exponent 1023 + (top 5 bits); mantissa the low 52 bits.
        e[0] = (3 << 59) | 5;
        let s = program_settings(&e);
        assert_eq!(s.read_reg, [0, 3, 4, 7]);
        assert_eq!(s.dataset_offset, 5 * 64);
        assert_eq!(s.ma, (0x1234_5678_9abc_def0 & CACHE_LINE_ALIGN_MASK) as u32);
        assert_eq!(s.ma % 64, 0);
        assert_eq!(s.mx, 0x1234);
        assert_eq!(s.e_mask[0], (0x3f0 << 52) | 0x30_0001);
        assert_eq!(s.e_mask[1], (0x310 << 52) | 2);
        assert_eq!(s.a[0][0], f64::from_bits(((1023 + 3) << 52) | 5));
        assert_eq!(s.a[0][1], 1.0);
    }

    #[test]
    fn aes_stream_continues_the_generator_state() {
        let state: [u8; 64] = std::array::from_fn(|i| i as u8 * 7);
        for kind in [AesGeneratorKind::OneRound, AesGeneratorKind::FourRounds] {
            let mut whole = vec![0u8; 4096];
            let mut s = state;
            match kind {
                AesGeneratorKind::OneRound => Aes::detect().fill_1r(&mut s, &mut whole),
                AesGeneratorKind::FourRounds => Aes::detect().fill_4r(&mut s, &mut whole),
            }
            let mut stream = AesStream::new(kind, state, Aes::detect());
            let mut pieces = vec![0u8; 4096];
            for chunk in pieces.chunks_mut(1024) {
                stream.fill(chunk);
            }
            assert_eq!(whole, pieces, "{kind:?}");
            assert_eq!(stream.state(), &s);
        }
    }

    #[test]
    fn memory_operand_addresses_follow_the_masks() {
        let r = [0x1234_5678_9abc_def0u64, 5, 0, 0, 0, 0, 0, 0, 0];
        let load = Bytecode::IaddM {
            dst: 1,
            src: 0,
            imm: 8,
            mask: SCRATCHPAD_L1_MASK,
        };
        assert_eq!(
            memory_operand(&load, &r),
            Some((
                (0x9abc_def8u32) & SCRATCHPAD_L1_MASK,
                AccessKind::Instruction
            ))
        );
        let store = Bytecode::Istore {
            dst: 1,
            src: 0,
            imm: u64::MAX,
            mask: SCRATCHPAD_L3_MASK,
        };
        assert_eq!(memory_operand(&store, &r), Some((0, AccessKind::Store)));
        assert_eq!(memory_operand(&Bytecode::InegR { dst: 0 }, &r), None);
    }
}
