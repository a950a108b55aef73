//! A worker that crashes, is stopped or loses its disk: the outbox and the lease journal
//! lose nothing and count nothing twice.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lanes_common::proto as pb;
use lanes_common::row::{FailureKind, Row};
use lanes_coordinator::store::SystemClock;
use lanes_tests::campaign_watch::{cursor, status, wait_ended, wait_for_agent};
use lanes_tests::coordinator::{CLIENT_TOKEN, CoordinatorHandle};
use lanes_tests::fleet::{Fleet, by_trial, rows};
use lanes_tests::lane_client::{client, submit_request};
use lanes_tests::python_driver::driver_file;
use lanes_tests::worker_campaigns::{campaign_text, driver_campaign};

use crate::worker::Worker;

/// A full disk under the outbox loses nothing and stops the worker taking work: the outcome
/// the outbox could not take is sent from memory (and its row discloses the failure), no new
/// attempt starts while the disk stays full, and work resumes once it is writable. Before the
/// fix the worker went on taking work with no durable outbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_outbox_disk_keeps_the_outcome_and_stops_taking_work() {
    let f = Fleet::start().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = campaign_text(
        "fullbox",
        2,
        1,
        "pairing = \"none\"",
        "agent_s = [0.2, 0.2]",
        "",
    );
    let full = f.dir.path().join("disk-full");
    std::fs::write(&full, b"").unwrap();
    let full_s = full.to_str().unwrap().to_owned();
    let log = f.dir.path().join("worker.log");
    let _w = Worker::start_with(
        &f.coord.url(),
        &f.dir.path().join("w"),
        1,
        "h1",
        &[("LANES_FAILPOINT_OUTBOX_FULL", &full_s)],
        Some(&log),
    );
    c.submit(submit_request(&text)).await.unwrap();
    // The first outcome lands, from memory.
    let deadline = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let rows = rows(&f.store, "fullbox").await;
        if let Some(r) = rows.first() {
            break r.clone();
        }
        assert!(Instant::now() < deadline, "no outcome landed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(first.counted, "{first:?}");
    assert!(
        first
            .record
            .publication_errors
            .iter()
            .any(|e| e.starts_with("outbox:") && e.contains("No space left")),
        "{:?}",
        first.record.publication_errors
    );
    // The attempt record keeps its pending name while no outbox holds its outcome.
    let record = f
        .dir
        .path()
        .join("w/fullbox")
        .join(first.trial_id.as_str())
        .join("a1/outcome.json");
    let pending = record.with_file_name("outcome.json.pending");
    // The outbox never took it, but the coordinator acknowledged it from memory: the store
    // has it, so its record becomes final once the worker has read the acknowledgement (the
    // row can be visible a moment before that).
    let deadline = Instant::now() + Duration::from_secs(10);
    while !record.exists() || pending.exists() {
        assert!(
            Instant::now() < deadline,
            "the acknowledged outcome's record kept its pending name"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The coordinator shows why the worker takes no work.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ws = c
            .workers(pb::WorkersRequest {})
            .await
            .unwrap()
            .into_inner()
            .workers;
        if ws.iter().any(|w| w.worker_id == "h1" && w.outbox_broken) {
            assert!(ws[0].unpersisted >= 1 && ws[0].detail.contains("taking no work"));
            // And `lanes workers` says so.
            let out = Command::new(env!("CARGO_BIN_EXE_lanes"))
                .args(["workers", "--coordinator", &f.coord.url()])
                .env("LANES_CLIENT_TOKEN", CLIENT_TOKEN)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.contains("h1") && text.contains("OUTBOX BROKEN"),
                "{text}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no broken-outbox status: {ws:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // While the disk stays full, nothing else starts. Each heartbeat tick the worker writes
    // its outbox again and, finding it still full, logs so and asks no work for its idle lane.
    // Once three more such ticks are in its log, the campaign's event cursor must not have
    // moved: no attempt started.
    let at = cursor(&mut c, "fullbox").await;
    let still_full = || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches("outbox still not writable; taking no work")
            .count()
    };
    let seen = still_full();
    let deadline = Instant::now() + Duration::from_secs(30);
    while still_full() < seen + 3 {
        assert!(
            Instant::now() < deadline,
            "the worker stopped trying its full outbox"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let st = status(&mut c, "fullbox").await;
    assert!(
        st.events_total == at && st.in_flight.is_empty(),
        "work taken with a full outbox (cursor {at} before): {st:?}"
    );
    assert_eq!(rows(&f.store, "fullbox").await.len(), 1);
    std::fs::remove_file(&full).unwrap();
    let st = wait_ended(&f.coord.url(), "fullbox", Duration::from_secs(30)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&f.store, "fullbox").await;
    assert_eq!(rows.len(), 4);
    assert!(
        rows[1..]
            .iter()
            .all(|r| r.record.publication_errors.is_empty())
    );
    let ws = c
        .workers(pb::WorkersRequest {})
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert!(!ws[0].outbox_broken, "{ws:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_mid_agent_retakes_the_trials_after_the_ttl_and_counts_nothing_twice() {
    let f = Fleet::start().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = campaign_text(
        "kill",
        4,
        1,
        "pairing = \"none\"",
        "agent_s = [1.5, 1.5]",
        "infra_backoff_s = 0",
    );
    c.submit(submit_request(&text)).await.unwrap();
    let mut w = Worker::start(&f.coord.url(), &f.dir.path().join("w1"), 2, "h1");
    // Bounded wait until an attempt is in its agent phase, then kill the worker.
    wait_for_agent(&mut c, "kill").await;
    w.kill9();
    let _w2 = Worker::start(&f.coord.url(), &f.dir.path().join("w2"), 2, "h2");
    let st = wait_ended(&f.coord.url(), "kill", Duration::from_secs(90)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&f.store, "kill").await;
    let trials = by_trial(&rows);
    assert!(
        rows.iter()
            .any(|r| r.failure_kind == Some(FailureKind::LeaseExpired)),
        "the killed attempts were reaped"
    );
    for (id, rs) in trials {
        assert_eq!(rs.iter().filter(|r| r.counted).count(), 1, "{id}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_after_evaluate_before_the_ack_lands_once_after_the_restart() {
    let f = Fleet::start().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = campaign_text(
        "outbox",
        1,
        1,
        "pairing = \"none\"",
        // Long enough that the coordinator is surely gone before the agent ends, even on a
        // loaded machine.
        "agent_s = [4.0, 4.0]",
        "",
    );
    c.submit(submit_request(&text)).await.unwrap();
    let artifacts = f.dir.path().join("w");
    let mut w = Worker::start(&f.coord.url(), &artifacts, 1, "h1");
    let first = wait_for_agent(&mut c, "outbox").await;
    // The coordinator goes away while the agent runs: the evaluated outcome can only reach
    // the outbox. Then the worker dies with it unacknowledged.
    let addr = f.coord.addr;
    f.coord.shutdown().await;
    let outbox = artifacts.join(".outbox");
    let deadline = Instant::now() + Duration::from_secs(60);
    while outbox_entries(&outbox) == 0 {
        assert!(
            Instant::now() < deadline,
            "the outcome never reached the outbox"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    w.kill9();
    let coord = CoordinatorHandle::start_on(
        addr,
        lanes_tests::coordinator::test_config(),
        f.store.clone(),
        Arc::new(SystemClock),
    )
    .await;
    let _w2 = Worker::start(&coord.url(), &artifacts, 1, "h1");
    let st = wait_ended(&coord.url(), "outbox", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&f.store, "outbox").await;
    let mine: Vec<&Row> = rows
        .iter()
        .filter(|r| r.trial_id.as_str() == first.trial_id)
        .collect();
    assert_eq!(mine.iter().filter(|r| r.counted).count(), 1, "{mine:#?}");
    assert!(
        mine.iter().all(|r| r.attempt == 1),
        "the trial was not run again: {mine:#?}"
    );
    assert_eq!(
        outbox_entries(&outbox),
        0,
        "the outbox is empty once acknowledged"
    );
    assert_eq!(
        filled(&outbox.join("leases"), "lease"),
        0,
        "and so is the lease journal"
    );
}

/// Outcomes waiting in an outbox directory (its `leases/` journal aside): its `.json` files
/// that hold a record (an acknowledged entry leaves its slot file at one byte, empty, to be
/// written over).
fn outbox_entries(outbox: &std::path::Path) -> usize {
    filled(outbox, "json")
}

/// `*.<ext>` files in `dir` holding a record: more than one byte (an empty slot keeps one).
fn filled(dir: &std::path::Path, ext: &str) -> usize {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == ext))
                .filter(|e| e.metadata().is_ok_and(|m| m.len() > 1))
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_stops_asking_lets_the_attempt_finish_and_exits_cleanly() {
    let f = Fleet::start().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = campaign_text(
        "term",
        2,
        1,
        "pairing = \"none\"",
        "agent_s = [1.5, 1.5]",
        "",
    );
    c.submit(submit_request(&text)).await.unwrap();
    let mut w = Worker::start(&f.coord.url(), f.dir.path(), 1, "h");
    wait_for_agent(&mut c, "term").await;
    let pid = w.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = w.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the worker did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}");
    let rows = rows(&f.store, "term").await;
    assert_eq!(
        rows.len(),
        1,
        "the running attempt finished and nothing new started: {rows:#?}"
    );
    assert!(rows[0].counted);
    let st = c
        .get(pb::GetRequest { id: "term".into() })
        .await
        .unwrap()
        .into_inner();
    assert!(st.in_flight.is_empty());
}

/// A worker killed mid-agent and restarted (same worker id and outbox) forfeits the leases
/// its previous process held: the coordinator takes them back at once and the retries run,
/// instead of waiting out a 120 s lease. Before the fix the campaign waited for the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_worker_forfeits_the_leases_it_cannot_publish() {
    let f = Fleet::start().await;
    let driver = driver_file(
        f.dir.path(),
        "slow_first.py",
        r#"    def run_agent(self, p):
        tag = p["attempt"]["tag"]
        end = time.time() + (300 if p["attempt"]["attempt"] == 1 else 0.05)
        while time.time() < end:
            if self.cancelled(tag):
                return {"status": "cancelled"}
            time.sleep(0.02)
        return {"status": "completed", "turns": 1}

    def evaluate(self, p):
        return {"score": 1.0, "passed": True, "checks": []}
"#,
    );
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = driver_campaign(
        "restart",
        &driver,
        "",
        "  { id = \"R1\" },\n  { id = \"R2\" },\n",
    )
    .replace("lease_ttl_s = 5", "lease_ttl_s = 120");
    c.submit(submit_request(&text)).await.unwrap();
    let art = f.dir.path().join("art");
    let mut first = Worker::start(&f.coord.url(), &art, 2, "h");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = c
            .get(pb::GetRequest {
                id: "restart".into(),
            })
            .await
            .unwrap()
            .into_inner();
        let agents = st
            .in_flight
            .iter()
            .filter(|f| f.phase == pb::Phase::Agent as i32)
            .count();
        if agents == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the agents never started: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill9();
    let _second = Worker::start(&f.coord.url(), &art, 2, "h");
    // Infra retries prefer another host for one TTL: a second host takes them.
    let _other = Worker::start(&f.coord.url(), &f.dir.path().join("art2"), 2, "h2");
    // Far below the 120 s lease: only a forfeit lets the retries run this soon.
    let st = wait_ended(&f.coord.url(), "restart", Duration::from_secs(40)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&f.store, "restart").await;
    assert_eq!(rows.len(), 4, "{rows:#?}");
    for task in ["R1", "R2"] {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.task.as_str() == task).collect();
        assert_eq!(mine[0].failure_kind, Some(FailureKind::LeaseExpired));
        assert!(
            mine[0]
                .record
                .error
                .as_deref()
                .unwrap()
                .contains("restarted"),
            "{:?}",
            mine[0]
        );
        assert!(mine[1].counted && mine[1].attempt == 2, "{:?}", mine[1]);
    }
    // The journal is empty once everything is acknowledged.
    assert_eq!(filled(&art.join(".outbox/leases"), "lease"), 0);
}
