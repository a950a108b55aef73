//! The Redis backend: the distributed store, shared by any number of coordinator replicas.
//!
//! # How an operation runs
//! Every key of a campaign carries the hash tag `{c:<id>}` (see [`keys`]), so one script can
//! touch any of them, on Redis Cluster too. An operation:
//! 1. reads the campaign's version, or takes the one its cache was left at, unread, while
//!    none of the replica's commits lost to another writer in the last second. The first
//!    attempt is optimistic; a retry after a conflict first takes the campaign's lock
//!    (`SET lock <token> NX PX`), so contending operations queue instead of retrying each
//!    other out;
//! 2. runs the shared engine (the same transitions as the embedded backend, with the same
//!    pure policy), whose reads go to Redis and whose writes are buffered ([`tx`]);
//! 3. commits through **one Lua script**, `commit.lua`, loaded once and called by SHA (reloaded
//!    on NOSCRIPT). The script applies the write set only if the version is unchanged and no
//!    other operation holds the lock, then bumps the version. Otherwise nothing is written and
//!    the operation runs again. So every state transition is atomic even if a lock expired
//!    under a stalled replica. First scored wins is also checked in the script: a counted row does
//!    `HSETNX scored <trial>`, and the script refuses to run if the field already exists.
//!
//! # Rounds
//! A campaign's operations do not run one by one: a replica's concurrent operations on one
//! campaign share a **round** ([`batch`]), one
//! transaction in which each runs in turn under a savepoint, committed by one script call, so
//! they never conflict with each other and share the commit's cost (its script, its fsync).
//! Conflicts remain only between replicas (and with submits); a conflict runs the round again.
//! A round reads through the campaign's [`cache`]: the committed state its last commit left,
//! valid while the stored version is still that commit's, so a replica that is the only writer
//! reads only what it never saw. A round that writes nothing validates its reads by reading
//! the version again instead of committing. Submits and retry passes run alone, after the
//! commits in flight. Deletes, the ledger's streams and the store-wide values
//! ([`store_wide`]) are plain commands outside the rounds.
//!
//! A large submit stages its tasks in chunked staging hashes and its large ready queues in
//! chunked staging sets, each under a key of its own that expires if the writer dies. Only the
//! commit script merges them (`M` for hashes, `U` for sets: a rename when the target does not
//! exist yet, otherwise a copy of the staged entries), so a transaction that
//! loses a version conflict, or a concurrent submit of the same id, never sees another's
//! uncommitted tasks; the campaign becomes visible only when the script commits its meta.
//!
//! # Durability
//! An outcome is acknowledged only after Redis applied it; [`durability`] says when that is
//! durable, and what the store checks at connect.
//!
//! # Layout
//! The shape of the stored data has a version, recorded in `lanes:layout` ([`layout`]). At
//! connect a fresh store is stamped with [`REDIS_LAYOUT`](super::layout::REDIS_LAYOUT), and any other layout is refused
//! ([`LayoutError`](super::layout::LayoutError)); [`RedisStore::migrate`] (`lanes store migrate`) upgrades an older one
//! in place ([`migrate`]).
//!
//! # Connection loss and transient server states
//! Operations run over a `ConnectionManager`, which reconnects in the background. A command
//! that fails because the connection dropped, timed out or was refused, or because the server
//! is in a passing state (loading its AOF after a restart, read-only during a failover, out of
//! memory, busy with a script, ...), fails the operation with [`StoreError::Unavailable`]
//! (retryable), never with a wrong answer. A commit whose
//! reply was lost may or may not have been applied: retrying is safe, because completions and
//! releases are idempotent per token, and an assignment whose claim reply was lost is never
//! renewed and is reaped as `cancelled`.

mod ahead;
mod batch;
mod busy_lanes;
mod cache;
mod commit;
mod conn;
mod delete;
mod durability;
pub mod hot_record;
mod keys;
mod layout;
mod link;
mod meta;
mod migrate;
pub mod packed;
mod sentinel;
mod stats;
mod store_wide;
mod stream;
mod tx;
mod writes;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::batch::Rounds;
use self::cache::Cache;
use self::commit::nonce;
use self::conn::Conn;
pub use self::durability::Durability;
use self::durability::Requirements;
use self::keys::Keys;
use self::link::{Link, Wait, client};
pub use self::sentinel::SentinelOptions;
use self::sentinel::Sentinels;
use self::stats::Counters;
pub use self::stats::RedisStats;
use self::tx::RedisTx;
use super::Store;
use super::api::*;
use super::layout::{MigrationReport, StoreAt};
use super::observe::{CommitObserver, ObserverSlot};
use super::op::{Answer, CampaignOp, Op};
use async_trait::async_trait;

