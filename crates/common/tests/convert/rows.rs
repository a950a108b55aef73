//! Rows: the wire and the JSON names.

use super::*;

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
