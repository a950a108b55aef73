//! Regression tests for store defects found in review: each case failed before its fix. Cases
//! that concern both backends run on both; the rest say which backend they need.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use std::collections::BTreeSet;

use lanes_common::ids::{CampaignId, Token};
use lanes_common::policy::NoWorkReason;
use lanes_common::row::{Phase, Status};
use lanes_common::spec_hash::spec_hash;
use lanes_common::state::{CampaignState, StopMode};
use lanes_coordinator::store::{ClaimOutcome, RenewState, StoreError, SubmitKind};
use support::*;

/// An amendment that races heartbeats is recorded as an amendment with the new spec hash. On
/// Redis the race is a version conflict, and the retry must not read the first attempt's
/// staged tasks back as already recorded (it answered `resumed` with the old hash).
async fn amendment_racing_renewals_is_amended_with_the_new_hash(h: &mut Harness) {
    let c = cid("amend-race");
    let make = |n| {
        campaign(
            "amend-race",
            &[("a", "pa")],
            n,
            "pairing = \"none\"\nlease_ttl_s = 600",
            "",
        )
    };
    let first = make(3000);
    let old_hash = spec_hash(&first.spec, &first.tasks);
    h.submit(first).await;
    let tokens: Vec<(Token, Phase)> = h
        .claim_some(&c, "l", "h", 20)
        .await
        .iter()
        .map(|a| (a.trials[0].token.clone(), Phase::Agent))
        .collect();

    let grown = make(3100);
    let new_hash = spec_hash(&grown.spec, &grown.tasks);
    assert_ne!(old_hash, new_hash);
    let stop = Arc::new(AtomicBool::new(false));
    let renewals = Arc::new(AtomicU64::new(0));
    let renewer = {
        let (store, c, stop, renewals, now) = (
            h.store.clone(),
            c.clone(),
            stop.clone(),
            renewals.clone(),
            h.now(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                store.renew(&c, tokens.clone(), now).await.expect("renew");
                renewals.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // Let the heartbeats get going, so that the amendment certainly races them.
    while renewals.load(Ordering::Relaxed) < 3 {
        tokio::task::yield_now().await;
    }
    let sub = h.store.submit(grown, h.now()).await.expect("amend");
    stop.store(true, Ordering::Relaxed);
    renewer.await.unwrap();

    assert_eq!(sub.kind, SubmitKind::Amended);
    assert_eq!(sub.spec_hash, new_hash);
    assert_eq!(sub.trials, 3100);
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.spec_hash, new_hash);
    assert_eq!(st.amendments.len(), 1, "{:?}", st.amendments);
    assert_eq!(st.amendments[0].added_tasks, 100);
    assert_eq!(st.trials_total, 3100);
}

/// Two different campaigns submitted at once under one id: one is created, the other is
/// compared against it and refused, and the stored tasks are exactly the created one's. On
/// Redis the loser's staged tasks must never overwrite the winner's.
async fn concurrent_submits_of_one_id_store_only_the_winner(h: &mut Harness) {
    for round in 0..3 {
        let id = format!("twin-{round}");
        let c = cid(&id);
        let a = campaign(&id, &[("a", "pa")], 3000, "pairing = \"none\"", "");
        let mut b = a.clone();
        for t in &mut b.tasks {
            t.max_turns = Some(7);
        }
        let (ra, rb) = tokio::join!(
            h.store.submit(a.clone(), h.now()),
            h.store.submit(b.clone(), h.now())
        );
        let winner = match (&ra, &rb) {
            (Ok(s), Err(StoreError::Refused(_))) if s.kind == SubmitKind::Created => &a,
            (Err(StoreError::Refused(_)), Ok(s)) if s.kind == SubmitKind::Created => &b,
            other => panic!("one created and one refused, got {other:?}"),
        };
        let stored = h.store.campaign(&c).await.unwrap();
        assert_eq!(stored.tasks, winner.tasks, "round {round}");
        let st = h.store.status(&c, h.now()).await.unwrap();
        assert_eq!(st.spec_hash, spec_hash(&winner.spec, &winner.tasks));
    }
}

/// Redis only: when the campaign index cannot be written, the submit fails and nothing is
/// committed. Before the fix the campaign committed, then the index write failed: the client
/// was told the submit failed, and no claim or reap ever saw the campaign.
async fn redis_submit_that_cannot_list_commits_nothing(h: &mut Harness) {
    use lanes_coordinator::store::{RedisOptions, RedisStore, Store};
    let server = h.redis.as_ref().unwrap();
    // A user that may touch every campaign key but only read the index of campaigns (and
    // the layout record, which connect checks).
    admin(
        h,
        &[
            "ACL",
            "SETUSER",
            "nolist",
            "on",
            ">pw",
            "~lanes:{c:*",
            "%R~lanes:campaigns",
            "%R~lanes:layout",
            "+@all",
        ],
    );
    let url = format!("redis://nolist:pw@127.0.0.1:{}/", server.port);
    let store = RedisStore::connect(&url, RedisOptions::default())
        .await
        .expect("connect as the restricted user");
    let c = cid("unlisted");
    let err = store
        .submit(
            campaign("unlisted", &[("a", "pa")], 3, "pairing = \"none\"", ""),
            h.now(),
        )
        .await
        .expect_err("the index write is refused");
    assert!(matches!(err, StoreError::Backend(_)), "{err}");
    assert!(err.to_string().contains("NoPerm"), "{err}");
    // Nothing committed: the campaign does not exist for anyone.
    let missing = h
        .store
        .status(&c, h.now())
        .await
        .expect_err("not committed");
    assert!(
        matches!(missing, StoreError::UnknownCampaign(_)),
        "{missing}"
    );
    assert!(h.store.list().await.unwrap().is_empty());

    // With the index writable, the same submit commits and is listed.
    h.submit(campaign(
        "unlisted",
        &[("a", "pa")],
        3,
        "pairing = \"none\"",
        "",
    ))
    .await;
    assert_eq!(h.store.list().await.unwrap(), vec![c]);
}

/// An amendment that adds runs to a phase-2 block the phase-2 rule already refused: the next
/// claim gives the new trials their `not_started` rows, once, and returns. Before the fix the
/// claim met their queue entries again and again and never returned (on the embedded store it
/// held the only writer, so every campaign hung).
async fn amendment_after_a_phase2_refusal_refuses_the_new_runs_once(h: &mut Harness) {
    let c = cid("refuse-amend");
    let cutoff = lanes_common::utc::format_rfc3339(T0 + 3 * 3_600_000);
    let make = |p2: u32| {
        campaign(
            "refuse-amend",
            &[("a", "pa")],
            2,
            &format!(
                "pairing = \"none\"\nphase1_runs = 1\nphase2_runs = {p2}\ncutoff_utc = \"{cutoff}\""
            ),
            "",
        )
    };
    h.submit(make(1)).await;
    for _ in 0..2 {
        let t = h.claim_tokens(&c, "l", "h").await.remove(0);
        let mut o = scored(&t, "l", "h", Status::Completed, 1.0);
        o.result.walls.agent_s = 9000.0;
        h.store.complete(&c, o, h.now()).await.unwrap();
    }
    h.advance_s(3600);
    assert_eq!(claim_within(h, &c).await, NoWorkReason::Done);
    assert_eq!(not_started(h, &c).await.len(), 2);

    let amended = h.submit(make(3)).await;
    assert_eq!(amended.kind, SubmitKind::Amended);
    assert_eq!(claim_within(h, &c).await, NoWorkReason::Done);
    let refused = not_started(h, &c).await;
    let ids: BTreeSet<String> = refused.iter().map(|r| r.trial_id.to_string()).collect();
    assert_eq!(
        (refused.len(), ids.len()),
        (6, 6),
        "one row per phase-2 trial"
    );
    assert!(
        refused[2..]
            .iter()
            .all(|r| r.spec_hash == amended.spec_hash && r.run_index >= 2)
    );
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.state, CampaignState::Done);
    assert_eq!(
        (st.trials_not_started, st.trials_final, st.trials_total),
        (6, 8, 8)
    );
    // A further claim writes nothing more.
    assert_eq!(claim_within(h, &c).await, NoWorkReason::Done);
    assert_eq!(not_started(h, &c).await.len(), 6);
}

/// A claim that must return within a few seconds: a hang is a failure, not a stuck suite.
async fn claim_within(h: &Harness, c: &CampaignId) -> NoWorkReason {
    // On a thread of its own with its own runtime: a claim that spins forever would
    // otherwise also block the test runtime's shutdown after the timeout fails the test.
    let (store, c, now) = (h.store.clone(), c.clone(), h.now());
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = tx.send(rt.block_on(store.claim(&c, request("l", "h", 1), now)));
    });
    no_work(
        tokio::time::timeout(std::time::Duration::from_secs(10), rx)
            .await
            .expect("the claim returns within 10 s")
            .unwrap()
            .expect("claim"),
    )
}

