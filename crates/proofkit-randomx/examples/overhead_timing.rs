//! CPU time of the per-hash work around the VM loop: scratchpad fill (AesGenerator1R, 2 MiB),
//! scratchpad hash (AesHash1R) and, per program, generation (AesGenerator4R), decoding and JIT
//! compilation. A fast-mode hash runs one fill, one hash and eight programs.
use proofkit_randomx::vm::{interpreter, jit_x86_64};
use proofkit_randomx::{Aes, JitRounding};
fn main() {
    let cpu = || {
        proofkit_core::cputime::thread_cpu_time()
            .unwrap()
            .as_secs_f64()
    };
    let aes = Aes::detect();
    let mut sp = vec![0u8; 2 << 20];
    let mut st = [3u8; 64];
    let n = 200;
    let t = cpu();
    for _ in 0..n {
        aes.fill_1r(&mut st, &mut sp);
    }
    println!("fill_1r 2 MiB: {:.1} us", (cpu() - t) / n as f64 * 1e6);
    let t = cpu();
    let mut acc = 0u8;
    for _ in 0..n {
        acc ^= aes.hash_1r(&sp)[0];
    }
    println!(
        "hash_1r 2 MiB: {:.1} us ({acc})",
        (cpu() - t) / n as f64 * 1e6
    );
    let mut bytes = vec![0u8; 128 + 8 * 256];
    let mut out = Vec::new();
    let mut code = Vec::new();
    let m = n * 8;
    let t = cpu();
    for _ in 0..m {
        aes.fill_4r(&mut st, &mut bytes);
        std::hint::black_box(&bytes);
    }
    let generate = (cpu() - t) / m as f64 * 1e6;
    let t = cpu();
    for _ in 0..m {
        interpreter::decode_bytes_into(&bytes[128..], &mut code);
        std::hint::black_box(&code);
        bytes[200] = bytes[200].wrapping_add(1);
    }
    let decode = (cpu() - t) / m as f64 * 1e6;
    println!("per program: generation (AesGenerator4R) {generate:.2} us, decoding {decode:.2} us");
    for rounding in [JitRounding::Mxcsr, JitRounding::Embedded] {
        let t = cpu();
        for _ in 0..m {
            jit_x86_64::compile_into(
                &mut out,
                &code,
                [0, 2, 4, 6],
                jit_x86_64::JitMode::Fast,
                false,
                rounding,
            );
            std::hint::black_box(&out);
        }
        println!(
            "per program: JIT compilation ({rounding:?}, {} bytes) {:.2} us",
            out.len(),
            (cpu() - t) / m as f64 * 1e6
        );
    }
}
