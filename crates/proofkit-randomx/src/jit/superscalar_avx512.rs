//! SuperscalarHash for eight dataset items at once (specs.md 6 and 7.3) with AVX-512: lane `k`
//! of zmm `j` is register `r_j` of item `k`, so every SuperscalarHash instruction becomes one to
//! twenty vector instructions serving eight items. Scalar x86 has one 64-bit multiplier port and
//! SuperscalarHash is about a third multiplications, which bounds the scalar build; `vpmullq`
//! does eight low products per instruction, and the high products (IMULH_R, ISMULH_R) are
//! assembled from four 32 x 32-bit `vpmuludq` products. The cache reads of a step are gathered
//! (`vpgatherqq`), one gather per register, and the next step's lines are prefetched before the
//! function returns, so that the caller can run other batches while they arrive.
//!
//! One function per program, `extern "sysv64" fn(lanes: *mut Lanes8, cache: *const u64,
//! constants: *const u64)`:
//!
//! | what | where |
//! |---|---|
//! | r0-r7 of the eight items | zmm0-zmm7 (loaded from and stored to `lanes.r`) |
//! | scratch | zmm8-zmm15; gather targets zmm16-zmm23; masks k1-k7 |
//! | cache line offsets of the step (words) | `lanes.index`, zmm15 at the end |
//! | broadcast constants (immediates, reciprocals, masks) | `[rdx + 8i]` |
//!
//! The scalar compiler ([`super::superscalar_x86_64`]) and the portable executor are the oracles
//! of the shared test below.
#![allow(unsafe_code)]

use super::asm::{self, Mem, RAX, RDI, RDX, RSI};
use super::evex::{self, Map, VMem};
use super::{ExecutableCode, JitError, WritableCode};
use crate::config::CACHE_ITEM_COUNT;
use crate::superscalar::{SsOp, SuperscalarProgram};

/// The state of eight items between SuperscalarHash steps.
#[repr(C, align(64))]
#[derive(Clone, Debug, Default)]
pub struct Lanes8 {
    /// `r[j][k]`: register `j` of item `k`.
    pub r: [[u64; 8]; 8],
    /// Word offset in the cache of each item's next 64-byte line (cache index * 8, the index
    /// already reduced modulo the item count).
    pub index: [u64; 8],
}

const LANES_INDEX_OFFSET: i32 = 512;
const CONST_LOW32: usize = 0;
const CONST_ITEM_MASK: usize = 1;

/// The eight SuperscalarHash programs of a cache, compiled for eight items at once.
pub struct SuperscalarAvx512 {
    code: ExecutableCode,
    entries: Vec<usize>,
    /// All programs in one function (light mode's pairs).
    chain_entry: usize,
    constants: Box<[u64]>,
}

type LanesFn = unsafe extern "sysv64" fn(*mut Lanes8, *const u64, *const u64);

/// Whether this CPU can run the vector programs (AVX-512F for everything, AVX512DQ for
/// `vpmullq`).
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn zmm(i: u8) -> u8 {
    i
}
const T0: u8 = 8;
const T1: u8 = 9;
const T2: u8 = 10;
const T3: u8 = 11;
const T4: u8 = 12;
const T5: u8 = 13;
const T6: u8 = 14;
const T7: u8 = 15;
const GATHER0: u8 = 16;

fn constant(index: usize) -> VMem {
    VMem {
        base: RDX,
        disp: 8 * index as i32,
        broadcast: true,
    }
}

/// `dst = high 64 bits of a * b` (unsigned), from four 32 x 32-bit products. Writes T0-T5;
/// `a`, `b` may equal `dst` or each other.
fn mulhi_unsigned(code: &mut WritableCode, dst: u8, a: u8, b: u8) {
    evex::vpsrlq(code, T0, a, 32); // a_hi
    evex::vpsrlq(code, T1, b, 32); // b_hi
    evex::vpmuludq(code, T2, a, b); // lo * lo
    evex::vpmuludq(code, T3, a, T1); // a_lo * b_hi
    evex::vpmuludq(code, T4, T0, b); // a_hi * b_lo
    evex::vpmuludq(code, T5, T0, T1); // hi * hi
    evex::vpsrlq(code, T2, T2, 32);
    // t = a_lo*b_hi + (lo*lo >> 32) cannot carry out of 64 bits ((2^32-1)^2 + 2^32-1 < 2^64);
    // u = a_hi*b_lo + (t mod 2^32) neither.
    evex::vpaddq(code, T3, T3, T2);
    evex::rrm(code, Map::M0F, 0xDB, T2, T3, &constant(CONST_LOW32)); // vpandq t, low32
    evex::vpaddq(code, T4, T4, T2);
    evex::vpsrlq(code, T3, T3, 32);
    evex::vpsrlq(code, T4, T4, 32);
    evex::vpaddq(code, dst, T5, T3);
    evex::vpaddq(code, dst, dst, T4);
}

