//! The engine's transaction over Redis: reads go to this transaction's own pending writes,
//! then to the campaign's [`Cache`] (committed state at the transaction's version), then to
//! the server; writes are buffered in [`Writes`] and applied by one `commit.lua` call, which
//! refuses them if the version moved.
//!
//! Reads that the engine is about to make are fetched ahead in one pipeline: the tasks, trial
//! records and blocks of the candidates a ready-queue scan returns, and everything a batch of
//! completions will look up ([`read_ahead`]). A claim past its window of a ready queue first
//! takes in the next one, read while rounds ran (`ahead.rs`). A trial's lease and token
//! records live in its record since layout 6 ([`fold`]).

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;
use serde::de::DeserializeOwned;

use lanes_common::ids::{TaskId, TrialId};
use lanes_common::row::Row;
use lanes_common::schedule::{BlockName, arm_index, from_position_key};
use lanes_common::spec::Task;
use lanes_common::utc::EpochMs;

use super::cache::{Cache, Known, Score, ZKnown};
use super::commit::{Committed, Prepared, commit, prepare};
use super::conn::Conn;
use super::hot_record::{Record, decode, encode};
use super::keys::Keys;
use super::redis_err;
use super::stats::Counters;
use super::writes::{Savepoint, Writes};
use crate::store::api::{Event, StoreError};
use crate::store::model::{BlockState, Lease, Meta, Queue, TokenRecord, TrialState, Unit};
use crate::store::tx::{R, Tx};

mod fold;
mod read_ahead;
mod trim;

pub(crate) use trim::trimmed;

/// The fewest members a sorted-set scan fetches, so later scans of the round (and of the next
/// rounds, through the cache) find them there.
const MIN_SCAN: usize = 256;
/// The most a scan fetches to grow its window ([`scan_size`]); a scan asked for more still
/// fetches twice what it was asked for.
const MAX_SCAN: usize = 2048;
/// The members a cache may know in all its sorted sets for a scan to grow its window: a
/// campaign whose claims scan many queues (one per provider, say) keeps windows of
/// [`MIN_SCAN`], whose read-ahead the cache has room for.
const MAX_SCANNED: usize = 2 * MAX_SCAN;

/// How many members a scan fetches: twice those it was asked for (and those this transaction
/// removed from the set), and at least the last scan of the same set while the cache lives
/// (`last`), doubled if the cache would then know at most [`MAX_SCANNED`] members in all
/// (`known` now), from [`MIN_SCAN`] up to [`MAX_SCAN`]. A claim past its window of a ready
/// queue scans so only when no next window was read ahead (`ahead.rs`, which sizes windows
/// the same way): such a scan stops the campaign's pipeline (it waits for the commits in
/// flight, then three round trips: the scan, the tasks, the trials). A busy campaign's window
/// grows 256, 512, 1,024, 2,048 while its cache lives. A cache grown too large is trimmed and
/// keeps its windows ([`trimmed`]); one made afresh (a conflict, a new replica) starts small
/// again.
pub(crate) fn scan_size(limit: usize, removed: usize, last: Option<usize>, known: usize) -> usize {
    let grown = match last {
        Some(n) if known.saturating_add(n.saturating_mul(2)) <= MAX_SCANNED => n.saturating_mul(2),
        Some(n) => n,
        None => MIN_SCAN,
    };
    limit
        .saturating_add(removed)
        .saturating_mul(2)
        .max(grown.clamp(MIN_SCAN, MAX_SCAN))
        .min(i64::MAX as usize)
}

/// The trials of the unit at `key` (a position key) of a queue of `unit`s, whose task is
/// `task`: the one trial, or every trial of the run group.
fn unit_trials<'a>(
    meta: &'a Meta,
    unit: Unit,
    key: u64,
    task: &'a TaskId,
) -> impl Iterator<Item = TrialId> + 'a {
    let (_, tp, run, slot) = from_position_key(key);
    let n = meta.spec.arms.len() as u32;
    let slots = match unit {
        Unit::Trial => slot..slot + 1,
        Unit::Group => 0..n,
    };
    slots
        .filter_map(move |s| meta.spec.arms.get(arm_index(tp, run, s, n) as usize))
        .map(move |arm| TrialId::from_parts(task, run, &arm.id))
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

