//! The store conformance suite: every case is written once, generic over the backend, and
//! instantiated per backend with the backend's name in the test name.

mod support;

use std::collections::BTreeSet;

use lanes_common::policy::{ClaimGate, NoWorkReason, TrialHistory};
use lanes_common::row::{ExcludedReason, FailureKind, Phase, QuotaReading, Status};
use lanes_common::state::{CampaignState, StopMode, StopReason};
use lanes_coordinator::store::{
    ClaimOutcome, ClaimRequest, Release, ReleaseReason, RenewState, StoreError, SubmitKind,
};
use support::*;

/// Lease TTL used by most cases.
const TTL: i64 = 10;

/// Claims every unit in turn (completing each with a pass) and returns the trial ids in the
/// order they were handed out, grouped per assignment.
async fn drain_in_order(h: &Harness, c: &lanes_common::ids::CampaignId) -> Vec<Vec<String>> {
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

async fn schedule_order_and_whole_groups(h: &mut Harness) {
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

/// Issues `n` tokens of one trial by letting `n - 1` leases expire (after a heartbeat).
async fn many_tokens(
    h: &Harness,
    c: &lanes_common::ids::CampaignId,
    n: usize,
) -> Vec<lanes_common::ids::Token> {
    let mut tokens = Vec::new();
    for i in 0..n {
        let t = h
            .claim_tokens(c, &format!("lane-{i}"), &format!("host-{i}"))
            .await;
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].attempt as usize, i + 1);
        assert_eq!(h.renew(c, &t[0], Phase::Agent).await, RenewState::Renewed);
        tokens.push(t[0].clone());
        if i + 1 < n {
            h.advance_s(TTL + 3);
            let r = h.store.reap(c, h.now()).await.unwrap();
            assert_eq!(r.expired, 1);
        }
    }
    tokens
}

async fn first_scored_wins_under_32_concurrent_completions(h: &mut Harness) {
    let c = cid("race");
    h.submit(campaign(
        "race",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nlease_ttl_s = 10",
        "[retry]\ninfra_retries = 40\ninfra_backoff_s = 0\n",
    ))
    .await;
    let tokens = many_tokens(h, &c, 32).await;
    let statuses = [
        Status::Completed,
        Status::Timeout,
        Status::AgentError,
        Status::MaxTurns,
    ];
    let mut tasks = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let store = h.store.clone();
        let now = h.now();
        let status = statuses[i % statuses.len()];
        let outcome = scored(t, &format!("lane-{i}"), "h", status, (i % 2) as f64);
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            store.complete(&c, outcome, now).await
        }));
    }
    let mut acks = Vec::new();
    for t in tasks {
        acks.push(t.await.unwrap().unwrap());
    }
    assert_eq!(
        acks.iter().filter(|a| a.counted).count(),
        1,
        "exactly one counted ack"
    );
    let winner = acks.iter().find(|a| a.counted).unwrap().token.attempt;
    assert!(acks.iter().all(|a| a.winner_attempt == Some(winner)));
    let rows = h.rows(&c).await;
    let scored_rows: Vec<_> = rows.iter().filter(|r| r.status.is_scored()).collect();
    assert_eq!(scored_rows.len(), 32);
    assert_eq!(scored_rows.iter().filter(|r| r.counted).count(), 1);
    for r in scored_rows.iter().filter(|r| !r.counted) {
        assert!(r.duplicate, "non-winning scored rows are duplicates");
        let i = r.attempt as usize - 1;
        assert_eq!(
            r.status,
            statuses[i % statuses.len()],
            "a duplicate keeps its real status"
        );
    }
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.trials_counted, 1);
    assert_eq!(st.state, CampaignState::Done);
}

async fn complete_is_idempotent_and_unknown_tokens_are_rejected(h: &mut Harness) {
    let c = cid("idem");
    h.submit(campaign(
        "idem",
        &[("a", "pa")],
        1,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    let outcome = scored(&t, "l", "h", Status::Completed, 1.0);
    let first = h
        .store
        .complete(&c, outcome.clone(), h.now())
        .await
        .unwrap();
    let second = h.store.complete(&c, outcome, h.now()).await.unwrap();
    assert_eq!(first, second, "a replay gets the first answer");
    assert_eq!(h.rows(&c).await.len(), 1, "and writes nothing");

    for bad in [
        lanes_common::ids::Token {
            trial_id: t.trial_id.clone(),
            attempt: 2,
        },
        lanes_common::ids::Token {
            trial_id: t.trial_id.clone(),
            attempt: 0,
        },
        lanes_common::ids::Token {
            trial_id: lanes_common::ids::TrialId::new("NOPE.r0.a").unwrap(),
            attempt: 1,
        },
    ] {
        let err = h
            .store
            .complete(&c, scored(&bad, "l", "h", Status::Completed, 1.0), h.now())
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::UnknownToken(_)), "{bad}: {err}");
    }
    let err = h
        .store
        .complete(
            &cid("no-such"),
            scored(&t, "l", "h", Status::Completed, 1.0),
            h.now(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::UnknownCampaign(_)));
    assert_eq!(h.rows(&c).await.len(), 1);
}

async fn stale_token_cannot_renew_release_or_drop_newer_lease(h: &mut Harness) {
    let c = cid("stale");
    h.submit(campaign(
        "stale",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nlease_ttl_s = 10",
        "[retry]\ninfra_backoff_s = 0\n",
    ))
    .await;
    let tokens = many_tokens(h, &c, 2).await;
    let (old, new) = (&tokens[0], &tokens[1]);
    assert_eq!(h.renew(&c, old, Phase::Agent).await, RenewState::Lost);
    let err = h
        .store
        .release(
            &c,
            Release {
                token: old.clone(),
                reason: ReleaseReason::Cancelled,
                lane: lanes_common::ids::LaneName::new("lane-0").unwrap(),
                host: "host-0".into(),
                detail: None,
            },
            h.now(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::StaleToken(_)), "{err}");
    // A late non-score from the old token is evidence only and leaves the newer lease alone.
    let ack = h
        .store
        .complete(
            &c,
            infra(old, "lane-0", "host-0", FailureKind::DriverCrash),
            h.now(),
        )
        .await
        .unwrap();
    assert!(ack.late && ack.duplicate && !ack.counted);
    assert_eq!(h.renew(&c, new, Phase::Agent).await, RenewState::Renewed);
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.in_flight.len(), 1);
    assert_eq!(st.in_flight[0].token, *new);
}

async fn renew_fails_past_the_hard_deadline(h: &mut Harness) {
    let c = cid("hard");
    h.submit(campaign(
        "hard",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nlease_ttl_s = 10\n[defaults]\ntimeout_s = 60",
        "",
    ))
    .await;
    let a = h.claim_some(&c, "l", "h", 1).await.remove(0);
    let t = &a.trials[0];
    let hard_s = (t.hard_deadline_in_ms / 1000) as i64;
    // Renew every few seconds up to the hard deadline, then once past it.
    let mut elapsed = 0;
    while elapsed + 5 <= hard_s {
        h.advance_s(5);
        elapsed += 5;
        assert_eq!(
            h.renew(&c, &t.token, Phase::Agent).await,
            RenewState::Renewed,
            "at {elapsed}s"
        );
    }
    h.advance_s(hard_s - elapsed + 1);
    assert_eq!(h.renew(&c, &t.token, Phase::Agent).await, RenewState::Lost);
}

