//! Rounds: a replica's concurrent operations on one campaign share one transaction.
//!
//! A campaign's operations queue up in this replica, in the shared group-commit
//! [`Queue`](crate::store::group) (its cap, renewal linger and solo operations); a driver task
//! takes a batch, runs each operation through the
//! engine in turn within one [`RedisTx`] (each under a savepoint, so one that fails leaves no
//! write behind and the others go on), and commits the round with one script call. Only then
//! does any operation get its answer, so an answer is never given for writes that did not
//! commit. A conflict (another replica, or a submit, committed first) runs the whole round
//! again, as one operation would run again. Operations of one replica therefore never conflict
//! with each other, and the cost of a commit (its script, its fsync with `appendfsync
//! always`) is shared by every operation of the round.
//!
//! Rounds are chained: while commits are in flight (the script, then the fsync with
//! `appendfsync always`), the next round already runs on the state the last of them will
//! leave (its cache with their writes applied, [`RedisTx::pipelined`]) and its commit is sent
//! at once, behind theirs (at most [`DEPTH`] in flight), so the client builds one round while
//! Redis applies and syncs the one before. Each commit leaves a version no other commit
//! leaves (`<count>:<random>`), and each expects the one its predecessor leaves, so a commit
//! lands only if every one before it landed, with nothing else in between. A commit that
//! landed answers its own operations at once (its predecessors landed too); one that did not
//! is handed back to the driver, which collects every commit behind it (none of them can
//! land) and runs their operations again the usual way, in order. Only rounds that hold no
//! lock and stage nothing are chained; a round with nothing to write is validated by
//! re-reading the version after the commits in flight.
//!
//! A round chained behind commits in flight waits for the campaign's busy lanes that those
//! commits do not hold, up to half of them ([`BusyLanes`], [`round_bounds`]): the lanes then
//! travel as two groups, one in Redis while the other comes back and is built, and each
//! commit (each fsync) carries half the lanes' operations.
//!
//! A round of renewals alone lingers only with no commit in flight. A solo operation (a
//! submit, a retry pass) waits for the commits in flight, then runs alone, from no cache
//! ([`RedisStore::run_alone`]).
//!
//! The driver is a spawned task, so a caller that goes away (a cancelled request) never leaves
//! a round half done; the driver ends when the queue is empty and no commit is in flight. It
//! sleeps on the campaign's [`Notify`], woken by a queued operation or a commit that ended.
//! Between rounds the campaign's [`Cache`] stays here, valid while the stored version is the
//! one its last commit left.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::task::Poll;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use lanes_common::ids::{CampaignId, TrialId};

use super::RedisStore;
use super::ahead;
use super::busy_lanes::BusyLanes;
use super::cache::Cache;
use super::commit::{Committed, send};
use super::conn::hand_over;
use super::stats::Counters;
use super::tx::{RedisTx, Settled};
use crate::store::api::*;
use crate::store::engine;
use crate::store::group::{self, Grouped, LINGER, Mode, Queue, Take};
use crate::store::op::{Answer, CampaignOp};
use crate::store::tx::R;

/// Commits in flight at most. Redis's main thread is the bottleneck under load (each commit's
/// script, then its fsync with `appendfsync always`, one commit after another), and a commit's
/// fixed cost (the fsync, the version and lock checks) is shared by the operations of its
/// round: two in flight let the client build one round while Redis applies the other, in
/// rounds twice as large as four would leave (`docs/PERFORMANCE.md`, "Two commits in
/// flight"). Three, since claims past their window no longer stop the pipeline (`ahead.rs`):
/// the rounds then waited on Redis a third of a run, and a third commit in flight ran 1.12×
/// the cycles per second ("The next window, read ahead"). With rounds waiting for half the
/// busy lanes (`round_bounds`), two are in flight most of the time; the third serves a
/// round that started unbalanced, and more lanes than two batches hold.
const DEPTH: usize = 3;
/// The fewest operations a round chained behind a commit in flight takes ([`round_size`]).
/// A round costs CPU of its own (client and script), so tiny rounds sent as soon as one
/// operation is queued cost more than the latency they save.
const MIN_CHAINED: usize = 16;

