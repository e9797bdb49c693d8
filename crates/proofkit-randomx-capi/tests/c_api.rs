//! The C API end to end: `tests/c/vectors.c`, compiled against OUR `include/randomx.h` and
//! linked to the cdylib of this build, checks every vector of `shared/vectors/randomx.json`
//! (v1 and v2 hashes with software and hardware AES, commitments, the batch rule, the rounding
//! rule, Argon2 cache words, dataset item word 0), dataset items against
//! `proofkit_randomx::Cache::dataset_item`, cache re-keying and the NULL cases. Light mode only.

mod common;

use common::{arg, field_bytes};
use proofkit_randomx::{Cache, PagePolicy};
use serde_json::Value;

type Check = Box<dyn Fn(&str)>;

/// The C program's four light VMs: name, version, hardware AES.
const ALL_VMS: [(&str, &str, bool); 4] = [
    ("v1", "v1", false),
    ("v2", "v2", false),
    ("v1h", "v1", true),
    ("v2h", "v2", true),
];

/// The script sent to the C program and, per line, what its answer must satisfy.
struct Script {
    lines: Vec<String>,
    checks: Vec<Check>,
}

impl Script {
    fn push(&mut self, cmd: String, check: impl Fn(&str) + 'static) {
        self.lines.push(cmd);
        self.checks.push(Box::new(check));
    }

    fn expect(&mut self, cmd: String, want: String) {
        let c = cmd.clone();
        self.push(cmd, move |got| assert_eq!(got, want, "command `{c}`"));
    }
}

fn s(v: &Value, k: &str) -> String {
    v[k].as_str()
        .unwrap_or_else(|| panic!("field {k}"))
        .to_owned()
}

