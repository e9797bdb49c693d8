//! The reference's compiled program loop against ours for the same programs, on the same
//! scratchpad and dataset memory, alternating, in one process, so that code generation is
//! compared with everything else equal. The reference's code is copied out of its VM's JIT buffer
//! after a hash (the buffer then holds the hash's 8th program and is position-independent) into a
//! region like ours, and called with the ABI of librandomx 1.1's x86-64 JIT
//! (`(RegisterFile*, MemoryRegisters*, scratchpad, iterations)`); every run's integer registers
//! must agree. The first program's two codes are written to /tmp/loop_ab_ref.bin and
//! /tmp/loop_ab_ours.bin for `objdump -D -b binary -mi386:x86-64 -M intel`.
//! Usage: `loop_ab [programs] [repetitions]` (default 16, 20); reserve hugetlb pages first
//! (two datasets: `echo 3000 > /proc/sys/vm/nr_hugepages`).
use proofkit_core::memory::LargeBuffer;
use proofkit_randomx::analysis::{program_settings, AnalysisVm, Observer};
use proofkit_randomx::config::*;
use proofkit_randomx::peer::{LibRandomx, FLAG_FULL_MEM, FLAG_LARGE_PAGES};
use proofkit_randomx::program::Program;
use proofkit_randomx::vm::interpreter::Bytecode;
use proofkit_randomx::vm::jit_x86_64::{self, JitState};
use proofkit_randomx::vm::mxcsr;
use proofkit_randomx::{Cache, Dataset, DatasetSource, PagePolicy, Version};
use std::sync::Arc;

#[repr(C, align(64))]
#[derive(Default, Clone)]
struct RefRegs {
    r: [u64; 8],
    f: [[f64; 2]; 4],
    e: [[f64; 2]; 4],
    a: [[f64; 2]; 4],
}
#[repr(C)]
struct MemRegs {
    mx: u32,
    ma: u32,
    memory: *const u8,
}
type RefFn = unsafe extern "sysv64" fn(*mut RefRegs, *mut MemRegs, *mut u8, u64);
type OurFn = unsafe extern "sysv64" fn(*mut JitState);

fn exec_maps() -> Vec<(usize, usize)> {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (a, b) = it.next()?.split_once('-')?;
            it.next()?.contains('x').then(|| {
                (
                    usize::from_str_radix(a, 16).unwrap(),
                    usize::from_str_radix(b, 16).unwrap(),
                )
            })
        })
        .collect()
}

struct Last(Option<(Program, Vec<Bytecode>)>);
impl Observer for Last {
    fn program_start(&mut self, index: usize, program: &Program, code: &[Bytecode]) {
        if index == 7 {
            self.0 = Some((program.clone(), code.to_vec()));
        }
    }
}