fn lanes_mem(disp: i32) -> VMem {
    VMem {
        base: RDI,
        disp,
        broadcast: false,
    }
}

/// The program's instructions on zmm0-zmm7 (scratch T0-T7).
fn emit_body(code: &mut WritableCode, prog: &SuperscalarProgram, constants: &mut Vec<u64>) {
    let mut rcps = prog.reciprocals().iter();
    let mut push_constant = |v: u64| {
        constants.push(v);
        constant(constants.len() - 1)
    };
    for ins in &prog.instructions {
        let (d, s) = (zmm(ins.dst), zmm(ins.src));
        let imm = ins.imm32 as i32 as i64 as u64;
        match ins.op {
            SsOp::ISUB_R => evex::vpsubq(code, d, d, s),
            SsOp::IXOR_R => evex::vpxorq(code, d, d, s),
            SsOp::IADD_RS => {
                if ins.shift == 0 {
                    evex::vpaddq(code, d, d, s);
                } else {
                    evex::vpsllq(code, T0, s, ins.shift);
                    evex::vpaddq(code, d, d, T0);
                }
            }
            SsOp::IMUL_R => evex::vpmullq(code, d, d, s),
            SsOp::IROR_C => evex::vprorq(code, d, d, ins.imm32 as u8),
            SsOp::IADD_C7 | SsOp::IADD_C8 | SsOp::IADD_C9 => {
                evex::rrm(code, Map::M0F, 0xD4, d, d, &push_constant(imm))
            }
            SsOp::IXOR_C7 | SsOp::IXOR_C8 | SsOp::IXOR_C9 => {
                evex::rrm(code, Map::M0F, 0xEF, d, d, &push_constant(imm))
            }
            SsOp::IMUL_RCP => {
                let rcp = *rcps.next().expect("one reciprocal per IMUL_RCP");
                evex::rrm(code, Map::M0F38, 0x40, d, d, &push_constant(rcp))
            }
            SsOp::IMULH_R => mulhi_unsigned(code, d, d, s),
            SsOp::ISMULH_R => {
                // signed high = unsigned high - (a < 0 ? b : 0) - (b < 0 ? a : 0) (mod 2^64).
                evex::vpsraq(code, T6, d, 63);
                evex::vpandq(code, T6, T6, s);
                evex::vpsraq(code, T7, s, 63);
                evex::vpandq(code, T7, T7, d);
                mulhi_unsigned(code, d, d, s);
                evex::vpsubq(code, d, d, T6);
                evex::vpsubq(code, d, d, T7);
            }
        }
    }
}

/// Gathers the eight 64-byte cache lines at word offsets `index` (a zmm) into
/// GATHER0..GATHER0+8, register `j` of every lane in GATHER0 + j.
fn emit_gather(code: &mut WritableCode, index: u8) {
    for j in 0..8u8 {
        let k = 1 + (j % 7);
        evex::kxnorw_all(code, k);
        evex::vpgatherqq(code, GATHER0 + j, k, RSI, index, 8 * j as i32);
    }
}

/// `r ^= gathered`, then `index_out = (r[address_register] mod item count) * 8` words.
fn emit_mix_and_next_index(code: &mut WritableCode, prog: &SuperscalarProgram, index_out: u8) {
    for j in 0..8u8 {
        evex::vpxorq(code, zmm(j), zmm(j), GATHER0 + j);
    }
    evex::rrm(
        code,
        Map::M0F,
        0xDB,
        index_out,
        zmm(prog.address_register as u8),
        &constant(CONST_ITEM_MASK),
    );
    evex::vpsllq(code, index_out, index_out, 3);
}

