//! IEEE 754 double arithmetic in the four rounding modes of `fprc` (specs.md Table 4.3.1),
//! computed without touching the CPU's rounding-mode register.
//!
//! Why not set MXCSR: the optimiser assumes round-to-nearest for every float operation, so
//! changing the mode under compiled Rust code is undefined behaviour in practice; and the
//! caller's rounding mode must be left as it was (vector `rounding_rule`). Instead each operation
//! is computed in round-to-nearest together with the sign of its exact error (TwoSum for
//! addition, a fused multiply-add residual for multiplication, division and square root), and the
//! result is stepped one ulp when the requested direction differs. RandomX's register ranges
//! exclude NaN and subnormal results (specs.md 5.3), which is what makes the residuals exact.
#![deny(unsafe_code)]

/// `fprc` values.
pub const ROUND_NEAREST: u32 = 0;
pub const ROUND_DOWN: u32 = 1;
pub const ROUND_UP: u32 = 2;
pub const ROUND_ZERO: u32 = 3;

/// Corrects a round-to-nearest result `r` given the sign of `exact - r` (`err`).
#[inline(always)]
fn direct(r: f64, err: f64, mode: u32) -> f64 {
    match mode {
        ROUND_DOWN if err < 0.0 => r.next_down(),
        ROUND_UP if err > 0.0 => r.next_up(),
        ROUND_ZERO if (r > 0.0 && err < 0.0) || (r < 0.0 && err > 0.0) => {
            if r > 0.0 {
                r.next_down()
            } else {
                r.next_up()
            }
        }
        _ => r,
    }
}

/// A finite-inputs result that overflowed to infinity in round-to-nearest: directed modes that
/// round toward zero from that side give the largest finite value instead.
#[inline(always)]
fn overflow(r: f64, mode: u32) -> f64 {
    match mode {
        ROUND_ZERO => f64::MAX.copysign(r),
        ROUND_DOWN if r > 0.0 => f64::MAX,
        ROUND_UP if r < 0.0 => -f64::MAX,
        _ => r,
    }
}

#[inline(always)]
pub fn add(a: f64, b: f64, mode: u32) -> f64 {
    let s = a + b;
    if mode == ROUND_NEAREST {
        return s;
    }
    if !s.is_finite() {
        return if a.is_finite() && b.is_finite() {
            overflow(s, mode)
        } else {
            s
        };
    }
    if s == 0.0 {
        // Exact cancellation: IEEE gives -0 only when rounding toward negative.
        return if mode == ROUND_DOWN && (a != 0.0 || b != 0.0) && a == -b {
            -0.0
        } else {
            s
        };
    }
    // TwoSum: the exact error of s = a + b.
    let bb = s - a;
    let err = (a - (s - bb)) + (b - bb);
    direct(s, err, mode)
}

#[inline(always)]
pub fn sub(a: f64, b: f64, mode: u32) -> f64 {
    add(a, -b, mode)
}

#[inline(always)]
pub fn mul(a: f64, b: f64, mode: u32) -> f64 {
    let p = a * b;
    if mode == ROUND_NEAREST {
        return p;
    }
    if !p.is_finite() {
        return if a.is_finite() && b.is_finite() {
            overflow(p, mode)
        } else {
            p
        };
    }
    if p == 0.0 {
        return p;
    }
    let err = a.mul_add(b, -p);
    direct(p, err, mode)
}

#[inline(always)]
pub fn div(a: f64, b: f64, mode: u32) -> f64 {
    let q = a / b;
    if mode == ROUND_NEAREST {
        return q;
    }
    if !q.is_finite() {
        return if a.is_finite() && b != 0.0 {
            overflow(q, mode)
        } else {
            q
        };
    }
    if q == 0.0 || !a.is_finite() {
        return q;
    }
    // a - q*b, exactly; the true quotient exceeds q when that residual has b's sign.
    let rem = (-q).mul_add(b, a);
    let err = if b > 0.0 { rem } else { -rem };
    direct(q, err, mode)
}

