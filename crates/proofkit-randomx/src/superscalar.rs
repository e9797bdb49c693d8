//! SuperscalarHash (specs.md chapter 6): generation of a random program by simulating the
//! reference CPU (three ports P0/P1/P5, a 16-byte/4-uop decoder, macro-op latencies), and its
//! execution on eight 64-bit registers.
//!
//! The generator must reproduce the reference's choices exactly, including the details that the
//! prose of chapter 6 leaves implicit: the order in which the BlakeGenerator is consulted, the
//! look-forward of up to 4 cycles when operands are not ready, throwing an instruction away (at
//! most 256 times in a row) and the cycle accounting that goes with it.
#![deny(unsafe_code)]

use crate::blake::BlakeGenerator;
use crate::config::SUPERSCALAR_LATENCY;
use crate::reciprocal::{is_zero_or_power_of_2, reciprocal};

/// SuperscalarHash instruction types, named as in the spec (Table 6.1.1; the three immediate forms are distinguished by
/// their encoded size 7, 8 or 9 bytes in the reference CPU model).
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SsOp {
    ISUB_R,
    IXOR_R,
    IADD_RS,
    IMUL_R,
    IROR_C,
    IADD_C7,
    IXOR_C7,
    IADD_C8,
    IXOR_C8,
    IADD_C9,
    IXOR_C9,
    IMULH_R,
    ISMULH_R,
    IMUL_RCP,
}

impl SsOp {
    pub fn is_multiplication(self) -> bool {
        matches!(
            self,
            SsOp::IMUL_R | SsOp::IMULH_R | SsOp::ISMULH_R | SsOp::IMUL_RCP
        )
    }

    /// The "operation group" used by the destination rules of 6.3.4: ISUB_R shares IADD_RS's
    /// group and all immediate additions/XORs share one group each.
    fn group(self) -> SsOp {
        match self {
            SsOp::ISUB_R => SsOp::IADD_RS,
            SsOp::IADD_C8 | SsOp::IADD_C9 => SsOp::IADD_C7,
            SsOp::IXOR_C8 | SsOp::IXOR_C9 => SsOp::IXOR_C7,
            other => other,
        }
    }

    fn macro_ops(self) -> &'static [MacroOp] {
        use MacroOp as M;
        match self {
            SsOp::ISUB_R => &[M::SUB_RR],
            SsOp::IXOR_R => &[M::XOR_RR],
            SsOp::IADD_RS => &[M::LEA_SIB],
            SsOp::IMUL_R => &[M::IMUL_RR],
            SsOp::IROR_C => &[M::ROR_RI],
            SsOp::IADD_C7 | SsOp::IADD_C8 | SsOp::IADD_C9 => &[M::ADD_RI],
            SsOp::IXOR_C7 | SsOp::IXOR_C8 | SsOp::IXOR_C9 => &[M::XOR_RI],
            SsOp::IMULH_R => &[M::MOV_RR, M::MUL_R, M::MOV_RR],
            SsOp::ISMULH_R => &[M::MOV_RR, M::IMUL_R, M::MOV_RR],
            SsOp::IMUL_RCP => &[M::MOV_RI64, M::IMUL_RR_DEPENDENT],
        }
    }

    /// Indices of the macro-ops that (result, destination, source) are bound at; `None` for
    /// instructions without a register source.
    fn op_roles(self) -> (usize, usize, Option<usize>) {
        match self {
            SsOp::IMULH_R | SsOp::ISMULH_R => (1, 0, Some(1)),
            SsOp::IMUL_RCP => (1, 1, None),
            SsOp::IROR_C
            | SsOp::IADD_C7
            | SsOp::IADD_C8
            | SsOp::IADD_C9
            | SsOp::IXOR_C7
            | SsOp::IXOR_C8
            | SsOp::IXOR_C9 => (0, 0, None),
            _ => (0, 0, Some(0)),
        }
    }
}

