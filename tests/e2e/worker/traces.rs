//! One OpenTelemetry trace per attempt, end to end: a real `lanes coordinator` (exporting
//! over OTLP/gRPC) and a real `lanes worker` (over OTLP/HTTP protobuf) send their spans to a
//! collector in this test, which implements both OTLP receivers. A Python driver fails one
//! trial's first boot, so that trial is retried, and echoes planted secrets everywhere.
//! Checked: the span tree of a counted attempt across both processes, the retry's span link,
//! the attributes, the rows' `trace_id`, the driver's traceparent, JSON logs with trace ids,
//! and that no secret reaches any span.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use tokio_stream::StreamExt;

use lanes_common::proto as pb;
use lanes_common::row::{Row, Status};
use lanes_tests::campaign_watch::wait_ended;
use lanes_tests::coordinator::{CLIENT_TOKEN, LANE_TOKEN};
use lanes_tests::lane_client::{client, submit_request};
use lanes_tests::python_driver::driver_file;

use crate::worker::Worker;

const PAYLOAD_SECRET: &str = "TRACE-PAYLOAD-SECRET-93be1";
const ENV_SECRET: &str = "TRACE-ENV-SECRET-0d44f";
const COLLECTOR_KEY: &str = "collector-key-6b1e";

/// A span as the collector received it, with the service that sent it.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    trace_id: String,
    span_id: String,
    parent: String,
    name: String,
    attrs: BTreeMap<String, String>,
    events: Vec<(String, BTreeMap<String, String>)>,
    links: Vec<(String, String)>,
    status_code: i32,
    status_message: String,
    /// Everything else the span carries, for the secret scan.
    resource: String,
}

#[derive(Clone, Default)]
struct Received {
    spans: Arc<Mutex<Vec<Got>>>,
    /// The `authorization` header of every export, by protocol.
    auth: Arc<Mutex<Vec<(String, String)>>>,
}

fn value(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn attrs(kv: &[KeyValue]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|k| (k.key.clone(), value(&k.value)))
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Received {
    fn take(&self, req: ExportTraceServiceRequest, protocol: &str, auth: Option<String>) {
        self.auth
            .lock()
            .unwrap()
            .push((protocol.to_owned(), auth.unwrap_or_default()));
        let mut spans = self.spans.lock().unwrap();
        for rs in req.resource_spans {
            let resource = rs
                .resource
                .as_ref()
                .map(|r| attrs(&r.attributes))
                .unwrap_or_default();
            let service = resource.get("service.name").cloned().unwrap_or_default();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    let status = s.status.clone().unwrap_or_default();
                    spans.push(Got {
                        service: service.clone(),
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent: hex(&s.parent_span_id),
                        name: s.name.clone(),
                        attrs: attrs(&s.attributes),
                        events: s
                            .events
                            .iter()
                            .map(|e| (e.name.clone(), attrs(&e.attributes)))
                            .collect(),
                        links: s
                            .links
                            .iter()
                            .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                            .collect(),
                        status_code: status.code,
                        status_message: status.message,
                        resource: format!("{resource:?}"),
                    });
                }
            }
        }
    }
}

#[tonic::async_trait]
impl TraceService for Received {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let auth = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        self.take(request.into_inner(), "grpc", auth);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Serves the OTLP/gRPC and OTLP/HTTP receivers on loopback ports; answers their addresses.
async fn collector(got: Received) -> (String, String) {
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let grpc_addr = grpc.local_addr().unwrap();
    let svc = TraceServiceServer::new(got.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(grpc))
            .await
            .unwrap();
    });
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http_addr = http.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let got = got.clone();
                async move {
                    assert_eq!(
                        headers.get("content-type").and_then(|v| v.to_str().ok()),
                        Some("application/x-protobuf")
                    );
                    let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                    let auth = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    got.take(req, "http", auth);
                    ExportTraceServiceResponse::default().encode_to_vec()
                }
            },
        ),
    );
    tokio::spawn(async move { axum::serve(http, app).await.unwrap() });
    (format!("http://{grpc_addr}"), format!("http://{http_addr}"))
}

