//! The retry decision: given a trial's prior rows and a new
//! result, what happens to the trial.
//!
//! Budgets are derived from the ledger, counting only the *first* row of each token, so a
//! resume, a late outcome or a replayed completion never double-counts an attempt.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use crate::ids::{HostName, LaneName};
use crate::row::{ExcludedReason, FailureKind, RetryBudget, Row, Status};
use crate::spec::RetryPolicy;
use crate::state::StopReason;
use crate::utc::EpochMs;

/// Where a retry may run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    Any,
    /// Not on this lane (preflight blocks, identity mismatches).
    OtherLane(LaneName),
    /// Preferably on another host (infra retries, anti-affinity).
    OtherHost(HostName),
}

/// What happens to the trial after a new result.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The first score: the row counts and the trial is final. `revoke_newer` is set when the
    /// score arrived late, so any newer lease of the trial must be revoked.
    Counted { revoke_newer: bool },
    /// Evidence only: another attempt already scored, the trial is already final, or a late
    /// result carries no score. No retry decision, no budget used.
    Duplicate,
    /// Run the trial again, no earlier than `at_ms`.
    Retry {
        at_ms: EpochMs,
        placement: Placement,
        /// Whether this result used the trial's infra budget.
        uses_budget: bool,
    },
    /// Final and excluded from the denominator's scores.
    Excluded(ExcludedReason),
    /// Stop the campaign. The trial is not final: a resume retries it, at `retry_at_ms`.
    Stop {
        reason: StopReason,
        retry_at_ms: EpochMs,
    },
}

/// The new result to decide on.
#[derive(Debug, Clone, PartialEq)]
pub struct NewResult<'a> {
    pub attempt: u32,
    pub status: Status,
    pub failure_kind: Option<FailureKind>,
    /// Epoch seconds, for `rate_limit`.
    pub reset_epoch: Option<i64>,
    /// The token already has a row (the reaper's `lease_expired`): this result is late.
    pub late: bool,
    pub lane: &'a LaneName,
    pub host: &'a HostName,
}

/// What a trial's prior rows say, derived once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrialHistory {
    /// The winning attempt, if any row counted.
    pub winner: Option<u32>,
    /// Some row made the trial final (counted or excluded).
    pub is_final: bool,
    /// Infra failures that used the infra budget (auth included).
    pub infra_used: u32,
    pub overloaded_used: u32,
    /// Blocks in a row, most recent last (cancellations do not break the streak).
    pub blocked_streak: u32,
}

impl TrialHistory {
    /// Derives the history from a trial's rows, in ledger order.
    pub fn from_rows<'r>(rows: impl IntoIterator<Item = &'r Row>) -> Self {
        let mut h = TrialHistory::default();
        let mut seen = HashSet::new();
        for row in rows {
            // Only the first row of a token counts toward budgets.
            let first = row.attempt == 0 || seen.insert(row.attempt);
            h.add_row(row, first);
        }
        h
    }

    /// Folds in one row; `first_of_token` says whether it is its token's first row.
    pub fn add_row(&mut self, row: &Row, first_of_token: bool) {
        if row.status == Status::Requeued {
            // An operator requeued the excluded trial: it is pending again, with every retry
            // budget fresh.
            *self = TrialHistory {
                winner: self.winner,
                ..TrialHistory::default()
            };
            return;
        }
        if row.counted {
            self.winner = Some(row.attempt);
        }
        self.is_final |= row.is_final;
        if first_of_token {
            self.add_first_row(row.status, row.failure_kind);
        }
    }

    /// Folds in the first row of a token.
    pub fn add_first_row(&mut self, status: Status, kind: Option<FailureKind>) {
        match (status, kind) {
            (Status::Blocked, Some(FailureKind::Preflight)) => self.blocked_streak += 1,
            (Status::Cancelled, _) => {}
            (Status::InfraError | Status::Blocked, Some(k)) if uses_infra_budget(k) => {
                self.infra_used += 1;
                self.blocked_streak = 0;
            }
            (Status::InfraError, Some(FailureKind::Overloaded)) => {
                self.overloaded_used += 1;
                self.blocked_streak = 0;
            }
            _ => self.blocked_streak = 0,
        }
    }
}