// Execution ports as bit sets (Table 6.2.1).
const P0: u8 = 1;
const P1: u8 = 2;
const P5: u8 = 4;
const P01: u8 = P0 | P1;
const P05: u8 = P0 | P5;
const P015: u8 = P0 | P1 | P5;

/// A macro-op of the reference CPU (Table 6.2.1): latency, up to two micro-ops (as port sets,
/// 0 = none), and whether it depends on the previous macro-op of the same instruction.
#[derive(Clone, Copy, Debug)]
struct MacroOp {
    size: usize,
    latency: usize,
    uop1: u8,
    uop2: u8,
    dependent: bool,
}

impl MacroOp {
    const fn new(size: usize, latency: usize, uop1: u8, uop2: u8) -> Self {
        MacroOp {
            size,
            latency,
            uop1,
            uop2,
            dependent: false,
        }
    }
    const SUB_RR: MacroOp = MacroOp::new(3, 1, P015, 0);
    const XOR_RR: MacroOp = MacroOp::new(3, 1, P015, 0);
    const LEA_SIB: MacroOp = MacroOp::new(4, 1, P01, 0);
    const IMUL_RR: MacroOp = MacroOp::new(4, 3, P1, 0);
    const IMUL_RR_DEPENDENT: MacroOp = MacroOp {
        dependent: true,
        ..MacroOp::IMUL_RR
    };
    const ROR_RI: MacroOp = MacroOp::new(4, 1, P05, 0);
    const ADD_RI: MacroOp = MacroOp::new(7, 1, P015, 0);
    const XOR_RI: MacroOp = MacroOp::new(7, 1, P015, 0);
    const MOV_RR: MacroOp = MacroOp::new(3, 0, 0, 0);
    const MUL_R: MacroOp = MacroOp::new(3, 4, P1, P5);
    const IMUL_R: MacroOp = MacroOp::new(3, 4, P1, P5);
    const MOV_RI64: MacroOp = MacroOp::new(10, 1, P015, 0);

    fn is_eliminated(&self) -> bool {
        self.uop1 == 0
    }
}

/// Decoder configurations (Table 6.3.1), by index.
const DECODE_GROUPS: [&[usize]; 6] = [
    &[4, 8, 4],
    &[7, 3, 3, 3],
    &[3, 7, 3, 3],
    &[4, 9, 3],
    &[4, 4, 4, 4],
    &[3, 3, 10],
];

const CYCLE_MAP_SIZE: usize = SUPERSCALAR_LATENCY + 4;
const LOOK_FORWARD_CYCLES: usize = 4;
const MAX_THROWAWAY_COUNT: usize = 256;
/// Program size limit: `3 * RANDOMX_SUPERSCALAR_LATENCY + 2` instructions.
pub const SUPERSCALAR_MAX_SIZE: usize = 3 * SUPERSCALAR_LATENCY + 2;
/// r5 cannot be the destination of IADD_RS (x86 `lea` cannot encode it without displacement).
const REGISTER_NEEDS_DISPLACEMENT: usize = 5;

/// One generated SuperscalarHash instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SsInstruction {
    pub op: SsOp,
    pub dst: u8,
    pub src: u8,
    /// IADD_RS shift (mod.shift), 0..3.
    pub shift: u8,
    pub imm32: u32,
}

/// A generated SuperscalarHash program, with the statistics the design document reports.
#[derive(Clone, Debug)]
pub struct SuperscalarProgram {
    pub instructions: Vec<SsInstruction>,
    /// The register with the longest dependency chain (ASIC model): the next cache index.
    pub address_register: usize,
    /// Reciprocals of the IMUL_RCP immediates, in instruction order.
    reciprocals: Vec<u64>,
    pub asic_latency: usize,
    pub cpu_latency: usize,
    pub macro_ops: usize,
    pub mul_count: usize,
    pub code_size_bytes: usize,
    pub decode_cycles: usize,
}

#[derive(Clone, Copy)]
struct RegisterInfo {
    latency: usize,
    last_group: Option<SsOp>,
    last_par: i64,
}

