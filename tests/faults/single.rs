//! One test per fault on a single Redis. Each ends with the history checker over the whole ledger.

use std::time::Duration;

use lanes_common::row::FailureKind;

use crate::harness::{Cluster, Layout, TTL_S, campaign};

const END: Duration = Duration::from_secs(180);

/// Both workers prefer replica 0 (so pausing it strands them), with replica 1 as fallback.
fn both_prefer_first(cl: &mut Cluster, lanes: u32) {
    let urls = cl.urls();
    cl.add_worker(lanes, &urls, &[]);
    cl.add_worker(lanes, &urls, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_kill9() {
    let mut cl = Cluster::start(Layout::default()).await;
    cl.add_workers_on_both(4);
    let text = campaign("ck", 60, [0.2, 0.8], "");
    cl.submit(0, &text).await;
    cl.wait_rows("ck", 20, END).await;
    cl.coords[0].proc.kill9();
    tokio::time::sleep(Duration::from_secs(2)).await;
    cl.coords[0].proc.restart();
    cl.coords[0].wait_ready();
    cl.wait_rows("ck", 60, END).await;
    cl.coords[1].proc.kill9();
    tokio::time::sleep(Duration::from_secs(1)).await;
    cl.coords[1].proc.restart();
    cl.coords[1].wait_ready();
    cl.wait_ended("ck", END).await;
    cl.check("ck", &[&text]).await;
}

/// A replica paused past the lease TTL keeps its TCP connections open. Its workers notice
/// (heartbeat acknowledgements stop; HTTP/2 keepalive times out), move to the other replica
/// and renew there, so no lease held by a live lane expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_sigstop_past_the_ttl() {
    let mut cl = Cluster::start(Layout::default()).await;
    both_prefer_first(&mut cl, 4);
    let text = campaign("cs", 40, [2.0, 3.0], "");
    cl.submit(1, &text).await;
    cl.wait_rows("cs", 8, END).await;
    cl.wait_agent_on("cs", "h0", END).await;
    cl.wait_agent_on("cs", "h1", END).await;
    cl.coords[0].proc.pause();
    tokio::time::sleep(Duration::from_secs(TTL_S + 4)).await;
    cl.coords[0].proc.resume();
    cl.wait_ended("cs", END).await;
    for f in [
        "worker-h0.log",
        "worker-h1.log",
        "coordinator-0.log",
        "coordinator-1.log",
    ] {
        let _ = std::fs::copy(cl.dir.path().join(f), format!("/tmp/cs-{f}"));
    }
    let rows = cl.check("cs", &[&text]).await;
    // A lane's lease that expires is `lease_expired`. (When the paused replica resumes it may
    // still answer work requests of sessions that have left it; those leases never reach a
    // lane and are taken back as `cancelled`, costing nothing.)
    let expired: Vec<_> = rows
        .iter()
        .filter(|r| r.failure_kind == Some(FailureKind::LeaseExpired))
        .collect();
    assert!(
        expired.is_empty(),
        "leases of live lanes expired: {:?}",
        expired
            .iter()
            .map(|r| format!(
                "{}#a{} {} {:?} on {:?} at {}",
                r.trial_id, r.attempt, r.status, r.record.error, r.lane, r.written_utc
            ))
            .collect::<Vec<_>>()
    );
}

/// A worker paused past the TTL loses its leases: they are reaped and retried elsewhere, and
/// whatever it publishes after it wakes lands as late or duplicate, never counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_sigstop_past_the_ttl() {
    let mut cl = Cluster::start(Layout::default()).await;
    cl.add_workers_on_both(4);
    let text = campaign("ws", 40, [1.0, 2.0], "");
    cl.submit(0, &text).await;
    cl.wait_rows("ws", 8, END).await;
    cl.wait_agent_on("ws", "h0", END).await;
    cl.workers[0].pause();
    tokio::time::sleep(Duration::from_secs(TTL_S + 5)).await;
    cl.workers[0].resume();
    cl.wait_ended("ws", END).await;
    let rows = cl.check("ws", &[&text]).await;
    assert!(
        rows.iter()
            .any(|r| r.failure_kind == Some(FailureKind::LeaseExpired)),
        "the paused worker's leases never expired"
    );
}