/// The size the next round aims at: half the operations queued or in commits in flight,
/// rounded down (so the other half always makes the next round), at least [`MIN_CHAINED`]
/// and at most a batch. Busy lanes then split into two rounds of about the same size, one in
/// Redis while the other is built. Without this split, a round that started alone with what
/// happened to be queued (a few operations) left the rest to one large round behind it, and
/// the small one's answers were too few for the next chained round: the pipeline fell back
/// to one commit at a time.
fn round_size(queued: usize, in_flight: usize) -> usize {
    MIN_CHAINED
        .max((queued + in_flight) / 2)
        .min(group::MAX_BATCH)
}

/// The least and the most operations the next round takes. Alone (`chained_behind` is
/// `None`) it starts with whatever is queued. Behind commits in flight it waits for the busy
/// lanes (`Some`, [`BusyLanes`]) that those commits do not hold, so the lanes travel as two
/// groups, one in Redis while the other is built. With three groups (one in Redis, one
/// built, one on its way back), every commit took a third of the lanes, and each cost a
/// whole fsync with `appendfsync always`. When the busy lanes do not say (no more of them
/// than the operations in flight, say renewals), it waits for [`round_size`]. Either way it
/// leaves operations past that size to the next round only when they make a round of their
/// own (at least [`MIN_CHAINED`]).
fn round_bounds(queued: usize, in_flight: usize, chained_behind: Option<usize>) -> (usize, usize) {
    let size = round_size(queued, in_flight);
    let min = match chained_behind {
        None => 1,
        Some(lanes) if lanes > in_flight => (lanes - in_flight)
            .min(lanes.div_ceil(2))
            .clamp(MIN_CHAINED, group::MAX_BATCH),
        Some(_) => size,
    };
    let take = min.max(size);
    let max = if queued >= take + MIN_CHAINED {
        take
    } else {
        group::MAX_BATCH
    };
    (min, max)
}

/// Rounds run again after conflicts before the operations fail as unavailable.
const MAX_ATTEMPTS: u32 = 100;

/// A queued operation and where its answer goes.
type Pending = group::Pending<CampaignOp, Instant>;

/// One campaign's queue in this replica.
#[derive(Default)]
struct CampaignQueue {
    queue: Queue<CampaignOp, Instant>,
    /// A driver is running rounds.
    running: bool,
    /// The cache between rounds (taken by the running round).
    cache: Option<Cache>,
    /// The lanes whose claims it queued lately.
    lanes: BusyLanes,
    /// Wakes the running driver: an operation was queued, or a commit ended.
    wake: Arc<Notify>,
}

/// Every campaign's queue.
#[derive(Default)]
pub(crate) struct Rounds {
    queues: Mutex<HashMap<CampaignId, CampaignQueue>>,
}

