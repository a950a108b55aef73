//! `lanes worker` end to end: real worker processes running the sim driver (`lanes driver
//! sim`) against a real coordinator on a real redis-server.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lanes_common::ids::CampaignId;
use lanes_common::policy::TrialHistory;
use lanes_common::proto as pb;
use lanes_common::row::{ExcludedReason, FailureKind, Row};
use lanes_coordinator::store::{RedisOptions, RedisStore, Store, SystemClock};
use lanes_tests::coordinator::{CLIENT_TOKEN, CoordinatorHandle, LANE_TOKEN};
use lanes_tests::lane_client::{client, submit_request};
use lanes_tests::redis_server::RedisServer;

/// A worker process, killed on drop.
struct Worker(Child);

impl Worker {
    fn start(coordinator: &str, artifacts: &std::path::Path, lanes: u32, host: &str) -> Self {
        Self::start_with(coordinator, artifacts, lanes, host, &[], None)
    }

    /// With extra env variables, and stderr (debug logs) written to `log`.
    fn start_with(
        coordinator: &str,
        artifacts: &std::path::Path,
        lanes: u32,
        host: &str,
        env: &[(&str, &str)],
        log: Option<&std::path::Path>,
    ) -> Self {
        let stderr = match log {
            Some(p) => Stdio::from(std::fs::File::create(p).unwrap()),
            None => Stdio::inherit(),
        };
        let child = Command::new(env!("CARGO_BIN_EXE_lanes"))
            .envs(env.iter().copied())
            .env("RUST_LOG", if log.is_some() { "debug" } else { "warn" })
            .args([
                "worker",
                "--coordinator",
                coordinator,
                "--lanes",
                &lanes.to_string(),
            ])
            .arg("--artifacts")
            .arg(artifacts)
            .args([
                "--host",
                host,
                "--cancel-grace-s",
                "1",
                "--shutdown-grace-s",
                "5",
            ])
            .env("LANES_LANE_TOKEN", LANE_TOKEN)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start lanes worker");
        Self(child)
    }

    /// Runs in `dir`, where relative driver commands resolve.
    fn start_in(
        dir: &std::path::Path,
        coordinator: &str,
        artifacts: &std::path::Path,
        lanes: u32,
    ) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_lanes"))
            .current_dir(dir)
            .args([
                "worker",
                "--coordinator",
                coordinator,
                "--lanes",
                &lanes.to_string(),
            ])
            .arg("--artifacts")
            .arg(artifacts)
            .args(["--host", "h", "--cancel-grace-s", "5"])
            .env("LANES_LANE_TOKEN", LANE_TOKEN)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lanes worker");
        Self(child)
    }

    fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}

struct Fleet {
    redis: RedisServer,
    store: Arc<dyn Store>,
    coord: CoordinatorHandle,
    dir: tempfile::TempDir,
}

async fn fleet() -> Fleet {
    let redis = RedisServer::start();
    let store: Arc<dyn Store> = Arc::new(
        RedisStore::connect(&redis.url(), RedisOptions::default())
            .await
            .unwrap(),
    );
    let coord = CoordinatorHandle::start(store.clone(), Arc::new(SystemClock)).await;
    Fleet {
        redis,
        store,
        coord,
        dir: tempfile::tempdir().unwrap(),
    }
}

fn campaign_text(id: &str, tasks: usize, runs: u32, head: &str, sim: &str, retry: &str) -> String {
    let mut t = format!(
        "id = \"{id}\"\nphase1_runs = {runs}\nschedule_seed = 11\nlease_ttl_s = 4\npublish_grace_s = 5\n{head}\n[defaults]\ntimeout_s = 5\nmax_turns = 20\n[[arms]]\nid = \"a\"\nprovider = \"pa\"\n[[arms]]\nid = \"b\"\nprovider = \"pb\"\n[driver]\nsim = {{ {sim} }}\n[retry]\n{retry}\n[tasks]\nitems = [\n"
    );
    for i in 0..tasks {
        t.push_str(&format!("  {{ id = \"T{i:03}\" }},\n"));
    }
    t.push_str("]\n");
    t
}