async fn not_started(h: &Harness, c: &CampaignId) -> Vec<lanes_common::row::Row> {
    h.rows(c)
        .await
        .into_iter()
        .filter(|r| r.status == Status::NotStarted)
        .collect()
}

/// A resume after a cancel stop takes the cancel back: the leases the stop flagged renew as
/// usual instead of answering cancel.
async fn resume_after_a_cancel_stop_clears_the_cancel(h: &mut Harness) {
    let c = cid("cancel-resume");
    let make = || campaign("cancel-resume", &[("a", "pa")], 3, "pairing = \"none\"", "");
    h.submit(make()).await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    assert_eq!(h.renew(&c, &t, Phase::Agent).await, RenewState::Renewed);
    h.store.stop(&c, StopMode::Cancel, h.now()).await.unwrap();
    assert_eq!(h.renew(&c, &t, Phase::Agent).await, RenewState::Cancel);
    assert_eq!(h.submit(make()).await.kind, SubmitKind::Resumed);
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!((st.state, st.stop_mode), (CampaignState::Running, None));
    assert_eq!(h.renew(&c, &t, Phase::Agent).await, RenewState::Renewed);
    // The attempt runs on and is counted.
    let ack = h
        .store
        .complete(&c, scored(&t, "l", "h", Status::Completed, 1.0), h.now())
        .await
        .unwrap();
    assert!(ack.counted);
}

