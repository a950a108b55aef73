//! The campaign: what a campaign file says once it is parsed and validated.
//!
//! Every option is either *measured* (it changes what a trial measures, and so the spec hash)
//! or *operational* (it changes how the campaign is run). The split is structural: operational
//! options live in [`Operational`] and in the driver's run-time fields, and the spec hash never
//! reads them.

pub mod bundle;
pub mod env;
mod error;
pub mod harbor;
mod load;
mod schema;
mod tasks;
mod validate;

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::{ArmId, CampaignId, DriverName};
use crate::row::{FailureKind, Status};
use crate::utc::EpochMs;

pub use error::{SpecError, SpecErrorKind};
pub use load::{load_file, load_sent_str, load_str};
pub use schema::json_schema;
pub(crate) use schema::shape_violations;
pub use tasks::{Payload, Task, parse_tasks_jsonl};
pub use validate::{SpecInvalid, TaskInvalid, validate_tasks};

pub use crate::limits::{MAX_ARMS, MAX_PAYLOAD_BYTES, MAX_TASKS};

/// A validated campaign: its spec and its tasks, in the given order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Campaign {
    pub spec: CampaignSpec,
    pub tasks: Vec<Task>,
}

/// Everything of a campaign except its tasks. Travels as JSON on the wire (`spec_json`) and in
/// the store. Only `id`, `phase1_runs`, `schedule_seed`, `arms` and `driver.kind` are required;
/// every other key has the campaign file's default, and unknown keys are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "Lanes campaign spec (SubmitRequest.spec_json)")]
pub struct CampaignSpec {
    /// The campaign id: lowercase letters, digits and `-`.
    pub id: CampaignId,
    // Measured.
    /// Runs of every (task, arm) in phase 1. At least 1.
    pub phase1_runs: u32,
    /// Runs in phase 2, for tasks that phase 1 did not rule out.
    #[serde(default)]
    pub phase2_runs: u32,
    /// Seeds the arm rotation of the schedule: the same seed gives the same schedule.
    pub schedule_seed: u64,
    #[serde(default)]
    pub pairing: Pairing,
    /// Run the feasibility gate before the agent.
    #[serde(default)]
    pub gate: bool,
    #[serde(default)]
    pub defaults: Defaults,
    /// The arms, in rotation order. At least one.
    pub arms: Vec<Arm>,
    #[serde(default)]
    pub retry: RetryPolicy,
    /// Identity pins (`[driver.expect]` in a campaign file) checked when each lane starts its
    /// driver: the driver must report these values.
    #[serde(default)]
    pub expect: BTreeMap<String, String>,
    // Operational.
    /// Options that change how the campaign runs, not what it measures (top-level keys in a
    /// campaign file).
    #[serde(default)]
    pub ops: Operational,
    pub driver: DriverConfig,
    /// Set on a smoke run (`lanes run --smoke`): the campaign it was derived from. Its rows
    /// say `smoke: true`, and its report says it is not the pre-registered campaign.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smoke: Option<crate::smoke::SmokeOrigin>,
}

impl CampaignSpec {
    /// The runs of a task: phase 1 then phase 2.
    pub fn total_runs(&self) -> u32 {
        self.phase1_runs.saturating_add(self.phase2_runs)
    }

    pub fn arm(&self, id: &ArmId) -> Option<&Arm> {
        self.arms.iter().find(|a| &a.id == id)
    }
}

/// How the trials of one run are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Pairing {
    /// One lane runs a whole run group back to back, in slot order.
    #[default]
    Group,
    /// Every trial is scheduled on its own.
    None,
}

/// Per-task values unless the task sets its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Defaults {
    /// Seconds the agent may run.
    pub timeout_s: u32,
    pub max_turns: u32,
    /// The most one trial may spend, in USD.
    pub max_cost_usd: Option<f64>,
}

impl Default for Defaults {
    fn default() -> Self {
        Self {
            timeout_s: 600,
            max_turns: 30,
            max_cost_usd: None,
        }
    }
}

/// One agent configuration. Arm order is the rotation order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(from = "ArmFields", into = "ArmFields")]
pub struct Arm {
    pub id: ArmId,
    /// Opaque to lanes, handed to the driver (measured).
    pub config: serde_json::Value,
    /// Shared rate-limit pauses and quota (operational). Defaults to the arm id.
    pub provider: String,
    /// The budget reservation until the arm has rows of its own (operational).
    pub expected_cost_usd: Option<f64>,
}

/// An arm as JSON: `provider` may be left out, and is then the arm id.
#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "Arm")]
struct ArmFields {
    /// Letters, digits, `_` and `-` (no dots).
    id: ArmId,
    /// Opaque to Lanes, handed to the driver (measured: part of the spec hash).
    #[serde(default = "empty_object")]
    config: serde_json::Value,
    /// Arms of one provider share rate-limit pauses and quota. Defaults to the arm id.
    #[serde(default)]
    provider: Option<String>,
    /// The budget reservation per trial until the arm has rows of its own, in USD.
    #[serde(default)]
    expected_cost_usd: Option<f64>,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

impl From<ArmFields> for Arm {
    fn from(a: ArmFields) -> Self {
        Arm {
            provider: a.provider.unwrap_or_else(|| a.id.to_string()),
            id: a.id,
            config: a.config,
            expected_cost_usd: a.expected_cost_usd,
        }
    }
}

impl From<Arm> for ArmFields {
    fn from(a: Arm) -> Self {
        ArmFields {
            id: a.id,
            config: a.config,
            provider: Some(a.provider),
            expected_cost_usd: a.expected_cost_usd,
        }
    }
}

/// The retry policy table (measured; docs/CAMPAIGN_FILE.md lists it). Durations in seconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    pub rate_limit_backoff_s: u64,
    pub overloaded_retries: u32,
    pub overloaded_backoff_s: u64,
    pub auth_backoff_s: u64,
    pub preflight_limit: u32,
    pub infra_retries: u32,
    pub infra_backoff_s: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            rate_limit_backoff_s: 60,
            overloaded_retries: 3,
            overloaded_backoff_s: 30,
            auth_backoff_s: 30,
            preflight_limit: 3,
            infra_retries: 1,
            infra_backoff_s: 5,
        }
    }
}

