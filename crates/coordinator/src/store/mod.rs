//! The store: one trait, two backends (embedded redb now, Redis next), one conformance suite.
//!
//! Every operation is atomic. The transitions themselves live once, in [`engine`], written
//! against the small typed transaction interface of [`tx`]; a backend only provides that
//! interface and its atomicity. Decisions (retries, claim gates, phase 2) come from the pure
//! policy in `lanes-common`.

mod api;
pub mod clock;
pub mod embedded;
mod engine;
pub mod layout;
pub mod metered;
mod model;
mod observe;
pub mod redis;
mod tx;

use async_trait::async_trait;
use lanes_common::ids::{CampaignId, Token};
use lanes_common::lease::LeaseKey;
use lanes_common::row::{Outcome, Phase, Row};
use lanes_common::spec::{Campaign, CampaignSpec};
use lanes_common::state::{CampaignState, StopMode};
use lanes_common::utc::EpochMs;

pub use self::redis::{Durability, RedisOptions, RedisStats, RedisStore};
pub use api::*;
pub use clock::{Clock, ManualClock, OffsetClock, SystemClock};
pub use embedded::EmbeddedStore;
pub use layout::{LayoutError, MigrationReport, StoreAt};
pub use metered::{MeteredStore, StoreBackend};
pub use observe::CommitObserver;

/// The store every coordinator replica shares. `now_ms` always comes from the caller's clock.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// A new campaign, or a resume or amendment of an existing one.
    async fn submit(&self, campaign: Campaign, now_ms: EpochMs) -> Result<Submitted, StoreError>;

    /// Up to `req.max_units` trials (or run groups) in schedule order, after the claim gates.
    async fn claim(
        &self,
        campaign: &CampaignId,
        req: ClaimRequest,
        now_ms: EpochMs,
    ) -> Result<ClaimOutcome, StoreError>;

    /// Renews leases and records each attempt's phase. Answers per token.
    async fn renew(
        &self,
        campaign: &CampaignId,
        tokens: Vec<(Token, Phase)>,
        now_ms: EpochMs,
    ) -> Result<Vec<(Token, RenewState)>, StoreError>;

    /// A restarted worker gives up leases it cannot publish: each still held by `worker` is
    /// reaped by the next pass, without the publish grace. Answers the tokens forfeited.
    async fn forfeit(
        &self,
        campaign: &CampaignId,
        worker: &str,
        tokens: Vec<Token>,
        now_ms: EpochMs,
    ) -> Result<Vec<Token>, StoreError>;

    /// Records an attempt's outcome; idempotent per token.
    async fn complete(
        &self,
        campaign: &CampaignId,
        outcome: Outcome,
        now_ms: EpochMs,
    ) -> Result<CompleteAck, StoreError>;

    /// Gives a leased trial back with a `cancelled` or `blocked` row.
    async fn release(
        &self,
        campaign: &CampaignId,
        release: Release,
        now_ms: EpochMs,
    ) -> Result<CompleteAck, StoreError>;

    /// Takes back leases whose deadline passed more than [`REAP_GRACE_MS`] ago.
    async fn reap(&self, campaign: &CampaignId, now_ms: EpochMs) -> Result<ReapReport, StoreError>;

    async fn stop(
        &self,
        campaign: &CampaignId,
        mode: StopMode,
        now_ms: EpochMs,
    ) -> Result<CampaignState, StoreError>;

    async fn status(
        &self,
        campaign: &CampaignId,
        now_ms: EpochMs,
    ) -> Result<CampaignStatus, StoreError>;

    /// Ledger rows with `seq >= from_seq`, at most `limit`.
    async fn rows(
        &self,
        campaign: &CampaignId,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<Row>, StoreError>;

    /// Events with `seq >= from`, at most `limit`.
    async fn events(
        &self,
        campaign: &CampaignId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError>;

    /// Every campaign id, in id order.
    async fn list(&self) -> Result<Vec<CampaignId>, StoreError>;

    /// Deletes a campaign that runs nothing (stopped or done, no lease out), every key of it
    /// at once: afterwards it is unknown, and its id is free for a new campaign. Refused with
    /// [`StoreError::Active`] otherwise.
    async fn delete(&self, campaign: &CampaignId) -> Result<Deleted, StoreError>;

    /// An operator retry pass: requeues the excluded trials `req` selects (see
    /// [`RequeueRequest`]), records it as an amendment, and reopens a done campaign.
    async fn requeue_excluded(
        &self,
        campaign: &CampaignId,
        req: RequeueRequest,
        now_ms: EpochMs,
    ) -> Result<Requeued, StoreError>;

    /// The campaign's current spec (without its tasks).
    async fn spec(&self, campaign: &CampaignId) -> Result<CampaignSpec, StoreError>;

    /// The campaign as recorded, with its tasks (for reports).
    async fn campaign(&self, campaign: &CampaignId) -> Result<Campaign, StoreError>;

    /// The store-wide key lease secrets are derived with: `fresh` is stored unless a key is
    /// already there, and the stored key is answered, so every replica uses the same one.
    async fn lease_key(&self, fresh: LeaseKey) -> Result<LeaseKey, StoreError>;

    /// Keeps a one-time dashboard login code, by its SHA-256 digest (the code itself is never
    /// stored), until `grant.expires_ms`. Codes that expired by `now_ms` may be swept.
    async fn put_login_code(
        &self,
        digest: [u8; 32],
        grant: LoginGrant,
        now_ms: EpochMs,
    ) -> Result<(), StoreError>;

    /// Takes a login code: its grant if it is there and has not expired at `now_ms`. A code
    /// is taken at most once, whichever replica asks.
    async fn take_login_code(
        &self,
        digest: [u8; 32],
        now_ms: EpochMs,
    ) -> Result<Option<LoginGrant>, StoreError>;

    /// Which of `digests` (task folders, `sha256:<hex>`) the store does not keep, in order.
    async fn missing_bundles(&self, digests: Vec<String>) -> Result<Vec<String>, StoreError>;

    /// Keeps an encoded task folder under its digest (which the caller checked); `false`
    /// when it was kept already. Bundles belong to no campaign: any campaign may name one.
    async fn put_bundle(&self, digest: String, encoded: Vec<u8>) -> Result<bool, StoreError>;

    /// An encoded task folder, by digest.
    async fn bundle(&self, digest: String) -> Result<Option<Vec<u8>>, StoreError>;

    /// Whether the store answers at all (the replica's health watch).
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Reports the events of every transaction this store commits from now on to
    /// `observer` (replacing any earlier one). A store that emits no events ignores it.
    fn set_observer(&self, _observer: std::sync::Arc<dyn CommitObserver>) {}
}

/// A lease is reaped only once its deadline has passed by more than this.
pub const REAP_GRACE_MS: i64 = 2_000;