/// Redis restarts with a data set large enough that it answers `LOADING` for seconds. The
/// coordinators treat that as an outage (GoAway to their sessions, the reaper waits a TTL
/// once the store is back), and no outcome is refused for good or lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_through_a_long_loading() {
    let mut cl = Cluster::start(Layout::default()).await;
    // Bulk data in another database, rewritten into the AOF as plain commands, so that
    // loading it at the restart takes seconds.
    let r = cl.redis().commands(&[
        &["SELECT", "9"],
        &["DEBUG", "POPULATE", "2000000", "bulk", "32"],
        &["CONFIG", "SET", "aof-use-rdb-preamble", "no"],
        &["BGREWRITEAOF"],
    ]);
    assert!(r.iter().all(|l| !l.starts_with('-')), "{r:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while cl
        .redis()
        .command(&["INFO", "persistence"])
        .contains("aof_rewrite_in_progress:1")
        || !aof_rewritten(&cl)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the AOF rewrite never ended"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    both_prefer_first(&mut cl, 4);
    let text = campaign("rl", 50, [0.5, 1.5], "");
    cl.submit(0, &text).await;
    cl.wait_rows("rl", 15, END).await;
    cl.redis_mut().kill9();
    let loading = tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        cl.redis_mut().restart();
        (cl, started.elapsed())
    })
    .await
    .unwrap();
    let (cl, took) = loading;
    eprintln!(
        "redis answered PING {:.1} s after its restart (LOADING)",
        took.as_secs_f64()
    );
    cl.wait_ended("rl", END).await;
    cl.check("rl", &[&text]).await;
}

/// Whether the last AOF rewrite finished successfully.
fn aof_rewritten(cl: &Cluster) -> bool {
    let info = cl.redis().command(&["INFO", "persistence"]);
    info.contains("aof_last_bgrewrite_status:ok") && !info.contains("aof_rewrite_scheduled:1")
}

/// A network partition between the workers and their preferred replica: the proxy holds
/// every byte but keeps the sockets open. The workers give that replica up, renew through
/// the other one, and no lane's lease expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_between_workers_and_a_replica() {
    let mut cl = Cluster::start(Layout::default()).await;
    let proxy = crate::proxy::Proxy::start(cl.coords[0].port).await;
    let via = format!("http://127.0.0.1:{}", proxy.port);
    let urls = vec![via, cl.coords[1].url()];
    cl.add_worker(4, &urls, &[]);
    cl.add_worker(4, &urls, &[]);
    let text = campaign("pw", 40, [2.0, 3.0], "");
    cl.submit(1, &text).await;
    cl.wait_agent_on("pw", "h0", END).await;
    cl.wait_agent_on("pw", "h1", END).await;
    proxy.blackhole(true);
    tokio::time::sleep(Duration::from_secs(TTL_S + 4)).await;
    proxy.blackhole(false);
    cl.wait_ended("pw", END).await;
    let rows = cl.check("pw", &[&text]).await;
    no_lease_expired(&rows);
}

/// A partition between a replica and Redis: that replica's store calls hang, its store watch
/// sends its sessions GoAway, and the workers move to the replica that still reaches Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_between_a_replica_and_redis() {
    let mut cl = Cluster::start(Layout {
        redis_proxies: true,
        ..Layout::default()
    })
    .await;
    both_prefer_first(&mut cl, 4);
    let text = campaign("pr", 40, [2.0, 3.0], "");
    cl.submit(1, &text).await;
    cl.wait_agent_on("pr", "h0", END).await;
    cl.wait_agent_on("pr", "h1", END).await;
    cl.redis_proxies[0].blackhole(true);
    tokio::time::sleep(Duration::from_secs(TTL_S + 4)).await;
    cl.redis_proxies[0].blackhole(false);
    cl.wait_ended("pr", END).await;
    let rows = cl.check("pr", &[&text]).await;
    no_lease_expired(&rows);
    assert!(
        cl.coords[0].proc.log_text().contains("store unreachable"),
        "the partitioned replica never noticed"
    );
}

fn no_lease_expired(rows: &[lanes_common::row::Row]) {
    let expired: Vec<String> = rows
        .iter()
        .filter(|r| r.failure_kind == Some(FailureKind::LeaseExpired))
        .map(|r| format!("{}#a{} on {:?}", r.trial_id, r.attempt, r.lane))
        .collect();
    assert!(
        expired.is_empty(),
        "leases of live lanes expired: {expired:?}"
    );
}

