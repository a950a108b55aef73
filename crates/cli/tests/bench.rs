//! `lanes bench` end to end: the real binary starts its own coordinator child, runs simulated
//! lanes through it on the embedded store and on a real redis-server, and reports every
//! figure. These tests check behaviour only (counts, ordering, presence), never timing.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lanes_tests::redis_server::RedisServer;
use serde_json::Value;

/// The most a bench run may take here before the test gives up on it.
const RUN_DEADLINE: Duration = Duration::from_secs(300);

fn lanes() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lanes"))
}

/// A running `lanes bench`: its stderr lines arrive on a channel, its stdout is collected.
struct Bench {
    child: Child,
    stderr: mpsc::Receiver<String>,
    stdout: std::thread::JoinHandle<String>,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(args: &[&str]) -> Bench {
    let mut child = lanes()
        .arg("bench")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lanes bench");
    let mut out = child.stdout.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = child.stderr.take().unwrap();
    let (tx, stderr) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    Bench {
        child,
        stderr,
        stdout,
    }
}

impl Bench {
    /// Waits for the exit (bounded), and answers the status, stdout and stderr.
    fn finish(mut self) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + RUN_DEADLINE;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "lanes bench still runs after {RUN_DEADLINE:?}; stderr:\n{}",
                self.stderr.try_iter().collect::<Vec<_>>().join("\n")
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let stdout = std::mem::replace(&mut self.stdout, std::thread::spawn(String::new))
            .join()
            .unwrap();
        // The stderr reader ends with the process; collect what it has.
        let mut stderr = Vec::new();
        while let Ok(l) = self.stderr.recv_timeout(Duration::from_secs(5)) {
            stderr.push(l);
        }
        (status, stdout, stderr.join("\n"))
    }

    /// Waits (bounded) for a stderr line containing `needle`.
    fn wait_for_line(&self, needle: &str) {
        let deadline = Instant::now() + RUN_DEADLINE;
        let mut seen = Vec::new();
        loop {
            match self
                .stderr
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(l) if l.contains(needle) => return,
                Ok(l) => seen.push(l),
                Err(_) => panic!("no line with {needle:?}; stderr:\n{}", seen.join("\n")),
            }
        }
    }
}

/// Runs a bench to its end and parses its JSON.
fn run_json(args: &[&str]) -> (ExitStatus, Value) {
    let (status, stdout, stderr) = start(args).finish();
    let v: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\nstderr:\n{stderr}"));
    (status, v)
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("{path:?} is not a number in {v:#}"))
}

/// The figures every finished run has, whatever its store.
fn check_complete_run(v: &Value, trials: f64) {
    assert_eq!(v["ending"], "done", "{v:#}");
    assert_eq!(f(v, &["trials"]), trials);
    assert_eq!(f(v, &["trials_final"]), trials, "{v:#}");
    assert_eq!(f(v, &["trials_counted"]), trials, "{v:#}");
    assert!(f(v, &["attempts"]) >= trials, "{v:#}");
    assert!(f(v, &["attempts_per_s"]) > 0.0);
    assert_eq!(v["lane_errors"], serde_json::json!([]), "{v:#}");
    for kind in ["claim", "renew", "outcome_ack"] {
        let (p50, p99, max) = (
            f(v, &[kind, "p50_ms"]),
            f(v, &[kind, "p99_ms"]),
            f(v, &[kind, "max_ms"]),
        );
        assert!(f(v, &[kind, "count"]) >= trials, "{kind}: {v:#}");
        assert!(p50 <= p99 && p99 <= max, "{kind} out of order: {v:#}");
    }
    for fig in ["cpu_s", "cpu_percent", "rss_mb", "peak_rss_mb"] {
        assert!(
            f(v, &["coordinator", fig]) > 0.0,
            "coordinator {fig}: {v:#}"
        );
    }
    assert!(f(v, &["ceiling", "ops_per_s"]) > 0.0, "{v:#}");
    assert!(f(v, &["ratio_to_ceiling_percent"]) > 0.0, "{v:#}");
    coordinator_is_gone(v);
}