/// Fails the first boot of task `T1` (retried), passes everything else, and puts the planted
/// secrets in its errors, logs and progress. Its final text reports the traceparent it got
/// for `run_agent` and the TRACEPARENT its agent's environment had.
fn driver(dir: &Path) -> std::path::PathBuf {
    driver_file(
        dir,
        "trace_driver.py",
        r#"    name, version = "trace-driver", "1.0"

    def leak(self, p, where):
        import os
        s = p["payload"]["secret"] + " " + os.environ.get("API_KEY", "")
        self.log("info", where + " " + s)
        self.progress(p["attempt"]["tag"], turns=1, message=where + " " + s)
        return s

    def boot(self, p):
        s = self.leak(p, "boot")
        if p["task"] == "T1" and p["attempt"]["attempt"] == 1:
            raise DriverError("boot failed: " + s, failure_kind="boot_failed")
        return {}

    def gate(self, p):
        return {"infeasible": False, "turns": 1}

    def run_agent(self, p):
        import os
        self.leak(p, "agent")
        seen = p["attempt"].get("traceparent", "") + " " + os.environ.get("TRACEPARENT", "")
        return {"status": "completed", "turns": 2, "final_text": seen,
                "tokens": {"input": 120, "output": 34}}

    def evaluate(self, p):
        self.leak(p, "evaluate")
        return {"score": 1.0, "passed": True, "checks": [{"name": "ok", "passed": True}]}
"#,
    )
}

fn campaign(driver: &Path) -> String {
    format!(
        "id = \"traced\"\nphase1_runs = 1\nschedule_seed = 3\npairing = \"none\"\nlease_ttl_s = 10\ngate = true\n[defaults]\ntimeout_s = 30\n[[arms]]\nid = \"a\"\nconfig = {{ model = \"test-model-1\" }}\n[driver]\ncommand = [\"python3\", {:?}]\nsecret_payload_keys = [\"secret\"]\nenv = {{ API_KEY = \"$TRACE_API_KEY\" }}\n[retry]\ninfra_backoff_s = 0\ninfra_retries = 2\n[tasks]\nitems = [\n  {{ id = \"T0\", payload = {{ secret = \"{PAYLOAD_SECRET}\" }} }},\n  {{ id = \"T1\", payload = {{ secret = \"{PAYLOAD_SECRET}\" }} }},\n]\n",
        driver.display().to_string()
    )
}

/// A process killed on drop, unless it was stopped first.
struct Proc(Child);

/// SIGTERM, then wait: the process drains and flushes its spans.
fn stop(child: &mut Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the process did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `lanes coordinator` on the embedded store with JSON logs; answers it and its URL.
fn coordinator(dir: &Path, grpc_collector: &str, log: &Path) -> (Proc, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_lanes"))
        .args([
            "coordinator",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
        ])
        .arg("--data-dir")
        .arg(dir.join("store"))
        .env("LANES_CLIENT_TOKEN", CLIENT_TOKEN)
        .env("LANES_LANE_TOKEN", LANE_TOKEN)
        .env("RUST_LOG", "info")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", grpc_collector)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            format!("authorization=Bearer%20{COLLECTOR_KEY}"),
        )
        .env_remove("OTEL_SERVICE_NAME")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lanes coordinator");
    let mut proc = Proc(child);
    let stderr = proc.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let log = log.to_owned();
    std::thread::spawn(move || {
        let mut file = std::fs::File::create(log).unwrap();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            use std::io::Write;
            let _ = writeln!(file, "{line}");
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("the coordinator logs where it listens");
        let v: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("a log line that is not JSON ({e}): {line}"));
        if v["message"] == "coordinator listening" {
            let addr = v["addr"].as_str().expect("addr field").to_owned();
            return (proc, format!("http://{addr}"));
        }
    }
}

