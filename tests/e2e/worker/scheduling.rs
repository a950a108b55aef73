//! How lanes take work: run groups back to back on one lane, cancels before boot, the no-work
//! hint, and a lane leaving a campaign whose driver pins it cannot meet.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lanes_common::proto as pb;
use lanes_common::row::{FailureKind, Row};
use lanes_coordinator::store::{RedisOptions, RedisStore, Store, SystemClock};
use lanes_tests::campaign_watch::{cursor, status, wait_ended, wait_for_agent};
use lanes_tests::coordinator::{CLIENT_TOKEN, CoordinatorHandle};
use lanes_tests::fleet::{Fleet, rows};
use lanes_tests::lane_client::{client, submit_request};
use lanes_tests::redis_server::RedisServer;
use lanes_tests::worker_campaigns::campaign_text;

use crate::worker::Worker;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_group_runs_back_to_back_on_one_lane_in_slot_order() {
    let f = Fleet::start().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = campaign_text(
        "groups",
        6,
        2,
        "pairing = \"group\"",
        "agent_s = [0.01, 0.03]",
        "",
    );
    c.submit(submit_request(&text)).await.unwrap();
    let _w1 = Worker::start(&f.coord.url(), &f.dir.path().join("w1"), 2, "h1");
    let _w2 = Worker::start(&f.coord.url(), &f.dir.path().join("w2"), 2, "h2");
    let st = wait_ended(&f.coord.url(), "groups", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&f.store, "groups").await;
    // Every attempt record holds its outcome too, and the row points at it.
    for r in &rows {
        let record = r
            .record
            .artifacts
            .iter()
            .find(|a| a.ends_with("outcome.json"))
            .expect("outcome record");
        assert!(std::path::Path::new(record).exists(), "{record}");
        assert!(
            std::path::Path::new(record)
                .with_file_name("attempt.json")
                .exists()
        );
        assert!(
            r.record.publication_errors.is_empty(),
            "{:?}",
            r.record.publication_errors
        );
    }
    let mut groups: BTreeMap<(String, u32), Vec<&Row>> = BTreeMap::new();
    for r in &rows {
        groups
            .entry((r.task.to_string(), r.run_index))
            .or_default()
            .push(r);
    }
    assert_eq!(groups.len(), 12);
    for (g, rs) in groups {
        assert_eq!(rs.len(), 2, "{g:?}");
        assert!(rs.iter().all(|r| r.paired));
        assert_eq!(
            rs[0].lane, rs[1].lane,
            "{g:?}: one lane runs the whole group"
        );
        // Slot order: within a run group order_index is slot order, and the earlier slot
        // started first and ended before the later one started (back to back). Rows may be
        // acknowledged in another order (an outcome can be replayed), so compare times.
        let mut by_slot = rs.clone();
        by_slot.sort_by_key(|r| r.order_index);
        let at = |t: &Option<lanes_common::utc::UtcTime>| t.as_ref().unwrap().epoch_ms();
        assert!(
            at(&by_slot[0].record.ended_utc) <= at(&by_slot[1].record.started_utc),
            "{g:?}: back to back, in slot order"
        );
    }
}

/// A cancel for a later trial of a run group, received while the first trial runs, stops the
/// lane from booting it: it is released as cancelled without an attempt record. Before the fix
/// the lane admitted and booted it, and only its next heartbeat cancelled it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_later_group_trial_is_never_booted() {
    let f = Fleet::start().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = campaign_text(
        "unbooted",
        1,
        1,
        "pairing = \"group\"",
        "agent_s = [4, 4]",
        "",
    );
    c.submit(submit_request(&text)).await.unwrap();
    let artifacts = f.dir.path().join("w");
    let _w = Worker::start(&f.coord.url(), &artifacts, 1, "h1");
    let first = wait_for_agent(&mut c, "unbooted").await;
    c.stop(pb::StopRequest {
        id: "unbooted".into(),
        mode: pb::StopMode::Cancel as i32,
    })
    .await
    .unwrap();
    let st = wait_ended(&f.coord.url(), "unbooted", Duration::from_secs(30)).await;
    assert_eq!(st.state, pb::CampaignState::Stopped as i32);
    let rows = rows(&f.store, "unbooted").await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r.status == lanes_common::row::Status::Cancelled),
        "{rows:?}"
    );
    for r in &rows {
        let attempt_dir = artifacts
            .join("unbooted")
            .join(r.trial_id.as_str())
            .join(format!("a{}", r.attempt));
        let started = r.trial_id.as_str() == first.trial_id;
        assert_eq!(
            attempt_dir.exists(),
            started,
            "{}: only the running trial has an attempt record",
            r.trial_id
        );
    }
}