/// The instruction being issued, with the operand-selection state of 6.3.4.
struct Current {
    op: Option<SsOp>,
    src: i64,
    dst: i64,
    shift: u8,
    imm32: u32,
    group: Option<SsOp>,
    group_par: i64,
    can_reuse: bool,
    group_par_is_source: bool,
}

impl Current {
    fn null() -> Self {
        Current {
            op: None,
            src: -1,
            dst: -1,
            shift: 0,
            imm32: 0,
            group: None,
            group_par: -1,
            can_reuse: false,
            group_par_is_source: false,
        }
    }

    fn size(&self) -> usize {
        self.op.map_or(0, |o| o.macro_ops().len())
    }

    fn create_for_slot(
        &mut self,
        gen: &mut BlakeGenerator,
        slot: usize,
        group_index: usize,
        is_last: bool,
    ) {
        let op = match slot {
            3 if is_last => [SsOp::ISUB_R, SsOp::IXOR_R, SsOp::IMULH_R, SsOp::ISMULH_R]
                [(gen.get_byte() & 3) as usize],
            3 => [SsOp::ISUB_R, SsOp::IXOR_R][(gen.get_byte() & 1) as usize],
            4 if group_index == 4 && !is_last => SsOp::IMUL_R,
            4 => [SsOp::IROR_C, SsOp::IADD_RS][(gen.get_byte() & 1) as usize],
            7 => [SsOp::IXOR_C7, SsOp::IADD_C7][(gen.get_byte() & 1) as usize],
            8 => [SsOp::IXOR_C8, SsOp::IADD_C8][(gen.get_byte() & 1) as usize],
            9 => [SsOp::IXOR_C9, SsOp::IADD_C9][(gen.get_byte() & 1) as usize],
            10 => SsOp::IMUL_RCP,
            _ => unreachable!("decoder slots are 3, 4, 7, 8, 9 or 10 bytes"),
        };
        self.create(op, gen);
    }

    fn create(&mut self, op: SsOp, gen: &mut BlakeGenerator) {
        self.op = Some(op);
        self.src = -1;
        self.dst = -1;
        self.can_reuse = false;
        self.group_par_is_source = false;
        self.shift = 0;
        self.imm32 = 0;
        self.group = Some(op.group());
        // group_par is deliberately not reset for the register-source forms: it is set when the
        // source is chosen, and the reference compares against the stale value until then.
        match op {
            SsOp::ISUB_R | SsOp::IXOR_R | SsOp::IMUL_R => self.group_par_is_source = true,
            SsOp::IADD_RS => {
                self.shift = (gen.get_byte() >> 2) & 3;
                self.group_par_is_source = true;
            }
            SsOp::IROR_C => {
                loop {
                    self.imm32 = (gen.get_byte() & 63) as u32;
                    if self.imm32 != 0 {
                        break;
                    }
                }
                self.group_par = -1;
            }
            SsOp::IADD_C7
            | SsOp::IADD_C8
            | SsOp::IADD_C9
            | SsOp::IXOR_C7
            | SsOp::IXOR_C8
            | SsOp::IXOR_C9 => {
                self.imm32 = gen.get_u32();
                self.group_par = -1;
            }
            SsOp::IMULH_R | SsOp::ISMULH_R => {
                self.can_reuse = true;
                // The reference stores the u32 into an int: same value modulo 2^32.
                self.group_par = gen.get_u32() as i32 as i64;
            }
            SsOp::IMUL_RCP => {
                loop {
                    self.imm32 = gen.get_u32();
                    if !is_zero_or_power_of_2(self.imm32) {
                        break;
                    }
                }
                self.group_par = -1;
            }
        }
    }

    fn select_source(
        &mut self,
        cycle: usize,
        regs: &[RegisterInfo; 8],
        gen: &mut BlakeGenerator,
    ) -> bool {
        let available: Vec<usize> = (0..8).filter(|&i| regs[i].latency <= cycle).collect();
        if available.len() == 2
            && self.op == Some(SsOp::IADD_RS)
            && available.contains(&REGISTER_NEEDS_DISPLACEMENT)
        {
            self.src = REGISTER_NEEDS_DISPLACEMENT as i64;
            self.group_par = self.src;
            return true;
        }
        match select_register(&available, gen) {
            Some(r) => {
                self.src = r as i64;
                if self.group_par_is_source {
                    self.group_par = self.src;
                }
                true
            }
            None => false,
        }
    }