impl Rounds {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CampaignId, CampaignQueue>> {
        // A panic while holding this lock leaves plain data behind: keep going with it.
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A copy of an error for each operation of a round that failed as a whole.
fn copy_err(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(s) => StoreError::Unavailable(s.clone()),
        StoreError::Corrupt(s) => StoreError::Corrupt(s.clone()),
        StoreError::NotDurable(s) => StoreError::NotDurable(s.clone()),
        StoreError::UnknownCampaign(c) => StoreError::UnknownCampaign(c.clone()),
        other => StoreError::Backend(other.to_string()),
    }
}

fn deliver(batch: Vec<Pending>, answers: Vec<R<Answer>>) {
    for (p, a) in batch.into_iter().zip(answers) {
        p.answer(a);
    }
}

/// What a round starts from.
enum Base {
    /// The campaign's cache between rounds, if any.
    Cache(Option<Cache>),
    /// The state the commits in flight will leave, and when the last of them is over.
    InFlight(Cache, Settled),
}

/// A round whose commit is in flight.
struct InFlight {
    /// The task that sends the commit and, if it lands, answers the round's operations.
    commit: JoinHandle<Landing>,
    /// Tells chained transactions when the commit is over.
    settled: Settled,
    /// The state it leaves (taken by the round chained on it).
    next: Option<Cache>,
    /// The operations of its round.
    ops: usize,
}

/// How a commit in flight ended.
enum Landing {
    /// It landed; its operations are answered.
    Landed,
    /// Another transaction came first: its operations, to run again.
    Rerun(Vec<Pending>),
    /// Its outcome is unknown: its operations got the error.
    Failed,
}

/// The commit task's end (a task that panicked dropped its operations' reply channels, which
/// then fail).
fn landing(joined: Result<Landing, tokio::task::JoinError>) -> Landing {
    joined.unwrap_or(Landing::Failed)
}

fn fail_all(batch: Vec<Pending>, e: &StoreError) {
    for p in batch {
        p.answer(Err(copy_err(e)));
    }
}

impl RedisStore {
    /// Queues `op` for its campaign's next round and waits for its answer.
    pub(crate) async fn in_round(&self, op: CampaignOp) -> R<Answer> {
        Counters::bump(&self.counters.ops);
        let (answer, start) = {
            let mut queues = self.rounds.lock();
            // The campaign's id is copied only for a queue not made yet, or a driver to start.
            if !queues.contains_key(op.campaign()) {
                queues.insert(op.campaign().clone(), CampaignQueue::default());
            }
            let q = queues.get_mut(op.campaign()).expect("just made");
            let start = (!std::mem::replace(&mut q.running, true)).then(|| op.campaign().clone());
            let now = Instant::now();
            if let CampaignOp::Claim { req, .. } = &op {
                q.lanes.claimed((&req.host, &req.lane), now);
            }
            let answer = q.queue.push(op, now);
            q.wake.notify_one();
            (answer, start)
        };
        if let Some(c) = start {
            tokio::spawn(self.clone().drive(c));
        }
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Backend(
                "the campaign's round ended without an answer".into(),
            ))
        })
    }

    /// Runs rounds until the campaign's queue is empty and no commit is in flight. A round
    /// runs on the state the commits in flight will leave, and its own commit is sent at
    /// once, behind theirs (at most [`DEPTH`] in flight).
    async fn drive(self, c: CampaignId) {
        let mut chain: VecDeque<InFlight> = VecDeque::new();
        let (mut cache, wake) = {
            let mut queues = self.rounds.lock();
            let q = queues.entry(c.clone()).or_default();
            (q.cache.take(), q.wake.clone())
        };
        loop {
            // Land what is over, oldest first, without waiting.
            while chain.front().is_some_and(|f| f.commit.is_finished()) {
                self.land_front(&c, &mut chain, &mut cache).await;
            }
            let take = {
                let mut queues = self.rounds.lock();
                let q = queues.entry(c.clone()).or_default();
                if q.queue.is_empty() && chain.is_empty() {
                    q.running = false;
                    q.cache = cache;
                    return;
                }
                // Renewals linger only with no commit in flight; behind commits in flight,
                // a round waits for its share of the operations (`round_bounds`).
                let linger = match chain.is_empty() {
                    true => self.opts.renew_linger.unwrap_or(LINGER),
                    false => std::time::Duration::ZERO,
                };
                let in_flight = chain.iter().map(|f| f.ops).sum();
                let now = Instant::now();
                let (min, max) = match chain.is_empty() {
                    true => round_bounds(q.queue.len(), in_flight, None),
                    false => round_bounds(q.queue.len(), in_flight, Some(q.lanes.count(now))),
                };
                q.queue.take(now, linger, min, max)
            };
            let batch = match take {
                Take::Batch(batch) => batch,
                Take::Linger(until) => {
                    // Woken by a new operation, or the linger is over: look again.
                    tokio::select! {
                        () = wake.notified() => {}
                        () = tokio::time::sleep_until(until) => {}
                    }
                    continue;
                }
                Take::Wait => {
                    // Commits in flight and few operations: wait for the oldest commit, or
                    // for more operations.
                    let front = &mut chain.front_mut().expect("a commit in flight").commit;
                    // std's clock: the real wait, even under a test's paused tokio clock.
                    let waited = std::time::Instant::now();
                    let ended = tokio::select! {
                        joined = front => Some(landing(joined)),
                        () = wake.notified() => None,
                    };
                    Counters::add_since(&self.counters.round_wait_us, waited);
                    if let Some(ended) = ended {
                        let f = chain.pop_front().expect("the commit that ended");
                        self.landed(&c, f, ended, &mut chain, &mut cache).await;
                    }
                    continue;
                }
            };
            if batch[0].op.mode() == Mode::Solo {
                // A submit or a retry pass: after everything in flight, alone, with no
                // cache (it may write a great deal, and it changes the version).
                self.land_all(&c, &mut chain, &mut cache).await;
                for p in batch {
                    let answer = self.run_alone(&p.op).await;
                    p.answer(answer);
                }
                cache = None;
                continue;
            }
            if chain.len() >= DEPTH {
                self.land_front(&c, &mut chain, &mut cache).await;
            }
            let base = match chain.back_mut() {
                // A cache grown too large is trimmed by `begin`, which only a cache no
                // commit in flight builds on may be: land everything first.
                Some(last) if last.next.as_ref().is_some_and(Cache::is_large) => {
                    self.land_all(&c, &mut chain, &mut cache).await;
                    Base::Cache(cache.take())
                }
                Some(last) => match last.next.take() {
                    Some(next) => Base::InFlight(next, last.settled.clone()),
                    None => Base::Cache(None),
                },
                None => Base::Cache(cache.take()),
            };
            self.start(&c, batch, base, &mut chain, &mut cache, &wake)
                .await;
        }
    }

    /// Runs `batch`'s operations in `tx` in turn, each under a savepoint, after reading ahead
    /// what its tokens need. Fails as a whole only if the read-ahead fails.
    async fn run_batch(&self, tx: &mut RedisTx, batch: &[Pending]) -> R<Vec<R<Answer>>> {
        let tokens: Vec<(TrialId, u32)> = batch.iter().flat_map(|p| p.op.tokens()).collect();
        if !tokens.is_empty() {
            // The meta first: the read-ahead names blocks from the spec.
            crate::store::tx::Tx::meta(tx).await?;
            tx.prefetch_tokens(&tokens).await?;
        }
        let mut answers = Vec::with_capacity(batch.len());
        for p in batch {
            let sp = tx.savepoint();
            let answer = engine::run(tx, &p.op).await;
            if answer.is_err() {
                tx.rollback(sp);
            }
            answers.push(answer);
        }
        Ok(answers)
    }

    /// Runs a round optimistically on `base` and sends its commit behind those in flight
    /// (pushed on `chain`), when it can: a round that writes nothing, has bulk parts to stage,
    /// or cannot start, ends here, after the commits in flight landed.
    async fn start(
        &self,
        c: &CampaignId,
        batch: Vec<Pending>,
        base: Base,
        chain: &mut VecDeque<InFlight>,
        cache: &mut Option<Cache>,
        wake: &Arc<Notify>,
    ) {
        let mut tx = match base {
            Base::Cache(cache) => match self.begin(c.as_str(), false, cache).await {
                Ok(tx) => tx,
                Err(e) => {
                    self.land_all(c, chain, &mut None).await;
                    return fail_all(batch, &e);
                }
            },
            Base::InFlight(next, settled) => {
                Counters::bump(&self.counters.attempts);
                RedisTx::pipelined(
                    self.conn.clone(),
                    super::keys::Keys::new(c.as_str()),
                    next,
                    settled,
                )
            }
        };
        let answers = match self.run_batch(&mut tx, &batch).await {
            Ok(a) => a,
            Err(e) => {
                self.land_all(c, chain, cache).await;
                return fail_all(batch, &e);
            }
        };
        let prepared = match tx.prepare(&self.script) {
            Ok(Some(p)) if p.wrote => p,
            // Nothing to write, or bulk parts to stage first: after what is in flight.
            Ok(_) => {
                self.land_all(c, chain, cache).await;
                if !tx.has_writes() {
                    // The answers hold if the reads saw one version.
                    match self.replicated_version(c.as_str()).await {
                        Ok(v) if v == tx.version() => {
                            deliver(batch, answers);
                            *cache = Some(tx.into_cache(v, false));
                        }
                        Ok(_) => {
                            self.conflicted();
                            *cache = self.round(c, batch, None).await;
                        }
                        Err(e) => fail_all(batch, &e),
                    }
                } else {
                    *cache = self.round(c, batch, None).await;
                }
                return;
            }
            Err(e) => {
                self.land_all(c, chain, cache).await;
                return fail_all(batch, &e);
            }
        };
        let leaves = prepared.leaves.clone();
        let events = tx.take_events();
        let ops = batch.len();
        let (settle, settled) = watch::channel(None);
        let (store, wake, campaign) = (self.clone(), wake.clone(), c.clone());
        let mut send = Box::pin(async move {
            let mut conn = store.conn.clone();
            let answer = send(&mut conn, &store.script, &prepared).await;
            let _ = settle.send(Some(matches!(answer, Ok(Committed::Yes { .. }))));
            let landing = match answer {
                // Every commit before it landed too (it expects the version they leave):
                // its answers can go out now, whatever the driver is doing.
                Ok(Committed::Yes { .. }) => {
                    Counters::bump(&store.counters.writes);
                    store.observer.committed(&campaign, &events);
                    deliver(batch, answers);
                    Landing::Landed
                }
                Ok(Committed::Conflict) => {
                    store.conflicted();
                    Landing::Rerun(batch)
                }
                Err(e) => {
                    fail_all(batch, &e);
                    Landing::Failed
                }
            };
            wake.notify_one();
            landing
        });
        // One poll hands the request to the connection, so commits reach Redis in the order
        // they were built (one that overtook its predecessor would only conflict); the rest
        // runs in a task of its own.
        let commit = match hand_over(&mut send).await {
            Poll::Ready(landing) => tokio::spawn(async move { landing }),
            Poll::Pending => tokio::spawn(send),
        };
        let mut next = tx.into_cache(leaves, false);
        ahead::ask(&self.conn, c.as_str(), &mut next).await;
        chain.push_back(InFlight {
            commit,
            settled,
            next: Some(next),
            ops,
        });
    }

    /// Lands every commit in flight, in order.
    async fn land_all(
        &self,
        c: &CampaignId,
        chain: &mut VecDeque<InFlight>,
        cache: &mut Option<Cache>,
    ) {
        while !chain.is_empty() {
            self.land_front(c, chain, cache).await;
        }
    }

    /// Waits for the oldest commit in flight, then [`Self::landed`].
    async fn land_front(
        &self,
        c: &CampaignId,
        chain: &mut VecDeque<InFlight>,
        cache: &mut Option<Cache>,
    ) {
        if let Some(mut f) = chain.pop_front() {
            let ended = self.join(&mut f).await;
            self.landed(c, f, ended, chain, cache).await;
        }
    }

    /// Waits for `f`'s commit to end, counted as a round's wait on Redis (std's clock: the
    /// real wait, even under a test's paused tokio clock).
    async fn join(&self, f: &mut InFlight) -> Landing {
        let waited = std::time::Instant::now();
        let ended = landing((&mut f.commit).await);
        Counters::add_since(&self.counters.round_wait_us, waited);
        ended
    }

    /// After the oldest commit in flight, `f`, ended: if it landed, the cache is the state it
    /// left when nothing was chained on it. If it did not, every commit behind it is waited
    /// for too (none of them can land: each expects the version of one that did not), and
    /// the operations handed back run again in one round the usual way (with the lock after
    /// a conflict), in order.
    async fn landed(
        &self,
        c: &CampaignId,
        mut f: InFlight,
        ended: Landing,
        chain: &mut VecDeque<InFlight>,
        cache: &mut Option<Cache>,
    ) {
        let mut rerun = match ended {
            Landing::Landed => {
                if chain.is_empty() {
                    *cache = f.next.take();
                }
                return;
            }
            Landing::Rerun(batch) => batch,
            Landing::Failed => Vec::new(),
        };
        while let Some(mut later) = chain.pop_front() {
            match self.join(&mut later).await {
                Landing::Rerun(batch) => rerun.extend(batch),
                Landing::Landed | Landing::Failed => {}
            }
        }
        *cache = match rerun.is_empty() {
            true => None,
            false => self.round(c, rerun, None).await,
        };
    }

    /// Runs one operation in a transaction of its own, from no cache, again after each
    /// conflict (with the campaign lock): a submit or a retry pass, which may write a great
    /// deal and stage bulk parts.
    pub(crate) async fn run_alone(&self, op: &CampaignOp) -> R<Answer> {
        let c = op.campaign();
        let mut attempt = 0u32;
        loop {
            let mut tx = self.begin(c.as_str(), attempt > 0, None).await?;
            let answer = match engine::run(&mut tx, op).await {
                Ok(answer) => answer,
                Err(e) => {
                    self.abort(tx).await;
                    return Err(e);
                }
            };
            match tx.commit(&self.script).await? {
                Committed::Yes { wrote, .. } => {
                    if wrote {
                        Counters::bump(&self.counters.writes);
                    }
                    self.observer.committed(c, &tx.take_events());
                    return Ok(answer);
                }
                Committed::Conflict => {
                    self.conflicted();
                    attempt += 1;
                    if attempt >= MAX_ATTEMPTS {
                        return Err(StoreError::Unavailable(format!(
                            "campaign {c}: {attempt} commit conflicts in a row"
                        )));
                    }
                }
            }
        }
    }

    /// Runs one round synchronously: every operation of `batch` in one transaction, then one
    /// commit, then the answers; after a conflict again, with the campaign lock. Returns the
    /// cache for the next round.
    async fn round(
        &self,
        c: &CampaignId,
        batch: Vec<Pending>,
        mut cache: Option<Cache>,
    ) -> Option<Cache> {
        let mut attempt = 0u32;
        loop {
            let mut tx = match self.begin(c.as_str(), attempt > 0, cache.take()).await {
                Ok(tx) => tx,
                Err(e) => {
                    fail_all(batch, &e);
                    return None;
                }
            };
            let answers = match self.run_batch(&mut tx, &batch).await {
                Ok(a) => a,
                Err(e) => {
                    self.abort(tx).await;
                    fail_all(batch, &e);
                    return None;
                }
            };
            let outcome = if !tx.has_writes() && !tx.locked() {
                // Nothing to write: the answers hold if the reads saw one version.
                self.replicated_version(c.as_str())
                    .await
                    .map(|v| match v == tx.version() {
                        true => Committed::Yes {
                            wrote: false,
                            staged: false,
                            version: v,
                        },
                        false => Committed::Conflict,
                    })
            } else {
                tx.commit(&self.script).await
            };
            match outcome {
                Ok(Committed::Yes {
                    wrote,
                    staged,
                    version,
                }) => {
                    if wrote {
                        Counters::bump(&self.counters.writes);
                    }
                    self.observer.committed(c, &tx.take_events());
                    deliver(batch, answers);
                    return Some(tx.into_cache(version, staged));
                }
                Ok(Committed::Conflict) => {
                    self.conflicted();
                    attempt += 1;
                    if attempt >= MAX_ATTEMPTS {
                        let e = StoreError::Unavailable(format!(
                            "campaign {c}: {attempt} commit conflicts in a row"
                        ));
                        fail_all(batch, &e);
                        return None;
                    }
                }
                Err(e) => {
                    fail_all(batch, &e);
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_lanes_split_into_two_rounds_of_about_the_same_size() {
        // 64 operations queued, nothing in flight: a round of half of them starts at once,
        // and the other half is a chained round of its own.
        assert_eq!(round_bounds(64, 0, None), (1, 32));
        assert_eq!(round_bounds(32, 32, Some(0)), (32, group::MAX_BATCH));
        // Behind a round of 32, the answers of the other one come back a few at a time: the
        // next round waits until it holds about half of what is queued or in flight.
        assert_eq!(round_bounds(5, 32, Some(0)).0, 18);
        assert_eq!(round_bounds(28, 32, Some(0)).0, 30);
        // An odd total: the half left behind is enough for the chained round.
        assert_eq!(round_bounds(33, 0, None), (1, 16));
        assert_eq!(round_bounds(17, 16, Some(0)).0, 16);
        // More lanes, larger rounds.
        assert_eq!(round_bounds(256, 0, None), (1, 128));
        // Never more than a batch, so a chained round never waits for more than it may take.
        assert_eq!(
            round_bounds(300, 256, Some(0)),
            (group::MAX_BATCH, group::MAX_BATCH)
        );
        assert_eq!(round_bounds(600, 0, None), (1, group::MAX_BATCH));
    }

    #[test]
    fn few_operations_are_not_split_and_a_chained_round_is_never_tiny() {
        // Alone, a few operations go at once, all of them.
        assert_eq!(round_bounds(3, 0, None), (1, group::MAX_BATCH));
        // 40 queued: 20 and 20 would each be worth a round.
        assert_eq!(round_bounds(40, 0, None), (1, 20));
        // 20 queued: 16 and 4 would not; all 20 go.
        assert_eq!(round_bounds(20, 0, None), (1, group::MAX_BATCH));
        // Behind a commit in flight, never fewer than MIN_CHAINED.
        assert_eq!(round_bounds(2, 4, Some(0)).0, MIN_CHAINED);
    }

    #[test]
    fn behind_a_commit_a_round_waits_for_the_busy_lanes_that_commit_does_not_hold() {
        // 64 busy lanes, 21 of them in a commit in flight: the round waits for half the
        // lanes, and takes what is queued by then.
        assert_eq!(round_bounds(21, 21, Some(64)), (32, group::MAX_BATCH));
        // 43 in flight: the other 21 are the next round, on their own.
        assert_eq!(round_bounds(21, 43, Some(64)), (21, group::MAX_BATCH));
        // A round of one lane went alone, and the other 63 came back behind it: they split
        // into two halves, so the lanes end up as two groups of about the same size.
        assert_eq!(round_bounds(63, 1, Some(64)), (32, 32));
        // Never a tiny round, and never more than a batch: 1,000 lanes travel in rounds of
        // a batch each.
        assert_eq!(round_bounds(4, 60, Some(64)).0, MIN_CHAINED);
        assert_eq!(
            round_bounds(700, 256, Some(1000)),
            (group::MAX_BATCH, group::MAX_BATCH)
        );
        // Busy lanes that do not say more than what is in flight: half of what is queued or
        // in flight, as without them.
        assert_eq!(
            round_bounds(40, 40, Some(30)),
            round_bounds(40, 40, Some(0))
        );
        assert_eq!(round_bounds(40, 40, Some(30)).0, 40);
    }
}
