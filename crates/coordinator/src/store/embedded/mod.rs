//! The embedded backend: one redb file per data directory. Operations that may write run on
//! one writer thread, many to a write transaction (group commit, see [`writer`]); each is
//! answered only after its transaction committed durably (fsynced), so a reopened file keeps
//! everything that was acknowledged. Reads of committed data (rows, events, the campaign
//! list) use read transactions and wait for no writer. The file records its layout
//! ([`layout`]); a file of another layout is refused when the store opens.

mod batch;
mod layout;
mod redb_tx;
mod staged;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;

use lanes_common::ids::{CampaignId, Token};
use lanes_common::lease::LeaseKey;
use lanes_common::row::{Outcome, Phase, Row};
use lanes_common::spec::{Campaign, CampaignSpec};
use lanes_common::state::{CampaignState, StopMode};
use lanes_common::utc::EpochMs;

use super::Store;
use super::api::*;
use super::engine;
use super::layout::{MigrationReport, StoreAt};
use super::observe::{CommitObserver, ObserverSlot};
use super::tx::{R, Tx};
use redb_tx::{RedbTx, key, prefix, prefix_end};
pub use writer::WriteStats;
use writer::{Mode, Writer};

type Table = TableDefinition<'static, &'static [u8], &'static [u8]>;

const META: Table = TableDefinition::new("meta");
const TASKS: Table = TableDefinition::new("tasks");
const TASK_POS: Table = TableDefinition::new("task_pos");
const TRIALS: Table = TableDefinition::new("trials");
const LEASES: Table = TableDefinition::new("leases");
const DEADLINES: Table = TableDefinition::new("deadlines");
const READY: Table = TableDefinition::new("ready");
const DELAYED: Table = TableDefinition::new("delayed");
const TOKENS: Table = TableDefinition::new("tokens");
const ROWS: Table = TableDefinition::new("rows");
const EVENTS: Table = TableDefinition::new("events");
const BLOCKS: Table = TableDefinition::new("blocks");
/// Store-wide values that belong to no campaign (the lease key).
const SECRETS: Table = TableDefinition::new("secrets");
const LEASE_KEY: &[u8] = b"lease_key";
/// Task folders, encoded, by digest: they belong to no campaign.
const BUNDLES: Table = TableDefinition::new("bundles");
/// Dashboard login codes in [`SECRETS`]: this prefix, then the code's digest in hex.
const LOGIN_CODE: &[u8] = b"login_code:";
/// Expired login codes removed per code kept (each put sweeps a few).
const LOGIN_SWEEP: usize = 64;
/// Every table, created when the store opens and held open by each write batch.
const ALL: [Table; 14] = [
    META, TASKS, TASK_POS, TRIALS, LEASES, DEADLINES, READY, DELAYED, TOKENS, ROWS, EVENTS, BLOCKS,
    SECRETS, BUNDLES,
];

/// The key of a login code in [`SECRETS`].
fn login_key(digest: &[u8; 32]) -> Vec<u8> {
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    [LOGIN_CODE, hex.as_bytes()].concat()
}

/// The file inside a data directory.
pub const FILE_NAME: &str = "lanes.redb";

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

/// The store on a local redb file. Clones share the file and its writer; the file closes
/// when the last clone is dropped.
#[derive(Clone)]
pub struct EmbeddedStore {
    shared: Arc<Shared>,
}

struct Shared {
    /// Declared first so it is dropped first: it waits for the writer thread, which holds
    /// the other handle to the database.
    writer: Writer,
    db: Arc<Database>,
    /// Told about each committed batch's events.
    observer: ObserverSlot,
    path: PathBuf,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("path", &self.shared.path)
            .finish()
    }
}

/// redb's page cache. Its default (1 GiB) let a 1M-trial campaign's pages grow the
/// coordinator to ~900 MB; the hot path reads few pages (the meta, the ready scan, leases), so
/// a small cache costs it nothing measurable (`cargo bench --bench store`).
const CACHE_BYTES: usize = 32 << 20;

