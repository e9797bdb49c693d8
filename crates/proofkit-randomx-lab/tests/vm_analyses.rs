//! The analyses that run the VM, on a light-mode cache shared by the tests of this binary (one
//! Argon2 fill): the instrumented and timed drivers against `Vm::hash`, then memory, entropy and
//! runtime on small samples.

use proofkit_randomx::analysis::{AccessKind, AnalysisVm, Observer};
use proofkit_randomx::vm::RegisterFile;
use proofkit_randomx::{Cache, DatasetSource, PagePolicy, Version, Vm};
use proofkit_randomx_lab::{entropy, memory, runtime, Analysis};
use std::sync::{Arc, OnceLock};

fn cache() -> Arc<Cache> {
    static CACHE: OnceLock<Arc<Cache>> = OnceLock::new();
    CACHE
        .get_or_init(|| {
            Arc::new(Cache::new(b"analysis test key", PagePolicy::Transparent).unwrap())
        })
        .clone()
}

fn light_vm(version: Version) -> AnalysisVm {
    AnalysisVm::new(DatasetSource::Light(cache()), version, true).unwrap()
}

#[derive(Default)]
struct Counter {
    instructions: u64,
    reads: u64,
    stores: u64,
    register_writes: u64,
    iterations: u64,
    branches_taken: u64,
    last_regs: Option<RegisterFile>,
}

impl Observer for Counter {
    fn instruction(&mut self, _pc: usize, _code: &proofkit_randomx::vm::interpreter::Bytecode) {
        self.instructions += 1;
    }
    fn read(&mut self, addr: u32, bytes: u32, kind: AccessKind) {
        assert!((addr + bytes) as usize <= 2 << 20);
        self.reads += (kind == AccessKind::Instruction) as u64;
    }
    fn write(&mut self, addr: u32, bytes: u32, kind: AccessKind) {
        assert!((addr + bytes) as usize <= 2 << 20);
        match kind {
            AccessKind::Store => self.stores += 1,
            _ => self.register_writes += 1,
        }
    }
    fn branch(&mut self, _pc: usize, taken: bool) {
        self.branches_taken += taken as u64;
    }
    fn iteration_end(&mut self, _i: usize, regs: &RegisterFile) {
        self.iterations += 1;
        self.last_regs = Some(*regs);
    }
}

#[test]
fn observed_and_timed_hashes_equal_the_vm() {
    for version in [Version::V1, Version::V2] {
        let mut vm = Vm::light(cache(), version).unwrap();
        let mut a = light_vm(version);
        for input in [&b"This is a test"[..], b"", b"analysis"] {
            let expected = vm.hash(input);
            let mut c = Counter::default();
            assert_eq!(
                a.hash_observed(input, &mut c),
                expected,
                "{version:?} observed"
            );
            let observed_pad = a.scratchpad().to_vec();
            let (timed, t) = a.hash_timed(input);
            assert_eq!(timed, expected, "{version:?} timed");
            assert_eq!(
                a.scratchpad(),
                &observed_pad[..],
                "{version:?} final scratchpad"
            );
            assert_eq!((t.execute_ns.len(), t.generate_ns.len()), (8, 8));
            assert!(t.total_ns() > 0);
            // 8 programs x 2048 iterations, each with 2 register stores.
            assert_eq!(c.iterations, 8 * 2048);
            assert_eq!(c.register_writes, 2 * 8 * 2048);
            let size = version.program_size() as u64;
            assert!(c.instructions >= 8 * 2048 * size, "{}", c.instructions);
            assert!(c.branches_taken > 0);
            assert!(c.reads > 0 && c.stores > 0);
            assert!(c.last_regs.is_some());
        }
    }
}

