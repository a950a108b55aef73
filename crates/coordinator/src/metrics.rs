//! The coordinator's Prometheus metrics. Attempts and final trials are counted from the
//! events of committed store transactions ([`CommitObserver`]), so they agree with the
//! ledger; store latencies come from [`MeteredStore`](crate::store::MeteredStore), leases
//! reaped and held from the reaper, claim latency from the lane service, refused tokens from
//! the auth interceptor. Labels are bounded: no trial ids, tokens or worker ids; the campaign
//! id only on `lanes_trials_final_total`.

use std::fmt::Write as _;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use lanes_common::ids::CampaignId;
use lanes_common::row::{ExcludedReason, FailureKind, Status};

use crate::auth::Role;
use crate::store::{CommitObserver, Event, EventKind, ReapReport, StoreBackend};

/// A label value written as the type's `as_str` name.
macro_rules! label_value {
    ($t:ty) => {
        impl EncodeLabelValue for $t {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                encoder.write_str(self.as_str())
            }
        }
    };
}

/// An attempt's row status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatusLabel(pub Status);

impl StatusLabel {
    fn as_str(&self) -> &'static str {
        self.0.as_str()
    }
}
label_value!(StatusLabel);

/// A row's failure kind; `none` when the row has none (a pass or a fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FailureKindLabel(pub Option<FailureKind>);

impl FailureKindLabel {
    fn as_str(&self) -> &'static str {
        self.0.map_or("none", FailureKind::as_str)
    }
}
label_value!(FailureKindLabel);

/// How a trial became final, as the campaign status counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinalOutcome {
    Counted,
    /// Excluded by the retry or preflight rules.
    Excluded,
    /// Its phase-2 block was refused: a `not_started` row.
    NotStarted,
}

impl FinalOutcome {
    pub fn of(counted: bool, excluded: Option<&ExcludedReason>) -> Self {
        match (counted, excluded) {
            (true, _) => Self::Counted,
            (false, Some(ExcludedReason::Phase2Refused(_))) => Self::NotStarted,
            (false, _) => Self::Excluded,
        }
    }

    fn as_str(&self) -> &'static str {
        match self {
            Self::Counted => "counted",
            Self::Excluded => "excluded",
            Self::NotStarted => "not_started",
        }
    }
}
label_value!(FinalOutcome);

/// Why the reaper took a lease back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReapReason {
    /// Its deadline passed: a `lease_expired` row.
    Expired,
    /// Never delivered, or the campaign was stopping: a `cancelled` row.
    Cancelled,
}

impl ReapReason {
    fn as_str(&self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
        }
    }
}
label_value!(ReapReason);

/// The role whose token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoleLabel(pub Role);

impl RoleLabel {
    fn as_str(&self) -> &'static str {
        self.0.name()
    }
}
label_value!(RoleLabel);

/// A store operation, by its `Store` method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOp {
    Submit,
    Claim,
    Renew,
    Forfeit,
    Complete,
    Release,
    Reap,
    Stop,
    Status,
    Rows,
    Events,
    List,
    Spec,
    Campaign,
    LeaseKey,
    Ping,
    Delete,
    Requeue,
    LoginCode,
    Bundle,
}

