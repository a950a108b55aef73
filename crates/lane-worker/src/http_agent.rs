//! The built-in HTTP agent adapter, for agents that run behind a task API:
//! `POST /api/tasks`, then `GET /api/tasks/{id}` until `completed`, `failed`, `cancelled` or
//! `rejected_duplicate`, and `POST /api/tasks/{id}/cancel` when the lane cancels (at the task
//! timeout, on a lost lease, on a campaign cancel). An arm chooses it with
//! `config = { http_agent = "http://host:port" }` (or `https://`, trusted through the worker's
//! CA file); boot, reset and evaluate still go to the driver.
//!
//! The API's terminal status and reason map to the row's status and `runtime_outcome`, so a
//! budget stop stays visible as `runtime_outcome = budget_exhausted` rather than hidden as a
//! plain completion.
//!
//! The API is the agent's side, so nothing it says is trusted: the task id it hands back is
//! escaped as one path segment, a redirect is refused, and whatever of its answers reaches a
//! row is scrubbed of the attempt's secrets and cut short.

use std::time::Duration;

use reqwest::{Method, Url};
use serde_json::{Value, json};

use lanes_common::row::FailureKind;

use crate::driver::protocol::{AgentParams, AgentResult, AgentStatus};
use crate::http::{HttpClient, Reply, parse_url, shown};
use crate::redact::quote;
use crate::secrets::Secrets;

/// How long a cancelled task may take to reach a terminal status.
const CANCEL_WAIT: Duration = Duration::from_secs(60);
/// Longest piece of a response (an error body, a redirect target, a reason) quoted into a row.
const QUOTE_MAX: usize = 1024;
/// Longest error text the adapter puts into a row.
const ERROR_MAX: usize = 2048;
/// Longest task id accepted from the API.
const ID_MAX: usize = 256;

/// The task API of one attempt: its client, base URL and the attempt's secrets (scrubbed from
/// everything quoted from the API).
struct TaskApi<'a> {
    http: &'a HttpClient,
    base: Url,
    secrets: &'a Secrets,
}

impl TaskApi<'_> {
    /// `base` with its path replaced by `segments`, each escaped as one path segment (a `/`,
    /// `?` or `#` in a task id stays inside its segment).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.set_query(None);
        url.set_fragment(None);
        url.path_segments_mut()
            .expect("http(s) urls have a path")
            .clear()
            .extend(segments);
        url
    }

    /// Text from the API, scrubbed and cut for a row.
    fn quote(&self, text: &str) -> String {
        quote(text, self.secrets, QUOTE_MAX)
    }

    /// One call; `Ok` only for a 2xx answer, with its body parsed as JSON (empty: null).
    async fn call(&self, method: Method, url: Url, body: Option<&Value>) -> Result<Value, String> {
        let what = format!("task api {method} {}", shown(&url));
        let reply = self
            .http
            .send(method, url, body)
            .await
            .map_err(|e| format!("{what}: {e}"))?;
        let Reply {
            status,
            location,
            body,
        } = reply;
        if status.is_redirection() {
            let to = self.quote(location.as_deref().unwrap_or("nowhere"));
            return Err(format!(
                "{what}: http {}: a redirect to {to:?}, which is not followed; give the final url in http_agent",
                status.as_u16()
            ));
        }
        if !status.is_success() {
            let text = self.quote(&String::from_utf8_lossy(&body));
            return Err(format!("{what}: http {}: {text}", status.as_u16()));
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&body).map_err(|e| format!("{what}: answered non-json: {e}"))
    }
}

/// The task id in a create answer: a string or a number, non-empty, at most [`ID_MAX`] bytes,
/// without control characters, and not `.` or `..` (which a URL path would swallow).
fn task_id(created: &Value) -> Result<String, &'static str> {
    let id = match created.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) if n.is_u64() => n.to_string(),
        _ => return Err("task api created a task without an id"),
    };
    if id.is_empty()
        || id.len() > ID_MAX
        || id == "."
        || id == ".."
        || id.chars().any(char::is_control)
    {
        return Err("task api created a task with an unusable id");
    }
    Ok(id)
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

/// Runs one agent task to its end. `cancel` flips to true when the lane cancels. `secrets`
/// are scrubbed from everything quoted from the API before it is cut for the row.
pub async fn run(
    http: &HttpClient,
    base: &str,
    params: &AgentParams,
    cancel: tokio::sync::watch::Receiver<bool>,
    poll: Duration,
    secrets: &Secrets,
) -> AgentResult {
    let mut result = match parse_url(base) {
        Ok(base) => {
            let api = TaskApi {
                http,
                base,
                secrets,
            };
            drive(&api, params, cancel, poll).await
        }
        Err(e) => infra(e.to_string()),
    };
    if let Some(e) = result.error.as_mut() {
        *e = quote(e, secrets, ERROR_MAX);
    }
    if let Some(r) = result.runtime_outcome.as_mut() {
        *r = quote(r, secrets, QUOTE_MAX);
    }
    result
}

/// Creates the task, polls it to a terminal status, and cancels it when the lane says so.
async fn drive(
    api: &TaskApi<'_>,
    params: &AgentParams,
    mut cancel: tokio::sync::watch::Receiver<bool>,
    poll: Duration,
) -> AgentResult {
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
    let created = match api
        .call(Method::POST, api.url(&["api", "tasks"]), Some(&body))
        .await
    {
        Ok(v) => v,
        Err(e) => return infra(e),
    };
    let id = match task_id(&created) {
        Ok(id) => id,
        Err(e) => return infra(e.to_owned()),
    };
    let task_url = api.url(&["api", "tasks", &id]);
    let mut cancelled: Option<tokio::time::Instant> = None;
    loop {
        match api.call(Method::GET, task_url.clone(), None).await {
            Ok(task) => {
                if let Some(r) = terminal(&task, cancelled.is_some()) {
                    return r;
                }
            }
            Err(e) => return infra(e),
        }
        if cancelled.is_some_and(|at| at.elapsed() > CANCEL_WAIT) {
            // The API never confirmed the cancel: stop waiting, say so.
            let mut r = infra(format!(
                "task api did not confirm the cancel of task {:?}",
                api.quote(&id)
            ));
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
                    let url = api.url(&["api", "tasks", &id, "cancel"]);
                    if let Err(e) = api.call(Method::POST, url, None).await {
                        tracing::warn!(error = %e, "task api cancel failed");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