#[test]
fn memory_counts_per_iteration_match_the_document() {
    let mut vm = light_vm(Version::V1);
    let m = memory::run(&mut vm, 2, 64).unwrap();
    let near = |ours: f64, doc: f64, tol: f64| (ours / doc - 1.0).abs() < tol;
    // 16 programs: the mean of 256 draws at 39/256 has a standard deviation of ~1.4.
    assert!(
        near(m.reads_per_program, memory::DOCUMENT_READS, 0.12),
        "{}",
        m.reads_per_program
    );
    assert!(
        near(m.writes_per_program, memory::DOCUMENT_WRITES, 0.2),
        "{}",
        m.writes_per_program
    );
    assert!(m.executed_reads_per_iteration >= m.reads_per_program * 0.95);
    assert!(
        near(m.executed_reads_per_iteration, 39.0, 0.2),
        "{}",
        m.executed_reads_per_iteration
    );
    assert!(near(m.executed_writes_per_iteration, 16.0, 0.25));
    assert!(near(
        m.bytes_read_per_iteration,
        memory::DOCUMENT_BYTES_READ,
        0.1
    ));
    assert!(near(
        m.bytes_written_per_iteration,
        memory::DOCUMENT_BYTES_WRITTEN,
        0.1
    ));
    assert!(m.l1_l2_overwritten > 0.9, "{}", m.l1_l2_overwritten);
    assert!(
        (0.5..0.85).contains(&m.l3_only_overwritten),
        "{}",
        m.l3_only_overwritten
    );
    assert_eq!(m.write_map.len(), 2 * 1024 * 1024 / 8);
    assert_eq!(m.programs, 16);
    let f_total: f64 = m.f_histogram.iter().map(|b| b.2).sum();
    assert_eq!(f_total as u64 + m.f_zero_values, 16 * 32 * 8);
    assert!(memory::run(&mut vm, 0, 1).is_err());
    // Both pictures are written and are PNG files.
    let dir = std::env::temp_dir().join(format!("proofkit-lab-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("memory.png");
    m.plot(&p).unwrap();
    for f in [p.clone(), memory::companion_path(&p, "fe")] {
        let bytes = std::fs::read(&f).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", f.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn entropy_of_two_scratchpads_is_near_full() {
    let mut vm = light_vm(Version::V1);
    let e = entropy::run(&mut vm, 2).unwrap();
    assert_eq!(e.original_bytes, 2 * 2 * 1024 * 1024);
    // Incompressible: LZMA stores the data in raw chunks, with a little framing overhead.
    assert!(e.ratio > 0.999 && e.ratio < 1.01, "{}", e.ratio);
    assert!(
        (e.ratio - e.control_ratio).abs() < 0.001,
        "{} vs {}",
        e.ratio,
        e.control_ratio
    );
    // Below the control's ~8.0: the stored F registers' exponent bytes are biased.
    assert!(e.bits_per_byte > 7.99, "{}", e.bits_per_byte);
    assert!(
        e.control_bits_per_byte > 7.999,
        "{}",
        e.control_bits_per_byte
    );
    assert!(entropy::run(&mut vm, 0).is_err());
}

#[test]
fn light_runtime_breakdown_adds_up() {
    let mut vm = light_vm(Version::V1);
    let source = DatasetSource::Light(cache());
    let r = runtime::run(&mut vm, &source, 3).unwrap();
    assert_eq!(r.mode, "light");
    assert_eq!(r.program_us.len(), 3 * 8);
    assert_eq!(r.hash_us.len(), 3);
    let b = &r.breakdown;
    let sum = b.execute_us + b.fill_us + b.scratchpad_hash_us + b.generate_us + b.blake2b_us;
    assert!((sum - b.total_us).abs() < 1e-6 * b.total_us.max(1.0));
    assert!((b.total_us - r.hash_mean_us).abs() < 1e-6 * b.total_us);
    assert!(b.overhead > 0.0 && b.overhead < 0.5, "{}", b.overhead);
    assert!(r.filter_speedup >= 1.0);
    assert!(r.lognormal_sigma > 0.0);
    assert!(runtime::run(&mut vm, &source, 1).is_err());
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert_eq!(json["mode"], "light");
}