async fn two_reapers_racing_take_an_expired_lease_once(h: &mut Harness) {
    let c = cid("reapers");
    h.submit(campaign(
        "reapers",
        &[("a", "pa"), ("b", "pb")],
        3,
        "pairing = \"none\"\nlease_ttl_s = 10",
        "",
    ))
    .await;
    let mut tokens = Vec::new();
    for i in 0..4 {
        let t = h.claim_tokens(&c, &format!("l{i}"), "h").await.remove(0);
        h.renew(&c, &t, Phase::Agent).await;
        tokens.push(t);
    }
    h.advance_s(TTL + 3);
    let (a, b) = tokio::join!(h.store.reap(&c, h.now()), h.store.reap(&c, h.now()));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.expired + b.expired, 4);
    let rows = h.rows(&c).await;
    assert_eq!(rows.len(), 4);
    let ids: BTreeSet<_> = rows.iter().map(|r| r.trial_id.to_string()).collect();
    assert_eq!(ids.len(), 4, "each lease reaped exactly once");
    assert!(
        rows.iter()
            .all(|r| r.failure_kind == Some(FailureKind::LeaseExpired))
    );
}

async fn reap_waits_two_seconds_past_the_deadline(h: &mut Harness) {
    let c = cid("margin");
    h.submit(campaign(
        "margin",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nlease_ttl_s = 10",
        "",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.renew(&c, &t, Phase::Agent).await;
    h.advance_s(TTL + 2);
    assert_eq!(h.store.reap(&c, h.now()).await.unwrap().expired, 0);
    h.clock.advance_ms(1);
    assert_eq!(h.store.reap(&c, h.now()).await.unwrap().expired, 1);
}

async fn undelivered_assignment_is_cancelled_without_budget(h: &mut Harness) {
    let c = cid("undelivered");
    h.submit(campaign(
        "undelivered",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nlease_ttl_s = 10",
        "[retry]\ninfra_retries = 0\n",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.advance_s(TTL + 3);
    let r = h.store.reap(&c, h.now()).await.unwrap();
    assert_eq!((r.cancelled, r.expired), (1, 0));
    let rows = h.rows(&c).await;
    assert_eq!(rows[0].status, Status::Cancelled);
    assert!(!rows[0].is_final);
    assert_eq!(TrialHistory::from_rows(&rows).infra_used, 0);
    // With no infra budget at all, the trial is still claimable at once.
    let t2 = h.claim_tokens(&c, "l", "h").await.remove(0);
    assert_eq!(t2.trial_id, t.trial_id);
    assert_eq!(t2.attempt, 2);
}

async fn lease_past_evaluate_waits_out_publish_grace(h: &mut Harness) {
    let c = cid("grace");
    h.submit(campaign(
        "grace",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nlease_ttl_s = 10\npublish_grace_s = 60",
        "",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.renew(&c, &t, Phase::Publish).await;
    h.advance_s(TTL + 3);
    let r = h.store.reap(&c, h.now()).await.unwrap();
    assert_eq!((r.deferred, r.expired), (1, 0));
    assert!(h.rows(&c).await.is_empty());
    assert!(matches!(
        h.claim(&c, "l2", "h2", 1).await,
        ClaimOutcome::NoWork { .. }
    ));
    h.advance_s(40);
    let r = h.store.reap(&c, h.now()).await.unwrap();
    // Still inside the grace, and deferred once: out of the due leases' way until it ends.
    assert_eq!((r.deferred, r.expired), (0, 0));
    h.advance_s(18);
    assert_eq!(h.store.reap(&c, h.now()).await.unwrap().expired, 1);
    // The outbox finally delivers: a late first score counts.
    let ack = h
        .store
        .complete(&c, scored(&t, "l", "h", Status::Completed, 1.0), h.now())
        .await
        .unwrap();
    assert!(ack.late && ack.counted);
}

async fn late_score_after_reap_is_counted(h: &mut Harness) {
    let c = cid("late-first");
    h.submit(campaign(
        "late-first",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nlease_ttl_s = 10",
        "[retry]\ninfra_backoff_s = 60\n",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.renew(&c, &t, Phase::Evaluate).await;
    h.advance_s(TTL + 3);
    assert_eq!(h.store.reap(&c, h.now()).await.unwrap().expired, 1);
    let ack = h
        .store
        .complete(&c, scored(&t, "l", "h", Status::Completed, 1.0), h.now())
        .await
        .unwrap();
    assert!(ack.late && ack.counted && !ack.duplicate);
    let rows = h.rows(&c).await;
    assert_eq!(rows.len(), 2);
    assert!(rows[1].late && rows[1].counted && rows[1].is_final);
    // The pending infra retry was cancelled by the score.
    h.advance_s(120);
    assert_eq!(no_work(h.claim(&c, "l", "h2", 1).await), NoWorkReason::Done);
}

async fn late_score_turns_an_excluded_trial_counted(h: &mut Harness) {
    let c = cid("late-excl");
    h.submit(campaign(
        "late-excl",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nlease_ttl_s = 10",
        "[retry]\ninfra_retries = 0\n",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.renew(&c, &t, Phase::Agent).await;
    h.advance_s(TTL + 3);
    h.store.reap(&c, h.now()).await.unwrap();
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!((st.trials_excluded, st.state), (1, CampaignState::Done));
    let ack = h
        .store
        .complete(&c, scored(&t, "l", "h", Status::Completed, 0.0), h.now())
        .await
        .unwrap();
    assert!(ack.counted && ack.late);
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(
        (st.trials_counted, st.trials_excluded, st.trials_final),
        (1, 0, 1)
    );
    let rows = h.rows(&c).await;
    assert_eq!(
        rows[0].excluded_reason,
        Some(ExcludedReason::InfraFailure(FailureKind::LeaseExpired)),
        "the excluded row stays as history"
    );
    assert!(rows[1].counted);
}

async fn late_score_revokes_the_newer_lease(h: &mut Harness) {
    let c = cid("revoke");
    h.submit(campaign(
        "revoke",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nlease_ttl_s = 10",
        "[retry]\ninfra_backoff_s = 0\n",
    ))
    .await;
    let tokens = many_tokens(h, &c, 2).await;
    let ack = h
        .store
        .complete(
            &c,
            scored(&tokens[0], "l", "h", Status::Completed, 1.0),
            h.now(),
        )
        .await
        .unwrap();
    assert!(ack.counted && ack.late);
    assert_eq!(
        h.renew(&c, &tokens[1], Phase::Agent).await,
        RenewState::Lost
    );
    // The revoked lane's own later score is a duplicate.
    let ack = h
        .store
        .complete(
            &c,
            scored(&tokens[1], "l", "h", Status::Completed, 0.0),
            h.now(),
        )
        .await
        .unwrap();
    assert!(ack.duplicate && !ack.counted);
    assert_eq!(ack.winner_attempt, Some(1));
}

async fn late_outcome_after_a_score_is_duplicate_evidence(h: &mut Harness) {
    let c = cid("late-dup");
    h.submit(campaign(
        "late-dup",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nlease_ttl_s = 10",
        "[retry]\ninfra_backoff_s = 0\n",
    ))
    .await;
    let tokens = many_tokens(h, &c, 2).await;
    let ack = h
        .store
        .complete(
            &c,
            scored(&tokens[1], "l", "h", Status::Completed, 1.0),
            h.now(),
        )
        .await
        .unwrap();
    assert!(ack.counted && !ack.late);
    let before = TrialHistory::from_rows(&h.rows(&c).await);
    let ack = h
        .store
        .complete(
            &c,
            scored(&tokens[0], "l", "h", Status::Timeout, 0.0),
            h.now(),
        )
        .await
        .unwrap();
    assert!(ack.late && ack.duplicate && !ack.counted);
    assert_eq!(ack.winner_attempt, Some(2));
    let rows = h.rows(&c).await;
    assert_eq!(
        TrialHistory::from_rows(&rows).infra_used,
        before.infra_used,
        "no budget used"
    );
    assert_eq!(rows.last().unwrap().status, Status::Timeout);
}

async fn delayed_retries_are_claimable_only_at_their_time(h: &mut Harness) {
    let c = cid("delayed");
    h.submit(campaign(
        "delayed",
        &[("a", "pa")],
        1,
        "pairing = \"none\"",
        "[retry]\ninfra_backoff_s = 5\n",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.store
        .complete(&c, infra(&t, "l", "h", FailureKind::BootFailed), h.now())
        .await
        .unwrap();
    match h.claim(&c, "l2", "other-host", 1).await {
        ClaimOutcome::NoWork {
            reason: NoWorkReason::NothingReady { next_ms },
            retry_after_ms,
        } => {
            assert_eq!(next_ms, Some(h.now() + 5000));
            assert_eq!(retry_after_ms, 5000);
        }
        other => panic!("{other:?}"),
    }
    h.advance_s(4);
    assert!(matches!(
        h.claim(&c, "l2", "other-host", 1).await,
        ClaimOutcome::NoWork { .. }
    ));
    h.advance_s(1);
    let t2 = h.claim_tokens(&c, "l2", "other-host").await.remove(0);
    assert_eq!((t2.trial_id, t2.attempt), (t.trial_id, 2));
}

async fn exhausted_infra_budget_is_final_and_excluded(h: &mut Harness) {
    let c = cid("exhaust");
    h.submit(campaign(
        "exhaust",
        &[("a", "pa")],
        1,
        "pairing = \"none\"",
        "[retry]\ninfra_retries = 1\ninfra_backoff_s = 0\n",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h1").await.remove(0);
    h.store
        .complete(&c, infra(&t, "l", "h1", FailureKind::DriverCrash), h.now())
        .await
        .unwrap();
    let t = h.claim_tokens(&c, "l", "h2").await.remove(0);
    h.store
        .complete(&c, infra(&t, "l", "h2", FailureKind::GuestLost), h.now())
        .await
        .unwrap();
    let rows = h.rows(&c).await;
    assert!(!rows[0].is_final);
    assert!(rows[1].is_final && rows[1].excluded);
    assert_eq!(
        rows[1].excluded_reason,
        Some(ExcludedReason::InfraFailure(FailureKind::GuestLost))
    );
    assert_eq!(no_work(h.claim(&c, "l", "h3", 1).await), NoWorkReason::Done);
}

async fn auth_failure_with_budget_spent_stops_the_campaign(h: &mut Harness) {
    let c = cid("auth");
    h.submit(campaign(
        "auth",
        &[("a", "pa")],
        2,
        "pairing = \"none\"",
        "[retry]\ninfra_retries = 1\nauth_backoff_s = 0\n",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.store
        .complete(&c, infra(&t, "l", "h", FailureKind::Auth), h.now())
        .await
        .unwrap();
    assert_eq!(
        h.store.status(&c, h.now()).await.unwrap().state,
        CampaignState::Running
    );
    let t2 = h.claim_tokens(&c, "l", "h").await.remove(0);
    assert_eq!(
        t2.trial_id, t.trial_id,
        "the auth retry comes first in schedule order"
    );
    h.store
        .complete(&c, infra(&t2, "l", "h", FailureKind::Auth), h.now())
        .await
        .unwrap();
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.state, CampaignState::Stopped);
    assert_eq!(st.stop_reason, Some(StopReason::Auth));
    let last = h.rows(&c).await.pop().unwrap();
    assert!(!last.is_final, "a resume retries it");
    assert!(matches!(
        no_work(h.claim(&c, "l", "h", 1).await),
        NoWorkReason::Stopped { .. }
    ));
}

async fn stop_drain_lets_in_flight_finish(h: &mut Harness) {
    let c = cid("drain");
    h.submit(campaign(
        "drain",
        &[("a", "pa")],
        3,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    assert_eq!(
        h.store.stop(&c, StopMode::Drain, h.now()).await.unwrap(),
        CampaignState::Stopping
    );
    assert_eq!(h.renew(&c, &t, Phase::Agent).await, RenewState::Renewed);
    assert!(matches!(
        no_work(h.claim(&c, "l2", "h", 1).await),
        NoWorkReason::Stopped { .. }
    ));
    let ack = h
        .store
        .complete(&c, scored(&t, "l", "h", Status::Completed, 1.0), h.now())
        .await
        .unwrap();
    assert!(ack.counted);
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(
        (st.state, st.stop_reason),
        (CampaignState::Stopped, Some(StopReason::User))
    );
}

async fn stop_cancel_cancels_in_flight_without_budget(h: &mut Harness) {
    let c = cid("cancel");
    h.submit(campaign(
        "cancel",
        &[("a", "pa")],
        3,
        "pairing = \"none\"",
        "[retry]\ninfra_retries = 0\n",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.store.stop(&c, StopMode::Cancel, h.now()).await.unwrap();
    assert_eq!(h.renew(&c, &t, Phase::Agent).await, RenewState::Cancel);
    let release = Release {
        token: t.clone(),
        reason: ReleaseReason::Cancelled,
        lane: lanes_common::ids::LaneName::new("l").unwrap(),
        host: "h".into(),
        detail: Some("campaign cancelled".into()),
    };
    h.store.release(&c, release.clone(), h.now()).await.unwrap();
    // A replayed release gets the same answer.
    h.store.release(&c, release, h.now()).await.unwrap();
    let rows = h.rows(&c).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, Status::Cancelled);
    assert!(!rows[0].is_final);
    assert_eq!(TrialHistory::from_rows(&rows).infra_used, 0);
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.state, CampaignState::Stopped);
    // A resume picks the cancelled trial up again.
    h.submit(campaign(
        "cancel",
        &[("a", "pa")],
        3,
        "pairing = \"none\"",
        "[retry]\ninfra_retries = 0\n",
    ))
    .await;
    let t2 = h.claim_tokens(&c, "l", "h").await.remove(0);
    assert_eq!((t2.trial_id, t2.attempt), (t.trial_id, 2));
}

async fn budget_gate_stops_at_the_cap(h: &mut Harness) {
    let c = cid("budget");
    h.submit(campaign(
        "budget",
        &[("a", "pa")],
        4,
        "pairing = \"none\"\nbudget_cap_usd = 1.0",
        "",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    let mut o = scored(&t, "l", "h", Status::Completed, 1.0);
    o.cost_usd = Some(0.6);
    h.store.complete(&c, o, h.now()).await.unwrap();
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    let mut o = scored(&t, "l", "h", Status::Completed, 1.0);
    o.cost_usd = Some(0.5);
    h.store.complete(&c, o, h.now()).await.unwrap();
    assert_eq!(
        no_work(h.claim(&c, "l", "h", 1).await),
        NoWorkReason::Stopped {
            stop_reason: Some(StopReason::Budget)
        }
    );
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.stop_reason, Some(StopReason::Budget));
    assert!((st.spend_usd - 1.1).abs() < 1e-9);
}

async fn quota_gate_pauses_only_its_provider(h: &mut Harness) {
    let c = cid("quota");
    h.submit(campaign(
        "quota",
        &[("a", "pa"), ("b", "pb")],
        3,
        "pairing = \"none\"\nquota_wait = 0.9\nquota_stop = 0.99",
        "",
    ))
    .await;
    let t = h
        .claim_some(&c, "l", "h", 1)
        .await
        .remove(0)
        .trials
        .remove(0);
    assert_eq!(t.trial.arm.as_str(), "a");
    let reset_s = h.now() / 1000 + 600;
    let mut o = scored(&t.token, "l", "h", Status::Completed, 1.0);
    o.quota = Some(QuotaReading {
        provider: "pa".into(),
        utilisation: 0.93,
        reset_epoch: Some(reset_s),
    });
    h.store.complete(&c, o, h.now()).await.unwrap();
    // Every claim now gets only provider pb's trials.
    for _ in 0..3 {
        let a = h.claim_some(&c, "l", "h", 1).await.remove(0);
        assert_eq!(a.trials[0].trial.arm.as_str(), "b");
        h.store
            .complete(
                &c,
                scored(&a.trials[0].token, "l", "h", Status::Completed, 1.0),
                h.now(),
            )
            .await
            .unwrap();
    }
    match no_work(h.claim(&c, "l", "h", 1).await) {
        NoWorkReason::QuotaWait { provider, until_ms } => {
            assert_eq!(provider, "pa");
            assert_eq!(until_ms, reset_s * 1000);
        }
        other => panic!("{other:?}"),
    }
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert!(
        st.gates
            .iter()
            .any(|g| g.gate == ClaimGate::QuotaWait && g.detail == "pa")
    );
    h.clock.set_ms(reset_s * 1000);
    let a = h.claim_some(&c, "l", "h", 1).await.remove(0);
    assert_eq!(
        a.trials[0].trial.arm.as_str(),
        "a",
        "the provider resumes at its reset"
    );
    // At or above quota_stop the campaign stops.
    let mut o = scored(&a.trials[0].token, "l", "h", Status::Completed, 1.0);
    o.quota = Some(QuotaReading {
        provider: "pa".into(),
        utilisation: 0.995,
        reset_epoch: Some(reset_s + 600),
    });
    h.store.complete(&c, o, h.now()).await.unwrap();
    assert_eq!(
        no_work(h.claim(&c, "l", "h", 1).await),
        NoWorkReason::Stopped {
            stop_reason: Some(StopReason::Quota)
        }
    );
}

async fn phase1_pending_answers_wait(h: &mut Harness) {
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
    assert_eq!(t2.trial.phase, 2);
}

async fn phase2_block_refused_gets_not_started_rows_and_ends_done(h: &mut Harness) {
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
        o.walls.agent_s = 9000.0;
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
            .all(|r| r.is_final && r.phase == 2 && r.attempt == 0)
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

async fn resume_is_idempotent_refuses_drift_and_records_growth(h: &mut Harness) {
    let c = cid("resume");
    let base = |tasks: usize, runs: &str, extra: &str| {
        campaign(
            "resume",
            &[("a", "pa"), ("b", "pb")],
            tasks,
            &format!("pairing = \"none\"\n{runs}"),
            extra,
        )
    };
    let first = h.submit(base(2, "phase1_runs = 1", "")).await;
    assert_eq!(first.kind, SubmitKind::Created);
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.store
        .complete(&c, scored(&t, "l", "h", Status::Completed, 1.0), h.now())
        .await
        .unwrap();

    let again = h.submit(base(2, "phase1_runs = 1", "")).await;
    assert_eq!(again.kind, SubmitKind::Resumed);
    assert_eq!(
        (again.trials, &again.spec_hash),
        (first.trials, &first.spec_hash)
    );
    assert_eq!(h.rows(&c).await.len(), 1);
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.trials_final, 1);

    let err = h
        .store
        .submit(
            base(2, "phase1_runs = 1", "[retry]\ninfra_retries = 3\n"),
            h.now(),
        )
        .await
        .unwrap_err();
    match err {
        StoreError::Refused(conflicts) => {
            assert!(
                conflicts.iter().any(|c| c.field == "retry.infra_retries"),
                "{conflicts:?}"
            );
        }
        other => panic!("{other}"),
    }

    let grown = h.submit(base(3, "phase1_runs = 2", "")).await;
    assert_eq!(grown.kind, SubmitKind::Amended);
    assert_eq!(grown.trials, 3 * 2 * 2);
    assert_ne!(grown.spec_hash, first.spec_hash);
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.amendments.len(), 1);
    assert_eq!(st.amendments[0].spec_hash, grown.spec_hash);
    assert_eq!(st.trials_total, 12);
    // Later rows carry the new spec hash; the earlier row keeps the old one.
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.store
        .complete(&c, scored(&t, "l", "h", Status::Completed, 1.0), h.now())
        .await
        .unwrap();
    let rows = h.rows(&c).await;
    assert_eq!(rows[0].spec_hash, first.spec_hash);
    assert_eq!(rows[1].spec_hash, grown.spec_hash);
    // Every trial of the grown schedule gets claimed exactly once more.
    let mut seen = BTreeSet::new();
    loop {
        match h.claim(&c, "l", "h", 1).await {
            ClaimOutcome::Assigned(a) => {
                let t = &a[0].trials[0];
                assert!(seen.insert(t.trial.trial_id.to_string()));
                h.store
                    .complete(
                        &c,
                        scored(&t.token, "l", "h", Status::Completed, 1.0),
                        h.now(),
                    )
                    .await
                    .unwrap();
            }
            ClaimOutcome::NoWork { reason, .. } => {
                assert_eq!(reason, NoWorkReason::Done);
                break;
            }
        }
    }
    assert_eq!(seen.len(), 10);
}

async fn lane_arms_filter_claims(h: &mut Harness) {
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

/// A campaign large enough that the Redis backend writes it in chunks and stages its ready
/// queue, then an amendment that appends as many again: every trial is claimable exactly
/// once, in schedule order.
async fn large_submit_and_amendment_are_whole(h: &mut Harness) {
    let c = cid("large");
    let big = |n| {
        campaign(
            "large",
            &[("a", "pa")],
            n,
            "pairing = \"none\"\nlease_ttl_s = 600",
            "",
        )
    };
    let first = big(2500);
    let expected_first: Vec<String> = lanes_common::schedule::trials(&first)
        .map(|t| t.trial_id.to_string())
        .collect();
    assert_eq!(h.submit(first).await.trials, 2500);
    let mut got = Vec::new();
    for a in h.claim_some(&c, "l", "h", 1000).await {
        got.push(a.trials[0].trial.trial_id.to_string());
    }
    assert_eq!(got, expected_first[..1000]);
    let grown = big(5000);
    let expected: Vec<String> = lanes_common::schedule::trials(&grown)
        .map(|t| t.trial_id.to_string())
        .collect();
    assert_eq!(h.submit(grown).await.kind, SubmitKind::Amended);
    loop {
        match h.claim(&c, "l", "h", 1000).await {
            ClaimOutcome::Assigned(a) => {
                got.extend(a.iter().map(|x| x.trials[0].trial.trial_id.to_string()));
            }
            ClaimOutcome::NoWork { reason, .. } => {
                assert!(
                    matches!(reason, NoWorkReason::NothingReady { .. }),
                    "{reason:?}"
                );
                break;
            }
        }
    }
    assert_eq!(got, expected, "each trial once, in schedule order");
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!((st.trials_total, st.in_flight.len()), (5000, 5000));
}

/// An assignment reaped as undelivered whose lane did run it: its late score still counts,
/// and the newer attempt's score is a duplicate (found by the model-based test).
async fn late_score_after_an_undelivered_reap_counts_once(h: &mut Harness) {
    let c = cid("undelivered-late");
    h.submit(campaign(
        "undelivered-late",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nlease_ttl_s = 10",
        "",
    ))
    .await;
    let first = h.claim_tokens(&c, "l0", "h0").await.remove(0);
    h.advance_s(TTL + 3);
    assert_eq!(h.store.reap(&c, h.now()).await.unwrap().cancelled, 1);
    let second = h.claim_tokens(&c, "l1", "h1").await.remove(0);
    let ack = h
        .store
        .complete(
            &c,
            scored(&first, "l0", "h0", Status::Completed, 1.0),
            h.now(),
        )
        .await
        .unwrap();
    assert!(ack.counted && ack.late);
    assert_eq!(h.renew(&c, &second, Phase::Agent).await, RenewState::Lost);
    let ack = h
        .store
        .complete(
            &c,
            scored(&second, "l1", "h1", Status::Completed, 1.0),
            h.now(),
        )
        .await
        .unwrap();
    assert!(ack.duplicate && !ack.counted);
    let rows = h.rows(&c).await;
    assert_eq!(rows.iter().filter(|r| r.counted).count(), 1);
}

async fn a_rate_limit_pauses_its_provider_until_the_reset(h: &mut Harness) {
    let c = cid("pause");
    h.submit(campaign(
        "pause",
        &[("a", "pa"), ("b", "pb")],
        4,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let t = h
        .claim_some(&c, "l", "h", 1)
        .await
        .remove(0)
        .trials
        .remove(0);
    assert_eq!(t.trial.arm.as_str(), "a");
    let reset_s = h.now() / 1000 + 300;
    let mut o = infra(&t.token, "l", "h", FailureKind::RateLimit);
    o.reset_epoch = Some(reset_s);
    h.store.complete(&c, o, h.now()).await.unwrap();
    // The other provider keeps being claimed; the paused one is not even scanned.
    for _ in 0..4 {
        let a = h.claim_some(&c, "l", "h", 1).await.remove(0);
        assert_eq!(a.trials[0].trial.arm.as_str(), "b");
        h.store
            .complete(
                &c,
                scored(&a.trials[0].token, "l", "h", Status::Completed, 1.0),
                h.now(),
            )
            .await
            .unwrap();
    }
    match no_work(h.claim(&c, "l", "h", 1).await) {
        NoWorkReason::RateLimited { provider, until_ms } => {
            assert_eq!((provider.as_str(), until_ms), ("pa", reset_s * 1000));
        }
        other => panic!("{other:?}"),
    }
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert!(st.gates.iter().any(|g| g.gate == ClaimGate::RateLimitPause
        && g.detail == "pa"
        && g.until_ms == Some(reset_s * 1000)));
    let events = h.store.events(&c, 0, usize::MAX).await.unwrap();
    assert!(events.iter().any(|e| matches!(&e.kind, lanes_coordinator::store::EventKind::GatePaused { gate } if gate.detail == "pa")));
    // At the reset the provider resumes.
    h.clock.set_ms(reset_s * 1000);
    let a = h.claim_some(&c, "l", "h", 1).await.remove(0);
    assert_eq!(a.trials[0].trial.arm.as_str(), "a");
}

async fn sixteen_concurrent_claims_against_a_cap_for_five_admit_five(h: &mut Harness) {
    let c = cid("reserve");
    // The arm's expected cost is its reservation until it has rows of its own.
    let mut spec = campaign(
        "reserve",
        &[("a", "pa")],
        40,
        "pairing = \"none\"\nbudget_cap_usd = 5.0",
        "",
    );
    spec.spec.arms[0].expected_cost_usd = Some(1.0);
    h.submit(spec).await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let store = h.store.clone();
        let (c, now) = (c.clone(), h.now());
        tasks.push(tokio::spawn(async move {
            store
                .claim(&c, request(&format!("l{i}"), "h", 1), now)
                .await
                .unwrap()
        }));
    }
    let mut tokens = Vec::new();
    for t in tasks {
        if let ClaimOutcome::Assigned(a) = t.await.unwrap() {
            tokens.push(a[0].trials[0].token.clone());
        }
    }
    assert!(
        tokens.len() <= 5,
        "{} admitted against a cap for 5",
        tokens.len()
    );
    assert_eq!(tokens.len(), 5);
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert!((st.reserved_usd - 5.0).abs() < 1e-9);
    // Each costs a little more than expected: spend ends within one trial's overrun of the cap.
    for t in &tokens {
        let mut o = scored(t, "l", "h", Status::Completed, 1.0);
        o.cost_usd = Some(1.1);
        h.store.complete(&c, o, h.now()).await.unwrap();
    }
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert!(st.spend_usd <= 5.0 + 1.1 + 1e-9, "spend {}", st.spend_usd);
    assert_eq!(st.reserved_usd, 0.0);
    assert_eq!(
        no_work(h.claim(&c, "l", "h", 1).await),
        NoWorkReason::Stopped {
            stop_reason: Some(StopReason::Budget)
        }
    );
}

async fn a_trial_that_would_end_after_the_cutoff_is_not_started(h: &mut Harness) {
    let c = cid("cutoff");
    let cutoff = lanes_common::utc::format_rfc3339(T0 + 3 * 3_600_000);
    h.submit(campaign(
        "cutoff",
        &[("a", "pa")],
        6,
        &format!("pairing = \"none\"\ncutoff_utc = \"{cutoff}\"\n[defaults]\ntimeout_s = 1800"),
        "",
    ))
    .await;
    // Three trials take 20 minutes each: the arm's p95 is 20 minutes.
    for _ in 0..3 {
        let t = h.claim_tokens(&c, "l", "h").await.remove(0);
        let mut o = scored(&t, "l", "h", Status::Completed, 1.0);
        o.walls.agent_s = 1200.0;
        h.store.complete(&c, o, h.now()).await.unwrap();
    }
    // Ten minutes before the cutoff, nothing starts, and the answer says why.
    h.clock.set_ms(T0 + 3 * 3_600_000 - 600_000);
    match no_work(h.claim(&c, "l", "h", 1).await) {
        NoWorkReason::CutoffAdmission { estimate_s } => assert_eq!(estimate_s, 1200.0),
        other => panic!("{other:?}"),
    }
    // Twenty-one minutes before it, a trial still fits.
    h.clock.set_ms(T0 + 3 * 3_600_000 - 1_260_000);
    assert_eq!(h.claim_some(&c, "l", "h", 1).await.len(), 1);
}

async fn an_infra_retry_prefers_another_host_then_falls_back(h: &mut Harness) {
    let c = cid("affinity");
    h.submit(campaign(
        "affinity",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nlease_ttl_s = 10",
        "[retry]\ninfra_retries = 3\ninfra_backoff_s = 0\n",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "host-a").await.remove(0);
    h.store
        .complete(
            &c,
            infra(&t, "l", "host-a", FailureKind::BootFailed),
            h.now(),
        )
        .await
        .unwrap();
    // The same host is refused within one TTL; another host gets it.
    assert!(matches!(
        no_work(h.claim(&c, "l2", "host-a", 1).await),
        NoWorkReason::NothingReady { .. }
    ));
    let t2 = h.claim_tokens(&c, "l3", "host-b").await.remove(0);
    assert_eq!(t2.attempt, 2);
    let rows_host = |rows: &[lanes_common::row::Row]| {
        rows.iter()
            .map(|r| r.host.clone().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    h.store
        .complete(
            &c,
            infra(&t2, "l3", "host-b", FailureKind::BootFailed),
            h.now(),
        )
        .await
        .unwrap();
    // When no other host asks within one TTL, the same host gets it.
    assert!(matches!(
        no_work(h.claim(&c, "l4", "host-b", 1).await),
        NoWorkReason::NothingReady { .. }
    ));
    h.advance_s(TTL);
    let t3 = h.claim_tokens(&c, "l4", "host-b").await.remove(0);
    assert_eq!(t3.attempt, 3);
    // The row records the host of every attempt.
    assert_eq!(rows_host(&h.rows(&c).await), vec!["host-a", "host-b"]);
}

/// A claim from a worker that does not run the campaign's driver leases nothing and names
/// the driver; the same claim with the driver offered is served. A stopped campaign says
/// it is stopped, whatever the driver.
async fn a_claim_refuses_a_driver_the_worker_does_not_run(h: &mut Harness) {
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

/// A campaign is deleted only once it runs nothing; then every key of it is gone (Redis: no
/// key under its hash tag, and not in the set of campaigns), another campaign is untouched,
/// and its id is free for a new campaign.
async fn delete_frees_a_campaign_that_runs_nothing(h: &mut Harness) {
    let arms = [("a", "pa"), ("b", "pb")];
    h.submit(campaign("gone", &arms, 3, "pairing = \"none\"", ""))
        .await;
    h.submit(campaign("kept", &arms, 2, "", "")).await;
    let gone = cid("gone");
    let active = |r: Result<_, StoreError>, what: &str| match r {
        Err(StoreError::Active(_, why)) => assert!(why.contains(what), "{why}"),
        other => panic!("deleted while {what}: {other:?}"),
    };
    active(h.store.delete(&gone).await, "is running");
    let token = h.claim_tokens(&gone, "lane-a", "host-a").await.remove(0);
    h.store
        .complete(
            &gone,
            scored(&token, "lane-a", "host-a", Status::Completed, 1.0),
            h.now(),
        )
        .await
        .unwrap();
    let held = h.claim_tokens(&gone, "lane-a", "host-a").await.remove(0);
    h.store.stop(&gone, StopMode::Drain, h.now()).await.unwrap();
    active(h.store.delete(&gone).await, "is stopping");
    h.store
        .complete(
            &gone,
            scored(&held, "lane-a", "host-a", Status::Completed, 0.0),
            h.now(),
        )
        .await
        .unwrap();
    assert_eq!(
        h.store.status(&gone, h.now()).await.unwrap().state,
        CampaignState::Stopped
    );

    let deleted = h.store.delete(&gone).await.unwrap();
    assert_eq!((deleted.rows, deleted.trials), (2, 6));
    assert!(matches!(
        h.store.status(&gone, h.now()).await,
        Err(StoreError::UnknownCampaign(_))
    ));
    assert!(matches!(
        h.store.delete(&gone).await,
        Err(StoreError::UnknownCampaign(_))
    ));
    assert_eq!(h.store.list().await.unwrap(), vec![cid("kept")]);
    if let Some(server) = &h.redis {
        let client = ::redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let left: Vec<String> = ::redis::cmd("KEYS")
            .arg("lanes:{c:gone}:*")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(left.is_empty(), "keys left behind: {left:?}");
        let listed: bool = ::redis::cmd("SISMEMBER")
            .arg("lanes:campaigns")
            .arg("gone")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(!listed);
    }
    // The other campaign runs on; the id starts afresh.
    assert!(
        !h.claim_tokens(&cid("kept"), "lane-b", "host-b")
            .await
            .is_empty()
    );
    let again = h.submit(campaign("gone", &arms, 1, "", "")).await;
    assert_eq!(again.kind, SubmitKind::Created);
    let st = h.store.status(&gone, h.now()).await.unwrap();
    assert_eq!((st.trials_total, st.rows_total, st.trials_final), (2, 0, 0));
    // No row, event or trial state of the old campaign shows through.
    assert!(h.store.rows(&gone, 0, 100).await.unwrap().is_empty());
    let events = h.store.events(&gone, 0, 100).await.unwrap();
    assert!(events.len() <= 1, "old events: {events:?}");
    let tokens = h.claim_tokens(&gone, "lane-a", "host-a").await;
    assert!(tokens.iter().all(|t| t.attempt == 1), "{tokens:?}");
}

/// An operator retry pass requeues excluded trials (those whose reason matches, when given)
/// with a fresh budget: each gets a `requeued` row with the pass and the note, its later rows
/// carry the pass, a done campaign runs again, and the pass is an amendment. Nothing matching
/// records nothing; a stopped campaign is refused; `not_started` is never requeued.
async fn an_operator_retry_pass_requeues_excluded_trials(h: &mut Harness) {
    use lanes_coordinator::store::RequeueRequest;
    let c = cid("retried");
    h.submit(campaign(
        "retried",
        &[("a", "pa"), ("b", "pb")],
        2,
        "pairing = \"none\"",
        "[retry]\ninfra_retries = 0\ninfra_backoff_s = 0\n",
    ))
    .await;
    // Four trials: one boot failure, one evaluator error (both excluded at once), two passes.
    let kinds = [
        Some(FailureKind::BootFailed),
        Some(FailureKind::EvaluatorError),
        None,
        None,
    ];
    for kind in kinds {
        let t = h.claim_tokens(&c, "l", "h").await.remove(0);
        let outcome = match kind {
            Some(k) => infra(&t, "l", "h", k),
            None => scored(&t, "l", "h", Status::Completed, 1.0),
        };
        h.store.complete(&c, outcome, h.now()).await.unwrap();
    }
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!((st.state, st.trials_excluded), (CampaignState::Done, 2));

    let req = |reason: Option<&str>, note: &str| RequeueRequest {
        reason: reason.map(str::to_owned),
        note: note.to_owned(),
    };
    let none = h
        .store
        .requeue_excluded(&c, req(Some("infra_failure:guest_*"), "nothing"), h.now())
        .await
        .unwrap();
    assert_eq!((none.pass, none.trials), (0, 0));
    assert!(
        h.store
            .status(&c, h.now())
            .await
            .unwrap()
            .amendments
            .is_empty()
    );

    let first = h
        .store
        .requeue_excluded(
            &c,
            req(Some("infra_failure:boot_*"), "image fixed"),
            h.now(),
        )
        .await
        .unwrap();
    assert_eq!((first.pass, first.trials), (1, 1));
    assert_eq!(first.state, CampaignState::Running);
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!((st.trials_final, st.trials_excluded), (3, 1));
    let amended = st.amendments.last().unwrap().requeue.clone().unwrap();
    assert_eq!(
        (amended.pass, amended.trials, amended.note.as_str()),
        (1, 1, "image fixed")
    );
    assert_eq!(amended.selection, "excluded, reason infra_failure:boot_*");
    let rows = h.rows(&c).await;
    let last = rows.last().unwrap();
    assert_eq!(last.status, Status::Requeued);
    assert!(!last.is_final && !last.counted && last.retry_pass == Some(1));
    assert_eq!(last.requeue.as_ref().unwrap().note, "image fixed");
    let requeued_trial = last.trial_id.clone();

    // The requeued trial is claimable again, with a fresh budget: it fails once more and is
    // excluded again (budget 0), then a second pass retries both excluded trials.
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    assert_eq!((t.trial_id.clone(), t.attempt), (requeued_trial.clone(), 2));
    h.store
        .complete(&c, infra(&t, "l", "h", FailureKind::BootFailed), h.now())
        .await
        .unwrap();
    let rows = h.rows(&c).await;
    let failed = rows.last().unwrap();
    assert!(failed.is_final && failed.excluded && failed.retry_pass == Some(1));
    assert_eq!(
        h.store.status(&c, h.now()).await.unwrap().state,
        CampaignState::Done
    );

    let second = h
        .store
        .requeue_excluded(&c, req(None, "all of them"), h.now())
        .await
        .unwrap();
    assert_eq!((second.pass, second.trials), (2, 2));
    for _ in 0..2 {
        let t = h.claim_tokens(&c, "l", "h").await.remove(0);
        h.store
            .complete(&c, scored(&t, "l", "h", Status::Completed, 1.0), h.now())
            .await
            .unwrap();
    }
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(
        (
            st.state,
            st.trials_counted,
            st.trials_excluded,
            st.trials_final
        ),
        (CampaignState::Done, 4, 0, 4)
    );
    assert_eq!(st.amendments.len(), 2);
    let rows = h.rows(&c).await;
    let counted_late: Vec<_> = rows
        .iter()
        .filter(|r| r.counted && r.retry_pass == Some(2))
        .collect();
    assert_eq!(counted_late.len(), 2);

    // The report: every trial counted, and the requeued ones disclosed apart.
    let recorded = h.store.campaign(&c).await.unwrap();
    let report = lanes_common::report::build(&recorded, &rows);
    assert_eq!(report.completeness.total.counted, 4);
    // Scores after a requeue are the retry's, not late scores after an exclusion.
    assert_eq!(report.completeness.total.counted_after_exclusion, 0);
    assert_eq!(report.retry_passes.len(), 2);
    let requeued: u64 = report.operator_retries.iter().map(|r| r.requeued).sum();
    assert_eq!(requeued, 2);
    assert!(report.to_text().contains("OPERATOR RETRIES"));

    h.store.stop(&c, StopMode::Drain, h.now()).await.unwrap();
    let stopped = cid("stopped-one");
    h.submit(campaign("stopped-one", &[("a", "pa")], 1, "", ""))
        .await;
    h.store
        .stop(&stopped, StopMode::Drain, h.now())
        .await
        .unwrap();
    assert!(matches!(
        h.store
            .requeue_excluded(&stopped, req(None, "no"), h.now())
            .await,
        Err(StoreError::Active(..))
    ));
}

/// Dashboard login codes: taken once, whichever caller asks first, and never after they
/// expire; unknown codes are nothing; a new code sweeps expired ones (embedded).
async fn a_login_code_is_good_once_until_it_expires(h: &mut Harness) {
    use lanes_coordinator::store::LoginGrant;
    let digest = |n: u8| [n; 32];
    let grant = |campaign: Option<&str>, expires_ms| LoginGrant {
        campaign: campaign.map(cid),
        expires_ms,
        token_mark: "mark".into(),
    };
    let now = h.now();
    h.store
        .put_login_code(digest(1), grant(Some("c1"), now + 60_000), now)
        .await
        .unwrap();
    h.store
        .put_login_code(digest(2), grant(None, now + 1_000), now)
        .await
        .unwrap();
    assert_eq!(h.store.take_login_code(digest(9), now).await.unwrap(), None);
    // Sixteen takers at once: exactly one gets the grant.
    let takers = (0..16).map(|_| {
        let store = h.store.clone();
        tokio::spawn(async move { store.take_login_code(digest(1), now + 10).await.unwrap() })
    });
    let mut granted = Vec::new();
    for t in takers {
        granted.extend(t.await.unwrap());
    }
    assert_eq!(granted, vec![grant(Some("c1"), now + 60_000)]);
    // Expired by our clock: refused, and gone.
    assert_eq!(
        h.store
            .take_login_code(digest(2), now + 1_000)
            .await
            .unwrap(),
        None
    );
    assert_eq!(h.store.take_login_code(digest(2), now).await.unwrap(), None);
    // A code that has already expired is not kept at all.
    h.store
        .put_login_code(digest(3), grant(None, now - 1), now)
        .await
        .unwrap();
    assert_eq!(
        h.store.take_login_code(digest(3), now - 10).await.unwrap(),
        None
    );
}

/// Task folders: kept once under their digest (a second put is no change, even racing),
/// read back byte for byte, and reported missing until kept; they outlive a campaign's
/// delete (another campaign may name them).
async fn a_task_folder_is_kept_once_by_digest(h: &mut Harness) {
    let d = |n: char| format!("sha256:{}", n.to_string().repeat(64));
    let bytes: Vec<u8> = (0..=255u8).cycle().take(3 * 1024 * 1024).collect();
    assert_eq!(
        h.store.missing_bundles(vec![d('a'), d('b')]).await.unwrap(),
        vec![d('a'), d('b')]
    );
    let puts = (0..8).map(|_| {
        let (store, bytes, digest) = (h.store.clone(), bytes.clone(), d('a'));
        tokio::spawn(async move { store.put_bundle(digest, bytes).await.unwrap() })
    });
    let mut stored = 0;
    for p in puts {
        stored += usize::from(p.await.unwrap());
    }
    assert_eq!(stored, 1, "kept exactly once");
    assert!(!h.store.put_bundle(d('a'), b"other".to_vec()).await.unwrap());
    assert_eq!(h.store.bundle(d('a')).await.unwrap(), Some(bytes));
    assert_eq!(h.store.bundle(d('b')).await.unwrap(), None);
    assert_eq!(
        h.store.missing_bundles(vec![d('a'), d('b')]).await.unwrap(),
        vec![d('b')]
    );
    assert!(
        h.store
            .missing_bundles(Vec::new())
            .await
            .unwrap()
            .is_empty()
    );
}

per_backend!(embedded => Harness::embedded();
    a_claim_refuses_a_driver_the_worker_does_not_run,
    schedule_order_and_whole_groups,
    first_scored_wins_under_32_concurrent_completions,
    complete_is_idempotent_and_unknown_tokens_are_rejected,
    stale_token_cannot_renew_release_or_drop_newer_lease,
    renew_fails_past_the_hard_deadline,
    two_reapers_racing_take_an_expired_lease_once,
    reap_waits_two_seconds_past_the_deadline,
    undelivered_assignment_is_cancelled_without_budget,
    lease_past_evaluate_waits_out_publish_grace,
    late_score_after_reap_is_counted,
    late_score_turns_an_excluded_trial_counted,
    late_score_revokes_the_newer_lease,
    late_outcome_after_a_score_is_duplicate_evidence,
    delayed_retries_are_claimable_only_at_their_time,
    exhausted_infra_budget_is_final_and_excluded,
    auth_failure_with_budget_spent_stops_the_campaign,
    stop_drain_lets_in_flight_finish,
    stop_cancel_cancels_in_flight_without_budget,
    budget_gate_stops_at_the_cap,
    quota_gate_pauses_only_its_provider,
    phase1_pending_answers_wait,
    phase2_block_refused_gets_not_started_rows_and_ends_done,
    resume_is_idempotent_refuses_drift_and_records_growth,
    lane_arms_filter_claims,
    a_rate_limit_pauses_its_provider_until_the_reset,
    sixteen_concurrent_claims_against_a_cap_for_five_admit_five,
    a_trial_that_would_end_after_the_cutoff_is_not_started,
    an_infra_retry_prefers_another_host_then_falls_back,
    large_submit_and_amendment_are_whole,
    late_score_after_an_undelivered_reap_counts_once,
    embedded_file_reopened_keeps_everything,
    delete_frees_a_campaign_that_runs_nothing,
    an_operator_retry_pass_requeues_excluded_trials,
    a_login_code_is_good_once_until_it_expires,
    a_task_folder_is_kept_once_by_digest,
);

per_backend!(redis => Harness::redis().await;
    a_claim_refuses_a_driver_the_worker_does_not_run,
    schedule_order_and_whole_groups,
    first_scored_wins_under_32_concurrent_completions,
    complete_is_idempotent_and_unknown_tokens_are_rejected,
    stale_token_cannot_renew_release_or_drop_newer_lease,
    renew_fails_past_the_hard_deadline,
    two_reapers_racing_take_an_expired_lease_once,
    reap_waits_two_seconds_past_the_deadline,
    undelivered_assignment_is_cancelled_without_budget,
    lease_past_evaluate_waits_out_publish_grace,
    late_score_after_reap_is_counted,
    late_score_turns_an_excluded_trial_counted,
    late_score_revokes_the_newer_lease,
    late_outcome_after_a_score_is_duplicate_evidence,
    delayed_retries_are_claimable_only_at_their_time,
    exhausted_infra_budget_is_final_and_excluded,
    auth_failure_with_budget_spent_stops_the_campaign,
    stop_drain_lets_in_flight_finish,
    stop_cancel_cancels_in_flight_without_budget,
    budget_gate_stops_at_the_cap,
    quota_gate_pauses_only_its_provider,
    phase1_pending_answers_wait,
    phase2_block_refused_gets_not_started_rows_and_ends_done,
    resume_is_idempotent_refuses_drift_and_records_growth,
    lane_arms_filter_claims,
    a_rate_limit_pauses_its_provider_until_the_reset,
    sixteen_concurrent_claims_against_a_cap_for_five_admit_five,
    a_trial_that_would_end_after_the_cutoff_is_not_started,
    an_infra_retry_prefers_another_host_then_falls_back,
    large_submit_and_amendment_are_whole,
    late_score_after_an_undelivered_reap_counts_once,
    redis_restart_keeps_every_acknowledged_outcome_score_and_lease,
    redis_kill9_mid_complete_errors_and_the_retry_lands_once,
    redis_without_fsync_always_is_refused_unless_allowed,
    delete_frees_a_campaign_that_runs_nothing,
    an_operator_retry_pass_requeues_excluded_trials,
    a_login_code_is_good_once_until_it_expires,
    a_task_folder_is_kept_once_by_digest,
);

/// Embedded only: the file, reopened, keeps rows, leases, scores and counters.
async fn embedded_file_reopened_keeps_everything(h: &mut Harness) {
    let c = cid("reopen");
    h.submit(campaign(
        "reopen",
        &[("a", "pa")],
        3,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let done = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.store
        .complete(&c, scored(&done, "l", "h", Status::Completed, 1.0), h.now())
        .await
        .unwrap();
    let held = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.renew(&c, &held, Phase::Agent).await;
    let before = h.store.status(&c, h.now()).await.unwrap();
    let rows_before = h.rows(&c).await;
    h.reopen();
    let after = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(before, after);
    assert_eq!(h.rows(&c).await, rows_before);
    assert_eq!(h.renew(&c, &held, Phase::Agent).await, RenewState::Renewed);
    // The scored trial stays scored: a replay of its completion answers the same.
    let ack = h
        .store
        .complete(&c, scored(&done, "l", "h", Status::Completed, 1.0), h.now())
        .await
        .unwrap();
    assert!(ack.counted);
    assert_eq!(h.store.list().await.unwrap(), vec![c]);
}

/// Redis only: SIGTERM and a restart on the same dir keep every acknowledged outcome, every
/// scored key and every lease.
async fn redis_restart_keeps_every_acknowledged_outcome_score_and_lease(h: &mut Harness) {
    let c = cid("restart");
    h.submit(campaign(
        "restart",
        &[("a", "pa")],
        4,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let mut acks = Vec::new();
    for _ in 0..2 {
        let t = h.claim_tokens(&c, "l", "h").await.remove(0);
        acks.push(
            h.store
                .complete(&c, scored(&t, "l", "h", Status::Completed, 1.0), h.now())
                .await
                .unwrap(),
        );
    }
    let held = h.claim_tokens(&c, "l", "h").await.remove(0);
    h.renew(&c, &held, Phase::Agent).await;
    let before = h.store.status(&c, h.now()).await.unwrap();
    let rows_before = h.rows(&c).await;

    let server = h.redis.as_mut().unwrap();
    server.terminate();
    server.restart();
    h.reconnect().await;

    assert_eq!(h.store.status(&c, h.now()).await.unwrap(), before);
    let rows = h.rows(&c).await;
    assert_eq!(rows, rows_before);
    for ack in &acks {
        let row = rows
            .iter()
            .find(|r| r.seq == ack.seq)
            .expect("acknowledged row kept");
        assert!(row.counted && row.token() == ack.token);
        // The scored key is kept: a replay answers the same, and writes nothing.
        let again = h
            .store
            .complete(
                &c,
                scored(&ack.token, "l", "h", Status::Completed, 0.0),
                h.now(),
            )
            .await
            .unwrap();
        assert_eq!(&again, ack);
    }
    assert_eq!(h.renew(&c, &held, Phase::Agent).await, RenewState::Renewed);
    assert_eq!(h.rows(&c).await.len(), rows_before.len());
}

/// Redis only: the server dies while a completion waits for its answer; the call errors (never
/// a wrong answer), and the retried completion lands exactly once.
async fn redis_kill9_mid_complete_errors_and_the_retry_lands_once(h: &mut Harness) {
    let c = cid("kill");
    h.submit(campaign(
        "kill",
        &[("a", "pa")],
        2,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    let outcome = scored(&t, "l", "h", Status::Completed, 1.0);

    // Freeze the server so the call is certainly in flight, then kill it.
    let pid = h.redis.as_ref().unwrap().pid();
    assert!(
        std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let store = h.store.clone();
    let (c2, o2, now) = (c.clone(), outcome.clone(), h.now());
    let mut call = tokio::spawn(async move { store.complete(&c2, o2, now).await });
    // The call cannot finish while the server is frozen: it is in flight.
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(300), &mut call)
            .await
            .is_err(),
        "complete() answered while redis was stopped"
    );
    h.redis.as_mut().unwrap().kill9();
    let err = call
        .await
        .unwrap()
        .expect_err("no answer from a dead server");
    assert!(err.is_retryable(), "{err}");

    h.redis.as_mut().unwrap().restart();
    // Bounded poll while the connection manager reconnects to the restarted server.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let ack = loop {
        match h.store.complete(&c, outcome.clone(), h.now()).await {
            Ok(a) => break Some(a),
            Err(e) if e.is_retryable() && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("retried complete failed: {e}"),
        }
    };
    let ack = ack.expect("the retried completion lands");
    assert!(ack.counted);
    let again = h.store.complete(&c, outcome, h.now()).await.unwrap();
    assert_eq!(again, ack);
    let rows = h.rows(&c).await;
    assert_eq!(
        rows.iter().filter(|r| r.token() == t).count(),
        1,
        "landed exactly once"
    );
}

/// Redis only: a server without `appendfsync always` is refused unless lossy is allowed.
async fn redis_without_fsync_always_is_refused_unless_allowed(_h: &mut Harness) {
    use lanes_coordinator::store::{RedisOptions, RedisStore};
    let lossy = lanes_tests::redis_server::RedisServer::start_with("everysec");
    let err = RedisStore::connect(&lossy.url(), RedisOptions::default())
        .await
        .expect_err("refused");
    assert!(matches!(err, StoreError::NotDurable(_)), "{err}");
    assert!(err.to_string().contains("appendfsync"), "{err}");
    assert!(err.to_string().contains("--allow-lossy-store"), "{err}");
    let store = RedisStore::connect(
        &lossy.url(),
        RedisOptions {
            allow_lossy: true,
            ..RedisOptions::default()
        },
    )
    .await
    .expect("allowed with the flag");
    use lanes_coordinator::store::Store;
    assert!(store.list().await.unwrap().is_empty());
}