/// Bounded wait until an attempt of campaign `id` is in its agent phase; returns its token.
async fn wait_for_agent(c: &mut lanes_tests::lane_client::Client, id: &str) -> pb::Token {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = c
            .get(pb::GetRequest { id: id.into() })
            .await
            .unwrap()
            .into_inner();
        if let Some(f) = st
            .in_flight
            .iter()
            .find(|f| f.phase == pb::Phase::Agent as i32)
        {
            return f.token.clone().expect("a token");
        }
        assert!(
            Instant::now() < deadline,
            "no attempt of {id} reached the agent phase"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (bounded) until the campaign leaves `running`/`stopping`; returns its status.
async fn wait_ended(url: &str, id: &str, within: Duration) -> pb::CampaignStatus {
    let mut c = client(url, Some(CLIENT_TOKEN)).await;
    let deadline = Instant::now() + within;
    loop {
        let st = c
            .get(pb::GetRequest { id: id.into() })
            .await
            .unwrap()
            .into_inner();
        if st.state == pb::CampaignState::Done as i32
            || st.state == pb::CampaignState::Stopped as i32
        {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "campaign {id} did not end within {within:?}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn rows(store: &Arc<dyn Store>, id: &str) -> Vec<Row> {
    store
        .rows(&CampaignId::new(id).unwrap(), 0, usize::MAX)
        .await
        .unwrap()
}

fn by_trial(rows: &[Row]) -> BTreeMap<String, Vec<&Row>> {
    let mut m: BTreeMap<String, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        m.entry(r.trial_id.to_string()).or_default().push(r);
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_200_trial_campaign_with_every_fault_but_auth_reaches_done() {
    let f = fleet().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let sim = "agent_s = [0.0, 0.02], default_pass_rate = 0.6, rate_limit_reset_s = 1.0, cost_usd = [0.01, 0.02], faults = { boot_failed = 0.03, reset_unverified = 0.03, rate_limit = 0.03, overloaded = 0.03, guest_lost = 0.03, evaluator_error = 0.03, harness_error = 0.03, driver_crash = 0.02, garbage = 0.02, exit = 0.02, timeout = 0.03, max_turns = 0.02, agent_error = 0.03, violation = 0.02 }";
    let text = campaign_text(
        "faults",
        50,
        2,
        "pairing = \"none\"",
        sim,
        "infra_backoff_s = 0\noverloaded_backoff_s = 0\nrate_limit_backoff_s = 1",
    );
    let r = c.submit(submit_request(&text)).await.unwrap().into_inner();
    assert_eq!(r.trials, 200);
    let _w1 = Worker::start(&f.coord.url(), &f.dir.path().join("w1"), 4, "host-1");
    let _w2 = Worker::start(&f.coord.url(), &f.dir.path().join("w2"), 4, "host-2");
    let st = wait_ended(&f.coord.url(), "faults", Duration::from_secs(180)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32, "{st:?}");
    assert_eq!(st.trials_final, 200);

    let rows = rows(&f.store, "faults").await;
    let trials = by_trial(&rows);
    assert_eq!(trials.len(), 200);
    let policy = lanes_common::spec::RetryPolicy {
        infra_backoff_s: 0,
        overloaded_backoff_s: 0,
        rate_limit_backoff_s: 1,
        ..Default::default()
    };
    let mut kinds_seen = std::collections::BTreeSet::new();
    for (id, rs) in &trials {
        let counted = rs.iter().filter(|r| r.counted).count();
        let excluded = rs.iter().any(|r| r.is_final && r.excluded);
        assert!(counted <= 1, "{id} counted {counted} times");
        assert!(
            counted == 1 || excluded,
            "{id} is neither counted nor excluded"
        );
        for r in rs.iter() {
            if let Some(k) = r.failure_kind {
                kinds_seen.insert(k);
            }
        }
        // Retried as the policy says: an exclusion comes only with its budget spent.
        let h = TrialHistory::from_rows(rs.iter().copied());
        if let Some(r) = rs.iter().find(|r| r.excluded) {
            match r.excluded_reason.as_ref().unwrap() {
                ExcludedReason::InfraFailure(FailureKind::Overloaded) => {
                    assert_eq!(h.overloaded_used, policy.overloaded_retries + 1, "{id}")
                }
                ExcludedReason::InfraFailure(_) => {
                    assert_eq!(h.infra_used, policy.infra_retries + 1, "{id}")
                }
                other => panic!("{id}: unexpected exclusion {other}"),
            }
        }
        // Attempts without gaps.
        let attempts: Vec<u32> = rs.iter().map(|r| r.attempt).collect();
        let max = *attempts.iter().max().unwrap();
        for a in 1..=max {
            assert!(attempts.contains(&a), "{id}: attempt {a} has no row");
        }
    }
    for k in [
        FailureKind::BootFailed,
        FailureKind::DriverCrash,
        FailureKind::EvaluatorError,
        FailureKind::RateLimit,
    ] {
        assert!(kinds_seen.contains(&k), "no {k} seen: {kinds_seen:?}");
    }
    // Every row carries the driver's identity when the driver answered initialize.
    assert!(
        rows.iter()
            .filter(|r| r.status.is_scored())
            .all(|r| r.driver.as_ref().is_some_and(|d| d.name == "lanes-sim"))
    );
    drop(f.redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_auth_failure_campaign_stops_with_stopped_auth() {
    let f = fleet().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = campaign_text(
        "auth",
        3,
        1,
        "pairing = \"none\"",
        "faults = { auth = 1.0 }",
        "auth_backoff_s = 0",
    );
    c.submit(submit_request(&text)).await.unwrap();
    let _w = Worker::start(&f.coord.url(), f.dir.path(), 1, "h");
    let st = wait_ended(&f.coord.url(), "auth", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Stopped as i32);
    assert_eq!(st.stop_reason, pb::StopReason::Auth as i32);
    let rows = rows(&f.store, "auth").await;
    assert!(
        rows.iter()
            .all(|r| r.failure_kind == Some(FailureKind::Auth))
    );
    assert!(!rows.last().unwrap().is_final, "a resume retries it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_group_runs_back_to_back_on_one_lane_in_slot_order() {
    let f = fleet().await;
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
            r.publication_errors.is_empty(),
            "{:?}",
            r.publication_errors
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
        let at =
            |t: &Option<String>| lanes_common::utc::parse_rfc3339(t.as_deref().unwrap()).unwrap();
        assert!(
            at(&by_slot[0].ended_utc) <= at(&by_slot[1].started_utc),
            "{g:?}: back to back, in slot order"
        );
    }
}

/// A cancel for a later trial of a run group, received while the first trial runs, stops the
/// lane from booting it: it is released as cancelled without an attempt record. Before the fix
/// the lane admitted and booted it, and only its next heartbeat cancelled it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_later_group_trial_is_never_booted() {
    let f = fleet().await;
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

/// A full disk under the outbox loses nothing and stops the worker taking work: the outcome
/// the outbox could not take is sent from memory (and its row discloses the failure), no new
/// attempt starts while the disk stays full, and work resumes once it is writable. Before the
/// fix the worker went on taking work with no durable outbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_outbox_disk_keeps_the_outcome_and_stops_taking_work() {
    let f = fleet().await;
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
    let _w = Worker::start_with(
        &f.coord.url(),
        &f.dir.path().join("w"),
        1,
        "h1",
        &[("LANES_FAILPOINT_OUTBOX_FULL", &full_s)],
        None,
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
            .publication_errors
            .iter()
            .any(|e| e.starts_with("outbox:") && e.contains("No space left")),
        "{:?}",
        first.publication_errors
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
    // has it, so its record is final.
    assert!(record.exists() && !pending.exists());
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
    // While the disk stays full, nothing else starts: watch for a few heartbeats.
    let watch_until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < watch_until {
        let st = c
            .get(pb::GetRequest {
                id: "fullbox".into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(
            st.in_flight.is_empty(),
            "work taken with a full outbox: {st:?}"
        );
        assert_eq!(rows(&f.store, "fullbox").await.len(), 1);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    std::fs::remove_file(&full).unwrap();
    let st = wait_ended(&f.coord.url(), "fullbox", Duration::from_secs(30)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&f.store, "fullbox").await;
    assert_eq!(rows.len(), 4);
    assert!(rows[1..].iter().all(|r| r.publication_errors.is_empty()));
    let ws = c
        .workers(pb::WorkersRequest {})
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert!(!ws[0].outbox_broken, "{ws:?}");
}

/// Idle lanes honour the coordinator's retry-after hint: after a NoWork saying "in 5 s", a
/// lane does not ask again at every heartbeat tick. Before the fix each idle lane asked every
/// second, whatever the hint. The coordinator's store counts the work requests (one `list`
/// each); the reaper is slowed so that it adds none.
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
    // Three heartbeat ticks later, still only those four requests.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        counting.lists(),
        4,
        "idle lanes asked again before the hint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_driver_is_killed_at_its_deadline_and_the_next_attempt_gets_a_fresh_one() {
    let f = fleet().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = campaign_text(
        "hang",
        1,
        1,
        "pairing = \"none\"\n",
        "faults = { hang = 1.0 }",
        "infra_backoff_s = 0",
    )
    .replace("timeout_s = 5", "timeout_s = 1");
    c.submit(submit_request(&text)).await.unwrap();
    let _w = Worker::start(&f.coord.url(), f.dir.path(), 1, "h");
    let st = wait_ended(&f.coord.url(), "hang", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&f.store, "hang").await;
    let crashes: Vec<&Row> = rows
        .iter()
        .filter(|r| r.failure_kind == Some(FailureKind::DriverCrash))
        .collect();
    // Two trials (arms a and b), each tried twice: every attempt got a driver that answered
    // boot and reset, so a hung driver never blocked the next attempt.
    assert_eq!(crashes.len(), 4, "{rows:#?}");
    assert!(
        crashes.iter().all(|r| r
            .error
            .as_deref()
            .is_some_and(|e| e.contains("deadline") || e.contains("cancel grace"))),
        "{crashes:#?}"
    );
    assert!(rows.iter().filter(|r| r.is_final).all(|r| r.excluded));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill9_mid_agent_retakes_the_trials_after_the_ttl_and_counts_nothing_twice() {
    let f = fleet().await;
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
    let f = fleet().await;
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
        std::fs::read_dir(outbox.join("leases")).unwrap().count(),
        0,
        "and so is the lease journal"
    );
}

/// Outcomes waiting in an outbox directory (its `leases/` journal aside).
fn outbox_entries(outbox: &std::path::Path) -> usize {
    std::fs::read_dir(outbox)
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_stops_asking_lets_the_attempt_finish_and_exits_cleanly() {
    let f = fleet().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pin_mismatch_is_identity_mismatch_naming_every_key_and_the_lane_leaves() {
    let f = fleet().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = campaign_text("pins", 4, 1, "pairing = \"none\"", "", "")
        .replace("[retry]", "[driver.expect]\nprotocol = \"lanes-driver/1\"\ndataset_commit = \"abc123\"\nagent_sha256 = \"ff00\"\n[retry]");
    c.submit(submit_request(&text)).await.unwrap();
    let _w = Worker::start(&f.coord.url(), f.dir.path(), 2, "h");
    let deadline = Instant::now() + Duration::from_secs(30);
    let rows = loop {
        let rows = rows(&f.store, "pins").await;
        if rows.len() >= 2 {
            break rows;
        }
        assert!(Instant::now() < deadline, "no blocked rows: {rows:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for r in &rows {
        assert_eq!(r.status, lanes_common::row::Status::Blocked);
        assert_eq!(r.failure_kind, Some(FailureKind::IdentityMismatch));
        assert!(!r.is_final);
        let e = r.error.as_deref().unwrap_or_default();
        assert!(
            e.contains("dataset_commit") && e.contains("agent_sha256"),
            "{e}"
        );
        assert!(
            !e.contains("protocol:"),
            "a matching pin is not listed: {e}"
        );
    }
    // Both lanes left the campaign: several heartbeats and credit rounds later, nothing more.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        self::rows(&f.store, "pins").await.len(),
        2,
        "a lane kept taking the campaign's work"
    );
    let st = c
        .get(pb::GetRequest { id: "pins".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(st.state, pb::CampaignState::Running as i32);
}

/// Plants a secret in the payload and in the driver env, runs a campaign, then greps every
/// row, the worker's debug log and every artifact for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secrets_never_reach_rows_logs_or_artifacts() {
    let f = fleet().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let payload_secret = "PAYLOAD-SECRET-7f3a9";
    let env_secret = "ENV-SECRET-51c2e";
    let mut text = campaign_text(
        "secrets",
        0,
        1,
        "pairing = \"none\"",
        "faults = { boot_failed = 0.3, evaluator_error = 0.2 }",
        "infra_backoff_s = 0",
    );
    text = text.replace(
        "[driver]\n",
        "[driver]\nsecret_payload_keys = [\"vm_password\"]\nenv = { API_KEY = \"$LANES_TEST_SECRET\" }\n",
    );
    for i in 0..6 {
        text = text.replace(
            "items = [\n",
            &format!("items = [\n  {{ id = \"S{i}\", payload = {{ instruction = \"task {i}\", vm_password = \"{payload_secret}\" }} }},\n"),
        );
    }
    c.submit(submit_request(&text)).await.unwrap();
    let artifacts = f.dir.path().join("art");
    let log = f.dir.path().join("worker.log");
    let _w = Worker::start_with(
        &f.coord.url(),
        &artifacts,
        2,
        "h",
        &[("LANES_TEST_SECRET", env_secret)],
        Some(&log),
    );
    let st = wait_ended(&f.coord.url(), "secrets", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&f.store, "secrets").await;
    let all_rows = serde_json::to_string(&rows).unwrap();
    for s in [payload_secret, env_secret] {
        assert!(!all_rows.contains(s), "a row holds {s}");
    }
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(logs.len() > 100, "the debug log was written");
    for s in [payload_secret, env_secret] {
        assert!(!logs.contains(s), "the worker log holds {s}");
    }
    let mut files = 0;
    let mut stack = vec![artifacts.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files += 1;
                let bytes = std::fs::read(&p).unwrap();
                let text = String::from_utf8_lossy(&bytes);
                for s in [payload_secret, env_secret] {
                    assert!(!text.contains(s), "{} holds {s}", p.display());
                }
            }
        }
    }
    assert!(files >= 6, "artifacts were written ({files})");
}

/// The shellbench example (a real benchmark on the Python helper: real shell commands, real
/// files, a real evaluator) reaches done, and the careful arm passes more than the naive one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shellbench_reaches_done_and_the_careful_arm_wins() {
    let f = fleet().await;
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let campaign =
        lanes_common::spec::load_file(&repo.join("examples/shellbench/campaign.toml")).unwrap();
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(pb::SubmitRequest::try_from(&campaign).unwrap())
        .await
        .unwrap();
    let _w = Worker::start_in(&repo, &f.coord.url(), &f.dir.path().join("art"), 4);
    let st = wait_ended(&f.coord.url(), "shellbench", Duration::from_secs(240)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32, "{st:?}");
    let rows = rows(&f.store, "shellbench").await;
    let passes = |arm: &str| {
        rows.iter()
            .filter(|r| r.counted && r.arm.as_str() == arm && r.passed == Some(true))
            .count()
    };
    let (careful, naive) = (passes("careful"), passes("naive"));
    assert!(careful > naive, "careful {careful} vs naive {naive}");
    assert!(
        rows.iter()
            .filter(|r| r.counted)
            .all(|r| r.driver.as_ref().is_some_and(|d| !d.name.is_empty()))
    );
}

/// A tiny task API for the HTTP agent adapter; each task behaves as its payload's `mode`
/// says: complete, fail, budget (a budget stop), or hang (until cancelled).
async fn task_api() -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let cancels = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Arc<std::sync::Mutex<BTreeMap<String, (String, bool)>>> = Default::default();
    let seen = cancels.clone();
    tokio::spawn(async move {
        let mut next = 0u64;
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            // Read the head, then the body by Content-Length.
            let (head, mut body) = loop {
                let n = s.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break (String::new(), Vec::new());
                }
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break (
                        String::from_utf8_lossy(&buf[..i]).into_owned(),
                        buf[i + 4..].to_vec(),
                    );
                }
            };
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            while body.len() < len {
                let n = s.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
            let mut parts = head.split_whitespace();
            let (method, path) = (
                parts.next().unwrap_or(""),
                parts.next().unwrap_or("").to_owned(),
            );
            let answer = if method == "POST" && path == "/api/tasks" {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let mode = v["payload"]["mode"]
                    .as_str()
                    .unwrap_or("complete")
                    .to_owned();
                next += 1;
                tasks
                    .lock()
                    .unwrap()
                    .insert(next.to_string(), (mode, false));
                serde_json::json!({ "id": next.to_string() })
            } else if method == "POST" && path.ends_with("/cancel") {
                let id = path
                    .trim_start_matches("/api/tasks/")
                    .trim_end_matches("/cancel")
                    .to_owned();
                if let Some(t) = tasks.lock().unwrap().get_mut(&id) {
                    t.1 = true;
                }
                seen.lock().unwrap().push(id);
                serde_json::json!({})
            } else {
                let id = path.trim_start_matches("/api/tasks/").to_owned();
                let t = tasks.lock().unwrap().get(&id).cloned();
                match t {
                    Some((m, _)) if m == "complete" => {
                        serde_json::json!({"status": "completed", "turns": 4, "cost_usd": 0.02, "final_answer": "done"})
                    }
                    Some((m, _)) if m == "fail" => {
                        serde_json::json!({"status": "failed", "reason": "tool_error"})
                    }
                    Some((m, _)) if m == "budget" => {
                        serde_json::json!({"status": "completed", "reason": "budget_exhausted", "turns": 30})
                    }
                    Some((_, true)) => serde_json::json!({"status": "cancelled"}),
                    Some(_) => serde_json::json!({"status": "running"}),
                    None => serde_json::json!({"status": "unknown"}),
                }
            };
            let body = answer.to_string();
            let _ = s
                .write_all(format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes())
                .await;
        }
    });
    (url, cancels)
}

/// The HTTP agent adapter drives a task API that completes, fails, stops on its budget and
/// hangs until its timeout: the rows say completed, agent_error, completed with
/// runtime_outcome = budget_exhausted, and timeout (after a cancel the API saw).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_http_agent_adapter_maps_task_api_outcomes() {
    let f = fleet().await;
    let (api, cancels) = task_api().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = format!(
        "id = \"http\"\nphase1_runs = 1\nschedule_seed = 5\npairing = \"none\"\nlease_ttl_s = 5\n[defaults]\ntimeout_s = 10\n[[arms]]\nid = \"api\"\nconfig = {{ http_agent = \"{api}\" }}\n[driver]\nsim = {{ default_pass_rate = 1.0 }}\n[tasks]\nitems = [\n  {{ id = \"complete\", payload = {{ mode = \"complete\" }} }},\n  {{ id = \"fail\", payload = {{ mode = \"fail\" }} }},\n  {{ id = \"budget\", payload = {{ mode = \"budget\" }} }},\n  {{ id = \"hang\", timeout_s = 1, payload = {{ mode = \"hang\" }} }},\n]\n"
    );
    c.submit(submit_request(&text)).await.unwrap();
    let _w = Worker::start(&f.coord.url(), f.dir.path(), 2, "h");
    let st = wait_ended(&f.coord.url(), "http", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&f.store, "http").await;
    let row = |task: &str| {
        rows.iter()
            .find(|r| r.task.as_str() == task && r.counted)
            .unwrap_or_else(|| panic!("{task}: {rows:#?}"))
    };
    use lanes_common::row::Status;
    assert_eq!(
        (
            row("complete").status,
            row("complete").runtime_outcome.as_deref()
        ),
        (Status::Completed, Some("completed"))
    );
    assert_eq!(row("complete").turns, Some(4));
    assert_eq!(
        (row("fail").status, row("fail").runtime_outcome.as_deref()),
        (Status::AgentError, Some("tool_error"))
    );
    assert_eq!(
        (
            row("budget").status,
            row("budget").runtime_outcome.as_deref()
        ),
        (Status::Completed, Some("budget_exhausted")),
        "a budget stop stays visible"
    );
    assert_eq!(row("hang").status, Status::Timeout);
    assert_eq!(
        cancels.lock().unwrap().len(),
        1,
        "the hung task was cancelled through the api"
    );
}

/// A test driver on the Python helper: boot may hand out a guest health URL, the gate answers
/// as the payload says, the agent runs `agent_s` seconds (stopping on cancel), evaluate passes.
fn python_driver(dir: &std::path::Path) -> std::path::PathBuf {
    driver_file(
        dir,
        "test_driver.py",
        r#"    name, version = "test-driver", "1.0"

    def boot(self, p):
        url = p["payload"].get("health_url")
        return {"health_url": url} if url else {}

    declared = set()

    def gate(self, p):
        g = p["payload"].get("gate", "proceed")
        if g == "infeasible":
            return {"infeasible": True, "turns": 2, "reason": "premise false", "cost_usd": 0.02}
        if g == "error":
            raise DriverError("the gate broke")
        return {"infeasible": False, "turns": 1, "cost_usd": 0.01}

    def declare_infeasible(self, p):
        # The official infeasible action; only the INF task is really infeasible.
        self.declared.add(p["attempt"]["tag"])
        return {}

    def run_agent(self, p):
        tag = p["attempt"]["tag"]
        end = time.time() + float(p["payload"].get("agent_s", 0.05))
        while time.time() < end:
            if self.cancelled(tag):
                return {"status": "cancelled", "turns": 1}
            time.sleep(0.02)
        return {"status": "completed", "turns": 3, "cost_usd": 0.1}

    def evaluate(self, p):
        if p["attempt"]["tag"] in self.declared:
            ok = p["payload"].get("gate") == "infeasible"
            return {"score": float(ok), "passed": ok, "checks": [{"name": "fail_action", "passed": ok}]}
        return {"score": 1.0, "passed": True, "checks": []}
"#,
    )
}

/// Writes a driver on the Python helper: `class_body` is the body of a `Driver` subclass.
fn driver_file(dir: &std::path::Path, name: &str, class_body: &str) -> std::path::PathBuf {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/drivers");
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "import sys, time\nsys.path.insert(0, {repo:?})\nfrom lanes_driver import Driver, DriverError\n\nclass TestDriver(Driver):\n{class_body}\nif __name__ == \"__main__\":\n    TestDriver.main()\n",
            repo = repo.display().to_string()
        ),
    )
    .unwrap();
    path
}

/// A guest health endpoint whose liveness the test switches.
async fn guest(alive: Arc<std::sync::atomic::AtomicBool>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/health", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            if alive.load(std::sync::atomic::Ordering::SeqCst) {
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    .await;
            }
            // A dead guest answers nothing: the connection just closes.
        }
    });
    url
}

