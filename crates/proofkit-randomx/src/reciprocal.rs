//! The reciprocal of IMUL_RCP (specs.md 5.2.6): `rcp = 2^x / divisor` for the largest integer `x`
//! with `rcp < 2^64`. Defined for divisors that are neither 0 nor a power of two.
#![deny(unsafe_code)]

/// True for 0 and powers of two: the divisors IMUL_RCP treats as a no-op.
pub const fn is_zero_or_power_of_2(x: u32) -> bool {
    x & x.wrapping_sub(1) == 0
}

/// `floor(2^x / divisor)` with `x = 63 + bits(divisor)`, the largest power that keeps the
/// quotient below 2^64 for a divisor that is not a power of two.
pub const fn reciprocal(divisor: u32) -> u64 {
    assert!(
        !is_zero_or_power_of_2(divisor),
        "reciprocal of 0 or a power of two"
    );
    let bits = 32 - divisor.leading_zeros();
    ((1u128 << (63 + bits)) / divisor as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_exponent_below_2_pow_64() {
        for d in [3u32, 5, 7, 10, 12345, 0x8000_0001, u32::MAX] {
            let r = reciprocal(d) as u128;
            let x = 63 + (32 - d.leading_zeros());
            assert_eq!(r, (1u128 << x) / d as u128);
            assert!(
                (1u128 << (x + 1)) / d as u128 >= 1u128 << 64,
                "x is the largest for {d}"
            );
        }
    }

    #[test]
    fn zero_and_powers_of_two_are_excluded() {
        assert!(is_zero_or_power_of_2(0));
        assert!(is_zero_or_power_of_2(1));
        assert!(is_zero_or_power_of_2(1 << 31));
        assert!(!is_zero_or_power_of_2(3));
    }
}
