//! Applies a transaction's write set with one `commit.lua` call: the bulk parts are staged
//! first under keys of their own, then the script checks the version and the lock, applies
//! every write and bumps the version, or writes nothing.

use std::collections::HashMap;
use std::sync::Arc;

use redis::{ErrorKind, ServerErrorKind};

use super::conn::Conn;
use super::keys::{ENTRY_ITEMS, Keys, stream_id};
use super::meta::{Part, parts};
use super::packed;
use super::redis_err;
use super::stats::Counters;
use super::writes::Writes;
use crate::store::model::Meta;
use crate::store::tx::R;

/// More pending additions than this to one sorted set are staged in chunks before the commit.
pub(crate) const STAGE_ABOVE: usize = 1000;
/// Fields or members per chunked write.
const CHUNK: usize = 5000;
/// Staging keys expire on their own if the process that wrote them dies before its commit.
const STAGING_TTL_MS: u64 = 3_600_000;

/// What `commit` did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Committed {
    Yes {
        /// Whether the script wrote (and bumped the version).
        wrote: bool,
        /// Whether bulk writes were merged from staging keys (unseen by any cache).
        staged: bool,
        /// The version after the commit.
        version: String,
    },
    /// Another operation committed first, or holds the lock: run the operation again.
    Conflict,
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

/// Best-effort removal of staging keys an attempt will not commit; their expiry is the
/// backstop when this fails too.
async fn drop_staging(conn: &mut Conn, keys: Vec<String>) {
    if keys.is_empty() {
        return;
    }
    let _ = redis::cmd("DEL").arg(&keys).query_async::<()>(conn).await;
}

/// A stream entry's items: `(seq, body)`.
type Entry<'a> = Vec<(u64, &'a [u8])>;

/// A round's stream items as entries: per stream (in the order first written), its items in
/// seq order, at most [`ENTRY_ITEMS`] to an entry. An entry's id is that of its last item, so
/// ids rise with the seqs, entry after entry and round after round.
fn stream_entries(items: &[(Arc<str>, u64, Vec<u8>)]) -> Vec<(&str, Entry<'_>)> {
    let mut streams: Vec<(&str, Entry<'_>)> = Vec::new();
    for (key, seq, body) in items {
        match streams.iter_mut().find(|(k, _)| *k == &**key) {
            Some((_, its)) => its.push((*seq, body)),
            None => streams.push((&**key, vec![(*seq, body)])),
        }
    }
    let mut entries = Vec::new();
    for (key, mut its) in streams {
        its.sort_by_key(|(seq, _)| *seq);
        let mut its = its.into_iter().peekable();
        while its.peek().is_some() {
            entries.push((key, its.by_ref().take(ENTRY_ITEMS).collect()));
        }
    }
    entries
}

/// A field write of a hash: its name and value (`None` deletes it).
type FieldWrite<'a> = (&'a String, Option<&'a [u8]>);

/// An argument of the script call: borrowed from the write set, or made here.
enum Arg<'a> {
    Ref(&'a [u8]),
    Own(Vec<u8>),
}

/// The script call being built: its keys (each named once, referred to by index) and
/// arguments, written into the command without copying the write set's values twice.
struct Call<'a> {
    keys: Vec<String>,
    index: HashMap<String, usize>,
    args: Vec<Arg<'a>>,
    ops: usize,
}

impl<'a> Call<'a> {
    fn new(keys: &Keys, version: &'a str, lock_token: &'a str, next: &'a str) -> Self {
        Self {
            keys: vec![keys.version(), keys.lock()],
            index: HashMap::new(),
            args: vec![
                Arg::Ref(version.as_bytes()),
                Arg::Ref(lock_token.as_bytes()),
                Arg::Ref(next.as_bytes()),
            ],
            ops: 0,
        }
    }

    /// The 1-based index of `key` in KEYS.
    fn key(&mut self, key: &str) -> usize {
        if let Some(ix) = self.index.get(key) {
            return *ix;
        }
        self.keys.push(key.to_owned());
        self.index.insert(key.to_owned(), self.keys.len());
        self.keys.len()
    }

    /// An op: its code, its key's index, its item count if it takes several, its arguments.
    fn op(
        &mut self,
        code: &'static str,
        key: &str,
        count: Option<usize>,
        items: impl IntoIterator<Item = Arg<'a>>,
    ) {
        let ix = self.key(key);
        self.ops += 1;
        self.args.push(Arg::Ref(code.as_bytes()));
        self.args.push(Arg::Own(ix.to_string().into_bytes()));
        if let Some(n) = count {
            self.args.push(Arg::Own(n.to_string().into_bytes()));
        }
        self.args.extend(items);
    }

