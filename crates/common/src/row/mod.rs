//! Outcomes and rows (schema `lanes-row/1`).
//!
//! A lane sends an [`Outcome`]; only the store turns it into a [`Row`], because only the store
//! knows the fields that decide the guarantee (`seq`, `counted`, `duplicate`, `late`, `final`,
//! `excluded`, `spec_hash`). The two types are kept apart so a lane cannot set them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{ArmId, CampaignId, HostName, LaneName, TaskId, Token, TrialId};
use crate::schedule::Trial;
use crate::utc::UtcTime;

mod kinds;
pub use kinds::*;

/// The row schema tag.
pub const ROW_SCHEMA: &str = "lanes-row/1";
/// `final_text` is cut to this many characters.
pub const FINAL_TEXT_MAX_CHARS: usize = 2000;

/// What the driver answered to `initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DriverIdentity {
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub pins: BTreeMap<String, String>,
}

/// One evaluator check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TokenUsage {
    pub input: u64,
    pub output: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
}

/// A provider's latest quota reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaReading {
    pub provider: String,
    /// 0.0 ..= 1.0 (and above, when a provider overshoots).
    pub utilisation: f64,
    /// When the window resets, epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_epoch: Option<i64>,
}

/// Wall time per lifecycle phase, seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct PhaseWalls {
    pub admit_s: f64,
    pub boot_s: f64,
    pub reset_s: f64,
    pub gate_s: f64,
    pub agent_s: f64,
    pub evaluate_s: f64,
    pub publish_s: f64,
}

impl PhaseWalls {
    pub fn total(&self) -> f64 {
        self.admit_s
            + self.boot_s
            + self.reset_s
            + self.gate_s
            + self.agent_s
            + self.evaluate_s
            + self.publish_s
    }
}

/// What an attempt obtained: its score and checks, what the agent said and spent, and how
/// long each phase took. A lane reports it in its [`Outcome`]; the store copies it into the
/// attempt's [`Row`] as it is (both embed it, flattened, so the JSON of each is unchanged).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AttemptResult {
    #[serde(default)]
    pub score: Option<f64>,
    #[serde(default)]
    pub passed: Option<bool>,
    #[serde(default)]
    pub checks: Vec<Check>,
    /// The agent's own terminal reason, e.g. `budget_exhausted`, kept apart from `status`.
    #[serde(default)]
    pub runtime_outcome: Option<String>,
    #[serde(default)]
    pub infeasible_source: Option<InfeasibleSource>,
    /// The feasibility gate's answer, when the campaign runs the gate.
    #[serde(default)]
    pub gate: Option<GateRecord>,
    #[serde(default)]
    pub final_text: Option<String>,
    #[serde(default)]
    pub turns: Option<u32>,
    #[serde(default)]
    pub tokens: Option<TokenUsage>,
    #[serde(default)]
    pub cost_usd: Option<f64>,
    #[serde(default)]
    pub quota: Option<QuotaReading>,
    #[serde(default)]
    pub walls: PhaseWalls,
}

/// How an attempt's run went, beside its result: whether its lease was lost, what could not be
/// published, its artifacts, when it ran, and a harness message. Embedded like
/// [`AttemptResult`], after the row's `wall_s`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AttemptRecord {
    #[serde(default)]
    pub lease_lost: bool,
    #[serde(default)]
    pub publication_errors: Vec<String>,
    #[serde(default)]
    pub artifacts: Vec<String>,
    #[serde(default)]
    pub started_utc: Option<UtcTime>,
    #[serde(default)]
    pub ended_utc: Option<UtcTime>,
    /// A short harness message for unscored outcomes.
    #[serde(default)]
    pub error: Option<String>,
}

/// What a lane reports for one attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub token: Token,
    pub lane: LaneName,
    pub host: HostName,
    #[serde(default)]
    pub worker: String,
    #[serde(default)]
    pub driver: Option<DriverIdentity>,
    pub status: Status,
    #[serde(default)]
    pub failure_kind: Option<FailureKind>,
    /// For `rate_limit`: when the provider's window resets, epoch seconds.
    #[serde(default)]
    pub reset_epoch: Option<i64>,
    /// What the attempt obtained.
    #[serde(flatten)]
    pub result: AttemptResult,
    /// How its run went.
    #[serde(flatten)]
    pub record: AttemptRecord,
}