impl StoreOp {
    fn as_str(&self) -> &'static str {
        match self {
            Self::Submit => "submit",
            Self::Claim => "claim",
            Self::Renew => "renew",
            Self::Forfeit => "forfeit",
            Self::Complete => "complete",
            Self::Release => "release",
            Self::Reap => "reap",
            Self::Stop => "stop",
            Self::Status => "status",
            Self::Rows => "rows",
            Self::Events => "events",
            Self::List => "list",
            Self::Spec => "spec",
            Self::Campaign => "campaign",
            Self::LeaseKey => "lease_key",
            Self::Ping => "ping",
            Self::Delete => "delete",
            Self::Requeue => "requeue",
            Self::LoginCode => "login_code",
            Self::Bundle => "bundle",
        }
    }
}
label_value!(StoreOp);
label_value!(StoreBackend);

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct FinishedLabels {
    pub status: StatusLabel,
    pub failure_kind: FailureKindLabel,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct FinalLabels {
    pub campaign: String,
    pub outcome: FinalOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReapLabels {
    pub reason: ReapReason,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct StoreOpLabels {
    pub op: StoreOp,
    pub backend: StoreBackend,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct AuthLabels {
    pub role: RoleLabel,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Latencies of store operations and claims: 0.25 ms to ~8 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

/// Every metric the coordinator exposes. Cheap to share: each metric is a handle.
#[derive(Debug)]
pub struct CoordinatorMetrics {
    attempts_started: Counter,
    attempts_finished: Family<FinishedLabels, Counter>,
    trials_final: Family<FinalLabels, Counter>,
    leases_in_flight: Gauge,
    leases_reaped: Family<ReapLabels, Counter>,
    claim_duration: Histogram,
    store_op_duration: Histograms<StoreOpLabels>,
    store_conflicts: Counter,
    auth_refused: Family<AuthLabels, Counter>,
}

impl Default for CoordinatorMetrics {
    fn default() -> Self {
        Self {
            attempts_started: Counter::default(),
            attempts_finished: Family::default(),
            trials_final: Family::default(),
            leases_in_flight: Gauge::default(),
            leases_reaped: Family::default(),
            claim_duration: latency_histogram(),
            store_op_duration: Family::new_with_constructor(latency_histogram),
            store_conflicts: Counter::default(),
            auth_refused: Family::default(),
        }
    }
}

impl CoordinatorMetrics {
    /// Adds every metric to `registry` (counters without `_total`: the encoder appends it).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "lanes_attempts_started",
            "Attempts claimed (leases issued), from committed transactions",
            self.attempts_started.clone(),
        );
        registry.register(
            "lanes_attempts_finished",
            "Ledger rows written for attempts, by status and failure kind (none when it has none)",
            self.attempts_finished.clone(),
        );
        registry.register(
            "lanes_trials_final",
            "Trials that became final, by campaign and outcome (counted, excluded, not_started)",
            self.trials_final.clone(),
        );
        registry.register(
            "lanes_leases_in_flight",
            "Leases held in the store (every campaign), as of this replica's last reaper pass",
            self.leases_in_flight.clone(),
        );
        registry.register(
            "lanes_leases_reaped",
            "Leases this replica's reaper took back, by reason",
            self.leases_reaped.clone(),
        );
        registry.register(
            "lanes_claim_duration_seconds",
            "Time to answer a lane's work request (the claim across campaigns)",
            self.claim_duration.clone(),
        );
        registry.register(
            "lanes_store_op_duration_seconds",
            "Time of each store operation, by operation and backend",
            self.store_op_duration.clone(),
        );
        registry.register(
            "lanes_store_conflicts",
            "Store commits that lost to another writer's and ran again (Redis)",
            self.store_conflicts.clone(),
        );
        registry.register(
            "lanes_auth_refused",
            "Requests refused for a missing or wrong bearer token, by role",
            self.auth_refused.clone(),
        );
    }

    pub fn observe_claim(&self, took: std::time::Duration) {
        self.claim_duration.observe(took.as_secs_f64());
    }

    pub fn observe_store_op(&self, op: StoreOp, backend: StoreBackend, took: std::time::Duration) {
        self.store_op_duration
            .get_or_create(&StoreOpLabels { op, backend })
            .observe(took.as_secs_f64());
    }

    /// One reaper pass over one campaign.
    pub fn reaped(&self, report: &ReapReport) {
        for (reason, n) in [
            (ReapReason::Expired, report.expired),
            (ReapReason::Cancelled, report.cancelled),
        ] {
            if n > 0 {
                self.leases_reaped
                    .get_or_create(&ReapLabels { reason })
                    .inc_by(u64::from(n));
            }
        }
    }

    /// The leases every campaign holds, summed over a whole reaper pass.
    pub fn set_leases_in_flight(&self, leases: u64) {
        self.leases_in_flight
            .set(i64::try_from(leases).unwrap_or(i64::MAX));
    }

    /// The counter refused tokens of `role` go to, for the interceptor to hold.
    pub fn auth_refused_counter(&self, role: Role) -> Counter {
        self.auth_refused.get_or_create_owned(&AuthLabels {
            role: RoleLabel(role),
        })
    }
}

impl CommitObserver for CoordinatorMetrics {
    fn committed(&self, campaign: &CampaignId, events: &[Event]) {
        for e in events {
            match &e.kind {
                EventKind::AttemptStarted { .. } => {
                    self.attempts_started.inc();
                }
                EventKind::AttemptFinished {
                    status,
                    failure_kind,
                    ..
                } => {
                    self.attempts_finished
                        .get_or_create(&FinishedLabels {
                            status: StatusLabel(*status),
                            failure_kind: FailureKindLabel(*failure_kind),
                        })
                        .inc();
                }
                EventKind::TrialFinal {
                    counted,
                    excluded_reason,
                    ..
                } => {
                    self.trials_final
                        .get_or_create(&FinalLabels {
                            campaign: campaign.to_string(),
                            outcome: FinalOutcome::of(*counted, excluded_reason.as_ref()),
                        })
                        .inc();
                }
                _ => {}
            }
        }
    }

    fn conflicted(&self) {
        self.store_conflicts.inc();
    }
}

mod redis_link;
#[cfg(test)]
mod tests;

pub use redis_link::RedisLinkMetrics;