fn json<T: Serialize>(v: &T) -> R<Vec<u8>> {
    json_in(v, Vec::new())
}

/// `v` as JSON appended to `out`. Rows and events pass a buffer sized for them (serde_json
/// starts at 128 bytes and doubles); they live only until the commit packs them.
fn json_in<T: Serialize>(v: &T, mut out: Vec<u8>) -> R<Vec<u8>> {
    serde_json::to_writer(&mut out, v).map_err(|e| StoreError::Backend(e.to_string()))?;
    Ok(out)
}

fn parse<T: DeserializeOwned>(b: &[u8]) -> R<T> {
    serde_json::from_slice(b).map_err(corrupt)
}

/// A hot record as stored (binary since layout 5, JSON before).
fn record<T: Record>(b: &[u8]) -> R<T> {
    decode(b).map_err(corrupt)
}

/// A stored trial id, checked as it is read back.
fn trial_id(s: String) -> R<TrialId> {
    TrialId::new(s).map_err(corrupt)
}

fn token_field(trial: &str, attempt: u32) -> String {
    // By hand, not with `format!`: a round builds one per token it reads ahead.
    let mut n = itoa::Buffer::new();
    let n = n.format(attempt);
    let mut f = String::with_capacity(trial.len() + 1 + n.len());
    f.push_str(trial);
    f.push('#');
    f.push_str(n);
    f
}

/// A previous round's commit in flight: `None` while it runs, then whether it committed.
pub(crate) type Settled = tokio::sync::watch::Receiver<Option<bool>>;

pub(crate) struct RedisTx {
    conn: Conn,
    keys: Keys,
    lock_token: String,
    /// Committed state at the version this transaction starts at (read, or its cache's); its
    /// commit checks that version.
    cache: Cache,
    writes: Writes,
    /// Set when `cache` is the state a commit still in flight will leave (a pipelined round):
    /// reads the cache cannot answer wait for that commit first, except hash fields, which
    /// it answers for every field that commit writes (a field it does not know is one that
    /// commit leaves alone, the same before and after it).
    pending: Option<Settled>,
    /// The trials' records read so far, decoded (what `writes` and `cache` hold for them).
    records: fold::Records,
}

impl RedisTx {
    pub(crate) fn new(conn: Conn, keys: Keys, cache: Cache, lock_token: String) -> Self {
        Self {
            conn,
            keys,
            lock_token,
            cache,
            writes: Writes::default(),
            pending: None,
            records: fold::Records::default(),
        }
    }

    /// A transaction on the state a commit in flight will leave, `cache` (of the version it
    /// will leave): its own commit checks that version, so it lands only after that commit.
    pub(crate) fn pipelined(conn: Conn, keys: Keys, cache: Cache, pending: Settled) -> Self {
        let mut tx = Self::new(conn, keys, cache, String::new());
        tx.pending = Some(pending);
        tx
    }

    /// Waits for the commit this transaction's state depends on, before a read from the
    /// server that could differ before and after it. If that commit fails, this transaction
    /// is dropped unseen, so what it reads then does not matter.
    async fn settle(&mut self) {
        if let Some(mut pending) = self.pending.take() {
            let _ = pending.wait_for(Option::is_some).await;
        }
    }

    pub(crate) fn savepoint(&mut self) -> Savepoint {
        self.flush_records();
        self.writes.savepoint()
    }

    /// Takes back the writes since `sp` (an operation of a round that failed).
    pub(crate) fn rollback(&mut self, sp: Savepoint) {
        self.writes.rollback(sp);
        // Some may hold writes just taken back: read them again.
        self.records.clear();
    }

    /// Drops every pending write, keeping the lock and version.
    pub(crate) fn discard(&mut self) {
        self.writes = Writes::default();
        self.records.clear();
    }