/// Leases past evaluate that wait out `publish_grace_s` never hold back due leases behind
/// them. Before the fix a pass read the first 1024 due entries, found them all deferred, and
/// the expired leases behind them waited out the whole grace.
async fn deferred_leases_do_not_hold_back_due_ones(h: &mut Harness) {
    let c = cid("deferred");
    h.submit(campaign(
        "deferred",
        &[("a", "pa")],
        1100,
        "pairing = \"none\"\nlease_ttl_s = 10\npublish_grace_s = 60",
        "",
    ))
    .await;
    let publishing: Vec<(Token, Phase)> = h
        .claim_some(&c, "l", "h", 1030)
        .await
        .iter()
        .map(|a| (a.trials[0].token.clone(), Phase::Publish))
        .collect();
    h.store
        .renew(&c, publishing.clone(), h.now())
        .await
        .unwrap();
    h.advance_s(1);
    let running: Vec<(Token, Phase)> = h
        .claim_some(&c, "l2", "h2", 5)
        .await
        .iter()
        .map(|a| (a.trials[0].token.clone(), Phase::Agent))
        .collect();
    h.store.renew(&c, running, h.now()).await.unwrap();

    // Every lease is past its deadline; the five running ones are due, the rest deferred.
    h.advance_s(15);
    let (expired, deferred) = reap_all(h, &c).await;
    assert_eq!((expired, deferred), (5, 1030));
    // Deferred once: the next pass finds nothing due.
    let r = h.store.reap(&c, h.now()).await.unwrap();
    assert_eq!((r.expired, r.deferred, r.cancelled), (0, 0, 0));
    // A deferred lease whose lane speaks again is renewed as usual.
    h.store
        .renew(&c, publishing[..1].to_vec(), h.now())
        .await
        .unwrap();
    // After the grace, the silent ones expire; batches of 1024 take them all.
    h.advance_s(60);
    // The renewed one is past its new deadline too, and gets a grace of its own.
    assert_eq!(reap_all(h, &c).await, (1029, 1));
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.in_flight.len(), 1);
}