/// How long a campaign lock is held at most before another operation may take it. Short,
/// because a replica that dies holding it stalls the campaign that long; safe, because the
/// commit checks the version, not the lock.
const LOCK_TTL_MS: u64 = 3_000;
/// How long an operation waits for a busy campaign lock before failing as unavailable.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// How long an acknowledged write waits for its replicas (`--redis-wait`) before it counts as
/// not acknowledged. Short, because the wait holds up the connection's later requests.
const WAIT_TIMEOUT_MS: u64 = 1_000;
/// How long a replica reads the version at the start of each transaction after one of its
/// commits lost to another writer, instead of trusting the version its cache was left at.
/// Trusting it saves a round trip per round while the replica is the only writer; while
/// another is busy too, it would make every round conflict once.
const READ_VERSIONS_AFTER_CONFLICT: Duration = Duration::from_secs(1);

/// Server error codes that describe the server's health, not the request: the same request
/// succeeds once the server has finished loading its AOF (`LOADING`), a failover has settled
/// (`READONLY`, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`), a busy script has ended (`BUSY`),
/// memory has been freed (`OOM`), a failing snapshot has been fixed (`MISCONF`), or enough
/// replicas are back (`NOREPLICAS`).
const TRANSIENT_CODES: &[&str] = &[
    "LOADING",
    "READONLY",
    "MASTERDOWN",
    "MISCONF",
    "BUSY",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "OOM",
    "NOREPLICAS",
];

/// Whether a Redis error code is one of [`TRANSIENT_CODES`].
pub(crate) fn is_transient_code(code: &str) -> bool {
    TRANSIENT_CODES.contains(&code)
}

/// Takes a campaign's lock for `token` if nobody holds it (`SET NX PX`); `true` when taken.
/// The store's transactions and `lanes store migrate` both queue on it.
async fn try_lock(
    conn: &mut Conn,
    keys: &Keys,
    token: &str,
    ttl_ms: u64,
) -> Result<bool, StoreError> {
    let got: Option<String> = redis::cmd("SET")
        .arg(keys.lock())
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .query_async(conn)
        .await
        .map_err(redis_err)?;
    Ok(got.is_some())
}

/// Releases the lock if it is still this token's (compare and delete, in one step).
pub(crate) async fn unlock(conn: &mut Conn, keys: &Keys, token: &str) {
    let script = redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    );
    if let Err(e) = script
        .key(keys.lock())
        .arg(token)
        .invoke_async::<i64>(conn)
        .await
    {
        tracing::warn!(error = %e, "could not release a campaign lock; it expires by itself");
    }
}

/// Maps a Redis error: connection trouble and transient server states are retryable
/// ([`StoreError::Unavailable`]), the rest is a backend error.
pub(crate) fn redis_err(e: redis::RedisError) -> StoreError {
    // A pipeline or transaction fails with its commands' errors: transient if one of them is
    // (a `MULTI` aborted by `NOREPLICAS`, say).
    let inner_transient = || {
        e.clone()
            .into_server_errors()
            .is_some_and(|errs| errs.iter().any(|(_, se)| is_transient_code(se.code())))
    };
    if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_connection_refusal()
        || e.code().is_some_and(is_transient_code)
        || inner_transient()
    {
        StoreError::Unavailable(e.to_string())
    } else {
        StoreError::Backend(e.to_string())
    }
}

/// How `lanes store migrate` names this store in messages (no password).
fn store_at(url: &str, opts: &RedisOptions) -> StoreAt {
    match &opts.sentinel {
        None => StoreAt::redis(url),
        Some(s) => StoreAt::RedisSentinel {
            sentinels: s.addrs.join(","),
            master: s.master.clone(),
        },
    }
}

