//! The retry policy table: `policy::decide` over a `TrialHistory`
//! derived from real ledger rows, one attempt after another.

use std::path::Path;

use lanes_common::policy::{Decision, NewResult, Placement, TrialHistory, decide};
use lanes_common::row::{ExcludedReason, FailureKind, Row, Status, StoreFields};
use lanes_common::schedule::{self, Trial};
use lanes_common::spec::{self, Campaign, RetryPolicy};
use lanes_common::state::StopReason;
use lanes_common::utc::EpochMs;

const NOW: EpochMs = 1_800_000_000_000;
const LANE: &str = "host-a-lane-1";
const HOST: &str = "host-a";

fn campaign() -> Campaign {
    let text = r#"
id = "retry"
phase1_runs = 1
schedule_seed = 1
[[arms]]
id = "a"
[tasks]
items = [{ id = "t1" }]
[driver]
sim = {}
"#;
    spec::load_str(text, Path::new("x.toml"), Path::new(".")).unwrap()
}

/// The trial every row below belongs to.
fn trial() -> Trial {
    schedule::trials(&campaign()).next().unwrap()
}

/// The ledger of one trial, built the way the store would: each decision becomes the row's
/// store fields.
struct Ledger {
    trial: Trial,
    rows: Vec<Row>,
    policy: RetryPolicy,
    cutoff_ms: Option<EpochMs>,
}

impl Ledger {
    fn new(policy: RetryPolicy) -> Self {
        Self {
            trial: trial(),
            rows: Vec::new(),
            policy,
            cutoff_ms: None,
        }
    }

    fn history(&self) -> TrialHistory {
        TrialHistory::from_rows(&self.rows)
    }

    fn next_attempt(&self) -> u32 {
        self.rows.iter().map(|r| r.attempt).max().unwrap_or(0) + 1
    }

    /// Decides on a new result of `attempt`, without recording it.
    fn decide_on(
        &self,
        attempt: u32,
        status: Status,
        kind: Option<FailureKind>,
        reset_epoch: Option<i64>,
        late: bool,
    ) -> Decision {
        let new = NewResult {
            attempt,
            status,
            failure_kind: kind,
            reset_epoch,
            late,
            lane: &LANE.parse().unwrap(),
            host: &HOST.parse().unwrap(),
        };
        decide(&self.history(), &new, &self.policy, NOW, self.cutoff_ms)
    }

    /// Appends a row for `attempt` whose store fields follow `decision`.
    fn record(&mut self, attempt: u32, status: Status, kind: Option<FailureKind>, d: &Decision) {
        let (is_final, excluded_reason, counted, duplicate) = match d {
            Decision::Counted { .. } => (true, None, true, false),
            Decision::Duplicate => (false, None, false, true),
            Decision::Retry { .. } | Decision::Stop { .. } => (false, None, false, false),
            Decision::Excluded(r) => (true, Some(r.clone()), false, false),
        };
        let row = Row::bare(
            &campaign().spec.id,
            &self.trial,
            attempt,
            status,
            kind,
            StoreFields {
                seq: self.rows.len() as u64,
                spec_hash: "sha256:test".into(),
                is_final,
                excluded_reason,
                counted,
                duplicate,
                late: false,
                paired: false,
                smoke: false,
                retry_pass: None,
                written_utc: "2027-01-15T08:00:00Z".parse().unwrap(),
            },
        );
        self.rows.push(row);
    }

    /// Decides on the next attempt's result and records it.
    fn attempt(&mut self, status: Status, kind: Option<FailureKind>) -> Decision {
        let attempt = self.next_attempt();
        let d = self.decide_on(attempt, status, kind, None, false);
        self.record(attempt, status, kind, &d);
        d
    }
}

fn infra(kind: FailureKind) -> (Status, Option<FailureKind>) {
    (Status::InfraError, Some(kind))
}

fn retry(at_ms: EpochMs, placement: Placement, uses_budget: bool) -> Decision {
    Decision::Retry {
        at_ms,
        placement,
        uses_budget,
    }
}