/// The coordinator child was killed and reaped: nothing is left behind.
fn coordinator_is_gone(v: &Value) {
    let pid = f(v, &["coordinator", "pid"]) as u32;
    assert!(pid > 0);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the coordinator child {pid} outlived the bench"
    );
}

#[test]
fn embedded_bench_runs_every_trial_through_a_child_coordinator() {
    let (status, v) = run_json(&[
        "--embedded",
        "--lanes",
        "4",
        "--trials",
        "100",
        "--runs",
        "4",
        "--json",
        "--duration",
        "250",
    ]);
    assert!(status.success(), "{status}: {v:#}");
    // 25 tasks run 4 times each: every one of the 100 trials.
    check_complete_run(&v, 100.0);
    assert_eq!(v["store"], "embedded");
    assert_eq!(f(&v, &["sessions"]), 1.0);
    assert_eq!(v["ceiling"]["kind"], "redb_durable_commit");
    assert!(v["redis_memory_per_trial_bytes"].is_null());
    let summary = v["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("lanes bench: embedded, 4 lanes, 100 trials: "),
        "{summary}"
    );
}

#[test]
fn real_workers_run_every_trial_end_to_end_and_none_outlives_the_bench() {
    let (status, v) = run_json(&[
        "--embedded",
        "--workers",
        "2",
        "--lanes",
        "4",
        "--trials",
        "40",
        "--json",
        "--duration",
        "250",
    ]);
    assert!(status.success(), "{status}: {v:#}");
    assert_eq!(v["ending"], "done", "{v:#}");
    assert_eq!(f(&v, &["trials_final"]), 40.0, "{v:#}");
    assert_eq!(f(&v, &["trials_counted"]), 40.0, "{v:#}");
    // Every row is an attempt; the sim driver injects no fault, so one each.
    assert_eq!(f(&v, &["attempts"]), 40.0, "{v:#}");
    assert_eq!(f(&v, &["sessions"]), 2.0);
    assert_eq!(f(&v, &["workers", "count"]), 2.0);
    assert!(f(&v, &["workers", "cpu_s"]) > 0.0, "{v:#}");
    // Real workers measure no claim latency, and the report does not pretend they did.
    assert_eq!(f(&v, &["claim", "count"]), 0.0, "{v:#}");
    let summary = v["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("lanes bench: embedded, 4 lanes in 2 workers, 40 trials: ")
            && !summary.contains("claim p99"),
        "{summary}"
    );
    coordinator_is_gone(&v);
    for pid in v["workers"]["pids"].as_array().unwrap() {
        let pid = pid.as_u64().unwrap();
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "worker {pid} outlived the bench"
        );
    }
}

#[test]
fn redis_bench_measures_memory_per_trial_and_the_lua_ceiling_and_cleans_up() {
    let redis = RedisServer::start();
    let url = redis.url();
    let (status, v) = run_json(&[
        "--redis",
        &url,
        "--lanes",
        "4",
        "--lanes-per-session",
        "2",
        "--trials",
        "100",
        "--json",
        "--duration",
        "250",
        "--keep-campaign",
    ]);
    assert!(status.success(), "{status}: {v:#}");
    check_complete_run(&v, 100.0);
    assert_eq!(v["store"], "redis");
    assert_eq!(v["campaign_cleanup"], "kept", "{v:#}");
    assert_eq!(f(&v, &["sessions"]), 2.0);
    assert!(f(&v, &["redis_memory_per_trial_bytes"]) > 0.0, "{v:#}");
    assert_eq!(v["ceiling"]["kind"], "redis_evalsha_hsetnx_zadd");
    assert_eq!(f(&v, &["ceiling", "connections"]), 4.0);
    assert!(f(&v, &["ceiling", "ops"]) > 0.0);
    // The ceiling's keys are gone; the campaign's stay (`--keep-campaign`), under its own
    // unique id, done.
    assert_eq!(redis.command(&["KEYS", "lanes-bench-ceiling*"]), "*0");
    let campaign = v["campaign"].as_str().unwrap();
    assert!(
        campaign.starts_with("bench-") && campaign.len() > 12,
        "{campaign}"
    );
    assert_eq!(
        campaign_state(&url, campaign),
        lanes_common::state::CampaignState::Done
    );
    assert!(
        v["summary"].as_str().is_some_and(|s| !s.is_empty()),
        "{v:#}"
    );
}