/// With a `max_cost_usd` guard on every trial, claims reserve the guard, so spend never passes
/// the cap while drivers honour their guard. Before the fix a claim reserved the arm's estimate
/// and four attempts of $0.10 started under a $0.30 cap.
async fn guarded_trials_never_spend_past_the_cap(h: &mut Harness) {
    let c = cid("guarded");
    h.submit(campaign(
        "guarded",
        &[("a", "pa")],
        10,
        "pairing = \"none\"\nbudget_cap_usd = 0.3",
        "[defaults]\nmax_cost_usd = 0.1\n",
    ))
    .await;
    let mut started = Vec::new();
    for lane in ["l1", "l2", "l3", "l4"] {
        match h.claim(&c, lane, "h", 1).await {
            ClaimOutcome::Assigned(a) => started.push((lane, a[0].trials[0].token.clone())),
            ClaimOutcome::NoWork { reason, .. } => {
                assert_eq!(reason, NoWorkReason::BudgetReserved, "{lane}")
            }
        }
    }
    assert_eq!(started.len(), 3, "three guards of $0.10 fill a $0.30 cap");
    for (lane, t) in &started {
        let mut o = scored(t, lane, "h", Status::Completed, 1.0);
        o.result.cost_usd = Some(0.1);
        h.store.complete(&c, o, h.now()).await.unwrap();
    }
    assert!(matches!(
        claim_within(h, &c).await,
        NoWorkReason::Stopped { .. }
    ));
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert!(st.spend_usd <= 0.3 + 1e-9, "spent {}", st.spend_usd);
    assert_eq!(
        st.stop_reason,
        Some(lanes_common::state::StopReason::Budget)
    );
}

/// When what is left of the cap is below the next trial's guard and nothing is reserved, no
/// trial can ever start: the campaign stops on its budget instead of waiting forever.
async fn a_guard_above_what_is_left_stops_the_campaign(h: &mut Harness) {
    let c = cid("left");
    h.submit(campaign(
        "left",
        &[("a", "pa")],
        10,
        "pairing = \"none\"\nbudget_cap_usd = 0.25",
        "[defaults]\nmax_cost_usd = 0.1\n",
    ))
    .await;
    let first = h.claim_tokens(&c, "l1", "h").await.remove(0);
    let second = h.claim_tokens(&c, "l2", "h").await.remove(0);
    assert_eq!(
        no_work(h.claim(&c, "l3", "h", 1).await),
        NoWorkReason::BudgetReserved
    );
    for (lane, t) in [("l1", &first), ("l2", &second)] {
        let mut o = scored(t, lane, "h", Status::Completed, 1.0);
        o.result.cost_usd = Some(0.1);
        h.store.complete(&c, o, h.now()).await.unwrap();
    }
    assert_eq!(
        claim_within(h, &c).await,
        NoWorkReason::Stopped {
            stop_reason: Some(lanes_common::state::StopReason::Budget)
        }
    );
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert!(matches!(st.state, CampaignState::Stopped));
    assert!((st.spend_usd - 0.2).abs() < 1e-9);
}

/// The later trials of a run group are renewed in phase `assigned` while the first runs. When
/// the worker dies, they are reaped as `cancelled`, using no budget, because they never
/// started; only the running trial is charged `lease_expired`.
async fn a_dead_workers_unstarted_group_trials_are_cancelled(h: &mut Harness) {
    let c = cid("group-death");
    h.submit(campaign(
        "group-death",
        &[("a", "pa"), ("b", "pb")],
        2,
        "pairing = \"group\"\nlease_ttl_s = 10",
        "",
    ))
    .await;
    let tokens = h.claim_tokens(&c, "l", "h").await;
    assert_eq!(tokens.len(), 2);
    h.store
        .renew(
            &c,
            vec![
                (tokens[0].clone(), Phase::Agent),
                (tokens[1].clone(), Phase::Assigned),
            ],
            h.now(),
        )
        .await
        .unwrap();
    h.advance_s(13);
    let r = h.store.reap(&c, h.now()).await.unwrap();
    assert_eq!((r.expired, r.cancelled), (1, 1));
    let rows = h.rows(&c).await;
    let of = |t: &Token| rows.iter().find(|r| r.token() == *t).unwrap();
    assert_eq!(of(&tokens[0]).status, Status::InfraError);
    assert_eq!(of(&tokens[1]).status, Status::Cancelled);
}