/// An outcome that breaks the status rules.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OutcomeError {
    /// Only the store writes `not_started`.
    #[error("a lane cannot report status {0}: only the store writes it")]
    StoreOnlyStatus(Status),
    /// A scored status needs a score, and an unscored one must not carry one.
    #[error("status {status} {}", if *.has_score { "must not carry a score" } else { "needs a score" })]
    Score { status: Status, has_score: bool },
    /// The failure kind does not fit the status.
    #[error("status {status} does not take failure kind {kind:?}")]
    Kind {
        status: Status,
        kind: Option<FailureKind>,
    },
    /// A number that must be finite and in range is not.
    #[error("{field} must be a finite number in range, got {value}")]
    Number { field: &'static str, value: f64 },
    /// A cost or token count no attempt can have (`limits::MAX_ATTEMPT_COST_USD`,
    /// `limits::MAX_ATTEMPT_TOKENS`).
    #[error(transparent)]
    Figure(#[from] crate::limits::FigureError),
}

impl Outcome {
    /// A bare outcome of `status`, for builders and tests.
    pub fn new(token: Token, lane: LaneName, host: HostName, status: Status) -> Self {
        Self {
            token,
            lane,
            host,
            worker: String::new(),
            driver: None,
            status,
            failure_kind: None,
            reset_epoch: None,
            result: AttemptResult::default(),
            record: AttemptRecord::default(),
        }
    }

    /// Checks the status rules, truncates `final_text`, and cuts every free-text field and
    /// list to its limit (`limits::fit_outcome`), so what a lane publishes passes the
    /// coordinator's `limits::check_outcome`.
    pub fn validate(mut self) -> Result<Self, OutcomeError> {
        let status = self.status;
        if matches!(status, Status::NotStarted | Status::Requeued) {
            return Err(OutcomeError::StoreOnlyStatus(status));
        }
        if status.is_scored() != self.result.score.is_some() {
            return Err(OutcomeError::Score {
                status,
                has_score: self.result.score.is_some(),
            });
        }
        let kind_ok = match status {
            s if s.is_scored() => self.failure_kind.is_none(),
            Status::Cancelled => self.failure_kind.is_none(),
            Status::Blocked => matches!(
                self.failure_kind,
                Some(FailureKind::Preflight | FailureKind::IdentityMismatch)
            ),
            Status::InfraError => self
                .failure_kind
                .is_some_and(FailureKind::driver_reportable),
            _ => false,
        };
        if !kind_ok {
            return Err(OutcomeError::Kind {
                status,
                kind: self.failure_kind,
            });
        }
        // The phase walls too: a row is JSON, which has no NaN or infinity (a `null` there
        // made the row unreadable), and a wall is a duration (found by fuzzing).
        let w = &self.result.walls;
        for (field, value) in [
            ("score", self.result.score),
            (
                "quota.utilisation",
                self.result.quota.as_ref().map(|q| q.utilisation),
            ),
            ("walls.admit_s", Some(w.admit_s)),
            ("walls.boot_s", Some(w.boot_s)),
            ("walls.reset_s", Some(w.reset_s)),
            ("walls.gate_s", Some(w.gate_s)),
            ("walls.agent_s", Some(w.agent_s)),
            ("walls.evaluate_s", Some(w.evaluate_s)),
            ("walls.publish_s", Some(w.publish_s)),
        ] {
            if let Some(v) = value
                && (!v.is_finite() || v < 0.0)
            {
                return Err(OutcomeError::Number { field, value: v });
            }
        }
        // A check's score, for the same reason: JSON would write a NaN as `null`.
        if let Some(v) = self
            .result
            .checks
            .iter()
            .filter_map(|c| c.score)
            .find(|v| !v.is_finite())
        {
            return Err(OutcomeError::Number {
                field: "checks.score",
                value: v,
            });
        }
        // Bounded, so one attempt cannot swamp the spend, the budget gate and the report.
        for (field, value) in [
            ("cost_usd", self.result.cost_usd),
            (
                "gate.cost_usd",
                self.result.gate.as_ref().and_then(|g| g.cost_usd),
            ),
        ] {
            if let Some(v) = value {
                crate::limits::check_cost_usd(field, v)?;
            }
        }
        if let Some(t) = &self.result.tokens {
            crate::limits::check_tokens(t)?;
        }
        if let Some(text) = &mut self.result.final_text {
            truncate_chars(text, FINAL_TEXT_MAX_CHARS);
        }
        if let Some(reason) = self.result.gate.as_mut().and_then(|g| g.reason.as_mut()) {
            truncate_chars(reason, FINAL_TEXT_MAX_CHARS);
        }
        crate::limits::fit_outcome(&mut self);
        Ok(self)
    }
}

fn truncate_chars(s: &mut String, max: usize) {
    if let Some((i, _)) = s.char_indices().nth(max) {
        s.truncate(i);
    }
}

/// One ledger row. Fields below `// store` are set only by the store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub schema: String,
    pub seq: u64,
    pub campaign: CampaignId,
    pub spec_hash: String,
    // Trial identity.
    pub trial_id: TrialId,
    pub task: TaskId,
    pub arm: ArmId,
    pub run_index: u32,
    pub phase: crate::schedule::SchedulePhase,
    pub block: crate::schedule::BlockName,
    pub order_index: u64,
    pub seed: u64,
    // Attempt.
    pub attempt: u32,
    /// The attempt's OpenTelemetry trace id (32 hex digits), derived from campaign, trial id
    /// and attempt; none for a trial that never started.
    #[serde(default)]
    pub trace_id: Option<String>,
    pub lane: Option<LaneName>,
    pub host: Option<HostName>,
    pub worker: Option<String>,
    pub driver: Option<DriverIdentity>,
    pub status: Status,
    pub failure_kind: Option<FailureKind>,
    pub reset_epoch: Option<i64>,
    // Store.
    #[serde(rename = "final")]
    pub is_final: bool,
    pub excluded: bool,
    pub excluded_reason: Option<ExcludedReason>,
    pub counted: bool,
    pub duplicate: bool,
    pub late: bool,
    pub paired: bool,
    /// A row of a smoke run (a campaign derived with `--smoke`), never of a pre-registered
    /// campaign. Written only when true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub smoke: bool,
    /// The operator retry pass (`lanes retry`, from 1) that requeued this trial: on its
    /// `requeued` row and every row after it. Written only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_pass: Option<u32>,
    /// On a `requeued` row: what the operator asked, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requeue: Option<RequeueNote>,
    /// What the attempt obtained (none of it on a row the store writes itself).
    #[serde(flatten)]
    pub result: AttemptResult,
    /// The sum of the phase walls.
    pub wall_s: f64,
    #[serde(flatten)]
    pub record: AttemptRecord,
    /// When the store wrote the row.
    pub written_utc: UtcTime,
}

