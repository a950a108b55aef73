//! The types of the store's operations: requests, answers and errors.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use lanes_common::ids::{ArmId, CampaignId, HostName, LaneName, Token, TrialId};
use lanes_common::policy::{ClaimGateInForce, NoWorkReason, WorkerOffer};
use lanes_common::resume::Conflict;
use lanes_common::row::{ExcludedReason, FailureKind, OutcomeError, Phase, Status};
use lanes_common::schedule::Trial;
use lanes_common::spec::{CampaignSpec, DriverConfig};
use lanes_common::state::{CampaignState, StopMode, StopReason};
use lanes_common::utc::EpochMs;

/// What `submit` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubmitKind {
    Created,
    /// Same schedule; operational options may have changed.
    Resumed,
    /// The schedule grew; the new spec hash is recorded.
    Amended,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Submitted {
    pub id: CampaignId,
    pub trials: u64,
    pub spec_hash: String,
    pub kind: SubmitKind,
    pub operational_changes: Vec<String>,
}

/// A lane asking for work.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimRequest {
    pub lane: LaneName,
    pub host: HostName,
    pub worker: String,
    /// The arms this lane serves; `None` means every arm.
    pub arms: Option<Vec<ArmId>>,
    /// What the lane's worker runs: a campaign whose driver it does not cover is refused in
    /// the claim's transaction, so the check reads the driver the lease would carry.
    pub offer: Arc<WorkerOffer>,
    /// How many units (trials or run groups) it may take.
    pub max_units: u32,
}

/// A claimed trial.
#[derive(Debug, Clone, PartialEq)]
pub struct AssignedTrial {
    pub trial: Trial,
    pub token: Token,
    pub payload_json: String,
    pub arm_config: serde_json::Value,
    /// Time left until the hard deadline, from the claim.
    pub hard_deadline_in_ms: u64,
}

/// One unit of work: a single trial, or a run group in slot order.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    pub campaign: CampaignId,
    pub paired: bool,
    pub trials: Vec<AssignedTrial>,
    pub lease_ttl_ms: u64,
    /// How to run it, read in the claim's own transaction.
    pub driver: UnitDriver,
}

/// How a lane runs a unit: the campaign's driver as recorded when the unit was leased. It is
/// read with the lease, so a campaign resubmitted meanwhile cannot pair these trials with
/// another version's driver.
#[derive(Debug, Clone, PartialEq)]
pub struct UnitDriver {
    pub driver: DriverConfig,
    /// `[driver.expect]`: the identity pins the driver must report at initialize.
    pub expect: BTreeMap<String, String>,
    /// Whether each attempt runs the feasibility gate phase before the agent.
    pub gate: bool,
}

impl UnitDriver {
    pub fn of(spec: &CampaignSpec) -> Self {
        Self {
            driver: spec.driver.clone(),
            expect: spec.expect.clone(),
            gate: spec.gate,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    Assigned(Vec<Assignment>),
    NoWork {
        reason: NoWorkReason,
        retry_after_ms: u64,
    },
}

pub use lanes_common::state::RenewState;

/// The answer to a completion, stored with its token so a replay gets the same answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteAck {
    pub token: Token,
    pub counted: bool,
    pub duplicate: bool,
    pub late: bool,
    pub winner_attempt: Option<u32>,
    pub seq: u64,
}

/// Why a lane gives a leased trial back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseReason {
    Cancelled,
    /// Preflight refused after the claim (kind `preflight` or `identity_mismatch`).
    Blocked(FailureKind),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Release {
    pub token: Token,
    pub reason: ReleaseReason,
    pub lane: LaneName,
    pub host: HostName,
    pub detail: Option<String>,
}

/// What a one-time dashboard login code grants: a session, then the page it opens on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoginGrant {
    /// The campaign whose page the link opens; `None` opens the campaign list.
    pub campaign: Option<CampaignId>,
    /// When the code stops working.
    pub expires_ms: EpochMs,
    /// The mark of the client token that asked for the code: the session it opens is bound
    /// to that token, and ends if the token is removed. Empty when the client role is open.
    #[serde(default)]
    pub token_mark: String,
}

/// What a delete removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deleted {
    pub rows: u64,
    pub trials: u64,
}

/// What one reap did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReapReport {
    /// Undelivered assignments, or leases reaped while stopping.
    pub cancelled: u32,
    /// `lease_expired` rows written.
    pub expired: u32,
    /// Past evaluate and still inside `publish_grace_s`: moved to the end of their grace.
    pub deferred: u32,
    /// The pass took a whole batch: more leases may be due, so reap again.
    pub more: bool,
    /// Leases the campaign holds after the pass.
    #[serde(default)]
    pub leases_open: u64,
}

/// An attempt holding a lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InFlight {
    pub token: Token,
    pub lane: LaneName,
    pub host: HostName,
    pub phase: Phase,
    pub deadline_ms: EpochMs,
    pub hard_deadline_ms: EpochMs,
}

/// A recorded amendment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Amendment {
    pub at_ms: EpochMs,
    pub spec_hash: String,
    pub added_tasks: u64,
    pub added_trials: u64,
    /// Set for an operator retry pass (`lanes retry`) rather than a growing schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue: Option<RequeueAmendment>,
}

