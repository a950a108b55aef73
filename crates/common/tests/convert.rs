//! Proto ↔ domain conversions (`lanes_common::convert`): round trips are lossless, and invalid
//! wire messages are refused with the field named.

use std::collections::BTreeMap;
use std::path::Path;

use lanes_common::convert::ConvertError;
use lanes_common::ids::{Token, TrialId};
use lanes_common::proto as pb;
use lanes_common::row::{
    Check, DriverIdentity, ExcludedReason, FailureKind, InfeasibleSource, Outcome, PhaseWalls,
    QuotaReading, Row, Status, StoreFields, TokenUsage,
};
use lanes_common::schedule::{self, Trial};
use lanes_common::spec::{self, Campaign};
use lanes_common::spec_hash::spec_hash;
use proptest::prelude::*;

const CAMPAIGN: &str = r#"
id = "convert-test"
phase1_runs = 2
phase2_runs = 1
schedule_seed = 20261005
pairing = "none"
gate = true
lease_ttl_s = 12
publish_grace_s = 60
cutoff_utc = "2026-12-31T00:00:00Z"
budget_cap_usd = 50.5
quota_wait = 0.9
quota_stop = 0.99

[defaults]
timeout_s = 30
max_turns = 20
max_cost_usd = 1.25

[[arms]]
id = "careful"
config = { model = "sim-large", effort = "high", nested = { list = [1, 2.5, "x"], flag = true } }
provider = "anthropic"
expected_cost_usd = 0.05

[[arms]]
id = "quick"

[tasks]
items = [
  { id = "MB-01", group = "g1", tags = ["a", "b"], timeout_s = 9, max_turns = 3, max_cost_usd = 0.5, payload = { instruction = "open", n = 3, f = 0.1, deep = { k = [true, false] } } },
  { id = "osw:chrome.2" },
]

[driver]
sim = { boot_s = 0.05, agent_s = [0.05, 0.2], pass_rate = { careful = 0.7 }, faults = { boot_failed = 0.03, rate_limit = 0.02, timeout = 0.05 }, cost_usd = [0.01, 0.06] }
secret_payload_keys = ["vm_password"]
env = { API_KEY = "$API_KEY" }

[driver.expect]
dataset_commit = "a1b2c3d"

[retry]
infra_retries = 2
overloaded_backoff_s = 7
"#;

fn campaign(text: &str) -> Campaign {
    spec::load_str(text, Path::new("x.toml"), Path::new(".")).unwrap()
}

fn trial() -> Trial {
    schedule::trials(&campaign(CAMPAIGN)).nth(3).unwrap()
}

fn token(attempt: u32) -> Token {
    Token {
        trial_id: trial().trial_id,
        attempt,
    }
}

/// An outcome with every field set to a non-default value.
fn full_outcome() -> Outcome {
    let mut o = Outcome::new(
        token(3),
        "host-a-lane-2".parse().unwrap(),
        "host-a".parse().unwrap(),
        Status::Completed,
    );
    o.worker = "worker-7".into();
    o.driver = Some(DriverIdentity {
        name: "osworld".into(),
        version: "1.2.3".into(),
        pins: BTreeMap::from([
            ("dataset_commit".to_string(), "a1b2c3d".to_string()),
            ("agent_sha256".to_string(), "beef".to_string()),
        ]),
    });
    o.result.score = Some(0.75);
    o.result.passed = Some(true);
    o.result.checks = vec![
        Check {
            name: "file_exists".into(),
            passed: true,
            score: Some(1.0),
            detail: "found".into(),
        },
        Check {
            name: "content".into(),
            passed: false,
            score: None,
            detail: String::new(),
        },
    ];
    o.result.runtime_outcome = Some("budget_exhausted".into());
    o.result.infeasible_source = Some(InfeasibleSource::Agent);
    o.result.final_text = Some("done — ünïcode".into());
    o.result.turns = Some(17);
    o.result.tokens = Some(TokenUsage {
        input: 1000,
        output: 200,
        cache_read: 30,
        cache_write: 4,
    });
    o.result.cost_usd = Some(0.1 + 0.2);
    o.result.quota = Some(QuotaReading {
        provider: "anthropic".into(),
        utilisation: 0.42,
        reset_epoch: Some(1_800_000_000),
    });
    o.result.walls = PhaseWalls {
        admit_s: 0.01,
        boot_s: 1.5,
        reset_s: 0.3,
        gate_s: 0.7,
        agent_s: 42.123,
        evaluate_s: 2.2,
        publish_s: 0.05,
    };
    o.record.lease_lost = true;
    o.record.publication_errors = vec!["attempt record: disk full".into()];
    o.record.artifacts = vec!["a3/stderr.log".into(), "a3/screenshot.png".into()];
    o.record.started_utc = Some("2026-12-02T10:00:00Z".parse().unwrap());
    o.record.ended_utc = Some("2026-12-02T10:00:47Z".parse().unwrap());
    o.record.error = Some("none really".into());
    o
}