const OTHER_INFRA: [FailureKind; 7] = [
    FailureKind::BootFailed,
    FailureKind::ResetUnverified,
    FailureKind::GuestLost,
    FailureKind::DriverCrash,
    FailureKind::EvaluatorError,
    FailureKind::HarnessError,
    FailureKind::LeaseExpired,
];

// ---- rate_limit ------------------------------------------------------------------------------

#[test]
fn rate_limit_with_reset_retries_at_the_reset_without_budget() {
    let l = Ledger::new(RetryPolicy::default());
    let reset_epoch = NOW / 1000 + 300;
    let d = l.decide_on(
        1,
        Status::InfraError,
        Some(FailureKind::RateLimit),
        Some(reset_epoch),
        false,
    );
    assert_eq!(d, retry(reset_epoch * 1000, Placement::Any, false));
}

#[test]
fn rate_limit_without_reset_backs_off_rate_limit_backoff_s() {
    let mut l = Ledger::new(RetryPolicy::default());
    let (s, k) = infra(FailureKind::RateLimit);
    assert_eq!(l.attempt(s, k), retry(NOW + 60_000, Placement::Any, false));
    l.policy.rate_limit_backoff_s = 7;
    assert_eq!(
        l.decide_on(2, s, k, None, false),
        retry(NOW + 7_000, Placement::Any, false)
    );
}

#[test]
fn rate_limit_reset_in_the_past_falls_back_to_the_backoff() {
    let l = Ledger::new(RetryPolicy::default());
    let d = l.decide_on(
        1,
        Status::InfraError,
        Some(FailureKind::RateLimit),
        Some(NOW / 1000 - 10),
        false,
    );
    assert_eq!(d, retry(NOW + 60_000, Placement::Any, false));
}

#[test]
fn rate_limit_reset_after_the_cutoff_stops_the_campaign_for_time() {
    let mut l = Ledger::new(RetryPolicy::default());
    l.cutoff_ms = Some(NOW + 100_000);
    let reset_epoch = NOW / 1000 + 200;
    let d = l.decide_on(
        1,
        Status::InfraError,
        Some(FailureKind::RateLimit),
        Some(reset_epoch),
        false,
    );
    assert_eq!(
        d,
        Decision::Stop {
            reason: StopReason::Time,
            retry_at_ms: reset_epoch * 1000
        }
    );
    // A reset before the cutoff is a plain retry.
    let d = l.decide_on(
        1,
        Status::InfraError,
        Some(FailureKind::RateLimit),
        Some(NOW / 1000 + 50),
        false,
    );
    assert_eq!(d, retry(NOW + 50_000, Placement::Any, false));
    // So is the backoff: it too must land before the cutoff.
    l.cutoff_ms = Some(NOW + 30_000);
    let d = l.decide_on(
        1,
        Status::InfraError,
        Some(FailureKind::RateLimit),
        None,
        false,
    );
    assert_eq!(
        d,
        Decision::Stop {
            reason: StopReason::Time,
            retry_at_ms: NOW + 60_000
        }
    );
}

#[test]
fn rate_limits_never_spend_the_infra_budget() {
    let mut l = Ledger::new(RetryPolicy::default());
    let (s, k) = infra(FailureKind::RateLimit);
    for _ in 0..10 {
        assert!(matches!(
            l.attempt(s, k),
            Decision::Retry {
                uses_budget: false,
                ..
            }
        ));
    }
    assert_eq!(l.history().infra_used, 0);
    // The one infra retry is still there.
    let (s, k) = infra(FailureKind::BootFailed);
    assert_eq!(
        l.attempt(s, k),
        retry(
            NOW + 5_000,
            Placement::OtherHost(HOST.parse().unwrap()),
            true
        )
    );
}

// ---- overloaded ------------------------------------------------------------------------------

