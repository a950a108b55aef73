use super::*;

#[test]
fn terminal_statuses_map_to_rows() {
    let r = terminal(
        &json!({"status": "completed", "reason": "budget_exhausted", "turns": 7}),
        false,
    )
    .unwrap();
    assert_eq!(r.status, AgentStatus::Completed);
    assert_eq!(r.runtime_outcome.as_deref(), Some("budget_exhausted"));
    assert_eq!(r.turns, Some(7));
    let r = terminal(&json!({"status": "failed"}), false).unwrap();
    assert_eq!(
        (r.status, r.runtime_outcome.as_deref()),
        (AgentStatus::AgentError, Some("failed"))
    );
    assert_eq!(
        terminal(&json!({"status": "cancelled"}), true)
            .unwrap()
            .status,
        AgentStatus::Cancelled
    );
    assert_eq!(
        terminal(&json!({"status": "cancelled"}), false)
            .unwrap()
            .status,
        AgentStatus::AgentError
    );
    let r = terminal(&json!({"status": "rejected_duplicate"}), false).unwrap();
    assert_eq!(r.status, AgentStatus::InfraError);
    assert!(terminal(&json!({"status": "running"}), false).is_none());
}

// The adapter against real servers on 127.0.0.1.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::driver::protocol::AttemptRef;
use crate::http::HttpOptions;
use crate::http::test_server::{Answer, Seen, TestCa, serve, serve_tls};

fn params() -> AgentParams {
    AgentParams {
        attempt: AttemptRef {
            campaign: "c".into(),
            trial_id: "c.t.a.0".into(),
            attempt: 1,
            tag: "tag".into(),
            traceparent: String::new(),
        },
        task: "t".into(),
        arm: "a".into(),
        arm_config: json!({}),
        payload: json!({"key": "hunter22"}),
        seed: 1,
        timeout_s: 10,
        max_turns: 5,
        max_cost_usd: None,
    }
}

/// Runs one task against `base`; the lane cancels when `cancel_after` resolves.
async fn run_until(
    options: HttpOptions,
    base: &str,
    cancel_after: impl std::future::Future<Output = ()> + Send + 'static,
) -> AgentResult {
    let http = HttpClient::new(&options).unwrap();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let canceller = tokio::spawn(async move {
        cancel_after.await;
        let _ = tx.send(true);
        // Held open so the adapter never sees the lane vanish.
        std::future::pending::<()>().await;
    });
    let secrets = crate::secrets::Secrets::new(["hunter22".to_owned()]);
    let result = tokio::time::timeout(
        Duration::from_secs(20),
        run(
            &http,
            base,
            &params(),
            rx,
            Duration::from_millis(10),
            &secrets,
        ),
    )
    .await
    .expect("the adapter finishes within its bounds");
    canceller.abort();
    result
}

async fn run_once(options: HttpOptions, base: &str) -> AgentResult {
    run_until(options, base, std::future::pending()).await
}