fn to_wire(o: &Outcome) -> pb::Outcome {
    pb::Outcome::from(o.clone())
}

fn from_wire(o: pb::Outcome) -> Result<Outcome, ConvertError> {
    Outcome::try_from(o)
}

fn wire_err(o: pb::Outcome) -> ConvertError {
    match from_wire(o) {
        Ok(o) => panic!("expected a conversion error, got {o:?}"),
        Err(e) => e,
    }
}

// ---- outcomes --------------------------------------------------------------------------------

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

// ---- rows ------------------------------------------------------------------------------------

fn store_fields(seq: u64) -> StoreFields {
    StoreFields {
        seq,
        spec_hash: "sha256:abc".into(),
        is_final: true,
        excluded_reason: None,
        counted: true,
        duplicate: false,
        late: true,
        paired: true,
        smoke: true,
        retry_pass: Some(2),
        written_utc: "2026-12-02T10:00:48.123Z".parse().unwrap(),
    }
}

fn full_row() -> Row {
    let c = campaign(CAMPAIGN);
    Row::from_outcome(&c.spec.id, &trial(), full_outcome(), store_fields(41))
}

fn row_round_trip(row: &Row) -> Row {
    let wire = pb::Row::try_from(row).unwrap();
    assert_eq!(wire.seq, row.seq);
    Row::try_from(wire).unwrap()
}

#[test]
fn a_row_round_trips_through_the_wire() {
    let row = full_row();
    // The wall time is the sum of the phases, a value with no short decimal form.
    assert_eq!(row.wall_s, full_outcome().result.walls.total());
    assert_eq!(row_round_trip(&row), row);
}

#[test]
fn store_written_rows_round_trip() {
    let c = campaign(CAMPAIGN);
    for (status, kind, reason) in [
        (
            Status::InfraError,
            Some(FailureKind::LeaseExpired),
            Some(ExcludedReason::InfraFailure(FailureKind::LeaseExpired)),
        ),
        (
            Status::Blocked,
            Some(FailureKind::Preflight),
            Some(ExcludedReason::PreflightLimit),
        ),
        (
            Status::NotStarted,
            None,
            Some(ExcludedReason::Phase2Refused(
                lanes_common::row::Phase2Refusal::Quota("openai".into()),
            )),
        ),
        (Status::Cancelled, None, None),
    ] {
        let row = Row::bare(
            &c.spec.id,
            &trial(),
            2,
            status,
            kind,
            StoreFields {
                excluded_reason: reason,
                counted: false,
                ..store_fields(7)
            },
        );
        assert_eq!(row_round_trip(&row), row, "{status}");
    }
}

#[test]
fn the_row_json_uses_the_documented_names() {
    let c = campaign(CAMPAIGN);
    let row = Row::bare(
        &c.spec.id,
        &trial(),
        2,
        Status::InfraError,
        Some(FailureKind::BootFailed),
        StoreFields {
            excluded_reason: Some(ExcludedReason::InfraFailure(FailureKind::BootFailed)),
            counted: false,
            ..store_fields(9)
        },
    );
    let wire = pb::Row::try_from(&row).unwrap();
    let v: serde_json::Value = serde_json::from_str(&wire.json).unwrap();
    assert_eq!(v["schema"], "lanes-row/1");
    assert_eq!(v["seq"], 9);
    assert_eq!(v["final"], true);
    assert_eq!(v["excluded"], true);
    assert_eq!(v["excluded_reason"], "infra_failure:boot_failed");
    assert_eq!(v["status"], "infra_error");
    assert_eq!(v["failure_kind"], "boot_failed");
    assert_eq!(v["trial_id"], trial().trial_id.as_str());
}

