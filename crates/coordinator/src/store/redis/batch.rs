//! Rounds: a replica's concurrent operations on one campaign share one transaction.
//!
//! Claims, renewals, completions, releases, forfeits, reaps and stops of a campaign queue up
//! in this replica; a driver task takes everything queued, runs each operation through the
//! engine in turn within one [`RedisTx`] (each under a savepoint, so one that fails leaves no
//! write behind and the others go on), and commits the round with one script call. Only then
//! does any operation get its answer, so an answer is never given for writes that did not
//! commit. A conflict (another replica, or a submit, committed first) runs the whole round
//! again, as one operation would run again. Operations of one replica therefore never conflict
//! with each other, and the cost of a commit (its script, its fsync with `appendfsync
//! always`) is shared by every operation of the round.
//!
//! Rounds are pipelined: while one round's commit is in flight (the script, then the fsync
//! with `appendfsync always`), the next round already runs on the state that commit will
//! leave (its cache with the commit's writes applied, [`RedisTx::pipelined`]); its own commit
//! expects the version that commit leaves, so it can only land after it, and it is sent (and
//! its operations answered) only once that commit landed. If that commit does not land, the
//! next round is dropped unseen and both run again the usual way. Only rounds that hold no
//! lock and stage nothing are pipelined; a round with nothing to write is validated by
//! re-reading the version.
//!
//! The driver is a spawned task, so a caller that goes away (a cancelled request) never leaves
//! a round half done; the driver ends when the queue is empty and no commit is in flight.
//! Between rounds the campaign's [`Cache`] stays here, valid while the stored version is the
//! one its last commit left.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::{oneshot, watch};

use lanes_common::ids::{CampaignId, Token, TrialId};
use lanes_common::row::{Outcome, Phase};
use lanes_common::state::{CampaignState, StopMode};
use lanes_common::utc::EpochMs;

use super::RedisStore;
use super::cache::Cache;
use super::commit::{Committed, send};
use super::stats::Counters;
use super::tx::{RedisTx, Settled};
use crate::store::api::*;
use crate::store::engine;
use crate::store::tx::R;

/// Operations one round takes at most; the rest wait for the next round.
const MAX_ROUND: usize = 256;
/// Rounds run again after conflicts before the operations fail as unavailable.
const MAX_ATTEMPTS: u32 = 100;

/// An operation that can share a round.
pub(crate) enum Op {
    Claim(ClaimRequest),
    Renew(Vec<(Token, Phase)>),
    Forfeit(String, Vec<Token>),
    Complete(Box<Outcome>),
    Release(Release),
    Reap,
    Stop(StopMode),
}

/// Its answer.
pub(crate) enum Answer {
    Claim(ClaimOutcome),
    Renew(Vec<(Token, RenewState)>),
    Forfeit(Vec<Token>),
    Ack(CompleteAck),
    Reap(ReapReport),
    Stop(CampaignState),
}

impl Op {
    /// The tokens whose records the operation reads, for the round's read-ahead.
    fn tokens(&self) -> Vec<(TrialId, u32)> {
        let of = |t: &Token| (t.trial_id.clone(), t.attempt);
        match self {
            Op::Renew(tokens) => tokens.iter().map(|(t, _)| of(t)).collect(),
            Op::Forfeit(_, tokens) => tokens.iter().map(of).collect(),
            Op::Complete(o) => vec![of(&o.token)],
            Op::Release(r) => vec![of(&r.token)],
            Op::Claim(_) | Op::Reap | Op::Stop(_) => Vec::new(),
        }
    }

    async fn run(&self, tx: &mut RedisTx, c: &CampaignId, now: EpochMs) -> R<Answer> {
        Ok(match self {
            Op::Claim(req) => Answer::Claim(engine::claim(tx, c, req, now).await?),
            Op::Renew(tokens) => Answer::Renew(engine::renew(tx, c, tokens, now).await?),
            Op::Forfeit(worker, tokens) => {
                Answer::Forfeit(engine::forfeit(tx, c, worker, tokens, now).await?)
            }
            Op::Complete(o) => Answer::Ack(engine::complete(tx, c, Outcome::clone(o), now).await?),
            Op::Release(r) => Answer::Ack(engine::release(tx, c, r, now).await?),
            Op::Reap => Answer::Reap(engine::reap(tx, c, now).await?),
            Op::Stop(mode) => Answer::Stop(engine::stop(tx, c, *mode, now).await?),
        })
    }
}

/// A queued operation and where its answer goes.
struct Pending {
    op: Op,
    now: EpochMs,
    reply: oneshot::Sender<R<Answer>>,
}