/// Redis only: a claim that answers wait or done, and a reap that takes nothing, commit no
/// write. Before the fix each rewrote the campaign's meta (a lane's last-seen time), bumping
/// its version, so idle lanes made every heartbeat and outcome of busy lanes conflict.
async fn redis_idle_claims_and_empty_reaps_write_nothing(h: &mut Harness) {
    let c = cid("idle");
    h.submit(campaign(
        "idle",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nphase1_runs = 1",
        "",
    ))
    .await;
    let t = h.claim_tokens(&c, "busy", "h").await.remove(0);
    let version = |h: &Harness| {
        h.redis
            .as_ref()
            .unwrap()
            .command(&["GET", "lanes:{c:idle}:ver"])
    };
    // The first idle claim of a lane records that the lane was seen; later ones write nothing.
    assert!(matches!(
        no_work(h.claim(&c, "idle-lane", "h", 1).await),
        NoWorkReason::NothingReady { .. }
    ));
    let v0 = version(h);
    for _ in 0..5 {
        assert!(matches!(
            no_work(h.claim(&c, "idle-lane", "h", 1).await),
            NoWorkReason::NothingReady { .. }
        ));
        let r = h.store.reap(&c, h.now()).await.unwrap();
        assert_eq!((r.expired, r.cancelled, r.deferred), (0, 0, 0));
    }
    assert_eq!(version(h), v0, "idle claims and empty reaps wrote");
    // Real work still writes.
    h.store
        .complete(&c, scored(&t, "busy", "h", Status::Completed, 1.0), h.now())
        .await
        .unwrap();
    assert_ne!(version(h), v0);
    assert_eq!(
        no_work(h.claim(&c, "idle-lane", "h", 1).await),
        NoWorkReason::Done
    );
}

/// Reaps as the reaper does, pass after pass while a pass was full (a few passes at most
/// here); returns (expired, deferred).
/// A restarted worker forfeits the leases its outbox cannot publish: they are taken back at
/// once instead of after `publish_grace_s` (a 10k-trial run waited 10 minutes for them).
/// Another worker's lease, a stale attempt and a repeated forfeit are left alone.
async fn forfeited_leases_are_taken_back_without_the_publish_grace(h: &mut Harness) {
    let c = cid("forfeit");
    h.submit(campaign(
        "forfeit",
        &[("a", "pa")],
        4,
        "pairing = \"none\"\nlease_ttl_s = 10\npublish_grace_s = 900",
        "",
    ))
    .await;
    let publishing = |a: &[lanes_coordinator::store::Assignment]| -> Vec<(Token, Phase)> {
        a.iter()
            .map(|a| (a.trials[0].token.clone(), Phase::Publish))
            .collect()
    };
    let mine = publishing(&h.claim_some(&c, "l", "h", 2).await);
    let theirs = publishing(&h.claim_some(&c, "l2", "h2", 1).await);
    let unstarted = h.claim_some(&c, "l3", "h", 1).await[0].trials[0]
        .token
        .clone();
    h.store.renew(&c, mine.clone(), h.now()).await.unwrap();
    h.store.renew(&c, theirs.clone(), h.now()).await.unwrap();
    // Past the deadline, the reaper would defer these for the 900 s grace.
    h.advance_s(15);
    let mut stale = mine[0].0.clone();
    stale.attempt += 1;
    let asked = vec![
        mine[0].0.clone(),
        mine[1].0.clone(),
        theirs[0].0.clone(),
        stale,
        unstarted.clone(),
    ];
    let taken = h
        .store
        .forfeit(&c, "worker-h", asked.clone(), h.now())
        .await
        .unwrap();
    assert_eq!(taken, vec![mine[0].0.clone(), mine[1].0.clone(), unstarted]);
    assert!(
        h.store
            .forfeit(&c, "worker-h", asked, h.now())
            .await
            .unwrap()
            .is_empty(),
        "a second forfeit takes nothing"
    );
    let rows = h.rows(&c).await;
    assert_eq!(rows.len(), 3, "{rows:#?}");
    for r in &rows[..2] {
        assert_eq!(
            r.failure_kind,
            Some(lanes_common::row::FailureKind::LeaseExpired)
        );
        assert!(
            r.record.error.as_deref().unwrap().contains("restarted"),
            "{r:?}"
        );
    }
    // The lease that never reached a lane costs nothing.
    assert_eq!(rows[2].status, Status::Cancelled);
    // The forfeited trials are retried; the other worker's lease is still deferred as usual.
    let r = h.store.reap(&c, h.now()).await.unwrap();
    assert_eq!((r.expired, r.deferred), (0, 1));
    let st = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(st.in_flight.len(), 1);
    let again = h.store.renew(&c, mine.clone(), h.now()).await.unwrap();
    assert!(again.iter().all(|(_, s)| *s == RenewState::Lost));
}