async fn rows(url: &str, id: &str) -> Vec<Row> {
    let mut c = client(url, Some(CLIENT_TOKEN)).await;
    let mut s = c
        .rows(pb::RowsRequest {
            id: id.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut out = Vec::new();
    while let Some(r) = s.next().await {
        out.push(serde_json::from_str(&r.unwrap().json).unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_attempt_is_one_trace_across_coordinator_worker_and_driver() {
    let dir = tempfile::tempdir().unwrap();
    let got = Received::default();
    let (grpc, http) = collector(got.clone()).await;
    let coord_log = dir.path().join("coordinator.log");
    let (mut coord, url) = coordinator(dir.path(), &grpc, &coord_log);
    let driver = driver(dir.path());
    let mut c = client(&url, Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&campaign(&driver))).await.unwrap();
    let worker_log = dir.path().join("worker.log");
    let traces_endpoint = format!("{http}/v1/traces");
    let mut worker = Worker::start_args(
        &url,
        &dir.path().join("art"),
        1,
        "trace-host",
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                traces_endpoint.as_str(),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                &format!("authorization=Bearer%20{COLLECTOR_KEY}"),
            ),
            ("TRACE_API_KEY", ENV_SECRET),
        ],
        Some(&worker_log),
        &[
            "--allow-campaign-commands",
            "--allow-env",
            "API_KEY,TRACE_API_KEY",
            "--log-format",
            "json",
        ],
    );
    let st = wait_ended(&url, "traced", Duration::from_secs(90)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&url, "traced").await;
    // Both processes drain and flush their spans on SIGTERM.
    stop(&mut worker.0);
    stop(&mut coord.0);

    let row = |task: &str, attempt: u32| {
        rows.iter()
            .find(|r| r.task.as_str() == task && r.attempt == attempt)
            .unwrap_or_else(|| panic!("no row for {task} attempt {attempt}: {rows:#?}"))
    };
    let counted = row("T0", 1);
    assert!(counted.counted, "{counted:#?}");
    let failed = row("T1", 1);
    assert_eq!(failed.failure_kind.map(|k| k.as_str()), Some("boot_failed"));
    let retried = row("T1", 2);
    assert!(retried.counted && retried.status == Status::Completed);

    // Every attempt's spans arrive (the worker's after the coordinator's acknowledgement).
    let trace_of = |r: &Row| r.trace_id.clone().expect("rows carry their trace id");
    let wanted = [trace_of(counted), trace_of(failed), trace_of(retried)];
    let deadline = Instant::now() + Duration::from_secs(30);
    let spans = loop {
        let spans = got.spans.lock().unwrap().clone();
        let complete = wanted.iter().all(|t| {
            ["claim", "attempt", "complete", "publish"]
                .iter()
                .all(|n| spans.iter().any(|s| &s.trace_id == t && s.name == *n))
        });
        if complete {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "spans missing; got {:#?}",
            spans
                .iter()
                .map(|s| (&s.service, &s.name, &s.trace_id))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // The counted attempt: claim (coordinator) -> attempt (worker) -> phases and complete.
    let t0 = trace_of(counted);
    let in_trace: Vec<&Got> = spans.iter().filter(|s| s.trace_id == t0).collect();
    let one = |name: &str| {
        let found: Vec<&&Got> = in_trace.iter().filter(|s| s.name == name).collect();
        assert_eq!(
            found.len(),
            1,
            "one {name} span in the trace: {in_trace:#?}"
        );
        *found[0]
    };
    let claim = one("claim");
    assert_eq!(claim.service, "lanes-coordinator");
    assert_eq!(claim.parent, "", "the claim span starts the trace");
    let attempt = one("attempt");
    assert_eq!(attempt.service, "lanes-worker");
    assert_eq!(attempt.parent, claim.span_id);
    for phase in ["admit", "boot", "gate", "agent", "evaluate", "publish"] {
        let s = one(phase);
        assert_eq!(s.service, "lanes-worker", "{phase}");
        assert_eq!(s.parent, attempt.span_id, "{phase} is a child of attempt");
    }
    // With the gate on, a feasible gate is followed by a second, verified reset.
    let resets: Vec<&&Got> = in_trace.iter().filter(|s| s.name == "reset").collect();
    assert_eq!(resets.len(), 2, "{in_trace:#?}");
    assert!(resets.iter().all(|s| s.parent == attempt.span_id));
    let complete = one("complete");
    assert_eq!(complete.service, "lanes-coordinator");
    assert_eq!(
        complete.parent, attempt.span_id,
        "the store commit is under attempt"
    );
    assert_eq!(complete.attrs["lanes.counted"], "true");
    // A trace per attempt: nothing else shares it.
    assert_eq!(in_trace.len(), 11, "{in_trace:#?}");

    // The attributes.
    for (k, v) in [
        ("lanes.campaign", "traced"),
        ("lanes.trial_id", counted.trial_id.as_str()),
        ("lanes.task", "T0"),
        ("lanes.arm", "a"),
        ("lanes.run_index", "0"),
        ("lanes.attempt", "1"),
        ("lanes.host", "trace-host"),
        ("gen_ai.request.model", "test-model-1"),
    ] {
        assert_eq!(claim.attrs.get(k).map(String::as_str), Some(v), "claim {k}");
        assert_eq!(
            attempt.attrs.get(k).map(String::as_str),
            Some(v),
            "attempt {k}"
        );
    }
    assert!(
        attempt.attrs.contains_key("lanes.lane"),
        "{:?}",
        attempt.attrs
    );
    for (k, v) in [
        ("lanes.status", "completed"),
        ("lanes.counted", "true"),
        ("lanes.score", "1"),
        ("gen_ai.usage.input_tokens", "120"),
        ("gen_ai.usage.output_tokens", "34"),
    ] {
        assert_eq!(
            attempt.attrs.get(k).map(String::as_str),
            Some(v),
            "attempt {k}"
        );
    }
    assert_ne!(attempt.status_code, 2, "a scored attempt is not an error");

    // The failed attempt: an error status with an exception event naming its kind.
    let failed_attempt = spans
        .iter()
        .find(|s| s.trace_id == trace_of(failed) && s.name == "attempt")
        .unwrap();
    assert_eq!(failed_attempt.attrs["lanes.failure_kind"], "boot_failed");
    assert_eq!(failed_attempt.status_code, 2, "status ERROR");
    assert!(
        failed_attempt.status_message.contains("boot failed"),
        "{failed_attempt:#?}"
    );
    let exception = failed_attempt
        .events
        .iter()
        .find(|(n, _)| n == "exception")
        .expect("an exception event");
    assert_eq!(exception.1["exception.type"], "boot_failed");
    assert!(exception.1["exception.message"].contains("boot failed"));

    // The retry is a trace of its own, whose claim links to the attempt before it.
    let retry_claim = spans
        .iter()
        .find(|s| s.trace_id == trace_of(retried) && s.name == "claim")
        .unwrap();
    let failed_claim = spans
        .iter()
        .find(|s| s.trace_id == trace_of(failed) && s.name == "claim")
        .unwrap();
    assert_ne!(trace_of(retried), trace_of(failed));
    assert_eq!(
        retry_claim.links,
        vec![(failed_claim.trace_id.clone(), failed_claim.span_id.clone())]
    );
    assert!(claim.links.is_empty(), "a first attempt links to nothing");

    // The driver got the agent span's traceparent, in its params and as TRACEPARENT.
    let agent = one("agent");
    let tp = format!("00-{}-{}-01", agent.trace_id, agent.span_id);
    assert_eq!(
        counted.result.final_text.as_deref(),
        Some(format!("{tp} {tp}").as_str())
    );

    // No planted secret anywhere in any span; the collector's key reached it as a header.
    for s in &spans {
        assert!(s.resource.contains("service.name"), "{s:#?}");
        let text = format!("{s:?}");
        for secret in [
            PAYLOAD_SECRET,
            ENV_SECRET,
            COLLECTOR_KEY,
            LANE_TOKEN,
            CLIENT_TOKEN,
        ] {
            assert!(!text.contains(secret), "a span holds {secret}: {s:#?}");
        }
    }
    let auth = got.auth.lock().unwrap().clone();
    for protocol in ["grpc", "http"] {
        assert!(
            auth.iter()
                .any(|(p, a)| p == protocol && *a == format!("Bearer {COLLECTOR_KEY}")),
            "OTEL_EXPORTER_OTLP_HEADERS reached the {protocol} receiver: {auth:?}"
        );
    }

    // JSON logs: every line parses, and lines inside the attempt carry its trace id.
    let worker_lines = std::fs::read_to_string(&worker_log).unwrap();
    let mut inside = 0;
    for line in worker_lines.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("a worker log line is not JSON ({e}): {line}"));
        if v["message"] == "attempt finished" && v["trace_id"] == t0.as_str() {
            assert_eq!(v["span_id"].as_str().map(str::len), Some(16));
            inside += 1;
        }
    }
    assert_eq!(inside, 1, "the attempt's log line carries its trace id");
    for (what, text) in [
        ("worker log", worker_lines),
        (
            "coordinator log",
            std::fs::read_to_string(&coord_log).unwrap(),
        ),
    ] {
        for secret in [PAYLOAD_SECRET, ENV_SECRET, COLLECTOR_KEY] {
            assert!(!text.contains(secret), "the {what} holds {secret}");
        }
    }
}

/// A worker that exports nothing, beside a coordinator that does: the coordinator's commit
/// spans still join each attempt's trace (under its `claim`), and the driver is handed the
/// claim's context, never the id of a span no collector will see.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_untraced_worker_leaves_the_coordinators_spans_in_the_attempts_trace() {
    let dir = tempfile::tempdir().unwrap();
    let got = Received::default();
    let (grpc, _http) = collector(got.clone()).await;
    let (mut coord, url) = coordinator(dir.path(), &grpc, &dir.path().join("coordinator.log"));
    let driver = driver(dir.path());
    let mut c = client(&url, Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&campaign(&driver))).await.unwrap();
    let mut worker = Worker::start_args(
        &url,
        &dir.path().join("art"),
        1,
        "plain-host",
        &[("TRACE_API_KEY", ENV_SECRET)],
        None,
        &[
            "--allow-campaign-commands",
            "--allow-env",
            "API_KEY,TRACE_API_KEY",
        ],
    );
    let st = wait_ended(&url, "traced", Duration::from_secs(90)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&url, "traced").await;
    stop(&mut worker.0);
    stop(&mut coord.0);

    let scored: Vec<&Row> = rows.iter().filter(|r| r.counted).collect();
    assert_eq!(scored.len(), 2, "{rows:#?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let spans = got.spans.lock().unwrap().clone();
        let all_in = scored.iter().all(|r| {
            let t = r.trace_id.clone().unwrap();
            spans
                .iter()
                .any(|s| s.trace_id == t && s.name == "complete")
        });
        if all_in {
            assert!(
                spans.iter().all(|s| s.service == "lanes-coordinator"),
                "the worker exports nothing"
            );
            for r in &scored {
                let t = r.trace_id.clone().unwrap();
                let claim = spans
                    .iter()
                    .find(|s| s.trace_id == t && s.name == "claim")
                    .expect("the claim span");
                let complete = spans
                    .iter()
                    .find(|s| s.trace_id == t && s.name == "complete")
                    .unwrap();
                assert_eq!(complete.parent, claim.span_id, "complete hangs under claim");
                let tp = format!("00-{}-{}-01", claim.trace_id, claim.span_id);
                assert_eq!(
                    r.result.final_text.as_deref(),
                    Some(format!("{tp} {tp}").as_str()),
                    "the driver got the claim's context"
                );
            }
            break;
        }
        assert!(Instant::now() < deadline, "spans missing: {spans:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
