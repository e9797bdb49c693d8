//! AVX-512 (F and VL) row arithmetic for [`super::merge_with`]: a row of up to eight words is
//! one 256-bit register, read and written with masked loads and stores (a masked-off lane is
//! neither read nor written, so a row never reaches past its slice), XORed, and shifted by the
//! digit's bits with one lane move (`valignd`) and two shifts. The portable kernel
//! ([`super::Portable`]) does the same word by word; `tests::kernels_agree` compares the two,
//! and the solver tests compare the solutions of both paths.
//!
//! Chosen at run time when the CPU reports AVX-512F and AVX-512VL and
//! `PROOFKIT_FORCE_PORTABLE` is not set.
#![allow(unsafe_code)]

use super::{fill_layer0_with, merge_with, Input, KernelJob, Overflow, Plan, RowKernel, MAX_WORDS};
use crate::hash::HashGen;
use std::arch::x86_64::*;
use std::sync::OnceLock;

/// Whether this CPU can run [`Avx512`] (and it is not forced off).
pub(super) fn available() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let cpu = proofkit_core::cpu::features();
        cpu.avx512f && cpu.avx512vl && !proofkit_core::cpu::env_flag("PROOFKIT_FORCE_PORTABLE")
    })
}

/// The AVX-512 [`RowKernel`]. A value exists only on a CPU with AVX-512F and AVX-512VL
/// ([`Avx512::new`] checks), which is what makes its methods' intrinsics sound.
#[derive(Clone, Copy)]
pub(super) struct Avx512 {
    /// Shift counts: the digit's bits c, and 32 - c.
    left: __m128i,
    right: __m128i,
}

impl Avx512 {
    /// The kernel for digits of `c` bits (1..=31), or `None` without the CPU features.
    pub(super) fn new(c: u32) -> Option<Self> {
        if !available() || !(1..32).contains(&c) {
            return None;
        }
        // SAFETY: SSE2, part of x86-64.
        unsafe {
            Some(Avx512 {
                left: _mm_cvtsi32_si128(c as i32),
                right: _mm_cvtsi32_si128(32 - c as i32),
            })
        }
    }
}

/// Lanes `0..n` of a 256-bit register of 32-bit words (n <= 8).
#[inline(always)]
fn lanes(n: usize) -> __mmask8 {
    ((1u32 << n) - 1) as __mmask8
}

/// Reverses the bytes of each 32-bit lane (big-endian words to and from native ones).
///
/// # Safety
/// The CPU must support AVX2 (implied by AVX-512F).
#[inline(always)]
unsafe fn swap_words(x: __m256i) -> __m256i {
    let swap = _mm256_setr_epi8(
        3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12, 3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8,
        15, 14, 13, 12,
    );
    _mm256_shuffle_epi8(x, swap)
}

impl RowKernel for Avx512 {
    type Row = __m256i;

    #[inline(always)]
    fn xor_next<const WI: usize, const WO: usize>(
        self,
        a: &[u32],
        b: &[u32],
    ) -> Option<(Self::Row, u32)> {
        assert!(a.len() >= WI && b.len() >= WI && WI <= 8);
        let m = lanes(WI);
        // SAFETY: a value of `Avx512` exists only on a CPU with AVX-512F and AVX-512VL
        // (`Avx512::new`). The masked loads read lanes 0..WI only (masked-off lanes are not
        // accessed and do not fault), and both slices hold at least WI words (asserted).
        unsafe {
            let x = _mm256_xor_si256(
                _mm256_maskz_loadu_epi32(m, a.as_ptr() as *const i32),
                _mm256_maskz_loadu_epi32(m, b.as_ptr() as *const i32),
            );
            // Lanes past WI are zero; the rows agree on the rest of the digit, so they are
            // identical when every lane is zero.
            if _mm256_test_epi32_mask(x, x) == 0 {
                return None;
            }
            // Word w + 1 in lane w (zero in lane 7), so that lane w of the result is
            // x[w] << c | x[w + 1] >> (32 - c).
            let next = _mm256_alignr_epi32::<1>(_mm256_setzero_si256(), x);
            let y = _mm256_or_si256(
                _mm256_sll_epi32(x, self.left),
                _mm256_srl_epi32(next, self.right),
            );
            Some((y, _mm256_cvtsi256_si32(x) as u32))
        }
    }

