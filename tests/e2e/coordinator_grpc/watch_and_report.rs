//! Watch and report: the snapshot then events, rows that follow, a watch on one replica
//! seeing what lanes do through another, and a report past 100,000 rows.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_sends_a_snapshot_then_events_and_rows_follow() {
    let e = env("embedded").await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&small_campaign("watched", 2, "")))
        .await
        .unwrap();
    let mut watch = c
        .watch(pb::WatchRequest {
            id: "watched".into(),
            from: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.next().await.unwrap().unwrap();
    assert!(matches!(
        first.event,
        Some(pb::watch_event::Event::Snapshot(_))
    ));
    let mut rows = c
        .rows(pb::RowsRequest {
            id: "watched".into(),
            from_seq: 0,
            follow: true,
        })
        .await
        .unwrap()
        .into_inner();
    let mut l = lane(&e.coord.url(), "w", "h").await;
    let Msg::Assignment(a) = l.work("w-0").await else {
        panic!("work")
    };
    for t in tokens(&a) {
        l.score("watched", &t, "w-0", 1.0).await;
    }
    let mut kinds = Vec::new();
    while kinds.iter().filter(|k| **k == "finished").count() < 2 {
        let ev = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        kinds.push(match ev.event.unwrap() {
            pb::watch_event::Event::AttemptStarted(_) => "started",
            pb::watch_event::Event::AttemptFinished(_) => "finished",
            pb::watch_event::Event::TrialFinal(_) => "final",
            _ => "other",
        });
    }
    assert_eq!(&kinds[..2], ["started", "started"], "{kinds:?}");
    assert!(kinds.contains(&"final"));
    for _ in 0..2 {
        let r = tokio::time::timeout(Duration::from_secs(10), rows.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let row: lanes_common::row::Row = r.try_into().unwrap();
        assert!(row.counted);
    }
    drop(e.clock);
}

/// Watch on replica B sees what lanes do through replica A.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_watch_on_one_replica_sees_events_of_another() {
    let server = RedisServer::start();
    let clock = ManualClock::new(T0);
    let replicas =
        CoordinatorHandle::redis_replicas(&server.url(), Arc::new(clock.clone()), 2).await;
    let mut a = client(&replicas[0].url(), Some(CLIENT_TOKEN)).await;
    let mut b = client(&replicas[1].url(), Some(CLIENT_TOKEN)).await;
    a.submit(submit_request(&small_campaign("cross", 1, "")))
        .await
        .unwrap();
    let mut watch = b
        .watch(pb::WatchRequest {
            id: "cross".into(),
            from: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(matches!(
        watch.next().await.unwrap().unwrap().event,
        Some(pb::watch_event::Event::Snapshot(_))
    ));
    let mut l = lane(&replicas[0].url(), "w", "h").await;
    assert_eq!(drive(&mut l, "w-0").await, 2);
    let mut finished = 0;
    let mut ended = false;
    while !ended {
        let ev = tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("event on B")
            .unwrap()
            .unwrap();
        match ev.event.unwrap() {
            pb::watch_event::Event::AttemptFinished(_) => finished += 1,
            pb::watch_event::Event::CampaignEnded(e) => {
                ended = e.state == pb::CampaignState::Done as i32
            }
            _ => {}
        }
    }
    assert_eq!(finished, 2);
    let _ = clock.now_ms();
}

/// The report folds the whole ledger, past Redis's old 100,000-row read cap (the report
/// silently stopped there). The campaign is submitted as usual; its ledger of 101,000 rows (101
/// cancelled attempts of each of its 1000 trials) is appended to the results stream directly,
/// in the store's own row format, because writing that many rows one operation at a time is
/// the hot path's business, not this test's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_report_folds_a_ledger_past_100k_rows() {
    let e = env("redis").await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = small_campaign("big", 500, "pairing = \"none\"");
    let sub = c.submit(submit_request(&text)).await.unwrap().into_inner();
    let campaign = lanes_common::spec::load_str(
        &text,
        std::path::Path::new("big.toml"),
        std::path::Path::new("."),
    )
    .unwrap();
    let trials: Vec<_> = lanes_common::schedule::trials(&campaign).collect();
    assert_eq!(trials.len(), 1000);

    let url = e.redis.as_ref().unwrap().url();
    let written =
        lanes_tests::synthetic_ledger::append(&url, &campaign, &sub.spec_hash, 101, false).await;
    assert_eq!(written, 101_000);

    let id = lanes_common::ids::CampaignId::new("big").unwrap();
    let rows = e.store.rows(&id, 0, usize::MAX).await.unwrap();
    assert_eq!(rows.len(), 101_000, "every row, uncapped");
    assert!(rows.iter().enumerate().all(|(i, r)| r.seq == i as u64));
    drop(rows);

    let json = c
        .report(pb::ReportRequest { id: "big".into() })
        .await
        .unwrap()
        .into_inner()
        .json;
    let report: lanes_report::Report = serde_json::from_str(&json).unwrap();
    assert_eq!(report.rows_total, 101_000);
    assert_eq!(report.rows_by_status.get("cancelled"), Some(&101_000));
    assert_eq!(report.unscheduled_rows, 0);
    let total = &report.completeness.total;
    assert_eq!((total.trials_total, total.pending_in_retry), (1000, 1000));
}