/// A read-write-execute region on `pages` holding `code` at its start.
fn code_region(pages: PagePolicy, code: &[u8]) -> LargeBuffer {
    let mut b = LargeBuffer::new(2 << 20, pages).unwrap();
    b.as_mut_slice()[..code.len()].copy_from_slice(code);
    // SAFETY: experiment; our own mapping, whole.
    let rc = unsafe {
        libc::mprotect(
            b.as_mut_ptr() as *mut libc::c_void,
            2 << 20,
            libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
        )
    };
    assert_eq!(rc, 0);
    b
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let nprog: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(16);
    let reps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20);
    let key = b"loop ab";
    let pages = PagePolicy::HugetlbFirst;
    let cache = Arc::new(Cache::new(key, pages).unwrap());
    let ours_d = Arc::new(Dataset::build(&cache, pages, 2, &|_, _| {}).unwrap());
    println!("our dataset on {}", ours_d.page_kind());
    let lib = LibRandomx::load().unwrap();
    let flags = lib.recommended_flags() | FLAG_FULL_MEM | FLAG_LARGE_PAGES;
    let c = lib.cache(flags, key).unwrap();
    let pd = lib.dataset(flags, &c, 2).unwrap();
    let ref_mem = pd.memory_ptr();
    let before = exec_maps();
    let mut pvm = lib.vm(flags, Some(&c), Some(&pd)).unwrap();
    let new: Vec<_> = exec_maps()
        .into_iter()
        .filter(|m| !before.contains(m))
        .collect();
    assert_eq!(
        new.len(),
        1,
        "one new executable mapping: the VM's JIT buffer"
    );
    let (lo, hi) = new[0];
    let mut avm = AnalysisVm::new(DatasetSource::Light(cache.clone()), Version::V1, false).unwrap();

    // Programs: the reference's code (copied) and ours, each in its own hugetlb RWX region.
    let mut progs = Vec::new();
    for k in 0..nprog {
        let input = format!("loop ab input {k}");
        let h = pvm.hash(input.as_bytes());
        let mut last = Last(None);
        assert_eq!(avm.hash_observed(input.as_bytes(), &mut last), h);
        let (program, code) = last.0.unwrap();
        let cf = program_settings(&program.entropy);
        // SAFETY: experiment; the reference's buffer is readable and alive (pvm).
        let theirs = unsafe { std::slice::from_raw_parts(lo as *const u8, hi - lo) };
        let ours = jit_x86_64::compile(
            &code,
            cf.read_reg,
            jit_x86_64::JitMode::Fast,
            false,
            Default::default(),
        );
        if k == 0 {
            std::fs::write("/tmp/loop_ab_ref.bin", theirs).unwrap();
            std::fs::write("/tmp/loop_ab_ours.bin", &ours).unwrap();
        }
        let (rregion, oregion) = (code_region(pages, theirs), code_region(pages, &ours));
        progs.push((cf, rregion, oregion));
    }
    println!("{nprog} programs; code regions on {}", progs[0].1.kind());

    let mut sp = LargeBuffer::new(SCRATCHPAD_L3, pages).unwrap();
    let mut sp_init = vec![0u8; SCRATCHPAD_L3];
    let mut seed = [5u8; 64];
    proofkit_randomx::Aes::detect().fill_1r(&mut seed, &mut sp_init);
    let our_mem = ours_d.memory_ptr();
    let now = || {
        proofkit_core::cputime::thread_cpu_time()
            .unwrap()
            .as_secs_f64()
    };
    // Variants (code, dataset): 0 ref/ref, 1 ours/ref, 2 ref/ours, 3 ours/ours. A program's
    // second run on the same dataset finds its 2,048 dataset lines cached, so each dataset is
    // run cold first by the reference's code in even repetitions and by ours in odd ones, and
    // only cold runs are compared.
    let mut cold: Vec<[f64; 2]> = Vec::new(); // per rep: [ref data, our data] for the cold code
    for rep in 0..reps {
        let mut tr = [0f64; 4];
        let order = if rep % 2 == 0 {
            [0, 1, 2, 3]
        } else {
            [1, 0, 3, 2]
        };
        for (cf, rregion, oregion) in progs.iter_mut() {
            let mut results = Vec::new();
            for v in order {
                let mem = if v < 2 { ref_mem } else { our_mem };
                sp.as_mut_slice().copy_from_slice(&sp_init);
                // SAFETY: experiment; both functions follow their ABI, pointers are live.
                let (dt, r) = unsafe {
                    if v % 2 == 0 {
                        let f: RefFn = std::mem::transmute(rregion.as_mut_ptr());
                        let mut regs = RefRegs {
                            a: cf.a,
                            ..Default::default()
                        };
                        let mut m = MemRegs {
                            mx: cf.mx,
                            ma: cf.ma,
                            memory: mem.add(cf.dataset_offset as usize),
                        };
                        // The reference's C++ sets MXCSR (its default, FTZ and DAZ on) around the call.
                        let saved = mxcsr::read();
                        mxcsr::write(0x9FC0);
                        let s = now();
                        f(
                            &mut regs,
                            &mut m,
                            sp.as_mut_ptr(),
                            PROGRAM_ITERATIONS as u64,
                        );
                        let dt = now() - s;
                        mxcsr::write(saved);
                        (dt, regs.r)
                    } else {
                        let f: OurFn = std::mem::transmute(oregion.as_mut_ptr());
                        let mut st = JitState {
                            a: cf.a,
                            e_mask: cf.e_mask,
                            mem: cf.ma as u64 | ((cf.mx as u64) << 32),
                            sp_addr: cf.mx as u64 | ((cf.ma as u64) << 32),
                            fprc: 0,
                            scratchpad: sp.as_mut_ptr(),
                            dataset: mem.add(cf.dataset_offset as usize),
                            ..Default::default()
                        };
                        let s = now();
                        f(&mut st);
                        (now() - s, st.r)
                    }
                };
                tr[v] += dt;
                results.push(r);
            }
            assert!(
                results.iter().all(|r| *r == results[0]),
                "same registers from all four runs"
            );
        }
        let us = |v: usize| tr[v] / nprog as f64 * 1e6;
        let (c0, c1) = (order[0], order[2]);
        println!(
            "rep {rep}: cold {} code {:.1} / {:.1} us (ref / our dataset), warm {} code {:.1} / {:.1}",
            if rep % 2 == 0 { "ref" } else { "our" },
            us(c0),
            us(c1),
            if rep % 2 == 0 { "our" } else { "ref" },
            us(order[1]),
            us(order[3])
        );
        cold.push([us(c0), us(c1)]);
    }
    // Our code against the reference's, cold, from consecutive repetitions (both datasets).
    let mut code_ratio: Vec<f64> = cold
        .chunks_exact(2)
        .map(|p| (p[1][0] + p[1][1]) / (p[0][0] + p[0][1]))
        .collect();
    let mut data_ratio: Vec<f64> = cold.iter().map(|c| c[1] / c[0]).collect();
    code_ratio.sort_by(f64::total_cmp);
    data_ratio.sort_by(f64::total_cmp);
    println!(
        "median, cold runs: our code / reference code {:.3} (time, lower is faster); our dataset / reference dataset {:.3}",
        code_ratio[code_ratio.len() / 2],
        data_ratio[data_ratio.len() / 2]
    );
}
