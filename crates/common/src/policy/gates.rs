//! The gates checked at every claim: stop, cutoff, budget, quota per
//! provider, and phase 1 pending. Each answers go, wait (ask again later) or stop.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::row::QuotaReading;
use crate::state::{CampaignState, StopReason};
use crate::utc::EpochMs;

/// Why a claim got no work, and so when to ask again.
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
}

impl NoWorkReason {
    /// When to ask again, given the current time.
    pub fn retry_after_ms(&self, now_ms: EpochMs, default_ms: u64) -> u64 {
        let until = match self {
            NoWorkReason::QuotaWait { until_ms, .. }
            | NoWorkReason::RateLimited { until_ms, .. } => Some(*until_ms),
            NoWorkReason::NothingReady { next_ms } => *next_ms,
            _ => None,
        };
        match until {
            Some(t) => u64::try_from(t.saturating_sub(now_ms))
                .unwrap_or(0)
                .min(default_ms * 10),
            None => default_ms,
        }
    }
}

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
        }
    }
}

/// A provider's quota state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum QuotaGate {
    Go,
    /// At or above `quota_wait`: its arms wait until the reading's reset.
    Wait {
        until_ms: EpochMs,
    },
    /// At or above `quota_stop`: the campaign stops.
    Stop,
}

/// The quota gate of one provider, from its latest reading.
pub fn quota_gate(
    reading: Option<&QuotaReading>,
    quota_wait: f64,
    quota_stop: Option<f64>,
    now_ms: EpochMs,
) -> QuotaGate {
    let Some(r) = reading else {
        return QuotaGate::Go;
    };
    let reset_ms = r.reset_epoch.map(|s| s.saturating_mul(1000));
    // A reading whose window has reset says nothing about now.
    if reset_ms.is_some_and(|t| t <= now_ms) {
        return QuotaGate::Go;
    }
    if quota_stop.is_some_and(|s| r.utilisation >= s) {
        return QuotaGate::Stop;
    }
    if r.utilisation >= quota_wait {
        // Without a reset time, wait a minute and read again.
        return QuotaGate::Wait {
            until_ms: reset_ms.unwrap_or(now_ms + 60_000),
        };
    }
    QuotaGate::Go
}

/// The budget gate's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BudgetGate {
    Go,
    /// Spend plus open reservations reached the cap, but the reservations may settle below it.
    Wait,
    /// Spend alone reached the cap.
    Stop,
}

/// Money below this is float residue, not spend.
const CENT_FRACTION: f64 = 1e-9;

/// Whether a unit that reserves `need` may start. A unit whose every trial carries a
/// `max_cost_usd` guard reserves the guards, and starts only if `spend + reserved + need`
/// stays within the cap: while drivers honour their guard, spend never passes the cap. If it
/// does not fit and nothing else is reserved, nothing will ever fit, and the campaign stops.
/// A unit without guards reserves an estimate and is admitted while `spend + reserved` is
/// below the cap ([`budget_gate`]): spend may then pass the cap by at most one attempt's
/// overrun per lane in flight.
pub fn budget_admits(
    cap: Option<f64>,
    spend: f64,
    reserved: f64,
    need: f64,
    guarded: bool,
) -> BudgetGate {
    let gate = budget_gate(cap, spend, reserved);
    match cap {
        Some(cap) if guarded && gate == BudgetGate::Go => {
            if spend + reserved + need <= cap + CENT_FRACTION {
                BudgetGate::Go
            } else if reserved > CENT_FRACTION {
                BudgetGate::Wait
            } else {
                BudgetGate::Stop
            }
        }
        _ => gate,
    }
}

/// The budget gate: a claim is admitted only while `spend + reserved` is below the cap. Once
/// that sum reaches the cap, claims wait for the open reservations to settle; once the spend
/// alone reaches it, the campaign stops (`STOPPED_BUDGET`). So N concurrent lanes overshoot the
/// cap by at most the last admitted trials' actual overrun, never by N trials.
pub fn budget_gate(cap: Option<f64>, spend: f64, reserved: f64) -> BudgetGate {
    match cap {
        None => BudgetGate::Go,
        Some(cap) if spend >= cap => BudgetGate::Stop,
        Some(cap) if spend + reserved >= cap => BudgetGate::Wait,
        Some(_) => BudgetGate::Go,
    }
}

