//! The coordinator over real gRPC (tonic on 127.0.0.1:0), on the embedded store and on a real
//! redis-server, driven by scripted lanes.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use lanes_common::proto as pb;
use lanes_common::proto::coordinator_message::Msg;
use lanes_common::proto::worker_message::Msg as In;
use lanes_coordinator::store::{
    Clock, EmbeddedStore, ManualClock, RedisOptions, RedisStore, Store,
};
use lanes_tests::campaign_watch::{cursor, status};
use lanes_tests::coordinator::{CLIENT_TOKEN, CoordinatorHandle, LANE_TOKEN};
use lanes_tests::counting_store::CountingStore;
use lanes_tests::lane_client::{
    ScriptedLane, client, scored_outcome, small_campaign, submit_request, with_spec_json,
};
use lanes_tests::redis_server::RedisServer;
use tokio_stream::StreamExt;
use tonic::Code;

const T0: i64 = 1_796_083_200_000;

/// A store, its clock and one coordinator over it.
struct Env {
    store: Arc<dyn Store>,
    clock: ManualClock,
    coord: CoordinatorHandle,
    redis: Option<RedisServer>,
    _dir: tempfile::TempDir,
}

async fn env(backend: &str) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let (store, redis): (Arc<dyn Store>, _) = match backend {
        "embedded" => (Arc::new(EmbeddedStore::open(dir.path()).unwrap()), None),
        "redis" => {
            let server = RedisServer::start();
            let store = RedisStore::connect(&server.url(), RedisOptions::default())
                .await
                .unwrap();
            (Arc::new(store), Some(server))
        }
        other => panic!("unknown backend {other}"),
    };
    let coord = CoordinatorHandle::start(store.clone(), Arc::new(clock.clone())).await;
    Env {
        store,
        clock,
        coord,
        redis,
        _dir: dir,
    }
}

async fn lane(url: &str, worker: &str, host: &str) -> ScriptedLane {
    ScriptedLane::connect(url, Some(LANE_TOKEN), worker, host)
        .await
        .expect("lane session")
}

fn tokens(a: &pb::Assignment) -> Vec<pb::Token> {
    a.trials.iter().map(|t| t.token.clone().unwrap()).collect()
}