/// `prefetcht0` of the eight lines at the word offsets in `lanes.index`.
fn emit_prefetch_lines(code: &mut WritableCode) {
    for k in 0..8 {
        asm::load64(code, RAX, &Mem::base(RDI, LANES_INDEX_OFFSET + 8 * k));
        asm::prefetcht0(
            code,
            &Mem {
                base: RSI,
                index: Some((RAX, 3)),
                disp: 0,
            },
        );
    }
}

/// One step for a batch of eight (the dataset build runs four batches in turn): registers and
/// index from and to `lanes`, the lines at the old index (prefetched) mixed in, the lines at the
/// new index prefetched for the next call.
fn emit_program(code: &mut WritableCode, prog: &SuperscalarProgram, constants: &mut Vec<u64>) {
    for j in 0..8u8 {
        evex::load(code, zmm(j), &lanes_mem(64 * j as i32));
    }
    emit_body(code, prog, constants);
    evex::load(code, T7, &lanes_mem(LANES_INDEX_OFFSET));
    emit_gather(code, T7);
    emit_mix_and_next_index(code, prog, T7);
    evex::store(code, &lanes_mem(LANES_INDEX_OFFSET), T7);
    for j in 0..8u8 {
        evex::store(code, &lanes_mem(64 * j as i32), zmm(j));
    }
    emit_prefetch_lines(code);
    evex::vzeroupper(code);
    asm::ret(code);
}

/// All programs in one function, for light mode's two items (one batch, nothing to interleave
/// with): the registers stay in zmm0-7 throughout. Each step's lines are prefetched with plain
/// prefetches, which retire at once, and gathered after the program: gathers issued before it
/// would sit in the reorder buffer until memory answers and stall the program behind them.
fn emit_chain(code: &mut WritableCode, programs: &[SuperscalarProgram], constants: &mut Vec<u64>) {
    for j in 0..8u8 {
        evex::load(code, zmm(j), &lanes_mem(64 * j as i32));
    }
    emit_prefetch_lines(code);
    for prog in programs {
        emit_body(code, prog, constants);
        evex::load(code, T7, &lanes_mem(LANES_INDEX_OFFSET));
        emit_gather(code, T7);
        emit_mix_and_next_index(code, prog, T7);
        evex::store(code, &lanes_mem(LANES_INDEX_OFFSET), T7);
        emit_prefetch_lines(code);
    }
    for j in 0..8u8 {
        evex::store(code, &lanes_mem(64 * j as i32), zmm(j));
    }
    evex::vzeroupper(code);
    asm::ret(code);
}

/// Longest encoding of one SuperscalarHash instruction here (ISMULH_R: 4 + 14 + 2 instructions
/// of at most 10 bytes).
const MAX_INSTRUCTION_BYTES: usize = 20 * 10;
/// Everything around the program body (loads, gathers, XORs, index, stores, prefetches: about
/// 460 bytes), rounded up.
const FRAME_BYTES: usize = 1024;

impl SuperscalarAvx512 {
    /// Compiles `programs`; `None` where the CPU lacks AVX-512F/DQ, an error only where
    /// executable memory cannot be had.
    pub fn compile(programs: &[SuperscalarProgram]) -> Result<Option<Self>, JitError> {
        if !available() {
            return Ok(None);
        }
        let cap: usize = programs
            .iter()
            .map(|p| p.instructions.len() * MAX_INSTRUCTION_BYTES + FRAME_BYTES + 64)
            .sum::<usize>()
            * 2;
        let mut code = WritableCode::new(cap)?;
        let mut constants = vec![0xFFFF_FFFF, CACHE_ITEM_COUNT - 1];
        let mut entries = Vec::with_capacity(programs.len());
        for p in programs {
            while code.len() % 64 != 0 {
                code.emit(&[0xCC]);
            }
            entries.push(code.len());
            emit_program(&mut code, p, &mut constants);
        }
        while code.len() % 64 != 0 {
            code.emit(&[0xCC]);
        }
        let chain_entry = code.len();
        emit_chain(&mut code, programs, &mut constants);
        Ok(Some(SuperscalarAvx512 {
            code: code.seal()?,
            entries,
            chain_entry,
            constants: constants.into_boxed_slice(),
        }))
    }

