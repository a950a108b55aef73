//! Counters of what the Redis backend sends, how often its commits conflict, how long they take
//! and how long rounds wait on them, so the cost of an operation can be measured (the store
//! bench prints them) rather than guessed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// A snapshot of a store's counters since it connected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedisStats {
    /// Requests that waited for a reply: a command, or a whole pipeline.
    pub round_trips: u64,
    /// Commands sent, a pipeline counting each of its commands.
    pub commands: u64,
    /// Store operations run through a transaction.
    pub ops: u64,
    /// Transactions begun (an operation runs one more per conflict).
    pub attempts: u64,
    /// Commits refused because another operation committed first, or held the lock.
    pub conflicts: u64,
    /// Times an operation had to wait for the campaign lock.
    pub lock_waits: u64,
    /// Commit scripts that wrote something.
    pub writes: u64,
    /// Commit scripts sent or attempted (a conflict's too).
    pub commits: u64,
    /// Their time from send to reply, summed, in µs: Redis's queue, the script, the fsync of
    /// `appendfsync always`, with `--redis-wait` the replicas' confirmation, and the wait for
    /// this process to read the reply.
    pub commit_us: u64,
    /// Time campaigns' round drivers waited for commits in flight to end, summed, in µs: too
    /// few operations queued to be worth a round of their own behind them, the most commits
    /// in flight already, or an operation that must run after them. Over a run's wall time,
    /// for one campaign, the share of it its rounds waited on Redis.
    pub round_wait_us: u64,
    /// Caches grown past their limit and trimmed to their windows' read-ahead.
    pub trims: u64,
    /// Windows of ready queues read ahead and taken in by the claim past the last one.
    pub windows_ahead: u64,
    /// Times the master changed (a Sentinel failover followed).
    pub failovers: u64,
    /// Acknowledged writes whose `WAIT` saw fewer replicas than `--redis-wait` asks.
    pub wait_timeouts: u64,
}

impl RedisStats {
    /// The counters of `self` minus those of an earlier snapshot.
    pub fn since(&self, earlier: &RedisStats) -> RedisStats {
        RedisStats {
            round_trips: self.round_trips - earlier.round_trips,
            commands: self.commands - earlier.commands,
            ops: self.ops - earlier.ops,
            attempts: self.attempts - earlier.attempts,
            conflicts: self.conflicts - earlier.conflicts,
            lock_waits: self.lock_waits - earlier.lock_waits,
            writes: self.writes - earlier.writes,
            commits: self.commits - earlier.commits,
            commit_us: self.commit_us - earlier.commit_us,
            round_wait_us: self.round_wait_us - earlier.round_wait_us,
            trims: self.trims - earlier.trims,
            windows_ahead: self.windows_ahead - earlier.windows_ahead,
            failovers: self.failovers - earlier.failovers,
            wait_timeouts: self.wait_timeouts - earlier.wait_timeouts,
        }
    }
}

/// The live counters, shared by every clone of a store and its connections.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) round_trips: AtomicU64,
    pub(crate) commands: AtomicU64,
    pub(crate) ops: AtomicU64,
    pub(crate) attempts: AtomicU64,
    pub(crate) conflicts: AtomicU64,
    pub(crate) lock_waits: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) commits: AtomicU64,
    pub(crate) commit_us: AtomicU64,
    pub(crate) round_wait_us: AtomicU64,
    pub(crate) trims: AtomicU64,
    pub(crate) windows_ahead: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds the time since `since` to `counter`, in µs.
    pub(crate) fn add_since(counter: &AtomicU64, since: Instant) {
        let us = since.elapsed().as_micros() as u64;
        counter.fetch_add(us, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RedisStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RedisStats {
            round_trips: get(&self.round_trips),
            commands: get(&self.commands),
            ops: get(&self.ops),
            attempts: get(&self.attempts),
            conflicts: get(&self.conflicts),
            lock_waits: get(&self.lock_waits),
            writes: get(&self.writes),
            commits: get(&self.commits),
            commit_us: get(&self.commit_us),
            round_wait_us: get(&self.round_wait_us),
            trims: get(&self.trims),
            windows_ahead: get(&self.windows_ahead),
            failovers: 0,
            wait_timeouts: 0,
        }
    }
}
