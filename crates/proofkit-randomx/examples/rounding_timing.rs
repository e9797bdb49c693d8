//! CPU time per fast-mode hash with the JIT's two rounding strategies (`JitRounding::Mxcsr`, the
//! reference's `ldmxcsr`, and `JitRounding::Embedded`, four loop copies with AVX-512 static
//! rounding), in paired rounds on one thread so that both see the same machine load; prints the
//! median of the per-round ratios. On the untouched all-zero dataset by default (the VM loop
//! without DRAM stalls; hashes are not RandomX's); `real` builds the dataset on hugetlb pages
//! (reserve vm.nr_hugepages first) or THP. Usage: `rounding_timing [real] [rounds]`.
use proofkit_randomx::{Cache, Dataset, DatasetSource, JitRounding, PagePolicy, Vm, VmOptions};
use std::sync::Arc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let real = args.iter().any(|a| a == "real");
    let rounds: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(41);
    let cpu = || {
        proofkit_core::cputime::thread_cpu_time()
            .unwrap()
            .as_secs_f64()
    };
    let dataset = if real {
        let cache = Cache::new(b"rounding timing", PagePolicy::HugetlbFirst).unwrap();
        Dataset::build(&cache, PagePolicy::HugetlbFirst, 2, &|_, _| {}).unwrap()
    } else {
        Dataset::alloc(PagePolicy::SmallOnly).unwrap()
    };
    let source = DatasetSource::Fast(Arc::new(dataset));
    let vm = |rounding| {
        let opts = VmOptions {
            pages: PagePolicy::HugetlbFirst,
            rounding,
            ..Default::default()
        };
        Vm::new(source.clone(), opts).unwrap()
    };
    let mut vms = [vm(JitRounding::Mxcsr), vm(JitRounding::Embedded)];
    let mut blob = [0u8; 76];
    let mut ratios = Vec::new();
    let mut totals = [0.0f64; 2];
    let n = 30u32;
    for round in 0..rounds as u32 {
        let mut t = [0.0; 2];
        // Alternate which goes first, so that neither always follows the other.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            let start = cpu();
            for i in 0..n {
                blob[39..43].copy_from_slice(&(round * n + i).to_le_bytes());
                std::hint::black_box(vms[k].hash(&blob));
            }
            t[k] = (cpu() - start) / n as f64 * 1e3;
        }
        totals[0] += t[0];
        totals[1] += t[1];
        ratios.push(t[0] / t[1]);
    }
    ratios.sort_by(f64::total_cmp);
    let r = ratios.len();
    println!(
        "{} dataset, {rounds} rounds of {n} hashes: mxcsr {:.3} ms, embedded {:.3} ms (means); \
         embedded speedup median {:.3} (quartiles {:.3} .. {:.3})",
        if real { "real" } else { "zero" },
        totals[0] / r as f64,
        totals[1] / r as f64,
        ratios[r / 2],
        ratios[r / 4],
        ratios[3 * r / 4]
    );
}