#[test]
fn overloaded_backs_off_doubling_then_excludes() {
    let mut l = Ledger::new(RetryPolicy::default());
    let (s, k) = infra(FailureKind::Overloaded);
    for backoff_s in [30, 60, 120] {
        assert_eq!(
            l.attempt(s, k),
            retry(NOW + backoff_s * 1000, Placement::Any, false)
        );
    }
    assert_eq!(l.history().overloaded_used, 3);
    assert_eq!(l.history().infra_used, 0);
    assert_eq!(
        l.attempt(s, k),
        Decision::Excluded(ExcludedReason::InfraFailure(FailureKind::Overloaded))
    );
    assert!(l.history().is_final);
}

#[test]
fn overloaded_retries_and_backoff_follow_the_policy() {
    let mut l = Ledger::new(RetryPolicy {
        overloaded_retries: 2,
        overloaded_backoff_s: 10,
        ..RetryPolicy::default()
    });
    let (s, k) = infra(FailureKind::Overloaded);
    assert_eq!(l.attempt(s, k), retry(NOW + 10_000, Placement::Any, false));
    assert_eq!(l.attempt(s, k), retry(NOW + 20_000, Placement::Any, false));
    assert_eq!(
        l.attempt(s, k),
        Decision::Excluded(ExcludedReason::InfraFailure(FailureKind::Overloaded))
    );

    let l = Ledger::new(RetryPolicy {
        overloaded_retries: 0,
        ..RetryPolicy::default()
    });
    assert_eq!(
        l.decide_on(1, s, k, None, false),
        Decision::Excluded(ExcludedReason::InfraFailure(FailureKind::Overloaded))
    );
}

// ---- auth ------------------------------------------------------------------------------------

#[test]
fn auth_retries_on_the_budget_then_stops_the_campaign() {
    let mut l = Ledger::new(RetryPolicy::default());
    let (s, k) = infra(FailureKind::Auth);
    assert_eq!(l.attempt(s, k), retry(NOW + 30_000, Placement::Any, true));
    assert_eq!(l.history().infra_used, 1);
    let d = l.attempt(s, k);
    assert_eq!(
        d,
        Decision::Stop {
            reason: StopReason::Auth,
            retry_at_ms: NOW + 30_000
        }
    );
    // The stop row is not final: a resume retries the trial.
    assert!(!l.rows.last().unwrap().is_final);
    assert!(!l.history().is_final);
}

#[test]
fn auth_shares_the_budget_with_other_infra_failures() {
    let mut l = Ledger::new(RetryPolicy {
        auth_backoff_s: 3,
        ..RetryPolicy::default()
    });
    let (s, k) = infra(FailureKind::GuestLost);
    assert!(matches!(
        l.attempt(s, k),
        Decision::Retry {
            uses_budget: true,
            ..
        }
    ));
    let (s, k) = infra(FailureKind::Auth);
    assert_eq!(
        l.attempt(s, k),
        Decision::Stop {
            reason: StopReason::Auth,
            retry_at_ms: NOW + 3_000
        }
    );
}

// ---- preflight -------------------------------------------------------------------------------

#[test]
fn preflight_blocks_retry_on_another_lane_then_exclude_after_the_limit() {
    let mut l = Ledger::new(RetryPolicy::default());
    let blocked = (Status::Blocked, Some(FailureKind::Preflight));
    for streak in 1..=2 {
        assert_eq!(
            l.attempt(blocked.0, blocked.1),
            retry(NOW, Placement::OtherLane(LANE.parse().unwrap()), false)
        );
        assert_eq!(l.history().blocked_streak, streak);
    }
    assert_eq!(
        l.attempt(blocked.0, blocked.1),
        Decision::Excluded(ExcludedReason::PreflightLimit)
    );
    assert_eq!(l.history().infra_used, 0);
}