/// One campaign's queue in this replica.
#[derive(Default)]
struct CampaignQueue {
    pending: Vec<Pending>,
    /// A driver is running rounds.
    running: bool,
    /// The cache between rounds (taken by the running round).
    cache: Option<Cache>,
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
        let _ = p.reply.send(a);
    }
}

/// What a round starts from.
enum Base {
    /// The campaign's cache between rounds, if any.
    Cache(Option<Cache>),
    /// The state a round whose commit is in flight will leave.
    InFlight(InFlight),
}

/// A round whose commit is in flight.
struct InFlight {
    batch: Vec<Pending>,
    answers: Vec<R<Answer>>,
    commit: tokio::task::JoinHandle<R<Committed>>,
    /// Tells pipelined transactions when the commit is over.
    settled: Settled,
    /// The version the commit leaves when it lands.
    expected: String,
    /// The state it leaves (taken by the round pipelined on it).
    next: Option<Cache>,
}

/// What the driver does after a round.
enum Next {
    /// Nothing in flight; the cache for the next round.
    Idle(Option<Cache>),
    InFlight(InFlight),
}

/// How an in-flight commit ended.
enum Landed {
    /// Its operations are answered; the state it left.
    Committed(Box<Cache>),
    /// Its operations ran again (or failed): nothing is known of the state.
    Failed,
}

fn fail_all(batch: Vec<Pending>, e: &StoreError) {
    for p in batch {
        let _ = p.reply.send(Err(copy_err(e)));
    }
}

