//! The names a row is made of: its status, failure kind, phase, exclusion and phase-2
//! refusal, each an enum with one spelling (`as_str`, `Display`, `FromStr`, serde) shared by
//! the ledger, the protocol and the report.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

macro_rules! string_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $s:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($(#[$vdoc])* $variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $s),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                match s {
                    $($s => Ok($name::$variant),)+
                    _ => Err(UnknownName { what: stringify!($name), name: s.to_owned() }),
                }
            }
        }
    };
}

/// A status, kind or phase name that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {name:?}")]
pub struct UnknownName {
    pub what: &'static str,
    pub name: String,
}

string_enum!(
    /// How an attempt ended.
    Status {
        /// The agent finished and was evaluated.
        Completed = "completed",
        Timeout = "timeout",
        MaxTurns = "max_turns",
        AgentError = "agent_error",
        /// The harness ended the trial for breaking a rule: final, scored as failed.
        Violation = "violation",
        InfraError = "infra_error",
        /// Preflight refused after the claim; nothing ran.
        Blocked = "blocked",
        /// A stop or a lost lease ended the attempt; re-queued at once, no budget used.
        Cancelled = "cancelled",
        /// A phase-2 trial refused by the phase-2 rule. Written by the store only.
        NotStarted = "not_started",
        /// Not an attempt: an operator requeued this excluded trial (`lanes retry`). Written by
        /// the store only; the trial is pending again, with a fresh retry budget.
        Requeued = "requeued",
    }
);

impl Status {
    /// Evaluated and counted: the agent's fault is a score, not an exclusion.
    pub fn is_scored(self) -> bool {
        matches!(
            self,
            Status::Completed
                | Status::Timeout
                | Status::MaxTurns
                | Status::AgentError
                | Status::Violation
        )
    }
}

string_enum!(
    /// Why an unscored attempt failed.
    FailureKind {
        RateLimit = "rate_limit",
        Overloaded = "overloaded",
        Auth = "auth",
        BootFailed = "boot_failed",
        ResetUnverified = "reset_unverified",
        /// The guest's health endpoint was unreachable past the grace window.
        GuestLost = "guest_lost",
        DriverCrash = "driver_crash",
        EvaluatorError = "evaluator_error",
        HarnessError = "harness_error",
        /// The driver's identity differs from `[driver.expect]`.
        IdentityMismatch = "identity_mismatch",
        Preflight = "preflight",
        /// Written by the reaper.
        LeaseExpired = "lease_expired",
    }
);

/// Which retry allowance a failure of some kind spends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryBudget {
    /// The trial's infra budget (`infra_retries`).
    Infra,
    /// Its own count of overload retries (`overloaded_retries`).
    Overloaded,
    /// Nothing: the retry waits (rate limits) or moves to another lane (preflight, identity).
    Free,
}

// Every question about a kind is an exhaustive match, so a new kind is a compile error in
// each place that must decide about it.
impl FailureKind {
    /// The allowance a retry after this kind spends.
    pub fn budget(self) -> RetryBudget {
        match self {
            FailureKind::RateLimit | FailureKind::Preflight | FailureKind::IdentityMismatch => {
                RetryBudget::Free
            }
            FailureKind::Overloaded => RetryBudget::Overloaded,
            FailureKind::Auth
            | FailureKind::BootFailed
            | FailureKind::ResetUnverified
            | FailureKind::GuestLost
            | FailureKind::DriverCrash
            | FailureKind::EvaluatorError
            | FailureKind::HarnessError
            | FailureKind::LeaseExpired => RetryBudget::Infra,
        }
    }

    /// Whether a driver may report this kind for an attempt. Preflight refusals are the
    /// lane's to write and lease expiry the store's; a driver naming them gets
    /// `harness_error` instead.
    pub fn driver_reportable(self) -> bool {
        match self {
            FailureKind::Preflight | FailureKind::LeaseExpired => false,
            FailureKind::RateLimit
            | FailureKind::Overloaded
            | FailureKind::Auth
            | FailureKind::BootFailed
            | FailureKind::ResetUnverified
            | FailureKind::GuestLost
            | FailureKind::DriverCrash
            | FailureKind::EvaluatorError
            | FailureKind::HarnessError
            | FailureKind::IdentityMismatch => true,
        }
    }

