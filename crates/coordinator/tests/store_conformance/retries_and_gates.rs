//! Retries and gates: delays, budgets, quota and rate-limit pauses, stops, the cutoff.

use super::*;

pub(super) async fn delayed_retries_are_claimable_only_at_their_time(h: &mut Harness) {
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

/// A claim reads a few entries of a queue first and more only when placement filters refuse
/// them all: a lane must still find the one trial it may run behind many it may not.
pub(super) async fn a_claim_finds_work_behind_many_trials_blocked_on_its_lane(h: &mut Harness) {
    let c = cid("behind-blocked");
    h.submit(campaign(
        "behind-blocked",
        &[("a", "pa")],
        12,
        "pairing = \"none\"",
        "",
    ))
    .await;
    // Lane l takes the first 10 trials and is refused by each one's preflight: each goes back
    // to the queue, ahead of the 2 fresh trials, and not for lane l.
    let mut blocked = Vec::new();
    for _ in 0..10 {
        let t = h.claim_tokens(&c, "l", "h").await.remove(0);
        h.store
            .release(
                &c,
                Release {
                    token: t.clone(),
                    reason: ReleaseReason::Blocked(FailureKind::Preflight),
                    lane: "l".parse().unwrap(),
                    host: "h".parse().unwrap(),
                    detail: None,
                },
                h.now(),
            )
            .await
            .expect("release");
        blocked.push(t.trial_id);
    }
    let fresh: Vec<_> = h.claim_tokens(&c, "l", "h").await;
    assert_eq!(fresh.len(), 1);
    assert!(!blocked.contains(&fresh[0].trial_id), "{fresh:?}");
    assert_eq!(fresh[0].attempt, 1);
    // Another lane takes the blocked trials first, in schedule order.
    let other = h.claim_tokens(&c, "m", "h").await.remove(0);
    assert_eq!((&other.trial_id, other.attempt), (&blocked[0], 2));
}

pub(super) async fn exhausted_infra_budget_is_final_and_excluded(h: &mut Harness) {
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

pub(super) async fn auth_failure_with_budget_spent_stops_the_campaign(h: &mut Harness) {
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

pub(super) async fn stop_drain_lets_in_flight_finish(h: &mut Harness) {
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

pub(super) async fn stop_cancel_cancels_in_flight_without_budget(h: &mut Harness) {
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
        host: "h".parse().unwrap(),
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

pub(super) async fn budget_gate_stops_at_the_cap(h: &mut Harness) {
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
    o.result.cost_usd = Some(0.6);
    h.store.complete(&c, o, h.now()).await.unwrap();
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    let mut o = scored(&t, "l", "h", Status::Completed, 1.0);
    o.result.cost_usd = Some(0.5);
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

pub(super) async fn quota_gate_pauses_only_its_provider(h: &mut Harness) {
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
    o.result.quota = Some(QuotaReading {
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
    o.result.quota = Some(QuotaReading {
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

pub(super) async fn a_rate_limit_pauses_its_provider_until_the_reset(h: &mut Harness) {
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

pub(super) async fn sixteen_concurrent_claims_against_a_cap_for_five_admit_five(h: &mut Harness) {
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
        o.result.cost_usd = Some(1.1);
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

pub(super) async fn a_trial_that_would_end_after_the_cutoff_is_not_started(h: &mut Harness) {
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
        o.result.walls.agent_s = 1200.0;
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

pub(super) async fn an_infra_retry_prefers_another_host_then_falls_back(h: &mut Harness) {
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
            .map(|r| r.host.as_ref().map(|h| h.to_string()).unwrap_or_default())
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