#[test]
fn preflight_limit_counts_blocks_in_a_row() {
    let mut l = Ledger::new(RetryPolicy {
        infra_retries: 5,
        preflight_limit: 2,
        ..RetryPolicy::default()
    });
    let blocked = (Status::Blocked, Some(FailureKind::Preflight));
    assert!(matches!(
        l.attempt(blocked.0, blocked.1),
        Decision::Retry { .. }
    ));
    // A cancellation does not break the streak...
    assert!(matches!(
        l.attempt(Status::Cancelled, None),
        Decision::Retry { .. }
    ));
    assert_eq!(l.history().blocked_streak, 1);
    // ...but an attempt that ran does.
    let (s, k) = infra(FailureKind::BootFailed);
    assert!(matches!(l.attempt(s, k), Decision::Retry { .. }));
    assert_eq!(l.history().blocked_streak, 0);
    assert!(matches!(
        l.attempt(blocked.0, blocked.1),
        Decision::Retry { .. }
    ));
    assert_eq!(
        l.attempt(blocked.0, blocked.1),
        Decision::Excluded(ExcludedReason::PreflightLimit)
    );
}

// ---- identity_mismatch -----------------------------------------------------------------------

#[test]
fn identity_mismatch_requeues_on_another_lane_without_budget_forever() {
    let mut l = Ledger::new(RetryPolicy::default());
    for status in [Status::Blocked, Status::InfraError] {
        for _ in 0..5 {
            assert_eq!(
                l.attempt(status, Some(FailureKind::IdentityMismatch)),
                retry(NOW, Placement::OtherLane(LANE.parse().unwrap()), false)
            );
        }
    }
    let h = l.history();
    assert_eq!(
        (h.infra_used, h.overloaded_used, h.blocked_streak),
        (0, 0, 0)
    );
    assert!(!h.is_final);
}

// ---- other infra kinds -----------------------------------------------------------------------

#[test]
fn other_infra_kinds_retry_on_another_host_then_exclude() {
    for kind in OTHER_INFRA {
        let mut l = Ledger::new(RetryPolicy::default());
        let (s, k) = infra(kind);
        assert_eq!(
            l.attempt(s, k),
            retry(
                NOW + 5_000,
                Placement::OtherHost(HOST.parse().unwrap()),
                true
            ),
            "{kind}"
        );
        assert_eq!(l.history().infra_used, 1, "{kind}");
        assert_eq!(
            l.attempt(s, k),
            Decision::Excluded(ExcludedReason::InfraFailure(kind)),
            "{kind}"
        );
        assert_eq!(
            l.rows
                .last()
                .unwrap()
                .excluded_reason
                .as_ref()
                .unwrap()
                .to_string(),
            format!("infra_failure:{kind}")
        );
    }
}

#[test]
fn infra_budget_follows_infra_retries_and_backoff() {
    let mut l = Ledger::new(RetryPolicy {
        infra_retries: 2,
        infra_backoff_s: 11,
        ..RetryPolicy::default()
    });
    let (s, k) = infra(FailureKind::BootFailed);
    assert_eq!(
        l.attempt(s, k),
        retry(
            NOW + 11_000,
            Placement::OtherHost(HOST.parse().unwrap()),
            true
        )
    );
    let (s, k) = infra(FailureKind::LeaseExpired);
    assert_eq!(
        l.attempt(s, k),
        retry(
            NOW + 11_000,
            Placement::OtherHost(HOST.parse().unwrap()),
            true
        )
    );
    // The excluded reason names the kind that spent the budget last.
    let (s, k) = infra(FailureKind::DriverCrash);
    assert_eq!(
        l.attempt(s, k),
        Decision::Excluded(ExcludedReason::InfraFailure(FailureKind::DriverCrash))
    );

    let l = Ledger::new(RetryPolicy {
        infra_retries: 0,
        ..RetryPolicy::default()
    });
    assert_eq!(
        l.decide_on(1, s, k, None, false),
        Decision::Excluded(ExcludedReason::InfraFailure(FailureKind::DriverCrash))
    );
}

// ---- budgets from the ledger -----------------------------------------------------------------