    fn command(&self, script: &redis::Script) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.get_hash()).arg(self.keys.len());
        for k in &self.keys {
            cmd.arg(k);
        }
        for a in &self.args {
            match a {
                Arg::Ref(b) => cmd.arg(*b),
                Arg::Own(v) => cmd.arg(v.as_slice()),
            };
        }
        cmd
    }
}

/// Staging keys written before a commit, and the keys they merge into.
#[derive(Default)]
struct Staging {
    /// (hash, staging hash) pairs: a large submit's tasks and task positions.
    hashes: Vec<(String, String)>,
    /// Sorted set -> its staging set, for more than [`STAGE_ABOVE`] additions.
    zsets: HashMap<String, String>,
}

impl Staging {
    fn keys(&self) -> Vec<String> {
        self.hashes
            .iter()
            .map(|(_, s)| s.clone())
            .chain(self.zsets.values().cloned())
            .collect()
    }
}

/// A sorted-set member to stage: a string, or a numeric ready entry (its decimal form).
enum Member<'a> {
    Str(&'a String),
    Num(u64),
}

/// Whether a write set has bulk parts to stage before its script call.
fn needs_staging(writes: &Writes) -> bool {
    !writes.bulk_tasks.is_empty()
        || !writes.ready_bulk.is_empty()
        || writes.zsets.values().any(|z| z.added.len() > STAGE_ABOVE)
}

/// Writes the bulk parts to staging keys. Bulk task writes go to staging hashes of their own,
/// which only the commit script merges: a conflicting attempt, or a concurrent submit of the
/// same id, never sees them, and a retry reads only committed tasks.
async fn stage(conn: &mut Conn, keys: &Keys, writes: &Writes) -> R<Staging> {
    let nonce = nonce();
    let mut staging = Staging::default();
    if !writes.bulk_tasks.is_empty() {
        let tasks_stage = format!("{}:staging:{nonce}", keys.tasks());
        let pos_stage = format!("{}:staging:{nonce}", keys.task_pos());
        staging.hashes.push((keys.tasks(), tasks_stage.clone()));
        staging.hashes.push((keys.task_pos(), pos_stage.clone()));
        for chunk in writes.bulk_tasks.chunks(CHUNK) {
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
            if let Err(e) = pipe.query_async::<()>(conn).await {
                drop_staging(conn, staging.keys()).await;
                return Err(redis_err(e));
            }
        }
    }
    for (key, z) in &writes.zsets {
        let numeric: &[u64] = writes.ready_bulk.get(key).map_or(&[], Vec::as_slice);
        if z.added.len() + numeric.len() <= STAGE_ABOVE {
            continue;
        }
        let stage = format!("{key}:staging:{nonce}");
        staging.zsets.insert(key.clone(), stage.clone());
        // Numeric ready entries are written as `zadd` would: score and member the entry.
        let added: Vec<(f64, Member)> = z
            .added
            .iter()
            .map(|(m, s)| (*s, Member::Str(m)))
            .chain(numeric.iter().map(|e| (*e as f64, Member::Num(*e))))
            .collect();
        for chunk in added.chunks(CHUNK) {
            let mut pipe = redis::pipe();
            let mut cmd = redis::cmd("ZADD");
            cmd.arg(&stage);
            for (s, m) in chunk {
                cmd.arg(*s);
                match m {
                    Member::Str(m) => cmd.arg(m.as_str()),
                    Member::Num(e) => cmd.arg(*e),
                };
            }
            pipe.add_command(cmd).ignore();
            pipe.cmd("PEXPIRE").arg(&stage).arg(STAGING_TTL_MS).ignore();
            if let Err(e) = pipe.query_async::<()>(conn).await {
                drop_staging(conn, staging.keys()).await;
                return Err(redis_err(e));
            }
        }
    }
    Ok(staging)
}

/// A script call built and ready to send.
pub(crate) struct Prepared {
    cmd: redis::Cmd,
    /// Whether it writes anything.
    pub(crate) wrote: bool,
    /// The version it leaves when it lands: `next` if it writes, else the one it expects.
    pub(crate) leaves: String,
}

/// A version token for the commit after `version`: a counter (for people reading the key)
/// and a random part, so no two commits ever leave the same version and a transaction that
/// expects one builds on exactly that commit (with plain counters, another replica's commit
/// could leave the number a pipelined commit expects).
pub(crate) fn next_version(version: &str) -> String {
    let n = version
        .split(':')
        .next()
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    format!("{}:{:016x}", n + 1, nonce())
}

