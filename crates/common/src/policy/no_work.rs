//! Why a lane got no work, and so when it should ask again.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::offer::DriverRefusal;
use crate::state::StopReason;
use crate::utc::EpochMs;

/// Why a work request got no work. A campaign's claim answers all but `NoCampaigns` and
/// `StoreUnavailable`, which the coordinator adds: they concern no campaign in particular.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum NoWorkReason {
    /// The campaign is stopping or stopped.
    Stopped { stop_reason: Option<StopReason> },
    /// Every trial is final.
    Done,
    /// Only phase-2 work is left and phase 1 is not final yet.
    Phase1Pending,
    /// Every requested provider waits on its quota until `until_ms`.
    QuotaWait { provider: String, until_ms: EpochMs },
    /// Every requested provider is paused by a rate limit until `until_ms`.
    RateLimited { provider: String, until_ms: EpochMs },
    /// The budget is held by open reservations; they may settle below the cap.
    BudgetReserved,
    /// Nothing is ready; the next delayed retry becomes ready at `next_ms`, if any.
    NothingReady { next_ms: Option<EpochMs> },
    /// The trial would not end before the cutoff.
    CutoffAdmission { estimate_s: f64 },
    /// This lane may not take this campaign's work (e.g. it failed identity pins).
    LaneExcluded,
    /// The arms this lane serves are not in any running campaign.
    NoMatchingArms,
    /// The lane's worker does not run this campaign's driver (or allow its env).
    DriverRefused { refusal: DriverRefusal },
    /// There is no campaign at all.
    NoCampaigns,
    /// The store could not list the campaigns.
    StoreUnavailable { error: String },
}

impl NoWorkReason {
    /// When the wait ends, if known.
    pub fn until_ms(&self) -> Option<EpochMs> {
        match self {
            NoWorkReason::QuotaWait { until_ms, .. }
            | NoWorkReason::RateLimited { until_ms, .. } => Some(*until_ms),
            NoWorkReason::NothingReady { next_ms } => *next_ms,
            NoWorkReason::Stopped { .. }
            | NoWorkReason::Done
            | NoWorkReason::Phase1Pending
            | NoWorkReason::BudgetReserved
            | NoWorkReason::CutoffAdmission { .. }
            | NoWorkReason::LaneExcluded
            | NoWorkReason::NoMatchingArms
            | NoWorkReason::DriverRefused { .. }
            | NoWorkReason::NoCampaigns
            | NoWorkReason::StoreUnavailable { .. } => None,
        }
    }

    /// When to ask again, given the current time.
    pub fn retry_after_ms(&self, now_ms: EpochMs, default_ms: u64) -> u64 {
        match self.until_ms() {
            Some(t) => u64::try_from(t.saturating_sub(now_ms))
                .unwrap_or(0)
                .min(default_ms * 10),
            None => default_ms,
        }
    }
}

/// The reason in words, for people and logs: its snake_case name, with what it waits on.
impl fmt::Display for NoWorkReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoWorkReason::Stopped {
                stop_reason: Some(r),
            } => write!(f, "stopped ({r})"),
            NoWorkReason::Stopped { stop_reason: None } => f.write_str("stopped"),
            NoWorkReason::Done => f.write_str("done"),
            NoWorkReason::Phase1Pending => f.write_str("phase1_pending"),
            NoWorkReason::QuotaWait { provider, until_ms } => {
                write!(
                    f,
                    "quota_wait:{provider} until {}",
                    crate::utc::format_rfc3339(*until_ms)
                )
            }
            NoWorkReason::RateLimited { provider, until_ms } => {
                write!(
                    f,
                    "rate_limited:{provider} until {}",
                    crate::utc::format_rfc3339(*until_ms)
                )
            }
            NoWorkReason::BudgetReserved => f.write_str("budget_reserved"),
            NoWorkReason::NothingReady { .. } => f.write_str("nothing_ready"),
            NoWorkReason::CutoffAdmission { estimate_s } => {
                write!(
                    f,
                    "cutoff_admission: estimate {estimate_s:.0}s ends after the cutoff"
                )
            }
            NoWorkReason::LaneExcluded => f.write_str("lane_excluded"),
            NoWorkReason::NoMatchingArms => f.write_str("no_matching_arms"),
            NoWorkReason::DriverRefused { refusal } => write!(f, "driver_refused: {refusal}"),
            NoWorkReason::NoCampaigns => f.write_str("no_campaigns"),
            NoWorkReason::StoreUnavailable { error } => write!(f, "store unavailable: {error}"),
        }
    }
}
