//! Group commit, the one queue both backends batch their writes through. Operations wait here
//! as values ([`Op`](super::op::Op)); whoever commits takes a batch, runs it in one
//! transaction, commits once and only then answers each operation, so concurrent callers
//! share a commit (a fsync costs the same for one operation as for a hundred). The embedded
//! store's writer thread takes from one queue for the whole file; the Redis store keeps one
//! per campaign, whose rounds it chains behind commits in flight.
//!
//! What a batch takes ([`Queue::take`]):
//! - at most [`MAX_BATCH`] operations, which bounds how long an answer waits behind the ones
//!   ahead of it, or fewer if the caller says so (the Redis store splits busy lanes into two
//!   rounds; renewals alone are not split);
//! - a **solo** operation (a submit, a retry pass, a delete) alone: it may write a great deal,
//!   straight into a transaction of its own, and an operation queued after it waits for the
//!   next batch;
//! - renewals alone **linger**: a batch of nothing but renewals waits up to [`LINGER`] from
//!   the oldest one's arrival for more operations. Heartbeats arrive spread over each second,
//!   and without it each paid a commit of its own; any other operation ends the wait.

use std::collections::VecDeque;
use std::ops::Add;
use std::time::Duration;

use tokio::sync::oneshot;

use super::api::StoreError;
use super::op::{Answer, CampaignOp, Op};

/// The most operations one batch takes.
pub(crate) const MAX_BATCH: usize = 256;

/// The longest a batch of renewals alone waits for more operations.
pub(crate) const LINGER: Duration = Duration::from_millis(100);

/// How an operation shares batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// With whatever else is queued.
    Batched,
    /// Batched, and a batch of nothing else lingers for more (renewals).
    Lingering,
    /// Alone in its batch.
    Solo,
}

/// An operation that can wait in a [`Queue`].
pub(crate) trait Grouped {
    fn mode(&self) -> Mode;
}

impl Grouped for CampaignOp {
    fn mode(&self) -> Mode {
        match self {
            Self::Renew { .. } => Mode::Lingering,
            Self::Submit { .. } | Self::Requeue { .. } => Mode::Solo,
            _ => Mode::Batched,
        }
    }
}

impl Grouped for Op {
    fn mode(&self) -> Mode {
        match self {
            Self::Campaign(op) => op.mode(),
            Self::Delete { .. } => Mode::Solo,
            _ => Mode::Batched,
        }
    }
}

/// A queued operation and where its answer goes. `I` is the clock's instant (the Redis store
/// runs on tokio's, whose tests may pause it; the embedded writer thread on the system's).
pub(crate) struct Pending<O, I> {
    pub(crate) op: O,
    reply: oneshot::Sender<Result<Answer, StoreError>>,
    queued: I,
}

impl<O, I> Pending<O, I> {
    /// Answers the caller (who may have gone away: the operation stands either way).
    pub(crate) fn answer(self, answer: Result<Answer, StoreError>) {
        let _ = self.reply.send(answer);
    }
}

/// What a batch takes now.
pub(crate) enum Take<O, I> {
    /// Run these, in this order, in one transaction.
    Batch(Vec<Pending<O, I>>),
    /// Renewals alone: look again when more arrive, or at this instant.
    Linger(I),
    /// Nothing to take yet (empty, or fewer than asked for).
    Wait,
}

/// Operations waiting for a batch, in arrival order.
pub(crate) struct Queue<O, I> {
    pending: VecDeque<Pending<O, I>>,
}

impl<O, I> Default for Queue<O, I> {
    fn default() -> Self {
        Self {
            pending: VecDeque::new(),
        }
    }
}

/// The receiving end of a queued operation's answer.
pub(crate) type Reply = oneshot::Receiver<Result<Answer, StoreError>>;

