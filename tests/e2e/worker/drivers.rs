//! Real drivers on the Python helper (guest health, the gate, the shellbench example) and
//! what they must never leak (secrets).

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lanes_common::proto as pb;
use lanes_common::row::FailureKind;
use lanes_tests::campaign_watch::{wait_ended, wait_for_agent};
use lanes_tests::coordinator::{CLIENT_TOKEN, LANE_TOKEN};
use lanes_tests::fleet::{Fleet, rows};
use lanes_tests::lane_client::{client, submit_request};
use lanes_tests::python_driver::driver_file;
use lanes_tests::worker_campaigns::{campaign_text, driver_campaign};

use crate::worker::Worker;

/// Plants a secret in the payload and in the driver env, runs a campaign, then greps every
/// row, the worker's debug log and every artifact for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secrets_never_reach_rows_logs_or_artifacts() {
    let f = Fleet::start().await;
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
        "[driver]\nsecret_payload_keys = [\"vm_password\"]\nenv = { API_KEY = \"$TEST_SECRET_SOURCE\" }\n",
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
    // The built-in sim gets no campaign env; as the --driver override it does (the names
    // --allow-env lists), so the secret reaches a driver process.
    let _w = Worker::start_args(
        &f.coord.url(),
        &artifacts,
        2,
        "h",
        &[("TEST_SECRET_SOURCE", env_secret)],
        Some(&log),
        &[
            "--allow-env",
            "API_KEY,TEST_SECRET_SOURCE",
            "--driver",
            env!("CARGO_BIN_EXE_lanes"),
            "driver",
            "sim",
            "--",
        ],
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
            } else if p.is_file() {
                // Files only: the worker's control socket lives here too.
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
    let f = Fleet::start().await;
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
            .filter(|r| r.counted && r.arm.as_str() == arm && r.result.passed == Some(true))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_guest_that_dies_mid_agent_is_guest_lost_then_retried() {
    let f = Fleet::start().await;
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
        "--allow-campaign-commands",
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
    assert!(
        rows[0].result.score.is_none(),
        "a dead guest is never a score"
    );
    assert!(
        rows.last().unwrap().counted && rows.last().unwrap().attempt == 2,
        "{rows:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gate_infeasible_is_declared_and_scored_by_the_evaluator() {
    let f = Fleet::start().await;
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
        (
            inf.result.score,
            inf.result.passed,
            inf.result.infeasible_source
        ),
        (Some(1.0), Some(true), Some(InfeasibleSource::Gate)),
        "{inf:#?}"
    );
    assert_eq!(inf.result.checks[0].name, "fail_action");
    let gate = inf
        .result
        .gate
        .as_ref()
        .expect("the gate's answer is in the row");
    assert_eq!(gate.verdict, GateVerdict::Infeasible);
    assert_eq!(gate.reason.as_deref(), Some("premise false"));
    assert_eq!((gate.turns, gate.cost_usd), (2, Some(0.02)));
    // The gate's turns and cost are the attempt's, even with no agent.
    assert_eq!(
        (inf.result.turns, inf.result.cost_usd),
        (Some(2), Some(0.02))
    );
    // PROCEED and an error: the agent ran (after a fresh reset) and was evaluated.
    for t in ["GO", "ERR"] {
        assert_eq!(
            (row(t).status, row(t).result.score),
            (Status::Completed, Some(1.0)),
            "{t}"
        );
        assert!(row(t).result.infeasible_source.is_none());
    }
    assert_eq!(
        row("GO").result.gate.as_ref().unwrap().verdict,
        GateVerdict::Proceed
    );
    let err = row("ERR").result.gate.as_ref().unwrap();
    assert_eq!(err.verdict, GateVerdict::Error);
    assert!(err.reason.as_deref().unwrap().contains("the gate broke"));
    // The gate's turns and cost count toward the attempt's.
    assert_eq!(row("GO").result.turns, Some(3 + 1));
    let cost = row("GO").result.cost_usd.unwrap();
    assert!((cost - 0.11).abs() < 1e-9, "{cost}");
    assert_eq!(row("ERR").result.turns, Some(3));
}