    /// The events written so far, taken out: to report once the commit landed.
    pub(crate) fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.writes.events)
    }

    /// Whether any write is pending.
    pub(crate) fn has_writes(&self) -> bool {
        !self.writes.is_empty() || self.records.changed()
    }

    /// Whether this transaction holds the campaign lock.
    pub(crate) fn locked(&self) -> bool {
        !self.lock_token.is_empty()
    }

    /// The version this transaction starts at.
    pub(crate) fn version(&self) -> &str {
        &self.cache.version
    }

    /// The commit's script call, built now to be sent later; `None` when the write set has
    /// bulk parts to stage first (then [`Self::commit`]).
    pub(crate) fn prepare(&mut self, script: &redis::Script) -> R<Option<Prepared>> {
        self.flush_records();
        prepare(
            &self.keys,
            script,
            &self.cache.version,
            &self.lock_token,
            &self.writes,
            self.cache.meta.as_ref().and_then(Option::as_ref),
        )
    }

    pub(crate) async fn commit(&mut self, script: &redis::Script) -> R<Committed> {
        self.flush_records();
        self.writes.fold_ready_up_to(super::commit::STAGE_ABOVE);
        commit(
            &mut self.conn,
            &self.keys,
            script,
            &self.cache.version,
            &self.lock_token,
            &self.writes,
            self.cache.meta.as_ref().and_then(Option::as_ref),
        )
        .await
    }

    /// What this transaction read, its writes dropped: a window's read-ahead (`ahead.rs`).
    pub(crate) fn into_read(self) -> Cache {
        self.cache
    }

    /// The cache after a commit that left the store at `version`: this transaction's reads
    /// with its writes applied, or an empty cache when the commit merged staged writes.
    pub(crate) fn into_cache(mut self, version: String, staged: bool) -> Cache {
        self.flush_records();
        let Self {
            mut cache,
            mut writes,
            ..
        } = self;
        if staged {
            return Cache::at(version);
        }
        writes.fold_ready_up_to(usize::MAX);
        cache.version = version;
        if let Some(meta) = writes.meta {
            cache.meta = Some(Some(*meta));
        }
        for (key, fields) in writes.hashes {
            for (f, v) in fields {
                cache.put_field(&key, f, v);
            }
        }
        for (key, z) in writes.zsets {
            if let Some(known) = cache.zset_mut(&key) {
                for m in &z.removed {
                    known.rem(m);
                }
                for (m, s) in z.added {
                    known.add(m, s);
                }
            }
        }
        cache
    }

    /// A hash field as this transaction sees it, handed to `f` where it lies (pending writes,
    /// then the cache, then Redis) rather than copied out first.
    async fn hget_with<T>(
        &mut self,
        key: &str,
        field: &str,
        f: impl FnOnce(&[u8]) -> R<T>,
    ) -> R<Option<T>> {
        if let Some(v) = self.writes.hashes.get(key).and_then(|h| h.get(field)) {
            return v.as_deref().map(f).transpose();
        }
        if let Some(v) = self.cache.field(key, field) {
            return v.as_deref().map(f).transpose();
        }
        let v: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(key)
            .arg(field)
            .query_async(&mut self.conn)
            .await
            .map_err(redis_err)?;
        let out = v.as_deref().map(f).transpose();
        self.cache.put_field(key, field.to_owned(), v);
        out
    }

    async fn hgetall(&mut self, key: &str) -> R<Vec<(String, Vec<u8>)>> {
        self.settle().await;
        let stored: HashMap<String, Vec<u8>> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut self.conn)
            .await
            .map_err(redis_err)?;
        let mut merged = stored;
        if let Some(over) = self.writes.hashes.get(key) {
            for (f, v) in over {
                match v {
                    Some(v) => merged.insert(f.clone(), v.clone()),
                    None => merged.remove(f),
                };
            }
        }
        let mut out: Vec<(String, Vec<u8>)> = merged.into_iter().collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// Takes in the window read ahead of the sorted set at `key`, if one was asked for
    /// (waiting for it if it is still being read, as a scan would wait); whether it was.
    async fn take_ahead(&mut self, key: &str) -> bool {
        let Some(z) = self.cache.zset_mut(key) else {
            return false;
        };
        let Some(ahead) = z.ahead.take() else {
            return false;
        };
        let Ok(w) = ahead.window.await else {
            return false;
        };
        z.extend(w.members, w.known, w.fetched, ahead.log);
        self.cache.absorb(w.read);
        Counters::bump(&self.conn.counters().windows_ahead);
        true
    }

    /// The answer to a scan from the cache and the pending writes, if they know enough.
    fn zrange_known(&self, key: &str, max: f64, limit: usize) -> Option<Vec<(String, f64)>> {
        self.cache
            .zset(key)?
            .scan(self.writes.zsets.get(key), max, limit)
    }

    /// Members with score <= `max` (all when `None`), lowest first, at most `limit`. Whether
    /// the answer came from the server.
    async fn zrange(
        &mut self,
        key: &str,
        max: Option<f64>,
        limit: usize,
    ) -> R<(Vec<(String, f64)>, bool)> {
        let max = max.unwrap_or(f64::INFINITY);
        self.writes.fold_ready(key);
        if let Some(known) = self.zrange_known(key, max, limit) {
            return Ok((known, false));
        }
        if self.take_ahead(key).await
            && let Some(known) = self.zrange_known(key, max, limit)
        {
            return Ok((known, false));
        }
        self.settle().await;
        let removed = self.writes.zsets.get(key).map_or(0, |z| z.removed.len());
        let last = self.cache.zset(key).map(|z| z.fetched);
        let fetch = scan_size(limit, removed, last, self.cache.members());
        let max_arg = if max == f64::INFINITY {
            "+inf".to_owned()
        } else {
            max.to_string()
        };
        let stored: Vec<(String, f64)> = redis::cmd("ZRANGEBYSCORE")
            .arg(key)
            .arg("-inf")
            .arg(max_arg)
            .arg("WITHSCORES")
            .arg("LIMIT")
            .arg(0)
            .arg(fetch)
            .query_async(&mut self.conn)
            .await
            .map_err(redis_err)?;
        let known = match stored.last() {
            Some((m, s)) if stored.len() >= fetch => Known::Until(Score(*s), m.clone()),
            _ => Known::Through(max),
        };
        self.cache
            .put_zset(key.to_owned(), ZKnown::new(stored, known, fetch));
        let answer = self.zrange_known(key, max, limit).ok_or_else(|| {
            StoreError::Backend(format!("scan of {key} does not cover what it fetched"))
        })?;
        Ok((answer, true))
    }

    async fn zexists(&mut self, key: &str, member: &str, score: f64) -> R<bool> {
        self.writes.fold_ready(key);
        if let Some(z) = self.writes.zsets.get(key) {
            if z.added.contains_key(member) {
                return Ok(true);
            }
            if z.removed.contains(member) {
                return Ok(false);
            }
        }
        if let Some(known) = self.cache.zset(key).and_then(|z| z.contains(member, score)) {
            return Ok(known);
        }
        self.settle().await;
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(key)
            .arg(member)
            .query_async(&mut self.conn)
            .await
            .map_err(redis_err)?;
        Ok(score.is_some())
    }
}

