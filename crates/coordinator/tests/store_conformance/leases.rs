//! Leases: first scored wins, renewals, reaps, and late scores after a lease was lost.

use super::*;

/// Issues `n` tokens of one trial by letting `n - 1` leases expire (after a heartbeat).
pub(super) async fn many_tokens(
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

pub(super) async fn first_scored_wins_under_32_concurrent_completions(h: &mut Harness) {
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

pub(super) async fn complete_is_idempotent_and_unknown_tokens_are_rejected(h: &mut Harness) {
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

pub(super) async fn stale_token_cannot_renew_release_or_drop_newer_lease(h: &mut Harness) {
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
                host: "host-0".parse().unwrap(),
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

pub(super) async fn renew_fails_past_the_hard_deadline(h: &mut Harness) {
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

pub(super) async fn two_reapers_racing_take_an_expired_lease_once(h: &mut Harness) {
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

pub(super) async fn reap_waits_two_seconds_past_the_deadline(h: &mut Harness) {
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

pub(super) async fn undelivered_assignment_is_cancelled_without_budget(h: &mut Harness) {
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

pub(super) async fn lease_past_evaluate_waits_out_publish_grace(h: &mut Harness) {
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

pub(super) async fn late_score_after_reap_is_counted(h: &mut Harness) {
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

pub(super) async fn late_score_turns_an_excluded_trial_counted(h: &mut Harness) {
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

pub(super) async fn late_score_revokes_the_newer_lease(h: &mut Harness) {
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

pub(super) async fn late_outcome_after_a_score_is_duplicate_evidence(h: &mut Harness) {
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

/// An assignment reaped as undelivered whose lane did run it: its late score still counts,
/// and the newer attempt's score is a duplicate (found by the model-based test).
pub(super) async fn late_score_after_an_undelivered_reap_counts_once(h: &mut Harness) {
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
