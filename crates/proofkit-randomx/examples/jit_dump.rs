//! Writes the machine code the JIT emits for one program (fast mode, v1) to a file, for
//! `objdump -D -b binary -mi386:x86-64 FILE`.
use proofkit_randomx::program::Program;
use proofkit_randomx::vm::{interpreter, jit_x86_64};
use proofkit_randomx::Aes;

fn main() {
    let path = std::env::args().nth(1).unwrap_or("/tmp/program.bin".into());
    let mut seed = [7u8; 64];
    let mut bytes = vec![0u8; 128 + 8 * 256];
    Aes::detect().fill_4r(&mut seed, &mut bytes);
    let program = Program::from_bytes(&bytes, 256);
    let code = interpreter::decode(&program);
    let machine = jit_x86_64::compile(
        &code,
        [0, 2, 4, 6],
        jit_x86_64::JitMode::Fast,
        false,
        Default::default(),
    );
    std::fs::write(&path, &machine).unwrap();
    println!("{} bytes to {path}", machine.len());
}