/// Idle lanes honour the coordinator's retry-after hint: after a NoWork saying "in 5 s", a
/// lane does not ask again at every heartbeat tick, but does ask once the hint is due. Before
/// the fix each idle lane asked every second, whatever the hint. The coordinator's store counts
/// the work requests (one `list` each); the reaper is slowed so that it adds none.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_lanes_wait_out_the_no_work_hint() {
    let redis = RedisServer::start();
    let inner: Arc<dyn Store> = Arc::new(
        RedisStore::connect(&redis.url(), RedisOptions::default())
            .await
            .unwrap(),
    );
    let counting = Arc::new(lanes_tests::counting_store::CountingStore::new(inner));
    let config = lanes_coordinator::CoordinatorConfig {
        reap_every: Duration::from_secs(3600),
        ..lanes_tests::coordinator::test_config()
    };
    let coord =
        CoordinatorHandle::start_with(config, counting.clone(), Arc::new(SystemClock)).await;
    let dir = tempfile::tempdir().unwrap();
    let _w = Worker::start(&coord.url(), dir.path(), 4, "h1");
    // No campaign: each lane's first request is answered NoWork, retry after 5 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    while counting.lists() < 4 {
        assert!(Instant::now() < deadline, "the lanes never asked for work");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Wait for the next request (due when the hint ends), noting the last time there were
    // still only those four: at least three heartbeat ticks must have passed without one.
    let answered = Instant::now();
    let mut quiet_until = answered;
    let deadline = answered + Duration::from_secs(30);
    loop {
        let now = Instant::now();
        if counting.lists() > 4 {
            break;
        }
        quiet_until = now;
        assert!(now < deadline, "the idle lanes never asked for work again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let quiet = quiet_until - answered;
    assert!(
        quiet >= Duration::from_secs(3),
        "idle lanes asked again {quiet:?} after the no-work answer, before its 5 s hint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pin_mismatch_is_identity_mismatch_naming_every_key_and_the_lane_leaves() {
    let f = Fleet::start().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = campaign_text("pins", 4, 1, "pairing = \"none\"", "", "")
        .replace("[retry]", "[driver.expect]\nprotocol = \"lanes-driver/1\"\ndataset_commit = \"abc123\"\nagent_sha256 = \"ff00\"\n[retry]");
    c.submit(submit_request(&text)).await.unwrap();
    let _w = Worker::start(&f.coord.url(), f.dir.path(), 2, "h");
    let deadline = Instant::now() + Duration::from_secs(30);
    let blocked = loop {
        let rows = rows(&f.store, "pins").await;
        if rows.len() >= 2 {
            break rows;
        }
        assert!(Instant::now() < deadline, "no blocked rows: {rows:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for r in &blocked {
        assert_eq!(r.status, lanes_common::row::Status::Blocked);
        assert_eq!(r.failure_kind, Some(FailureKind::IdentityMismatch));
        assert!(!r.is_final);
        let e = r.record.error.as_deref().unwrap_or_default();
        assert!(
            e.contains("dataset_commit") && e.contains("agent_sha256"),
            "{e}"
        );
        assert!(
            !e.contains("protocol:"),
            "a matching pin is not listed: {e}"
        );
    }
    // Both lanes left the campaign but still take other work: a second campaign, listed after
    // this one (so a lane that had not left would be offered this one's work first), runs to
    // its end on them. By then they have asked for work many times, and this campaign's
    // event cursor must not have moved: no attempt of it started.
    // A lane that had not left would starve the other campaign, so the check runs at every
    // poll too, to fail at once.
    let at = cursor(&mut c, "pins").await;
    let other = campaign_text("pins2", 2, 1, "pairing = \"none\"", "", "");
    c.submit(submit_request(&other)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = status(&mut c, "pins").await;
        assert_eq!(
            (st.events_total, st.rows_total),
            (at, 2),
            "a lane kept taking the campaign's work: {st:?}"
        );
        assert_eq!(st.state, pb::CampaignState::Running as i32);
        let other = status(&mut c, "pins2").await;
        if other.state == pb::CampaignState::Done as i32 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the lanes took no other work: {other:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let st = status(&mut c, "pins").await;
    assert_eq!((st.events_total, st.rows_total), (at, 2), "{st:?}");
}
