//! The rules a campaign must keep, in one place: the campaign-file loader and a gRPC submit
//! both run them on the parsed campaign, so the two refuse exactly the same things. (What a
//! type already guarantees, ids and payload size, is checked when the value is built.)

use std::collections::HashSet;
use std::fmt;

use super::env::check_env;
use super::error::SpecErrorKind;
use super::{CampaignSpec, DriverKind, SimConfig, SimFault, Task};
use crate::canonical;
use crate::limits::{
    MAX_ARM_CONFIG_BYTES, MAX_ARMS, MAX_COMMAND_ARG_BYTES, MAX_COMMAND_ARGS, MAX_DRIVER_ENV,
    MAX_DRIVER_ENV_NAME_BYTES, MAX_DRIVER_ENV_VALUE_BYTES, MAX_GROUP_BYTES, MAX_PIN_KEY_BYTES,
    MAX_PIN_VALUE_BYTES, MAX_PINS, MAX_PROVIDER_BYTES, MAX_RUNS, MAX_SECRET_KEY_BYTES,
    MAX_SECRET_KEYS, MAX_TAG_BYTES, MAX_TAGS, MAX_TASKS,
};
use crate::row::{FailureKind, Status};

/// A spec that breaks a campaign rule: the field, as the campaign file names it (`arms[1].id`,
/// `lease_ttl_s`, `driver.sim`), and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {kind}")]
pub struct SpecInvalid {
    pub field: String,
    pub kind: SpecErrorKind,
}

/// A task list that breaks a campaign rule: which task (`None` for the list as a whole), its
/// field, and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct TaskInvalid {
    pub index: Option<usize>,
    pub field: String,
    pub kind: SpecErrorKind,
}

impl fmt::Display for TaskInvalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.index {
            Some(i) => write!(f, "tasks[{i}].{}: {}", self.field, self.kind),
            None => write!(f, "tasks: {}", self.kind),
        }
    }
}

