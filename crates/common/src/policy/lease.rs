//! Lease timing: how long a claimed trial may take before the store takes it back, whatever
//! its lane says. Assignments carry these as durations; lanes measure with monotonic clocks.

use crate::utc::EpochMs;

/// Boot and verified reset, per trial.
pub const STARTUP_S: u64 = 600;
/// The official evaluator, per trial.
pub const EVALUATE_S: u64 = 300;
/// Slack for publication and clock skew.
pub const MARGIN_S: u64 = 60;

/// The hard deadline of each trial of a unit claimed at `now_ms`, in slot order: trial `k`'s
/// includes the trials before it in its run group, since the lane runs them back to back.
pub fn hard_deadlines_ms(now_ms: EpochMs, timeouts_s: &[u32]) -> Vec<EpochMs> {
    let mut total_s = MARGIN_S;
    timeouts_s
        .iter()
        .map(|&t| {
            total_s += STARTUP_S + u64::from(t) + EVALUATE_S;
            now_ms.saturating_add(i64::try_from(total_s * 1000).unwrap_or(i64::MAX))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_slots_include_earlier_trials() {
        let d = hard_deadlines_ms(0, &[100, 200]);
        assert_eq!(d[0], (60 + 600 + 100 + 300) * 1000);
        assert_eq!(d[1], d[0] + (600 + 200 + 300) * 1000);
    }
}
