//! The engine's transaction over Redis: reads go to the server (or to this transaction's own
//! pending writes), writes are buffered and applied by one `commit.lua` call.

use std::collections::{BTreeSet, HashMap, HashSet};

use redis::aio::ConnectionManager;
use serde::Serialize;
use serde::de::DeserializeOwned;

use lanes_common::row::Row;
use lanes_common::spec::Task;
use lanes_common::utc::EpochMs;

use super::keys::{Keys, stream_id};
use super::redis_err;
use crate::store::api::{Event, StoreError};
use crate::store::model::{BlockState, Lease, Meta, Queue, TokenRecord, TrialState};
use crate::store::tx::{R, Tx};

/// More pending additions than this to one sorted set are staged in chunks before the commit.
const STAGE_ABOVE: usize = 1000;
/// Fields or members per chunked write.
const CHUNK: usize = 5000;
/// Staging keys expire on their own if the process that wrote them dies before its commit.
const STAGING_TTL_MS: u64 = 3_600_000;

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

fn json<T: Serialize>(v: &T) -> R<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| StoreError::Backend(e.to_string()))
}

fn parse<T: DeserializeOwned>(b: &[u8]) -> R<T> {
    serde_json::from_slice(b).map_err(corrupt)
}

/// Pending changes to one sorted set.
#[derive(Default)]
struct ZOverlay {
    added: HashMap<String, f64>,
    removed: HashSet<String>,
}

/// What `commit` did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Committed {
    Yes {
        wrote: bool,
    },
    /// Another operation committed first: run the operation again.
    Conflict,
}

pub(crate) struct RedisTx {
    conn: ConnectionManager,
    keys: Keys,
    version: String,
    lock_token: String,
    meta: Option<Option<Vec<u8>>>,
    hashes: HashMap<String, HashMap<String, Option<Vec<u8>>>>,
    /// Hash fields already read in this transaction: the lock or the version check makes a
    /// second read of the same field pointless.
    read_cache: HashMap<(String, String), Option<Vec<u8>>>,
    zsets: HashMap<String, ZOverlay>,
    queues_added: BTreeSet<Queue>,
    streams: Vec<(String, String, Vec<u8>)>,
    scored: Vec<(String, String)>,
    /// New tasks, staged in chunks before the commit and merged by the commit script, so
    /// they are invisible to every other transaction until then.
    bulk_tasks: Vec<(u32, Vec<u8>, String)>,
}

impl RedisTx {
    pub(crate) fn new(
        conn: ConnectionManager,
        keys: Keys,
        version: String,
        lock_token: String,
    ) -> Self {
        Self {
            conn,
            keys,
            version,
            lock_token,
            meta: None,
            hashes: HashMap::new(),
            read_cache: HashMap::new(),
            zsets: HashMap::new(),
            queues_added: BTreeSet::new(),
            streams: Vec::new(),
            scored: Vec::new(),
            bulk_tasks: Vec::new(),
        }
    }

    async fn hget(&mut self, key: &str, field: &str) -> R<Option<Vec<u8>>> {
        if let Some(v) = self.hashes.get(key).and_then(|h| h.get(field)) {
            return Ok(v.clone());
        }
        let cache_key = (key.to_owned(), field.to_owned());
        if let Some(v) = self.read_cache.get(&cache_key) {
            return Ok(v.clone());
        }
        let v: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(key)
            .arg(field)
            .query_async(&mut self.conn)
            .await
            .map_err(redis_err)?;
        self.read_cache.insert(cache_key, v.clone());
        Ok(v)
    }

    fn hset(&mut self, key: String, field: String, value: Option<Vec<u8>>) {
        self.hashes.entry(key).or_default().insert(field, value);
    }