impl EmbeddedStore {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        Self::open_with_linger(dir, writer::LINGER)
    }

    /// [`Self::open`] with another linger for batches of renewals (tests).
    fn open_with_linger(dir: &Path, linger: std::time::Duration) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| backend(format!("cannot create {}: {e}", dir.display())))?;
        let path = dir.join(FILE_NAME);
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(&path)
            .map_err(|e| backend(format!("cannot open {}: {e}", path.display())))?;
        let txn = db.begin_write().map_err(backend)?;
        // The layout first: a file of another layout is left as it is.
        if let Err(e) = layout::check(&txn, &StoreAt::Embedded(dir.to_owned())) {
            txn.abort().map_err(backend)?;
            return Err(e);
        }
        for t in ALL {
            txn.open_table(t).map_err(backend)?;
        }
        txn.commit().map_err(backend)?;
        let db = Arc::new(db);
        let observer = ObserverSlot::default();
        Ok(Self {
            shared: Arc::new(Shared {
                writer: Writer::start(db.clone(), linger, observer.clone())?,
                db,
                observer,
                path,
            }),
        })
    }

    /// Upgrades the store in `dir` in place to [`EMBEDDED_LAYOUT`](super::layout::EMBEDDED_LAYOUT) (with `dry_run`, only says
    /// what it would do). Fails if the store is open elsewhere.
    pub fn migrate(dir: &Path, dry_run: bool) -> Result<MigrationReport, StoreError> {
        layout::migrate(dir, dry_run)
    }

    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// How many operations the writer ran, in how many transactions and durable commits.
    pub fn write_stats(&self) -> WriteStats {
        self.shared.writer.stats()
    }

    /// Runs `f` in the writer's next batch; its writes count only if it returns `Ok`, and the
    /// answer comes once the batch committed.
    async fn write<T, F>(&self, campaign: &CampaignId, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut RedbTx<'_, '_>) -> R<T> + Send + 'static,
    {
        self.write_as(campaign, Mode::Batched, f).await
    }

    /// [`Self::write`], sharing the batch as `mode` says (see `writer`).
    async fn write_as<T, F>(&self, campaign: &CampaignId, mode: Mode, f: F) -> R<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut RedbTx<'_, '_>) -> R<T> + Send + 'static,
    {
        self.shared.writer.run(campaign.to_string(), mode, f).await
    }

    async fn read_range<T: DeserializeOwned + Send + 'static>(
        &self,
        table: Table,
        campaign: &CampaignId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<T>, StoreError> {
        let db = self.shared.db.clone();
        let campaign = campaign.to_string();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(backend)?;
            let t = txn.open_table(table).map_err(backend)?;
            let start = key(campaign.as_bytes(), &[&from.to_be_bytes()]);
            let end = prefix_end(&prefix(campaign.as_bytes()));
            let mut out = Vec::new();
            for item in t.range(start.as_slice()..end.as_slice()).map_err(backend)? {
                let (_, v) = item.map_err(backend)?;
                out.push(serde_json::from_slice(v.value()).map_err(corrupt)?);
                if out.len() >= limit {
                    break;
                }
            }
            Ok(out)
        })
        .await
        .map_err(|e| backend(format!("store task failed: {e}")))?
    }
}