async fn reap_all(h: &Harness, c: &CampaignId) -> (u32, u32) {
    let (mut expired, mut deferred) = (0, 0);
    for _ in 0..5 {
        let r = h.store.reap(c, h.now()).await.unwrap();
        expired += r.expired;
        deferred += r.deferred;
        if !r.more {
            return (expired, deferred);
        }
    }
    panic!("still more to reap after 5 passes ({expired} expired, {deferred} deferred)");
}

/// Sends one admin command to the harness's Redis and expects it to succeed.
fn admin(h: &Harness, args: &[&str]) {
    let reply = h.redis.as_ref().unwrap().command(args);
    assert!(!reply.starts_with('-'), "{args:?}: {reply}");
}

/// Redis only: transient server states (out of memory, read-only after a failover, a busy
/// script) fail an operation as retryable, and the same completion lands once the state has
/// passed. Before the fix they were permanent backend errors, so the lane set the outcome
/// aside for good and the score was lost.
async fn redis_transient_server_states_are_retryable(h: &mut Harness) {
    let c = cid("transient");
    h.submit(campaign(
        "transient",
        &[("a", "pa")],
        3,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let tokens: Vec<Token> = h
        .claim_some(&c, "l", "h", 3)
        .await
        .iter()
        .map(|a| a.trials[0].token.clone())
        .collect();
    let outcome = |t: &Token| scored(t, "l", "h", Status::Completed, 1.0);

    // OOM: memory above maxmemory with noeviction refuses writes.
    admin(h, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    admin(h, &["CONFIG", "SET", "maxmemory", "1"]);
    let err = h
        .store
        .complete(&c, outcome(&tokens[0]), h.now())
        .await
        .expect_err("out of memory");
    assert!(err.is_retryable(), "OOM must be retryable: {err}");
    assert!(!err.rejects_request(), "{err}");
    admin(h, &["CONFIG", "SET", "maxmemory", "0"]);
    assert!(
        h.store
            .complete(&c, outcome(&tokens[0]), h.now())
            .await
            .unwrap()
            .counted
    );

    // READONLY: the server was made a replica (of nobody reachable), as in a failover.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port().to_string();
    drop(dead);
    admin(h, &["CONFIG", "SET", "replica-serve-stale-data", "yes"]);
    admin(h, &["REPLICAOF", "127.0.0.1", &dead_port]);
    let err = h
        .store
        .complete(&c, outcome(&tokens[1]), h.now())
        .await
        .expect_err("read-only replica");
    assert!(err.is_retryable(), "READONLY must be retryable: {err}");
    admin(h, &["REPLICAOF", "NO", "ONE"]);
    assert!(
        h.store
            .complete(&c, outcome(&tokens[1]), h.now())
            .await
            .unwrap()
            .counted
    );

    // BUSY: another client's script runs past the busy threshold.
    admin(h, &["CONFIG", "SET", "busy-reply-threshold", "50"]);
    let url = h.redis.as_ref().unwrap().url();
    let looping = tokio::spawn(async move {
        let client = ::redis::Client::open(url).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        // Ends only when killed.
        let _ = ::redis::cmd("EVAL")
            .arg("while true do end")
            .arg(0)
            .query_async::<::redis::Value>(&mut conn)
            .await;
    });
    // Wait until the script is running: PING answers BUSY once it passed the threshold.
    let probe = ::redis::Client::open(h.redis.as_ref().unwrap().url()).unwrap();
    let mut probe = probe.get_multiplexed_async_connection().await.unwrap();
    loop {
        match ::redis::cmd("PING").query_async::<String>(&mut probe).await {
            Err(e) if e.code() == Some("BUSY") => break,
            _ => tokio::task::yield_now().await,
        }
    }
    let err = h
        .store
        .complete(&c, outcome(&tokens[2]), h.now())
        .await
        .expect_err("busy script");
    assert!(err.is_retryable(), "BUSY must be retryable: {err}");
    ::redis::cmd("SCRIPT")
        .arg("KILL")
        .query_async::<()>(&mut probe)
        .await
        .unwrap();
    looping.await.unwrap();
    assert!(
        h.store
            .complete(&c, outcome(&tokens[2]), h.now())
            .await
            .unwrap()
            .counted
    );
    assert_eq!(h.rows(&c).await.len(), 3, "each outcome landed once");
}

/// A deadline entry that disagrees with its lease (a stale index) is moved to where the lease
/// is due, not dropped: since layout 6 the Redis store lists leases from that index (one entry
/// per trial), so a dropped entry hid the lease from status, and from the reaper, for good.
async fn redis_a_stale_deadline_entry_is_moved_not_dropped(h: &mut Harness) {
    let c = cid("stale-deadline");
    h.submit(campaign(
        "stale-deadline",
        &[("a", "pa")],
        1,
        "pairing = \"none\"\nlease_ttl_s = 60",
        "",
    ))
    .await;
    let t = h.claim_tokens(&c, "lane-1", "host-1").await.remove(0);
    let server = h.redis.as_ref().unwrap();
    // The index says the lease was due two minutes ago; a new version makes the store read
    // the index again instead of trusting its cache.
    let stale = (h.now() - 120_000).to_string();
    server.command(&[
        "ZADD",
        "lanes:{c:stale-deadline}:deadlines",
        &stale,
        t.trial_id.as_str(),
    ]);
    server.command(&["SET", "lanes:{c:stale-deadline}:ver", "99:stale"]);
    let r = h.store.reap(&c, h.now()).await.unwrap();
    assert_eq!((r.expired, r.cancelled), (0, 0), "the lease is not due");
    let status = h.store.status(&c, h.now()).await.unwrap();
    assert_eq!(status.in_flight.len(), 1, "the lease is still listed");
    h.advance_s(120);
    let r = h.store.reap(&c, h.now()).await.unwrap();
    // Never renewed, so taken back as unstarted.
    assert_eq!(r.expired + r.cancelled, 1, "and taken back when it is due");
    let status = h.store.status(&c, h.now()).await.unwrap();
    assert!(status.in_flight.is_empty(), "{:?}", status.in_flight);
}

per_backend!(embedded => Harness::embedded();
    forfeited_leases_are_taken_back_without_the_publish_grace,
    amendment_racing_renewals_is_amended_with_the_new_hash,
    concurrent_submits_of_one_id_store_only_the_winner,
    amendment_after_a_phase2_refusal_refuses_the_new_runs_once,
    resume_after_a_cancel_stop_clears_the_cancel,
    deferred_leases_do_not_hold_back_due_ones,
    guarded_trials_never_spend_past_the_cap,
    a_guard_above_what_is_left_stops_the_campaign,
    a_dead_workers_unstarted_group_trials_are_cancelled,
);

per_backend!(redis => Harness::redis().await;
    forfeited_leases_are_taken_back_without_the_publish_grace,
    amendment_racing_renewals_is_amended_with_the_new_hash,
    concurrent_submits_of_one_id_store_only_the_winner,
    amendment_after_a_phase2_refusal_refuses_the_new_runs_once,
    resume_after_a_cancel_stop_clears_the_cancel,
    deferred_leases_do_not_hold_back_due_ones,
    guarded_trials_never_spend_past_the_cap,
    a_guard_above_what_is_left_stops_the_campaign,
    a_dead_workers_unstarted_group_trials_are_cancelled,
    redis_submit_that_cannot_list_commits_nothing,
    redis_transient_server_states_are_retryable,
    redis_idle_claims_and_empty_reaps_write_nothing,
    redis_a_stale_deadline_entry_is_moved_not_dropped,
);