/// A provider's state at claim time.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderGate {
    Go,
    Wait(NoWorkReason),
}

/// Everything the campaign-wide gates read.
#[derive(Debug, Clone)]
pub struct GateInput<'a> {
    pub now_ms: EpochMs,
    pub state: CampaignState,
    pub stop_reason: Option<StopReason>,
    pub cutoff_ms: Option<EpochMs>,
    pub budget_cap_usd: Option<f64>,
    pub spend_usd: f64,
    pub reserved_usd: f64,
    pub quota_wait: f64,
    pub quota_stop: Option<f64>,
    /// Latest reading per provider.
    pub quotas: &'a BTreeMap<String, QuotaReading>,
    /// Rate-limit pauses per provider, until epoch ms.
    pub paused_until: &'a BTreeMap<String, EpochMs>,
    /// The providers of the arms the claim asks for.
    pub providers: &'a [String],
}

/// The verdict of the campaign-wide gates.
#[derive(Debug, Clone, PartialEq)]
pub enum GateVerdict {
    /// Claims may proceed for the providers marked `Go`.
    Open(BTreeMap<String, ProviderGate>),
    /// No claim now; ask again later.
    Wait(NoWorkReason),
    /// The campaign must stop with this reason.
    Stop(StopReason),
}

/// Runs the gates in order: stop, cutoff, budget, then quota and pauses per provider.
pub fn claim_gate(input: &GateInput<'_>) -> GateVerdict {
    match input.state {
        CampaignState::Running => {}
        CampaignState::Done => return GateVerdict::Wait(NoWorkReason::Done),
        CampaignState::Stopping | CampaignState::Stopped => {
            return GateVerdict::Wait(NoWorkReason::Stopped {
                stop_reason: input.stop_reason,
            });
        }
    }
    if input.cutoff_ms.is_some_and(|c| input.now_ms >= c) {
        return GateVerdict::Stop(StopReason::Time);
    }
    match budget_gate(input.budget_cap_usd, input.spend_usd, input.reserved_usd) {
        BudgetGate::Go => {}
        BudgetGate::Wait => return GateVerdict::Wait(NoWorkReason::BudgetReserved),
        BudgetGate::Stop => return GateVerdict::Stop(StopReason::Budget),
    }
    let mut providers = BTreeMap::new();
    for p in input.providers {
        let gate = match quota_gate(
            input.quotas.get(p),
            input.quota_wait,
            input.quota_stop,
            input.now_ms,
        ) {
            QuotaGate::Stop => return GateVerdict::Stop(StopReason::Quota),
            QuotaGate::Wait { until_ms } => ProviderGate::Wait(NoWorkReason::QuotaWait {
                provider: p.clone(),
                until_ms,
            }),
            QuotaGate::Go => match input.paused_until.get(p) {
                Some(&until_ms) if until_ms > input.now_ms => {
                    ProviderGate::Wait(NoWorkReason::RateLimited {
                        provider: p.clone(),
                        until_ms,
                    })
                }
                _ => ProviderGate::Go,
            },
        };
        providers.insert(p.clone(), gate);
    }
    if !providers.is_empty() && providers.values().all(|g| g != &ProviderGate::Go) {
        // Every provider waits: answer with the one that frees up first.
        let soonest = providers
            .values()
            .filter_map(|g| match g {
                ProviderGate::Wait(r) => Some(r.clone()),
                ProviderGate::Go => None,
            })
            .min_by_key(|r| match r {
                NoWorkReason::QuotaWait { until_ms, .. }
                | NoWorkReason::RateLimited { until_ms, .. } => *until_ms,
                _ => i64::MAX,
            })
            .expect("at least one waiting provider");
        return GateVerdict::Wait(soonest);
    }
    GateVerdict::Open(providers)
}