#[test]
fn budgets_survive_a_round_trip_through_the_ledger() {
    let mut l = Ledger::new(RetryPolicy {
        infra_retries: 2,
        ..RetryPolicy::default()
    });
    for (s, k) in [
        infra(FailureKind::BootFailed),
        infra(FailureKind::Overloaded),
        (Status::Blocked, Some(FailureKind::Preflight)),
        (Status::Cancelled, None),
    ] {
        l.attempt(s, k);
    }
    let before = l.history();
    assert_eq!(
        (
            before.infra_used,
            before.overloaded_used,
            before.blocked_streak
        ),
        (1, 1, 1)
    );
    // A resume reads the rows back from the ledger's JSON.
    let json: Vec<String> = l
        .rows
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    let reread: Vec<Row> = json
        .iter()
        .map(|j| serde_json::from_str(j).unwrap())
        .collect();
    assert_eq!(TrialHistory::from_rows(&reread), before);
}

#[test]
fn only_the_first_row_of_a_token_counts_toward_budgets() {
    let mut l = Ledger::new(RetryPolicy {
        infra_retries: 2,
        ..RetryPolicy::default()
    });
    let (s, k) = infra(FailureKind::BootFailed);
    assert!(matches!(l.attempt(s, k), Decision::Retry { .. }));
    // A second row for the same token (a replayed or late completion) uses no budget.
    let d = l.decide_on(1, s, k, None, true);
    assert_eq!(d, Decision::Duplicate);
    l.record(1, s, k, &d);
    l.record(1, s, k, &d);
    assert_eq!(l.history().infra_used, 1);
    // So attempt 2 still has a retry left; counting every row would have excluded it.
    assert_eq!(
        l.attempt(s, k),
        retry(
            NOW + 5_000,
            Placement::OtherHost(HOST.parse().unwrap()),
            true
        )
    );
    assert_eq!(l.history().infra_used, 2);

    // The same holds for the overloaded budget and the preflight streak.
    let mut l = Ledger::new(RetryPolicy::default());
    let (s, k) = infra(FailureKind::Overloaded);
    l.attempt(s, k);
    l.record(1, s, k, &Decision::Duplicate);
    assert_eq!(l.history().overloaded_used, 1);
    assert_eq!(
        l.decide_on(2, s, k, None, false),
        retry(NOW + 60_000, Placement::Any, false)
    );
    let mut l = Ledger::new(RetryPolicy::default());
    let (s, k) = (Status::Blocked, Some(FailureKind::Preflight));
    l.attempt(s, k);
    l.record(1, s, k, &Decision::Duplicate);
    l.record(1, s, k, &Decision::Duplicate);
    assert_eq!(l.history().blocked_streak, 1);
}

// ---- scores ----------------------------------------------------------------------------------

#[test]
fn agent_statuses_and_violation_are_counted() {
    for status in [
        Status::Completed,
        Status::Timeout,
        Status::MaxTurns,
        Status::AgentError,
        Status::Violation,
    ] {
        let mut l = Ledger::new(RetryPolicy::default());
        // Even after infra retries, the first score counts.
        let (s, k) = infra(FailureKind::BootFailed);
        l.attempt(s, k);
        assert_eq!(
            l.attempt(status, None),
            Decision::Counted {
                revoke_newer: false
            },
            "{status}"
        );
        let h = l.history();
        assert_eq!(h.winner, Some(2), "{status}");
        assert!(h.is_final);
    }
}