    #[inline(always)]
    fn store_slot<const WO: usize>(self, dst: &mut [u32], y: Self::Row, tree: u32, tw: usize) {
        assert!(WO <= dst.len() && tw < dst.len() && dst.len() <= 8);
        // SAFETY: CPU features as in `xor_next`. The masked store writes lanes 0..WO and
        // lane tw only, all inside `dst` (asserted); other lanes are not accessed.
        unsafe {
            let v = _mm256_mask_set1_epi32(y, 1 << tw, tree as i32);
            _mm256_mask_storeu_epi32(
                dst.as_mut_ptr() as *mut i32,
                lanes(WO) | (1 << tw) as __mmask8,
                v,
            );
        }
    }

    #[inline(always)]
    fn words(self, y: Self::Row) -> [u32; MAX_WORDS] {
        let mut out = [0u32; MAX_WORDS];
        // SAFETY: CPU features as in `xor_next`; an unaligned store of 8 words into the
        // 8-word array `out` (MAX_WORDS is 8).
        unsafe { _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, y) };
        out
    }

    #[inline(always)]
    fn string_row<const HW: usize>(self, bytes: &[u8], last_mask: u32) -> (Self::Row, usize) {
        // Words w and w + 1 of the string make output word w, so HW + 1 words are read.
        assert!(bytes.len() >= 32 && HW < 8);
        // SAFETY: CPU features as in `xor_next`; an unaligned load of 32 bytes from a slice
        // of at least 32 (asserted).
        unsafe {
            let raw = _mm256_loadu_si256(bytes.as_ptr() as *const __m256i);
            // Big-endian words.
            let x = swap_words(raw);
            let next = _mm256_alignr_epi32::<1>(_mm256_setzero_si256(), x);
            let y = _mm256_or_si256(
                _mm256_sll_epi32(x, self.left),
                _mm256_srl_epi32(next, self.right),
            );
            // Lane HW - 1 keeps `last_mask`'s bits (later lanes are never stored).
            let y = _mm256_mask_and_epi32(y, 1 << (HW - 1), y, _mm256_set1_epi32(last_mask as i32));
            let first = _mm256_cvtsi256_si32(x) as u32;
            (y, (first >> _mm_cvtsi128_si32(self.right)) as usize)
        }
    }

    #[inline(always)]
    fn load_be<const W: usize>(self, src: &[u8], last_mask: u32) -> (Self::Row, u32) {
        assert!(src.len() >= 4 * W && (1..=8).contains(&W));
        // SAFETY: CPU features as in `xor_next`; the masked load reads words 0..W only,
        // inside `src` (asserted).
        unsafe {
            let raw = _mm256_maskz_loadu_epi32(lanes(W), src.as_ptr() as *const i32);
            let x = swap_words(raw);
            let y = _mm256_mask_and_epi32(x, 1 << (W - 1), x, _mm256_set1_epi32(last_mask as i32));
            (y, _mm256_cvtsi256_si32(y) as u32)
        }
    }

    #[inline(always)]
    fn store_words<const W: usize>(self, dst: &mut [u32], y: Self::Row) {
        assert!(dst.len() >= W && W <= 8);
        // SAFETY: CPU features as in `xor_next`; the masked store writes words 0..W only,
        // inside `dst` (asserted).
        unsafe { _mm256_mask_storeu_epi32(dst.as_mut_ptr() as *mut i32, lanes(W), y) }
    }

    #[inline(always)]
    fn store_be<const W: usize>(self, dst: &mut [u8], y: Self::Row) {
        assert!(dst.len() >= 4 * W && W <= 8);
        // SAFETY: CPU features as in `xor_next`; the masked store writes words 0..W only,
        // inside `dst` (asserted).
        unsafe {
            _mm256_mask_storeu_epi32(dst.as_mut_ptr() as *mut i32, lanes(W), swap_words(y));
        }
    }
}

/// Runs `job` with the AVX-512 kernel (for [`super::with_kernel`]).
pub(super) fn run_job<J: KernelJob>(kern: Avx512, job: J) -> J::Out {
    // SAFETY: `kern` exists, so the CPU has AVX-512F and AVX-512VL.
    unsafe { run_job_avx512(kern, job) }
}

/// `job.run(kern)` compiled for AVX-512 (`run` is inlined here, with its kernel calls).
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512VL.
#[target_feature(enable = "avx512f,avx512vl")]
unsafe fn run_job_avx512<J: KernelJob>(kern: Avx512, job: J) -> J::Out {
    job.run(kern)
}

