//! The Redis store behind Sentinels, on real processes: a master, two replicas and three
//! Sentinels. An outcome is acknowledged only once a replica has it, so a failover never
//! loses one; the store follows the new master; an old master that comes back is never
//! written to with an acknowledgement.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lanes_common::row::Status;
use lanes_coordinator::store::{
    CompleteAck, ManualClock, RedisOptions, RedisStore, SentinelOptions, Store, StoreError,
};
use lanes_tests::redis_sentinel::{MASTER_NAME, Replicated};

use support::{Harness, T0, campaign, cid, scored};

/// How long a failover may take here: down after 1 s, then an election and a promotion.
const FAILOVER: Duration = Duration::from_secs(30);

async fn group() -> Replicated {
    tokio::task::spawn_blocking(|| Replicated::start(2))
        .await
        .expect("start the replicated redis")
}

fn sentinel_opts(group: &Replicated) -> RedisOptions {
    RedisOptions {
        wait_replicas: Some(1),
        sentinel: Some(SentinelOptions {
            addrs: group.sentinel_addrs(),
            master: MASTER_NAME.into(),
            tls: false,
            password: None,
        }),
        ..RedisOptions::default()
    }
}

async fn harness(group: &Replicated) -> (Harness, RedisStore) {
    let store = RedisStore::connect("redis://sentinel-master/", sentinel_opts(group))
        .await
        .expect("connect through the sentinels");
    let h = Harness {
        store: Arc::new(store.clone()),
        clock: ManualClock::new(T0),
        dir: tempfile::tempdir().expect("temp dir"),
        backend: "redis-sentinel",
        redis: None,
    };
    (h, store)
}