impl Tx for RedisTx {
    async fn meta(&mut self) -> R<Option<Meta>> {
        if let Some(m) = &self.writes.meta {
            return Ok(Some(Meta::clone(m)));
        }
        if let Some(m) = &self.cache.meta {
            return Ok(m.clone());
        }
        self.settle().await;
        let meta = super::meta::read(&mut self.conn, &self.keys).await?;
        self.cache.meta = Some(meta.clone());
        Ok(meta)
    }
    async fn put_meta(&mut self, meta: Meta) -> R<()> {
        self.writes.set_meta(meta);
        Ok(())
    }

    async fn task(&mut self, pos: u32) -> R<Task> {
        if let Some((_, v, _)) = self.writes.bulk_tasks.iter().find(|(p, _, _)| *p == pos) {
            return parse(v);
        }
        if let Some(t) = self.cache.task(pos) {
            return Ok(t.clone());
        }
        let key = self.keys.tasks();
        let task: Task = self
            .hget_with(&key, &pos.to_string(), parse)
            .await?
            .ok_or_else(|| corrupt(format!("task {pos} missing")))?;
        self.remember_task(pos, task.clone());
        Ok(task)
    }
    async fn put_task(&mut self, pos: u32, task: &Task) -> R<()> {
        self.writes.push_task(pos, json(task)?, task.id.to_string());
        Ok(())
    }
    async fn tasks(&mut self) -> R<Vec<Task>> {
        let key = self.keys.tasks();
        let mut all: Vec<(u32, Vec<u8>)> = self
            .hgetall(&key)
            .await?
            .into_iter()
            .map(|(f, v)| Ok((f.parse::<u32>().map_err(corrupt)?, v)))
            .collect::<R<_>>()?;
        all.sort_by_key(|(p, _)| *p);
        all.iter().map(|(_, v)| parse(v)).collect()
    }
    async fn task_pos(&mut self, id: &TaskId) -> R<Option<u32>> {
        let id = id.as_str();
        if let Some((p, _, _)) = self.writes.bulk_tasks.iter().find(|(_, _, t)| t == id) {
            return Ok(Some(*p));
        }
        let key = self.keys.task_pos();
        self.hget_with(&key, id, |v| {
            std::str::from_utf8(v)
                .map_err(corrupt)?
                .parse()
                .map_err(corrupt)
        })
        .await
    }