#[test]
fn a_late_score_after_an_exclusion_is_counted_and_revokes_newer_leases() {
    let mut l = Ledger::new(RetryPolicy::default());
    // Attempt 1 is reaped, attempt 2 fails for good: the trial is final and excluded.
    let (s, k) = infra(FailureKind::LeaseExpired);
    assert!(matches!(l.attempt(s, k), Decision::Retry { .. }));
    let (s, k) = infra(FailureKind::BootFailed);
    assert!(matches!(l.attempt(s, k), Decision::Excluded(_)));
    assert!(l.history().is_final);
    assert_eq!(l.history().winner, None);
    // Attempt 1's outcome arrives after all: an obtained score is never thrown away.
    let d = l.decide_on(1, Status::Completed, None, None, true);
    assert_eq!(d, Decision::Counted { revoke_newer: true });
    l.record(1, Status::Completed, None, &d);
    assert_eq!(l.history().winner, Some(1));
    // The excluded row stays in the ledger as history.
    assert!(l.rows.iter().any(|r| r.excluded));
}

#[test]
fn a_late_score_on_a_trial_not_yet_final_revokes_newer_leases() {
    let mut l = Ledger::new(RetryPolicy::default());
    let (s, k) = infra(FailureKind::LeaseExpired);
    l.attempt(s, k);
    assert_eq!(
        l.decide_on(1, Status::Timeout, None, None, true),
        Decision::Counted { revoke_newer: true }
    );
}

#[test]
fn a_late_result_without_a_score_is_evidence_only() {
    let mut l = Ledger::new(RetryPolicy::default());
    let (s, k) = infra(FailureKind::LeaseExpired);
    l.attempt(s, k);
    let before = l.history();
    for (s, k) in [
        infra(FailureKind::DriverCrash),
        infra(FailureKind::Auth),
        (Status::Cancelled, None),
    ] {
        assert_eq!(l.decide_on(1, s, k, None, true), Decision::Duplicate);
    }
    l.record(
        1,
        Status::InfraError,
        Some(FailureKind::DriverCrash),
        &Decision::Duplicate,
    );
    assert_eq!(l.history(), before);
}

#[test]
fn a_score_when_already_scored_is_a_duplicate() {
    let mut l = Ledger::new(RetryPolicy::default());
    assert_eq!(
        l.attempt(Status::Completed, None),
        Decision::Counted {
            revoke_newer: false
        }
    );
    for late in [false, true] {
        assert_eq!(
            l.decide_on(2, Status::Completed, None, None, late),
            Decision::Duplicate
        );
        assert_eq!(
            l.decide_on(2, Status::AgentError, None, None, late),
            Decision::Duplicate
        );
        // An unscored result after the win gets no retry either.
        assert_eq!(
            l.decide_on(
                2,
                Status::InfraError,
                Some(FailureKind::BootFailed),
                None,
                late
            ),
            Decision::Duplicate
        );
    }
}

#[test]
fn an_unscored_result_on_an_excluded_trial_is_a_duplicate() {
    let mut l = Ledger::new(RetryPolicy {
        infra_retries: 0,
        ..RetryPolicy::default()
    });
    let (s, k) = infra(FailureKind::BootFailed);
    assert!(matches!(l.attempt(s, k), Decision::Excluded(_)));
    assert_eq!(l.decide_on(2, s, k, None, false), Decision::Duplicate);
}

// ---- no budget -------------------------------------------------------------------------------

#[test]
fn cancelled_and_blocked_attempts_use_no_budget() {
    let mut l = Ledger::new(RetryPolicy::default());
    for _ in 0..4 {
        assert_eq!(
            l.attempt(Status::Cancelled, None),
            retry(NOW, Placement::Any, false)
        );
    }
    assert!(matches!(
        l.attempt(Status::Blocked, Some(FailureKind::Preflight)),
        Decision::Retry {
            uses_budget: false,
            ..
        }
    ));
    assert_eq!(
        l.attempt(Status::Cancelled, None),
        retry(NOW, Placement::Any, false)
    );
    let h = l.history();
    assert_eq!((h.infra_used, h.overloaded_used), (0, 0));
    assert!(!h.is_final);
    // The whole infra budget is still there.
    let (s, k) = infra(FailureKind::HarnessError);
    assert_eq!(
        l.attempt(s, k),
        retry(
            NOW + 5_000,
            Placement::OtherHost(HOST.parse().unwrap()),
            true
        )
    );
}