/// Builds the script call of a write set whose bulk parts (if any) are in `staging`.
fn build(
    keys: &Keys,
    script: &redis::Script,
    version: &str,
    lock_token: &str,
    writes: &Writes,
    committed: Option<&Meta>,
    staging: &Staging,
) -> R<Prepared> {
    let meta_parts = match &writes.meta {
        Some(meta) => parts(keys, committed, meta)?,
        None => Vec::new(),
    };
    let next = next_version(version);
    let mut call = Call::new(keys, version, lock_token, &next);
    // First scored wins: checked before anything else is written. The first counted row of
    // a trial wins within the write set too (the engine never writes two).
    if !writes.scored.is_empty() {
        let mut seen = std::collections::HashSet::new();
        let first: Vec<&(String, String)> = writes
            .scored
            .iter()
            .filter(|(t, _)| seen.insert(t.as_str()))
            .collect();
        let items = first
            .iter()
            .map(|(t, _)| Arg::Ref(t.as_bytes()))
            .chain(first.iter().map(|(_, a)| Arg::Ref(a.as_bytes())));
        call.op("F", &keys.scored(), Some(first.len()), items);
    }
    let seen_key = keys.seen();
    let mut seen: Vec<FieldWrite<'_>> = Vec::new();
    // `seen` values as text, kept here so the call can borrow them.
    let seen_at: Vec<Option<Vec<u8>>> = meta_parts
        .iter()
        .map(|p| match p {
            Part::Seen(_, Some(at)) => Some(at.to_string().into_bytes()),
            _ => None,
        })
        .collect();
    for (i, part) in meta_parts.iter().enumerate() {
        match part {
            Part::Set(key, v) => call.op("S", key, None, [Arg::Ref(v)]),
            Part::List { key, append, keep } => {
                let items = std::iter::once(Arg::Own(keep.to_string().into_bytes()))
                    .chain(std::iter::once(Arg::Own(
                        append.len().to_string().into_bytes(),
                    )))
                    .chain(append.iter().map(|v| Arg::Own(v.to_string().into_bytes())));
                call.op("L", key, None, items);
            }
            Part::Seen(lane, _) => seen.push((lane, seen_at[i].as_deref())),
        }
    }
    let mut hashes: Vec<(&String, Vec<FieldWrite<'_>>)> = writes
        .hashes
        .iter()
        .map(|(k, fields)| {
            let fields = fields.iter().map(|(f, v)| (f, v.as_deref())).collect();
            (k, fields)
        })
        .collect();
    if !seen.is_empty() {
        hashes.push((&seen_key, seen));
    }
    hashes.sort_by(|a, b| a.0.cmp(b.0));
    for (key, mut fields) in hashes {
        fields.sort_by(|a, b| a.0.cmp(b.0));
        let set: Vec<_> = fields
            .iter()
            .filter_map(|(f, v)| Some((*f, (*v)?)))
            .collect();
        if !set.is_empty() {
            let items = set
                .iter()
                .flat_map(|(f, v)| [Arg::Ref(f.as_bytes()), Arg::Ref(v)]);
            call.op("H", key, Some(set.len()), items);
        }
        let del: Vec<_> = fields.iter().filter(|(_, v)| v.is_none()).collect();
        if !del.is_empty() {
            let items = del.iter().map(|(f, _)| Arg::Ref(f.as_bytes()));
            call.op("h", key, Some(del.len()), items);
        }
    }
    for (key, stage) in &staging.hashes {
        let sx = call.key(stage);
        call.op("M", key, None, [Arg::Own(sx.to_string().into_bytes())]);
    }
    let mut zsets: Vec<_> = writes.zsets.iter().collect();
    zsets.sort_by(|a, b| a.0.cmp(b.0));
    for (key, z) in zsets {
        if !z.removed.is_empty() {
            let mut removed: Vec<_> = z.removed.iter().collect();
            removed.sort();
            let n = removed.len();
            call.op(
                "z",
                key,
                Some(n),
                removed.into_iter().map(|m| Arg::Ref(m.as_bytes())),
            );
        }
        if let Some(stage) = staging.zsets.get(key) {
            let sx = call.key(stage);
            call.op("U", key, None, [Arg::Own(sx.to_string().into_bytes())]);
        } else if writes.ready_bulk.get(key).is_some_and(|v| !v.is_empty()) {
            // Folded before the commit unless large enough to be staged.
            return Err(crate::store::StoreError::Backend(format!(
                "numeric ready entries of {key} neither folded nor staged"
            )));
        } else if !z.added.is_empty() {
            let mut added: Vec<_> = z.added.iter().collect();
            added.sort_by(|a, b| a.0.cmp(b.0));
            let n = added.len();
            let items = added
                .into_iter()
                .flat_map(|(m, s)| [Arg::Own(s.to_string().into_bytes()), Arg::Ref(m.as_bytes())]);
            call.op("Z", key, Some(n), items);
        }
    }
    if !writes.queues_added.is_empty() {
        let names = writes
            .queues_added
            .iter()
            .map(|q| Arg::Own(q.to_string().into_bytes()));
        call.op("A", &keys.queues(), Some(writes.queues_added.len()), names);
    }
    for (key, items) in stream_entries(&writes.streams) {
        let id = stream_id(items.last().map_or(0, |(seq, _)| *seq));
        let block = packed::pack(items);
        call.op(
            "X",
            key,
            Some(1),
            [
                Arg::Own(id.into_bytes()),
                Arg::Ref(packed::FIELD.as_bytes()),
                Arg::Own(block),
            ],
        );
    }
    let wrote = call.ops > 0;
    let cmd = call.command(script);
    Ok(Prepared {
        cmd,
        wrote,
        leaves: if wrote { next } else { version.to_owned() },
    })
}

/// Builds the script call of a write set with nothing to stage; `None` if it has bulk parts
/// (then it commits through [`commit`]).
pub(crate) fn prepare(
    keys: &Keys,
    script: &redis::Script,
    version: &str,
    lock_token: &str,
    writes: &Writes,
    committed: Option<&Meta>,
) -> R<Option<Prepared>> {
    if needs_staging(writes) {
        return Ok(None);
    }
    build(
        keys,
        script,
        version,
        lock_token,
        writes,
        committed,
        &Staging::default(),
    )
    .map(Some)
}

/// Sends a prepared script call (loading the script again if the server lost it), as a
/// write an acknowledgement depends on ([`Conn::acked`]: with `--redis-wait`, it lands only
/// once replicas confirmed it).
pub(crate) async fn send(
    conn: &mut Conn,
    script: &redis::Script,
    prepared: &Prepared,
) -> R<Committed> {
    let sent = std::time::Instant::now();
    let mut answer = conn.acked::<i64>(&prepared.cmd).await;
    if matches!(&answer, Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript)) {
        // The server lost its scripts (a restart, SCRIPT FLUSH, a promoted replica): load it
        // and call again.
        answer = match script.load_async(conn).await {
            Ok(_) => conn.acked::<i64>(&prepared.cmd).await,
            Err(e) => Err(e),
        };
    }
    let counters = conn.counters();
    Counters::bump(&counters.commits);
    Counters::add_since(&counters.commit_us, sent);
    match answer.map_err(redis_err)? {
        1 => Ok(Committed::Yes {
            wrote: prepared.wrote,
            staged: false,
            version: prepared.leaves.clone(),
        }),
        _ => Ok(Committed::Conflict),
    }
}