#[test]
fn a_wire_row_whose_seq_disagrees_is_refused() {
    let mut wire = pb::Row::try_from(&full_row()).unwrap();
    wire.seq += 1;
    assert_eq!(Row::try_from(wire).unwrap_err().field, "row.seq");
    let wire = pb::Row {
        seq: 1,
        json: "{not json".into(),
    };
    assert_eq!(Row::try_from(wire).unwrap_err().field, "row.json");
}

proptest! {
    /// Costs, scores and walls are arbitrary floats: the ledger's JSON must keep them exactly.
    #[test]
    fn row_floats_survive_the_wire(
        cost in 0.0f64..=lanes_common::limits::MAX_ATTEMPT_COST_USD,
        score in 0.0f64..1.0,
        agent_s in 0.0f64..1e5,
        utilisation in 0.0f64..1.5,
    ) {
        let mut o = full_outcome();
        o.result.cost_usd = Some(cost);
        o.result.score = Some(score);
        o.result.walls.agent_s = agent_s;
        o.result.quota.as_mut().unwrap().utilisation = utilisation;
        prop_assert_eq!(from_wire(to_wire(&o)).unwrap(), o.clone());
        let row = Row::from_outcome(&campaign(CAMPAIGN).spec.id, &trial(), o, store_fields(1));
        prop_assert_eq!(row_round_trip(&row), row);
    }
}

// ---- campaigns -------------------------------------------------------------------------------

fn campaign_round_trip(c: &Campaign) -> Campaign {
    let req = pb::SubmitRequest::try_from(c).unwrap();
    assert_eq!(req.tasks.len(), c.tasks.len());
    Campaign::try_from(req).unwrap()
}

#[test]
fn a_campaign_round_trips_through_a_submit_request() {
    let c = campaign(CAMPAIGN);
    let back = campaign_round_trip(&c);
    assert_eq!(back, c);
    assert_eq!(
        spec_hash(&back.spec, &back.tasks),
        spec_hash(&c.spec, &c.tasks)
    );
    assert_eq!(
        schedule::trials(&back).collect::<Vec<_>>(),
        schedule::trials(&c).collect::<Vec<_>>()
    );
}

