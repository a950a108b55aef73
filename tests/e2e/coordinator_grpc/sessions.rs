//! Lane sessions: outcomes acknowledged only after the commit and retryable when the store
//! refuses them, heartbeats beside a slow claim, answers in order, and the go-away at
//! shutdown.

use super::*;

/// Kill Redis between an outcome and its ack: the lane gets an error, not an ack, and the
/// replayed outcome lands exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_outcome_is_acknowledged_only_after_commit() {
    let mut e = env("redis").await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&small_campaign(
        "ackd",
        1,
        "pairing = \"none\"",
    )))
    .await
    .unwrap();
    let mut l = lane(&e.coord.url(), "w", "h").await;
    let Msg::Assignment(a) = l.work("w-0").await else {
        panic!("work")
    };
    let t = tokens(&a).remove(0);
    l.heartbeat("ackd", std::slice::from_ref(&t), pb::Phase::Evaluate)
        .await;

    let pid = e.redis.as_ref().unwrap().pid();
    assert!(
        std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    l.send(In::Outcome(scored_outcome("ackd", &t, "w-0", "h", 1.0)))
        .await;
    e.redis.as_mut().unwrap().kill9();
    match l.next().await.unwrap() {
        Msg::OutcomeError(err) => assert!(err.retryable, "{err:?}"),
        other => panic!("expected an error, not {other:?}"),
    }
    e.redis.as_mut().unwrap().restart();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let ack = loop {
        match l.score("ackd", &t, "w-0", 1.0).await {
            Msg::OutcomeAck(ack) => break ack,
            Msg::OutcomeError(err) if err.retryable && std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("replay failed: {other:?}"),
        }
    };
    assert!(ack.counted);
    let id = lanes_common::ids::CampaignId::new("ackd").unwrap();
    let rows = e.store.rows(&id, 0, usize::MAX).await.unwrap();
    assert_eq!(rows.len(), 1, "landed exactly once");
}

/// The store's health never refuses an outcome for good: an out-of-memory Redis answers a
/// retryable error, and the same outcome is acknowledged once memory is back. Before the fix
/// the error was permanent and the lane set the outcome aside, losing the score.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_outcome_refused_by_store_health_is_retryable() {
    let e = env("redis").await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&small_campaign(
        "oom",
        1,
        "pairing = \"none\"",
    )))
    .await
    .unwrap();
    let mut l = lane(&e.coord.url(), "w", "h").await;
    let Msg::Assignment(a) = l.work("w-0").await else {
        panic!("work")
    };
    let t = tokens(&a).remove(0);
    l.heartbeat("oom", std::slice::from_ref(&t), pb::Phase::Evaluate)
        .await;
    let redis = e.redis.as_ref().unwrap();
    assert_eq!(
        redis.command(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]),
        "+OK"
    );
    assert_eq!(redis.command(&["CONFIG", "SET", "maxmemory", "1"]), "+OK");
    match l.score("oom", &t, "w-0", 1.0).await {
        Msg::OutcomeError(err) => {
            assert!(err.retryable, "{err:?}");
            assert!(err.reason.contains("OOM"), "{err:?}");
        }
        other => panic!("expected a retryable error, not {other:?}"),
    }
    assert_eq!(redis.command(&["CONFIG", "SET", "maxmemory", "0"]), "+OK");
    match l.score("oom", &t, "w-0", 1.0).await {
        Msg::OutcomeAck(ack) => assert!(ack.counted),
        other => panic!("expected an ack, not {other:?}"),
    }
    // A malformed outcome is still refused for good.
    let mut bad = scored_outcome("oom", &t, "w-0", "h", 1.0);
    bad.token = None;
    l.send(In::Outcome(bad)).await;
    match l.next().await.unwrap() {
        Msg::OutcomeError(err) => assert!(!err.retryable, "{err:?}"),
        other => panic!("expected a refusal, not {other:?}"),
    }
}