/// Drives every unit to a score through `lane`; returns how many trials it scored.
async fn drive(l: &mut ScriptedLane, name: &str) -> usize {
    let mut n = 0;
    loop {
        match l.work(name).await {
            Msg::Assignment(a) => {
                let ts = tokens(&a);
                l.heartbeat(&a.campaign, &ts, pb::Phase::Agent).await;
                for t in &ts {
                    match l.score(&a.campaign, t, name, 1.0).await {
                        Msg::OutcomeAck(ack) => assert!(ack.counted),
                        other => panic!("expected an ack, got {other:?}"),
                    }
                    n += 1;
                }
            }
            Msg::NoWork(w) => {
                assert_eq!(
                    w.reason(),
                    pb::NoWorkReason::Done,
                    "ended with {}",
                    w.detail
                );
                return n;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

async fn full_campaign_to_done(backend: &str) {
    let e = env(backend).await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    let r = c
        .submit(submit_request(&small_campaign("full", 4, "")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.id.as_str(), r.trials, r.resumed), ("full", 8, false));
    let mut a = lane(&e.coord.url(), "w1", "h1").await;
    assert_eq!(drive(&mut a, "w1-0").await, 8);
    let st = c
        .get(pb::GetRequest { id: "full".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    assert_eq!((st.trials_final, st.trials_counted), (8, 8));
    let mut rows = c
        .rows(pb::RowsRequest {
            id: "full".into(),
            from_seq: 0,
            follow: false,
        })
        .await
        .unwrap()
        .into_inner();
    let mut n = 0;
    while let Some(r) = rows.next().await {
        let row: lanes_common::row::Row = r.unwrap().try_into().unwrap();
        assert!(row.counted && row.paired);
        n += 1;
    }
    assert_eq!(n, 8);
    let report = c
        .report(pb::ReportRequest { id: "full".into() })
        .await
        .unwrap()
        .into_inner();
    let v: serde_json::Value = serde_json::from_str(&report.json).unwrap();
    assert!(v.is_object());
    drop(e.store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_full_campaign_to_done() {
    full_campaign_to_done("embedded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_full_campaign_to_done() {
    full_campaign_to_done("redis").await;
}

/// Two replicas on one Redis, 16 lanes: no trial ever has two live leases, every trial ends
/// final, and exactly one row per trial counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_two_replicas_sixteen_lanes() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let replicas =
        CoordinatorHandle::redis_replicas(&server.url(), Arc::new(clock.clone()), 2).await;
    let mut c = client(&replicas[0].url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&small_campaign(
        "fleet",
        24,
        "pairing = \"none\"\n[retry]\ninfra_backoff_s = 0",
    )))
    .await
    .unwrap();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let url = replicas[i % 2].url();
        tasks.push(tokio::spawn(async move {
            let name = format!("lane-{i}");
            let mut l = lane(&url, &format!("w{i}"), &format!("host-{}", i % 4)).await;
            loop {
                match l.work(&name).await {
                    Msg::Assignment(a) => {
                        let t = tokens(&a).remove(0);
                        l.heartbeat(&a.campaign, std::slice::from_ref(&t), pb::Phase::Agent)
                            .await;
                        // Every trial's first attempt fails once on infra, so retries run too.
                        let reply = if t.attempt == 1 && a.trials[0].order_index % 3 == 0 {
                            let mut o = scored_outcome(&a.campaign, &t, &name, &l.host, 0.0);
                            o.status = pb::Status::InfraError as i32;
                            o.failure_kind = pb::FailureKind::BootFailed as i32;
                            o.score = None;
                            o.passed = None;
                            l.send(In::Outcome(o)).await;
                            l.next().await.unwrap()
                        } else {
                            l.score(&a.campaign, &t, &name, (t.attempt % 2) as f64)
                                .await
                        };
                        assert!(matches!(reply, Msg::OutcomeAck(_)), "{reply:?}");
                    }
                    Msg::NoWork(w) if w.reason() == pb::NoWorkReason::Done => return,
                    Msg::NoWork(w) => {
                        tokio::time::sleep(Duration::from_millis(w.retry_after_ms.min(50))).await;
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("lanes finish")
            .unwrap();
    }
    let st = c
        .get(pb::GetRequest { id: "fleet".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    assert_eq!((st.trials_final, st.trials_total), (48, 48));

    let store = RedisStore::connect(&server.url(), RedisOptions::default())
        .await
        .unwrap();
    let id = lanes_common::ids::CampaignId::new("fleet").unwrap();
    let rows = store.rows(&id, 0, usize::MAX).await.unwrap();
    let mut counted: BTreeMap<String, usize> = BTreeMap::new();
    for r in &rows {
        *counted.entry(r.trial_id.to_string()).or_default() += usize::from(r.counted);
    }
    assert_eq!(counted.len(), 48);
    assert!(
        counted.values().all(|&n| n == 1),
        "exactly one counted row per trial"
    );
    // Leases never overlap: in the event log, a trial's next attempt starts only after its
    // previous attempt finished.
    let events = store.events(&id, 0, usize::MAX).await.unwrap();
    let mut live: HashSet<String> = HashSet::new();
    for e in events {
        match e.kind {
            lanes_coordinator::store::EventKind::AttemptStarted { token, .. } => {
                assert!(
                    live.insert(token.trial_id.to_string()),
                    "{token} started while another lease was live"
                );
            }
            lanes_coordinator::store::EventKind::AttemptFinished { token, .. } => {
                live.remove(token.trial_id.as_str());
            }
            _ => {}
        }
    }
}

async fn silent_lane_is_reassigned_after_the_ttl(backend: &str) {
    let e = env(backend).await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&small_campaign(
        "silent",
        1,
        "pairing = \"none\"\n[retry]\ninfra_backoff_s = 0",
    )))
    .await
    .unwrap();
    let mut a = lane(&e.coord.url(), "wa", "ha").await;
    let Msg::Assignment(first) = a.work("wa-0").await else {
        panic!("work")
    };
    let t = tokens(&first).remove(0);
    a.heartbeat("silent", std::slice::from_ref(&t), pb::Phase::Agent)
        .await;
    // The lane goes silent; the lease expires after the TTL (10 s) plus the 2 s reap grace.
    e.clock.advance_ms(13_000);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let st = c
            .get(pb::GetRequest {
                id: "silent".into(),
            })
            .await
            .unwrap()
            .into_inner();
        if st.rows_total == 1 {
            assert!(st.in_flight.is_empty());
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the reaper did not take the lease"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut b = lane(&e.coord.url(), "wb", "hb").await;
    let Msg::Assignment(second) = b.work("wb-0").await else {
        panic!("reassigned")
    };
    let t2 = tokens(&second).remove(0);
    assert_eq!((t2.trial_id.as_str(), t2.attempt), (t.trial_id.as_str(), 2));
    let ack = a.heartbeat("silent", &[t], pb::Phase::Agent).await;
    assert_eq!(ack.tokens[0].state, pb::RenewState::Lost as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_silent_lane_is_reassigned_after_the_ttl() {
    silent_lane_is_reassigned_after_the_ttl("embedded").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_silent_lane_is_reassigned_after_the_ttl() {
    silent_lane_is_reassigned_after_the_ttl("redis").await;
}

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

/// The report folds the whole ledger, past Redis's old 100,000-row read cap (the report
/// silently stopped there). The campaign is submitted as usual; its ledger of 101,000 rows (101
/// cancelled attempts of each of its 1000 trials) is appended to the results stream directly,
/// in the store's own row format, because writing that many rows one operation at a time is
/// the hot path's business, not this test's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_report_folds_a_ledger_past_100k_rows() {
    let e = env("redis").await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = small_campaign("big", 500, "pairing = \"none\"");
    let sub = c.submit(submit_request(&text)).await.unwrap().into_inner();
    let campaign = lanes_common::spec::load_str(
        &text,
        std::path::Path::new("big.toml"),
        std::path::Path::new("."),
    )
    .unwrap();
    let trials: Vec<_> = lanes_common::schedule::trials(&campaign).collect();
    assert_eq!(trials.len(), 1000);

    let url = e.redis.as_ref().unwrap().url();
    let written =
        lanes_tests::synthetic_ledger::append(&url, &campaign, &sub.spec_hash, 101, false).await;
    assert_eq!(written, 101_000);

    let id = lanes_common::ids::CampaignId::new("big").unwrap();
    let rows = e.store.rows(&id, 0, usize::MAX).await.unwrap();
    assert_eq!(rows.len(), 101_000, "every row, uncapped");
    assert!(rows.iter().enumerate().all(|(i, r)| r.seq == i as u64));
    drop(rows);

    let json = c
        .report(pb::ReportRequest { id: "big".into() })
        .await
        .unwrap()
        .into_inner()
        .json;
    let report: lanes_common::report::Report = serde_json::from_str(&json).unwrap();
    assert_eq!(report.rows_total, 101_000);
    assert_eq!(report.rows_by_status.get("cancelled"), Some(&101_000));
    assert_eq!(report.unscheduled_rows, 0);
    let total = &report.completeness.total;
    assert_eq!((total.trials_total, total.pending_in_retry), (1000, 1000));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_sends_a_snapshot_then_events_and_rows_follow() {
    let e = env("embedded").await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&small_campaign("watched", 2, "")))
        .await
        .unwrap();
    let mut watch = c
        .watch(pb::WatchRequest {
            id: "watched".into(),
            from: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.next().await.unwrap().unwrap();
    assert!(matches!(
        first.event,
        Some(pb::watch_event::Event::Snapshot(_))
    ));
    let mut rows = c
        .rows(pb::RowsRequest {
            id: "watched".into(),
            from_seq: 0,
            follow: true,
        })
        .await
        .unwrap()
        .into_inner();
    let mut l = lane(&e.coord.url(), "w", "h").await;
    let Msg::Assignment(a) = l.work("w-0").await else {
        panic!("work")
    };
    for t in tokens(&a) {
        l.score("watched", &t, "w-0", 1.0).await;
    }
    let mut kinds = Vec::new();
    while kinds.iter().filter(|k| **k == "finished").count() < 2 {
        let ev = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        kinds.push(match ev.event.unwrap() {
            pb::watch_event::Event::AttemptStarted(_) => "started",
            pb::watch_event::Event::AttemptFinished(_) => "finished",
            pb::watch_event::Event::TrialFinal(_) => "final",
            _ => "other",
        });
    }
    assert_eq!(&kinds[..2], ["started", "started"], "{kinds:?}");
    assert!(kinds.contains(&"final"));
    for _ in 0..2 {
        let r = tokio::time::timeout(Duration::from_secs(10), rows.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let row: lanes_common::row::Row = r.try_into().unwrap();
        assert!(row.counted);
    }
    drop(e.clock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stop_drain_and_cancel() {
    let e = env("embedded").await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    // Drain: the in-flight attempt finishes, nothing new starts.
    c.submit(submit_request(&small_campaign(
        "drain",
        3,
        "pairing = \"none\"",
    )))
    .await
    .unwrap();
    let mut l = lane(&e.coord.url(), "w", "h").await;
    let Msg::Assignment(a) = l.work("w-0").await else {
        panic!("work")
    };
    let t = tokens(&a).remove(0);
    let st = c
        .stop(pb::StopRequest {
            id: "drain".into(),
            mode: pb::StopMode::Drain as i32,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, pb::CampaignState::Stopping as i32);
    let Msg::NoWork(w) = l.work("w-1").await else {
        panic!("no work while stopping")
    };
    assert_eq!(w.reason(), pb::NoWorkReason::Stopped, "{}", w.detail);
    assert!(w.detail.starts_with("stopped"), "{}", w.detail);
    assert_eq!(
        l.heartbeat("drain", std::slice::from_ref(&t), pb::Phase::Agent)
            .await
            .tokens[0]
            .state,
        pb::RenewState::Renewed as i32
    );
    assert!(matches!(
        l.score("drain", &t, "w-0", 1.0).await,
        Msg::OutcomeAck(_)
    ));
    let g = c
        .get(pb::GetRequest { id: "drain".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(g.state, pb::CampaignState::Stopped as i32);
    assert_eq!(g.stop_reason, pb::StopReason::User as i32);

    // Cancel: the lane is told to cancel and its release is recorded as cancelled, not final.
    c.submit(submit_request(&small_campaign(
        "cancel",
        3,
        "pairing = \"none\"",
    )))
    .await
    .unwrap();
    let Msg::Assignment(a) = l.work("w-0").await else {
        panic!("work")
    };
    let t = tokens(&a).remove(0);
    c.stop(pb::StopRequest {
        id: "cancel".into(),
        mode: pb::StopMode::Cancel as i32,
    })
    .await
    .unwrap();
    l.send(In::Heartbeat(pb::Heartbeat {
        tokens: vec![pb::TokenPhase {
            token: Some(t.clone()),
            phase: pb::Phase::Agent as i32,
            campaign: "cancel".into(),
            traceparent: String::new(),
        }],
    }))
    .await;
    assert!(
        matches!(l.next().await.unwrap(), Msg::Cancel(_)),
        "a server-initiated cancel"
    );
    let Msg::HeartbeatAck(ack) = l.next().await.unwrap() else {
        panic!("ack")
    };
    assert_eq!(ack.tokens[0].state, pb::RenewState::Cancel as i32);
    l.send(In::Release(pb::Release {
        token: Some(t),
        reason: pb::ReleaseReason::Cancelled as i32,
        campaign: "cancel".into(),
        lane: "w-0".into(),
        ..Default::default()
    }))
    .await;
    assert!(matches!(l.next().await.unwrap(), Msg::OutcomeAck(_)));
    let g = c
        .get(pb::GetRequest {
            id: "cancel".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(g.state, pb::CampaignState::Stopped as i32);
    assert_eq!(g.counts_by_status.get("cancelled"), Some(&1));
    assert_eq!(g.trials_final, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_of_another_lane_protocol_is_refused_naming_the_side_to_upgrade() {
    use lanes_common::protocol::LANE_PROTOCOL;
    let e = env("embedded").await;
    let register = |protocol| pb::Register {
        worker_id: "w".into(),
        host: "h".into(),
        lanes: 1,
        protocol,
        ..Default::default()
    };
    for (protocol, upgrade) in [
        (0, "upgrade the worker"),
        (LANE_PROTOCOL + 1, "upgrade the coordinator"),
    ] {
        let refused =
            match ScriptedLane::connect_with(&e.coord.url(), Some(LANE_TOKEN), register(protocol))
                .await
            {
                Ok(_) => panic!("a worker of protocol {protocol} was served"),
                Err(s) => s,
            };
        assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
        assert!(refused.message().contains(upgrade), "{refused:?}");
    }
    // This build's own protocol is served.
    ScriptedLane::connect_with(&e.coord.url(), Some(LANE_TOKEN), register(LANE_PROTOCOL))
        .await
        .expect("served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unauthenticated_calls_are_refused_for_every_rpc() {
    let e = env("embedded").await;
    for token in [None, Some("wrong"), Some(LANE_TOKEN)] {
        let mut c = client(&e.coord.url(), token).await;
        let codes = [
            c.submit(submit_request(&small_campaign("x", 1, "")))
                .await
                .map(drop)
                .unwrap_err()
                .code(),
            c.get(pb::GetRequest { id: "x".into() })
                .await
                .map(drop)
                .unwrap_err()
                .code(),
            c.list(pb::ListRequest {})
                .await
                .map(drop)
                .unwrap_err()
                .code(),
            c.watch(pb::WatchRequest {
                id: "x".into(),
                from: String::new(),
            })
            .await
            .map(drop)
            .unwrap_err()
            .code(),
            c.stop(pb::StopRequest {
                id: "x".into(),
                mode: 1,
            })
            .await
            .map(drop)
            .unwrap_err()
            .code(),
            c.rows(pb::RowsRequest {
                id: "x".into(),
                from_seq: 0,
                follow: false,
            })
            .await
            .map(drop)
            .unwrap_err()
            .code(),
            c.report(pb::ReportRequest { id: "x".into() })
                .await
                .map(drop)
                .unwrap_err()
                .code(),
        ];
        assert!(
            codes.iter().all(|c| *c == Code::Unauthenticated),
            "{token:?}: {codes:?}"
        );
    }
    for token in [None, Some("wrong"), Some(CLIENT_TOKEN)] {
        let err = ScriptedLane::connect(&e.coord.url(), token, "w", "h")
            .await
            .map(drop)
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{token:?}");
        assert!(!err.message().contains(LANE_TOKEN));
    }
}

/// A submitted spec whose `[driver] env` sets or reads a reserved variable is refused at
/// submit, naming the variable, and nothing is stored: the loader's rule holds for specs that
/// never went through a campaign file.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_submit_with_a_reserved_driver_env_is_refused_naming_the_variable() {
    let e = env("embedded").await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    for (name, value) in [
        ("LD_PRELOAD", "/tmp/evil.so"),
        ("PATH", "/tmp/evil"),
        ("PYTHONPATH", "/tmp/evil"),
        ("API_KEY", "$LANES_LANE_TOKEN"),
    ] {
        let req = with_spec_json(submit_request(&small_campaign("envy", 1, "")), |spec| {
            spec["driver"]["env"][name] = serde_json::json!(value);
        });
        let err = c.submit(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{name}");
        let shown = value.strip_prefix('$').unwrap_or(name);
        assert!(
            err.message().contains(&format!("driver.env.{name}")) && err.message().contains(shown),
            "{}",
            err.message()
        );
    }
    let err = c
        .get(pb::GetRequest { id: "envy".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{}", err.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oversized_and_malformed_requests_are_refused_with_the_field_named() {
    let e = env("embedded").await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    let err = c
        .submit(pb::SubmitRequest {
            spec: Some(pb::submit_request::Spec::SpecJson("not json".into())),
            tasks: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("spec_json"), "{}", err.message());

    let mut req = submit_request(&small_campaign("big", 1, ""));
    req.tasks[0].payload_json = format!("{{\"blob\":\"{}\"}}", "x".repeat(70 * 1024));
    let err = c.submit(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("tasks[0].payload_json"),
        "{}",
        err.message()
    );

    let mut req = submit_request(&small_campaign("dup", 2, ""));
    req.tasks[1].id = req.tasks[0].id.clone();
    let err = c.submit(req).await.unwrap_err();
    assert!(err.message().contains("tasks[1].id"), "{}", err.message());

    let err = c
        .get(pb::GetRequest {
            id: "../etc".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("invalid id"), "{}", err.message());
    let err = c
        .get(pb::GetRequest { id: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    // Over the configured message size (8 MiB in tests).
    let mut req = submit_request(&small_campaign("huge", 1, ""));
    req.tasks[0].group = " ".repeat(9 * 1024 * 1024);
    let err = c.submit(req).await.unwrap_err();
    assert!(
        matches!(err.code(), Code::OutOfRange | Code::ResourceExhausted),
        "{err:?}"
    );

    // A lane message with a bad token ends the session with the field named.
    c.submit(submit_request(&small_campaign("lanebad", 1, "")))
        .await
        .unwrap();
    let mut l = lane(&e.coord.url(), "w", "h").await;
    l.send(In::Heartbeat(pb::Heartbeat {
        tokens: vec![pb::TokenPhase {
            token: Some(pb::Token {
                trial_id: "../x".into(),
                attempt: 1,
                lease: String::new(),
            }),
            phase: pb::Phase::Agent as i32,
            campaign: "lanebad".into(),
            traceparent: String::new(),
        }],
    }))
    .await;
    let err = l.next().await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("tokens[0].token"),
        "{}",
        err.message()
    );

    let mut l = lane(&e.coord.url(), "w", "h").await;
    let Msg::Assignment(a) = l.work("w-0").await else {
        panic!("work")
    };
    let mut bad = scored_outcome("lanebad", &tokens(&a)[0], "w-0", "h", 1.0);
    bad.score = None;
    l.send(In::Outcome(bad)).await;
    // A malformed outcome is refused for good, with the field named; the session stays.
    match l.next().await.unwrap() {
        Msg::OutcomeError(e) => {
            assert!(!e.retryable);
            assert!(e.reason.contains("outcome.score"), "{}", e.reason);
        }
        other => panic!("expected an outcome error, got {other:?}"),
    }
    assert!(matches!(
        l.work("w-1").await,
        Msg::NoWork(_) | Msg::Assignment(_)
    ));
}

/// Watch on replica B sees what lanes do through replica A.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_watch_on_one_replica_sees_events_of_another() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let replicas =
        CoordinatorHandle::redis_replicas(&server.url(), Arc::new(clock.clone()), 2).await;
    let mut a = client(&replicas[0].url(), Some(CLIENT_TOKEN)).await;
    let mut b = client(&replicas[1].url(), Some(CLIENT_TOKEN)).await;
    a.submit(submit_request(&small_campaign("cross", 1, "")))
        .await
        .unwrap();
    let mut watch = b
        .watch(pb::WatchRequest {
            id: "cross".into(),
            from: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(
        watch.next().await.unwrap().unwrap().event,
        Some(pb::watch_event::Event::Snapshot(_))
    ));
    let mut l = lane(&replicas[0].url(), "w", "h").await;
    assert_eq!(drive(&mut l, "w-0").await, 2);
    let mut finished = 0;
    let mut ended = false;
    while !ended {
        let ev = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("event on B")
            .unwrap()
            .unwrap();
        match ev.event.unwrap() {
            pb::watch_event::Event::AttemptFinished(_) => finished += 1,
            pb::watch_event::Event::CampaignEnded(e) => {
                ended = e.state == pb::CampaignState::Done as i32
            }
            _ => {}
        }
    }
    assert_eq!(finished, 2);
    let _ = clock.now_ms();
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

/// The reaper waits one TTL after the replica starts before it takes any lease. Its store
/// counts `list` calls: each reaper tick starts with one, and here nothing else makes any once
/// the lane has its work.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reaper_waits_one_ttl_after_start() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let store = Arc::new(CountingStore::new(Arc::new(
        EmbeddedStore::open(dir.path()).unwrap(),
    )));
    let config = lanes_coordinator::CoordinatorConfig {
        reaper_start_delay: Duration::from_secs(30),
        ..lanes_tests::coordinator::test_config()
    };
    let coord = CoordinatorHandle::start_with(config, store.clone(), Arc::new(clock.clone())).await;
    let mut c = client(&coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&small_campaign(
        "startup",
        1,
        "pairing = \"none\"",
    )))
    .await
    .unwrap();
    let mut l = lane(&coord.url(), "w", "h").await;
    let Msg::Assignment(a) = l.work("w-0").await else {
        panic!("work")
    };
    l.heartbeat("startup", &tokens(&a), pb::Phase::Agent).await;
    // Expired by the clock, but the replica is younger than one TTL. Once three more reaper
    // ticks have begun (so two have read the advanced clock and finished), the lease stays
    // and the campaign's event cursor has not moved.
    let at = cursor(&mut c, "startup").await;
    clock.advance_ms(20_000);
    let ticks = store.lists();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while store.lists() < ticks + 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the reaper stopped ticking"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let st = status(&mut c, "startup").await;
    assert_eq!(
        (st.rows_total, st.in_flight.len(), st.events_total),
        (0, 1, at),
        "reaped before one TTL"
    );
    clock.advance_ms(11_000);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let st = c
            .get(pb::GetRequest {
                id: "startup".into(),
            })
            .await
            .unwrap()
            .into_inner();
        if st.rows_total == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never reaped after the start delay"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
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