/// What an operator retry pass requeued, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequeueAmendment {
    /// The pass, from 1.
    pub pass: u32,
    /// Which trials, in words (`excluded`, `excluded, reason infra_failure:*`).
    pub selection: String,
    pub note: String,
    pub trials: u64,
}

/// An operator retry pass to run: the excluded trials (those whose exclusion reason matches
/// `reason`, a glob, when set) go back to their queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequeueRequest {
    pub reason: Option<String>,
    pub note: String,
}

/// What a retry pass did. `pass` is 0 when nothing matched (and nothing was recorded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requeued {
    pub pass: u32,
    pub trials: u64,
    pub by_arm: BTreeMap<String, u64>,
    pub state: CampaignState,
}

/// A Redis store's link to its master, as one coordinator replica sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisLink {
    /// The master in use (`host:port`).
    pub master: String,
    /// Times the replica followed the master to another node.
    pub failovers: u64,
    /// Writes not acknowledged because too few replicas confirmed them in time.
    pub wait_timeouts: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CampaignStatus {
    pub id: CampaignId,
    pub state: CampaignState,
    pub stop_reason: Option<StopReason>,
    pub stop_mode: Option<StopMode>,
    pub spec_hash: String,
    /// When the campaign was first submitted.
    pub created_ms: EpochMs,
    pub amendments: Vec<Amendment>,
    pub trials_total: u64,
    /// Final trials, `not_started` included.
    pub trials_final: u64,
    pub trials_counted: u64,
    pub trials_excluded: u64,
    pub trials_not_started: u64,
    /// Phase-1 trials, and how many of them are final (phase 2 is the rest).
    pub phase1_total: u64,
    pub phase1_final: u64,
    /// Ledger rows by status.
    pub rows_by_status: BTreeMap<Status, u64>,
    pub rows_total: u64,
    /// The cursor of the next event.
    pub events_total: u64,
    pub blocks_total: u64,
    pub blocks_complete: u64,
    pub spend_usd: f64,
    pub reserved_usd: f64,
    pub gates: Vec<ClaimGateInForce>,
    pub in_flight: Vec<InFlight>,
}

/// Something that changed, for Watch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    pub at_ms: EpochMs,
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    AttemptStarted {
        token: Token,
        lane: LaneName,
        host: HostName,
    },
    AttemptPhase {
        token: Token,
        phase: Phase,
    },
    AttemptFinished {
        token: Token,
        status: Status,
        failure_kind: Option<FailureKind>,
        counted: bool,
        row_seq: u64,
    },
    TrialFinal {
        trial_id: TrialId,
        counted: bool,
        excluded_reason: Option<ExcludedReason>,
    },
    GatePaused {
        gate: ClaimGateInForce,
    },
    CampaignStopping {
        reason: StopReason,
    },
    CampaignStopped {
        reason: Option<StopReason>,
    },
    CampaignDone,
    CampaignResumed {
        spec_hash: String,
    },
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No campaign with this id.
    #[error("unknown campaign {0}")]
    UnknownCampaign(CampaignId),
    /// The token was never issued by this store.
    #[error("unknown token {0}")]
    UnknownToken(Token),
    /// The token no longer holds its trial's lease.
    #[error("stale token {0}: it no longer holds the lease")]
    StaleToken(Token),
    /// The token belongs to another campaign or trial than the one named.
    #[error("token {0} does not belong to campaign {1}")]
    ForeignToken(Token, CampaignId),
    /// A resume that would change what is measured.
    #[error("resume refused: {} conflict(s)", .0.len())]
    Refused(Vec<Conflict>),
    /// An operation on a whole campaign (a delete) while it still runs something.
    #[error("campaign {0} {1}")]
    Active(CampaignId, String),
    #[error("invalid outcome: {0}")]
    InvalidOutcome(#[from] OutcomeError),
    /// The backend cannot guarantee that acknowledged writes survive a crash.
    #[error("store not durable: {0}")]
    NotDurable(String),
    /// The backend is unreachable; the operation may be retried.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Stored data that does not decode: a bug or a foreign writer.
    #[error("store data corrupt: {0}")]
    Corrupt(String),
    /// The store's data is of a layout this code does not use: older (migrate it) or newer.
    #[error(transparent)]
    Layout(#[from] super::layout::LayoutError),
    /// Any other backend failure.
    #[error("store backend error: {0}")]
    Backend(String),
}

impl StoreError {
    /// Whether the caller may retry the same operation.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    /// Whether the request itself can never be accepted, whatever the store's health: an
    /// unknown campaign or token, a token of another campaign, a malformed outcome. Only these
    /// may refuse an outcome for good; every other failure is the store's, and the lane keeps
    /// the outcome and sends it again.
    pub fn rejects_request(&self) -> bool {
        matches!(
            self,
            StoreError::UnknownCampaign(_)
                | StoreError::UnknownToken(_)
                | StoreError::StaleToken(_)
                | StoreError::ForeignToken(..)
                | StoreError::Refused(_)
                | StoreError::InvalidOutcome(_)
        )
    }
}