/// A task API that creates task `id` and reports it completed.
fn completes(id: &'static str) -> impl Fn(&Seen) -> Answer + Send + Sync + 'static {
    move |seen| match seen.method.as_str() {
        "POST" => Answer::Body(200, json!({ "id": id }).to_string()),
        _ => Answer::Body(200, json!({"status": "completed", "turns": 3}).to_string()),
    }
}

fn error_of(r: &AgentResult) -> &str {
    assert_eq!(r.status, AgentStatus::InfraError, "{r:?}");
    r.error.as_deref().unwrap_or_default()
}

/// Undoes percent-encoding, to compare the path the server saw with the task id.
fn decoded(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            out.push(u8::from_str_radix(&segment[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn chunked_answers_work() {
    let api = serve(|seen: &Seen| {
        let body = match seen.method.as_str() {
            "POST" => json!({"id": "7"}),
            _ => json!({"status": "completed", "turns": 3, "final_answer": "done"}),
        }
        .to_string();
        // Split mid-token, so only a real chunked decoder reassembles it.
        let (a, b) = body.split_at(body.len() / 2);
        Answer::Chunked(200, vec![a.to_owned(), b.to_owned()])
    })
    .await;
    let r = run_once(HttpOptions::default(), &api.url).await;
    assert_eq!(r.status, AgentStatus::Completed, "{r:?}");
    assert_eq!((r.turns, r.final_text.as_deref()), (Some(3), Some("done")));
    let paths: Vec<_> = api.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, ["/api/tasks", "/api/tasks/7"]);
}

/// A redirect is refused, clearly, and never followed: the task (and its payload) stays
/// with the URL the campaign named.
#[tokio::test]
async fn a_redirect_is_refused_not_followed() {
    let elsewhere = serve(completes("1")).await;
    let to = format!("{}/api/tasks", elsewhere.url);
    let api = serve(move |_: &Seen| Answer::Redirect(307, to.clone())).await;
    let r = run_once(HttpOptions::default(), &api.url).await;
    let e = error_of(&r);
    assert!(
        e.contains("http 307") && e.contains("redirect") && e.contains("not followed"),
        "{e}"
    );
    assert!(e.contains(&elsewhere.url), "names where it pointed: {e}");
    assert!(elsewhere.seen().is_empty(), "the redirect was followed");
}

/// Task ids from the API are escaped as one path segment: they cannot climb out of
/// `/api/tasks/`, add a query or a fragment, or be read as a separator — for the poll and the
/// cancel alike.
#[tokio::test]
async fn task_ids_cannot_change_the_request() {
    for (id, wire) in [
        ("../x?y", "..%2Fx%3Fy"),
        ("a/b#c", "a%2Fb%23c"),
        ("..\\admin", "..%5Cadmin"),
        ("%2e%2e", "%252e%252e"),
        ("t 1", "t%201"),
    ] {
        let cancelled = Arc::new(AtomicBool::new(false));
        let polled = Arc::new(tokio::sync::Notify::new());
        let (seen_cancel, seen_poll) = (cancelled.clone(), polled.clone());
        let api = serve(move |seen: &Seen| match seen.method.as_str() {
            "POST" if seen.path.ends_with("/cancel") => {
                seen_cancel.store(true, Ordering::SeqCst);
                Answer::Body(200, "{}".into())
            }
            "POST" => Answer::Body(200, json!({ "id": id }).to_string()),
            _ if seen_cancel.load(Ordering::SeqCst) => {
                Answer::Body(200, json!({"status": "cancelled"}).to_string())
            }
            _ => {
                seen_poll.notify_one();
                Answer::Body(200, json!({"status": "running"}).to_string())
            }
        })
        .await;
        // The lane cancels once the task has been polled.
        let r = run_until(HttpOptions::default(), &api.url, async move {
            polled.notified().await
        })
        .await;
        assert_eq!(r.status, AgentStatus::Cancelled, "{id}: {r:?}");
        assert!(
            cancelled.load(Ordering::SeqCst),
            "{id}: the cancel never reached the task"
        );
        let seen = api.seen();
        let poll = format!("/api/tasks/{wire}");
        let cancel = format!("/api/tasks/{wire}/cancel");
        assert_eq!(seen[1].path, poll, "{id}");
        assert!(seen.iter().any(|s| s.path == cancel), "{id}: {seen:?}");
        for s in &seen[1..] {
            let rest = s.path.strip_prefix("/api/tasks/").unwrap();
            let segment = rest.strip_suffix("/cancel").unwrap_or(rest);
            assert!(!segment.contains(['/', '?', '#', '\\']), "{id}: {}", s.path);
            assert_eq!(decoded(segment), id, "{id}");
        }
    }
}

/// `.` and `..` would vanish from a URL path (polling `/api/tasks` itself): they are refused.
#[tokio::test]
async fn dot_task_ids_are_refused() {
    for id in ["..", ".", ""] {
        let api = serve(completes(id)).await;
        let r = run_once(HttpOptions::default(), &api.url).await;
        assert!(error_of(&r).contains("unusable id"), "{id}: {r:?}");
        assert_eq!(api.seen().len(), 1, "{id}: polled after all");
    }
}

#[tokio::test]
async fn an_oversized_answer_is_refused() {
    let api = serve(|seen: &Seen| match seen.method.as_str() {
        "POST" => Answer::Body(200, json!({"id": "1"}).to_string()),
        // Chunked, so the size is known only while reading.
        _ => Answer::Chunked(
            200,
            vec![json!({"status": "completed", "final_answer": "x".repeat(4096)}).to_string()],
        ),
    })
    .await;
    let r = run_once(
        HttpOptions {
            max_body: 1024,
            ..HttpOptions::default()
        },
        &api.url,
    )
    .await;
    let e = error_of(&r);
    assert!(e.contains("exceeds 1024 bytes"), "{e}");
}

/// A task API that accepts the connection and never answers costs the configured request
/// timeout, not the adapter's life.
#[tokio::test]
async fn a_silent_api_hits_the_request_timeout() {
    let api = serve(|_: &Seen| Answer::Silent).await;
    let started = std::time::Instant::now();
    let r = run_once(
        HttpOptions {
            request_timeout: Duration::from_millis(300),
            ..HttpOptions::default()
        },
        &api.url,
    )
    .await;
    let e = error_of(&r);
    assert!(e.contains("no answer within 300 ms"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_https_api_works_with_the_configured_ca_and_fails_clearly_without() {
    let ca = TestCa::new();
    let api = serve_tls(&ca, completes("9")).await;
    let dir = tempfile::tempdir().unwrap();
    let with_ca = HttpOptions {
        ca_file: Some(ca.write_pem(dir.path())),
        ..HttpOptions::default()
    };
    let r = run_once(with_ca, &api.url).await;
    assert_eq!(r.status, AgentStatus::Completed, "{r:?}");
    assert_eq!(api.seen().len(), 2);
    let r = run_once(HttpOptions::default(), &api.url).await;
    let e = error_of(&r);
    assert!(e.contains("certificate"), "{e}");
    assert_eq!(api.seen().len(), 2, "an unverified server got a request");
}

/// What the API says that reaches the row (an error body, a reason) is scrubbed of the
/// attempt's secrets and cut short.
#[tokio::test]
async fn quoted_answers_are_scrubbed_and_cut() {
    let refusing = serve(|_: &Seen| {
        Answer::Body(
            500,
            format!(
                "bad payload {{\"key\": \"hunter22\"}} {}",
                "z".repeat(10_000)
            ),
        )
    })
    .await;
    let r = run_once(HttpOptions::default(), &refusing.url).await;
    let e = error_of(&r);
    assert!(e.contains("http 500") && e.contains("***"), "{e}");
    assert!(!e.contains("hunter22"), "{e}");
    assert!(e.len() <= QUOTE_MAX + 200, "{} bytes", e.len());

    let long_reason = serve(|seen: &Seen| match seen.method.as_str() {
        "POST" => Answer::Body(200, json!({"id": "1"}).to_string()),
        _ => Answer::Body(
            200,
            json!({"status": "failed", "reason": format!("hunter22 {}", "r".repeat(5000))})
                .to_string(),
        ),
    })
    .await;
    let r = run_once(HttpOptions::default(), &long_reason.url).await;
    let reason = r.runtime_outcome.unwrap();
    assert!(
        reason.starts_with("*** ") && reason.len() <= QUOTE_MAX,
        "{reason}"
    );
}