/// Options that change how a campaign runs, never what it measures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Operational {
    /// Seconds a lane's lease lives without a heartbeat. At least 3.
    pub lease_ttl_s: u32,
    /// Seconds after its lease expired that a late outcome is still recorded.
    pub publish_grace_s: u32,
    /// No new attempts start after this time, in milliseconds since the Unix epoch.
    pub cutoff_utc: Option<EpochMs>,
    /// Stop claiming once the spend reaches this, in USD.
    pub budget_cap_usd: Option<f64>,
    /// Wait when a provider reports this fraction of its quota used, in (0, 1].
    pub quota_wait: f64,
    /// Stop the campaign at this fraction of a provider's quota, in (0, 1].
    pub quota_stop: Option<f64>,
    /// A rate limit pauses every arm of its provider until the reset.
    pub rate_limit_pause: bool,
}

impl Default for Operational {
    fn default() -> Self {
        Self {
            lease_ttl_s: 30,
            publish_grace_s: 900,
            cutoff_utc: None,
            budget_cap_usd: None,
            quota_wait: 0.95,
            quota_stop: None,
            rate_limit_pause: true,
        }
    }
}

/// The driver: resolved on each worker host, which decides whether it runs it at all. Not in
/// the spec hash; a resume refuses any change to its kind or env.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DriverConfig {
    /// Exactly one of `{"named": "<driver>"}`, `{"command": ["prog", "arg"]}` and
    /// `{"sim": {}}`.
    pub kind: DriverKind,
    /// Payload keys that never reach rows, logs or spans.
    #[serde(default)]
    pub secret_payload_keys: Vec<String>,
    /// Env variables for the driver. A value `$NAME` is read from the worker's env; values are
    /// never logged. Names (set and read) must be variable names that are not reserved, and a
    /// worker forwards only the names it allows.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DriverKind {
    /// The campaign's own command: a child process speaking JSON-RPC over stdio; relative
    /// paths resolve on the worker. Only workers that allow campaign commands run it.
    Command(Vec<String>),
    /// A driver the worker defines in its drivers file, by name.
    Named(DriverName),
    /// The built-in deterministic simulator.
    Sim(SimConfig),
    /// The built-in container driver: each task (a Harbor task folder) runs in a container
    /// of the worker's runtime (podman or docker). Only workers started with
    /// `--container-runtime` run it.
    Container(ContainerConfig),
}

/// `[driver] container = {}`: the container driver's settings (none yet; the table is there
/// so settings can be added without a new key).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContainerConfig {}

/// The sim driver's knobs. Durations in seconds; ranges are `[min, max]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    pub boot_s: f64,
    pub reset_s: f64,
    pub agent_s: [f64; 2],
    pub evaluate_s: f64,
    /// Probability of a pass, per arm id; `default_pass_rate` for the others.
    pub pass_rate: BTreeMap<String, f64>,
    pub default_pass_rate: f64,
    /// Probability of each fault, keyed by failure kind or agent status.
    pub faults: BTreeMap<SimFault, f64>,
    /// Cost of one trial, `[min, max]` USD.
    pub cost_usd: [f64; 2],
    pub turns: [u32; 2],
    /// For an injected `rate_limit`: seconds from now until the provider's window resets.
    pub rate_limit_reset_s: f64,
    /// Tasks that cannot be done. The sim's gate declares exactly these infeasible, and its
    /// evaluator passes a declared infeasible exactly on these.
    pub infeasible_tasks: BTreeSet<String>,
    /// Turns and cost the sim's gate reports for each call.
    pub gate_turns: u32,
    pub gate_cost_usd: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            boot_s: 0.0,
            reset_s: 0.0,
            agent_s: [0.0, 0.0],
            evaluate_s: 0.0,
            pass_rate: BTreeMap::new(),
            default_pass_rate: 0.5,
            faults: BTreeMap::new(),
            cost_usd: [0.0, 0.0],
            turns: [1, 10],
            rate_limit_reset_s: 30.0,
            infeasible_tasks: BTreeSet::new(),
            gate_turns: 0,
            gate_cost_usd: 0.0,
        }
    }
}

/// A fault the sim driver can inject: an infra failure kind, an agent outcome, or a
/// misbehaviour of the driver process itself.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(untagged)]
pub enum SimFault {
    Kind(FailureKind),
    Status(Status),
    Process(SimProcessFault),
}

/// Ways the sim driver process can misbehave, for fault tests.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SimProcessFault {
    /// Never answer `run_agent` (the lane must kill it at the deadline).
    Hang,
    /// Print a line that is not JSON-RPC during `run_agent`.
    Garbage,
    /// Exit during `run_agent`.
    Exit,
}

impl SimFault {
    pub fn name(self) -> &'static str {
        match self {
            SimFault::Kind(k) => k.as_str(),
            SimFault::Status(s) => s.as_str(),
            SimFault::Process(SimProcessFault::Hang) => "hang",
            SimFault::Process(SimProcessFault::Garbage) => "garbage",
            SimFault::Process(SimProcessFault::Exit) => "exit",
        }
    }
}
