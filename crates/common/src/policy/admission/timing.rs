//! Admission by time: how long a provider pauses after a rate limit, and whether a unit is
//! expected to end before the cutoff.

use crate::stats::percentile;
use crate::utc::EpochMs;

/// Until when a provider pauses after a rate limit: its reset time, or the backoff without one.
pub fn pause_until(reset_epoch_s: Option<i64>, now_ms: EpochMs, backoff_s: u64) -> EpochMs {
    reset_epoch_s
        .map(|s| s.saturating_mul(1000))
        .filter(|&t| t > now_ms)
        .unwrap_or_else(|| {
            now_ms.saturating_add(i64::try_from(backoff_s * 1000).unwrap_or(i64::MAX))
        })
}

/// The expected wall time of one trial of an arm: the p95 of its counted rows so far, or the
/// task's timeout before it has any.
pub fn wall_estimate_s(arm_walls: &[f64], timeout_s: u32) -> f64 {
    percentile(arm_walls, 95.0).unwrap_or(f64::from(timeout_s))
}

/// Whether a unit expected to take `estimate_s` may start now: it must end by the cutoff.
pub fn cutoff_admits(now_ms: EpochMs, cutoff_ms: Option<EpochMs>, estimate_s: f64) -> bool {
    cutoff_ms.is_none_or(|c| now_ms as f64 + estimate_s * 1000.0 <= c as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_last_until_the_reset_or_the_backoff() {
        assert_eq!(pause_until(Some(100), 50_000, 60), 100_000);
        assert_eq!(
            pause_until(Some(10), 50_000, 60),
            110_000,
            "a reset in the past is ignored"
        );
        assert_eq!(pause_until(None, 50_000, 60), 110_000);
    }

    #[test]
    fn cutoff_admission_uses_the_p95_or_the_timeout() {
        let walls: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(wall_estimate_s(&walls, 600), 95.0);
        assert_eq!(wall_estimate_s(&[], 600), 600.0);
        assert!(cutoff_admits(0, None, 1e9));
        assert!(cutoff_admits(0, Some(600_000), 600.0));
        assert!(!cutoff_admits(0, Some(600_000), 1200.0));
    }
}