    /// Whether the sim driver can inject this kind as a fault: what a driver itself can
    /// cause. Identity pins are checked by the lane, so the sim cannot fake a mismatch.
    pub fn sim_injectable(self) -> bool {
        match self {
            FailureKind::Preflight | FailureKind::LeaseExpired | FailureKind::IdentityMismatch => {
                false
            }
            FailureKind::RateLimit
            | FailureKind::Overloaded
            | FailureKind::Auth
            | FailureKind::BootFailed
            | FailureKind::ResetUnverified
            | FailureKind::GuestLost
            | FailureKind::DriverCrash
            | FailureKind::EvaluatorError
            | FailureKind::HarnessError => true,
        }
    }
}

string_enum!(
    /// The lifecycle phase an attempt last reported.
    Phase {
        /// Leased, not yet seen by a lane.
        Assigned = "assigned",
        Admit = "admit",
        Boot = "boot",
        Reset = "reset",
        Gate = "gate",
        Agent = "agent",
        Evaluate = "evaluate",
        Publish = "publish",
    }
);

impl Phase {
    /// Past evaluate: an outcome probably sits in an outbox.
    pub fn is_after_evaluate(self) -> bool {
        matches!(self, Phase::Publish)
    }
}

string_enum!(
    /// Who declared a task infeasible.
    InfeasibleSource {
        Gate = "gate",
        Agent = "agent",
    }
);

string_enum!(
    /// What the feasibility gate concluded.
    GateVerdict {
        /// An explicit infeasible: the agent is skipped, the benchmark's infeasible action is
        /// submitted, and the evaluator scores it.
        Infeasible = "infeasible",
        /// Anything but an explicit infeasible: the agent runs after a fresh reset.
        Proceed = "proceed",
        /// The gate call failed; treated as proceed.
        Error = "error",
    }
);

/// The gate's answer, kept in the row so a gate-ended trial can be told from an agent's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateRecord {
    pub verdict: GateVerdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Turns the gate spent; they count toward `max_turns` and the row's `turns`.
    #[serde(default)]
    pub turns: u32,
    /// What the gate cost; it counts toward the row's `cost_usd` and the budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// Why a final trial is not counted. Serialized as `infra_failure:<kind>` and so on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ExcludedReason {
    /// Infra retries spent on this kind.
    InfraFailure(FailureKind),
    /// `preflight_limit` blocks in a row.
    PreflightLimit,
    /// The phase-2 rule refused the trial's block.
    Phase2Refused(Phase2Refusal),
}

/// Why the phase-2 rule refused a block.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase2Refusal {
    /// The block would not end before the cutoff.
    Cutoff,
    /// The quota of this provider is not "go".
    Quota(String),
}

impl fmt::Display for ExcludedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExcludedReason::InfraFailure(k) => write!(f, "infra_failure:{k}"),
            ExcludedReason::PreflightLimit => f.write_str("preflight_limit"),
            ExcludedReason::Phase2Refused(Phase2Refusal::Cutoff) => {
                f.write_str("phase2_refused:cutoff")
            }
            ExcludedReason::Phase2Refused(Phase2Refusal::Quota(p)) => {
                write!(f, "phase2_refused:quota:{p}")
            }
        }
    }
}

impl FromStr for ExcludedReason {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, UnknownName> {
        let unknown = || UnknownName {
            what: "excluded_reason",
            name: s.to_owned(),
        };
        if s == "preflight_limit" {
            return Ok(ExcludedReason::PreflightLimit);
        }
        if s == "phase2_refused:cutoff" {
            return Ok(ExcludedReason::Phase2Refused(Phase2Refusal::Cutoff));
        }
        if let Some(p) = s.strip_prefix("phase2_refused:quota:") {
            return Ok(ExcludedReason::Phase2Refused(Phase2Refusal::Quota(
                p.to_owned(),
            )));
        }
        if let Some(k) = s.strip_prefix("infra_failure:") {
            return Ok(ExcludedReason::InfraFailure(
                k.parse().map_err(|_| unknown())?,
            ));
        }
        Err(unknown())
    }
}

impl Serialize for ExcludedReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ExcludedReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}
