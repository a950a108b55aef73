//! TLS end to end, with certificates made at test time: a coordinator serving TLS with
//! mutual TLS for lane sessions (the worker id must be its certificate's subject), clients
//! without certificates, plaintext and untrusted peers refused with a clear message, and the
//! Redis store over `rediss://` with a configured CA.

use std::sync::Arc;

use lanes_common::proto as pb;
use lanes_common::proto::coordinator_message::Msg;
use lanes_common::proto::lane_service_client::LaneServiceClient;
use lanes_coordinator::store::{
    EmbeddedStore, ManualClock, RedisOptions, RedisStore, Store, StoreError,
};
use lanes_coordinator::tls::ServerTls;
use lanes_dial::{ClientTls, endpoint};
use lanes_tests::certs::{Pair, TestCa};
use lanes_tests::coordinator::{CLIENT_TOKEN, CoordinatorHandle, LANE_TOKEN, test_config};
use lanes_tests::lane_client::{Bearer, ScriptedLane, small_campaign, submit_request};
use lanes_tests::redis_server::RedisServer;
use tonic::Code;

const T0: i64 = 1_796_083_200_000;

fn tls_to(ca: &TestCa, client: Option<&Pair>) -> ClientTls {
    ClientTls {
        ca_pem: Some(ca.pem.as_bytes().to_vec()),
        identity: client.map(|p| (p.cert.as_bytes().to_vec(), p.key.as_bytes().to_vec())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutual_tls_binds_a_lane_session_to_its_certificate() {
    let ca = TestCa::new("lanes test CA");
    let server = ca.server();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let config = lanes_coordinator::CoordinatorConfig {
        tls: Some(ServerTls {
            cert_pem: server.cert.clone().into_bytes(),
            key_pem: server.key.clone().into_bytes(),
            client_ca_pem: Some(ca.pem.clone().into_bytes()),
        }),
        ..test_config()
    };
    let coord = CoordinatorHandle::start_with(config, store, Arc::new(ManualClock::new(T0))).await;
    let url = format!("https://{}", coord.addr);

    // A client needs no certificate, only its token.
    let channel = endpoint(&url, &tls_to(&ca, None))
        .unwrap()
        .connect()
        .await
        .expect("TLS to the coordinator");
    let mut c = pb::campaign_service_client::CampaignServiceClient::with_interceptor(
        channel,
        Bearer(Some(CLIENT_TOKEN.into())),
    );
    c.submit(submit_request(&small_campaign("tls", 1, "")))
        .await
        .unwrap();

    // The worker whose certificate names it registers, takes work and publishes.
    let w1 = ca.client("w1");
    let mut lane =
        ScriptedLane::connect_tls(&url, &tls_to(&ca, Some(&w1)), Some(LANE_TOKEN), "w1", "h")
            .await
            .expect("w1 with its own certificate");
    let Msg::Assignment(a) = lane.work("w1-0").await else {
        panic!("expected work")
    };
    let t = a.trials[0].token.clone().unwrap();
    match lane.score("tls", &t, "w1-0", 1.0).await {
        Msg::OutcomeAck(ack) => assert!(ack.counted),
        other => panic!("expected an ack, got {other:?}"),
    }

    // Another worker id with w1's certificate (and the right lane token) is refused.
    let err = ScriptedLane::connect_tls(&url, &tls_to(&ca, Some(&w1)), Some(LANE_TOKEN), "w2", "h")
        .await
        .err()
        .expect("w2 cannot use w1's certificate");
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    assert!(
        err.message().contains("client certificate"),
        "{}",
        err.message()
    );

    // The lane token without a client certificate opens no session.
    let err = ScriptedLane::connect_tls(&url, &tls_to(&ca, None), Some(LANE_TOKEN), "w1", "h")
        .await
        .err()
        .expect("no certificate, no session");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");
    assert!(err.message().contains("mutual TLS"), "{}", err.message());

    // A certificate from a CA the coordinator does not trust fails the handshake.
    let rogue = TestCa::new("rogue CA").client("w1");
    let refused = ScriptedLane::connect_tls(
        &url,
        &tls_to(&ca, Some(&rogue)),
        Some(LANE_TOKEN),
        "w1",
        "h",
    )
    .await;
    assert!(
        refused.is_err(),
        "an untrusted client certificate is refused"
    );

    // A client that does not trust the coordinator's CA refuses it.
    let other = TestCa::new("other CA");
    let e = endpoint(&url, &tls_to(&other, None))
        .unwrap()
        .connect()
        .await
        .expect_err("an unknown server CA");
    let text = lanes_dial::explain_connect_error(&url, &e);
    assert!(text.to_lowercase().contains("certificate"), "{text}");

    // Plaintext against the TLS port fails, and the message says what to do.
    let plain = format!("http://{}", coord.addr);
    let e = match endpoint(&plain, &ClientTls::default())
        .unwrap()
        .connect()
        .await
    {
        Err(e) => lanes_dial::explain_connect_error(&plain, &e),
        Ok(ch) => {
            let mut l = LaneServiceClient::new(ch);
            let (_tx, rx) = tokio::sync::mpsc::channel::<pb::WorkerMessage>(1);
            let s = l
                .session(tokio_stream::wrappers::ReceiverStream::new(rx))
                .await
                .expect_err("plaintext to a TLS port");
            lanes_dial::explain_status(&s)
        }
    };
    assert!(e.contains("https://"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_redis_store_speaks_rediss_with_a_configured_ca() {
    let ca = TestCa::new("redis test CA");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.server().write(dir.path(), "redis");
    let ca_file = ca.write(dir.path());
    let server = RedisServer::start_tls(&cert, &key, &ca_file);
    let opts = RedisOptions {
        tls_ca_pem: Some(ca.pem.clone().into_bytes()),
        ..RedisOptions::default()
    };
    let store = RedisStore::connect(&server.tls_url(), opts.clone())
        .await
        .expect("rediss:// with the CA");
    store.ping().await.unwrap();
    let submitted = store
        .submit(
            lanes_common::spec::load_str(
                &small_campaign("over-tls", 2, ""),
                std::path::Path::new("c.toml"),
                std::path::Path::new("."),
            )
            .unwrap(),
            T0,
        )
        .await
        .unwrap();
    assert_eq!(submitted.trials, 4);
    assert_eq!(store.list().await.unwrap().len(), 1);
    // Without the CA, the self-signed chain is not trusted.
    let untrusted = RedisStore::connect(&server.tls_url(), RedisOptions::default()).await;
    assert!(
        untrusted.is_err(),
        "an untrusted Redis certificate is refused"
    );
    // A CA with a plaintext URL is a configuration mistake, said so.
    match RedisStore::connect(&server.url(), opts).await {
        Err(StoreError::Backend(m)) => assert!(m.contains("rediss://"), "{m}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a TLS CA with a redis:// url must be refused"),
    }
}