    async fn trial(&mut self, id: &TrialId) -> R<Option<TrialState>> {
        self.state_of(id).await
    }
    async fn put_trial(&mut self, id: &TrialId, state: &TrialState) -> R<()> {
        self.put_state(id, state).await
    }
    async fn trial_ids(&mut self) -> R<Vec<TrialId>> {
        self.flush_records();
        let key = self.keys.trials();
        self.hgetall(&key)
            .await?
            .into_iter()
            .map(|(f, _)| trial_id(f))
            .collect()
    }

    async fn lease(&mut self, trial: &TrialId) -> R<Option<Lease>> {
        self.lease_of(trial).await
    }
    async fn put_lease(&mut self, trial: &TrialId, lease: &Lease) -> R<()> {
        self.set_lease(trial, Some(lease)).await
    }
    async fn del_lease(&mut self, trial: &TrialId) -> R<()> {
        self.set_lease(trial, None).await
    }
    async fn leases(&mut self) -> R<Vec<(TrialId, Lease)>> {
        self.all_leases().await
    }

    async fn add_deadline(&mut self, at: EpochMs, trial: &TrialId) -> R<()> {
        let trial = trial.as_str();
        self.writes
            .zadd(self.keys.deadlines(), at as f64, trial.to_owned());
        Ok(())
    }
    async fn del_deadline(&mut self, _at: EpochMs, trial: &TrialId) -> R<()> {
        let trial = trial.as_str();
        // One lease per trial, so one deadline per trial: the member alone identifies it.
        self.writes.zrem(self.keys.deadlines(), trial.to_owned());
        Ok(())
    }
    async fn deadlines_due(&mut self, before: EpochMs, limit: usize) -> R<Vec<(EpochMs, TrialId)>> {
        let key = self.keys.deadlines();
        self.zrange(&key, Some(before as f64), limit)
            .await?
            .0
            .into_iter()
            .map(|(m, s)| Ok((s as EpochMs, trial_id(m)?)))
            .collect()
    }

