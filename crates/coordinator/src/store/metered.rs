//! A [`Store`] that times each operation into `lanes_store_op_duration_seconds`, by
//! operation and backend, and passes everything else through.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use lanes_common::ids::{CampaignId, Token};
use lanes_common::lease::LeaseKey;
use lanes_common::row::{Outcome, Phase, Row};
use lanes_common::spec::{Campaign, CampaignSpec};
use lanes_common::state::{CampaignState, StopMode};
use lanes_common::utc::EpochMs;

use super::api::*;
use super::{CommitObserver, Store};
use crate::metrics::{CoordinatorMetrics, StoreOp};

/// Which backend a store runs on: a label of the store metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreBackend {
    Embedded,
    Redis,
}

impl StoreBackend {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Embedded => "embedded",
            Self::Redis => "redis",
        }
    }
}

/// `inner`, timed.
pub struct MeteredStore {
    inner: Arc<dyn Store>,
    backend: StoreBackend,
    metrics: Arc<CoordinatorMetrics>,
}

impl MeteredStore {
    pub fn new(
        inner: Arc<dyn Store>,
        backend: StoreBackend,
        metrics: Arc<CoordinatorMetrics>,
    ) -> Self {
        Self {
            inner,
            backend,
            metrics,
        }
    }

    /// Runs `f`, observing how long it took, whether it succeeded or not.
    async fn timed<T>(&self, op: StoreOp, f: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let out = f.await;
        self.metrics
            .observe_store_op(op, self.backend, started.elapsed());
        out
    }
}

#[async_trait]
impl Store for MeteredStore {
    async fn submit(&self, campaign: Campaign, now_ms: EpochMs) -> Result<Submitted, StoreError> {
        self.timed(StoreOp::Submit, self.inner.submit(campaign, now_ms))
            .await
    }

    async fn claim(
        &self,
        campaign: &CampaignId,
        req: ClaimRequest,
        now_ms: EpochMs,
    ) -> Result<ClaimOutcome, StoreError> {
        self.timed(StoreOp::Claim, self.inner.claim(campaign, req, now_ms))
            .await
    }

    async fn renew(
        &self,
        campaign: &CampaignId,
        tokens: Vec<(Token, Phase)>,
        now_ms: EpochMs,
    ) -> Result<Vec<(Token, RenewState)>, StoreError> {
        self.timed(StoreOp::Renew, self.inner.renew(campaign, tokens, now_ms))
            .await
    }

    async fn forfeit(
        &self,
        campaign: &CampaignId,
        worker: &str,
        tokens: Vec<Token>,
        now_ms: EpochMs,
    ) -> Result<Vec<Token>, StoreError> {
        self.timed(
            StoreOp::Forfeit,
            self.inner.forfeit(campaign, worker, tokens, now_ms),
        )
        .await
    }

    async fn complete(
        &self,
        campaign: &CampaignId,
        outcome: Outcome,
        now_ms: EpochMs,
    ) -> Result<CompleteAck, StoreError> {
        self.timed(
            StoreOp::Complete,
            self.inner.complete(campaign, outcome, now_ms),
        )
        .await
    }

    async fn release(
        &self,
        campaign: &CampaignId,
        release: Release,
        now_ms: EpochMs,
    ) -> Result<CompleteAck, StoreError> {
        self.timed(
            StoreOp::Release,
            self.inner.release(campaign, release, now_ms),
        )
        .await
    }

    async fn reap(&self, campaign: &CampaignId, now_ms: EpochMs) -> Result<ReapReport, StoreError> {
        self.timed(StoreOp::Reap, self.inner.reap(campaign, now_ms))
            .await
    }

    async fn stop(
        &self,
        campaign: &CampaignId,
        mode: StopMode,
        now_ms: EpochMs,
    ) -> Result<CampaignState, StoreError> {
        self.timed(StoreOp::Stop, self.inner.stop(campaign, mode, now_ms))
            .await
    }

    async fn status(
        &self,
        campaign: &CampaignId,
        now_ms: EpochMs,
    ) -> Result<CampaignStatus, StoreError> {
        self.timed(StoreOp::Status, self.inner.status(campaign, now_ms))
            .await
    }

    async fn rows(
        &self,
        campaign: &CampaignId,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<Row>, StoreError> {
        self.timed(StoreOp::Rows, self.inner.rows(campaign, from_seq, limit))
            .await
    }

    async fn events(
        &self,
        campaign: &CampaignId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        self.timed(StoreOp::Events, self.inner.events(campaign, from, limit))
            .await
    }

    async fn list(&self) -> Result<Vec<CampaignId>, StoreError> {
        self.timed(StoreOp::List, self.inner.list()).await
    }

    async fn delete(&self, campaign: &CampaignId) -> Result<Deleted, StoreError> {
        self.timed(StoreOp::Delete, self.inner.delete(campaign))
            .await
    }

    async fn requeue_excluded(
        &self,
        campaign: &CampaignId,
        req: RequeueRequest,
        now_ms: EpochMs,
    ) -> Result<Requeued, StoreError> {
        self.timed(
            StoreOp::Requeue,
            self.inner.requeue_excluded(campaign, req, now_ms),
        )
        .await
    }

    async fn spec(&self, campaign: &CampaignId) -> Result<CampaignSpec, StoreError> {
        self.timed(StoreOp::Spec, self.inner.spec(campaign)).await
    }

    async fn campaign(&self, campaign: &CampaignId) -> Result<Campaign, StoreError> {
        self.timed(StoreOp::Campaign, self.inner.campaign(campaign))
            .await
    }

    async fn lease_key(&self, fresh: LeaseKey) -> Result<LeaseKey, StoreError> {
        self.timed(StoreOp::LeaseKey, self.inner.lease_key(fresh))
            .await
    }

    async fn put_login_code(
        &self,
        digest: [u8; 32],
        grant: LoginGrant,
        now_ms: EpochMs,
    ) -> Result<(), StoreError> {
        self.timed(
            StoreOp::LoginCode,
            self.inner.put_login_code(digest, grant, now_ms),
        )
        .await
    }

    async fn take_login_code(
        &self,
        digest: [u8; 32],
        now_ms: EpochMs,
    ) -> Result<Option<LoginGrant>, StoreError> {
        self.timed(
            StoreOp::LoginCode,
            self.inner.take_login_code(digest, now_ms),
        )
        .await
    }

    async fn missing_bundles(&self, digests: Vec<String>) -> Result<Vec<String>, StoreError> {
        self.timed(StoreOp::Bundle, self.inner.missing_bundles(digests))
            .await
    }

    async fn put_bundle(&self, digest: String, encoded: Vec<u8>) -> Result<bool, StoreError> {
        self.timed(StoreOp::Bundle, self.inner.put_bundle(digest, encoded))
            .await
    }

    async fn bundle(&self, digest: String) -> Result<Option<Vec<u8>>, StoreError> {
        self.timed(StoreOp::Bundle, self.inner.bundle(digest)).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.timed(StoreOp::Ping, self.inner.ping()).await
    }

    fn set_observer(&self, observer: Arc<dyn CommitObserver>) {
        self.inner.set_observer(observer);
    }
}
