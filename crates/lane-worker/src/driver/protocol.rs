//! The driver protocol (`lanes-driver/1`): JSON-RPC 2.0 over the driver's stdin/stdout, one
//! JSON object per line. The lane sends requests (and the `cancel` notification); the driver
//! answers each request by id and may send `progress` and `log` notifications at any time.
//!
//! These are the params and results of every method, shared by the lane's driver runtime and
//! the built-in sim driver, so both sides agree by construction.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use lanes_common::limits;
use lanes_common::row::{Check, DriverIdentity, FailureKind, QuotaReading, TokenUsage};

/// The protocol name sent in `initialize`.
pub const PROTOCOL: &str = "lanes-driver/1";
/// The longest line either side may send, in bytes. Longer is a protocol error.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// Method names.
pub mod method {
    pub const INITIALIZE: &str = "initialize";
    pub const BOOT: &str = "boot";
    pub const RESET: &str = "reset";
    pub const GATE: &str = "gate";
    /// After an infeasible gate: submit the benchmark's official infeasible action.
    pub const DECLARE_INFEASIBLE: &str = "declare_infeasible";
    pub const RUN_AGENT: &str = "run_agent";
    pub const EVALUATE: &str = "evaluate";
    pub const HEALTH: &str = "health";
    pub const TEARDOWN: &str = "teardown";
    pub const SHUTDOWN: &str = "shutdown";
    /// Notification from the lane: stop the running agent of this token.
    pub const CANCEL: &str = "cancel";
    /// Notifications from the driver.
    pub const PROGRESS: &str = "progress";
    pub const LOG: &str = "log";
}

/// `initialize` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InitializeParams {
    pub protocol: String,
    pub lane: String,
    pub host: String,
    /// The sim driver's config (JSON of `SimConfig`), when the campaign uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<serde_json::Value>,
}

/// `initialize` result: the driver's identity, recorded in every row.
pub type InitializeResult = DriverIdentity;

/// The attempt every per-attempt call is about. `tag` labels any environment the driver
/// creates, so a later `teardown` can find leftovers of a crashed lane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRef {
    pub campaign: String,
    pub trial_id: String,
    pub attempt: u32,
    pub tag: String,
    /// W3C traceparent of the lane's span of this call's phase (`agent` for `run_agent`), for
    /// a driver that traces its own work as children of it; the coordinator's `claim` of the
    /// attempt when the worker does not export spans.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub traceparent: String,
}

/// `boot` and `reset` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnvParams {
    pub attempt: AttemptRef,
    pub task: String,
    pub arm: String,
    pub seed: u64,
    /// The task payload, with `secret_payload_keys` included (the driver needs them).
    pub payload: serde_json::Value,
    /// The task's folder on this host, for a task that is a folder (`[tasks] harbor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_dir: Option<String>,
    /// The attempt's artifact folder, where a driver may copy what the attempt left (logs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_dir: Option<String>,
}

/// `boot` and `reset` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvResult {
    /// Reset only: the environment was checked to be in its initial state.
    #[serde(default)]
    pub verified: bool,
    /// A guest health URL the lane polls during the agent phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_url: Option<String>,
    /// Boot only: pins of this attempt's environment (the image it ran, the task's digest),
    /// added to the attempt's row beside the driver's own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pins: BTreeMap<String, String>,
}

/// `gate` result: only an explicit `infeasible = true` skips the agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    #[serde(default)]
    pub infeasible: bool,
    #[serde(default)]
    pub turns: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the gate's model calls cost; counted in the row and the budget.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_cost"
    )]
    pub cost_usd: Option<f64>,
}

/// `run_agent` params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentParams {
    pub attempt: AttemptRef,
    pub task: String,
    pub arm: String,
    pub arm_config: serde_json::Value,
    pub payload: serde_json::Value,
    pub seed: u64,
    pub timeout_s: u32,
    pub max_turns: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

/// How the agent ended, in the driver's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    Completed,
    Timeout,
    MaxTurns,
    AgentError,
    Violation,
    /// The harness or provider failed; `failure_kind` says how.
    InfraError,
    /// The agent stopped because the lane sent `cancel`.
    Cancelled,
}

