//! Scheduling: schedule order, whole groups, phases, arm and driver filters.

use super::*;

/// Claims every unit in turn (completing each with a pass) and returns the trial ids in the
/// order they were handed out, grouped per assignment.
pub(super) async fn drain_in_order(
    h: &Harness,
    c: &lanes_common::ids::CampaignId,
) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    loop {
        match h.claim(c, "lane-a", "host-a", 1).await {
            ClaimOutcome::Assigned(a) => {
                let ids = a[0]
                    .trials
                    .iter()
                    .map(|t| t.trial.trial_id.to_string())
                    .collect();
                for t in &a[0].trials {
                    h.store
                        .complete(
                            c,
                            scored(&t.token, "lane-a", "host-a", Status::Completed, 1.0),
                            h.now(),
                        )
                        .await
                        .unwrap();
                }
                out.push(ids);
            }
            ClaimOutcome::NoWork { reason, .. } => {
                assert_eq!(reason, NoWorkReason::Done, "drain ended early");
                return out;
            }
        }
    }
}

pub(super) async fn schedule_order_and_whole_groups(h: &mut Harness) {
    let grouped = campaign(
        "grouped",
        &[("a", "pa"), ("b", "pb")],
        2,
        "phase1_runs = 2",
        "",
    );
    let expected: Vec<Vec<String>> = lanes_common::schedule::run_groups(&grouped)
        .map(|g| g.trials.iter().map(|t| t.trial_id.to_string()).collect())
        .collect();
    h.submit(grouped).await;
    let got = drain_in_order(h, &cid("grouped")).await;
    assert_eq!(
        got, expected,
        "run groups are claimed whole, in schedule order"
    );
    assert!(got.iter().all(|g| g.len() == 2));

    let single = campaign(
        "single",
        &[("a", "pa"), ("b", "pb")],
        2,
        "phase1_runs = 2\npairing = \"none\"",
        "",
    );
    let expected: Vec<Vec<String>> = lanes_common::schedule::trials(&single)
        .map(|t| vec![t.trial_id.to_string()])
        .collect();
    h.submit(single).await;
    assert_eq!(drain_in_order(h, &cid("single")).await, expected);
    let rows = h.rows(&cid("grouped")).await;
    assert!(rows.iter().all(|r| r.paired), "group rows say paired");
    let rows = h.rows(&cid("single")).await;
    assert!(rows.iter().all(|r| !r.paired));
}