/// Retries a completion the way a worker does, until it is acknowledged.
async fn complete_until_acked(
    h: &Harness,
    c: &lanes_common::ids::CampaignId,
    outcome: lanes_common::row::Outcome,
) -> CompleteAck {
    let deadline = Instant::now() + FAILOVER;
    loop {
        match h.store.complete(c, outcome.clone(), h.now()).await {
            Ok(ack) => return ack,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the completion never landed: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_no_replica_confirmed_is_not_acknowledged_and_lands_once_after_failover() {
    let mut group = group().await;
    let (h, store) = harness(&group).await;
    let first = group.nodes[0].port;
    assert_eq!(store.master(), format!("127.0.0.1:{first}"));
    let c = cid("fo");
    h.submit(campaign("fo", &[("a", "pa")], 2, "pairing = \"none\"", ""))
        .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    let outcome = scored(&t, "l", "h", Status::Completed, 1.0);

    // Both replicas stopped: the master applies the completion, no replica confirms it.
    group.nodes[1].pause();
    group.nodes[2].pause();
    let err = h
        .store
        .complete(&c, outcome.clone(), h.now())
        .await
        .expect_err("a completion no replica has must not be acknowledged");
    assert!(
        err.is_retryable() && err.to_string().contains("replicas"),
        "{err}"
    );
    assert_eq!(store.stats().wait_timeouts, 1);
    // Retried while the replicas are still away, it finds its own stored acknowledgement and
    // writes nothing: that answer must wait for the replicas all the same.
    let err = h
        .store
        .complete(&c, outcome.clone(), h.now())
        .await
        .expect_err("a retry must not acknowledge what no replica has either");
    assert!(err.to_string().contains("replicas"), "{err}");
    assert_eq!(store.stats().wait_timeouts, 2);

    // The master dies with that write; the replicas come back and one is promoted.
    group.nodes[0].kill9();
    group.nodes[1].resume();
    group.nodes[2].resume();
    let group = tokio::task::spawn_blocking(move || {
        group.wait_failover_from(first, FAILOVER);
        group
    })
    .await
    .unwrap();

    // The store follows the new master, where the retried completion lands once.
    let ack = complete_until_acked(&h, &c, outcome.clone()).await;
    assert!(ack.counted);
    let now_master = group.nodes[group.master()].port;
    assert_eq!(store.master(), format!("127.0.0.1:{now_master}"));
    assert!(store.stats().failovers >= 1);
    let mut group = group;
    // The old master comes back with the unacknowledged write in its AOF: the Sentinels make
    // it a replica, and its copy is thrown away.
    group.nodes[0].restart();
    let group = tokio::task::spawn_blocking(move || {
        group.wait_settled(FAILOVER);
        group
    })
    .await
    .unwrap();
    let rows = h.rows(&c).await;
    assert_eq!(
        rows.iter().filter(|r| r.token() == t).count(),
        1,
        "{rows:?}"
    );
    let again = h.store.complete(&c, outcome, h.now()).await.unwrap();
    assert_eq!(again, ack);
    drop(group);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_stopped_past_down_after_is_fenced_when_it_comes_back() {
    let mut group = group().await;
    let (h, store) = harness(&group).await;
    let old = group.nodes[0].port;
    let c = cid("stale");
    h.submit(campaign(
        "stale",
        &[("a", "pa")],
        3,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let held = h.claim_tokens(&c, "l", "h").await.remove(0);
    // A second coordinator that never heard of the Sentinels: it writes to the old master.
    let behind = RedisStore::connect(
        &group.nodes[0].url(),
        RedisOptions {
            wait_replicas: Some(1),
            ..RedisOptions::default()
        },
    )
    .await
    .expect("connect to the first master");

    group.nodes[0].pause();
    let paused = Instant::now();
    // A completion sent to the stopped master: it fails as soon as the store follows the new
    // master (not at its 10 s response timeout, holding the campaign's rounds until then).
    let in_flight = {
        let (store, c, now) = (h.store.clone(), c.clone(), h.now());
        let outcome = scored(&held, "l", "h", Status::Completed, 1.0);
        tokio::spawn(async move { store.complete(&c, outcome, now).await })
    };
    let group = tokio::task::spawn_blocking(move || {
        group.wait_failover_from(old, FAILOVER);
        group
    })
    .await
    .unwrap();
    // (A failover slow enough to come near the response timeout, on a loaded machine, leaves
    // the request to time out first.)
    let prompt = paused.elapsed() < Duration::from_secs(7);
    match in_flight.await.unwrap() {
        Err(StoreError::Unavailable(why)) if prompt => assert!(
            why.contains(&format!("moved from 127.0.0.1:{old}")),
            "{why}"
        ),
        Err(StoreError::Unavailable(_)) => {}
        other => panic!("a completion on the stopped master answered {other:?}"),
    }
    let ack = complete_until_acked(&h, &c, scored(&held, "l", "h", Status::Completed, 1.0)).await;
    assert!(ack.counted);
    assert_ne!(store.master(), format!("127.0.0.1:{old}"));

    // The old master wakes up still believing it is the master, its replicas gone.
    let mut group = group;
    group.nodes[0].resume();
    let stale = scored(&held, "l2", "h2", Status::Completed, 0.0);
    match behind.complete(&c, stale, h.now()).await {
        Err(StoreError::Unavailable(why)) => {
            assert!(
                ["NOREPLICAS", "READONLY", "replicas"]
                    .iter()
                    .any(|w| why.contains(w)),
                "{why}"
            );
        }
        Err(e) => panic!("unexpected error from the stale master: {e}"),
        Ok(a) => panic!("the stale master acknowledged a completion: {a:?}"),
    }
    // On the new master, the trial counted once, with the score acknowledged first. (The old
    // master is not waited for: the Sentinels make it a replica only after it has reported
    // itself a master for 8 s.)
    let rows = h.rows(&c).await;
    let of_held: Vec<_> = rows.iter().filter(|r| r.token() == held).collect();
    assert_eq!(of_held.len(), 1, "{rows:?}");
    assert_eq!(of_held[0].result.score, Some(1.0));
    drop(group);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_that_no_longer_reaches_a_majority_of_the_sentinels_stops_writing() {
    let mut group = group().await;
    let (h, store) = harness(&group).await;
    let c = cid("minority");
    h.submit(campaign(
        "minority",
        &[("a", "pa")],
        2,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    // One Sentinel left of three: it may be the one a partition left with an old master.
    group.stop_sentinel(0);
    group.stop_sentinel(1);
    let outcome = scored(&t, "l", "h", Status::Completed, 1.0);
    let deadline = Instant::now() + FAILOVER;
    let err = loop {
        match h.store.complete(&c, outcome.clone(), h.now()).await {
            Err(e) if e.to_string().contains("majority") => break e,
            // Before the link asks again (once a second), the master is still used, and the
            // completion may land: it is then a duplicate of itself from here on.
            _ => {
                assert!(
                    Instant::now() < deadline,
                    "still writing without a majority"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert!(err.is_retryable(), "{err}");
    assert_eq!(store.stats().failovers, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_without_a_wait_or_min_replicas_are_refused_unless_lossy() {
    let group = group().await;
    let lossy = RedisOptions {
        wait_replicas: None,
        ..sentinel_opts(&group)
    };
    let err = RedisStore::connect("redis://sentinel-master/", lossy.clone())
        .await
        .expect_err("no --redis-wait behind sentinels");
    assert!(
        matches!(&err, StoreError::NotDurable(w) if w.contains("--redis-wait")),
        "{err}"
    );
    RedisStore::connect(
        "redis://sentinel-master/",
        RedisOptions {
            allow_lossy: true,
            ..lossy
        },
    )
    .await
    .expect("allowed with --allow-lossy-store");

    // A master that takes writes with no replica is refused for --redis-wait 1.
    let master = &group.nodes[group.master()];
    master.command(&["CONFIG", "SET", "min-replicas-to-write", "0"]);
    let err = RedisStore::connect("redis://sentinel-master/", sentinel_opts(&group))
        .await
        .expect_err("min-replicas-to-write 0");
    assert!(
        matches!(&err, StoreError::NotDurable(w) if w.contains("min-replicas-to-write")),
        "{err}"
    );
    let err = RedisStore::connect(
        "redis://sentinel-master/",
        RedisOptions {
            sentinel: Some(SentinelOptions {
                addrs: vec!["127.0.0.1:1".into()],
                master: MASTER_NAME.into(),
                tls: false,
                password: None,
            }),
            ..RedisOptions::default()
        },
    )
    .await
    .expect_err("no sentinel answers");
    assert!(
        err.is_retryable() && err.to_string().contains("sentinel"),
        "{err}"
    );
}

/// A master that refuses writes for want of replicas (`min-replicas-to-write`) is a store
/// outage to retry, also when the refusal aborts a `MULTI` (the layout stamp at connect),
/// not a broken store.
#[tokio::test]
async fn a_master_without_enough_replicas_is_unavailable_not_broken() {
    let alone = lanes_tests::redis_server::RedisServer::start_args(
        "always",
        &["--min-replicas-to-write".into(), "1".into()],
    );
    let err = RedisStore::connect(
        &alone.url(),
        RedisOptions {
            allow_lossy: true,
            ..RedisOptions::default()
        },
    )
    .await
    .expect_err("no replica to write with");
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains("NOREPLICAS"), "{err}");
}