    async fn add_ready(&mut self, queue: &Queue, key: u64) -> R<()> {
        self.writes.add_ready(self.keys.ready(queue), key);
        self.writes.add_queue(queue);
        Ok(())
    }
    async fn del_ready(&mut self, queue: &Queue, key: u64) -> R<bool> {
        let k = self.keys.ready(queue);
        let member = key.to_string();
        // A ready entry's score is its key.
        let existed = self.zexists(&k, &member, key as f64).await?;
        if existed {
            self.writes.zrem(k, member);
        }
        Ok(existed)
    }
    async fn ready_first(&mut self, queue: &Queue, limit: usize) -> R<Vec<u64>> {
        let k = self.keys.ready(queue);
        let (members, fetched) = self.zrange(&k, None, limit).await?;
        let keys = members
            .into_iter()
            .map(|(m, _)| m.parse::<u64>().map_err(corrupt))
            .collect::<R<Vec<u64>>>()?;
        if fetched {
            // Every member the scan fetched, not only those answered now: later claims of
            // the round (and of later rounds) take them from the cache.
            let members: Vec<u64> = self
                .cache
                .zset(&k)
                .map(|z| z.order.iter().filter_map(|(_, m)| m.parse().ok()).collect())
                .unwrap_or_default();
            self.read_ahead_units(queue.unit(), &members).await?;
        }
        Ok(keys)
    }
    async fn queues(&mut self) -> R<Vec<Queue>> {
        self.settle().await;
        let stored: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.keys.queues())
            .query_async(&mut self.conn)
            .await
            .map_err(redis_err)?;
        let mut all = stored
            .iter()
            .map(|name| name.parse().map_err(corrupt))
            .collect::<R<BTreeSet<Queue>>>()?;
        all.extend(self.writes.queues_added.iter().cloned());
        Ok(all.into_iter().collect())
    }

    async fn add_delayed(&mut self, at: EpochMs, trial: &TrialId) -> R<()> {
        let trial = trial.as_str();
        self.writes
            .zadd(self.keys.delayed(), at as f64, trial.to_owned());
        Ok(())
    }
    async fn del_delayed(&mut self, _at: EpochMs, trial: &TrialId) -> R<()> {
        let trial = trial.as_str();
        // A trial waits in the delayed set at most once.
        self.writes.zrem(self.keys.delayed(), trial.to_owned());
        Ok(())
    }
    async fn delayed_due(&mut self, now: EpochMs, limit: usize) -> R<Vec<(EpochMs, TrialId)>> {
        let key = self.keys.delayed();
        self.zrange(&key, Some(now as f64), limit)
            .await?
            .0
            .into_iter()
            .map(|(m, s)| Ok((s as EpochMs, trial_id(m)?)))
            .collect()
    }
    async fn delayed_next(&mut self) -> R<Option<EpochMs>> {
        let key = self.keys.delayed();
        Ok(self
            .zrange(&key, None, 1)
            .await?
            .0
            .first()
            .map(|(_, s)| *s as EpochMs))
    }

    async fn token(&mut self, trial: &TrialId, attempt: u32) -> R<Option<TokenRecord>> {
        self.token_of(trial, attempt).await
    }
    async fn put_token(&mut self, trial: &TrialId, attempt: u32, record: &TokenRecord) -> R<()> {
        self.set_token(trial, attempt, record).await
    }

    async fn put_row(&mut self, row: &Row) -> R<()> {
        if row.counted {
            self.writes
                .push_scored(row.trial_id.to_string(), row.attempt.to_string());
        }
        self.writes.push_stream(
            self.keys.results(),
            row.seq,
            json_in(row, Vec::with_capacity(1024))?,
        );
        Ok(())
    }
    async fn put_event(&mut self, event: &Event) -> R<()> {
        self.writes.push_stream(
            self.keys.events(),
            event.seq,
            json_in(event, Vec::with_capacity(384))?,
        );
        self.writes.push_event(event.clone());
        Ok(())
    }

    async fn block(&mut self, name: &BlockName) -> R<BlockState> {
        let name = name.as_str();
        let key = self.keys.blocks();
        Ok(self
            .hget_with(&key, name, record)
            .await?
            .unwrap_or_default())
    }
    async fn put_block(&mut self, name: &BlockName, block: &BlockState) -> R<()> {
        let name = name.as_str();
        let v = encode(block);
        self.writes
            .hset(self.keys.blocks(), name.to_owned(), Some(v));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_of_a_set_the_cache_knows_fetches_twice_the_last_up_to_the_most() {
        // A set not scanned yet: the least, or twice what was asked for.
        assert_eq!(scan_size(4, 0, None, 0), MIN_SCAN);
        assert_eq!(scan_size(200, 10, None, 0), 420);
        // The same set scanned again while the cache lives: the window doubles.
        assert_eq!(scan_size(4, 0, Some(MIN_SCAN), 100), 2 * MIN_SCAN);
        assert_eq!(scan_size(4, 0, Some(1024), 100), MAX_SCAN);
        assert_eq!(scan_size(4, 0, Some(MAX_SCAN), 100), MAX_SCAN);
        // Asked for more than the most: still twice what was asked for.
        assert_eq!(scan_size(5_000, 0, Some(MAX_SCAN), 0), 10_000);
        assert_eq!(scan_size(usize::MAX, 1, None, 0), i64::MAX as usize);
    }

    #[test]
    fn windows_stop_growing_when_the_cache_knows_many_members() {
        // Fifty queues of the least already known: no room to grow, the window stays.
        let known = 50 * MIN_SCAN;
        assert_eq!(scan_size(4, 0, Some(MIN_SCAN), known), MIN_SCAN);
        assert_eq!(scan_size(4, 0, Some(1024), known), 1024);
        // Room for the doubled window beside what is known: it grows.
        assert_eq!(scan_size(4, 0, Some(1024), MAX_SCANNED - 2048), MAX_SCAN);
        assert_eq!(scan_size(4, 0, Some(1024), MAX_SCANNED - 2047), 1024);
    }
}
