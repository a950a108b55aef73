//! Campaigns over one dataset on one worker, as a shared fleet runs them: they share every
//! task, arm and so trial id, and each store issues attempt 1 of each trial, so the worker
//! holds several leases with one token at once. Before the worker keyed its leases by
//! campaign and token, one campaign's outcome went out with another's lease secret: the
//! coordinator refused it, the session failed for every lane, and trials were re-run.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lanes_common::proto as pb;
use lanes_common::row::Status;
use lanes_common::smoke::{SmokeSelection, derive};
use lanes_coordinator::store::{EmbeddedStore, Store, SystemClock};
use lanes_tests::campaign_watch::wait_ended;
use lanes_tests::coordinator::{CLIENT_TOKEN, CoordinatorHandle};
use lanes_tests::fleet::{Fleet, by_trial, rows};
use lanes_tests::history::Ack;
use lanes_tests::lane_client::{client, submit_request};
use lanes_tests::worker_campaigns::campaign_text;

use crate::worker::Worker;

const CAMPAIGNS: [&str; 3] = ["coll-a", "coll-b", "coll-c"];

/// Trials of each campaign.
const TRIALS: usize = 4;

/// The same file but for its id: 2 tasks × 2 arms × 1 run, every attempt passing. The worker
/// has a lane for every trial of every campaign, and the agent takes a second, so the
/// campaigns' attempts of one trial are in flight together.
fn collection(id: &str) -> String {
    campaign_text(
        id,
        2,
        1,
        "pairing = \"none\"",
        "agent_s = [1.0, 1.2], default_pass_rate = 1.0",
        "",
    )
}

/// Every trial of `id` has exactly one row, attempt 1, completed and counted with score 1.
async fn scored_once(store: &Arc<dyn Store>, id: &str, trials: usize) {
    let rows = rows(store, id).await;
    let by = by_trial(&rows);
    assert_eq!(by.len(), trials, "{id}: {rows:#?}");
    for (trial, rs) in by {
        assert_eq!(rs.len(), 1, "{id}/{trial}: one attempt, no re-run: {rs:#?}");
        let r = rs[0];
        assert_eq!(
            (r.attempt, r.status, r.counted, r.result.score),
            (1, Status::Completed, true, Some(1.0)),
            "{id}/{trial}: {r:#?}"
        );
        assert_eq!(r.campaign.as_str(), id);
    }
}

/// The worker's own account: no session failed and no lease was refused, and it saw each
/// attempt of each campaign acknowledged once, counted.
fn no_session_error(log: &Path, acks: &Path, expected: usize) {
    let text = std::fs::read_to_string(log).unwrap();
    for bad in [
        "permission denied",
        "session failed",
        "does not match",
        "not committed",
    ] {
        assert!(
            !text.contains(bad),
            "the worker log says {bad:?}:\n{}",
            text.lines()
                .filter(|l| l.contains(bad))
                .take(5)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    let acks: Vec<Ack> = std::fs::read_to_string(acks)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut keys: Vec<(String, String, u32)> = acks
        .iter()
        .map(|a| (a.campaign.clone(), a.trial_id.clone(), a.attempt))
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), expected, "{acks:#?}");
    assert!(acks.iter().all(|a| a.counted), "{acks:#?}");
}

/// Three campaigns sharing every id, on one worker with a lane for each concurrent attempt.
async fn three_campaigns_on_one_worker(store: Arc<dyn Store>, dir: &Path) {
    let coord = CoordinatorHandle::start(store.clone(), Arc::new(SystemClock)).await;
    let mut c = client(&coord.url(), Some(CLIENT_TOKEN)).await;
    for id in CAMPAIGNS {
        c.submit(submit_request(&collection(id))).await.unwrap();
    }
    let (log, acks) = (dir.join("worker.log"), dir.join("acks.jsonl"));
    let acks_env = acks.display().to_string();
    let _w = Worker::start_with(
        &coord.url(),
        &dir.join("art"),
        (CAMPAIGNS.len() * TRIALS) as u32,
        "h1",
        &[("LANES_ACK_LOG", &acks_env)],
        Some(&log),
    );
    for id in CAMPAIGNS {
        let st = wait_ended(&coord.url(), id, Duration::from_secs(90)).await;
        assert_eq!(st.state, pb::CampaignState::Done as i32, "{id}: {st:?}");
    }
    for id in CAMPAIGNS {
        scored_once(&store, id, TRIALS).await;
        // Each campaign's attempt records are its own.
        for t in ["T000.r0.a", "T001.r0.b"] {
            let record = dir.join("art").join(id).join(t).join("a1/outcome.json");
            let o: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
            assert_eq!(o["token"]["trial_id"], t, "{}", record.display());
        }
    }
    no_session_error(&log, &acks, CAMPAIGNS.len() * TRIALS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_campaigns_sharing_ids_score_once_each_on_redis() {
    let f = Fleet::start().await;
    three_campaigns_on_one_worker(f.store.clone(), f.dir.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_campaigns_sharing_ids_score_once_each_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.path().join("data")).unwrap());
    three_campaigns_on_one_worker(store, dir.path()).await;
}

/// A smoke run (`lanes submit FILE --smoke`) beside its main campaign on the same worker:
/// both are scored once per trial, each in its own ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_smoke_run_beside_its_main_campaign_on_one_worker() {
    let f = Fleet::start().await;
    let text = collection("main");
    let main = lanes_common::spec::load_str(&text, Path::new("main.toml"), Path::new(".")).unwrap();
    let smoke = derive(
        &main,
        &SmokeSelection {
            runs: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&text)).await.unwrap();
    c.submit(pb::SubmitRequest::try_from(&smoke).unwrap())
        .await
        .unwrap();
    let dir = f.dir.path();
    let (log, acks) = (dir.join("worker.log"), dir.join("acks.jsonl"));
    let acks_env = acks.display().to_string();
    let _w = Worker::start_with(
        &f.coord.url(),
        &dir.join("art"),
        (2 * TRIALS) as u32,
        "h1",
        &[("LANES_ACK_LOG", &acks_env)],
        Some(&log),
    );
    for id in ["main", "main-smoke"] {
        let st = wait_ended(&f.coord.url(), id, Duration::from_secs(90)).await;
        assert_eq!(st.state, pb::CampaignState::Done as i32, "{id}: {st:?}");
        scored_once(&f.store, id, TRIALS).await;
    }
    assert!(
        rows(&f.store, "main-smoke").await.iter().all(|r| r.smoke),
        "the smoke run's rows say so"
    );
    no_session_error(&log, &acks, 2 * TRIALS);
}
