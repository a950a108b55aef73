//! Events of committed transactions become the attempt and trial counters.

use prometheus_client::registry::Registry;

use lanes_common::ids::{CampaignId, Token, TrialId};
use lanes_common::row::{ExcludedReason, FailureKind, Phase2Refusal, Status};

use super::*;

fn token() -> Token {
    Token {
        trial_id: TrialId::new("t1.r0.a").unwrap(),
        attempt: 1,
    }
}

fn event(kind: EventKind) -> Event {
    Event {
        seq: 0,
        at_ms: 0,
        kind,
    }
}

fn finished(status: Status, failure_kind: Option<FailureKind>) -> Event {
    event(EventKind::AttemptFinished {
        token: token(),
        status,
        failure_kind,
        counted: false,
        row_seq: 0,
    })
}

fn final_(counted: bool, excluded_reason: Option<ExcludedReason>) -> Event {
    event(EventKind::TrialFinal {
        trial_id: TrialId::new("t1.r0.a").unwrap(),
        counted,
        excluded_reason,
    })
}

fn scrape(m: &CoordinatorMetrics) -> String {
    let mut registry = Registry::default();
    m.register(&mut registry);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
    out
}

#[test]
fn committed_events_map_to_the_attempt_and_final_counters() {
    let m = CoordinatorMetrics::default();
    let c = CampaignId::new("camp").unwrap();
    m.committed(
        &c,
        &[
            event(EventKind::AttemptStarted {
                token: token(),
                lane: "l".parse().unwrap(),
                host: "h".parse().unwrap(),
            }),
            event(EventKind::AttemptStarted {
                token: token(),
                lane: "l".parse().unwrap(),
                host: "h".parse().unwrap(),
            }),
            finished(Status::Completed, None),
            finished(Status::InfraError, Some(FailureKind::BootFailed)),
            finished(Status::InfraError, Some(FailureKind::BootFailed)),
            final_(true, None),
            final_(
                false,
                Some(ExcludedReason::InfraFailure(FailureKind::BootFailed)),
            ),
            final_(
                false,
                Some(ExcludedReason::Phase2Refused(Phase2Refusal::Cutoff)),
            ),
            event(EventKind::CampaignDone),
        ],
    );
    m.conflicted();
    let text = scrape(&m);
    for line in [
        "lanes_attempts_started_total 2\n",
        "lanes_attempts_finished_total{status=\"completed\",failure_kind=\"none\"} 1\n",
        "lanes_attempts_finished_total{status=\"infra_error\",failure_kind=\"boot_failed\"} 2\n",
        "lanes_trials_final_total{campaign=\"camp\",outcome=\"counted\"} 1\n",
        "lanes_trials_final_total{campaign=\"camp\",outcome=\"excluded\"} 1\n",
        "lanes_trials_final_total{campaign=\"camp\",outcome=\"not_started\"} 1\n",
        "lanes_store_conflicts_total 1\n",
        "# TYPE lanes_claim_duration_seconds histogram\n",
        "# TYPE lanes_leases_in_flight gauge\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    // No trial id or token reaches a label.
    assert!(!text.contains("t1.r0.a"), "{text}");
}

#[test]
fn reaps_leases_and_refusals_count_by_their_label() {
    let m = CoordinatorMetrics::default();
    m.reaped(&ReapReport {
        cancelled: 2,
        expired: 3,
        ..ReapReport::default()
    });
    m.reaped(&ReapReport {
        expired: 1,
        ..ReapReport::default()
    });
    m.set_leases_in_flight(7);
    m.auth_refused_counter(Role::Lane).inc();
    m.observe_store_op(
        StoreOp::LeaseKey,
        StoreBackend::Redis,
        std::time::Duration::from_millis(3),
    );
    let text = scrape(&m);
    for line in [
        "lanes_leases_reaped_total{reason=\"expired\"} 4\n",
        "lanes_leases_reaped_total{reason=\"cancelled\"} 2\n",
        "lanes_leases_in_flight 7\n",
        "lanes_auth_refused_total{role=\"lane\"} 1\n",
        "lanes_store_op_duration_seconds_count{op=\"lease_key\",backend=\"redis\"} 1\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}