    fn select_destination(
        &mut self,
        cycle: usize,
        allow_chained_mul: bool,
        regs: &[RegisterInfo; 8],
        gen: &mut BlakeGenerator,
    ) -> bool {
        let op = self.op.expect("an instruction is being issued");
        let available: Vec<usize> = (0..8)
            .filter(|&i| {
                let r = &regs[i];
                r.latency <= cycle
                    && (self.can_reuse || i as i64 != self.src)
                    && (allow_chained_mul
                        || self.group != Some(SsOp::IMUL_R)
                        || r.last_group != Some(SsOp::IMUL_R))
                    && (r.last_group != self.group || r.last_par != self.group_par)
                    && (op != SsOp::IADD_RS || i != REGISTER_NEEDS_DISPLACEMENT)
            })
            .collect();
        match select_register(&available, gen) {
            Some(r) => {
                self.dst = r as i64;
                true
            }
            None => false,
        }
    }

    fn to_instruction(&self) -> SsInstruction {
        let dst = self.dst as u8;
        SsInstruction {
            op: self.op.expect("an instruction is being issued"),
            dst,
            src: if self.src >= 0 { self.src as u8 } else { dst },
            shift: self.shift,
            imm32: self.imm32,
        }
    }
}

fn select_register(available: &[usize], gen: &mut BlakeGenerator) -> Option<usize> {
    match available.len() {
        0 => None,
        1 => Some(available[0]),
        n => Some(available[(gen.get_u32() as usize) % n]),
    }
}

/// Tries `select` at `schedule_cycle` and at up to `LOOK_FORWARD_CYCLES - 1` later cycles; each
/// stall advances both the schedule cycle and the decode cycle, as the reference model does.
fn select_with_lookahead(
    schedule_cycle: &mut usize,
    cycle: &mut usize,
    mut select: impl FnMut(usize) -> bool,
) -> bool {
    for _ in 0..LOOK_FORWARD_CYCLES {
        if select(*schedule_cycle) {
            return true;
        }
        *schedule_cycle += 1;
        *cycle += 1;
    }
    false
}

type PortMap = [[u8; 3]; CYCLE_MAP_SIZE];

/// Finds the first cycle >= `cycle` with a free port for `uop`, checking P5, P0, P1 in that
/// order (to keep the multiplier port P1 free); marks it busy when `commit`.
fn schedule_uop(uop: u8, ports: &mut PortMap, mut cycle: usize, commit: bool) -> Option<usize> {
    while cycle < CYCLE_MAP_SIZE {
        for (bit, idx) in [(P5, 2usize), (P0, 0), (P1, 1)] {
            if uop & bit != 0 && ports[cycle][idx] == 0 {
                if commit {
                    ports[cycle][idx] = uop;
                }
                return Some(cycle);
            }
        }
        cycle += 1;
    }
    None
}

fn schedule_mop(
    mop: &MacroOp,
    ports: &mut PortMap,
    mut cycle: usize,
    dep_cycle: usize,
    commit: bool,
) -> Option<usize> {
    if mop.dependent {
        cycle = cycle.max(dep_cycle);
    }
    if mop.is_eliminated() {
        return Some(cycle);
    }
    if mop.uop2 == 0 {
        return schedule_uop(mop.uop1, ports, cycle, commit);
    }
    // Two micro-ops must issue in the same cycle.
    while cycle < CYCLE_MAP_SIZE {
        let c1 = schedule_uop(mop.uop1, ports, cycle, false);
        let c2 = schedule_uop(mop.uop2, ports, cycle, false);
        if let (Some(a), Some(b)) = (c1, c2) {
            if a == b {
                if commit {
                    schedule_uop(mop.uop1, ports, a, true);
                    schedule_uop(mop.uop2, ports, b, true);
                }
                return Some(a);
            }
        }
        cycle += 1;
    }
    None
}

