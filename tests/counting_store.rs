//! A real store seen through a counter: every call goes to the wrapped store unchanged, and
//! `list` calls (one per work request a lane session handles) are counted, so a test can see
//! how often workers ask for work. Submits and completions can be held at the door (counted
//! while they wait), so a test can keep several in flight at once; renewals are counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use lanes_common::ids::{CampaignId, Token};
use lanes_common::row::{Outcome, Phase, Row};
use lanes_common::spec::{Campaign, CampaignSpec};
use lanes_common::state::{CampaignState, StopMode};
use lanes_common::utc::EpochMs;
use lanes_coordinator::store::*;

/// Wraps a store and counts its `list` calls.
pub struct CountingStore {
    inner: Arc<dyn Store>,
    lists: AtomicU64,
    /// While `true`, submits wait before they reach the store.
    hold: tokio::sync::watch::Sender<bool>,
    held: AtomicU64,
    /// While `true`, completions wait before they reach the store.
    hold_complete: tokio::sync::watch::Sender<bool>,
    completes_held: AtomicU64,
    renews: AtomicU64,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            lists: AtomicU64::new(0),
            hold: tokio::sync::watch::channel(false).0,
            held: AtomicU64::new(0),
            hold_complete: tokio::sync::watch::channel(false).0,
            completes_held: AtomicU64::new(0),
            renews: AtomicU64::new(0),
        }
    }

    /// Holds completions (`true`) until they are let through (`false`).
    pub fn hold_completes(&self, hold: bool) {
        self.hold_complete.send_replace(hold);
    }

    /// Completions waiting at the door now.
    pub fn completes_held(&self) -> u64 {
        self.completes_held.load(Ordering::SeqCst)
    }

    /// `renew` calls so far.
    pub fn renews(&self) -> u64 {
        self.renews.load(Ordering::SeqCst)
    }

    /// Holds submits (`true`) until they are let through (`false`).
    pub fn hold_submits(&self, hold: bool) {
        self.hold.send_replace(hold);
    }

    /// Submits waiting at the door now.
    pub fn submits_held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }

    /// `list` calls so far.
    pub fn lists(&self) -> u64 {
        self.lists.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Store for CountingStore {
    async fn submit(&self, campaign: Campaign, now_ms: EpochMs) -> Result<Submitted, StoreError> {
        let mut hold = self.hold.subscribe();
        if *hold.borrow_and_update() {
            self.held.fetch_add(1, Ordering::SeqCst);
            let _ = hold.wait_for(|h| !*h).await;
            self.held.fetch_sub(1, Ordering::SeqCst);
        }
        self.inner.submit(campaign, now_ms).await
    }
    async fn claim(
        &self,
        campaign: &CampaignId,
        req: ClaimRequest,
        now_ms: EpochMs,
    ) -> Result<ClaimOutcome, StoreError> {
        self.inner.claim(campaign, req, now_ms).await
    }
    async fn renew(
        &self,
        campaign: &CampaignId,
        tokens: Vec<(Token, Phase)>,
        now_ms: EpochMs,
    ) -> Result<Vec<(Token, RenewState)>, StoreError> {
        self.renews.fetch_add(1, Ordering::SeqCst);
        self.inner.renew(campaign, tokens, now_ms).await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }
    async fn put_login_code(
        &self,
        digest: [u8; 32],
        grant: lanes_coordinator::store::LoginGrant,
        now_ms: lanes_common::utc::EpochMs,
    ) -> Result<(), StoreError> {
        self.inner.put_login_code(digest, grant, now_ms).await
    }
    async fn missing_bundles(&self, digests: Vec<String>) -> Result<Vec<String>, StoreError> {
        self.inner.missing_bundles(digests).await
    }
    async fn put_bundle(&self, digest: String, encoded: Vec<u8>) -> Result<bool, StoreError> {
        self.inner.put_bundle(digest, encoded).await
    }
    async fn bundle(&self, digest: String) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.bundle(digest).await
    }
    async fn take_login_code(
        &self,
        digest: [u8; 32],
        now_ms: lanes_common::utc::EpochMs,
    ) -> Result<Option<lanes_coordinator::store::LoginGrant>, StoreError> {
        self.inner.take_login_code(digest, now_ms).await
    }
    async fn lease_key(
        &self,
        fresh: lanes_common::lease::LeaseKey,
    ) -> Result<lanes_common::lease::LeaseKey, StoreError> {
        self.inner.lease_key(fresh).await
    }
    async fn forfeit(
        &self,
        campaign: &CampaignId,
        worker: &str,
        tokens: Vec<Token>,
        now_ms: EpochMs,
    ) -> Result<Vec<Token>, StoreError> {
        self.inner.forfeit(campaign, worker, tokens, now_ms).await
    }
    async fn complete(
        &self,
        campaign: &CampaignId,
        outcome: Outcome,
        now_ms: EpochMs,
    ) -> Result<CompleteAck, StoreError> {
        let mut hold = self.hold_complete.subscribe();
        if *hold.borrow_and_update() {
            self.completes_held.fetch_add(1, Ordering::SeqCst);
            let _ = hold.wait_for(|h| !*h).await;
            self.completes_held.fetch_sub(1, Ordering::SeqCst);
        }
        self.inner.complete(campaign, outcome, now_ms).await
    }
    async fn release(
        &self,
        campaign: &CampaignId,
        release: Release,
        now_ms: EpochMs,
    ) -> Result<CompleteAck, StoreError> {
        self.inner.release(campaign, release, now_ms).await
    }
    async fn reap(&self, campaign: &CampaignId, now_ms: EpochMs) -> Result<ReapReport, StoreError> {
        self.inner.reap(campaign, now_ms).await
    }
    async fn stop(
        &self,
        campaign: &CampaignId,
        mode: StopMode,
        now_ms: EpochMs,
    ) -> Result<CampaignState, StoreError> {
        self.inner.stop(campaign, mode, now_ms).await
    }
    async fn status(
        &self,
        campaign: &CampaignId,
        now_ms: EpochMs,
    ) -> Result<CampaignStatus, StoreError> {
        self.inner.status(campaign, now_ms).await
    }
    async fn rows(
        &self,
        campaign: &CampaignId,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<Row>, StoreError> {
        self.inner.rows(campaign, from_seq, limit).await
    }
    async fn events(
        &self,
        campaign: &CampaignId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.inner.events(campaign, from, limit).await
    }
    async fn list(&self) -> Result<Vec<CampaignId>, StoreError> {
        self.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list().await
    }
    async fn delete(
        &self,
        campaign: &CampaignId,
    ) -> Result<lanes_coordinator::store::Deleted, StoreError> {
        self.inner.delete(campaign).await
    }
    async fn requeue_excluded(
        &self,
        campaign: &CampaignId,
        req: lanes_coordinator::store::RequeueRequest,
        now_ms: i64,
    ) -> Result<lanes_coordinator::store::Requeued, StoreError> {
        self.inner.requeue_excluded(campaign, req, now_ms).await
    }
    async fn spec(&self, campaign: &CampaignId) -> Result<CampaignSpec, StoreError> {
        self.inner.spec(campaign).await
    }
    async fn campaign(&self, campaign: &CampaignId) -> Result<Campaign, StoreError> {
        self.inner.campaign(campaign).await
    }
}