pub(super) async fn phase1_pending_answers_wait(h: &mut Harness) {
    let c = cid("pending");
    h.submit(campaign(
        "pending",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nphase1_runs = 1\nphase2_runs = 1",
        "",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    assert_eq!(
        no_work(h.claim(&c, "l2", "h", 1).await),
        NoWorkReason::Phase1Pending
    );
    assert_eq!(
        h.store.status(&c, h.now()).await.unwrap().state,
        CampaignState::Running
    );
    h.store
        .complete(&c, scored(&t, "l", "h", Status::Completed, 1.0), h.now())
        .await
        .unwrap();
    let t2 = h
        .claim_some(&c, "l2", "h", 1)
        .await
        .remove(0)
        .trials
        .remove(0);
    assert_eq!(t2.trial.phase.number(), 2);
}

pub(super) async fn phase2_block_refused_gets_not_started_rows_and_ends_done(h: &mut Harness) {
    let c = cid("refuse");
    let cutoff = lanes_common::utc::format_rfc3339(T0 + 3 * 3_600_000);
    h.submit(campaign(
        "refuse",
        &[("a", "pa")],
        2,
        &format!("pairing = \"none\"\nphase1_runs = 1\nphase2_runs = 2\ncutoff_utc = \"{cutoff}\""),
        "",
    ))
    .await;
    // Phase-1 blocks take two and a half hours each (both still fit: 2.5 h < 3 h) ...
    for _ in 0..2 {
        let t = h.claim_tokens(&c, "l", "h").await.remove(0);
        let mut o = scored(&t, "l", "h", Status::Completed, 1.0);
        o.result.walls.agent_s = 9000.0;
        h.store.complete(&c, o, h.now()).await.unwrap();
    }
    // ... and an hour later no phase-2 block fits in the two hours left before the cutoff.
    h.advance_s(3600);
    assert_eq!(no_work(h.claim(&c, "l", "h", 1).await), NoWorkReason::Done);
    let rows = h.rows(&c).await;
    let refused: Vec<_> = rows
        .iter()
        .filter(|r| r.status == Status::NotStarted)
        .collect();
    assert_eq!(refused.len(), 4);
    assert!(
        refused
            .iter()
            .all(|r| r.is_final && r.phase.number() == 2 && r.attempt == 0)
    );
    assert!(refused.iter().all(|r| {
        r.excluded_reason
            .as_ref()
            .map(ToString::to_string)
            .as_deref()
            == Some("phase2_refused:cutoff")
    }));
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.state, CampaignState::Done);
    assert_eq!(
        (st.trials_not_started, st.trials_final, st.trials_total),
        (4, 6, 6)
    );
}

/// The phase-2 verdict is taken once per block: a block that started is never refused by a
/// later claim of its other trials, whatever the cutoff says by then.
pub(super) async fn a_started_phase2_block_is_not_refused_later(h: &mut Harness) {
    let c = cid("started");
    let cutoff = lanes_common::utc::format_rfc3339(T0 + 3 * 3_600_000);
    h.submit(campaign(
        "started",
        &[("a", "pa"), ("b", "pb")],
        1,
        &format!("pairing = \"none\"\nphase1_runs = 1\nphase2_runs = 1\ncutoff_utc = \"{cutoff}\""),
        "",
    ))
    .await;
    // The phase-1 block takes two hours (two trials of an hour): a phase-2 block started now
    // ends before the cutoff ...
    for lane in ["l1", "l2"] {
        let t = h.claim_tokens(&c, lane, "h").await.remove(0);
        let mut o = scored(&t, lane, "h", Status::Completed, 1.0);
        o.result.walls.agent_s = 3600.0;
        h.store.complete(&c, o, h.now()).await.unwrap();
    }
    let first = h.claim_tokens(&c, "l1", "h").await.remove(0);
    assert!(first.trial_id.as_str().starts_with("T0.r1."), "{first:?}");
    // ... one started an hour later would not, but this one has started already.
    h.advance_s(3600 + 60);
    let second = h.claim_tokens(&c, "l2", "h").await.remove(0);
    assert!(second.trial_id.as_str().starts_with("T0.r1."), "{second:?}");
    assert_ne!(first.trial_id, second.trial_id);
    let rows = h.rows(&c).await;
    assert!(
        rows.iter().all(|r| r.status != Status::NotStarted),
        "{rows:?}"
    );
}

pub(super) async fn lane_arms_filter_claims(h: &mut Harness) {
    let c = cid("arms");
    h.submit(campaign(
        "arms",
        &[("a", "pa"), ("b", "pb")],
        2,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let req = ClaimRequest {
        arms: Some(vec![lanes_common::ids::ArmId::new("b").unwrap()]),
        ..request("l", "h", 4)
    };
    match h.store.claim(&c, req, h.now()).await.unwrap() {
        ClaimOutcome::Assigned(a) => {
            assert_eq!(a.len(), 2);
            assert!(a.iter().all(|x| x.trials[0].trial.arm.as_str() == "b"));
        }
        other => panic!("{other:?}"),
    }
    let req = ClaimRequest {
        arms: Some(vec![lanes_common::ids::ArmId::new("zzz").unwrap()]),
        ..request("l", "h", 1)
    };
    assert_eq!(
        no_work(h.store.claim(&c, req, h.now()).await.unwrap()),
        NoWorkReason::NoMatchingArms
    );
}

/// A claim from a worker that does not run the campaign's driver leases nothing and names
/// the driver; the same claim with the driver offered is served. A stopped campaign says
/// it is stopped, whatever the driver.
pub(super) async fn a_claim_refuses_a_driver_the_worker_does_not_run(h: &mut Harness) {
    use lanes_common::ids::DriverName;
    use lanes_common::policy::{DriverRefusal, WorkerOffer};
    let mut named = campaign("named", &[("a", "pa")], 2, "pairing = \"none\"", "");
    let osworld = DriverName::new("osworld").unwrap();
    named.spec.driver.kind = lanes_common::spec::DriverKind::Named(osworld.clone());
    h.submit(named).await;
    let c = cid("named");
    assert_eq!(
        no_work(
            h.store
                .claim(&c, request("l", "h", 1), h.now())
                .await
                .unwrap()
        ),
        NoWorkReason::DriverRefused {
            refusal: DriverRefusal::MissingDriver {
                driver: osworld.clone()
            }
        }
    );
    assert!(
        h.store
            .status(&c, h.now())
            .await
            .unwrap()
            .in_flight
            .is_empty()
    );
    let with = ClaimRequest {
        offer: std::sync::Arc::new(WorkerOffer {
            drivers: [(osworld, BTreeSet::new())].into(),
            ..WorkerOffer::default()
        }),
        ..request("l", "h", 1)
    };
    assert!(matches!(
        h.store.claim(&c, with, h.now()).await.unwrap(),
        ClaimOutcome::Assigned(_)
    ));
    h.store.stop(&c, StopMode::Drain, h.now()).await.unwrap();
    assert!(matches!(
        no_work(
            h.store
                .claim(&c, request("l", "h", 1), h.now())
                .await
                .unwrap()
        ),
        NoWorkReason::Stopped { .. }
    ));
}