const _: () = assert!(MAX_WORDS == 8);

/// [`super::merge`] with the AVX-512 kernel where the CPU has it, the portable one otherwise.
pub(super) fn merge<
    const WI: usize,
    const WO: usize,
    const C: u32,
    const BB: u32,
    const SPEC: bool,
    const SI: usize,
    const SO: usize,
>(
    ins: &Input,
    t: usize,
    region: &mut [u32],
    counts: &mut [u32],
    ovf_out: &mut Overflow,
) -> bool {
    let c = if SPEC { C } else { ins.plan.c };
    match Avx512::new(c) {
        // SAFETY: `kern` exists, so the CPU has AVX-512F and AVX-512VL.
        Some(kern) => unsafe {
            merge_avx512::<WI, WO, C, BB, SPEC, SI, SO>(kern, ins, t, region, counts, ovf_out)
        },
        None => super::merge::<WI, WO, C, BB, SPEC, SI, SO>(ins, t, region, counts, ovf_out),
    }
}

/// [`super::fill_layer0`] with the AVX-512 kernel where the CPU has it.
#[allow(clippy::too_many_arguments)]
pub(super) fn fill_layer0<const BB: u32, const HW: usize, const SPEC: bool>(
    gen: &HashGen,
    plan: &Plan,
    t: usize,
    blocks: std::ops::Range<usize>,
    region: &mut [u32],
    counts: &mut [u32],
    ovf: &mut Overflow,
) -> bool {
    let bb = if SPEC { BB } else { plan.bb };
    match Avx512::new(bb) {
        // SAFETY: `kern` exists, so the CPU has AVX-512F and AVX-512VL.
        Some(kern) => unsafe {
            fill_layer0_avx512::<BB, HW, SPEC>(kern, gen, plan, t, blocks, region, counts, ovf)
        },
        None => super::fill_layer0::<BB, HW, SPEC>(gen, plan, t, blocks, region, counts, ovf),
    }
}

/// `fill_layer0_with` compiled for AVX-512.
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512VL.
#[target_feature(enable = "avx512f,avx512vl")]
#[allow(clippy::too_many_arguments)]
unsafe fn fill_layer0_avx512<const BB: u32, const HW: usize, const SPEC: bool>(
    kern: Avx512,
    gen: &HashGen,
    plan: &Plan,
    t: usize,
    blocks: std::ops::Range<usize>,
    region: &mut [u32],
    counts: &mut [u32],
    ovf: &mut Overflow,
) -> bool {
    fill_layer0_with::<BB, HW, SPEC, Avx512>(kern, gen, plan, t, blocks, region, counts, ovf)
}

/// `merge_with` compiled for AVX-512 (it is inlined here, with its kernel calls).
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512VL.
#[target_feature(enable = "avx512f,avx512vl")]
unsafe fn merge_avx512<
    const WI: usize,
    const WO: usize,
    const C: u32,
    const BB: u32,
    const SPEC: bool,
    const SI: usize,
    const SO: usize,
>(
    kern: Avx512,
    ins: &Input,
    t: usize,
    region: &mut [u32],
    counts: &mut [u32],
    ovf_out: &mut Overflow,
) -> bool {
    merge_with::<WI, WO, C, BB, SPEC, SI, SO, Avx512>(kern, ins, t, region, counts, ovf_out)
}

#[cfg(test)]
mod tests {
    use super::super::Portable;
    use super::*;

