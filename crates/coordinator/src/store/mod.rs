//! The store: one trait, two backends (embedded redb and Redis), one conformance suite.
//!
//! Every operation is a value ([`op`]) that a backend runs through one method,
//! [`Store::execute`]; the typed methods wrap it. Every operation is atomic. The transitions
//! live once, in [`engine`] (one entry point, `engine::run`), written against the small typed
//! transaction interface of [`tx`]; a backend only provides that interface and its atomicity,
//! and batches concurrent operations into shared commits through one queue ([`group`]).
//! Decisions (retries, claim gates, phase 2) come from the pure policy in `lanes-common`.

mod api;
pub mod clock;
pub mod embedded;
mod engine;
mod group;
pub mod layout;
pub mod metered;
mod model;
mod observe;
mod op;
pub mod redis;
mod tx;

use async_trait::async_trait;
use lanes_common::ids::{CampaignId, Token};
use lanes_common::lease::LeaseKey;
use lanes_common::row::{Outcome, Phase, Row};
use lanes_common::spec::{Campaign, CampaignSpec};
use lanes_common::state::{CampaignState, StopMode};
use lanes_common::utc::EpochMs;

pub use self::redis::{Durability, RedisOptions, RedisStats, RedisStore, SentinelOptions};
pub use api::*;
pub use clock::{Clock, ManualClock, OffsetClock, SystemClock};
pub use embedded::EmbeddedStore;
pub use layout::{LayoutError, MigrationReport, StoreAt};
pub use metered::{MeteredStore, StoreBackend};
pub use observe::CommitObserver;
pub use op::{Answer, Answered, CampaignOp, Op};

