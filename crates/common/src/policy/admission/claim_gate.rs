//! The claim gates by name, and one gate holding work back as the status and the event log
//! show it. A claim gate is what holds claims back (budget, quota, rate limit, phase 1); it is
//! not the feasibility gate phase of an attempt (`row::GateRecord`).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::utc::EpochMs;

/// A claim gate. Its name (`as_str`, serde) is what status output, events and the wire show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClaimGate {
    /// A provider's quota reading is at or above `quota_wait`: its arms wait for the reset.
    QuotaWait,
    /// A provider's quota reading is at or above `quota_stop`: the campaign stops.
    QuotaStop,
    /// A provider answered a rate limit: its arms pause until the reset.
    RateLimitPause,
    /// Spend plus open reservations reached the budget cap.
    Budget,
    /// Phase 1 is not final yet, so phase-2 work waits.
    Phase1Pending,
}

impl ClaimGate {
    pub const ALL: [ClaimGate; 5] = [
        ClaimGate::QuotaWait,
        ClaimGate::QuotaStop,
        ClaimGate::RateLimitPause,
        ClaimGate::Budget,
        ClaimGate::Phase1Pending,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ClaimGate::QuotaWait => "quota_wait",
            ClaimGate::QuotaStop => "quota_stop",
            ClaimGate::RateLimitPause => "rate_limit_pause",
            ClaimGate::Budget => "budget",
            ClaimGate::Phase1Pending => "phase1_pending",
        }
    }

    /// Whether the gate holds back one provider's arms (its detail is then the provider).
    pub fn is_per_provider(self) -> bool {
        match self {
            ClaimGate::QuotaWait | ClaimGate::QuotaStop | ClaimGate::RateLimitPause => true,
            ClaimGate::Budget | ClaimGate::Phase1Pending => false,
        }
    }
}

impl fmt::Display for ClaimGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A claim gate currently holding work back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimGateInForce {
    pub gate: ClaimGate,
    /// The provider for a per-provider gate; otherwise the gate's state in words.
    pub detail: String,
    /// When it lifts, if known.
    pub until_ms: Option<EpochMs>,
}

impl ClaimGateInForce {
    pub fn quota_wait(provider: &str, until_ms: EpochMs) -> Self {
        Self::provider(ClaimGate::QuotaWait, provider, Some(until_ms))
    }

    pub fn quota_stop(provider: &str) -> Self {
        Self::provider(ClaimGate::QuotaStop, provider, None)
    }

    pub fn rate_limit_pause(provider: &str, until_ms: EpochMs) -> Self {
        Self::provider(ClaimGate::RateLimitPause, provider, Some(until_ms))
    }

    pub fn budget(spend_usd: f64, reserved_usd: f64, cap_usd: f64) -> Self {
        Self {
            gate: ClaimGate::Budget,
            detail: format!(
                "spend {spend_usd:.2} + reserved {reserved_usd:.2} of cap {cap_usd:.2}"
            ),
            until_ms: None,
        }
    }

    pub fn phase1_pending(phase1_final: u64, phase1_total: u64) -> Self {
        Self {
            gate: ClaimGate::Phase1Pending,
            detail: format!("{phase1_final} of {phase1_total} phase-1 trials final"),
            until_ms: None,
        }
    }

    fn provider(gate: ClaimGate, provider: &str, until_ms: Option<EpochMs>) -> Self {
        Self {
            gate,
            detail: provider.to_owned(),
            until_ms,
        }
    }

    /// The provider it holds back, for a per-provider gate.
    pub fn provider_name(&self) -> Option<&str> {
        self.gate.is_per_provider().then_some(self.detail.as_str())
    }
}