impl SuperscalarProgram {
    /// Generates one program from the generator (specs.md 6.3).
    pub fn generate(gen: &mut BlakeGenerator) -> Self {
        let mut ports: PortMap = [[0; 3]; CYCLE_MAP_SIZE];
        let mut regs = [RegisterInfo {
            latency: 0,
            last_group: None,
            last_par: -1,
        }; 8];
        let mut program: Vec<SsInstruction> = Vec::with_capacity(SUPERSCALAR_MAX_SIZE);
        let mut cur = Current::null();
        let mut mop_index = 0usize;
        let (mut code_size, mut macro_ops, mut cycle, mut dep_cycle, mut retire_cycle) =
            (0usize, 0usize, 0usize, 0usize, 0usize);
        let mut ports_saturated = false;
        let mut mul_count = 0usize;
        let mut throwaway = 0usize;
        let mut decode_cycle = 0usize;

        while decode_cycle < SUPERSCALAR_LATENCY
            && !ports_saturated
            && program.len() < SUPERSCALAR_MAX_SIZE
        {
            // Select the decoder configuration (6.3.1).
            let g = match cur.op {
                Some(SsOp::IMULH_R | SsOp::ISMULH_R) => 5,
                _ if mul_count < decode_cycle + 1 => 4,
                Some(SsOp::IMUL_RCP) => {
                    if gen.get_byte() & 1 != 0 {
                        0
                    } else {
                        3
                    }
                }
                _ => (gen.get_byte() & 3) as usize,
            };
            let slots = DECODE_GROUPS[g];
            let mut slot = 0usize;
            while slot < slots.len() {
                let top_cycle = cycle;
                if mop_index >= cur.size() {
                    if ports_saturated || program.len() >= SUPERSCALAR_MAX_SIZE {
                        break;
                    }
                    cur.create_for_slot(gen, slots[slot], g, slot + 1 == slots.len());
                    mop_index = 0;
                }
                let op = cur.op.expect("created above");
                let mop = op.macro_ops()[mop_index];
                let (result_op, dst_op, src_op) = op.op_roles();

                let Some(mut schedule_cycle) =
                    schedule_mop(&mop, &mut ports, cycle, dep_cycle, false)
                else {
                    ports_saturated = true;
                    break;
                };

                // Operands: source first, then destination, each looking up to 4 cycles ahead;
                // an instruction without them is thrown away (at most 256 times in a row), after
                // that the decode group is abandoned.
                let found = (src_op != Some(mop_index)
                    || select_with_lookahead(&mut schedule_cycle, &mut cycle, |c| {
                        cur.select_source(c, &regs, gen)
                    }))
                    && (dst_op != mop_index
                        || select_with_lookahead(&mut schedule_cycle, &mut cycle, |c| {
                            cur.select_destination(c, throwaway > 0, &regs, gen)
                        }));
                if !found {
                    if throwaway < MAX_THROWAWAY_COUNT {
                        throwaway += 1;
                        mop_index = cur.size();
                        continue;
                    }
                    cur = Current::null();
                    break;
                }
                throwaway = 0;

                let Some(sc) = schedule_mop(&mop, &mut ports, schedule_cycle, schedule_cycle, true)
                else {
                    ports_saturated = true;
                    break;
                };
                schedule_cycle = sc;
                dep_cycle = schedule_cycle + mop.latency;

                if result_op == mop_index {
                    let r = &mut regs[cur.dst as usize];
                    retire_cycle = dep_cycle;
                    r.latency = retire_cycle;
                    r.last_group = cur.group;
                    r.last_par = cur.group_par;
                }
                code_size += mop.size;
                slot += 1;
                mop_index += 1;
                macro_ops += 1;
                if schedule_cycle >= SUPERSCALAR_LATENCY {
                    ports_saturated = true;
                }
                cycle = top_cycle;
                if mop_index >= cur.size() {
                    program.push(cur.to_instruction());
                    mul_count += op.is_multiplication() as usize;
                }
            }
            cycle += 1;
            decode_cycle += 1;
        }

        // The ASIC model (1-cycle latency, unlimited parallelism) picks the address register.
        let mut asic = [0usize; 8];
        for ins in &program {
            let d = ins.dst as usize;
            let s = ins.src as usize;
            let lat_dst = asic[d] + 1;
            let lat_src = if d != s { asic[s] + 1 } else { 0 };
            asic[d] = lat_dst.max(lat_src);
        }
        let mut address_register = 0;
        let mut asic_latency = 0;
        for (i, &l) in asic.iter().enumerate() {
            if l > asic_latency {
                asic_latency = l;
                address_register = i;
            }
        }
        let reciprocals = program
            .iter()
            .filter(|i| i.op == SsOp::IMUL_RCP)
            .map(|i| reciprocal(i.imm32))
            .collect();
        SuperscalarProgram {
            instructions: program,
            address_register,
            reciprocals,
            asic_latency,
            cpu_latency: retire_cycle,
            macro_ops,
            mul_count,
            code_size_bytes: code_size,
            decode_cycles: decode_cycle,
        }
    }

