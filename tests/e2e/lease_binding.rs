//! Leases are bound to the worker that claimed them: a second session holding the lane token
//! cannot publish, renew, release or forfeit for trials an honest lane is running, whether it
//! guesses the token, reuses the honest worker's id, or replays a secret issued to someone
//! else. Over real gRPC, on a real redis-server with two coordinator replicas (a secret issued
//! by one verifies on the other).

use std::sync::Arc;

use lanes_common::proto as pb;
use lanes_common::proto::coordinator_message::Msg;
use lanes_common::proto::worker_message::Msg as In;
use lanes_coordinator::store::ManualClock;
use lanes_tests::coordinator::{CLIENT_TOKEN, CoordinatorHandle, LANE_TOKEN};
use lanes_tests::lane_client::{ScriptedLane, client, small_campaign, submit_request};
use lanes_tests::redis_server::RedisServer;
use tonic::Code;

const T0: i64 = 1_796_083_200_000;

async fn lane(url: &str, worker: &str) -> ScriptedLane {
    ScriptedLane::connect(url, Some(LANE_TOKEN), worker, "h")
        .await
        .expect("lane session")
}

fn without_lease(t: &pb::Token) -> pb::Token {
    pb::Token {
        lease: String::new(),
        ..t.clone()
    }
}

/// An outcome refused for good on the lease, naming no secret.
fn assert_denied(m: Msg) {
    match m {
        Msg::OutcomeError(e) => {
            assert!(!e.retryable, "a forged outcome must not be retried: {e:?}");
            assert!(e.reason.contains("permission denied"), "{}", e.reason);
            assert!(e.token.is_some_and(|t| t.lease.is_empty()));
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

async fn counted(c: &mut lanes_tests::lane_client::Client, id: &str) -> (u64, u64) {
    let st = c
        .get(pb::GetRequest { id: id.into() })
        .await
        .unwrap()
        .into_inner();
    (st.trials_counted, st.rows_total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_outcomes_for_in_flight_trials_are_never_counted() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let replicas =
        CoordinatorHandle::redis_replicas(&server.url(), Arc::new(clock.clone()), 2).await;
    let (one, two) = (replicas[0].url(), replicas[1].url());
    let mut c = client(&one, Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&small_campaign("bound", 2, "")))
        .await
        .unwrap();

    // The honest lane takes two trials.
    let mut honest = lane(&one, "honest").await;
    let mut held = Vec::new();
    while held.len() < 2 {
        match honest.work("honest-0").await {
            Msg::Assignment(a) => held.extend(a.trials.into_iter().map(|t| t.token.unwrap())),
            other => panic!("expected work, got {other:?}"),
        }
    }
    for t in &held {
        assert_eq!(t.lease.len(), 64, "a claim issues a 256-bit secret");
    }
    assert_ne!(held[0].lease, held[1].lease);

    // A forger with the lane token, on the other replica, tries every way it has.
    let mut forger = lane(&two, "forger").await;
    for t in &held {
        // A guessed token: no secret.
        assert_denied(
            forger
                .score("bound", &without_lease(t), "forger-0", 1.0)
                .await,
        );
        // A made-up secret.
        let made_up = pb::Token {
            lease: "0".repeat(64),
            ..t.clone()
        };
        assert_denied(forger.score("bound", &made_up, "forger-0", 1.0).await);
        // The real secret (leaked somehow) from the wrong worker.
        assert_denied(forger.score("bound", t, "forger-0", 1.0).await);
        // A release of the honest lane's trial.
        forger
            .send(In::Release(pb::Release {
                token: Some(without_lease(t)),
                reason: pb::ReleaseReason::Cancelled as i32,
                campaign: "bound".into(),
                lane: "forger-0".into(),
                ..Default::default()
            }))
            .await;
        assert_denied(forger.next().await.unwrap());
    }
    // The forger re-registers under the honest worker's id: without the secret it still
    // gets nothing.
    let mut impostor = lane(&two, "honest").await;
    for t in &held {
        assert_denied(
            impostor
                .score("bound", &without_lease(t), "honest-0", 1.0)
                .await,
        );
    }
    assert_eq!(
        counted(&mut c, "bound").await,
        (0, 0),
        "nothing forged reached the ledger"
    );

    // A renewal or a forfeit with a wrong secret ends the session with PERMISSION_DENIED.
    impostor
        .send(In::Heartbeat(pb::Heartbeat {
            tokens: vec![pb::TokenPhase {
                token: Some(without_lease(&held[0])),
                phase: pb::Phase::Agent as i32,
                campaign: "bound".into(),
                traceparent: String::new(),
            }],
        }))
        .await;
    assert_eq!(
        impostor.next().await.unwrap_err().code(),
        Code::PermissionDenied
    );
    forger
        .send(In::Forfeit(pb::Forfeit {
            tokens: vec![pb::CampaignToken {
                token: Some(without_lease(&held[1])),
                campaign: "bound".into(),
            }],
        }))
        .await;
    assert_eq!(
        forger.next().await.unwrap_err().code(),
        Code::PermissionDenied
    );

    // The honest lane still holds both leases, renews them, and publishes through the other
    // replica after a reconnect: its secrets verify there.
    let ack = honest.heartbeat("bound", &held, pb::Phase::Agent).await;
    assert!(
        ack.tokens
            .iter()
            .all(|r| r.state == pb::RenewState::Renewed as i32)
    );
    drop(honest);
    let mut back = lane(&two, "honest").await;
    for t in &held {
        match back.score("bound", t, "honest-0", 1.0).await {
            Msg::OutcomeAck(a) => assert!(a.counted),
            other => panic!("expected an ack, got {other:?}"),
        }
    }
    assert_eq!(counted(&mut c, "bound").await, (2, 2));
    // The secret is in no row.
    let mut rows = c
        .rows(pb::RowsRequest {
            id: "bound".into(),
            from_seq: 0,
            follow: false,
        })
        .await
        .unwrap()
        .into_inner();
    let mut n = 0;
    while let Some(r) = tokio_stream::StreamExt::next(&mut rows).await {
        let row: lanes_common::row::Row = r.unwrap().try_into().unwrap();
        let json = serde_json::to_string(&row).unwrap();
        for t in &held {
            assert!(!json.contains(&t.lease), "a row carries a lease secret");
        }
        n += 1;
    }
    assert_eq!(n, 2);
}