/// Runs a future that never waits: the engine over a redb transaction does only blocking
/// work, so its future is ready at the first poll.
fn ready<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => unreachable!("a redb transaction never waits"),
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn requeue_excluded(
        &self,
        campaign: &CampaignId,
        req: RequeueRequest,
        now_ms: EpochMs,
    ) -> Result<Requeued, StoreError> {
        let c = campaign.clone();
        // Solo: a pass may requeue many trials, written straight into its own transaction.
        self.write_as(campaign, Mode::Solo, move |tx| {
            ready(engine::requeue(tx, &c, &req, now_ms))
        })
        .await
    }

    async fn delete(&self, campaign: &CampaignId) -> Result<Deleted, StoreError> {
        let c = campaign.clone();
        // Solo: the delete writes straight into a transaction of its own.
        self.write_as(campaign, Mode::Solo, move |tx| {
            let meta = ready(tx.meta())?.ok_or_else(|| StoreError::UnknownCampaign(c.clone()))?;
            let deleted = engine::deletable(&meta, &c)?;
            tx.delete_campaign()?;
            Ok(deleted)
        })
        .await
    }

    async fn submit(&self, campaign: Campaign, now_ms: EpochMs) -> Result<Submitted, StoreError> {
        let id = campaign.spec.id.clone();
        // Solo: a large submit writes straight into its own transaction.
        self.write_as(&id, Mode::Solo, move |tx| {
            ready(engine::submit(tx, &campaign, now_ms))
        })
        .await
    }

    async fn claim(
        &self,
        campaign: &CampaignId,
        req: ClaimRequest,
        now_ms: EpochMs,
    ) -> Result<ClaimOutcome, StoreError> {
        let c = campaign.clone();
        self.write(campaign, move |tx| {
            ready(engine::claim(tx, &c, &req, now_ms))
        })
        .await
    }

    async fn renew(
        &self,
        campaign: &CampaignId,
        tokens: Vec<(Token, Phase)>,
        now_ms: EpochMs,
    ) -> Result<Vec<(Token, RenewState)>, StoreError> {
        let c = campaign.clone();
        // Lingers: heartbeats spread over the second share commits.
        self.write_as(campaign, Mode::Lingering, move |tx| {
            ready(engine::renew(tx, &c, &tokens, now_ms))
        })
        .await
    }

    async fn forfeit(
        &self,
        campaign: &CampaignId,
        worker: &str,
        tokens: Vec<Token>,
        now_ms: EpochMs,
    ) -> Result<Vec<Token>, StoreError> {
        let c = campaign.clone();
        let worker = worker.to_owned();
        self.write(campaign, move |tx| {
            ready(engine::forfeit(tx, &c, &worker, &tokens, now_ms))
        })
        .await
    }

    async fn complete(
        &self,
        campaign: &CampaignId,
        outcome: Outcome,
        now_ms: EpochMs,
    ) -> Result<CompleteAck, StoreError> {
        let c = campaign.clone();
        self.write(campaign, move |tx| {
            ready(engine::complete(tx, &c, outcome, now_ms))
        })
        .await
    }

    async fn release(
        &self,
        campaign: &CampaignId,
        release: Release,
        now_ms: EpochMs,
    ) -> Result<CompleteAck, StoreError> {
        let c = campaign.clone();
        self.write(campaign, move |tx| {
            ready(engine::release(tx, &c, &release, now_ms))
        })
        .await
    }

    async fn reap(&self, campaign: &CampaignId, now_ms: EpochMs) -> Result<ReapReport, StoreError> {
        let c = campaign.clone();
        self.write(campaign, move |tx| ready(engine::reap(tx, &c, now_ms)))
            .await
    }

    async fn stop(
        &self,
        campaign: &CampaignId,
        mode: StopMode,
        now_ms: EpochMs,
    ) -> Result<CampaignState, StoreError> {
        let c = campaign.clone();
        self.write(campaign, move |tx| {
            ready(engine::stop(tx, &c, mode, now_ms))
        })
        .await
    }

    async fn status(
        &self,
        campaign: &CampaignId,
        now_ms: EpochMs,
    ) -> Result<CampaignStatus, StoreError> {
        let c = campaign.clone();
        self.write(campaign, move |tx| ready(engine::status(tx, &c, now_ms)))
            .await
    }

    async fn rows(
        &self,
        campaign: &CampaignId,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<Row>, StoreError> {
        self.read_range(ROWS, campaign, from_seq, limit).await
    }

    async fn events(
        &self,
        campaign: &CampaignId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.read_range(EVENTS, campaign, from, limit).await
    }

    async fn spec(&self, campaign: &CampaignId) -> Result<CampaignSpec, StoreError> {
        let c = campaign.clone();
        self.write(campaign, move |tx| ready(engine::spec(tx, &c)))
            .await
    }

    async fn campaign(&self, campaign: &CampaignId) -> Result<Campaign, StoreError> {
        let c = campaign.clone();
        self.write(campaign, move |tx| ready(engine::campaign(tx, &c)))
            .await
    }

    async fn lease_key(&self, fresh: LeaseKey) -> Result<LeaseKey, StoreError> {
        // The key belongs to no campaign: the view's campaign prefix goes unused.
        let writer = &self.shared.writer;
        writer
            .run(String::new(), Mode::Batched, move |tx| {
                match tx.get_raw(SECRETS, LEASE_KEY)? {
                    Some(bytes) => std::str::from_utf8(&bytes)
                        .ok()
                        .and_then(LeaseKey::from_hex)
                        .ok_or_else(|| corrupt("the stored lease key is not 32 bytes of hex")),
                    None => {
                        tx.put_raw(SECRETS, LEASE_KEY, fresh.to_hex().as_bytes())?;
                        Ok(fresh)
                    }
                }
            })
            .await
    }

    async fn put_login_code(
        &self,
        digest: [u8; 32],
        grant: LoginGrant,
        now_ms: EpochMs,
    ) -> Result<(), StoreError> {
        if grant.expires_ms <= now_ms {
            return Ok(());
        }
        let value = serde_json::to_vec(&grant).map_err(backend)?;
        self.shared
            .writer
            .run(String::new(), Mode::Batched, move |tx| {
                // Codes nobody used are swept here, a few per new one, so they never pile up.
                for (k, v) in tx.scan_prefix(SECRETS, LOGIN_CODE, LOGIN_SWEEP)? {
                    let expired = serde_json::from_slice::<LoginGrant>(&v)
                        .map_or(true, |g| g.expires_ms <= now_ms);
                    if expired {
                        tx.del(SECRETS, &[LOGIN_CODE, &k].concat())?;
                    }
                }
                tx.put_raw(SECRETS, &login_key(&digest), &value)
            })
            .await
    }

    async fn take_login_code(
        &self,
        digest: [u8; 32],
        now_ms: EpochMs,
    ) -> Result<Option<LoginGrant>, StoreError> {
        self.shared
            .writer
            .run(String::new(), Mode::Batched, move |tx| {
                let k = login_key(&digest);
                let Some(bytes) = tx.get_raw(SECRETS, &k)? else {
                    return Ok(None);
                };
                tx.del(SECRETS, &k)?;
                let grant: LoginGrant = serde_json::from_slice(&bytes).map_err(corrupt)?;
                Ok((grant.expires_ms > now_ms).then_some(grant))
            })
            .await
    }

    async fn missing_bundles(&self, digests: Vec<String>) -> Result<Vec<String>, StoreError> {
        let db = self.shared.db.clone();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(backend)?;
            let t = txn.open_table(BUNDLES).map_err(backend)?;
            let mut missing = Vec::new();
            for d in digests {
                if t.get(d.as_bytes()).map_err(backend)?.is_none() {
                    missing.push(d);
                }
            }
            Ok(missing)
        })
        .await
        .map_err(|e| backend(format!("store task failed: {e}")))?
    }

    async fn put_bundle(&self, digest: String, encoded: Vec<u8>) -> Result<bool, StoreError> {
        self.shared
            .writer
            .run(String::new(), Mode::Batched, move |tx| {
                if tx.get_raw(BUNDLES, digest.as_bytes())?.is_some() {
                    return Ok(false);
                }
                tx.put_raw(BUNDLES, digest.as_bytes(), &encoded)?;
                Ok(true)
            })
            .await
    }

    async fn bundle(&self, digest: String) -> Result<Option<Vec<u8>>, StoreError> {
        let db = self.shared.db.clone();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(backend)?;
            let t = txn.open_table(BUNDLES).map_err(backend)?;
            let found = t.get(digest.as_bytes()).map_err(backend)?;
            Ok(found.map(|v| v.value().to_vec()))
        })
        .await
        .map_err(|e| backend(format!("store task failed: {e}")))?
    }

    async fn list(&self) -> Result<Vec<CampaignId>, StoreError> {
        let db = self.shared.db.clone();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(backend)?;
            let t = txn.open_table(META).map_err(backend)?;
            let mut out = Vec::new();
            for item in t.iter().map_err(backend)? {
                let (k, _) = item.map_err(backend)?;
                let id = std::str::from_utf8(k.value()).map_err(corrupt)?;
                out.push(CampaignId::new(id).map_err(corrupt)?);
            }
            Ok(out)
        })
        .await
        .map_err(|e| backend(format!("store task failed: {e}")))?
    }

    fn set_observer(&self, observer: Arc<dyn CommitObserver>) {
        self.shared.observer.set(observer);
    }
}

#[cfg(test)]
mod tests;
