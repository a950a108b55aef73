//! Restarts: a reopened file, a restarted or killed Redis, and the durability check.

use super::*;

/// Embedded only: the file, reopened, keeps rows, leases, scores and counters.
pub(super) async fn embedded_file_reopened_keeps_everything(h: &mut Harness) {
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
pub(super) async fn redis_restart_keeps_every_acknowledged_outcome_score_and_lease(
    h: &mut Harness,
) {
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
pub(super) async fn redis_kill9_mid_complete_errors_and_the_retry_lands_once(h: &mut Harness) {
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
pub(super) async fn redis_without_fsync_always_is_refused_unless_allowed(_h: &mut Harness) {
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

/// Redis only: a running store reads the server's durability settings again once a second. A
/// server restarted at the same address with `appendfsync everysec` is not written to (every
/// request fails as unavailable, naming the setting) until it is durable again, and the
/// outcome retried meanwhile then lands once.
pub(super) async fn redis_restarted_lossy_is_not_written_to_until_durable_again(h: &mut Harness) {
    use std::time::{Duration, Instant};
    let c = cid("relossy");
    h.submit(campaign(
        "relossy",
        &[("a", "pa")],
        2,
        "pairing = \"none\"",
        "",
    ))
    .await;
    let t = h.claim_tokens(&c, "l", "h").await.remove(0);
    let server = h.redis.as_mut().unwrap();
    server.terminate();
    server.restart_with("everysec");
    // The same store, whose connection reconnects by itself. Until its next check (a second
    // at most) it may still answer; then it refuses.
    let outcome = scored(&t, "l", "h", Status::Completed, 1.0);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match h.store.complete(&c, outcome.clone(), h.now()).await {
            Err(StoreError::Unavailable(why)) if why.contains("appendfsync") => break,
            Ok(_) | Err(StoreError::Unavailable(_)) => {}
            Err(e) => panic!("unexpected error from a lossy server: {e}"),
        }
        assert!(
            Instant::now() < deadline,
            "the store went on writing to a server restarted with appendfsync everysec"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let server = h.redis.as_ref().unwrap();
    server.command(&["CONFIG", "SET", "appendfsync", "always"]);
    let ack = loop {
        match h.store.complete(&c, outcome.clone(), h.now()).await {
            Ok(ack) => break ack,
            Err(StoreError::Unavailable(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the store never wrote to the durable server again: {e}"),
        }
    };
    assert!(ack.counted);
    let rows = h.rows(&c).await;
    assert_eq!(
        rows.iter().filter(|r| r.token() == t).count(),
        1,
        "{rows:?}"
    );
}
