//! The HTTP agent adapter against a tiny task API, over plain HTTP and over HTTPS trusted
//! through the worker's `--http-ca`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use lanes_common::proto as pb;
use lanes_tests::campaign_watch::wait_ended;
use lanes_tests::coordinator::CLIENT_TOKEN;
use lanes_tests::fleet::{Fleet, rows};
use lanes_tests::lane_client::{client, submit_request};

use crate::worker::Worker;

type Cancels = Arc<std::sync::Mutex<Vec<String>>>;

/// A tiny task API for the HTTP agent adapter; each task behaves as its payload's `mode`
/// says: complete, fail, budget (a budget stop), or hang (until cancelled).
async fn task_api() -> (String, Cancels) {
    task_api_on(None).await
}

/// [`task_api`], served over TLS by `tls` when given (at `https://127.0.0.1:port`).
async fn task_api_on(tls: Option<tokio_rustls::TlsAcceptor>) -> (String, Cancels) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", listener.local_addr().unwrap());
    let cancels = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tasks: Arc<std::sync::Mutex<BTreeMap<String, (String, bool)>>> = Default::default();
    let seen = cancels.clone();
    tokio::spawn(async move {
        let mut next = 0u64;
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let mut s: Box<dyn Stream> = match &tls {
                Some(acceptor) => match acceptor.accept(tcp).await {
                    Ok(s) => Box::new(s),
                    Err(_) => continue,
                },
                None => Box::new(tcp),
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
            let _ = s.shutdown().await;
        }
    });
    (url, cancels)
}

/// What a connection is served over: TCP, or TLS on TCP.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A throwaway CA (its PEM) and a TLS acceptor for a certificate it signed for 127.0.0.1.
fn test_ca() -> (String, tokio_rustls::TlsAcceptor) {
    use tokio_rustls::rustls;
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().unwrap()).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    (ca.pem(), tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// An `https` task API works end to end when the worker trusts its CA through `--http-ca`
/// (here its env variable, `LANES_HTTP_CA`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_https_task_api_works_through_the_workers_ca_file() {
    let f = Fleet::start().await;
    let (ca_pem, acceptor) = test_ca();
    let ca_file = f.dir.path().join("task-api-ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let (api, _) = task_api_on(Some(acceptor)).await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = format!(
        "id = \"https\"\nphase1_runs = 1\nschedule_seed = 5\npairing = \"none\"\nlease_ttl_s = 5\n[defaults]\ntimeout_s = 10\n[[arms]]\nid = \"api\"\nconfig = {{ http_agent = \"{api}\" }}\n[driver]\nsim = {{ default_pass_rate = 1.0 }}\n[tasks]\nitems = [\n  {{ id = \"complete\", payload = {{ mode = \"complete\" }} }},\n]\n"
    );
    c.submit(submit_request(&text)).await.unwrap();
    let ca = ca_file.to_str().unwrap();
    let _w = Worker::start_with(
        &f.coord.url(),
        f.dir.path(),
        1,
        "h",
        &[("LANES_HTTP_CA", ca)],
        None,
    );
    let st = wait_ended(&f.coord.url(), "https", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&f.store, "https").await;
    let row = rows.iter().find(|r| r.counted).expect("a counted row");
    assert_eq!(
        (
            row.status,
            row.result.runtime_outcome.as_deref(),
            row.result.turns
        ),
        (
            lanes_common::row::Status::Completed,
            Some("completed"),
            Some(4)
        ),
        "{row:#?}"
    );
}

/// `--http-ca` is read at start: a worker whose CA file cannot be read exits at once,
/// naming the file.
#[tokio::test]
async fn a_worker_with_an_unreadable_http_ca_does_not_start() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-ca.pem");
    let log = dir.path().join("worker.log");
    let mut w = Worker::start_with(
        "http://127.0.0.1:1",
        dir.path(),
        1,
        "h",
        &[("LANES_HTTP_CA", missing.to_str().unwrap())],
        Some(&log),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = w.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the worker kept running"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!status.success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("no-such-ca.pem"), "{text}");
}

/// The HTTP agent adapter drives a task API that completes, fails, stops on its budget and
/// hangs until its timeout: the rows say completed, agent_error, completed with
/// runtime_outcome = budget_exhausted, and timeout (after a cancel the API saw).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_http_agent_adapter_maps_task_api_outcomes() {
    let f = Fleet::start().await;
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
            row("complete").result.runtime_outcome.as_deref()
        ),
        (Status::Completed, Some("completed"))
    );
    assert_eq!(row("complete").result.turns, Some(4));
    assert_eq!(
        (
            row("fail").status,
            row("fail").result.runtime_outcome.as_deref()
        ),
        (Status::AgentError, Some("tool_error"))
    );
    assert_eq!(
        (
            row("budget").status,
            row("budget").result.runtime_outcome.as_deref()
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