/// What an operator retry pass recorded, on each trial's `requeued` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequeueNote {
    /// The pass, from 1.
    pub pass: u32,
    /// Which trials it took, in words: `excluded` or `excluded, reason infra_failure:*`.
    pub selection: String,
    /// The operator's note.
    pub note: String,
}

/// The decision fields the store fills in when it writes a row.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StoreFields {
    pub seq: u64,
    pub spec_hash: String,
    pub is_final: bool,
    pub excluded_reason: Option<ExcludedReason>,
    pub counted: bool,
    pub duplicate: bool,
    pub late: bool,
    pub paired: bool,
    pub smoke: bool,
    pub retry_pass: Option<u32>,
    pub written_utc: UtcTime,
}

impl Row {
    /// The row of a lane's outcome.
    pub fn from_outcome(
        campaign: &CampaignId,
        trial: &Trial,
        outcome: Outcome,
        store: StoreFields,
    ) -> Self {
        let mut row = Self::bare(
            campaign,
            trial,
            outcome.token.attempt,
            outcome.status,
            outcome.failure_kind,
            store,
        );
        row.lane = Some(outcome.lane);
        row.host = Some(outcome.host);
        row.worker = (!outcome.worker.is_empty()).then_some(outcome.worker);
        row.driver = outcome.driver;
        row.reset_epoch = outcome.reset_epoch;
        row.wall_s = outcome.result.walls.total();
        row.result = outcome.result;
        row.record = outcome.record;
        row
    }

    /// A row the store writes itself (reaps, cancellations, `not_started`).
    pub fn bare(
        campaign: &CampaignId,
        trial: &Trial,
        attempt: u32,
        status: Status,
        failure_kind: Option<FailureKind>,
        store: StoreFields,
    ) -> Self {
        Self {
            schema: ROW_SCHEMA.to_owned(),
            seq: store.seq,
            campaign: campaign.clone(),
            spec_hash: store.spec_hash,
            trial_id: trial.trial_id.clone(),
            task: trial.task.clone(),
            arm: trial.arm.clone(),
            run_index: trial.run_index,
            phase: trial.phase,
            block: trial.block.clone(),
            order_index: trial.order_index,
            seed: trial.seed,
            attempt,
            trace_id: crate::trace::attempt_trace_id(
                campaign.as_str(),
                trial.trial_id.as_str(),
                attempt,
            ),
            lane: None,
            host: None,
            worker: None,
            driver: None,
            status,
            failure_kind,
            reset_epoch: None,
            is_final: store.is_final,
            excluded: store.excluded_reason.is_some(),
            excluded_reason: store.excluded_reason,
            counted: store.counted,
            duplicate: store.duplicate,
            late: store.late,
            paired: store.paired,
            smoke: store.smoke,
            retry_pass: store.retry_pass,
            requeue: None,
            result: AttemptResult::default(),
            wall_s: 0.0,
            record: AttemptRecord::default(),
            written_utc: store.written_utc,
        }
    }

    pub fn token(&self) -> Token {
        Token {
            trial_id: self.trial_id.clone(),
            attempt: self.attempt,
        }
    }
}
