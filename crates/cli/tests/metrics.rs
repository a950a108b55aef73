//! `--metrics-listen` end to end: a real coordinator and worker run a sim campaign whose
//! attempts fail and are retried; afterwards `/metrics` agrees with the ledger and parses as
//! OpenMetrics (with Python `prometheus_client`'s reference parser, which
//! `scripts/test.sh` installs and names in `LANES_TEST_PYTHON`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod support;

use support::{Killed, lanes, logged_addr, spawn};

const CLIENT_TOKEN: &str = "metrics-test-client-token";
const LANE_TOKEN: &str = "metrics-test-lane-token-0";

/// `GET /metrics`: the content type and the body.
fn scrape(addr: &str) -> (String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type: ")
                .map(str::to_owned)
        })
        .expect("a content type");
    (content_type, body.to_owned())
}

/// The samples of a scrape: name with labels, and value.
fn samples(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap();
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            (name.to_owned(), labels, value.parse().unwrap())
        })
        .collect()
}

/// Sums the samples of `name` by the value of `label`.
fn by_label(text: &str, name: &str, label: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (n, labels, v) in samples(text) {
        if n == name {
            *out.entry(labels[label].clone()).or_default() += v as u64;
        }
    }
    out
}

fn value(text: &str, name: &str) -> f64 {
    samples(text)
        .into_iter()
        .find(|(n, l, _)| n == name && l.is_empty())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        .2
}