    async fn hgetall(&mut self, key: &str) -> R<Vec<(String, Vec<u8>)>> {
        let stored: HashMap<String, Vec<u8>> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut self.conn)
            .await
            .map_err(redis_err)?;
        let mut merged = stored;
        if let Some(over) = self.hashes.get(key) {
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

    fn zadd(&mut self, key: String, score: f64, member: String) {
        let z = self.zsets.entry(key).or_default();
        z.removed.remove(&member);
        z.added.insert(member, score);
    }

    fn zrem(&mut self, key: String, member: String) {
        let z = self.zsets.entry(key).or_default();
        z.added.remove(&member);
        z.removed.insert(member);
    }

    /// Members with score <= `max` (all when `None`), lowest first, at most `limit`.
    async fn zrange(&mut self, key: &str, max: Option<f64>, limit: usize) -> R<Vec<(String, f64)>> {
        let removed = self.zsets.get(key).map_or(0, |z| z.removed.len());
        let fetch = limit.saturating_add(removed).min(i64::MAX as usize) as i64;
        let max_arg = max.map_or_else(|| "+inf".to_owned(), |m| m.to_string());
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
        let mut out: Vec<(String, f64)> = match self.zsets.get(key) {
            Some(z) => stored
                .into_iter()
                .filter(|(m, _)| !z.removed.contains(m) && !z.added.contains_key(m))
                .chain(
                    z.added
                        .iter()
                        .filter(|(_, s)| max.is_none_or(|m| **s <= m))
                        .map(|(m, s)| (m.clone(), *s)),
                )
                .collect(),
            None => stored,
        };
        out.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        out.truncate(limit);
        Ok(out)
    }

    async fn zexists(&mut self, key: &str, member: &str) -> R<bool> {
        if let Some(z) = self.zsets.get(key) {
            if z.added.contains_key(member) {
                return Ok(true);
            }
            if z.removed.contains(member) {
                return Ok(false);
            }
        }
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(key)
            .arg(member)
            .query_async(&mut self.conn)
            .await
            .map_err(redis_err)?;
        Ok(score.is_some())
    }

    /// Drops every pending write, keeping the lock and version.
    pub(crate) fn discard(self) -> Self {
        Self::new(self.conn, self.keys, self.version, self.lock_token)
    }

    /// Writes the bulk parts, then applies everything else with one script call.
    pub(crate) async fn commit(mut self, script: &redis::Script) -> R<Committed> {
        // Bulk task writes go to staging hashes of their own, which only the commit script
        // merges: a conflicting attempt, or a concurrent submit of the same id, never sees
        // them, and a retry reads only committed tasks.
        let nonce = nonce();
        let mut staged_hashes: Vec<(String, String)> = Vec::new();
        let bulk_tasks = std::mem::take(&mut self.bulk_tasks);
        if !bulk_tasks.is_empty() {
            let tasks_stage = format!("{}:staging:{nonce}", self.keys.tasks());
            let pos_stage = format!("{}:staging:{nonce}", self.keys.task_pos());
            for chunk in bulk_tasks.chunks(CHUNK) {
                let mut pipe = redis::pipe();
                let mut tasks = redis::cmd("HSET");
                tasks.arg(&tasks_stage);
                let mut pos = redis::cmd("HSET");
                pos.arg(&pos_stage);
                for (p, v, id) in chunk {
                    tasks.arg(p).arg(v.as_slice());
                    pos.arg(id).arg(p);
                }
                pipe.add_command(tasks).ignore().add_command(pos).ignore();
                for k in [&tasks_stage, &pos_stage] {
                    pipe.cmd("PEXPIRE").arg(k).arg(STAGING_TTL_MS).ignore();
                }
                if let Err(e) = pipe.query_async::<()>(&mut self.conn).await {
                    self.drop_staging([tasks_stage, pos_stage]).await;
                    return Err(redis_err(e));
                }
            }
            staged_hashes.push((self.keys.tasks(), tasks_stage));
            staged_hashes.push((self.keys.task_pos(), pos_stage));
        }
        let mut staging: Vec<String> = staged_hashes.iter().map(|(_, s)| s.clone()).collect();

        let mut keys: Vec<String> = vec![self.keys.version(), self.keys.lock()];
        let mut index: HashMap<String, usize> = HashMap::new();
        let mut key_ix = |k: &str, keys: &mut Vec<String>| -> usize {
            *index.entry(k.to_owned()).or_insert_with(|| {
                keys.push(k.to_owned());
                keys.len()
            })
        };
        let mut args: Vec<Vec<u8>> = vec![
            self.version.clone().into_bytes(),
            self.lock_token.clone().into_bytes(),
        ];
        let scored_key = self.keys.scored();
        args.push(self.scored.len().to_string().into_bytes());
        for (trial, _) in &self.scored {
            args.push(key_ix(&scored_key, &mut keys).to_string().into_bytes());
            args.push(trial.clone().into_bytes());
        }
        let mut ops = 0usize;
        let mut op = |args: &mut Vec<Vec<u8>>, parts: Vec<Vec<u8>>| {
            ops += 1;
            args.extend(parts);
        };
        let b = |s: &str| s.as_bytes().to_vec();
        if let Some(meta) = self.meta.take() {
            let ix = key_ix(&self.keys.meta(), &mut keys).to_string();
            match meta {
                Some(v) => op(&mut args, vec![b("S"), b(&ix), v]),
                None => op(&mut args, vec![b("D"), b(&ix)]),
            }
        }
        let mut hashes: Vec<_> = self.hashes.drain().collect();
        hashes.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, fields) in hashes {
            let ix = key_ix(&key, &mut keys).to_string();
            let mut fields: Vec<_> = fields.into_iter().collect();
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            for (f, v) in fields {
                match v {
                    Some(v) => op(&mut args, vec![b("H"), b(&ix), f.into_bytes(), v]),
                    None => op(&mut args, vec![b("h"), b(&ix), f.into_bytes()]),
                }
            }
        }
        for (key, stage) in staged_hashes {
            let ix = key_ix(&key, &mut keys).to_string();
            let sx = key_ix(&stage, &mut keys).to_string();
            op(&mut args, vec![b("M"), b(&ix), b(&sx)]);
        }
        let mut zsets: Vec<_> = self.zsets.drain().collect();
        zsets.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, z) in zsets {
            let ix = key_ix(&key, &mut keys).to_string();
            for m in z.removed {
                op(&mut args, vec![b("z"), b(&ix), m.into_bytes()]);
            }
            if z.added.len() > STAGE_ABOVE {
                let stage = format!("{key}:staging:{nonce}");
                staging.push(stage.clone());
                let added: Vec<_> = z.added.into_iter().collect();
                for chunk in added.chunks(CHUNK) {
                    let mut pipe = redis::pipe();
                    let mut cmd = redis::cmd("ZADD");
                    cmd.arg(&stage);
                    for (m, s) in chunk {
                        cmd.arg(*s).arg(m);
                    }
                    pipe.add_command(cmd).ignore();
                    pipe.cmd("PEXPIRE").arg(&stage).arg(STAGING_TTL_MS).ignore();
                    if let Err(e) = pipe.query_async::<()>(&mut self.conn).await {
                        self.drop_staging(staging).await;
                        return Err(redis_err(e));
                    }
                }
                let sx = key_ix(&stage, &mut keys).to_string();
                op(&mut args, vec![b("U"), b(&ix), b(&sx)]);
            } else {
                for (m, s) in z.added {
                    op(
                        &mut args,
                        vec![b("Z"), b(&ix), s.to_string().into_bytes(), m.into_bytes()],
                    );
                }
            }
        }
        for q in std::mem::take(&mut self.queues_added) {
            let ix = key_ix(&self.keys.queues(), &mut keys).to_string();
            op(&mut args, vec![b("A"), b(&ix), q.to_string().into_bytes()]);
        }
        for (trial, attempt) in std::mem::take(&mut self.scored) {
            let ix = key_ix(&scored_key, &mut keys).to_string();
            op(
                &mut args,
                vec![b("N"), b(&ix), trial.into_bytes(), attempt.into_bytes()],
            );
        }
        for (key, id, v) in std::mem::take(&mut self.streams) {
            let ix = key_ix(&key, &mut keys).to_string();
            op(&mut args, vec![b("X"), b(&ix), id.into_bytes(), v]);
        }
        let mut inv = script.prepare_invoke();
        for k in &keys {
            inv.key(k);
        }
        for a in &args {
            inv.arg(a.as_slice());
        }
        let answer = inv.invoke_async::<i64>(&mut self.conn).await;
        // The script merges and deletes staging keys only when it commits.
        if !matches!(answer, Ok(1)) {
            self.drop_staging(staging).await;
        }
        match answer.map_err(redis_err)? {
            1 => Ok(Committed::Yes { wrote: ops > 0 }),
            _ => Ok(Committed::Conflict),
        }
    }

    /// Best-effort removal of staging keys an attempt will not commit; their expiry is the
    /// backstop when this fails too.
    async fn drop_staging(&mut self, keys: impl IntoIterator<Item = String>) {
        let keys: Vec<String> = keys.into_iter().collect();
        if keys.is_empty() {
            return;
        }
        let _ = redis::cmd("DEL")
            .arg(&keys)
            .query_async::<()>(&mut self.conn)
            .await;
    }
}