/// Kinds that spend the trial's infra budget.
pub fn uses_infra_budget(kind: FailureKind) -> bool {
    kind.budget() == RetryBudget::Infra
}

fn secs(s: u64) -> EpochMs {
    i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)
}

/// Decides what a new result does to its trial.
pub fn decide(
    history: &TrialHistory,
    new: &NewResult<'_>,
    policy: &RetryPolicy,
    now_ms: EpochMs,
    cutoff_ms: Option<EpochMs>,
) -> Decision {
    let scored = new.status.is_scored();
    // An obtained score is never thrown away: the first one counts, even late, even after an
    // exclusion.
    if scored && history.winner.is_none() {
        return Decision::Counted {
            revoke_newer: new.late || history.is_final,
        };
    }
    if scored || new.late || history.is_final || history.winner.is_some() {
        return Decision::Duplicate;
    }
    let retry_now = |placement| Decision::Retry {
        at_ms: now_ms,
        placement,
        uses_budget: false,
    };
    match (new.status, new.failure_kind) {
        (Status::Cancelled, _) => retry_now(Placement::Any),
        (_, Some(FailureKind::IdentityMismatch)) => {
            retry_now(Placement::OtherLane(new.lane.clone()))
        }
        (Status::Blocked, _) => {
            if history.blocked_streak + 1 >= policy.preflight_limit {
                Decision::Excluded(ExcludedReason::PreflightLimit)
            } else {
                retry_now(Placement::OtherLane(new.lane.clone()))
            }
        }
        (_, Some(FailureKind::RateLimit)) => {
            let at_ms = new
                .reset_epoch
                .map(|s| s.saturating_mul(1000))
                .filter(|&t| t > now_ms)
                .unwrap_or_else(|| now_ms.saturating_add(secs(policy.rate_limit_backoff_s)));
            match cutoff_ms {
                Some(cutoff) if at_ms > cutoff => Decision::Stop {
                    reason: StopReason::Time,
                    retry_at_ms: at_ms,
                },
                _ => Decision::Retry {
                    at_ms,
                    placement: Placement::Any,
                    uses_budget: false,
                },
            }
        }
        (_, Some(FailureKind::Overloaded)) => {
            let n = history.overloaded_used;
            if n < policy.overloaded_retries {
                let backoff = secs(policy.overloaded_backoff_s).saturating_mul(1 << n.min(30));
                Decision::Retry {
                    at_ms: now_ms.saturating_add(backoff),
                    placement: Placement::Any,
                    uses_budget: false,
                }
            } else {
                Decision::Excluded(ExcludedReason::InfraFailure(FailureKind::Overloaded))
            }
        }
        (_, Some(FailureKind::Auth)) => {
            let at_ms = now_ms.saturating_add(secs(policy.auth_backoff_s));
            if history.infra_used < policy.infra_retries {
                Decision::Retry {
                    at_ms,
                    placement: Placement::Any,
                    uses_budget: true,
                }
            } else {
                Decision::Stop {
                    reason: StopReason::Auth,
                    retry_at_ms: at_ms,
                }
            }
        }
        (_, kind) => {
            // Any other infra kind; a missing kind is treated as a harness error.
            let kind = kind.unwrap_or(FailureKind::HarnessError);
            if history.infra_used < policy.infra_retries {
                Decision::Retry {
                    at_ms: now_ms.saturating_add(secs(policy.infra_backoff_s)),
                    placement: Placement::OtherHost(new.host.clone()),
                    uses_budget: true,
                }
            } else {
                Decision::Excluded(ExcludedReason::InfraFailure(kind))
            }
        }
    }
}
