//! `lanes worker drain`: the worker's preStop. The attempt in flight finishes and is
//! acknowledged before the drain returns, nothing new is taken afterwards, and the SIGTERM that
//! follows cancels nothing.

use std::process::{Command, Stdio};

use lanes_common::row::Status;
use lanes_tests::campaign_watch::{status, wait_for_agent};
use lanes_tests::coordinator::CLIENT_TOKEN;
use lanes_tests::fleet::{Fleet, rows};
use lanes_tests::lane_client::{client, submit_request};
use lanes_tests::worker_campaigns::campaign_text;

use crate::worker::Worker;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drain_waits_for_the_attempt_in_flight_and_takes_nothing_new() {
    let f = Fleet::start().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = campaign_text(
        "drained",
        4,
        1,
        "pairing = \"none\"",
        "agent_s = [2.0, 2.0]",
        "",
    );
    let artifacts = f.dir.path().join("w");
    let mut w = Worker::start(&f.coord.url(), &artifacts, 1, "h1");
    c.submit(submit_request(&text)).await.unwrap();
    let busy = wait_for_agent(&mut c, "drained").await;

    // The drain is asked while the one lane is in its agent phase: it returns only once that
    // attempt's outcome is acknowledged.
    let drain = tokio::task::spawn_blocking({
        let artifacts = artifacts.clone();
        move || {
            Command::new(env!("CARGO_BIN_EXE_lanes"))
                .args(["worker", "drain", "--timeout-s", "60", "--artifacts"])
                .arg(&artifacts)
                .stderr(Stdio::piped())
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let said = String::from_utf8_lossy(&drain.stderr);
    assert!(drain.status.success(), "{said}");
    assert!(said.contains("1 attempt(s) in flight"), "{said}");
    assert!(said.contains("drained: nothing in flight"), "{said}");

    // The attempt that was busy finished and counted, and nothing is in flight. The one other
    // row there can be is a unit the coordinator answered a work request with after the drain
    // began (when the busy attempt ended just before it): given back unstarted, not final,
    // so the trial runs again elsewhere.
    let landed = rows(&f.store, "drained").await;
    assert!(
        landed.iter().any(|r| r.trial_id.as_str() == busy.trial_id),
        "{landed:#?}"
    );
    assert!(
        landed
            .iter()
            .all(|r| (r.status == Status::Completed && r.counted)
                || (r.status == Status::Cancelled
                    && !r.is_final
                    && r.record.started_utc.is_none())),
        "{landed:#?}"
    );
    assert!(landed.len() < 8, "the drain stopped nothing: {landed:#?}");
    assert!(status(&mut c, "drained").await.in_flight.is_empty());

    // Stopped after the drain, the worker cancels and gives back nothing: the ledger is as
    // the drain left it.
    terminate(&w);
    let exit = tokio::task::spawn_blocking(move || w.0.wait().unwrap())
        .await
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    assert_eq!(rows(&f.store, "drained").await.len(), landed.len());
    assert!(
        !artifacts.join(".control.sock").exists(),
        "the worker leaves no socket behind"
    );
}

/// SIGTERM, as the kubelet sends after the preStop.
fn terminate(w: &Worker) {
    let pid = w.0.id().to_string();
    let ok = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(ok.success());
}
