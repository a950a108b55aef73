//! Outcomes: every field both ways, and what the wire may not carry.

use super::*;

#[test]
fn a_full_outcome_round_trips() {
    let o = full_outcome();
    assert_eq!(from_wire(to_wire(&o)).unwrap(), o);
}

#[test]
fn unscored_outcomes_round_trip() {
    let mut rate_limited = Outcome::new(
        token(1),
        "l".parse().unwrap(),
        "h".parse().unwrap(),
        Status::InfraError,
    );
    rate_limited.failure_kind = Some(FailureKind::RateLimit);
    rate_limited.reset_epoch = Some(1_800_000_123);
    let mut blocked = Outcome::new(
        token(2),
        "l".parse().unwrap(),
        "h".parse().unwrap(),
        Status::Blocked,
    );
    blocked.failure_kind = Some(FailureKind::Preflight);
    let mut mismatch = Outcome::new(
        token(2),
        "l".parse().unwrap(),
        "h".parse().unwrap(),
        Status::Blocked,
    );
    mismatch.failure_kind = Some(FailureKind::IdentityMismatch);
    let cancelled = Outcome::new(
        token(4),
        "l".parse().unwrap(),
        "h".parse().unwrap(),
        Status::Cancelled,
    );
    for o in [rate_limited, blocked, mismatch, cancelled] {
        assert_eq!(from_wire(to_wire(&o)).unwrap(), o);
    }
}

#[test]
fn every_status_and_kind_round_trips() {
    for &status in Status::ALL {
        if matches!(status, Status::NotStarted | Status::Requeued) {
            // The store's own: a lane's outcome with them is refused.
            let o = Outcome::new(token(1), "l".parse().unwrap(), "h".parse().unwrap(), status);
            let e = wire_err(to_wire(&o));
            assert_eq!(e.field, "outcome.status", "{status}");
            assert!(e.reason.contains(status.as_str()), "{e}");
            continue;
        }
        let mut o = Outcome::new(token(1), "l".parse().unwrap(), "h".parse().unwrap(), status);
        if status.is_scored() {
            o.result.score = Some(0.0);
        }
        let kinds: Vec<Option<FailureKind>> = match status {
            Status::InfraError => FailureKind::ALL
                .iter()
                .copied()
                .filter(|k| !matches!(k, FailureKind::Preflight | FailureKind::LeaseExpired))
                .map(Some)
                .collect(),
            Status::Blocked => vec![
                Some(FailureKind::Preflight),
                Some(FailureKind::IdentityMismatch),
            ],
            _ => vec![None],
        };
        for kind in kinds {
            o.failure_kind = kind;
            assert_eq!(from_wire(to_wire(&o)).unwrap(), o, "{status} {kind:?}");
        }
    }
}

#[test]
fn unknown_status_enum_value_is_refused() {
    let mut w = to_wire(&full_outcome());
    w.status = 99;
    let e = wire_err(w);
    assert_eq!(e.field, "outcome.status");
    assert!(e.reason.contains("99"), "{e}");

    let mut w = to_wire(&full_outcome());
    w.status = 0;
    assert_eq!(wire_err(w).field, "outcome.status");
}

#[test]
fn unknown_failure_kind_enum_value_is_refused() {
    let mut o = Outcome::new(
        token(1),
        "l".parse().unwrap(),
        "h".parse().unwrap(),
        Status::InfraError,
    );
    o.failure_kind = Some(FailureKind::BootFailed);
    let mut w = to_wire(&o);
    w.failure_kind = 1234;
    let e = wire_err(w);
    assert_eq!(e.field, "outcome.failure_kind");
    assert!(e.reason.contains("1234"), "{e}");
}

#[test]
fn attempt_zero_is_refused() {
    let mut w = to_wire(&full_outcome());
    w.token.as_mut().unwrap().attempt = 0;
    assert_eq!(wire_err(w).field, "outcome.token.attempt");
}

#[test]
fn an_outcome_names_a_real_lane_and_host_and_real_times() {
    type Setter = fn(&mut pb::Outcome, &str);
    let fields: [(&str, Setter, &[&str]); 4] = [
        (
            "outcome.lane",
            |w, v| w.lane = v.into(),
            &["", "a lane", "host/lane-1", "l\n"],
        ),
        (
            "outcome.host",
            |w, v| w.host = v.into(),
            &["", " host", "h\u{7}", "h\r\nx"],
        ),
        (
            "outcome.started_utc",
            |w, v| w.started_utc = v.into(),
            &["yesterday", "2026-13-01T00:00:00Z", "2026-12-01 00:00:00"],
        ),
        (
            "outcome.ended_utc",
            |w, v| w.ended_utc = v.into(),
            &["0", "2026-12-01T25:00:00Z"],
        ),
    ];
    for (field, set, bad) in fields {
        for v in bad {
            let mut w = to_wire(&full_outcome());
            set(&mut w, v);
            assert_eq!(wire_err(w).field, field, "{v:?}");
        }
    }
    // A host may be any name the machine has, spaces and all; an empty time is no time.
    let mut w = to_wire(&full_outcome());
    w.host = "gpu box 7 (rack 2/3)".into();
    w.started_utc = String::new();
    let o = from_wire(w).unwrap();
    assert_eq!(o.host.as_str(), "gpu box 7 (rack 2/3)");
    assert_eq!(o.record.started_utc, None);
}