fn driver_campaign(id: &str, driver: &std::path::Path, head: &str, items: &str) -> String {
    format!(
        "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 9\npairing = \"none\"\nlease_ttl_s = 5\n{head}\n[defaults]\ntimeout_s = 20\n[[arms]]\nid = \"a\"\n[driver]\ncommand = [\"python3\", {:?}]\n[retry]\ninfra_backoff_s = 0\n[tasks]\nitems = [\n{items}]\n",
        driver.display().to_string()
    )
}

/// A worker killed mid-agent and restarted (same worker id and outbox) forfeits the leases
/// its previous process held: the coordinator takes them back at once and the retries run,
/// instead of waiting out a 120 s lease. Before the fix the campaign waited for the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_worker_forfeits_the_leases_it_cannot_publish() {
    let f = fleet().await;
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
            mine[0].error.as_deref().unwrap().contains("restarted"),
            "{:?}",
            mine[0]
        );
        assert!(mine[1].counted && mine[1].attempt == 2, "{:?}", mine[1]);
    }
    // The journal is empty once everything is acknowledged.
    let left = std::fs::read_dir(art.join(".outbox/leases"))
        .unwrap()
        .count();
    assert_eq!(left, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_guest_that_dies_mid_agent_is_guest_lost_then_retried() {
    let f = fleet().await;
    let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let url = guest(alive.clone()).await;
    let driver = python_driver(f.dir.path());
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = driver_campaign(
        "guest",
        &driver,
        "",
        &format!("  {{ id = \"G\", payload = {{ health_url = \"{url}\", agent_s = 6.0 }} }},\n"),
    );
    c.submit(submit_request(&text)).await.unwrap();
    let mut w = Command::new(env!("CARGO_BIN_EXE_lanes"));
    w.args([
        "worker",
        "--coordinator",
        &f.coord.url(),
        "--lanes",
        "1",
        "--host",
        "h",
        "--guest-grace-s",
        "1",
    ])
    .arg("--artifacts")
    .arg(f.dir.path().join("art"))
    .env("LANES_LANE_TOKEN", LANE_TOKEN)
    .env("RUST_LOG", "warn")
    .stdout(Stdio::null());
    let _w = Worker(w.spawn().unwrap());
    // Kill the guest once the agent runs; bring it back once the loss is recorded.
    wait_for_agent(&mut c, "guest").await;
    alive.store(false, std::sync::atomic::Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(30);
    while rows(&f.store, "guest").await.is_empty() {
        assert!(
            Instant::now() < deadline,
            "the dead guest was never noticed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    alive.store(true, std::sync::atomic::Ordering::SeqCst);
    let st = wait_ended(&f.coord.url(), "guest", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&f.store, "guest").await;
    assert_eq!(
        rows[0].failure_kind,
        Some(FailureKind::GuestLost),
        "{rows:#?}"
    );
    assert!(rows[0].score.is_none(), "a dead guest is never a score");
    assert!(
        rows.last().unwrap().counted && rows.last().unwrap().attempt == 2,
        "{rows:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gate_infeasible_is_declared_and_scored_by_the_evaluator() {
    let f = fleet().await;
    let driver = python_driver(f.dir.path());
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let items = "  { id = \"INF\", payload = { gate = \"infeasible\" } },\n  { id = \"GO\", payload = { gate = \"proceed\" } },\n  { id = \"ERR\", payload = { gate = \"error\" } },\n";
    c.submit(submit_request(&driver_campaign(
        "gate",
        &driver,
        "gate = true",
        items,
    )))
    .await
    .unwrap();
    let _w = Worker::start(&f.coord.url(), &f.dir.path().join("art"), 1, "h");
    let st = wait_ended(&f.coord.url(), "gate", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&f.store, "gate").await;
    let row = |t: &str| rows.iter().find(|r| r.task.as_str() == t).unwrap();
    use lanes_common::row::{GateVerdict, InfeasibleSource, Status};
    // INFEASIBLE: no agent; the official infeasible action was submitted and the evaluator
    // scored it, so a correctly detected infeasible task passes.
    let inf = row("INF");
    assert_eq!(inf.status, Status::Completed);
    assert_eq!(
        (inf.score, inf.passed, inf.infeasible_source),
        (Some(1.0), Some(true), Some(InfeasibleSource::Gate)),
        "{inf:#?}"
    );
    assert_eq!(inf.checks[0].name, "fail_action");
    let gate = inf.gate.as_ref().expect("the gate's answer is in the row");
    assert_eq!(gate.verdict, GateVerdict::Infeasible);
    assert_eq!(gate.reason.as_deref(), Some("premise false"));
    assert_eq!((gate.turns, gate.cost_usd), (2, Some(0.02)));
    // The gate's turns and cost are the attempt's, even with no agent.
    assert_eq!((inf.turns, inf.cost_usd), (Some(2), Some(0.02)));
    // PROCEED and an error: the agent ran (after a fresh reset) and was evaluated.
    for t in ["GO", "ERR"] {
        assert_eq!(
            (row(t).status, row(t).score),
            (Status::Completed, Some(1.0)),
            "{t}"
        );
        assert!(row(t).infeasible_source.is_none());
    }
    assert_eq!(
        row("GO").gate.as_ref().unwrap().verdict,
        GateVerdict::Proceed
    );
    let err = row("ERR").gate.as_ref().unwrap();
    assert_eq!(err.verdict, GateVerdict::Error);
    assert!(err.reason.as_deref().unwrap().contains("the gate broke"));
    // The gate's turns and cost count toward the attempt's.
    assert_eq!(row("GO").turns, Some(3 + 1));
    let cost = row("GO").cost_usd.unwrap();
    assert!((cost - 0.11).abs() < 1e-9, "{cost}");
    assert_eq!(row("ERR").turns, Some(3));
}

/// Two providers, one of which rate-limits like a real provider (every request inside the
/// window is refused). Run once without the provider-wide pause and once with it: the pause
/// must cut the rate-limit failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_provider_pause_cuts_rate_limit_failures() {
    let f = fleet().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let _w = Worker::start(&f.coord.url(), f.dir.path(), 1, "h");
    let mut counts = Vec::new();
    for (id, pause) in [("nopause", false), ("pause", true)] {
        let text = campaign_text(
            id,
            20,
            1,
            &format!("pairing = \"none\"\nrate_limit_pause = {pause}"),
            "agent_s = [0.02, 0.05], rate_limit_reset_s = 2.0, faults = { rate_limit = 0.15 }",
            "rate_limit_backoff_s = 2",
        );
        c.submit(submit_request(&text)).await.unwrap();
        let st = wait_ended(&f.coord.url(), id, Duration::from_secs(120)).await;
        assert_eq!(st.state, pb::CampaignState::Done as i32);
        let rows = rows(&f.store, id).await;
        counts.push(
            rows.iter()
                .filter(|r| r.failure_kind == Some(FailureKind::RateLimit))
                .count(),
        );
    }
    eprintln!(
        "rate-limit failures: without the pause {}, with it {}",
        counts[0], counts[1]
    );
    assert!(counts[0] > 0, "the provider never rate-limited");
    assert!(
        counts[1] < counts[0],
        "the pause did not cut rate-limit failures: {counts:?}"
    );
}