impl RedisStore {
    /// Queues `op` for the campaign's next round and waits for its answer.
    pub(crate) async fn in_round(&self, c: &CampaignId, op: Op, now: EpochMs) -> R<Answer> {
        Counters::bump(&self.counters.ops);
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut queues = self.rounds.lock();
            let q = queues.entry(c.clone()).or_default();
            q.pending.push(Pending { op, now, reply });
            !std::mem::replace(&mut q.running, true)
        };
        if start {
            tokio::spawn(self.clone().drive(c.clone()));
        }
        answer.await.unwrap_or_else(|_| {
            Err(StoreError::Backend(
                "the campaign's round ended without an answer".into(),
            ))
        })
    }

    /// Runs rounds until the campaign's queue is empty. While one round's commit is in
    /// flight, the next round already runs on the state that commit will leave; it commits
    /// (and answers) only after that commit landed, and runs again from scratch if it did not.
    async fn drive(self, c: CampaignId) {
        let mut inflight: Option<InFlight> = None;
        loop {
            let (batch, cache) = {
                let mut queues = self.rounds.lock();
                let q = queues.entry(c.clone()).or_default();
                if q.pending.is_empty() && inflight.is_none() {
                    q.running = false;
                    return;
                }
                let n = q.pending.len().min(MAX_ROUND);
                (q.pending.drain(..n).collect::<Vec<_>>(), q.cache.take())
            };
            let next = match inflight.take() {
                None => self.start(&c, batch, Base::Cache(cache)).await,
                // Only the commit in flight is left: land it.
                Some(prev) if batch.is_empty() => match self.land(&c, prev).await {
                    Landed::Committed(cache) => Next::Idle(Some(*cache)),
                    Landed::Failed => Next::Idle(None),
                },
                // A cache grown too large is dropped, as `begin` drops it: land first.
                Some(prev) if prev.next.as_ref().is_some_and(Cache::is_large) => {
                    let _ = self.land(&c, prev).await;
                    self.start(&c, batch, Base::Cache(None)).await
                }
                Some(prev) => self.start(&c, batch, Base::InFlight(prev)).await,
            };
            match next {
                Next::Idle(cache) => self.rounds.lock().entry(c.clone()).or_default().cache = cache,
                Next::InFlight(f) => inflight = Some(f),
            }
        }
    }

    /// Runs `batch`'s operations in `tx` in turn, each under a savepoint, after reading ahead
    /// what its tokens need. Fails as a whole only if the read-ahead fails.
    async fn run_batch(
        &self,
        tx: &mut RedisTx,
        c: &CampaignId,
        batch: &[Pending],
    ) -> R<Vec<R<Answer>>> {
        let tokens: Vec<(TrialId, u32)> = batch.iter().flat_map(|p| p.op.tokens()).collect();
        if !tokens.is_empty() {
            // The meta first: the read-ahead names blocks from the spec.
            crate::store::tx::Tx::meta(tx).await?;
            tx.prefetch_tokens(&tokens).await?;
        }
        let mut answers = Vec::with_capacity(batch.len());
        for p in batch {
            let sp = tx.savepoint();
            let answer = p.op.run(tx, c, p.now).await;
            if answer.is_err() {
                tx.rollback(sp);
            }
            answers.push(answer);
        }
        Ok(answers)
    }

    /// Runs a round optimistically on `base`, and sends its commit without waiting for it
    /// when it can (no lock held, nothing to stage); anything else (a conflict, a failed
    /// commit in flight below it, a round with nothing to write) ends synchronously.
    async fn start(&self, c: &CampaignId, batch: Vec<Pending>, base: Base) -> Next {
        let (mut tx, prev) = match base {
            Base::Cache(cache) => match self.begin(c.as_str(), false, cache).await {
                Ok(tx) => (tx, None),
                Err(e) => {
                    fail_all(batch, &e);
                    return Next::Idle(None);
                }
            },
            Base::InFlight(mut prev) => {
                Counters::bump(&self.counters.attempts);
                let cache = prev.next.take().expect("an in-flight round's next cache");
                let tx = RedisTx::pipelined(
                    self.conn.clone(),
                    super::keys::Keys::new(c.as_str()),
                    cache,
                    prev.settled.clone(),
                );
                (tx, Some(prev))
            }
        };
        let answers = self.run_batch(&mut tx, c, &batch).await;
        if let Some(prev) = prev
            && let Landed::Failed = self.land(c, prev).await
        {
            // This round read the state of a commit that did not land.
            return Next::Idle(self.round(c, batch, None).await);
        }
        let answers = match answers {
            Ok(a) => a,
            Err(e) => {
                fail_all(batch, &e);
                return Next::Idle(None);
            }
        };
        if !tx.has_writes() {
            // Nothing to write: the answers hold if the reads saw one version.
            return match self.read_version(c.as_str()).await {
                Ok(v) if v == tx.version() => {
                    deliver(batch, answers);
                    Next::Idle(Some(tx.into_cache(v, false)))
                }
                Ok(_) => {
                    Counters::bump(&self.counters.conflicts);
                    Next::Idle(self.round(c, batch, None).await)
                }
                Err(e) => {
                    fail_all(batch, &e);
                    Next::Idle(None)
                }
            };
        }
        let prepared = match tx.prepare(&self.script) {
            Ok(Some(p)) => p,
            // Bulk parts to stage first: commit the usual way.
            Ok(None) => return Next::Idle(self.round(c, batch, None).await),
            Err(e) => {
                fail_all(batch, &e);
                return Next::Idle(None);
            }
        };
        let Some(expected) = tx
            .version()
            .parse::<u64>()
            .ok()
            .map(|v| (v + 1).to_string())
        else {
            return Next::Idle(self.round(c, batch, None).await);
        };
        let (settle, settled) = watch::channel(None);
        let (mut conn, script) = (self.conn.clone(), self.script.clone());
        let commit = tokio::spawn(async move {
            let answer = send(&mut conn, &script, &prepared).await;
            let _ = settle.send(Some(matches!(answer, Ok(Committed::Yes { .. }))));
            answer
        });
        Next::InFlight(InFlight {
            batch,
            answers,
            commit,
            settled,
            next: Some(tx.into_cache(expected.clone(), false)),
            expected,
        })
    }

    /// Waits for a round's commit: answers its operations if it landed, runs them again (the
    /// usual way, with the lock after a conflict) if another transaction came first.
    async fn land(&self, c: &CampaignId, mut f: InFlight) -> Landed {
        let answer = match (&mut f.commit).await {
            Ok(answer) => answer,
            Err(e) => Err(StoreError::Backend(format!("a commit task failed: {e}"))),
        };
        match answer {
            Ok(Committed::Yes { version, .. }) if version == f.expected => {
                Counters::bump(&self.counters.writes);
                self.after_commit(true).await;
                deliver(f.batch, f.answers);
                Landed::Committed(Box::new(
                    f.next.take().unwrap_or_else(|| Cache::at(version)),
                ))
            }
            Ok(Committed::Yes { .. }) | Ok(Committed::Conflict) => {
                Counters::bump(&self.counters.conflicts);
                self.round(c, f.batch, None).await;
                Landed::Failed
            }
            Err(e) => {
                fail_all(f.batch, &e);
                Landed::Failed
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
            let answers = match self.run_batch(&mut tx, c, &batch).await {
                Ok(a) => a,
                Err(e) => {
                    self.abort(tx).await;
                    fail_all(batch, &e);
                    return None;
                }
            };
            let outcome = if !tx.has_writes() && !tx.locked() {
                // Nothing to write: the answers hold if the reads saw one version.
                self.read_version(c.as_str())
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
                    self.after_commit(wrote).await;
                    deliver(batch, answers);
                    return Some(tx.into_cache(version, staged));
                }
                Ok(Committed::Conflict) => {
                    Counters::bump(&self.counters.conflicts);
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