impl<O: Grouped, I: Copy + Ord + Add<Duration, Output = I>> Queue<O, I> {
    /// Queues `op`, arrived at `now`; its answer comes on the receiver.
    pub(crate) fn push(&mut self, op: O, now: I) -> Reply {
        let (reply, answer) = oneshot::channel();
        self.pending.push_back(Pending {
            op,
            reply,
            queued: now,
        });
        answer
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Operations queued.
    pub(crate) fn len(&self) -> usize {
        self.pending.len()
    }

    /// The next batch at `now`, of at most `max` operations (and [`MAX_BATCH`]; renewals alone
    /// are never split below it, so they keep sharing one commit). `linger` is how long
    /// renewals alone may wait (zero: never); a batch of fewer than `min` operations (or of
    /// fewer than it may take) waits; a solo one never does.
    pub(crate) fn take(&mut self, now: I, linger: Duration, min: usize, max: usize) -> Take<O, I> {
        let Some(first) = self.pending.front() else {
            return Take::Wait;
        };
        if first.op.mode() == Mode::Solo {
            return Take::Batch(self.pending.drain(..1).collect());
        }
        let renewals_only = self.pending.iter().all(|p| p.op.mode() == Mode::Lingering);
        let cap = match renewals_only {
            true => MAX_BATCH,
            false => max.clamp(1, MAX_BATCH),
        };
        let n = self
            .pending
            .iter()
            .take(cap)
            .take_while(|p| p.op.mode() != Mode::Solo)
            .count();
        if renewals_only && n < MAX_BATCH && !linger.is_zero() {
            let oldest = self.pending.iter().map(|p| p.queued).min().unwrap_or(now);
            let until = oldest + linger;
            if until > now {
                return Take::Linger(until);
            }
        }
        if n < min.clamp(1, cap) {
            return Take::Wait;
        }
        Take::Batch(self.pending.drain(..n).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_common::ids::CampaignId;
    use lanes_common::state::StopMode;
    use std::time::Instant;

    fn c() -> CampaignId {
        CampaignId::new("c").unwrap()
    }
    fn renew() -> Op {
        CampaignOp::Renew {
            campaign: c(),
            tokens: Vec::new(),
            now: 0,
        }
        .into()
    }
    fn stop() -> Op {
        CampaignOp::Stop {
            campaign: c(),
            mode: StopMode::Drain,
            now: 0,
        }
        .into()
    }
    fn delete() -> Op {
        Op::Delete { campaign: c() }
    }
    fn kinds(t: Take<Op, Instant>) -> Vec<Mode> {
        match t {
            Take::Batch(b) => b.iter().map(|p| p.op.mode()).collect(),
            Take::Linger(_) => panic!("lingered"),
            Take::Wait => panic!("waited"),
        }
    }

    #[test]
    fn a_batch_takes_at_most_the_cap_and_the_rest_waits_for_the_next() {
        let now = Instant::now();
        let mut q = Queue::default();
        for _ in 0..MAX_BATCH + 3 {
            drop(q.push(stop(), now));
        }
        assert_eq!(kinds(q.take(now, LINGER, 1, MAX_BATCH)).len(), MAX_BATCH);
        assert_eq!(kinds(q.take(now, LINGER, 1, MAX_BATCH)).len(), 3);
        assert!(matches!(q.take(now, LINGER, 1, MAX_BATCH), Take::Wait));
    }

    #[test]
    fn a_solo_operation_runs_alone_and_ends_the_batch_before_it() {
        let now = Instant::now();
        let mut q = Queue::default();
        drop(q.push(stop(), now));
        drop(q.push(delete(), now));
        drop(q.push(stop(), now));
        assert_eq!(
            kinds(q.take(now, LINGER, 1, MAX_BATCH)),
            vec![Mode::Batched]
        );
        // Alone even when more are asked for.
        assert_eq!(kinds(q.take(now, LINGER, 16, MAX_BATCH)), vec![Mode::Solo]);
        assert_eq!(
            kinds(q.take(now, LINGER, 1, MAX_BATCH)),
            vec![Mode::Batched]
        );
    }

    #[test]
    fn renewals_alone_linger_from_the_oldest_until_another_operation_arrives() {
        let t0 = Instant::now();
        let mut q = Queue::default();
        drop(q.push(renew(), t0));
        drop(q.push(renew(), t0 + Duration::from_millis(30)));
        let later = t0 + Duration::from_millis(50);
        match q.take(later, LINGER, 1, MAX_BATCH) {
            Take::Linger(until) => assert_eq!(until, t0 + LINGER),
            _ => panic!("renewals alone should linger"),
        }
        // The linger is over: they go.
        assert_eq!(kinds(q.take(t0 + LINGER, LINGER, 1, MAX_BATCH)).len(), 2);
        // Another operation ends the wait at once; no linger means none either.
        drop(q.push(renew(), t0));
        drop(q.push(stop(), t0));
        assert_eq!(kinds(q.take(t0, LINGER, 1, MAX_BATCH)).len(), 2);
        drop(q.push(renew(), t0));
        assert_eq!(kinds(q.take(t0, Duration::ZERO, 1, MAX_BATCH)).len(), 1);
    }

    #[test]
    fn a_batch_of_fewer_than_asked_for_waits() {
        let now = Instant::now();
        let mut q = Queue::default();
        drop(q.push(stop(), now));
        assert!(matches!(q.take(now, LINGER, 2, MAX_BATCH), Take::Wait));
        drop(q.push(stop(), now));
        assert_eq!(kinds(q.take(now, LINGER, 2, MAX_BATCH)).len(), 2);
    }

    #[test]
    fn a_batch_takes_at_most_max_but_renewals_alone_are_not_split() {
        let now = Instant::now();
        let mut q = Queue::default();
        for _ in 0..5 {
            drop(q.push(stop(), now));
        }
        assert_eq!(kinds(q.take(now, LINGER, 1, 3)).len(), 3);
        assert_eq!(q.len(), 2);
        // A least above what it may take waits for no more than it may take.
        assert_eq!(kinds(q.take(now, LINGER, 9, 2)).len(), 2);
        // Renewals alone linger whatever `max` says, then go as one batch.
        for _ in 0..5 {
            drop(q.push(renew(), now));
        }
        assert!(matches!(q.take(now, LINGER, 1, 3), Take::Linger(_)));
        assert_eq!(kinds(q.take(now, Duration::ZERO, 1, 3)).len(), 5);
    }

    #[test]
    fn a_full_batch_of_renewals_does_not_linger() {
        let now = Instant::now();
        let mut q = Queue::default();
        for _ in 0..MAX_BATCH {
            drop(q.push(renew(), now));
        }
        assert_eq!(kinds(q.take(now, LINGER, 1, MAX_BATCH)).len(), MAX_BATCH);
    }
}