/// Two replicas whose clocks differ by 3 s (one 1.5 s behind, one 1.5 s ahead), each serving
/// one worker: leases renewed by one are judged by the other's reaper, and nothing is reaped
/// early or counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_whose_clocks_differ_by_seconds() {
    let mut cl = Cluster::start(Layout {
        clock_offsets_ms: vec![-1500, 1500],
        ..Layout::default()
    })
    .await;
    cl.add_workers_on_both(4);
    let text = campaign("cl", 50, [1.0, 3.0], "");
    cl.submit(0, &text).await;
    cl.wait_ended("cl", END).await;
    let rows = cl.check("cl", &[&text]).await;
    no_lease_expired(&rows);
}

/// The disk under one worker's outbox fills up for a while (a failpoint answers ENOSPC). The
/// worker keeps its outcomes in memory, takes no new work, and catches up once the disk
/// has room; nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_an_outbox() {
    let mut cl = Cluster::start(Layout::default()).await;
    let full = cl.dir.path().join("disk-full");
    let urls = cl.urls();
    let failpoint = full.display().to_string();
    cl.add_worker(4, &urls, &[("LANES_FAILPOINT_OUTBOX_FULL", &failpoint)]);
    cl.add_worker(4, &[urls[1].clone(), urls[0].clone()], &[]);
    let text = campaign("fd", 40, [0.5, 1.5], "");
    cl.submit(0, &text).await;
    cl.wait_agent_on("fd", "h0", END).await;
    std::fs::write(&full, b"").unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    std::fs::remove_file(&full).unwrap();
    cl.wait_ended("fd", END).await;
    let rows = cl.check("fd", &[&text]).await;
    assert!(
        rows.iter().any(|r| r
            .record
            .publication_errors
            .iter()
            .any(|e| e.starts_with("outbox:"))),
        "no outcome met the full disk"
    );
}

/// An amendment (more tasks) while lanes run and heartbeat: every row carries the hash in
/// force when it was written, and the added trials only ever the amended hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amendment_while_lanes_heartbeat() {
    let mut cl = Cluster::start(Layout::default()).await;
    both_prefer_first(&mut cl, 4);
    let first = campaign("am", 30, [1.0, 2.0], "");
    let grown = campaign("am", 45, [1.0, 2.0], "");
    let a = cl.submit(0, &first).await;
    cl.wait_agent_on("am", "h0", END).await;
    cl.wait_agent_on("am", "h1", END).await;
    let b = cl.submit(1, &grown).await;
    assert!(b.amended && b.spec_hash != a.spec_hash, "{b:?}");
    cl.wait_ended("am", END).await;
    let rows = cl.check("am", &[&first, &grown]).await;
    assert!(rows.iter().any(|r| r.spec_hash == b.spec_hash));
}

/// An amendment that adds runs to phase-2 blocks the phase-2 rule already refused (the
/// cutoff is too near for them): the new trials get their `not_started` rows once, the claim
/// returns, and the campaign ends. Before the fix that claim never returned.
///
/// Phase 1 runs on a real worker. The refusal and the amendment then have to happen before
/// the cutoff, so the test asks for work itself (a scripted lane session on the real
/// coordinator) right after each submit instead of waiting for a worker's retry timer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amendment_after_a_phase2_refusal() {
    use lanes_common::proto::coordinator_message::Msg;
    use lanes_tests::coordinator::LANE_TOKEN;
    use lanes_tests::lane_client::ScriptedLane;
    let mut cl = Cluster::start(Layout {
        coordinators: 1,
        ..Layout::default()
    })
    .await;
    let urls = cl.urls();
    cl.add_worker(2, &urls, &[]);
    let make = |p2: u32, head: &str| {
        campaign(
            "p2",
            2,
            [1.5, 1.5],
            &format!("phase1_runs = 3\nphase2_runs = {p2}\n{head}"),
        )
        .replace("phase1_runs = 1\n", "")
        .replace("timeout_s = 30", "timeout_s = 10")
    };
    // Phase 1 only: 2 tasks × 2 arms × 3 runs. A block is 6 trials of about 1.6 s.
    let v0 = make(0, "");
    cl.submit(0, &v0).await;
    cl.wait_ended("p2", END).await;
    cl.workers[0].kill9();
    // Phase 2 with a cutoff that one trial fits before (so admission lets it through) but a
    // block does not (its estimate is spread over the 3 lanes seen: 2 of the worker's and
    // the probe), so the phase-2 rule refuses every block.
    let rows = cl.rows("p2").await;
    let trial_s = rows.iter().map(|r| r.wall_s).fold(0.0, f64::max);
    let mut blocks: std::collections::BTreeMap<&str, f64> = Default::default();
    for r in &rows {
        *blocks.entry(r.block.as_str()).or_default() += r.wall_s;
    }
    let block_s = blocks.values().copied().fold(f64::MAX, f64::min) / 3.0;
    assert!(
        block_s - trial_s > 1.0,
        "no room between one trial ({trial_s:.1} s) and a block per lane ({block_s:.1} s)"
    );
    let cutoff = lanes_common::utc::format_rfc3339(
        lanes_coordinator::store::Clock::now_ms(&lanes_coordinator::store::SystemClock)
            + ((trial_s + block_s) / 2.0 * 1000.0) as i64,
    );
    let head = format!("cutoff_utc = \"{cutoff}\"");
    let (v1, v2) = (make(1, &head), make(3, &head));
    let mut lane = ScriptedLane::connect(&urls[0], Some(LANE_TOKEN), "probe", "probe")
        .await
        .unwrap();
    assert!(cl.submit(0, &v1).await.amended);
    let answer = lane.work("probe-0").await;
    assert!(matches!(answer, Msg::NoWork(_)), "{answer:?}");
    let refused = cl.status("p2").await.trials_not_started;
    assert_eq!(refused, 4, "every phase-2 trial refused");
    // The amendment adds runs to the refused blocks; the next claim must return.
    assert!(cl.submit(0, &v2).await.amended);
    let answer = lane.work("probe-0").await;
    assert!(matches!(answer, Msg::NoWork(_)), "{answer:?}");
    let st = cl.wait_ended("p2", END).await;
    assert_eq!(st.state, lanes_common::state::CampaignState::Done, "{st:?}");
    assert_eq!(st.trials_not_started, 2 * 2 * 3, "{st:?}");
    cl.check("p2", &[&v0, &v1, &v2]).await;
}