/// Options of the Redis store.
#[derive(Debug, Clone, Default)]
pub struct RedisOptions {
    /// Run even when Redis cannot guarantee that acknowledged writes survive a crash.
    pub allow_lossy: bool,
    /// `--redis-wait N`: every write an acknowledgement depends on waits for N replicas
    /// (`WAIT`), and the master must have `min-replicas-to-write >= N`.
    pub wait_replicas: Option<u32>,
    /// Find the master through these Sentinels; the store's URL then gives only the scheme,
    /// credentials and database.
    pub sentinel: Option<SentinelOptions>,
    /// The CA (PEM) of a `rediss://` server's certificate; the system roots when `None`.
    pub tls_ca_pem: Option<Vec<u8>>,
    /// How long a round of renewals alone waits for more operations before it commits
    /// (`None`: 100 ms). Heartbeats spread over the second then share commits.
    pub renew_linger: Option<std::time::Duration>,
}

/// The store on Redis.
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    counters: Arc<Counters>,
    rounds: Arc<Rounds>,
    script: redis::Script,
    opts: RedisOptions,
    /// Told about each committed transaction's events, and about conflicts.
    observer: ObserverSlot,
    /// When a commit of this replica last lost to another writer ([`Self::begin`]).
    conflicted_at: Arc<Mutex<Option<std::time::Instant>>>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("opts", &self.opts)
            .finish()
    }
}

impl RedisStore {
    /// Connects, checks durability, loads the commit script and checks the store's layout
    /// (stamping a fresh store).
    pub async fn connect(url: &str, opts: RedisOptions) -> Result<Self, StoreError> {
        let store = Self::open(url, opts).await?;
        let mut conn = store.conn.clone();
        durability::check(&mut conn, store.requirements()).await?;
        store
            .script
            .load_async(&mut conn)
            .await
            .map_err(redis_err)?;
        layout::check(&mut conn, &store_at(url, &store.opts)).await?;
        Ok(store)
    }

    /// Upgrades the store at `url` in place to [`REDIS_LAYOUT`](super::layout::REDIS_LAYOUT) (with `dry_run`, only says
    /// what it would do); see the `migrate` module for what it rewrites and what a coordinator still
    /// running meets. Durability is not checked: the migration writes what a coordinator
    /// would, on the server the coordinators use.
    pub async fn migrate(
        url: &str,
        opts: RedisOptions,
        dry_run: bool,
    ) -> Result<MigrationReport, StoreError> {
        let opts = RedisOptions {
            allow_lossy: true,
            ..opts
        };
        let store = Self::open(url, opts).await?;
        let mut conn = store.conn.clone();
        migrate::run(&mut conn, store_at(url, &store.opts), dry_run).await
    }

    /// Connects to the master: at `url`, or the one the Sentinels name (the connection
    /// reconnects by itself from then on, and follows the Sentinels).
    async fn open(url: &str, opts: RedisOptions) -> Result<Self, StoreError> {
        let opts = RedisOptions {
            wait_replicas: opts.wait_replicas.filter(|n| *n > 0),
            ..opts
        };
        let counters = Arc::new(Counters::default());
        let requirements = Self::requirements_of(&opts);
        let wait = opts.wait_replicas.map(|replicas| Wait {
            replicas,
            timeout_ms: WAIT_TIMEOUT_MS,
        });
        let ca = opts.tls_ca_pem.as_deref();
        let link = match &opts.sentinel {
            None => Link::fixed(client(url, ca)?, requirements, wait, counters.clone()).await?,
            Some(s) => {
                Link::sentinel(
                    Sentinels::new(s, ca)?,
                    url.to_owned(),
                    opts.tls_ca_pem.clone(),
                    requirements,
                    wait,
                    counters.clone(),
                )
                .await?
            }
        };
        Ok(Self {
            conn: Conn::new(link),
            counters,
            rounds: Arc::default(),
            script: redis::Script::new(include_str!("commit.lua")),
            opts,
            observer: ObserverSlot::default(),
            conflicted_at: Arc::default(),
        })
    }

    fn requirements_of(opts: &RedisOptions) -> Requirements {
        Requirements {
            allow_lossy: opts.allow_lossy,
            replicas: opts.wait_replicas,
            failover: opts.sentinel.is_some(),
        }
    }

    fn requirements(&self) -> Requirements {
        Self::requirements_of(&self.opts)
    }

