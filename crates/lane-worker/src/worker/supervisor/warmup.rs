//! A worker's first wave: its lanes ask for work together, once every spare driver is up.
//!
//! Each lane starts a spare driver process before it first asks for work. With hundreds of
//! lanes, those starts take the host's CPU for a second or more; a lane that asked as soon as
//! its own spare was up held its first lease while the others' processes were still
//! starting, and its admission queued behind them. So the supervisor holds every work
//! request until each lane it started is warm, or until [`WARMUP_MAX`] has passed (a spare
//! whose start hangs must not keep the worker idle).

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

/// The longest the first wave waits for the slowest spare.
pub(super) const WARMUP_MAX: Duration = Duration::from_secs(5);

/// The lanes whose spare driver is not up yet, and when the wait ends regardless.
#[derive(Debug)]
pub(super) struct Warmup {
    waiting: BTreeSet<String>,
    until: Instant,
}

impl Warmup {
    pub(super) fn new(lanes: impl IntoIterator<Item = String>, now: Instant) -> Self {
        Self {
            waiting: lanes.into_iter().collect(),
            until: now + WARMUP_MAX,
        }
    }

    /// `lane` is warm. True when the wait is over: every lane is warm, or the time is up.
    pub(super) fn warmed(&mut self, lane: &str, now: Instant) -> bool {
        self.waiting.remove(lane);
        self.over(now)
    }

    /// Every lane is warm, or the time is up.
    pub(super) fn over(&self, now: Instant) -> bool {
        self.waiting.is_empty() || now >= self.until
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lanes(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("w-{i}")).collect()
    }

    #[test]
    fn the_wait_ends_with_the_last_lane_warm() {
        let now = Instant::now();
        let mut w = Warmup::new(lanes(3), now);
        assert!(!w.over(now));
        assert!(!w.warmed("w-2", now));
        // A lane warm twice (restarted) counts once.
        assert!(!w.warmed("w-2", now));
        assert!(!w.warmed("w-0", now));
        assert!(w.warmed("w-1", now));
    }

    #[test]
    fn the_wait_ends_when_its_time_is_up() {
        let now = Instant::now();
        let mut w = Warmup::new(lanes(2), now);
        assert!(!w.warmed("w-0", now + WARMUP_MAX - Duration::from_millis(1)));
        assert!(w.over(now + WARMUP_MAX));
        assert!(w.warmed("w-0", now + WARMUP_MAX));
    }

    #[test]
    fn a_lane_unknown_to_the_wait_changes_nothing() {
        let now = Instant::now();
        let mut w = Warmup::new(lanes(1), now);
        assert!(!w.warmed("other", now));
        assert!(w.warmed("w-0", now));
    }

    #[test]
    fn no_lanes_means_no_wait() {
        let now = Instant::now();
        assert!(Warmup::new(Vec::new(), now).over(now));
    }
}