/// Stages the bulk parts, then applies everything with one script call. `committed` is the
/// meta as stored at `version` (`None`: not read, or no campaign), against which a meta write
/// becomes part writes.
pub(crate) async fn commit(
    conn: &mut Conn,
    keys: &Keys,
    script: &redis::Script,
    version: &str,
    lock_token: &str,
    writes: &Writes,
    committed: Option<&Meta>,
) -> R<Committed> {
    let staging = stage(conn, keys, writes).await?;
    let staged = staging.keys();
    let answer = match build(
        keys, script, version, lock_token, writes, committed, &staging,
    ) {
        Ok(prepared) => send(conn, script, &prepared).await,
        Err(e) => Err(e),
    };
    // The script merges and deletes staging keys only when it commits.
    match answer {
        Ok(Committed::Yes { wrote, version, .. }) => Ok(Committed::Yes {
            wrote,
            staged: !staged.is_empty(),
            version,
        }),
        other => {
            drop_staging(conn, staged).await;
            other
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use lanes_tests::redis_server::RedisServer;

    use super::super::durability::Requirements;
    use super::super::link::Link;

    use super::*;

    /// A write set of one field.
    fn one_write(field: &str) -> Writes {
        let mut w = Writes::default();
        w.hashes
            .entry("lanes:{c:chain}:x".to_owned())
            .or_default()
            .insert(field.to_owned(), Some(b"1".to_vec()));
        w
    }

    /// A fresh durable server, a connection to it, and the keys of campaign `c` with the
    /// commit script.
    async fn committer(c: &str) -> (RedisServer, Conn, Keys, redis::Script) {
        let server = RedisServer::start();
        let client = redis::Client::open(server.url()).expect("client");
        let link = Link::fixed(client, Requirements::default(), None, Arc::default())
            .await
            .expect("connect");
        let script = redis::Script::new(include_str!("commit.lua"));
        (server, Conn::new(link), Keys::new(c), script)
    }

    /// A commit built on another one (expecting the version it leaves), as a replica chains
    /// its rounds, lands only if that one did: here a foreign commit from the same version
    /// lands first, so ours conflicts, and the one built on ours must conflict too, although
    /// the version moved by exactly one commit (with plain counters it would land, on a state
    /// it never read).
    #[tokio::test]
    async fn a_commit_built_on_one_that_did_not_land_never_lands() {
        let (server, mut conn, keys, script) = committer("chain").await;
        let call = |version: &str, field: &str| {
            prepare(&keys, &script, version, "", &one_write(field), None)
                .expect("build")
                .expect("nothing to stage")
        };
        let (foreign, ours) = (call("0", "foreign"), call("0", "ours"));
        let chained = call(&ours.leaves, "chained");
        assert!(matches!(
            send(&mut conn, &script, &foreign).await,
            Ok(Committed::Yes { wrote: true, .. })
        ));
        assert_eq!(
            send(&mut conn, &script, &ours).await.ok(),
            Some(Committed::Conflict)
        );
        assert_eq!(
            send(&mut conn, &script, &chained).await.ok(),
            Some(Committed::Conflict)
        );
        assert_eq!(server.command(&["HLEN", "lanes:{c:chain}:x"]), ":1");
        assert_eq!(
            server.command(&["HGET", "lanes:{c:chain}:x", "foreign"]),
            "1"
        );
        assert_eq!(
            server.command(&["GET", "lanes:{c:chain}:ver"]),
            foreign.leaves
        );
    }

    /// A round's stream items land as one entry per stream, in seq order whatever order they
    /// were written in, split into entries of at most [`ENTRY_ITEMS`] (each one `XADD` of the
    /// script), each entry's id its last item's and its items packed in one field.
    #[tokio::test]
    async fn stream_items_land_as_one_entry_per_stream_and_slice() {
        let (server, mut conn, keys, script) = committer("streams").await;
        let (rows, events) = ("lanes:{c:streams}:results", "lanes:{c:streams}:events");
        let mut w = Writes::default();
        let n = 2 * ENTRY_ITEMS as u64 + 100;
        for seq in (0..n).rev() {
            w.push_stream(rows.into(), seq, format!("row {seq}").into_bytes());
            if seq < 3 {
                w.push_stream(events.into(), seq, format!("event {seq}").into_bytes());
            }
        }
        let call = prepare(&keys, &script, "0", "", &w, None)
            .expect("build")
            .expect("nothing to stage");
        assert!(matches!(
            send(&mut conn, &script, &call).await,
            Ok(Committed::Yes { wrote: true, .. })
        ));
        assert_eq!(server.command(&["XLEN", rows]), ":3");
        assert_eq!(server.command(&["XLEN", events]), ":1");
        let mut plain = redis::Client::open(server.url())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        let mut entries = async |key: &str| -> Vec<redis::streams::StreamId> {
            let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                .arg(key)
                .arg("-")
                .arg("+")
                .query_async(&mut plain)
                .await
                .expect("xrange");
            reply.ids
        };
        let ids = |entries: &[redis::streams::StreamId]| -> Vec<String> {
            entries.iter().map(|e| e.id.clone()).collect()
        };
        let last = |i: u64| stream_id(i - 1);
        let row_entries = entries(rows).await;
        assert_eq!(
            ids(&row_entries),
            [
                last(ENTRY_ITEMS as u64),
                last(2 * ENTRY_ITEMS as u64),
                last(n)
            ]
        );
        assert_eq!(ids(&entries(events).await), [last(3)]);
        // Each entry holds its slice of items packed in one field, in seq order.
        let mut unpacked = Vec::new();
        for e in &row_entries {
            assert_eq!(
                e.map.keys().collect::<Vec<_>>(),
                [packed::FIELD],
                "{}",
                e.id
            );
            let block: Vec<u8> = e.get(packed::FIELD).expect("a packed field");
            let items = packed::unpack(&block).expect("unpacks");
            assert!(items.len() <= ENTRY_ITEMS);
            unpacked.extend(items);
        }
        let want: Vec<(u64, Vec<u8>)> = (0..n)
            .map(|seq| (seq, format!("row {seq}").into_bytes()))
            .collect();
        assert_eq!(unpacked, want);
    }
}
