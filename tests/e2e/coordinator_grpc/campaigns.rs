//! Campaigns end to end: run to done on each backend, sixteen lanes on two replicas, and a
//! stop that drains or cancels.

use super::*;

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