/// The state a Redis store holds for `campaign`, read straight from the store.
fn campaign_state(url: &str, campaign: &str) -> lanes_common::state::CampaignState {
    use lanes_coordinator::store::{Clock, RedisStore, Store, SystemClock};
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = RedisStore::connect(url, Default::default()).await.unwrap();
        let id = lanes_common::ids::CampaignId::new(campaign).unwrap();
        store.status(&id, SystemClock.now_ms()).await.unwrap().state
    })
}

#[test]
fn a_duration_that_ends_first_still_reports_then_stops_and_deletes_the_campaign() {
    let redis = RedisServer::start();
    let url = redis.url();
    let (status, v) = run_json(&[
        "--redis",
        &url,
        "--lanes",
        "2",
        "--trials",
        "5000",
        "--duration",
        "0.3",
        "--json",
    ]);
    assert!(status.success(), "{status}: {v:#}");
    assert_eq!(v["ending"], "duration", "{v:#}");
    assert!(f(&v, &["trials_final"]) < 5000.0, "{v:#}");
    assert!(f(&v, &["ceiling", "ops_per_s"]) > 0.0, "{v:#}");
    let summary = v["summary"].as_str().unwrap();
    assert!(summary.contains("trials final"), "{summary}");
    coordinator_is_gone(&v);
    // Not left running in the shared store, where real workers would be served its trials,
    // nor left at all: stopped, then deleted once its last attempts ended.
    assert_eq!(v["campaign_cleanup"], "deleted", "{v:#}");
    let campaign = v["campaign"].as_str().unwrap();
    assert_eq!(
        redis.command(&["KEYS", &format!("lanes:{{c:{campaign}}}*")]),
        "*0",
        "every key of the campaign is gone"
    );
    assert_eq!(
        redis.command(&["SISMEMBER", "lanes:campaigns", campaign]),
        ":0"
    );
}

#[test]
fn ctrl_c_stops_the_lanes_kills_the_coordinator_and_still_reports() {
    let bench = start(&[
        "--lanes",
        "2",
        "--trials",
        "5000",
        "--duration",
        "600",
        "--json",
    ]);
    bench.wait_for_line("lanes in 1 sessions running");
    let pid = bench.child.id().to_string();
    let kill = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(kill.success());
    let (status, stdout, stderr) = bench.finish();
    assert_eq!(status.code(), Some(5), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(v["ending"], "interrupted", "{v:#}");
    assert!(v["ceiling"].is_null(), "{v:#}");
    assert!(f(&v, &["trials_final"]) < 5000.0, "{v:#}");
    coordinator_is_gone(&v);
}

#[test]
fn bad_arguments_exit_2_with_a_clear_error() {
    for (args, says) in [
        (
            &["--redis", "redis://127.0.0.1:9/", "--embedded"][..],
            "cannot be used with",
        ),
        (&["--lanes", "0"][..], "--lanes"),
        (&["--trials", "0"][..], "--trials"),
        (
            &["--trials", "10", "--runs", "3"][..],
            "--runs 3 does not divide",
        ),
        (&["--duration", "0"][..], "--duration"),
        (&["--allow-lossy-store"][..], "--redis"),
        (&["--keep-campaign"][..], "--keep-campaign needs --redis"),
    ] {
        let out = lanes().arg("bench").args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