/// A heartbeat is answered while a work request of the same session is still claiming: here
/// the claim waits on a campaign whose lock another replica holds. Before the fix the session
/// handled messages one at a time, so the heartbeat waited behind the claim and, under load,
/// healthy leases expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_heartbeats_are_not_held_back_by_a_slow_claim() {
    let e = env("redis").await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&small_campaign(
        "a-busy",
        1,
        "pairing = \"group\"",
    )))
    .await
    .unwrap();
    c.submit(submit_request(&small_campaign("z-locked", 1, "")))
        .await
        .unwrap();
    let mut l = lane(&e.coord.url(), "w", "h").await;
    // The only unit of the first campaign is leased to this lane.
    let Msg::Assignment(a) = l.work("w-0").await else {
        panic!("work")
    };
    assert_eq!(a.campaign, "a-busy");
    let ts = tokens(&a);
    l.heartbeat("a-busy", &ts, pb::Phase::Agent).await;
    // Another replica holds the second campaign's lock for a few seconds.
    let redis = e.redis.as_ref().unwrap();
    assert_eq!(
        redis.command(&["SET", "lanes:{c:z-locked}:lock", "other", "PX", "3000"]),
        "+OK"
    );
    l.send(In::WorkRequest(pb::WorkRequest {
        lane: "w-1".into(),
        exclude_campaigns: Vec::new(),
    }))
    .await;
    l.send(In::Heartbeat(pb::Heartbeat {
        tokens: ts
            .iter()
            .map(|t| pb::TokenPhase {
                token: Some(t.clone()),
                phase: pb::Phase::Agent as i32,
                campaign: "a-busy".into(),
                traceparent: String::new(),
            })
            .collect(),
    }))
    .await;
    match l.next().await.unwrap() {
        Msg::HeartbeatAck(ack) => assert!(
            ack.tokens
                .iter()
                .all(|t| t.state == pb::RenewState::Renewed as i32),
            "{ack:?}"
        ),
        other => panic!("the heartbeat waited behind the claim: got {other:?} first"),
    }
    // The claim answers once the lock is free.
    match l.next().await.unwrap() {
        Msg::Assignment(a) => assert_eq!(a.campaign, "z-locked"),
        other => panic!("expected the claim's answer, got {other:?}"),
    }
}

/// A session's messages about different leases are in the store at once (so a worker's lanes
/// share the store's commits instead of waiting for each other's), their answers still come
/// back in the order sent, and a message about a lease waits for the earlier one about it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sessions_outcomes_reach_the_store_together_and_are_answered_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Arc::new(CountingStore::new(Arc::new(
        EmbeddedStore::open(dir.path()).unwrap(),
    )));
    let coord = CoordinatorHandle::start(store.clone(), Arc::new(clock.clone())).await;
    let mut c = client(&coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&small_campaign(
        "piped",
        2,
        "pairing = \"none\"",
    )))
    .await
    .unwrap();
    let mut l = lane(&coord.url(), "w", "h").await;
    let mut leases = Vec::new();
    for lane in ["w-0", "w-1"] {
        let Msg::Assignment(a) = l.work(lane).await else {
            panic!("work for {lane}")
        };
        leases.push((lane, tokens(&a).remove(0)));
    }

    store.hold_completes(true);
    for (lane, t) in &leases {
        l.send(In::Outcome(scored_outcome("piped", t, lane, "h", 1.0)))
            .await;
    }
    // Both outcomes reach the store while neither is done.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while store.completes_held() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the second outcome waited for the first: {} in the store",
            store.completes_held()
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A heartbeat about the second lease goes after its outcome, which is still held.
    let (_, second) = &leases[1];
    l.send(In::Heartbeat(pb::Heartbeat {
        tokens: vec![pb::TokenPhase {
            token: Some(second.clone()),
            phase: pb::Phase::Publish as i32,
            campaign: "piped".into(),
            traceparent: String::new(),
        }],
    }))
    .await;
    store.hold_completes(false);

    for (_, t) in &leases {
        match l.next().await.unwrap() {
            Msg::OutcomeAck(a) => {
                assert_eq!(a.token.unwrap().trial_id, t.trial_id, "acks out of order");
                assert!(a.counted);
            }
            other => panic!("expected an outcome ack, got {other:?}"),
        }
    }
    match l.next().await.unwrap() {
        Msg::HeartbeatAck(ack) => {
            assert_eq!(ack.tokens.len(), 1);
            assert_ne!(
                ack.tokens[0].state,
                pb::RenewState::Renewed as i32,
                "the heartbeat overtook the outcome about the same lease: {ack:?}"
            );
        }
        other => panic!("expected the heartbeat ack last, got {other:?}"),
    }
}

/// Graceful shutdown tells every open session to reconnect elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_tells_lanes_to_reconnect() {
    let e = env("embedded").await;
    let mut l = lane(&e.coord.url(), "w", "h").await;
    e.coord.shutdown().await;
    match l.next().await {
        Ok(Msg::GoAway(g)) => assert!(g.reason.contains("shutting down")),
        other => panic!("expected go-away, got {other:?}"),
    }
    drop(e.store);
}