/// A process-unique value for staging keys and lock tokens.
pub(crate) fn nonce() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

fn token_field(trial: &str, attempt: u32) -> String {
    format!("{trial}#{attempt}")
}

impl Tx for RedisTx {
    async fn meta(&mut self) -> R<Option<Meta>> {
        let bytes: Option<Vec<u8>> = match &self.meta {
            Some(v) => v.clone(),
            None => redis::cmd("GET")
                .arg(self.keys.meta())
                .query_async(&mut self.conn)
                .await
                .map_err(redis_err)?,
        };
        bytes.map(|b| parse(&b)).transpose()
    }
    async fn put_meta(&mut self, meta: &Meta) -> R<()> {
        self.meta = Some(Some(json(meta)?));
        Ok(())
    }

    async fn task(&mut self, pos: u32) -> R<Task> {
        if let Some((_, v, _)) = self.bulk_tasks.iter().find(|(p, _, _)| *p == pos) {
            return parse(v);
        }
        let key = self.keys.tasks();
        let v = self
            .hget(&key, &pos.to_string())
            .await?
            .ok_or_else(|| corrupt(format!("task {pos} missing")))?;
        parse(&v)
    }
    async fn put_task(&mut self, pos: u32, task: &Task) -> R<()> {
        self.bulk_tasks
            .push((pos, json(task)?, task.id.to_string()));
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
    async fn task_pos(&mut self, id: &str) -> R<Option<u32>> {
        if let Some((p, _, _)) = self.bulk_tasks.iter().find(|(_, _, t)| t == id) {
            return Ok(Some(*p));
        }
        let key = self.keys.task_pos();
        match self.hget(&key, id).await? {
            Some(v) => Ok(Some(
                std::str::from_utf8(&v)
                    .map_err(corrupt)?
                    .parse()
                    .map_err(corrupt)?,
            )),
            None => Ok(None),
        }
    }

    async fn trial(&mut self, id: &str) -> R<Option<TrialState>> {
        let key = self.keys.trials();
        self.hget(&key, id).await?.map(|b| parse(&b)).transpose()
    }
    async fn put_trial(&mut self, id: &str, state: &TrialState) -> R<()> {
        let v = json(state)?;
        self.hset(self.keys.trials(), id.to_owned(), Some(v));
        Ok(())
    }
    async fn trial_ids(&mut self) -> R<Vec<String>> {
        let key = self.keys.trials();
        Ok(self
            .hgetall(&key)
            .await?
            .into_iter()
            .map(|(f, _)| f)
            .collect())
    }

    async fn lease(&mut self, trial: &str) -> R<Option<Lease>> {
        let key = self.keys.leases();
        self.hget(&key, trial).await?.map(|b| parse(&b)).transpose()
    }
    async fn put_lease(&mut self, trial: &str, lease: &Lease) -> R<()> {
        let v = json(lease)?;
        self.hset(self.keys.leases(), trial.to_owned(), Some(v));
        Ok(())
    }
    async fn del_lease(&mut self, trial: &str) -> R<()> {
        self.hset(self.keys.leases(), trial.to_owned(), None);
        Ok(())
    }
    async fn leases(&mut self) -> R<Vec<(String, Lease)>> {
        let key = self.keys.leases();
        self.hgetall(&key)
            .await?
            .into_iter()
            .map(|(f, v)| Ok((f, parse(&v)?)))
            .collect()
    }

    async fn add_deadline(&mut self, at: EpochMs, trial: &str) -> R<()> {
        self.zadd(self.keys.deadlines(), at as f64, trial.to_owned());
        Ok(())
    }
    async fn del_deadline(&mut self, _at: EpochMs, trial: &str) -> R<()> {
        // One lease per trial, so one deadline per trial: the member alone identifies it.
        self.zrem(self.keys.deadlines(), trial.to_owned());
        Ok(())
    }
    async fn deadlines_due(&mut self, before: EpochMs, limit: usize) -> R<Vec<(EpochMs, String)>> {
        let key = self.keys.deadlines();
        Ok(self
            .zrange(&key, Some(before as f64), limit)
            .await?
            .into_iter()
            .map(|(m, s)| (s as EpochMs, m))
            .collect())
    }

    async fn add_ready(&mut self, queue: &Queue, key: u64) -> R<()> {
        self.zadd(self.keys.ready(queue), key as f64, key.to_string());
        self.queues_added.insert(queue.clone());
        Ok(())
    }
    async fn del_ready(&mut self, queue: &Queue, key: u64) -> R<bool> {
        let k = self.keys.ready(queue);
        let member = key.to_string();
        let existed = self.zexists(&k, &member).await?;
        if existed {
            self.zrem(k, member);
        }
        Ok(existed)
    }
    async fn ready_first(&mut self, queue: &Queue, limit: usize) -> R<Vec<u64>> {
        let k = self.keys.ready(queue);
        self.zrange(&k, None, limit)
            .await?
            .into_iter()
            .map(|(m, _)| m.parse::<u64>().map_err(corrupt))
            .collect()
    }
    async fn queues(&mut self) -> R<Vec<Queue>> {
        let stored: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.keys.queues())
            .query_async(&mut self.conn)
            .await
            .map_err(redis_err)?;
        let mut all = stored
            .iter()
            .map(|name| name.parse().map_err(corrupt))
            .collect::<R<BTreeSet<Queue>>>()?;
        all.extend(self.queues_added.iter().cloned());
        Ok(all.into_iter().collect())
    }