/// A ledger past 100k rows (1000 trials × 100 cancelled attempts and a counted one): the
/// checker reads it all, and the report folds every row instead of stopping at a page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_over_100k_rows() {
    let cl = Cluster::start(Layout {
        coordinators: 1,
        ..Layout::default()
    })
    .await;
    let text = campaign("big", 500, [0.1, 0.1], "");
    let sub = cl.submit(0, &text).await;
    let parsed = crate::harness::parse(&text);
    let trials: Vec<_> = lanes_common::schedule::trials(&parsed).collect();
    assert_eq!(trials.len(), 1000);
    let written = lanes_tests::synthetic_ledger::append(
        &cl.redis().url(),
        &parsed,
        &sub.spec_hash,
        101,
        true,
    )
    .await;
    assert_eq!(written, 101_000);
    let rows = cl.check("big", &[&text]).await;
    assert_eq!(rows.len(), 101_000);
    let id = lanes_common::ids::CampaignId::new("big").unwrap();
    let report = lanes_coordinator::report::build(cl.store.as_ref(), &id)
        .await
        .unwrap();
    assert_eq!(report.rows_total, 101_000);
    assert_eq!(report.rows_by_status.get("cancelled"), Some(&100_000));
    assert_eq!(report.rows_by_status.get("completed"), Some(&1_000));
}

/// Two campaigns over one dataset (every task, arm and so trial id shared) on the same
/// workers, with enough lanes that both campaigns' attempts of one trial run at once, through
/// a kill -9 of a coordinator and of a worker (restarted on its outbox). Each campaign's
/// ledger is green on its own, and no worker's session was refused for a lease secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_campaigns_sharing_ids_under_kills() {
    let mut cl = Cluster::start(Layout::default()).await;
    cl.add_workers_on_both(8);
    let a = campaign("shared-a", 10, [0.5, 1.5], "");
    let b = campaign("shared-b", 10, [0.5, 1.5], "");
    cl.submit(0, &a).await;
    cl.submit(1, &b).await;
    cl.wait_agent_on("shared-b", "h0", END).await;
    cl.workers[0].kill9();
    cl.coords[0].proc.kill9();
    tokio::time::sleep(Duration::from_secs(1)).await;
    cl.coords[0].proc.restart();
    cl.coords[0].wait_ready();
    cl.workers[0].restart();
    cl.wait_ended("shared-a", END).await;
    cl.wait_ended("shared-b", END).await;
    cl.check("shared-a", &[&a]).await;
    cl.check("shared-b", &[&b]).await;
    for w in &cl.workers {
        let log = w.log_text();
        assert!(
            !log.contains("does not match"),
            "a lease secret was refused:\n{log}"
        );
    }
}