    /// Runs program `index` on the eight items of `lanes`, XORs in their cache lines at
    /// `lanes.index` and sets `lanes.index` to the next step's lines (prefetched).
    #[inline(always)]
    pub fn step(&self, index: usize, lanes: &mut Lanes8, cache: &[u64]) {
        assert!(cache.len() as u64 >= CACHE_ITEM_COUNT * 8);
        debug_assert!(lanes.index.iter().all(|&i| i < CACHE_ITEM_COUNT * 8));
        let entry = self.code.entry(self.entries[index]);
        // SAFETY: `compile` returned Some only on a CPU with AVX-512F/DQ. The function reads
        // and writes exactly the 576 bytes of `lanes`, reads `constants` at the offsets it was
        // compiled with, and gathers 64-byte lines at word offsets `lanes.index[k] + 0..8`:
        // these are below CACHE_ITEM_COUNT * 8 (callers set them reduced, see `Lanes8::index`
        // and the debug check; the code reduces the ones it computes) and `cache` holds that
        // many words (checked above). It clobbers only caller-saved registers (rax, zmm0-23,
        // k1-k7) and ends with vzeroupper.
        unsafe {
            let f: LanesFn = std::mem::transmute::<*const u8, LanesFn>(entry);
            f(lanes, cache.as_ptr(), self.constants.as_ptr());
        }
    }
}

impl SuperscalarAvx512 {
    /// All programs on the eight items of `lanes` (fresh registers, `lanes.index` their first
    /// lines): the whole dataset-item computation in one call.
    #[inline(always)]
    pub fn chain(&self, lanes: &mut Lanes8, cache: &[u64]) {
        assert!(cache.len() as u64 >= CACHE_ITEM_COUNT * 8);
        debug_assert!(lanes.index.iter().all(|&i| i < CACHE_ITEM_COUNT * 8));
        let entry = self.code.entry(self.chain_entry);
        // SAFETY: as `step`, for the chained function: the same accesses, once per program.
        unsafe {
            let f: LanesFn = std::mem::transmute::<*const u8, LanesFn>(entry);
            f(lanes, cache.as_ptr(), self.constants.as_ptr());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blake::BlakeGenerator;

    /// The shared SuperscalarHash kernel test: eight lanes of random registers through every
    /// program of several keys equal the portable executor, including the cache XOR and the
    /// next index (against a random "cache").
    #[test]
    fn vector_programs_equal_portable() {
        if !available() {
            eprintln!("skipped: CPU lacks AVX-512F/DQ");
            return;
        }
        let cache: Vec<u64> = {
            let mut x = 0x1234_5678_9ABC_DEF1u64;
            (0..CACHE_ITEM_COUNT * 8)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                })
                .collect()
        };
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for key in [&b"vector key"[..], b"test key 000", b""] {
            let mut gen = BlakeGenerator::new(key, 0);
            let programs: Vec<_> = (0..8)
                .map(|_| SuperscalarProgram::generate(&mut gen))
                .collect();
            let compiled = SuperscalarAvx512::compile(&programs).unwrap().unwrap();
            for _ in 0..20 {
                let mut lanes = Lanes8::default();
                let mut scalar = [[0u64; 8]; 8];
                for k in 0..8 {
                    // Mix in the extreme values the high products must get right.
                    for j in 0..8 {
                        let v = match rnd() % 8 {
                            0 => u64::MAX,
                            1 => 1 << 63,
                            2 => 0,
                            _ => rnd(),
                        };
                        lanes.r[j][k] = v;
                        scalar[k][j] = v;
                    }
                    lanes.index[k] = (rnd() % CACHE_ITEM_COUNT) * 8;
                }
                let mut chained = lanes.clone();
                compiled.chain(&mut chained, &cache);
                for (i, p) in programs.iter().enumerate() {
                    let before = lanes.index;
                    compiled.step(i, &mut lanes, &cache);
                    for k in 0..8 {
                        p.execute(&mut scalar[k]);
                        let line = before[k] as usize;
                        for j in 0..8 {
                            scalar[k][j] ^= cache[line + j];
                        }
                        for j in 0..8 {
                            assert_eq!(lanes.r[j][k], scalar[k][j], "program {i} lane {k} r{j}");
                        }
                        let next = (scalar[k][p.address_register] % CACHE_ITEM_COUNT) * 8;
                        assert_eq!(lanes.index[k], next, "program {i} lane {k} index");
                    }
                }
                assert_eq!(chained.r, lanes.r, "chained programs");
                assert_eq!(chained.index, lanes.index, "chained programs' last index");
            }
        }
    }
}