#[test]
fn bad_trial_ids_are_refused() {
    for bad in [
        "../etc.r0.a",
        "t.r0.a/b",
        "t.r01.a",
        "t.r0.a.b",
        "",
        "no-run",
    ] {
        let mut w = to_wire(&full_outcome());
        w.token.as_mut().unwrap().trial_id = bad.into();
        let e = wire_err(w);
        assert_eq!(e.field, "outcome.token.trial_id", "{bad:?}: {e}");
    }
    let mut w = to_wire(&full_outcome());
    w.token = None;
    let e = wire_err(w);
    assert_eq!(
        (e.field.as_str(), e.reason.as_str()),
        ("outcome.token", "missing")
    );
}

#[test]
fn a_scored_status_without_a_score_is_refused() {
    for status in [
        Status::Completed,
        Status::Timeout,
        Status::MaxTurns,
        Status::AgentError,
        Status::Violation,
    ] {
        let mut w = to_wire(&Outcome::new(
            token(1),
            "l".parse().unwrap(),
            "h".parse().unwrap(),
            status,
        ));
        w.score = None;
        let e = wire_err(w);
        assert_eq!(e.field, "outcome.score", "{status}: {e}");
        assert!(e.reason.contains("needs a score"), "{e}");
    }
    // And an unscored status must not carry one.
    let mut o = Outcome::new(
        token(1),
        "l".parse().unwrap(),
        "h".parse().unwrap(),
        Status::Cancelled,
    );
    o.result.score = Some(1.0);
    let e = wire_err(to_wire(&o));
    assert_eq!(e.field, "outcome.score", "{e}");
}

#[test]
fn a_failure_kind_that_does_not_fit_the_status_is_refused() {
    let mut o = Outcome::new(
        token(1),
        "l".parse().unwrap(),
        "h".parse().unwrap(),
        Status::Completed,
    );
    o.result.score = Some(1.0);
    o.failure_kind = Some(FailureKind::BootFailed);
    assert_eq!(wire_err(to_wire(&o)).field, "outcome.failure_kind");
    // Only the reaper writes lease_expired; an infra error needs a kind.
    for kind in [Some(FailureKind::LeaseExpired), None] {
        let mut o = Outcome::new(
            token(1),
            "l".parse().unwrap(),
            "h".parse().unwrap(),
            Status::InfraError,
        );
        o.failure_kind = kind;
        assert_eq!(
            wire_err(to_wire(&o)).field,
            "outcome.failure_kind",
            "{kind:?}"
        );
    }
}

#[test]
fn a_lane_cannot_report_not_started() {
    let o = Outcome::new(
        token(1),
        "l".parse().unwrap(),
        "h".parse().unwrap(),
        Status::NotStarted,
    );
    assert_eq!(wire_err(to_wire(&o)).field, "outcome.status");
}

#[test]
fn numbers_out_of_range_are_refused() {
    let mut o = full_outcome();
    o.result.cost_usd = Some(-1.0);
    assert_eq!(wire_err(to_wire(&o)).field, "outcome.cost_usd");
    let mut o = full_outcome();
    o.result.score = Some(f64::NAN);
    assert_eq!(wire_err(to_wire(&o)).field, "outcome.score");
    let mut o = full_outcome();
    o.result.quota.as_mut().unwrap().utilisation = f64::INFINITY;
    assert_eq!(wire_err(to_wire(&o)).field, "outcome.quota.utilisation");
}

#[test]
fn driver_figures_over_their_per_attempt_maxima_are_refused() {
    use lanes_common::limits::{MAX_ATTEMPT_COST_USD, MAX_ATTEMPT_TOKENS};
    use lanes_common::row::{GateRecord, GateVerdict};
    // One attempt reporting 1e308 USD or u64::MAX tokens would poison the campaign's spend,
    // its budget gate and its report.
    let mut o = full_outcome();
    o.result.cost_usd = Some(MAX_ATTEMPT_COST_USD);
    o.result.tokens = Some(TokenUsage {
        input: MAX_ATTEMPT_TOKENS,
        output: MAX_ATTEMPT_TOKENS,
        cache_read: MAX_ATTEMPT_TOKENS,
        cache_write: MAX_ATTEMPT_TOKENS,
    });
    assert_eq!(
        from_wire(to_wire(&o)).unwrap(),
        o,
        "the maxima themselves are taken"
    );
    for cost in [
        1e308,
        MAX_ATTEMPT_COST_USD * 1.001,
        f64::INFINITY,
        f64::NAN,
        -0.5,
    ] {
        let mut o = full_outcome();
        o.result.cost_usd = Some(cost);
        let e = wire_err(to_wire(&o));
        assert_eq!(e.field, "outcome.cost_usd", "{cost}: {e}");
        let mut o = full_outcome();
        o.result.gate = Some(GateRecord {
            verdict: GateVerdict::Proceed,
            reason: None,
            turns: 1,
            cost_usd: Some(cost),
        });
        let e = wire_err(to_wire(&o));
        assert_eq!(e.field, "outcome.gate.cost_usd", "{cost}: {e}");
    }
    let e = {
        let mut o = full_outcome();
        o.result.cost_usd = Some(1e308);
        wire_err(to_wire(&o))
    };
    assert!(
        e.reason.contains("10000"),
        "the message gives the maximum: {e}"
    );
    for (count, set) in [
        (
            "input",
            (|t: &mut TokenUsage| t.input = u64::MAX) as fn(&mut TokenUsage),
        ),
        ("output", |t| t.output = MAX_ATTEMPT_TOKENS + 1),
        ("cache_read", |t| t.cache_read = u64::MAX),
        ("cache_write", |t| t.cache_write = u64::MAX),
    ] {
        let mut o = full_outcome();
        set(o.result.tokens.as_mut().unwrap());
        let e = wire_err(to_wire(&o));
        assert_eq!(e.field, format!("outcome.tokens.{count}"), "{e}");
    }
}