#[test]
fn a_command_driver_campaign_round_trips() {
    let text = CAMPAIGN
        .lines()
        .map(|l| {
            if l.starts_with("sim = ") {
                r#"command = ["python3", "driver.py", "--flag"]"#
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let c = campaign(&text);
    assert!(matches!(c.spec.driver.kind, spec::DriverKind::Command(_)));
    assert_eq!(campaign_round_trip(&c), c);
}

/// The field a refused submit names first.
fn first_field(r: pb::SubmitRequest) -> String {
    Campaign::try_from(r).unwrap_err().violations[0]
        .field
        .clone()
}

#[test]
fn invalid_submit_requests_name_the_field() {
    let c = campaign(CAMPAIGN);
    let good = pb::SubmitRequest::try_from(&c).unwrap();

    let mut r = good.clone();
    r.tasks[1].id = r.tasks[0].id.clone();
    assert_eq!(first_field(r), "tasks[1].id");

    let mut r = good.clone();
    r.tasks[1].id = "bad/id".into();
    assert_eq!(first_field(r), "tasks[1].id");

    let mut r = good.clone();
    r.tasks[0].payload_json = "{oops".into();
    assert_eq!(first_field(r), "tasks[0].payload_json");

    let mut r = good.clone();
    r.tasks[0].payload_json = format!("{{\"s\":\"{}\"}}", "x".repeat(70_000));
    assert_eq!(first_field(r), "tasks[0].payload_json");

    let mut r = good.clone();
    r.tasks.clear();
    assert_eq!(first_field(r), "tasks");

    let mut r = good.clone();
    r.spec = Some(pb::submit_request::Spec::SpecJson("[]".into()));
    assert_eq!(first_field(r), "spec_json");

    let mut spec = c.spec.clone();
    spec.arms.clear();
    let mut r = good.clone();
    r.spec = Some(pb::submit_request::Spec::SpecJson(
        serde_json::to_string(&spec).unwrap(),
    ));
    assert_eq!(first_field(r), "spec_json.arms");

    let mut spec = c.spec.clone();
    spec.phase1_runs = 0;
    let mut r = good;
    r.spec = Some(pb::submit_request::Spec::SpecJson(
        serde_json::to_string(&spec).unwrap(),
    ));
    assert_eq!(first_field(r), "spec_json.phase1_runs");
}

#[test]
fn tokens_convert_both_ways() {
    let t = token(5);
    let w = pb::Token::from(&t);
    assert_eq!(w.trial_id, t.trial_id.as_str());
    assert_eq!(Token::try_from(w).unwrap(), t);
    assert!(TrialId::new(t.trial_id.as_str()).is_ok());
}

#[test]
fn no_work_answers_carry_the_reason_and_its_words() {
    use lanes_common::convert::no_work;
    use lanes_common::policy::{ClaimGateInForce, NoWorkReason};
    use lanes_common::state::StopReason;

    let cases = [
        (
            NoWorkReason::Stopped {
                stop_reason: Some(StopReason::Budget),
            },
            pb::NoWorkReason::Stopped,
            "stopped (STOPPED_BUDGET)",
        ),
        (NoWorkReason::Done, pb::NoWorkReason::Done, "done"),
        (
            NoWorkReason::QuotaWait {
                provider: "openai".into(),
                until_ms: 1_796_083_200_000,
            },
            pb::NoWorkReason::QuotaWait,
            "quota_wait:openai until 2026-12-01T00:00:00Z",
        ),
        (
            NoWorkReason::NoCampaigns,
            pb::NoWorkReason::NoCampaigns,
            "no_campaigns",
        ),
        (
            NoWorkReason::StoreUnavailable {
                error: "connection refused".into(),
            },
            pb::NoWorkReason::StoreUnavailable,
            "store unavailable: connection refused",
        ),
    ];
    for (reason, wire, words) in cases {
        let w = no_work("lane-1".into(), &reason, 1_500);
        assert_eq!(w.reason(), wire);
        assert_eq!(w.detail, words);
        assert_eq!((w.lane.as_str(), w.retry_after_ms), ("lane-1", 1_500));
    }

    let g = pb::GateInForce::from(ClaimGateInForce::quota_wait("openai", 7));
    assert_eq!(
        (g.gate.as_str(), g.detail.as_str(), g.until_epoch_ms),
        ("quota_wait", "openai", Some(7))
    );
}

/// A worker's offer travels in `Register` and back unchanged; a bad driver name, campaign id
/// or env name (reserved ones included) is refused with the field named.
#[test]
fn a_worker_offer_round_trips_and_bad_entries_are_named() {
    use lanes_common::convert::{register_offer, worker_offer};
    use lanes_common::ids::{CampaignId, DriverName};
    use lanes_common::policy::WorkerOffer;
    let offer = WorkerOffer {
        drivers: [(
            DriverName::new("osworld").unwrap(),
            ["OPENAI_API_KEY".to_owned()].into(),
        )]
        .into(),
        campaign_commands: true,
        command_env: ["HF_TOKEN".to_owned()].into(),
        driver_override: false,
        campaigns: Some([CampaignId::new("mine").unwrap()].into()),
        containers: true,
    };
    let mut r = pb::Register::default();
    register_offer(&offer, &mut r);
    assert_eq!(worker_offer(&r).unwrap(), offer);
    assert_eq!(
        worker_offer(&pb::Register::default()).unwrap(),
        WorkerOffer::default()
    );

    let refused = |edit: &dyn Fn(&mut pb::Register)| {
        let mut bad = r.clone();
        edit(&mut bad);
        worker_offer(&bad).unwrap_err()
    };
    let e = refused(&|r| r.drivers[0].name = "os world".into());
    assert_eq!(e.field, "register.drivers[0].name");
    let e = refused(&|r| r.drivers[0].env.push("LD_PRELOAD".into()));
    assert!(
        e.field.starts_with("register.drivers[0].env") && e.reason.contains("LD_PRELOAD"),
        "{e}"
    );
    let e = refused(&|r| r.command_env.push("PATH".into()));
    assert!(
        e.field.starts_with("register.command_env") && e.reason.contains("PATH"),
        "{e}"
    );
    let e = refused(&|r| r.campaigns.push("../x".into()));
    assert_eq!(e.field, "register.campaigns[1]");
    let e = refused(&|r| {
        let d = r.drivers[0].clone();
        r.drivers.push(d);
    });
    assert_eq!(e.field, "register.drivers[1].name");
}