/// `run_agent` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentResult {
    pub status: AgentStatus,
    /// For `infra_error`: the failure kind (`rate_limit`, `overloaded`, `auth`,
    /// `guest_lost`, `harness_error`, …). A name this lane does not know reads as none, which
    /// the lifecycle records as `harness_error`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "known_kind"
    )]
    pub failure_kind: Option<FailureKind>,
    /// For `rate_limit`: when the provider's window resets, epoch seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_epoch: Option<i64>,
    /// The agent's own terminal reason, e.g. `budget_exhausted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_outcome: Option<String>,
    /// The agent declared the task infeasible.
    #[serde(default)]
    pub infeasible: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u32>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_tokens"
    )]
    pub tokens: Option<TokenUsage>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded_cost"
    )]
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<QuotaReading>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `evaluate` result: the official evaluator's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluateResult {
    pub score: f64,
    pub passed: bool,
    #[serde(default)]
    pub checks: Vec<Check>,
}

/// `health` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthResult {
    pub ok: bool,
}

/// `teardown` params: one attempt's environment, or (no tag) everything this lane's earlier
/// processes left behind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TeardownParams {
    pub lane: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// `cancel` notification params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelParams {
    pub tag: String,
}

/// `progress` notification params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressParams {
    #[serde(default)]
    pub tag: String,
    #[serde(default)]
    pub turns: Option<u32>,
    #[serde(default)]
    pub message: Option<String>,
}

/// `log` notification params.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogParams {
    #[serde(default)]
    pub level: String,
    pub message: String,
}

/// JSON-RPC error codes the protocol uses.
pub mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    /// The call failed in the driver; `data.failure_kind` may name the infra kind.
    pub const DRIVER_ERROR: i64 = -32000;
}

/// The `data` of a driver error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<String>,
    #[serde(default, flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// A cost within `0..=MAX_ATTEMPT_COST_USD`: beyond it the answer is broken (a protocol error
/// in the attempt's row), never a spend.
fn bounded_cost<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let cost: Option<f64> = Option::deserialize(d)?;
    if let Some(c) = cost {
        limits::check_cost_usd("cost_usd", c).map_err(serde::de::Error::custom)?;
    }
    Ok(cost)
}

/// Token counts of at most `MAX_ATTEMPT_TOKENS` each, or the answer is broken.
fn bounded_tokens<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<TokenUsage>, D::Error> {
    let tokens: Option<TokenUsage> = Option::deserialize(d)?;
    if let Some(t) = &tokens {
        limits::check_tokens(t).map_err(serde::de::Error::custom)?;
    }
    Ok(tokens)
}

/// Reads a failure kind leniently: an unknown name is no kind, not a broken answer.
fn known_kind<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<FailureKind>, D::Error> {
    let name: Option<String> = Option::deserialize(d)?;
    Ok(name.and_then(|n| n.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_kind_is_read_by_name_and_an_unknown_one_is_none() {
        let known: AgentResult =
            serde_json::from_str(r#"{"status":"infra_error","failure_kind":"rate_limit"}"#)
                .unwrap();
        assert_eq!(known.failure_kind, Some(FailureKind::RateLimit));
        let unknown: AgentResult =
            serde_json::from_str(r#"{"status":"infra_error","failure_kind":"gremlins"}"#).unwrap();
        assert_eq!(
            unknown.failure_kind, None,
            "an unknown name is not a broken answer"
        );
        let missing: AgentResult = serde_json::from_str(r#"{"status":"completed"}"#).unwrap();
        assert_eq!(missing.failure_kind, None);
    }

    #[test]
    fn figures_beyond_their_maxima_are_a_broken_answer() {
        use lanes_common::limits::{MAX_ATTEMPT_COST_USD, MAX_ATTEMPT_TOKENS};
        let agent = |extra: &str| {
            serde_json::from_str::<AgentResult>(&format!(r#"{{"status":"completed"{extra}}}"#))
        };
        let ok = agent(&format!(
            r#","cost_usd":{MAX_ATTEMPT_COST_USD},"tokens":{{"input":{MAX_ATTEMPT_TOKENS},"output":0}}"#
        ))
        .unwrap();
        assert_eq!(ok.cost_usd, Some(MAX_ATTEMPT_COST_USD));
        for (extra, field) in [
            (r#","cost_usd":1e308"#, "cost_usd"),
            (r#","cost_usd":-0.01"#, "cost_usd"),
            (
                r#","tokens":{"input":18446744073709551615,"output":0}"#,
                "tokens.input",
            ),
            (
                r#","tokens":{"input":0,"output":0,"cache_write":10000000001}"#,
                "tokens.cache_write",
            ),
        ] {
            let e = agent(extra).unwrap_err().to_string();
            assert!(e.contains(field), "{extra}: {e}");
        }
        let e = serde_json::from_str::<GateResult>(r#"{"infeasible":false,"cost_usd":1e300}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cost_usd"), "{e}");
    }
}