    async fn add_delayed(&mut self, at: EpochMs, trial: &str) -> R<()> {
        self.zadd(self.keys.delayed(), at as f64, trial.to_owned());
        Ok(())
    }
    async fn del_delayed(&mut self, _at: EpochMs, trial: &str) -> R<()> {
        // A trial waits in the delayed set at most once.
        self.zrem(self.keys.delayed(), trial.to_owned());
        Ok(())
    }
    async fn delayed_due(&mut self, now: EpochMs, limit: usize) -> R<Vec<(EpochMs, String)>> {
        let key = self.keys.delayed();
        Ok(self
            .zrange(&key, Some(now as f64), limit)
            .await?
            .into_iter()
            .map(|(m, s)| (s as EpochMs, m))
            .collect())
    }
    async fn delayed_next(&mut self) -> R<Option<EpochMs>> {
        let key = self.keys.delayed();
        Ok(self
            .zrange(&key, None, 1)
            .await?
            .first()
            .map(|(_, s)| *s as EpochMs))
    }

    async fn token(&mut self, trial: &str, attempt: u32) -> R<Option<TokenRecord>> {
        let key = self.keys.tokens();
        self.hget(&key, &token_field(trial, attempt))
            .await?
            .map(|b| parse(&b))
            .transpose()
    }
    async fn put_token(&mut self, trial: &str, attempt: u32, record: &TokenRecord) -> R<()> {
        let v = json(record)?;
        self.hset(self.keys.tokens(), token_field(trial, attempt), Some(v));
        Ok(())
    }

    async fn put_row(&mut self, row: &Row) -> R<()> {
        if row.counted {
            self.scored
                .push((row.trial_id.to_string(), row.attempt.to_string()));
        }
        self.streams
            .push((self.keys.results(), stream_id(row.seq), json(row)?));
        Ok(())
    }
    async fn put_event(&mut self, event: &Event) -> R<()> {
        self.streams
            .push((self.keys.events(), stream_id(event.seq), json(event)?));
        Ok(())
    }

    async fn block(&mut self, name: &str) -> R<BlockState> {
        let key = self.keys.blocks();
        Ok(self
            .hget(&key, name)
            .await?
            .map(|b| parse(&b))
            .transpose()?
            .unwrap_or_default())
    }
    async fn put_block(&mut self, name: &str, block: &BlockState) -> R<()> {
        let v = json(block)?;
        self.hset(self.keys.blocks(), name.to_owned(), Some(v));
        Ok(())
    }
}
