//! The built-in HTTP agent adapter, for agents that run behind a task API:
//! `POST /api/tasks`, then `GET /api/tasks/{id}` until `completed`, `failed`, `cancelled` or
//! `rejected_duplicate`, and `POST /api/tasks/{id}/cancel` when the lane cancels (at the task
//! timeout, on a lost lease, on a campaign cancel). An arm chooses it with
//! `config = { http_agent = "http://host:port" }`; boot, reset and evaluate still go to the
//! driver.
//!
//! The API's terminal status and reason map to the row's status and `runtime_outcome`, so a
//! budget stop stays visible as `runtime_outcome = budget_exhausted` rather than hidden as a
//! plain completion.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use lanes_common::row::FailureKind;

use crate::driver::protocol::{AgentParams, AgentResult, AgentStatus};
use crate::watchdog::HealthUrl;

/// How long a cancelled task may take to reach a terminal status.
const CANCEL_WAIT: Duration = Duration::from_secs(60);
/// Longest response body read from the task API.
const MAX_BODY: usize = 1024 * 1024;

/// One HTTP/1.1 request with a JSON body; returns the status code and the parsed body.
async fn request(
    base: &HealthUrl,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let io = async {
        let mut s = TcpStream::connect((base.host.as_str(), base.port))
            .await
            .map_err(|e| format!("task api unreachable: {e}"))?;
        let payload = body.map(|b| b.to_string()).unwrap_or_default();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
            base.host,
            payload.len()
        );
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > MAX_BODY {
                return Err("task api answer too large".to_owned());
            }
        }
        let text = String::from_utf8_lossy(&buf);
        let (head, body) = text.split_once("\r\n\r\n").ok_or("malformed http answer")?;
        let code: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or("malformed http status line")?;
        let value = if body.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(body).map_err(|e| format!("task api answered non-json: {e}"))?
        };
        Ok((code, value))
    };
    tokio::time::timeout(Duration::from_secs(30), io)
        .await
        .map_err(|_| "task api did not answer within 30s".to_owned())?
}

fn infra(error: String) -> AgentResult {
    AgentResult {
        status: AgentStatus::InfraError,
        failure_kind: Some(FailureKind::HarnessError),
        reset_epoch: None,
        runtime_outcome: None,
        infeasible: false,
        final_text: None,
        turns: None,
        tokens: None,
        cost_usd: None,
        quota: None,
        error: Some(error),
    }
}

/// Maps a terminal task to the agent's result. `cancelled_by_us`: the lane asked for it.
fn terminal(task: &Value, cancelled_by_us: bool) -> Option<AgentResult> {
    let status = task.get("status")?.as_str()?;
    let reason = task
        .get("reason")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let (status, runtime_outcome) = match status {
        "completed" => (AgentStatus::Completed, reason.or(Some("completed".into()))),
        "failed" => (AgentStatus::AgentError, reason.or(Some("failed".into()))),
        // The lifecycle turns a cancel it asked for into timeout or a release.
        "cancelled" if cancelled_by_us => {
            (AgentStatus::Cancelled, reason.or(Some("cancelled".into())))
        }
        "cancelled" => (
            AgentStatus::AgentError,
            reason.or(Some("cancelled_by_agent".into())),
        ),
        "rejected_duplicate" => {
            return Some(infra("task api rejected the task as a duplicate".into()));
        }
        _ => return None,
    };
    Some(AgentResult {
        status,
        failure_kind: None,
        reset_epoch: None,
        runtime_outcome,
        infeasible: task
            .get("infeasible")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        final_text: task
            .get("final_answer")
            .and_then(Value::as_str)
            .map(str::to_owned),
        turns: task.get("turns").and_then(Value::as_u64).map(|t| t as u32),
        tokens: None,
        cost_usd: task.get("cost_usd").and_then(Value::as_f64),
        quota: None,
        error: None,
    })
}

/// Runs one agent task to its end. `cancel` flips to true when the lane cancels.
pub async fn run(
    base: &str,
    params: &AgentParams,
    mut cancel: tokio::sync::watch::Receiver<bool>,
    poll: Duration,
) -> AgentResult {
    let base = match HealthUrl::parse(base) {
        Ok(b) => b,
        Err(e) => return infra(e),
    };
    let body = json!({
        "task": params.task,
        "arm": params.arm,
        "config": params.arm_config,
        "payload": params.payload,
        "seed": params.seed,
        "timeout_s": params.timeout_s,
        "max_turns": params.max_turns,
        "max_cost_usd": params.max_cost_usd,
        "tag": params.attempt.tag,
    });
    let id = match request(&base, "POST", "/api/tasks", Some(&body)).await {
        Ok((code, v)) if (200..300).contains(&code) => match v.get("id").and_then(|i| {
            i.as_str()
                .map(str::to_owned)
                .or_else(|| i.as_u64().map(|n| n.to_string()))
        }) {
            Some(id) => id,
            None => return infra("task api created a task without an id".into()),
        },
        Ok((code, v)) => return infra(format!("task api refused the task: http {code}: {v}")),
        Err(e) => return infra(e),
    };
    let mut cancelled: Option<tokio::time::Instant> = None;
    loop {
        match request(&base, "GET", &format!("/api/tasks/{id}"), None).await {
            Ok((200, task)) => {
                if let Some(r) = terminal(&task, cancelled.is_some()) {
                    return r;
                }
            }
            Ok((code, v)) => return infra(format!("task api: http {code}: {v}")),
            Err(e) => return infra(e),
        }
        if cancelled.is_some_and(|at| at.elapsed() > CANCEL_WAIT) {
            // The API never confirmed the cancel: stop waiting, say so.
            let mut r = infra(format!("task api did not confirm the cancel of task {id}"));
            r.status = AgentStatus::Cancelled;
            r.failure_kind = None;
            r.runtime_outcome = Some("cancel_unconfirmed".into());
            return r;
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            changed = cancel.changed(), if cancelled.is_none() => {
                if changed.is_ok() && *cancel.borrow() {
                    cancelled = Some(tokio::time::Instant::now());
                    if let Err(e) = request(&base, "POST", &format!("/api/tasks/{id}/cancel"), None).await {
                        tracing::warn!(error = %e, "task api cancel failed");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
}
