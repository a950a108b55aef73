//! The embedded backend: one redb file per data directory. Operations that may write run on
//! one writer thread, many to a write transaction (group commit, see [`writer`]); each is
//! answered only after its transaction committed durably (fsynced), so a reopened file keeps
//! everything that was acknowledged. Reads of committed data (rows, events, the campaign
//! list) use read transactions and wait for no writer. The file records its layout
//! ([`layout`]); a file of another layout is refused when the store opens.

mod apply;
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

use lanes_common::ids::CampaignId;

use super::Store;
use super::api::*;
use super::layout::{MigrationReport, StoreAt};
use super::observe::{CommitObserver, ObserverSlot};
use super::op::{Answer, Op};
use super::tx::R;
use redb_tx::{key, prefix, prefix_end};
pub use writer::WriteStats;
use writer::{Write, Writer};

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

    /// [`Self::open`] with another linger for batches of renewals: how long a batch of
    /// renewals alone waits for more operations before it commits (tests use a short one, so
    /// a lone renewal does not wait the production 100 ms).
    #[doc(hidden)]
    pub fn open_with_linger(dir: &Path, linger: std::time::Duration) -> Result<Self, StoreError> {
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

impl EmbeddedStore {
    /// Committed campaign ids, in id order.
    async fn campaign_ids(&self) -> R<Vec<CampaignId>> {
        self.read(|txn| {
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
    }

    /// Which of `digests` no committed task folder has, in order.
    async fn missing(&self, digests: Vec<String>) -> R<Vec<String>> {
        self.read(move |txn| {
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
    }

    async fn bundle_bytes(&self, digest: String) -> R<Option<Vec<u8>>> {
        self.read(move |txn| {
            let t = txn.open_table(BUNDLES).map_err(backend)?;
            let found = t.get(digest.as_bytes()).map_err(backend)?;
            Ok(found.map(|v| v.value().to_vec()))
        })
        .await
    }

    /// Runs `f` in a read transaction of committed data, off the async threads.
    async fn read<T, F>(&self, f: F) -> R<T>
    where
        T: Send + 'static,
        F: FnOnce(&redb::ReadTransaction) -> R<T> + Send + 'static,
    {
        let db = self.shared.db.clone();
        tokio::task::spawn_blocking(move || f(&db.begin_read().map_err(backend)?))
            .await
            .map_err(|e| backend(format!("store task failed: {e}")))?
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn execute(&self, op: Op) -> R<Answer> {
        Ok(match op {
            // Reads of committed data wait for no writer.
            Op::Rows {
                campaign,
                from,
                limit,
            } => Answer::Rows(self.read_range(ROWS, &campaign, from, limit).await?),
            Op::Events {
                campaign,
                from,
                limit,
            } => Answer::Events(self.read_range(EVENTS, &campaign, from, limit).await?),
            Op::List => Answer::Campaigns(self.campaign_ids().await?),
            Op::MissingBundles { digests } => Answer::Missing(self.missing(digests).await?),
            Op::Bundle { digest } => Answer::Bundle(self.bundle_bytes(digest).await?),
            Op::Ping => Answer::Done,
            // Everything else may write: the writer's next batch it may share.
            op => self.shared.writer.run(Write::Op(op)).await?,
        })
    }

    fn set_observer(&self, observer: Arc<dyn CommitObserver>) {
        self.shared.observer.set(observer);
    }
}

#[cfg(test)]
mod tests;