    /// The URL of the master: `url` itself, or with Sentinels, `url` pointed at the master
    /// they name now (for tools that dial Redis directly, such as the bench's probes).
    pub async fn master_url(url: &str, opts: &RedisOptions) -> Result<String, StoreError> {
        match &opts.sentinel {
            None => Ok(url.to_owned()),
            Some(s) => {
                let (host, port) = Sentinels::new(s, opts.tls_ca_pem.as_deref())?
                    .master_addr()
                    .await?;
                sentinel::master_url(url, &host, port)
            }
        }
    }

    /// The master in use (`host:port`): the one the Sentinels named last, or the fixed one.
    pub fn master(&self) -> String {
        self.conn.link().master_addr()
    }

    /// What this store (and its clones) sent, and how often its commits conflicted.
    pub fn stats(&self) -> RedisStats {
        let link = self.conn.link();
        RedisStats {
            failovers: link.failovers(),
            wait_timeouts: link.wait_timeouts(),
            ..self.counters.snapshot()
        }
    }

    /// The campaign's stored version, confirmed on the replicas `--redis-wait` asks for
    /// ([`Conn::acked`]): a round that wrote nothing answers from what it read (a retried
    /// completion, its stored acknowledgement), and that must survive a failover too.
    async fn replicated_version(&self, campaign: &str) -> Result<String, StoreError> {
        let mut conn = self.conn.clone();
        let version: Option<String> = conn
            .acked(redis::cmd("GET").arg(Keys::new(campaign).version()))
            .await
            .map_err(redis_err)?;
        Ok(version.unwrap_or_else(|| "0".into()))
    }

    /// The campaign's stored version.
    async fn read_version(&self, campaign: &str) -> Result<String, StoreError> {
        let mut conn = self.conn.clone();
        let version: Option<String> = redis::cmd("GET")
            .arg(Keys::new(campaign).version())
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        Ok(version.unwrap_or_else(|| "0".into()))
    }

    /// Starts a transaction at the stored version, from `cache` if it is of that version; or,
    /// unlocked and trusting its versions, at `cache`'s version unread. The first attempt of an operation is optimistic (no lock, so no extra write); after a
    /// conflict it takes the campaign lock so contending operations queue instead of
    /// retrying each other out.
    async fn begin(
        &self,
        campaign: &str,
        locked: bool,
        cache: Option<Cache>,
    ) -> Result<RedisTx, StoreError> {
        let keys = Keys::new(campaign);
        let conn = self.conn.clone();
        Counters::bump(&self.counters.attempts);
        let token = if locked {
            self.lock(&keys, campaign).await?
        } else {
            String::new()
        };
        let version = match &cache {
            // Optimistic: the version this replica's last commit left, unread. A commit of
            // another writer since then makes this transaction's commit conflict, and it runs
            // again from a version read; after a conflict the version is read for a while, so
            // busy replicas sharing a campaign do not conflict at every round.
            Some(c) if !locked && self.trusts_its_versions() => c.version.clone(),
            _ => self.read_version(campaign).await?,
        };
        // A cache grown too large is trimmed to its windows' read-ahead (nothing is in
        // flight behind a cache `begin` is given), or dropped.
        let cache = match cache {
            Some(c) if c.version == version && !c.is_large() => c,
            Some(c) if c.version == version => match tx::trimmed(&keys, c) {
                Some(c) => {
                    Counters::bump(&self.counters.trims);
                    c
                }
                None => Cache::at(version),
            },
            _ => Cache::at(version),
        };
        Ok(RedisTx::new(conn, keys, cache, token))
    }

    /// Takes the campaign lock, waiting while another operation holds it; answers its token.
    async fn lock(&self, keys: &Keys, campaign: &str) -> Result<String, StoreError> {
        let mut conn = self.conn.clone();
        let token = nonce().to_string();
        let started = std::time::Instant::now();
        let mut pause = 100u64;
        loop {
            if try_lock(&mut conn, keys, &token, LOCK_TTL_MS).await? {
                return Ok(token);
            }
            Counters::bump(&self.counters.lock_waits);
            if started.elapsed() > LOCK_WAIT {
                return Err(StoreError::Unavailable(format!(
                    "campaign {campaign} stayed locked for {LOCK_WAIT:?}"
                )));
            }
            // Backoff with jitter while another operation holds the lock.
            let jitter = nonce() % pause.max(1);
            tokio::time::sleep(Duration::from_micros(pause + jitter)).await;
            pause = (pause * 2).min(5_000);
        }
    }