#[test]
fn vectors_through_the_c_api() {
    let Some(vec) = common::vectors() else {
        return;
    };
    if !common::have_cc() {
        println!("skipped: no C compiler (cc) on PATH");
        return;
    }
    let dir = common::library_dir("vectors");
    let exe = dir.join("vectors");
    let include = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    common::compile("tests/c/vectors.c", &exe, Some(&include), Some(&dir));

    let cpu = proofkit_core::cpu::features();
    let hard_aes = proofkit_randomx::Aes::hardware().is_some();
    let mut sc = Script {
        lines: vec![],
        checks: vec![],
    };
    let lib_dir = dir.clone();
    sc.push("lib".into(), move |got| {
        let path = got.strip_prefix("lib ").expect("lib line");
        assert!(
            path.starts_with(lib_dir.to_str().unwrap()),
            "the C program loaded {path}, not our library"
        );
    });
    let mut flags = 8; // RANDOMX_FLAG_JIT, as the reference on x86-64
    if !proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE") {
        flags |= if hard_aes { 2 } else { 0 } | if cpu.avx2 { 64 } else { 0 };
        flags |= if cpu.ssse3 { 32 } else { 0 };
    }
    sc.expect("flags".into(), format!("flags {flags}"));
    sc.expect("itemcount".into(), "itemcount 34078719".into());

    // Key 000: Argon2 words, every hash vector of that key on all four VMs, commitments.
    let key0 = b"test key 000".to_vec();
    let key1 = b"test key 001".to_vec();
    let ptrs = std::rc::Rc::new(std::cell::RefCell::new(Vec::<String>::new()));
    let key_line = |sc: &mut Script, key: &[u8]| {
        let p = ptrs.clone();
        sc.push(format!("key {}", arg(key)), move |got| {
            p.borrow_mut()
                .push(got.strip_prefix("key ").expect("key line").to_owned());
        });
    };
    key_line(&mut sc, &key0);
    let words = &vec["argon2_cache_words"];
    assert_eq!(field_bytes(words, "key"), key0);
    for (i, w) in words["words"].as_object().unwrap() {
        sc.expect(format!("word {i}"), format!("word {}", w.as_str().unwrap()));
    }
    let hash_vectors = |sc: &mut Script, key: &[u8], vms: &[(&str, &str, bool)]| {
        for h in vec["hashes"].as_array().unwrap() {
            if field_bytes(h, "key") != key {
                continue;
            }
            let input = arg(&field_bytes(h, "input"));
            for &(vm, ver, hw) in vms {
                let want = if hw && !hard_aes {
                    "NA".to_owned()
                } else {
                    s(h, ver)
                };
                sc.expect(format!("hash {vm} {input}"), format!("hash {want}"));
            }
        }
    };
    hash_vectors(&mut sc, &key0, &ALL_VMS);
    for c in vec["commitments"].as_array().unwrap() {
        let input = field_bytes(c, "input");
        let h = vec["hashes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| {
                field_bytes(h, "key") == field_bytes(c, "key") && field_bytes(h, "input") == input
            })
            .expect("the commitment's hash is among the hash vectors");
        for ver in ["v1", "v2"] {
            sc.expect(
                format!("commit {} {}", arg(&input), s(h, ver)),
                format!("commit {}", s(c, ver)),
            );
        }
    }
    // The batch rule, v1 (software AES) and v2 (hardware AES).
    let of_key0: Vec<&Value> = vec["hashes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| field_bytes(h, "key") == key0)
        .take(3)
        .collect();
    assert_eq!(
        of_key0.len(),
        3,
        "three inputs of key 000 for the batch rule"
    );
    let inputs: Vec<String> = of_key0
        .iter()
        .map(|h| arg(&field_bytes(h, "input")))
        .collect();
    for (vm, ver, hw) in [("v1", "v1", false), ("v2h", "v2", true)] {
        let want = if hw && !hard_aes {
            "batch NA".to_owned()
        } else {
            format!(
                "batch {} {} {}",
                s(of_key0[0], ver),
                s(of_key0[1], ver),
                s(of_key0[2], ver)
            )
        };
        sc.expect(
            format!("batch {vm} {} {} {}", inputs[0], inputs[1], inputs[2]),
            want,
        );
    }
    // hash_last/hash_next with nothing pending write zeros; the _next still starts its input.
    let zeros = "0".repeat(64);
    let rust_cache = std::sync::Arc::new(Cache::new(&key0, PagePolicy::Transparent).unwrap());
    let mut rust_vm =
        proofkit_randomx::Vm::light(rust_cache.clone(), proofkit_randomx::Version::V1).unwrap();
    let hx = hex::encode(rust_vm.hash(b"x"));
    sc.expect("orphan v1".into(), format!("orphan {zeros} {zeros} {hx}"));
    // The rounding rule: hashing under FE_UPWARD gives the same hash and keeps the mode.
    let first = of_key0[0];
    sc.expect(
        format!("rounding v1 {}", inputs[0]),
        format!("rounding {} 1", s(first, "v1")),
    );

    // Dataset items: the vectors' word 0, and all 8 words against the Rust API, over ranges
    // that take each path of the reference's randomx_init_dataset (count < 4, count % 4 == 0,
    // otherwise) and the dataset's last item.
    let items = &vec["dataset_items_word0"];
    assert_eq!(field_bytes(items, "key"), key0);
    let last = 34078719u64 - 1;
    let mut ranges: Vec<(u64, u64)> =
        vec![(0, 5), (1000, 4), (123456, 2), (last, 1), (last - 6, 6)];
    for (i, _) in items["items"].as_object().unwrap() {
        ranges.push((i.parse().unwrap(), 1));
    }
    for (start, count) in ranges {
        let mut want = String::from("items");
        for i in start..start + count {
            for w in rust_cache.dataset_item(i) {
                want.push_str(&format!(" {w:016x}"));
            }
        }
        if let Some(w0) = items["items"].get(start.to_string()) {
            let w0 =
                u64::from_str_radix(w0.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
            assert_eq!(rust_cache.dataset_item(start)[0], w0, "Rust item {start}");
            assert!(want.starts_with(&format!("items {w0:016x}")));
        }
        sc.expect(format!("items {start} {count}"), want);
    }
    // A 0-byte input, passed as NULL.
    sc.expect(
        "hash v1 -".into(),
        format!("hash {}", hex::encode(rust_vm.hash(b""))),
    );
    drop((rust_vm, rust_cache));

    // NULL returns and NULL arguments.
    let no_hugetlb = proofkit_core::memory::free_hugetlb_pages() == 0;
    let (avx2, ssse3) = (cpu.avx2 as u8, cpu.ssse3 as u8);
    sc.push("nulls".into(), move |got| {
        for (name, want) in [
            ("light_vm_without_cache", Some(1)),
            ("full_vm_without_dataset", Some(1)),
            ("light_vm_unkeyed_cache", Some(1)),
            ("unkeyed_cache_memory", Some(1)),
            ("large_pages_cache", no_hugetlb.then_some(0)),
            ("large_pages_vm", no_hugetlb.then_some(0)),
            ("argon2_avx2_cache", Some(avx2)),
            ("argon2_ssse3_cache", Some(ssse3)),
            ("outputs_untouched", Some(1)),
            ("null_memory", Some(1)),
        ] {
            let field = got
                .split_whitespace()
                .find_map(|f| f.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("nulls line lacks {name}: {got}"));
            if let Some(w) = want {
                assert_eq!(field, w.to_string(), "{name} in `{got}`");
            }
        }
    });

    // Re-keying: the VMs follow the cache (before and after randomx_vm_set_cache), the same
    // key again is a no-op (same memory), and back to key 000.
    key_line(&mut sc, &key1);
    let k1 = vec["hashes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| field_bytes(h, "key") == key1)
        .expect("a vector of key 001");
    sc.expect(
        format!("hash v1 {}", arg(&field_bytes(k1, "input"))),
        format!("hash {}", s(k1, "v1")),
    );
    sc.expect("setcache".into(), "setcache".into());
    hash_vectors(&mut sc, &key1, &[("v1", "v1", false), ("v2h", "v2", true)]);
    key_line(&mut sc, &key1);
    key_line(&mut sc, &key0);
    sc.expect("setcache".into(), "setcache".into());
    let h0 = of_key0[1];
    sc.expect(
        format!("hash v2 {}", arg(&field_bytes(h0, "input"))),
        format!("hash {}", s(h0, "v2")),
    );

    let script = sc.lines.join("\n") + "\n";
    let out = common::run(&exe, &script, Some(&dir));
    assert_eq!(
        out.len(),
        sc.lines.len(),
        "one output line per command:\n{}",
        out.join("\n")
    );
    for (got, check) in out.iter().zip(&sc.checks) {
        check(got);
    }
    let p = ptrs.borrow();
    assert_eq!(p.len(), 4);
    assert_ne!(
        p[0], p[1],
        "VMs hold the key-000 cache: key 001 gets a fresh one"
    );
    assert_eq!(
        p[1], p[2],
        "re-keying with the same key must keep the cache"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
