//! The coordinator over real gRPC (tonic on 127.0.0.1:0), on the embedded store and on a real
//! redis-server, driven by scripted lanes.
//!
//! One module per subject:
//! - [`campaigns`]: a campaign run to done, sixteen lanes on two replicas, stop with drain and
//!   with cancel;
//! - [`leases`]: a silent lane's lease reassigned after the TTL, and the reaper's start delay;
//! - [`sessions`]: a lane session's outcomes and heartbeats: acknowledged only after the commit,
//!   retryable when the store refuses them, not held back by a claim, answered in order, and
//!   the go-away at shutdown;
//! - [`watch_and_report`]: the watch's snapshot and events (across replicas too), followed rows,
//!   and the report past 100,000 rows;
//! - [`refusals`]: other lane protocols, unauthenticated calls, reserved driver env, oversized
//!   and malformed requests.

mod campaigns;
mod leases;
mod refusals;
mod sessions;
mod watch_and_report;

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
