//! RandomX programs (specs.md chapters 4.4, 4.5 and 5.1): the 8-byte instruction word, the
//! opcode table derived from the instruction frequencies, and the 128-byte configuration block.
#![deny(unsafe_code)]

/// The 29 instructions of specs.md chapter 5, in opcode order.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Opcode {
    IADD_RS,
    IADD_M,
    ISUB_R,
    ISUB_M,
    IMUL_R,
    IMUL_M,
    IMULH_R,
    IMULH_M,
    ISMULH_R,
    ISMULH_M,
    IMUL_RCP,
    INEG_R,
    IXOR_R,
    IXOR_M,
    IROR_R,
    IROL_R,
    ISWAP_R,
    FSWAP_R,
    FADD_R,
    FADD_M,
    FSUB_R,
    FSUB_M,
    FSCAL_R,
    FMUL_R,
    FDIV_M,
    FSQRT_R,
    CBRANCH,
    CFROUND,
    ISTORE,
}

/// Frequencies out of 256 (Tables 5.2.1, 5.3.1, 5.4.1, 5.5.1), in opcode order.
pub const FREQUENCIES: [(Opcode, u32); 29] = [
    (Opcode::IADD_RS, 16),
    (Opcode::IADD_M, 7),
    (Opcode::ISUB_R, 16),
    (Opcode::ISUB_M, 7),
    (Opcode::IMUL_R, 16),
    (Opcode::IMUL_M, 4),
    (Opcode::IMULH_R, 4),
    (Opcode::IMULH_M, 1),
    (Opcode::ISMULH_R, 4),
    (Opcode::ISMULH_M, 1),
    (Opcode::IMUL_RCP, 8),
    (Opcode::INEG_R, 2),
    (Opcode::IXOR_R, 15),
    (Opcode::IXOR_M, 5),
    (Opcode::IROR_R, 8),
    (Opcode::IROL_R, 2),
    (Opcode::ISWAP_R, 4),
    (Opcode::FSWAP_R, 4),
    (Opcode::FADD_R, 16),
    (Opcode::FADD_M, 5),
    (Opcode::FSUB_R, 16),
    (Opcode::FSUB_M, 5),
    (Opcode::FSCAL_R, 6),
    (Opcode::FMUL_R, 32),
    (Opcode::FDIV_M, 4),
    (Opcode::FSQRT_R, 6),
    (Opcode::CBRANCH, 25),
    (Opcode::CFROUND, 1),
    (Opcode::ISTORE, 16),
];

const fn frequency_sum() -> u32 {
    let mut s = 0;
    let mut i = 0;
    while i < FREQUENCIES.len() {
        s += FREQUENCIES[i].1;
        i += 1;
    }
    s
}
const _: () = assert!(
    frequency_sum() == 256,
    "instruction frequencies must sum to 256"
);

const fn build_decode_table() -> [Opcode; 256] {
    let mut t = [Opcode::ISTORE; 256];
    let mut op = 0;
    let mut i = 0;
    while i < FREQUENCIES.len() {
        let mut n = 0;
        while n < FREQUENCIES[i].1 {
            t[op] = FREQUENCIES[i].0;
            op += 1;
            n += 1;
        }
        i += 1;
    }
    t
}

/// Opcode byte -> instruction.
pub const DECODE: [Opcode; 256] = build_decode_table();

/// One 8-byte instruction word (Fig. 5.1): opcode, dst, src, mod, imm32 (little-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instruction {
    pub opcode: u8,
    pub dst: u8,
    pub src: u8,
    pub modifier: u8,
    pub imm32: u32,
}

impl Instruction {
    pub fn from_bytes(b: &[u8; 8]) -> Self {
        Instruction {
            opcode: b[0],
            dst: b[1],
            src: b[2],
            modifier: b[3],
            imm32: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
    pub fn op(&self) -> Opcode {
        DECODE[self.opcode as usize]
    }
    pub fn mod_mem(&self) -> u8 {
        self.modifier & 3
    }
    pub fn mod_shift(&self) -> u8 {
        (self.modifier >> 2) & 3
    }
    pub fn mod_cond(&self) -> u8 {
        self.modifier >> 4
    }
    /// imm32 sign-extended to 64 bits.
    pub fn simm(&self) -> u64 {
        self.imm32 as i32 as i64 as u64
    }
}

/// The program buffer with its 128-byte configuration block (Table 4.5.1).
#[derive(Clone)]
pub struct Program {
    pub entropy: [u64; 16],
    pub instructions: Vec<Instruction>,
}

impl Program {
    /// Parses `128 + 8 * size` bytes of generator output.
    pub fn from_bytes(bytes: &[u8], size: usize) -> Self {
        assert!(bytes.len() >= 128 + 8 * size, "program bytes too short");
        let entropy = std::array::from_fn(|i| {
            u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"))
        });
        let instructions = bytes[128..128 + 8 * size]
            .chunks_exact(8)
            .map(|b| Instruction::from_bytes(b.try_into().expect("8 bytes")))
            .collect();
        Program {
            entropy,
            instructions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_table_follows_frequencies() {
        assert_eq!(DECODE[0], Opcode::IADD_RS);
        assert_eq!(DECODE[15], Opcode::IADD_RS);
        assert_eq!(DECODE[16], Opcode::IADD_M);
        assert_eq!(DECODE[255], Opcode::ISTORE);
        for (op, f) in FREQUENCIES {
            assert_eq!(
                DECODE.iter().filter(|&&o| o == op).count() as u32,
                f,
                "{op:?}"
            );
        }
        // Group sizes of Table 5.1.1: 120 integer, 94 floating point, 26 control, 16 store.
        let idx = |o| DECODE.iter().position(|&x| x == o).unwrap();
        assert_eq!(idx(Opcode::FSWAP_R), 120);
        assert_eq!(idx(Opcode::CBRANCH), 214);
        assert_eq!(idx(Opcode::ISTORE), 240);
    }

    #[test]
    fn instruction_fields() {
        let i = Instruction::from_bytes(&[7, 3, 5, 0b1110_1101, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(
            (i.dst, i.src, i.mod_mem(), i.mod_shift(), i.mod_cond()),
            (3, 5, 1, 3, 14)
        );
        assert_eq!(i.simm(), u64::MAX);
    }
}