    /// Gives the lock back after an operation that failed before its commit: the engine's
    /// writes are dropped, and an empty commit only releases the lock.
    async fn abort(&self, mut tx: RedisTx) {
        if tx.locked() {
            tx.discard();
            let _ = tx.commit(&self.script).await;
        }
    }

    /// A commit lost to another writer's: counted here and told to the observer.
    fn conflicted(&self) {
        Counters::bump(&self.counters.conflicts);
        self.observer.conflicted();
        *self.conflicted_at.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(std::time::Instant::now());
    }

    /// Whether a transaction may start at the version its cache was left at without reading
    /// it: not within [`READ_VERSIONS_AFTER_CONFLICT`] of a lost commit, when other writers
    /// are likely busy on the same campaigns.
    fn trusts_its_versions(&self) -> bool {
        self.conflicted_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none_or(|t| t.elapsed() >= READ_VERSIONS_AFTER_CONFLICT)
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn execute(&self, op: Op) -> Result<Answer, StoreError> {
        Ok(match op {
            Op::Campaign(op) => {
                if let CampaignOp::Submit { campaign, .. } = &op {
                    self.list_campaign(&campaign.spec.id).await?;
                }
                self.in_round(op).await?
            }
            Op::Delete { campaign } => Answer::Deleted(self.delete_campaign(&campaign).await?),
            Op::Rows {
                campaign,
                from,
                limit,
            } => {
                let key = Keys::new(campaign.as_str()).results().to_string();
                Answer::Rows(self.read_stream(key, from, limit).await?)
            }
            Op::Events {
                campaign,
                from,
                limit,
            } => {
                let key = Keys::new(campaign.as_str()).events().to_string();
                Answer::Events(self.read_stream(key, from, limit).await?)
            }
            Op::List => Answer::Campaigns(self.campaign_ids().await?),
            Op::LeaseKey { fresh } => Answer::LeaseKey(self.keep_lease_key(fresh).await?),
            Op::PutLoginCode { digest, grant, now } => {
                self.put_code(digest, grant, now).await?;
                Answer::Done
            }
            Op::TakeLoginCode { digest, now } => Answer::Grant(self.take_code(digest, now).await?),
            Op::MissingBundles { digests } => Answer::Missing(self.missing(digests).await?),
            Op::PutBundle { digest, encoded } => {
                Answer::Stored(self.keep_bundle(digest, encoded).await?)
            }
            Op::Bundle { digest } => Answer::Bundle(self.bundle_bytes(digest).await?),
            Op::Ping => {
                self.ping_server().await?;
                Answer::Done
            }
        })
    }

    fn set_observer(&self, observer: Arc<dyn CommitObserver>) {
        self.observer.set(observer);
    }

    fn redis_link(&self) -> Option<RedisLink> {
        let link = self.conn.link();
        Some(RedisLink {
            master: link.master_addr(),
            failovers: link.failovers(),
            wait_timeouts: link.wait_timeouts(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_server_states_are_unavailable_and_the_rest_is_backend() {
        use redis::{ErrorKind, RedisError, ServerErrorKind};
        for kind in [
            ServerErrorKind::BusyLoading,
            ServerErrorKind::ReadOnly,
            ServerErrorKind::MasterDown,
            ServerErrorKind::TryAgain,
            ServerErrorKind::ClusterDown,
        ] {
            let e = RedisError::from((ErrorKind::Server(kind), "passing state"));
            assert!(redis_err(e).is_retryable(), "{kind:?}");
        }
        for code in ["MISCONF", "BUSY", "OOM", "NOREPLICAS", "LOADING"] {
            assert!(is_transient_code(code), "{code}");
            let e = redis::make_extension_error(code.into(), None);
            assert!(redis_err(e).is_retryable(), "{code}");
        }
        for kind in [ServerErrorKind::NoPerm, ServerErrorKind::ResponseError] {
            let e = RedisError::from((ErrorKind::Server(kind), "request error"));
            assert!(!redis_err(e).is_retryable(), "{kind:?}");
        }
    }
}
