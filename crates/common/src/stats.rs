//! Small statistics over numbers: order statistics for the policy (medians for block
//! estimates and budget reservations, p95 for cutoff-aware admission), and the rates, means,
//! proportion intervals and paired tests of the campaign report.

use serde::{Deserialize, Serialize};

/// The normal quantile of a two-sided 95% interval.
pub const Z95: f64 = 1.959964;

/// The median of `values` (mean of the middle two for an even count); `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The nearest-rank percentile `p` (0..=100) of `values`; `None` when empty.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// `num / den`; `None` when `den` is 0.
pub fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

/// A mean over values added one at a time, without keeping them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mean {
    sum: f64,
    n: u64,
}

impl Mean {
    pub fn add(&mut self, x: f64) {
        self.sum += x;
        self.n += 1;
    }

    /// The mean of the values added; `None` when there are none.
    pub fn get(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum / self.n as f64)
    }
}

/// A closed interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
}

/// The Wilson score interval of `successes / n` with normal quantile `z`; `None` when `n` is 0
/// (or `successes > n`).
pub fn wilson_interval(successes: u64, n: u64, z: f64) -> Option<Interval> {
    if n == 0 || successes > n {
        return None;
    }
    let nf = n as f64;
    let p = successes as f64 / nf;
    let z2 = z * z;
    let denom = 1.0 + z2 / nf;
    let center = (p + z2 / (2.0 * nf)) / denom;
    let half = z / denom * (p * (1.0 - p) / nf + z2 / (4.0 * nf * nf)).sqrt();
    let lo = if successes == 0 {
        0.0
    } else {
        (center - half).max(0.0)
    };
    let hi = if successes == n {
        1.0
    } else {
        (center + half).min(1.0)
    };
    Some(Interval { lo, hi })
}

/// The exact two-sided McNemar p-value for `b` and `c` discordant pairs:
/// `min(1, 2 * P(X <= min(b, c)))` with `X ~ Bin(b + c, 1/2)`; 1.0 when `b + c = 0`.
pub fn mcnemar_exact_p(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    // ln P(X = k) = ln C(n, k) - n ln 2, then the lower tail relative to it, walking down: the
    // terms shrink from k to 0 (k <= n/2), so nothing overflows for a large n.
    let ln_choose: f64 = (1..=k).map(|i| ((n - k + i) as f64 / i as f64).ln()).sum();
    let ln_top = ln_choose - n as f64 * std::f64::consts::LN_2;
    let mut term = 1.0f64;
    let mut tail = 1.0f64;
    for i in (1..=k).rev() {
        // P(X = i - 1) / P(X = i) = i / (n - i + 1).
        term *= i as f64 / (n - i + 1) as f64;
        tail += term;
        if term < tail * 1e-17 {
            break;
        }
    }
    (2.0 * (ln_top.exp() * tail)).min(1.0)
}

/// Newcombe's (1998, method 10) score interval (normal quantile `z`) for the difference of paired
/// proportions `p_a - p_b`, from the 2x2 table of pairs (`both`, `a_only`, `b_only`,
/// `neither`): Wilson intervals of both margins, combined with the continuity-corrected
/// estimate of their correlation. `None` without pairs.
pub fn newcombe_paired_diff(
    both: u64,
    a_only: u64,
    b_only: u64,
    neither: u64,
    z: f64,
) -> Option<Interval> {
    let n = both + a_only + b_only + neither;
    let w1 = wilson_interval(both + a_only, n, z)?;
    let w2 = wilson_interval(both + b_only, n, z)?;
    let (a, b, c, d) = (both as f64, a_only as f64, b_only as f64, neither as f64);
    let nf = n as f64;
    let p1 = (a + b) / nf;
    let p2 = (a + c) / nf;
    let margins = (a + b) * (c + d) * (a + c) * (b + d);
    let phi = if margins == 0.0 {
        0.0
    } else {
        let cross = a * d - b * c;
        if cross > nf / 2.0 {
            (cross - nf / 2.0) / margins.sqrt()
        } else if cross >= 0.0 {
            0.0
        } else {
            cross / margins.sqrt()
        }
    };
    let (dl1, du1) = (p1 - w1.lo, w1.hi - p1);
    let (dl2, du2) = (p2 - w2.lo, w2.hi - p2);
    let diff = p1 - p2;
    let lo = diff
        - (dl1 * dl1 - 2.0 * phi * dl1 * du2 + du2 * du2)
            .max(0.0)
            .sqrt();
    let hi = diff
        + (dl2 * dl2 - 2.0 * phi * dl2 * du1 + du1 * du1)
            .max(0.0)
            .sqrt();
    Some(Interval {
        lo: lo.max(-1.0),
        hi: hi.min(1.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0]), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 95.0), Some(95.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&[7.0], 95.0), Some(7.0));
        assert_eq!(percentile(&[1.0, 2.0], 95.0), Some(2.0));
    }

    #[test]
    fn wilson_edges() {
        assert_eq!(wilson_interval(0, 0, Z95), None);
        assert_eq!(wilson_interval(3, 2, Z95), None);
        let i = wilson_interval(10, 10, Z95).unwrap();
        assert_eq!(i.hi, 1.0);
        assert!((i.lo - 0.7225).abs() < 1e-4);
    }

    #[test]
    fn mcnemar_large_n_does_not_underflow() {
        // Bin(3000, 1/2): P(X <= 1500) is a bit over 1/2, so p is 1.
        assert_eq!(mcnemar_exact_p(1500, 1500), 1.0);
        let p = mcnemar_exact_p(1400, 1600);
        assert!(p > 0.0 && p < 0.001, "{p}");
        assert_eq!(mcnemar_exact_p(1400, 1600), mcnemar_exact_p(1600, 1400));
    }

    #[test]
    fn ratios_and_means() {
        assert_eq!(ratio(1, 0), None);
        assert_eq!(ratio(1, 4), Some(0.25));
        let mut m = Mean::default();
        assert_eq!(m.get(), None);
        m.add(1.0);
        m.add(2.0);
        assert_eq!(m.get(), Some(1.5));
    }
}
