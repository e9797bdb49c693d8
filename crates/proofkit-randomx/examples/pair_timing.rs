//! CPU time of light mode's item pairs through the AVX-512 SuperscalarHash: eight step calls
//! against the single chained function, alternating rounds (robust on a loaded machine).
use proofkit_randomx::jit::superscalar_avx512::{Lanes8, SuperscalarAvx512};
use proofkit_randomx::{Cache, PagePolicy};

fn main() {
    let cpu = || {
        proofkit_core::cputime::thread_cpu_time()
            .unwrap()
            .as_secs_f64()
    };
    let cache = Cache::new(b"pair timing", PagePolicy::Transparent).unwrap();
    let Some(v) = SuperscalarAvx512::compile(cache.programs()).unwrap() else {
        println!("skipped: CPU lacks AVX-512F/DQ");
        return;
    };
    let words = cache.words();
    let lanes_for = |a: u64| {
        let mut l = Lanes8::default();
        for k in 0..8 {
            let n = a + (k % 2) as u64 * 7777;
            l.r[0][k] = n.wrapping_add(1).wrapping_mul(6364136223846793005);
            l.index[k] = (n % (words.len() as u64 / 8)) * 8;
        }
        l
    };
    let n = 20_000u64;
    let (mut steps, mut chained) = (Vec::new(), Vec::new());
    for round in 0..10 {
        let t = cpu();
        let mut acc = 0;
        for i in 0..n {
            let mut l = lanes_for(round * n + i);
            for p in 0..8 {
                v.step(p, &mut l, words);
            }
            acc ^= l.r[0][0];
        }
        steps.push((cpu() - t) / n as f64 * 1e9 / 2.0);
        let t = cpu();
        for i in 0..n {
            let mut l = lanes_for(round * n + i);
            v.chain(&mut l, words);
            acc ^= l.r[0][0];
        }
        chained.push((cpu() - t) / n as f64 * 1e9 / 2.0);
        std::hint::black_box(acc);
    }
    steps.sort_by(f64::total_cmp);
    chained.sort_by(f64::total_cmp);
    println!(
        "ns of CPU per item (pairs): steps median {:.0}, chained median {:.0}",
        steps[5], chained[5]
    );
}