#[inline(always)]
pub fn sqrt(a: f64, mode: u32) -> f64 {
    let r = a.sqrt();
    if mode == ROUND_NEAREST || !r.is_finite() || r == 0.0 {
        return r;
    }
    let rem = (-r).mul_add(r, a);
    direct(r, rem, mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact rational comparison through 128-bit integers for values with small exponents:
    /// checks that the result brackets the exact value the right way.
    #[test]
    fn directed_results_bracket_the_exact_value() {
        let mut x = 0x1234_5678u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let a = (next() as i32) as f64 * 1.000_000_1;
            let b = (next() as i32) as f64 / 3.0 + 0.25;
            for (op, rn) in [(0usize, a + b), (1, a * b), (2, a / b)] {
                let f = |m| match op {
                    0 => add(a, b, m),
                    1 => mul(a, b, m),
                    _ => div(a, b, m),
                };
                let (d, u, z) = (f(ROUND_DOWN), f(ROUND_UP), f(ROUND_ZERO));
                assert_eq!(f(ROUND_NEAREST), rn);
                assert!(d <= rn && rn <= u, "op {op}: {d} {rn} {u}");
                // Down and up differ by at most one ulp and coincide exactly when the result is exact.
                assert!(u == d || u == d.next_up(), "op {op}: {d} {u}");
                assert_eq!(z, if rn >= 0.0 { d } else { u });
            }
            let s = (next() >> 12) as f64;
            let (d, u) = (sqrt(s, ROUND_DOWN), sqrt(s, ROUND_UP));
            assert!(d <= s.sqrt() && s.sqrt() <= u && (u == d || u == d.next_up()));
            assert!(
                d * d <= s || (d * d - s).abs() < 1e-9 * s,
                "sqrt down too big"
            );
        }
    }

    #[test]
    fn known_directed_cases() {
        // 1 + 2^-60 is inexact: down and zero keep 1, up steps to the next double.
        let tiny = 2f64.powi(-60);
        assert_eq!(add(1.0, tiny, ROUND_DOWN), 1.0);
        assert_eq!(add(1.0, tiny, ROUND_UP), 1.0f64.next_up());
        assert_eq!(add(-1.0, -tiny, ROUND_ZERO), -1.0);
        assert_eq!(add(-1.0, -tiny, ROUND_DOWN), (-1.0f64).next_down());
        assert_eq!(div(1.0, 3.0, ROUND_DOWN), 0.333_333_333_333_333_3);
        assert_eq!(div(1.0, 3.0, ROUND_UP), div(1.0, 3.0, ROUND_DOWN).next_up());
        assert_eq!(sqrt(2.0, ROUND_UP), sqrt(2.0, ROUND_DOWN).next_up());
        assert_eq!(sqrt(4.0, ROUND_UP), 2.0);
        // Overflow: toward zero stays finite, toward +inf goes to infinity.
        assert_eq!(mul(f64::MAX, 2.0, ROUND_ZERO), f64::MAX);
        assert_eq!(mul(f64::MAX, 2.0, ROUND_UP), f64::INFINITY);
        assert_eq!(mul(f64::MAX, 2.0, ROUND_DOWN), f64::MAX);
        assert_eq!(mul(f64::INFINITY, 2.0, ROUND_ZERO), f64::INFINITY);
        // Exact cancellation gives -0 only toward negative.
        assert!(sub(5.0, 5.0, ROUND_DOWN).is_sign_negative());
        assert!(sub(5.0, 5.0, ROUND_UP).is_sign_positive());
    }

    /// Where the CPU's own directed rounding can be observed without undefined behaviour (inline
    /// assembly that sets MXCSR, computes and restores it in one block), compare with it.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn equals_hardware_rounding() {
        fn hw(op: u32, a: f64, b: f64, mode: u32) -> f64 {
            let csr: u32 = 0x1F80
                | (match mode {
                    ROUND_DOWN => 1,
                    ROUND_UP => 2,
                    ROUND_ZERO => 3,
                    _ => 0,
                } << 13);
            let mut x = a;
            let mut saved: u32 = 0;
            #[allow(unsafe_code)]
            // SAFETY: the asm saves MXCSR, sets it, does one SSE2 operation on registers and
            // restores MXCSR before returning; it touches only the two stack slots given.
            unsafe {
                match op {
                    0 => {
                        std::arch::asm!("stmxcsr [{s}]", "ldmxcsr [{c}]", "addsd {x}, {y}", "ldmxcsr [{s}]", s = in(reg) &mut saved, c = in(reg) &csr, x = inout(xmm_reg) x, y = in(xmm_reg) b)
                    }
                    1 => {
                        std::arch::asm!("stmxcsr [{s}]", "ldmxcsr [{c}]", "mulsd {x}, {y}", "ldmxcsr [{s}]", s = in(reg) &mut saved, c = in(reg) &csr, x = inout(xmm_reg) x, y = in(xmm_reg) b)
                    }
                    2 => {
                        std::arch::asm!("stmxcsr [{s}]", "ldmxcsr [{c}]", "divsd {x}, {y}", "ldmxcsr [{s}]", s = in(reg) &mut saved, c = in(reg) &csr, x = inout(xmm_reg) x, y = in(xmm_reg) b)
                    }
                    _ => {
                        std::arch::asm!("stmxcsr [{s}]", "ldmxcsr [{c}]", "sqrtsd {x}, {x}", "ldmxcsr [{s}]", s = in(reg) &mut saved, c = in(reg) &csr, x = inout(xmm_reg) x)
                    }
                }
            }
            x
        }
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for i in 0..200_000u64 {
            // A mix of F-like (integer-valued, +-3e14), E-like (positive, wide exponent) and
            // extreme operands.
            let a = match i % 4 {
                0 => (next() as i32) as f64,
                1 => f64::from_bits(
                    (next() & 0x000F_FFFF_FFFF_FFFF) | ((0x300 + (next() % 0x400)) << 52),
                ),
                2 => f64::from_bits(next() & 0x7FEF_FFFF_FFFF_FFFF),
                _ => (next() as i64 >> 16) as f64 * 1.5,
            };
            let b = match i % 3 {
                0 => (next() as i32) as f64 + 0.5,
                1 => f64::from_bits(
                    (next() & 0x000F_FFFF_FFFF_FFFF) | ((0x3F0 + (next() % 32)) << 52),
                ),
                _ => f64::from_bits(
                    (next() & 0x000F_FFFF_FFFF_FFFF) | ((0x380 + (next() % 0x100)) << 52),
                ),
            };
            if a != 0.0 && a.abs() < 1e-290 {
                continue; // outside RandomX's register ranges (no subnormal operands)
            }
            let a_pos = a.abs();
            for mode in 0..4 {
                assert_eq!(
                    add(a, b, mode).to_bits(),
                    hw(0, a, b, mode).to_bits(),
                    "add {a:e} {b:e} mode {mode}"
                );
                assert_eq!(
                    sub(a, b, mode).to_bits(),
                    hw(0, a, -b, mode).to_bits(),
                    "sub {a:e} {b:e} mode {mode}"
                );
                let (m, hm) = (mul(a, b, mode), hw(1, a, b, mode));
                if hm.abs() > 1e-290 {
                    assert_eq!(m.to_bits(), hm.to_bits(), "mul {a:e} {b:e} mode {mode}");
                }
                if b != 0.0 {
                    let (q, hq) = (div(a, b, mode), hw(2, a, b, mode));
                    if hq.abs() > 1e-290 {
                        assert_eq!(q.to_bits(), hq.to_bits(), "div {a:e} {b:e} mode {mode}");
                    }
                }
                // The residual is exact while a is far from the subnormal range (RandomX's E
                // registers stay above ~1e-77).
                if a_pos > 1e-270 {
                    assert_eq!(
                        sqrt(a_pos, mode).to_bits(),
                        hw(3, a_pos, 0.0, mode).to_bits(),
                        "sqrt {a_pos:e} mode {mode}"
                    );
                }
            }
        }
    }
}