fn bad(field: impl Into<String>, kind: SpecErrorKind) -> Result<(), SpecInvalid> {
    Err(SpecInvalid {
        field: field.into(),
        kind,
    })
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> Result<(), SpecInvalid> {
    bad(field, SpecErrorKind::invalid(message))
}

fn too_long(bytes: usize, limit: usize) -> Option<SpecErrorKind> {
    (bytes > limit).then_some(SpecErrorKind::TooLong { bytes, limit })
}

fn too_many(what: &'static str, n: usize, limit: usize) -> Option<SpecErrorKind> {
    (n > limit).then_some(SpecErrorKind::TooMany { what, limit })
}

/// `Some(x)` must be a finite number above 0 (and at most `max`, when given).
fn positive(field: &str, value: Option<f64>, max: Option<f64>) -> Result<(), SpecInvalid> {
    let Some(x) = value else { return Ok(()) };
    if x.is_finite() && x > 0.0 && max.is_none_or(|m| x <= m) {
        return Ok(());
    }
    match max {
        Some(m) => invalid(field, format!("must be a number in (0, {m}], got {x}")),
        None => invalid(field, format!("must be a positive number, got {x}")),
    }
}

fn at_least_one(field: &str, value: u32) -> Result<(), SpecInvalid> {
    if value == 0 {
        invalid(field, "must be at least 1")
    } else {
        Ok(())
    }
}

impl CampaignSpec {
    /// Checks every rule of the campaign header (everything but the tasks).
    pub fn validate(&self) -> Result<(), SpecInvalid> {
        if self.phase1_runs == 0 {
            return bad("phase1_runs", SpecErrorKind::ZeroPhase1Runs);
        }
        let total_runs = self.phase1_runs.saturating_add(self.phase2_runs);
        if total_runs > MAX_RUNS {
            return invalid(
                "phase1_runs",
                format!("phase1_runs + phase2_runs is {total_runs}, over the limit of {MAX_RUNS}"),
            );
        }
        self.validate_ops()?;
        let d = &self.defaults;
        at_least_one("defaults.timeout_s", d.timeout_s)?;
        at_least_one("defaults.max_turns", d.max_turns)?;
        positive("defaults.max_cost_usd", d.max_cost_usd, None)?;
        self.validate_arms()?;
        if self.retry.preflight_limit == 0 {
            return invalid("retry.preflight_limit", "must be at least 1");
        }
        self.validate_driver()
    }

    fn validate_ops(&self) -> Result<(), SpecInvalid> {
        let o = &self.ops;
        if o.lease_ttl_s < 3 {
            return invalid("lease_ttl_s", "must be at least 3 seconds");
        }
        positive("budget_cap_usd", o.budget_cap_usd, None)?;
        positive("quota_wait", Some(o.quota_wait), Some(1.0))?;
        positive("quota_stop", o.quota_stop, Some(1.0))?;
        if let Some(stop) = o.quota_stop
            && stop < o.quota_wait
        {
            return invalid(
                "quota_stop",
                format!(
                    "quota_stop ({stop}) must not be below quota_wait ({})",
                    o.quota_wait
                ),
            );
        }
        Ok(())
    }

    fn validate_arms(&self) -> Result<(), SpecInvalid> {
        if self.arms.is_empty() {
            return bad("arms", SpecErrorKind::NoArms);
        }
        if let Some(k) = too_many("arms", self.arms.len(), MAX_ARMS) {
            return bad("arms", k);
        }
        let mut seen = HashSet::with_capacity(self.arms.len());
        for (i, a) in self.arms.iter().enumerate() {
            if !seen.insert(a.id.as_str()) {
                return bad(
                    format!("arms[{i}].id"),
                    SpecErrorKind::Duplicate {
                        what: "arm",
                        id: a.id.to_string(),
                        first_line: None,
                    },
                );
            }
            if let Some(k) = too_long(canonical::to_string(&a.config).len(), MAX_ARM_CONFIG_BYTES) {
                return bad(format!("arms[{i}].config"), k);
            }
            if a.provider.is_empty() {
                return invalid(format!("arms[{i}].provider"), "must not be empty");
            }
            if let Some(k) = too_long(a.provider.len(), MAX_PROVIDER_BYTES) {
                return bad(format!("arms[{i}].provider"), k);
            }
            positive(
                &format!("arms[{i}].expected_cost_usd"),
                a.expected_cost_usd,
                None,
            )?;
        }
        Ok(())
    }

    fn validate_driver(&self) -> Result<(), SpecInvalid> {
        let d = &self.driver;
        match &d.kind {
            DriverKind::Command(cmd) => {
                if cmd.first().is_none_or(String::is_empty) {
                    return invalid("driver.command", "must name a program");
                }
                if let Some(k) = too_many("arguments", cmd.len(), MAX_COMMAND_ARGS) {
                    return bad("driver.command", k);
                }
                if let Some(k) = cmd
                    .iter()
                    .find_map(|a| too_long(a.len(), MAX_COMMAND_ARG_BYTES))
                {
                    return bad("driver.command", k);
                }
            }
            DriverKind::Sim(sim) => {
                if let Err(m) = validate_sim(sim) {
                    return invalid("driver.sim", m);
                }
            }
            // The name is valid by its type; whether a worker runs it is the worker's call.
            DriverKind::Named(_) | DriverKind::Container(_) => {}
        }
        // Every assignment carries the env, and every driver process gets it.
        if let Some(k) = too_many("env variables", d.env.len(), MAX_DRIVER_ENV) {
            return bad("driver.env", k);
        }
        for (name, value) in &d.env {
            // A name over its limit is not quoted back in the field.
            if name.len() > MAX_DRIVER_ENV_NAME_BYTES {
                return invalid(
                    "driver.env",
                    format!(
                        "a variable name is {} bytes, over the limit of \
                         {MAX_DRIVER_ENV_NAME_BYTES} bytes",
                        name.len()
                    ),
                );
            }
            if let Some(k) = too_long(value.len(), MAX_DRIVER_ENV_VALUE_BYTES) {
                return bad(format!("driver.env.{name}"), k);
            }
        }
        if let Err((field, e)) = check_env(&d.env) {
            return bad(field, SpecErrorKind::Env(e));
        }
        let keys = &d.secret_payload_keys;
        if keys.iter().any(String::is_empty) {
            return invalid("driver.secret_payload_keys", "keys must not be empty");
        }
        if let Some(k) = too_many("keys", keys.len(), MAX_SECRET_KEYS).or_else(|| {
            keys.iter()
                .find_map(|k| too_long(k.len(), MAX_SECRET_KEY_BYTES))
        }) {
            return bad("driver.secret_payload_keys", k);
        }
        if let Some(k) = too_many("pins", self.expect.len(), MAX_PINS).or_else(|| {
            self.expect.iter().find_map(|(k, v)| {
                too_long(k.len(), MAX_PIN_KEY_BYTES).or(too_long(v.len(), MAX_PIN_VALUE_BYTES))
            })
        }) {
            return bad("driver.expect", k);
        }
        Ok(())
    }
}

impl Task {
    /// Checks the rules of one task; the error names the task's field.
    pub fn validate(&self) -> Result<(), (String, SpecErrorKind)> {
        let invalid = |field: &str, m: &str| Err((field.to_owned(), SpecErrorKind::invalid(m)));
        if self.timeout_s == Some(0) {
            return invalid("timeout_s", "must be at least 1");
        }
        if self.max_turns == Some(0) {
            return invalid("max_turns", "must be at least 1");
        }
        if let Some(c) = self.max_cost_usd
            && !(c.is_finite() && c > 0.0)
        {
            return invalid("max_cost_usd", "must be a positive number");
        }
        if let Some(k) = self
            .group
            .as_ref()
            .and_then(|g| too_long(g.len(), MAX_GROUP_BYTES))
        {
            return Err(("group".into(), k));
        }
        if let Some(k) = too_many("tags", self.tags.len(), MAX_TAGS) {
            return Err(("tags".into(), k));
        }
        for (i, t) in self.tags.iter().enumerate() {
            if let Some(k) = too_long(t.len(), MAX_TAG_BYTES) {
                return Err((format!("tags[{i}]"), k));
            }
        }
        Ok(())
    }
}

/// Checks a campaign's task list: 1 to [`MAX_TASKS`] tasks, each valid, ids unique.
pub fn validate_tasks(tasks: &[Task]) -> Result<(), TaskInvalid> {
    let whole = |kind| TaskInvalid {
        index: None,
        field: "tasks".into(),
        kind,
    };
    if tasks.is_empty() {
        return Err(whole(SpecErrorKind::NoTasks));
    }
    if let Some(k) = too_many("tasks", tasks.len(), MAX_TASKS) {
        return Err(whole(k));
    }
    let mut seen = HashSet::with_capacity(tasks.len());
    for (i, t) in tasks.iter().enumerate() {
        t.validate().map_err(|(field, kind)| TaskInvalid {
            index: Some(i),
            field,
            kind,
        })?;
        if !seen.insert(t.id.as_str()) {
            return Err(TaskInvalid {
                index: Some(i),
                field: "id".into(),
                kind: SpecErrorKind::Duplicate {
                    what: "task",
                    id: t.id.to_string(),
                    first_line: None,
                },
            });
        }
    }
    Ok(())
}

/// The sim driver's knobs: durations, probabilities, ranges, and faults a driver can inject.
fn validate_sim(sim: &SimConfig) -> Result<(), String> {
    let prob = |name: &str, p: f64| {
        if (0.0..=1.0).contains(&p) {
            Ok(())
        } else {
            Err(format!("{name} must be a probability in [0, 1], got {p}"))
        }
    };
    let duration = |name: &str, s: f64| {
        if s.is_finite() && s >= 0.0 {
            Ok(())
        } else {
            Err(format!("{name} must be a non-negative number of seconds"))
        }
    };
    duration("boot_s", sim.boot_s)?;
    duration("reset_s", sim.reset_s)?;
    duration("evaluate_s", sim.evaluate_s)?;
    duration("rate_limit_reset_s", sim.rate_limit_reset_s)?;
    if !(sim.gate_cost_usd.is_finite() && sim.gate_cost_usd >= 0.0) {
        return Err("gate_cost_usd must be a non-negative number".into());
    }
    for (name, [lo, hi]) in [("agent_s", sim.agent_s), ("cost_usd", sim.cost_usd)] {
        duration(name, lo)?;
        duration(name, hi)?;
        if lo > hi {
            return Err(format!("{name} must be [min, max] with min <= max"));
        }
    }
    if sim.turns[0] > sim.turns[1] {
        return Err("turns must be [min, max] with min <= max".into());
    }
    prob("default_pass_rate", sim.default_pass_rate)?;
    for (arm, p) in &sim.pass_rate {
        prob(&format!("pass_rate.{arm}"), *p)?;
    }
    let mut total = 0.0;
    for (fault, p) in &sim.faults {
        match fault {
            SimFault::Kind(FailureKind::LeaseExpired) => {
                return Err("faults.lease_expired: only the reaper writes it".into());
            }
            SimFault::Kind(k) if !k.sim_injectable() => {
                return Err(format!(
                    "faults.{}: a sim fault must be something a driver can do",
                    fault.name()
                ));
            }
            SimFault::Status(s) if !s.is_scored() || *s == Status::Completed => {
                return Err(format!(
                    "faults.{s}: a status fault must be timeout, max_turns, agent_error or violation"
                ));
            }
            SimFault::Kind(_) | SimFault::Status(_) | SimFault::Process(_) => {}
        }
        prob(&format!("faults.{}", fault.name()), *p)?;
        total += p;
    }
    if total > 1.0 + 1e-9 {
        return Err(format!("fault rates sum to {total}, over 1"));
    }
    Ok(())
}