/// Checks the text with the reference OpenMetrics parser when the suite's Python has it.
fn parses_as_openmetrics(text: &str) {
    assert!(text.ends_with("# EOF\n"), "no EOF marker:\n{text}");
    let Ok(python) = std::env::var("LANES_TEST_PYTHON") else {
        eprintln!(
            "!!! LANES_TEST_PYTHON is not set: the OpenMetrics reference parser was NOT run. \
             Run ./scripts/test.sh, which installs it."
        );
        return;
    };
    let mut child = Command::new(python)
        .args([
            "-c",
            "import sys\n\
             from prometheus_client.openmetrics.parser import text_string_to_metric_families\n\
             families = list(text_string_to_metric_families(sys.stdin.read()))\n\
             print(len(families))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the scrape: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let families: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(families > 0, "{text}");
}

/// A sim campaign where boots fail often enough that some trials are retried and some
/// spend their one infra retry and are excluded.
fn write_campaign(dir: &Path) -> std::path::PathBuf {
    let mut text = String::from(
        "id = \"metered\"\nphase1_runs = 2\nschedule_seed = 7\npairing = \"none\"\nlease_ttl_s = 10\n\
         [[arms]]\nid = \"a\"\n\
         [driver]\nsim = { boot_s = 0.01, reset_s = 0.01, agent_s = [0.01, 0.05], evaluate_s = 0.01, \
         pass_rate = { a = 0.6 }, faults = { boot_failed = 0.35, agent_error = 0.1 } }\n\
         [retry]\ninfra_retries = 1\ninfra_backoff_s = 0\n\
         [tasks]\nitems = [\n",
    );
    for i in 0..12 {
        text.push_str(&format!("{{ id = \"t{i}\" }},\n"));
    }
    text.push_str("]\n");
    let path = dir.join("campaign.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn client(args: &[&str], url: &str) -> std::process::Output {
    lanes()
        .args(args)
        .args(["--coordinator", url])
        .env("LANES_CLIENT_TOKEN", CLIENT_TOKEN)
        .output()
        .unwrap()
}

/// Runs the campaign on a coordinator with `store_args`, then checks its and the worker's
/// metrics against the ledger.
/// With `dead_collector`, the coordinator exports its spans to an OTLP endpoint where nothing
/// listens: the campaign must run as well, and the lost spans be counted.
fn counters_agree_with_the_ledger(store_args: &[&str], backend: &str, dead_collector: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut coordinator = lanes();
    coordinator
        .args(["coordinator", "--listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .args(store_args)
        .env("LANES_CLIENT_TOKEN", CLIENT_TOKEN)
        .env("LANES_LANE_TOKEN", LANE_TOKEN)
        .env("LANES_REAPER_DELAY_S", "1");
    if dead_collector {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        coordinator
            .env(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{port}"),
            )
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    }
    let (_coordinator, rx) = spawn(coordinator);
    let metrics = logged_addr(&rx, "metrics listening");
    let addr = logged_addr(&rx, "coordinator listening");
    let url = format!("http://{addr}");

    let mut worker = lanes();
    worker
        .args([
            "worker",
            "--coordinator",
            &url,
            "--lanes",
            "3",
            "--host",
            "h",
        ])
        .args(["--metrics-listen", "127.0.0.1:0", "--artifacts"])
        .arg(dir.path().join("artifacts"))
        .env("LANES_LANE_TOKEN", LANE_TOKEN);
    let (_worker, worker_rx) = spawn(worker);
    let worker_metrics = logged_addr(&worker_rx, "metrics listening");

    let file = write_campaign(dir.path());
    let out = client(&["submit", file.to_str().unwrap()], &url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        let out = client(&["status", "metered", "--json"], &url);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if v["state"] == "done" {
            break v;
        }
        assert!(Instant::now() < deadline, "not done in time: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // On Redis, status names the master the answering coordinator writes to.
    match backend {
        "redis" => {
            assert!(
                status["redis_link"]["master"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("127.0.0.1:")),
                "{status}"
            );
            assert_eq!(status["redis_link"]["failovers"], 0, "{status}");
            let text = client(&["status", "metered"], &url);
            let text = String::from_utf8_lossy(&text.stdout);
            assert!(text.contains("store: redis master 127.0.0.1:"), "{text}");
        }
        _ => assert!(status.get("redis_link").is_none(), "{status}"),
    }
    // A client with a wrong token is refused, and counted.
    let refused = lanes()
        .args(["status", "metered", "--coordinator", &url])
        .env("LANES_CLIENT_TOKEN", "a-wrong-client-token-000")
        .output()
        .unwrap();
    assert!(!refused.status.success());

    let out = client(&["results", "metered"], &url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut rows_by_status: BTreeMap<String, u64> = BTreeMap::new();
    let mut attempts: BTreeSet<(String, u64)> = BTreeSet::new();
    for r in &rows {
        let status = r["status"].as_str().unwrap().to_owned();
        if status == "not_started" {
            continue;
        }
        *rows_by_status.entry(status).or_default() += 1;
        attempts.insert((
            r["trial_id"].as_str().unwrap().to_owned(),
            r["attempt"].as_u64().unwrap(),
        ));
    }
    assert!(
        rows_by_status.keys().any(|s| s != "completed"),
        "the campaign had no failing attempt: {rows_by_status:?}"
    );
    assert!(
        attempts.iter().any(|(_, a)| *a > 1),
        "no trial was retried: {rows_by_status:?}"
    );

    let (content_type, text) = scrape(&metrics);
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    parses_as_openmetrics(&text);
    assert_eq!(
        by_label(&text, "lanes_attempts_finished_total", "status"),
        rows_by_status,
        "{text}"
    );
    assert_eq!(
        value(&text, "lanes_attempts_started_total") as usize,
        attempts.len(),
        "{text}"
    );
    let finals = by_label(&text, "lanes_trials_final_total", "outcome");
    let want: BTreeMap<String, u64> = [
        ("counted", &status["trials_counted"]),
        ("excluded", &status["trials_excluded"]),
        ("not_started", &status["trials_not_started"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.as_u64().unwrap()))
    .filter(|(_, n)| *n > 0)
    .collect();
    assert_eq!(finals, want, "{text}");
    assert_eq!(
        finals.values().sum::<u64>(),
        status["trials_total"].as_u64().unwrap()
    );
    assert_eq!(
        by_label(&text, "lanes_auth_refused_total", "role").get("client"),
        Some(&1),
        "{text}"
    );
    let claims = value(&text, "lanes_claim_duration_seconds_count");
    assert!(claims >= attempts.len() as f64, "{text}");
    let completes: u64 = samples(&text)
        .into_iter()
        .filter(|(n, l, _)| {
            n == "lanes_store_op_duration_seconds_count"
                && l["op"] == "complete"
                && l["backend"] == backend
        })
        .map(|(_, _, v)| v as u64)
        .sum();
    assert!(completes > 0, "{text}");
    if backend == "redis" {
        let masters: Vec<_> = samples(&text)
            .into_iter()
            .filter(|(n, _, _)| n == "lanes_store_redis_master")
            .collect();
        assert_eq!(masters.len(), 1, "{text}");
        assert!(masters[0].1["addr"].starts_with("127.0.0.1:"), "{text}");
        assert_eq!(masters[0].2, 1.0, "{text}");
        assert_eq!(value(&text, "lanes_store_redis_failovers_total"), 0.0);
        assert_eq!(value(&text, "lanes_store_redis_wait_timeouts_total"), 0.0);
        // Completions committed (several to a commit), and took time to.
        assert!(
            value(&text, "lanes_store_redis_commits_total") > 0.0,
            "{text}"
        );
        assert!(
            value(&text, "lanes_store_redis_commit_seconds_total") > 0.0,
            "{text}"
        );
        // Present (`value` panics without it): a round may never have waited.
        value(&text, "lanes_store_redis_round_wait_seconds_total");
    }
    for secret in [CLIENT_TOKEN, LANE_TOKEN, "t0.r0.a"] {
        assert!(!text.contains(secret), "{secret} exposed:\n{text}");
    }

    if dead_collector {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, text) = scrape(&metrics);
            if value(&text, "lanes_otel_spans_dropped_total") > 0.0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no dropped span counted:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    let (_, worker_text) = scrape(&worker_metrics);
    parses_as_openmetrics(&worker_text);
    assert_eq!(value(&worker_text, "lanes_outbox_pending"), 0.0);
    let phases = by_label(&worker_text, "lanes_phase_duration_seconds_count", "phase");
    for phase in ["admit", "agent", "evaluate"] {
        assert!(
            phases.get(phase).is_some_and(|n| *n > 0),
            "{phase}: {worker_text}"
        );
    }
    // Every attempt that ended on the worker observed its admit phase once.
    assert_eq!(phases["admit"] as usize, attempts.len(), "{worker_text}");
    assert!(
        worker_text.contains("lanes_driver_restarts_total "),
        "{worker_text}"
    );
}

#[test]
fn counters_agree_with_the_ledger_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    counters_agree_with_the_ledger(&["--data-dir", data.to_str().unwrap()], "embedded", true);
}

#[test]
fn counters_agree_with_the_ledger_on_redis() {
    let redis = lanes_tests::redis_server::RedisServer::start();
    counters_agree_with_the_ledger(&["--redis", &redis.url()], "redis", false);
}

#[test]
fn lanes_run_serves_both_halves_metrics_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    // Slow enough that the scrape lands while the campaign runs.
    let file = dir.path().join("campaign.toml");
    std::fs::write(
        &file,
        "id = \"runmetered\"\nphase1_runs = 1\nschedule_seed = 1\n[[arms]]\nid = \"a\"\n\
         [driver]\nsim = { agent_s = [1.0, 1.0] }\n\
         [tasks]\nitems = [{ id = \"t0\" }, { id = \"t1\" }, { id = \"t2\" }]\n",
    )
    .unwrap();
    let mut run = Killed(
        lanes()
            .arg("run")
            .arg(&file)
            .args([
                "--lanes",
                "1",
                "--metrics-listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(dir.path().join("data"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = run.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let addr = loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("lanes run prints where its metrics are");
        if let Some(rest) = line.strip_prefix("metrics on http://") {
            break rest.trim_end_matches("/metrics").to_owned();
        }
    };
    assert!(!addr.ends_with(":0"), "the bound port is printed: {addr}");
    let (content_type, text) = scrape(&addr);
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    parses_as_openmetrics(&text);
    // One registry: the coordinator's families and the worker's, and the exporter's
    // (families with labels appear once they have a sample).
    for family in [
        "# TYPE lanes_claim_duration_seconds histogram",
        "# TYPE lanes_attempts_started counter",
        "# TYPE lanes_driver_restarts counter",
        "# TYPE lanes_outbox_pending gauge",
        "# TYPE lanes_otel_spans_dropped counter",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = run.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "lanes run did not finish");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status:?}");
}
