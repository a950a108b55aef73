//! Leases: a silent lane's lease is reassigned after the TTL, and the reaper waits one TTL
//! after the replica starts.

use super::*;

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
