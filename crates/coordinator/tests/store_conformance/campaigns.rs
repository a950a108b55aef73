//! Campaigns as wholes: resume, large submits, delete, retry passes, login codes, task folders.

use super::*;

pub(super) async fn resume_is_idempotent_refuses_drift_and_records_growth(h: &mut Harness) {
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

/// A campaign large enough that the Redis backend writes it in chunks and stages its ready
/// queue, then an amendment that appends as many again: every trial is claimable exactly
/// once, in schedule order.
pub(super) async fn large_submit_and_amendment_are_whole(h: &mut Harness) {
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

/// A campaign is deleted only once it runs nothing; then every key of it is gone (Redis: no
/// key under its hash tag, and not in the set of campaigns), another campaign is untouched,
/// and its id is free for a new campaign.
pub(super) async fn delete_frees_a_campaign_that_runs_nothing(h: &mut Harness) {
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
pub(super) async fn an_operator_retry_pass_requeues_excluded_trials(h: &mut Harness) {
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
    let report = lanes_report::build(&recorded, &rows);
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
pub(super) async fn a_login_code_is_good_once_until_it_expires(h: &mut Harness) {
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
pub(super) async fn a_task_folder_is_kept_once_by_digest(h: &mut Harness) {
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
