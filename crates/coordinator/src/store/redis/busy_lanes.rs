//! How many lanes a campaign's rounds serve in this replica: the distinct lanes whose claims
//! it queued in the last second or so.
//!
//! A lane that claims, completes and claims again without a pause (no-op trials, a bench) has
//! one operation outstanding at a time, so under load this is how many operations the rounds
//! can expect between two commits: a round chained behind a commit in flight waits for the
//! lanes that commit does not hold, up to half of them (`batch.rs`, `round_bounds`). Lanes at
//! work on long trials count too, though they send nothing meanwhile: then a chained round
//! only waits for the commit before it, and the rounds go one commit at a time, as they would
//! under that load anyway. Lanes are counted in windows of [`WINDOW`], this one and the one
//! before, so a lane that stopped claiming counts for one to three windows more. Lanes are
//! kept as hashes: counting costs no allocation per claim, and a collision only undercounts.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hash};
use std::time::Duration;

use tokio::time::Instant;

/// How long a lane counts after its last claim, at least (at most three times as long).
const WINDOW: Duration = Duration::from_secs(1);

/// The lanes seen claiming lately.
#[derive(Debug)]
pub(crate) struct BusyLanes {
    /// The lanes seen since `since`.
    current: HashSet<u64>,
    /// How many were seen in the window before.
    before: usize,
    /// When the current window began.
    since: Instant,
    hasher: foldhash::fast::FixedState,
}

impl Default for BusyLanes {
    fn default() -> Self {
        Self {
            current: HashSet::new(),
            before: 0,
            since: Instant::now(),
            hasher: foldhash::fast::FixedState::default(),
        }
    }
}

impl BusyLanes {
    /// Notes a claim by `lane` (its host and name) at `now`.
    pub(crate) fn claimed(&mut self, lane: impl Hash, now: Instant) {
        self.roll(now);
        self.current.insert(self.hasher.hash_one(lane));
    }

    /// How many distinct lanes claimed in this window or the one before.
    pub(crate) fn count(&mut self, now: Instant) -> usize {
        self.roll(now);
        self.before.max(self.current.len())
    }

    /// Starts a new window once the current one is over.
    fn roll(&mut self, now: Instant) {
        let age = now.saturating_duration_since(self.since);
        if age < WINDOW {
            return;
        }
        self.before = match age < 2 * WINDOW {
            true => self.current.len(),
            false => 0,
        };
        self.current.clear();
        self.since = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_lanes_are_counted_and_forgotten_two_windows_after_they_stop() {
        let mut lanes = BusyLanes::default();
        let start = lanes.since;
        for _ in 0..3 {
            for l in ["l0", "l1", "l2"] {
                lanes.claimed(l, start);
            }
        }
        assert_eq!(lanes.count(start), 3);
        // The next window: one lane goes on; the three still count from the window before.
        let next = start + WINDOW;
        lanes.claimed("l0", next);
        assert_eq!(lanes.count(next), 3);
        // The window after: only the one that went on.
        let after = next + WINDOW;
        assert_eq!(lanes.count(after), 1);
        // Idle for two windows: none.
        assert_eq!(lanes.count(after + 2 * WINDOW), 0);
    }
}
