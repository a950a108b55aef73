//! Admission: whether a claim may take work now. The claim gates (stop, cutoff, budget,
//! quota and rate-limit pauses per provider, phase 1 pending) each answer go, wait (ask again
//! later) or stop; [`gates_in_force`] lists the ones holding work back, for the claim and the
//! status alike.

mod budget;
mod claim_gate;
mod quota;
mod timing;

use std::collections::BTreeMap;

pub use budget::{BudgetGate, budget_admits, budget_gate};
pub use claim_gate::{ClaimGate, ClaimGateInForce};
pub use quota::{QuotaGate, quota_gate};
pub use timing::{cutoff_admits, pause_until, wall_estimate_s};

use super::NoWorkReason;
use crate::row::QuotaReading;
use crate::state::{CampaignState, StopReason};
use crate::utc::EpochMs;

/// A provider's state at claim time.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderGate {
    Go,
    Wait(NoWorkReason),
}

/// Everything the claim gates read.
#[derive(Debug, Clone)]
pub struct AdmissionInput<'a> {
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
    /// The providers asked about: those of the arms a claim asks for, or every provider.
    pub providers: &'a [String],
    /// Phase-1 trials, and how many of them are final.
    pub phase1_total: u64,
    pub phase1_final: u64,
    /// Whether the campaign has phase-2 runs at all.
    pub has_phase2: bool,
}

/// The verdict of the campaign-wide gates.
#[derive(Debug, Clone, PartialEq)]
pub enum AdmissionVerdict {
    /// Claims may proceed for the providers marked `Go`.
    Open(BTreeMap<String, ProviderGate>),
    /// No claim now; ask again later.
    Wait(NoWorkReason),
    /// The campaign must stop with this reason.
    Stop(StopReason),
}

/// The claim gates holding work back now, in order: per provider (as given) its quota gate,
/// then its rate-limit pause; then the budget; then phase 1 pending. The campaign's state and
/// its cutoff are not gates in force: they end the campaign.
pub fn gates_in_force(input: &AdmissionInput<'_>) -> Vec<ClaimGateInForce> {
    let mut gates = Vec::new();
    for p in input.providers {
        match quota_gate(
            input.quotas.get(p),
            input.quota_wait,
            input.quota_stop,
            input.now_ms,
        ) {
            QuotaGate::Go => {}
            QuotaGate::Wait { until_ms } => gates.push(ClaimGateInForce::quota_wait(p, until_ms)),
            QuotaGate::Stop => gates.push(ClaimGateInForce::quota_stop(p)),
        }
        if let Some(&until_ms) = input.paused_until.get(p)
            && until_ms > input.now_ms
        {
            gates.push(ClaimGateInForce::rate_limit_pause(p, until_ms));
        }
    }
    if let Some(cap) = input.budget_cap_usd
        && budget_gate(Some(cap), input.spend_usd, input.reserved_usd) != BudgetGate::Go
    {
        gates.push(ClaimGateInForce::budget(
            input.spend_usd,
            input.reserved_usd,
            cap,
        ));
    }
    if input.phase1_final < input.phase1_total && input.has_phase2 {
        gates.push(ClaimGateInForce::phase1_pending(
            input.phase1_final,
            input.phase1_total,
        ));
    }
    gates
}

/// Runs the claim gates in order: stop, cutoff, budget, then quota and pauses per provider.
/// Phase 1 pending holds back only phase-2 units, so the claim checks it unit by unit.
pub fn admission_verdict(input: &AdmissionInput<'_>) -> AdmissionVerdict {
    match input.state {
        CampaignState::Running => {}
        CampaignState::Done => return AdmissionVerdict::Wait(NoWorkReason::Done),
        CampaignState::Stopping | CampaignState::Stopped => {
            return AdmissionVerdict::Wait(NoWorkReason::Stopped {
                stop_reason: input.stop_reason,
            });
        }
    }
    if input.cutoff_ms.is_some_and(|c| input.now_ms >= c) {
        return AdmissionVerdict::Stop(StopReason::Time);
    }
    let gates = gates_in_force(input);
    let held = |gate: ClaimGate| gates.iter().any(|g| g.gate == gate);
    if held(ClaimGate::Budget) {
        // Spend alone at the cap never settles below it; open reservations may.
        return match budget_gate(input.budget_cap_usd, input.spend_usd, input.reserved_usd) {
            BudgetGate::Stop => AdmissionVerdict::Stop(StopReason::Budget),
            BudgetGate::Wait | BudgetGate::Go => {
                AdmissionVerdict::Wait(NoWorkReason::BudgetReserved)
            }
        };
    }
    if held(ClaimGate::QuotaStop) {
        return AdmissionVerdict::Stop(StopReason::Quota);
    }
    let mut providers = BTreeMap::new();
    for p in input.providers {
        // A provider's quota gate is listed before its pause, and so wins over it.
        let gate = gates
            .iter()
            .filter(|g| g.provider_name() == Some(p.as_str()))
            .find_map(provider_wait)
            .map_or(ProviderGate::Go, ProviderGate::Wait);
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
            .min_by_key(|r| r.until_ms().unwrap_or(EpochMs::MAX))
            .expect("at least one waiting provider");
        return AdmissionVerdict::Wait(soonest);
    }
    AdmissionVerdict::Open(providers)
}

/// What a per-provider gate in force makes its provider's claims wait for.
fn provider_wait(g: &ClaimGateInForce) -> Option<NoWorkReason> {
    let provider = g.detail.clone();
    match (g.gate, g.until_ms) {
        (ClaimGate::QuotaWait, Some(until_ms)) => {
            Some(NoWorkReason::QuotaWait { provider, until_ms })
        }
        (ClaimGate::RateLimitPause, Some(until_ms)) => {
            Some(NoWorkReason::RateLimited { provider, until_ms })
        }
        (ClaimGate::QuotaWait | ClaimGate::RateLimitPause, None)
        | (ClaimGate::QuotaStop | ClaimGate::Budget | ClaimGate::Phase1Pending, _) => None,
    }
}