    fn check<const WI: usize, const WO: usize>(c: u32, simd: Avx512, seed: u32) {
        let port = Portable { c };
        let mut s = seed;
        let mut rnd = || {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            s
        };
        for case in 0..200 {
            let a: Vec<u32> = (0..WI).map(|_| rnd()).collect();
            let mut b: Vec<u32> = (0..WI).map(|_| rnd()).collect();
            // Every fourth pair identical, some differing in the last word only.
            match case % 4 {
                0 => b.clone_from(&a),
                1 => {
                    b[..WI - 1].copy_from_slice(&a[..WI - 1]);
                    b[WI - 1] = a[WI - 1] ^ (1 << (case % 32));
                }
                _ => {}
            }
            let want = port.xor_next::<WI, WO>(&a, &b);
            let got = simd.xor_next::<WI, WO>(&a, &b);
            assert_eq!(want.is_none(), got.is_none(), "WI {WI} c {c} case {case}");
            let (Some((yw, x0w)), Some((yg, x0g))) = (want, got) else {
                continue;
            };
            assert_eq!(x0w, x0g);
            assert_eq!(yw[..WO], simd.words(yg)[..WO], "WI {WI} WO {WO} c {c}");
            // `em`'s packed rows: big-endian stores of WO words, at every byte offset,
            // leaving the bytes around them untouched, and loads back with a last-word mask.
            for off in 0..4 {
                let mut bw = vec![0xa5u8; 4 * WO + 8];
                let mut bg = bw.clone();
                port.store_be::<WO>(&mut bw[off..off + 4 * WO], yw);
                simd.store_be::<WO>(&mut bg[off..off + 4 * WO], yg);
                assert_eq!(bw, bg, "store_be WO {WO} off {off}");
                let m = u32::MAX << (case % 32);
                let (lw, lw0) = port.load_be::<WO>(&bw[off..off + 4 * WO], m);
                let (lg, lg0) = simd.load_be::<WO>(&bg[off..off + 4 * WO], m);
                assert_eq!(
                    (lw[..WO].to_vec(), lw0),
                    (simd.words(lg)[..WO].to_vec(), lg0)
                );
                let mut want = yw;
                want[WO - 1] &= m;
                assert_eq!(lw[..WO], want[..WO], "load_be WO {WO}");
                let mut dw = vec![7u32; WO + 2];
                let mut dg = dw.clone();
                port.store_words::<WO>(&mut dw[1..], lw);
                simd.store_words::<WO>(&mut dg[1..], lg);
                assert_eq!(dw, dg, "store_words WO {WO}");
            }
            for tw in WO..8 {
                let mut dw = vec![0xdead_beef_u32; tw + 1];
                let mut dg = dw.clone();
                port.store_slot::<WO>(&mut dw, yw, 77 + tw as u32, tw);
                simd.store_slot::<WO>(&mut dg, yg, 77 + tw as u32, tw);
                assert_eq!(dw, dg, "store WO {WO} tw {tw}");
            }
        }
    }

    /// Layer 0's string split, both kernels, for the bucket widths of (200,9) and (96,5).
    #[test]
    fn string_rows_agree() {
        if Avx512::new(10).is_none() {
            println!("skipped: CPU lacks avx512f/avx512vl (or PROOFKIT_FORCE_PORTABLE is set)");
            return;
        }
        let mut s = 7u32;
        for case in 0..300u32 {
            let bytes: Vec<u8> = (0..48)
                .map(|_| {
                    s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (s >> 24) as u8
                })
                .collect();
            let mask = u32::MAX << (case % 32);
            for bb in [6u32, 10, 20] {
                let (port, simd) = (Portable { c: bb }, Avx512::new(bb).unwrap());
                let (pw, pb) = port.string_row::<6>(&bytes, mask);
                let (sw, sb) = simd.string_row::<6>(&bytes, mask);
                assert_eq!((pw[..6].to_vec(), pb), (simd.words(sw)[..6].to_vec(), sb));
                let (pw, pb) = port.string_row::<3>(&bytes, mask);
                let (sw, sb) = simd.string_row::<3>(&bytes, mask);
                assert_eq!((pw[..3].to_vec(), pb), (simd.words(sw)[..3].to_vec(), sb));
            }
        }
    }

    /// The AVX-512 kernel against the portable one on random and identical rows, for the
    /// widths and digit sizes of the fast path's parameter sets.
    #[test]
    fn kernels_agree() {
        if Avx512::new(20).is_none() {
            println!("skipped: CPU lacks avx512f/avx512vl (or PROOFKIT_FORCE_PORTABLE is set)");
            return;
        }
        for c in [8, 16, 20, 24, 31] {
            let k = Avx512::new(c).expect("checked above");
            check::<1, 1>(c, k, c);
            check::<2, 1>(c, k, c + 1);
            check::<2, 2>(c, k, c + 2);
            check::<3, 3>(c, k, c + 3);
            check::<4, 3>(c, k, c + 4);
            check::<6, 5>(c, k, c + 5);
            check::<6, 6>(c, k, c + 6);
            check::<7, 7>(c, k, c + 7);
            check::<8, 7>(c, k, c + 8);
            check::<8, 8>(c, k, c + 9);
        }
    }
}