    /// Reciprocals of the IMUL_RCP immediates, in instruction order.
    pub fn reciprocals(&self) -> &[u64] {
        &self.reciprocals
    }

    /// Runs the program on `r` (specs.md 6.1).
    #[inline]
    pub fn execute(&self, r: &mut [u64; 8]) {
        let mut rcp = self.reciprocals.iter();
        for ins in &self.instructions {
            let (d, s) = (ins.dst as usize, ins.src as usize);
            let imm = ins.imm32 as i32 as i64 as u64;
            r[d] = match ins.op {
                SsOp::ISUB_R => r[d].wrapping_sub(r[s]),
                SsOp::IXOR_R => r[d] ^ r[s],
                SsOp::IADD_RS => r[d].wrapping_add(r[s] << ins.shift),
                SsOp::IMUL_R => r[d].wrapping_mul(r[s]),
                SsOp::IROR_C => r[d].rotate_right(ins.imm32),
                SsOp::IADD_C7 | SsOp::IADD_C8 | SsOp::IADD_C9 => r[d].wrapping_add(imm),
                SsOp::IXOR_C7 | SsOp::IXOR_C8 | SsOp::IXOR_C9 => r[d] ^ imm,
                SsOp::IMULH_R => ((r[d] as u128 * r[s] as u128) >> 64) as u64,
                SsOp::ISMULH_R => ((r[d] as i64 as i128 * r[s] as i64 as i128) >> 64) as u64,
                SsOp::IMUL_RCP => {
                    r[d].wrapping_mul(*rcp.next().expect("one reciprocal per IMUL_RCP"))
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_respect_the_generation_rules() {
        let mut gen = BlakeGenerator::new(b"test key 000", 0);
        for _ in 0..8 {
            let p = SuperscalarProgram::generate(&mut gen);
            assert!(!p.instructions.is_empty() && p.instructions.len() <= SUPERSCALAR_MAX_SIZE);
            for i in &p.instructions {
                match i.op {
                    SsOp::ISUB_R | SsOp::IXOR_R | SsOp::IMUL_R => assert_ne!(i.dst, i.src),
                    SsOp::IADD_RS => {
                        assert_ne!(i.dst, i.src);
                        assert_ne!(i.dst as usize, REGISTER_NEEDS_DISPLACEMENT);
                    }
                    SsOp::IROR_C => assert!(i.imm32 % 64 != 0),
                    SsOp::IMUL_RCP => assert!(!is_zero_or_power_of_2(i.imm32)),
                    _ => {}
                }
            }
            // The design document's averages: ~450 instructions, ~155 multiplications, latency
            // bounded by the target.
            assert!(p.mul_count > 50, "{}", p.mul_count);
            assert!(p.cpu_latency <= SUPERSCALAR_LATENCY + 4 + 4);
        }
    }
}
