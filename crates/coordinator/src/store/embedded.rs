//! The embedded backend: one redb file per data directory, every operation one write
//! transaction (fsynced on commit, so a reopened file keeps everything that was committed).
//!
//! Keys are byte strings, `<campaign> 0x00 <fields>`, with integers big-endian (signed ones
//! with their sign bit flipped) so byte order is numeric order and a campaign is a prefix.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};
use serde::Serialize;
use serde::de::DeserializeOwned;

use lanes_common::ids::{CampaignId, Token};
use lanes_common::lease::LeaseKey;
use lanes_common::row::{Outcome, Phase, Row};
use lanes_common::spec::{Campaign, CampaignSpec, Task};
use lanes_common::state::{CampaignState, StopMode};
use lanes_common::utc::EpochMs;

use super::Store;
use super::api::*;
use super::engine;
use super::model::{BlockState, Lease, Meta, Queue, TokenRecord, TrialState};
use super::tx::{R, Tx};

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

/// The file inside a data directory.
pub const FILE_NAME: &str = "lanes.redb";

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(e.to_string())
}

/// The store on a local redb file.
#[derive(Clone)]
pub struct EmbeddedStore {
    db: Arc<Database>,
    path: PathBuf,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("path", &self.path)
            .finish()
    }
}

impl EmbeddedStore {
    /// Opens (or creates) the store in `dir`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| backend(format!("cannot create {}: {e}", dir.display())))?;
        let path = dir.join(FILE_NAME);
        let db = Database::create(&path)
            .map_err(|e| backend(format!("cannot open {}: {e}", path.display())))?;
        let txn = db.begin_write().map_err(backend)?;
        for t in [
            META, TASKS, TASK_POS, TRIALS, LEASES, DEADLINES, READY, DELAYED, TOKENS, ROWS, EVENTS,
            BLOCKS,
        ] {
            txn.open_table(t).map_err(backend)?;
        }
        txn.commit().map_err(backend)?;
        Ok(Self {
            db: Arc::new(db),
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` in one write transaction on a blocking thread; commits only on `Ok`.
    async fn write<T, F>(&self, campaign: &CampaignId, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut RedbTx<'_>) -> R<T> + Send + 'static,
    {
        let db = self.db.clone();
        let campaign = campaign.to_string();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_write().map_err(backend)?;
            let out = {
                let mut tx = RedbTx {
                    txn: &txn,
                    campaign: campaign.as_bytes(),
                };
                f(&mut tx)?
            };
            txn.commit().map_err(backend)?;
            Ok(out)
        })
        .await
        .map_err(|e| backend(format!("store task failed: {e}")))?
    }

    async fn read_range<T: DeserializeOwned + Send + 'static>(
        &self,
        table: Table,
        campaign: &CampaignId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<T>, StoreError> {
        let db = self.db.clone();
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

fn prefix(campaign: &[u8]) -> Vec<u8> {
    let mut k = campaign.to_vec();
    k.push(0);
    k
}

fn key(campaign: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut k = prefix(campaign);
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            k.push(0);
        }
        k.extend_from_slice(p);
    }
    k
}

/// The smallest key greater than every key starting with `p`.
fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut e = p.to_vec();
    e.push(0xff);
    e
}

fn signed(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

fn unsigned_back(b: &[u8]) -> R<i64> {
    let arr: [u8; 8] = b.try_into().map_err(|_| corrupt("bad time key"))?;
    Ok((u64::from_be_bytes(arr) ^ (1 << 63)) as i64)
}

/// A write transaction seen through one campaign's keys.
pub(crate) struct RedbTx<'a> {
    txn: &'a WriteTransaction,
    campaign: &'a [u8],
}

impl RedbTx<'_> {
    fn get<T: DeserializeOwned>(&self, table: Table, k: &[u8]) -> R<Option<T>> {
        let t = self.txn.open_table(table).map_err(backend)?;
        match t.get(k).map_err(backend)? {
            Some(v) => Ok(Some(serde_json::from_slice(v.value()).map_err(corrupt)?)),
            None => Ok(None),
        }
    }

    fn put<T: Serialize>(&self, table: Table, k: &[u8], v: &T) -> R<()> {
        let bytes = serde_json::to_vec(v).map_err(backend)?;
        let mut t = self.txn.open_table(table).map_err(backend)?;
        t.insert(k, bytes.as_slice()).map_err(backend)?;
        Ok(())
    }

    fn put_raw(&self, table: Table, k: &[u8], v: &[u8]) -> R<()> {
        let mut t = self.txn.open_table(table).map_err(backend)?;
        t.insert(k, v).map_err(backend)?;
        Ok(())
    }

    fn del(&self, table: Table, k: &[u8]) -> R<bool> {
        let mut t = self.txn.open_table(table).map_err(backend)?;
        Ok(t.remove(k).map_err(backend)?.is_some())
    }

    /// Keys (without the given prefix) and values in `[start, end)`, at most `limit`.
    fn scan(
        &self,
        table: Table,
        strip: usize,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
        let t = self.txn.open_table(table).map_err(backend)?;
        let mut out = Vec::new();
        for item in t.range(start..end).map_err(backend)? {
            let (k, v) = item.map_err(backend)?;
            out.push((k.value()[strip..].to_vec(), v.value().to_vec()));
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }

    fn scan_prefix(&self, table: Table, p: &[u8], limit: usize) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
        self.scan(table, p.len(), p, &prefix_end(p), limit)
    }

    fn k(&self, parts: &[&[u8]]) -> Vec<u8> {
        key(self.campaign, parts)
    }
}

fn utf8(b: Vec<u8>) -> R<String> {
    String::from_utf8(b).map_err(corrupt)
}

/// Splits `<time:8> 0x00 <trial>`.
fn time_and_trial(k: Vec<u8>) -> R<(EpochMs, String)> {
    if k.len() < 9 {
        return Err(corrupt("bad time key"));
    }
    Ok((unsigned_back(&k[..8])?, utf8(k[9..].to_vec())?))
}

impl Tx for RedbTx<'_> {
    async fn meta(&mut self) -> R<Option<Meta>> {
        self.get(META, self.campaign)
    }
    async fn put_meta(&mut self, meta: &Meta) -> R<()> {
        self.put(META, self.campaign, meta)
    }

    async fn task(&mut self, pos: u32) -> R<Task> {
        self.get(TASKS, &self.k(&[&pos.to_be_bytes()]))?
            .ok_or_else(|| corrupt(format!("task {pos} missing")))
    }
    async fn put_task(&mut self, pos: u32, task: &Task) -> R<()> {
        self.put(TASKS, &self.k(&[&pos.to_be_bytes()]), task)?;
        self.put_raw(
            TASK_POS,
            &self.k(&[task.id.as_str().as_bytes()]),
            &pos.to_be_bytes(),
        )
    }
    async fn tasks(&mut self) -> R<Vec<Task>> {
        self.scan_prefix(TASKS, &prefix(self.campaign), usize::MAX)?
            .into_iter()
            .map(|(_, v)| serde_json::from_slice(&v).map_err(corrupt))
            .collect()
    }
    async fn task_pos(&mut self, id: &str) -> R<Option<u32>> {
        let t = self.txn.open_table(TASK_POS).map_err(backend)?;
        let k = self.k(&[id.as_bytes()]);
        match t.get(k.as_slice()).map_err(backend)? {
            Some(v) => {
                let arr: [u8; 4] = v.value().try_into().map_err(|_| corrupt("bad task pos"))?;
                Ok(Some(u32::from_be_bytes(arr)))
            }
            None => Ok(None),
        }
    }

    async fn trial(&mut self, id: &str) -> R<Option<TrialState>> {
        self.get(TRIALS, &self.k(&[id.as_bytes()]))
    }
    async fn put_trial(&mut self, id: &str, state: &TrialState) -> R<()> {
        self.put(TRIALS, &self.k(&[id.as_bytes()]), state)
    }
    async fn trial_ids(&mut self) -> R<Vec<String>> {
        self.scan_prefix(TRIALS, &prefix(self.campaign), usize::MAX)?
            .into_iter()
            .map(|(k, _)| utf8(k))
            .collect()
    }

    async fn lease(&mut self, trial: &str) -> R<Option<Lease>> {
        self.get(LEASES, &self.k(&[trial.as_bytes()]))
    }
    async fn put_lease(&mut self, trial: &str, lease: &Lease) -> R<()> {
        self.put(LEASES, &self.k(&[trial.as_bytes()]), lease)
    }
    async fn del_lease(&mut self, trial: &str) -> R<()> {
        self.del(LEASES, &self.k(&[trial.as_bytes()])).map(drop)
    }
    async fn leases(&mut self) -> R<Vec<(String, Lease)>> {
        self.scan_prefix(LEASES, &prefix(self.campaign), usize::MAX)?
            .into_iter()
            .map(|(k, v)| Ok((utf8(k)?, serde_json::from_slice(&v).map_err(corrupt)?)))
            .collect()
    }

    async fn add_deadline(&mut self, at: EpochMs, trial: &str) -> R<()> {
        self.put_raw(DEADLINES, &self.k(&[&signed(at), trial.as_bytes()]), &[])
    }
    async fn del_deadline(&mut self, at: EpochMs, trial: &str) -> R<()> {
        self.del(DEADLINES, &self.k(&[&signed(at), trial.as_bytes()]))
            .map(drop)
    }
    async fn deadlines_due(&mut self, before: EpochMs, limit: usize) -> R<Vec<(EpochMs, String)>> {
        let p = prefix(self.campaign);
        let end = self.k(&[&signed(before.saturating_add(1))]);
        self.scan(DEADLINES, p.len(), &p, &end, limit)?
            .into_iter()
            .map(|(k, _)| time_and_trial(k))
            .collect()
    }

    async fn add_ready(&mut self, queue: &Queue, key: u64) -> R<()> {
        self.put_raw(
            READY,
            &self.k(&[queue.to_string().as_bytes(), &key.to_be_bytes()]),
            &[queue.unit().stored_byte()],
        )
    }
    async fn del_ready(&mut self, queue: &Queue, key: u64) -> R<bool> {
        self.del(
            READY,
            &self.k(&[queue.to_string().as_bytes(), &key.to_be_bytes()]),
        )
    }
    async fn ready_first(&mut self, queue: &Queue, limit: usize) -> R<Vec<u64>> {
        let mut p = self.k(&[queue.to_string().as_bytes()]);
        p.push(0);
        // The value (the unit's byte) is not read back: the queue says the kind.
        self.scan_prefix(READY, &p, limit)?
            .into_iter()
            .map(|(k, _)| {
                let arr: [u8; 8] = k
                    .as_slice()
                    .try_into()
                    .map_err(|_| corrupt("bad ready key"))?;
                Ok(u64::from_be_bytes(arr))
            })
            .collect()
    }
    async fn queues(&mut self) -> R<Vec<Queue>> {
        let mut out: Vec<Queue> = Vec::new();
        let p = prefix(self.campaign);
        let mut start = p.clone();
        loop {
            let found = self.scan(READY, p.len(), &start, &prefix_end(&p), 1)?;
            let Some((k, _)) = found.into_iter().next() else {
                return Ok(out);
            };
            let name_len = k.iter().position(|&b| b == 0).unwrap_or(k.len());
            let name = utf8(k[..name_len].to_vec())?;
            start = self.k(&[name.as_bytes()]);
            start.push(1);
            out.push(name.parse().map_err(corrupt)?);
        }
    }

    async fn add_delayed(&mut self, at: EpochMs, trial: &str) -> R<()> {
        self.put_raw(DELAYED, &self.k(&[&signed(at), trial.as_bytes()]), &[])
    }
    async fn del_delayed(&mut self, at: EpochMs, trial: &str) -> R<()> {
        self.del(DELAYED, &self.k(&[&signed(at), trial.as_bytes()]))
            .map(drop)
    }
    async fn delayed_due(&mut self, now: EpochMs, limit: usize) -> R<Vec<(EpochMs, String)>> {
        let p = prefix(self.campaign);
        let end = self.k(&[&signed(now.saturating_add(1))]);
        self.scan(DELAYED, p.len(), &p, &end, limit)?
            .into_iter()
            .map(|(k, _)| time_and_trial(k))
            .collect()
    }
    async fn delayed_next(&mut self) -> R<Option<EpochMs>> {
        let p = prefix(self.campaign);
        Ok(self
            .scan_prefix(DELAYED, &p, 1)?
            .into_iter()
            .next()
            .map(|(k, _)| time_and_trial(k))
            .transpose()?
            .map(|(t, _)| t))
    }

    async fn token(&mut self, trial: &str, attempt: u32) -> R<Option<TokenRecord>> {
        self.get(TOKENS, &self.k(&[trial.as_bytes(), &attempt.to_be_bytes()]))
    }
    async fn put_token(&mut self, trial: &str, attempt: u32, record: &TokenRecord) -> R<()> {
        self.put(
            TOKENS,
            &self.k(&[trial.as_bytes(), &attempt.to_be_bytes()]),
            record,
        )
    }

    async fn put_row(&mut self, row: &Row) -> R<()> {
        self.put(ROWS, &self.k(&[&row.seq.to_be_bytes()]), row)
    }
    async fn put_event(&mut self, event: &Event) -> R<()> {
        self.put(EVENTS, &self.k(&[&event.seq.to_be_bytes()]), event)
    }

    async fn block(&mut self, name: &str) -> R<BlockState> {
        Ok(self
            .get(BLOCKS, &self.k(&[name.as_bytes()]))?
            .unwrap_or_default())
    }
    async fn put_block(&mut self, name: &str, block: &BlockState) -> R<()> {
        self.put(BLOCKS, &self.k(&[name.as_bytes()]), block)
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn submit(&self, campaign: Campaign, now_ms: EpochMs) -> Result<Submitted, StoreError> {
        let id = campaign.spec.id.clone();
        self.write(&id, move |tx| ready(engine::submit(tx, campaign, now_ms)))
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
        self.write(campaign, move |tx| {
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
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_write().map_err(backend)?;
            let key = {
                let mut t = txn.open_table(SECRETS).map_err(backend)?;
                let stored = t
                    .get(LEASE_KEY)
                    .map_err(backend)?
                    .map(|v| v.value().to_vec());
                match stored {
                    Some(bytes) => std::str::from_utf8(&bytes)
                        .ok()
                        .and_then(LeaseKey::from_hex)
                        .ok_or_else(|| corrupt("the stored lease key is not 32 bytes of hex"))?,
                    None => {
                        t.insert(LEASE_KEY, fresh.to_hex().as_bytes())
                            .map_err(backend)?;
                        fresh
                    }
                }
            };
            txn.commit().map_err(backend)?;
            Ok(key)
        })
        .await
        .map_err(|e| backend(format!("store task failed: {e}")))?
    }

    async fn list(&self) -> Result<Vec<CampaignId>, StoreError> {
        let db = self.db.clone();
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
}