/// The store every coordinator replica shares. A backend implements [`Store::execute`]; the
/// typed methods are thin wrappers over it (a backend leaves them alone), so a wrapper of a
/// store (timing, counting) wraps that one method. `now_ms` always comes from the caller's
/// clock.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Runs one operation. Every operation is atomic.
    async fn execute(&self, op: Op) -> Result<Answer, StoreError>;

    /// Reports the events of every transaction this store commits from now on to
    /// `observer` (replacing any earlier one). A store that emits no events ignores it.
    fn set_observer(&self, _observer: std::sync::Arc<dyn CommitObserver>) {}

    /// The link to the Redis master, for a Redis store.
    fn redis_link(&self) -> Option<RedisLink> {
        None
    }

    /// A new campaign, or a resume or amendment of an existing one.
    async fn submit(&self, campaign: Campaign, now_ms: EpochMs) -> Result<Submitted, StoreError> {
        let campaign = Box::new(campaign);
        run(
            self,
            CampaignOp::Submit {
                campaign,
                now: now_ms,
            },
        )
        .await
    }

    /// Up to `req.max_units` trials (or run groups) in schedule order, after the claim gates.
    async fn claim(
        &self,
        campaign: &CampaignId,
        req: ClaimRequest,
        now_ms: EpochMs,
    ) -> Result<ClaimOutcome, StoreError> {
        let campaign = campaign.clone();
        run(
            self,
            CampaignOp::Claim {
                campaign,
                req,
                now: now_ms,
            },
        )
        .await
    }

    /// Renews leases and records each attempt's phase. Answers per token.
    async fn renew(
        &self,
        campaign: &CampaignId,
        tokens: Vec<(Token, Phase)>,
        now_ms: EpochMs,
    ) -> Result<Vec<(Token, RenewState)>, StoreError> {
        let campaign = campaign.clone();
        run(
            self,
            CampaignOp::Renew {
                campaign,
                tokens,
                now: now_ms,
            },
        )
        .await
    }

    /// A restarted worker gives up leases it cannot publish: each still held by `worker` is
    /// reaped by the next pass, without the publish grace. Answers the tokens forfeited.
    async fn forfeit(
        &self,
        campaign: &CampaignId,
        worker: &str,
        tokens: Vec<Token>,
        now_ms: EpochMs,
    ) -> Result<Vec<Token>, StoreError> {
        let (campaign, worker) = (campaign.clone(), worker.to_owned());
        run(
            self,
            CampaignOp::Forfeit {
                campaign,
                worker,
                tokens,
                now: now_ms,
            },
        )
        .await
    }

    /// Records an attempt's outcome; idempotent per token.
    async fn complete(
        &self,
        campaign: &CampaignId,
        outcome: Outcome,
        now_ms: EpochMs,
    ) -> Result<CompleteAck, StoreError> {
        let (campaign, outcome) = (campaign.clone(), Box::new(outcome));
        run(
            self,
            CampaignOp::Complete {
                campaign,
                outcome,
                now: now_ms,
            },
        )
        .await
    }

    /// Gives a leased trial back with a `cancelled` or `blocked` row.
    async fn release(
        &self,
        campaign: &CampaignId,
        release: Release,
        now_ms: EpochMs,
    ) -> Result<CompleteAck, StoreError> {
        let campaign = campaign.clone();
        run(
            self,
            CampaignOp::Release {
                campaign,
                release,
                now: now_ms,
            },
        )
        .await
    }

    /// Takes back leases whose deadline passed more than [`REAP_GRACE_MS`] ago.
    async fn reap(&self, campaign: &CampaignId, now_ms: EpochMs) -> Result<ReapReport, StoreError> {
        let campaign = campaign.clone();
        run(
            self,
            CampaignOp::Reap {
                campaign,
                now: now_ms,
            },
        )
        .await
    }

    async fn stop(
        &self,
        campaign: &CampaignId,
        mode: StopMode,
        now_ms: EpochMs,
    ) -> Result<CampaignState, StoreError> {
        let campaign = campaign.clone();
        run(
            self,
            CampaignOp::Stop {
                campaign,
                mode,
                now: now_ms,
            },
        )
        .await
    }

    async fn status(
        &self,
        campaign: &CampaignId,
        now_ms: EpochMs,
    ) -> Result<CampaignStatus, StoreError> {
        let campaign = campaign.clone();
        run(
            self,
            CampaignOp::Status {
                campaign,
                now: now_ms,
            },
        )
        .await
    }

    /// Ledger rows with `seq >= from_seq`, at most `limit`.
    async fn rows(
        &self,
        campaign: &CampaignId,
        from_seq: u64,
        limit: usize,
    ) -> Result<Vec<Row>, StoreError> {
        let campaign = campaign.clone();
        run(
            self,
            Op::Rows {
                campaign,
                from: from_seq,
                limit,
            },
        )
        .await
    }

    /// Events with `seq >= from`, at most `limit`.
    async fn events(
        &self,
        campaign: &CampaignId,
        from: u64,
        limit: usize,
    ) -> Result<Vec<Event>, StoreError> {
        let campaign = campaign.clone();
        run(
            self,
            Op::Events {
                campaign,
                from,
                limit,
            },
        )
        .await
    }

    /// Every campaign id, in id order.
    async fn list(&self) -> Result<Vec<CampaignId>, StoreError> {
        run(self, Op::List).await
    }

    /// Deletes a campaign that runs nothing (stopped or done, no lease out), every key of it
    /// at once: afterwards it is unknown, and its id is free for a new campaign. Refused with
    /// [`StoreError::Active`] otherwise.
    async fn delete(&self, campaign: &CampaignId) -> Result<Deleted, StoreError> {
        let campaign = campaign.clone();
        run(self, Op::Delete { campaign }).await
    }

    /// An operator retry pass: requeues the excluded trials `req` selects (see
    /// [`RequeueRequest`]), records it as an amendment, and reopens a done campaign.
    async fn requeue_excluded(
        &self,
        campaign: &CampaignId,
        req: RequeueRequest,
        now_ms: EpochMs,
    ) -> Result<Requeued, StoreError> {
        let campaign = campaign.clone();
        run(
            self,
            CampaignOp::Requeue {
                campaign,
                req,
                now: now_ms,
            },
        )
        .await
    }

    /// The campaign's current spec (without its tasks).
    async fn spec(&self, campaign: &CampaignId) -> Result<CampaignSpec, StoreError> {
        let campaign = campaign.clone();
        run::<Self, Box<CampaignSpec>>(self, CampaignOp::Spec { campaign })
            .await
            .map(|s| *s)
    }

    /// The campaign as recorded, with its tasks (for reports).
    async fn campaign(&self, campaign: &CampaignId) -> Result<Campaign, StoreError> {
        let campaign = campaign.clone();
        run::<Self, Box<Campaign>>(self, CampaignOp::Campaign { campaign })
            .await
            .map(|c| *c)
    }

    /// The store-wide key lease secrets are derived with: `fresh` is stored unless a key is
    /// already there, and the stored key is answered, so every replica uses the same one.
    async fn lease_key(&self, fresh: LeaseKey) -> Result<LeaseKey, StoreError> {
        run(self, Op::LeaseKey { fresh }).await
    }

    /// Keeps a one-time dashboard login code, by its SHA-256 digest (the code itself is never
    /// stored), until `grant.expires_ms`. Codes that expired by `now_ms` may be swept.
    async fn put_login_code(
        &self,
        digest: [u8; 32],
        grant: LoginGrant,
        now_ms: EpochMs,
    ) -> Result<(), StoreError> {
        run(
            self,
            Op::PutLoginCode {
                digest,
                grant,
                now: now_ms,
            },
        )
        .await
    }

    /// Takes a login code: its grant if it is there and has not expired at `now_ms`. A code
    /// is taken at most once, whichever replica asks.
    async fn take_login_code(
        &self,
        digest: [u8; 32],
        now_ms: EpochMs,
    ) -> Result<Option<LoginGrant>, StoreError> {
        run(
            self,
            Op::TakeLoginCode {
                digest,
                now: now_ms,
            },
        )
        .await
    }

    /// Which of `digests` (task folders, `sha256:<hex>`) the store does not keep, in order.
    async fn missing_bundles(&self, digests: Vec<String>) -> Result<Vec<String>, StoreError> {
        run(self, Op::MissingBundles { digests }).await
    }

    /// Keeps an encoded task folder under its digest (which the caller checked); `false`
    /// when it was kept already. Bundles belong to no campaign: any campaign may name one.
    async fn put_bundle(&self, digest: String, encoded: Vec<u8>) -> Result<bool, StoreError> {
        run(self, Op::PutBundle { digest, encoded }).await
    }

    /// An encoded task folder, by digest.
    async fn bundle(&self, digest: String) -> Result<Option<Vec<u8>>, StoreError> {
        run(self, Op::Bundle { digest }).await
    }

    /// Whether the store answers at all (the replica's health watch).
    async fn ping(&self) -> Result<(), StoreError> {
        run(self, Op::Ping).await
    }
}

/// Executes `op` on `store` and answers as the type its kind of operation answers.
async fn run<S, T>(store: &S, op: impl Into<Op>) -> Result<T, StoreError>
where
    S: Store + ?Sized,
    T: Answered,
{
    store.execute(op.into()).await?.into_typed()
}

/// A lease is reaped only once its deadline has passed by more than this.
pub const REAP_GRACE_MS: i64 = 2_000;
