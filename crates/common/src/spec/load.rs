//! Reading a campaign file: TOML with unknown keys refused, then validation with line numbers.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::error::{SpecError, SpecErrorKind};
use super::tasks::{build_task, parse_tasks_jsonl, unknown_field};
use super::{
    Arm, Campaign, CampaignSpec, Defaults, DriverConfig, DriverKind, MAX_ARMS, MAX_TASKS,
    Operational, Pairing, RetryPolicy, SimConfig, SimFault, Task,
};
use crate::ids::{ArmId, CampaignId};
use crate::row::{FailureKind, Status};
use crate::utc;

/// At most this many runs per task, over both phases.
const MAX_RUNS: u32 = 10_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCampaign {
    id: Spanned<String>,
    phase1_runs: Spanned<u32>,
    #[serde(default)]
    phase2_runs: u32,
    schedule_seed: u64,
    #[serde(default)]
    pairing: Pairing,
    #[serde(default)]
    gate: bool,
    lease_ttl_s: Option<Spanned<u32>>,
    publish_grace_s: Option<u32>,
    cutoff_utc: Option<Spanned<String>>,
    budget_cap_usd: Option<Spanned<f64>>,
    quota_wait: Option<Spanned<f64>>,
    quota_stop: Option<Spanned<f64>>,
    rate_limit_pause: Option<bool>,
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    arms: Vec<RawArm>,
    tasks: Option<Spanned<RawTasks>>,
    driver: Option<Spanned<RawDriver>>,
    #[serde(default)]
    retry: RawRetry,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawDefaults {
    timeout_s: Option<Spanned<u32>>,
    max_turns: Option<Spanned<u32>>,
    max_cost_usd: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawArm {
    id: Spanned<String>,
    #[serde(default)]
    config: Option<toml::Value>,
    provider: Option<String>,
    expected_cost_usd: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTasks {
    file: Option<Spanned<String>>,
    items: Option<Vec<RawInlineTask>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInlineTask {
    id: Spanned<String>,
    group: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    timeout_s: Option<u32>,
    max_turns: Option<u32>,
    max_cost_usd: Option<f64>,
    payload: Option<toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDriver {
    command: Option<Vec<String>>,
    sim: Option<SimConfig>,
    #[serde(default)]
    secret_payload_keys: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    expect: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawRetry {
    rate_limit_backoff_s: u64,
    overloaded_retries: u32,
    overloaded_backoff_s: u64,
    auth_backoff_s: u64,
    preflight_limit: u32,
    infra_retries: u32,
    infra_backoff_s: u64,
}

impl Default for RawRetry {
    fn default() -> Self {
        let d = RetryPolicy::default();
        Self {
            rate_limit_backoff_s: d.rate_limit_backoff_s,
            overloaded_retries: d.overloaded_retries,
            overloaded_backoff_s: d.overloaded_backoff_s,
            auth_backoff_s: d.auth_backoff_s,
            preflight_limit: d.preflight_limit,
            infra_retries: d.infra_retries,
            infra_backoff_s: d.infra_backoff_s,
        }
    }
}

/// Reads and validates a campaign file. Relative paths resolve against its folder.
pub fn load_file(path: &Path) -> Result<Campaign, SpecError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SpecError::in_file(path, "", SpecErrorKind::Io(e.to_string())))?;
    let base = path.parent().unwrap_or(Path::new("."));
    load_str(&text, path, base)
}

/// Validates campaign text; `path` names it in errors, `base` resolves relative paths.
pub fn load_str(text: &str, path: &Path, base: &Path) -> Result<Campaign, SpecError> {
    let ctx = Ctx { path, text };
    let raw: RawCampaign = toml::from_str(text).map_err(|e| ctx.toml_error(&e))?;

    let id = CampaignId::new(raw.id.get_ref().clone())
        .map_err(|e| ctx.at(raw.id.span(), "id", SpecErrorKind::InvalidId(e)))?;
    if *raw.phase1_runs.get_ref() == 0 {
        return Err(ctx.at(
            raw.phase1_runs.span(),
            "phase1_runs",
            SpecErrorKind::ZeroPhase1Runs,
        ));
    }
    let total_runs = raw.phase1_runs.get_ref().saturating_add(raw.phase2_runs);
    if total_runs > MAX_RUNS {
        return Err(ctx.at(
            raw.phase1_runs.span(),
            "phase1_runs",
            SpecErrorKind::invalid(format!(
                "phase1_runs + phase2_runs is {total_runs}, over the limit of {MAX_RUNS}"
            )),
        ));
    }

    let ops = operational(&ctx, &raw)?;
    let defaults = defaults(&ctx, raw.defaults)?;
    let arms = arms(&ctx, raw.arms)?;
    let retry = retry(&ctx, raw.retry)?;
    let (driver, expect) = match raw.driver {
        Some(d) => {
            let span = d.span();
            driver(&ctx, span, d.into_inner())?
        }
        None => {
            return Err(SpecError::in_file(
                path,
                "driver",
                SpecErrorKind::invalid("missing [driver] with `command` or `sim`"),
            ));
        }
    };
    let tasks = match raw.tasks {
        Some(t) => {
            let span = t.span();
            tasks(&ctx, base, span, t.into_inner())?
        }
        None => {
            return Err(SpecError::in_file(path, "tasks", SpecErrorKind::NoTasks));
        }
    };

    Ok(Campaign {
        spec: CampaignSpec {
            id,
            phase1_runs: *raw.phase1_runs.get_ref(),
            phase2_runs: raw.phase2_runs,
            schedule_seed: raw.schedule_seed,
            pairing: raw.pairing,
            gate: raw.gate,
            defaults,
            arms,
            retry,
            expect,
            ops,
            driver,
        },
        tasks,
    })
}

/// The file being read, to turn byte spans into line numbers.
struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Ctx<'_> {
    fn line_of(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    fn at(&self, span: std::ops::Range<usize>, field: &str, kind: SpecErrorKind) -> SpecError {
        SpecError::at(self.path, self.line_of(span.start), field, kind)
    }

    fn toml_error(&self, e: &toml::de::Error) -> SpecError {
        let message = e.message().trim().to_owned();
        let line = e.span().map(|s| self.line_of(s.start));
        let (field, kind) = match unknown_field(&message) {
            Some(key) => (key.clone(), SpecErrorKind::UnknownKey(key)),
            None => (String::new(), SpecErrorKind::Syntax(message)),
        };
        SpecError {
            file: self.path.to_owned(),
            line,
            field,
            kind: Box::new(kind),
        }
    }
}

fn positive(
    ctx: &Ctx<'_>,
    v: &Spanned<f64>,
    field: &str,
    max: Option<f64>,
) -> Result<f64, SpecError> {
    let x = *v.get_ref();
    let ok = x.is_finite() && x > 0.0 && max.is_none_or(|m| x <= m);
    if ok {
        Ok(x)
    } else {
        let range = match max {
            Some(m) => format!("must be a number in (0, {m}], got {x}"),
            None => format!("must be a positive number, got {x}"),
        };
        Err(ctx.at(v.span(), field, SpecErrorKind::invalid(range)))
    }
}

fn at_least_one(ctx: &Ctx<'_>, v: &Spanned<u32>, field: &str) -> Result<u32, SpecError> {
    if *v.get_ref() == 0 {
        Err(ctx.at(
            v.span(),
            field,
            SpecErrorKind::invalid("must be at least 1"),
        ))
    } else {
        Ok(*v.get_ref())
    }
}

fn defaults(ctx: &Ctx<'_>, raw: RawDefaults) -> Result<Defaults, SpecError> {
    let d = Defaults::default();
    Ok(Defaults {
        timeout_s: match &raw.timeout_s {
            Some(v) => at_least_one(ctx, v, "defaults.timeout_s")?,
            None => d.timeout_s,
        },
        max_turns: match &raw.max_turns {
            Some(v) => at_least_one(ctx, v, "defaults.max_turns")?,
            None => d.max_turns,
        },
        max_cost_usd: match &raw.max_cost_usd {
            Some(v) => Some(positive(ctx, v, "defaults.max_cost_usd", None)?),
            None => d.max_cost_usd,
        },
    })
}

fn arms(ctx: &Ctx<'_>, raw: Vec<RawArm>) -> Result<Vec<Arm>, SpecError> {
    if raw.is_empty() {
        return Err(SpecError::in_file(ctx.path, "arms", SpecErrorKind::NoArms));
    }
    if raw.len() > MAX_ARMS {
        return Err(ctx.at(
            raw[MAX_ARMS].id.span(),
            "arms",
            SpecErrorKind::TooMany {
                what: "arms",
                limit: MAX_ARMS,
            },
        ));
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut arms = Vec::with_capacity(raw.len());
    for (i, a) in raw.into_iter().enumerate() {
        let line = ctx.line_of(a.id.span().start);
        let field = format!("arms[{i}].id");
        let id = ArmId::new(a.id.get_ref().clone())
            .map_err(|e| SpecError::at(ctx.path, line, &field, SpecErrorKind::InvalidId(e)))?;
        if let Some(first) = seen.insert(id.to_string(), line) {
            return Err(SpecError::at(
                ctx.path,
                line,
                field,
                SpecErrorKind::Duplicate {
                    what: "arm",
                    id: id.to_string(),
                    first_line: Some(first),
                },
            ));
        }
        let expected_cost_usd = match &a.expected_cost_usd {
            Some(v) => Some(positive(
                ctx,
                v,
                &format!("arms[{i}].expected_cost_usd"),
                None,
            )?),
            None => None,
        };
        let config = match a.config {
            Some(v) => toml_to_json(v),
            None => serde_json::Value::Object(Default::default()),
        };
        let provider = a.provider.unwrap_or_else(|| id.to_string());
        if provider.is_empty() {
            return Err(SpecError::at(
                ctx.path,
                line,
                format!("arms[{i}].provider"),
                SpecErrorKind::invalid("must not be empty"),
            ));
        }
        arms.push(Arm {
            id,
            config,
            provider,
            expected_cost_usd,
        });
    }
    Ok(arms)
}

fn operational(ctx: &Ctx<'_>, raw: &RawCampaign) -> Result<Operational, SpecError> {
    let d = Operational::default();
    let lease_ttl_s = match &raw.lease_ttl_s {
        Some(v) if *v.get_ref() < 3 => {
            return Err(ctx.at(
                v.span(),
                "lease_ttl_s",
                SpecErrorKind::invalid("must be at least 3 seconds"),
            ));
        }
        Some(v) => *v.get_ref(),
        None => d.lease_ttl_s,
    };
    let cutoff_utc = match &raw.cutoff_utc {
        Some(v) => Some(
            utc::parse_rfc3339(v.get_ref())
                .map_err(|e| ctx.at(v.span(), "cutoff_utc", SpecErrorKind::BadCutoff(e)))?,
        ),
        None => None,
    };
    let budget_cap_usd = match &raw.budget_cap_usd {
        Some(v) => Some(positive(ctx, v, "budget_cap_usd", None)?),
        None => None,
    };
    let quota_wait = match &raw.quota_wait {
        Some(v) => positive(ctx, v, "quota_wait", Some(1.0))?,
        None => d.quota_wait,
    };
    let quota_stop = match &raw.quota_stop {
        Some(v) => {
            let stop = positive(ctx, v, "quota_stop", Some(1.0))?;
            if stop < quota_wait {
                return Err(ctx.at(
                    v.span(),
                    "quota_stop",
                    SpecErrorKind::invalid(format!(
                        "quota_stop ({stop}) must not be below quota_wait ({quota_wait})"
                    )),
                ));
            }
            Some(stop)
        }
        None => None,
    };
    Ok(Operational {
        lease_ttl_s,
        publish_grace_s: raw.publish_grace_s.unwrap_or(d.publish_grace_s),
        cutoff_utc,
        budget_cap_usd,
        quota_wait,
        quota_stop,
        rate_limit_pause: raw.rate_limit_pause.unwrap_or(d.rate_limit_pause),
    })
}

fn retry(ctx: &Ctx<'_>, raw: RawRetry) -> Result<RetryPolicy, SpecError> {
    if raw.preflight_limit == 0 {
        return Err(SpecError::in_file(
            ctx.path,
            "retry.preflight_limit",
            SpecErrorKind::invalid("must be at least 1"),
        ));
    }
    Ok(RetryPolicy {
        rate_limit_backoff_s: raw.rate_limit_backoff_s,
        overloaded_retries: raw.overloaded_retries,
        overloaded_backoff_s: raw.overloaded_backoff_s,
        auth_backoff_s: raw.auth_backoff_s,
        preflight_limit: raw.preflight_limit,
        infra_retries: raw.infra_retries,
        infra_backoff_s: raw.infra_backoff_s,
    })
}

fn is_env_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

fn driver(
    ctx: &Ctx<'_>,
    span: std::ops::Range<usize>,
    raw: RawDriver,
) -> Result<(DriverConfig, BTreeMap<String, String>), SpecError> {
    let err = |field: &str, msg: String| ctx.at(span.clone(), field, SpecErrorKind::invalid(msg));
    let kind = match (raw.command, raw.sim) {
        (Some(_), Some(_)) => {
            return Err(err(
                "driver",
                "set either `command` or `sim`, not both".into(),
            ));
        }
        (None, None) => return Err(err("driver", "set `command` or `sim`".into())),
        (Some(cmd), None) => {
            if cmd.is_empty() || cmd[0].is_empty() {
                return Err(err("driver.command", "must name a program".into()));
            }
            DriverKind::Command(cmd)
        }
        (None, Some(sim)) => {
            validate_sim(&sim).map_err(|m| err("driver.sim", m))?;
            DriverKind::Sim(sim)
        }
    };
    for name in raw.env.keys() {
        if !is_env_name(name) {
            return Err(err(
                "driver.env",
                format!("{name:?} is not an environment variable name"),
            ));
        }
    }
    if raw.secret_payload_keys.iter().any(String::is_empty) {
        return Err(err(
            "driver.secret_payload_keys",
            "keys must not be empty".into(),
        ));
    }
    Ok((
        DriverConfig {
            kind,
            secret_payload_keys: raw.secret_payload_keys,
            env: raw.env,
        },
        raw.expect,
    ))
}

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
                    fault_name(*fault)
                ));
            }
            SimFault::Status(s) if !s.is_scored() || *s == Status::Completed => {
                return Err(format!(
                    "faults.{s}: a status fault must be timeout, max_turns, agent_error or violation"
                ));
            }
            _ => {}
        }
        prob(&format!("faults.{}", fault_name(*fault)), *p)?;
        total += p;
    }
    if total > 1.0 + 1e-9 {
        return Err(format!("fault rates sum to {total}, over 1"));
    }
    Ok(())
}

fn fault_name(f: SimFault) -> &'static str {
    f.name()
}

fn tasks(
    ctx: &Ctx<'_>,
    base: &Path,
    span: std::ops::Range<usize>,
    raw: RawTasks,
) -> Result<Vec<Task>, SpecError> {
    let (lined, file): (Vec<(usize, Task)>, PathBuf) = match (raw.file, raw.items) {
        (Some(_), Some(_)) => {
            return Err(ctx.at(
                span,
                "tasks",
                SpecErrorKind::invalid("set either `file` or `items`, not both"),
            ));
        }
        (None, None) => return Err(ctx.at(span, "tasks", SpecErrorKind::NoTasks)),
        (Some(file), None) => {
            let path = base.join(file.get_ref());
            let text = std::fs::read_to_string(&path).map_err(|e| {
                ctx.at(
                    file.span(),
                    "tasks.file",
                    SpecErrorKind::TasksFileMissing {
                        path: path.clone(),
                        reason: e.to_string(),
                    },
                )
            })?;
            (parse_tasks_jsonl(&path, &text)?, path)
        }
        (None, Some(items)) => {
            if items.len() > MAX_TASKS {
                return Err(ctx.at(
                    span,
                    "tasks.items",
                    SpecErrorKind::TooMany {
                        what: "tasks",
                        limit: MAX_TASKS,
                    },
                ));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let line = ctx.line_of(item.id.span().start);
                let payload = item.payload.map(toml_to_json);
                let task = build_task(
                    item.id.into_inner(),
                    item.group,
                    item.tags,
                    item.timeout_s,
                    item.max_turns,
                    item.max_cost_usd,
                    payload.as_ref(),
                )
                .map_err(|(field, kind)| {
                    SpecError::at(ctx.path, line, format!("tasks.items[{i}].{field}"), kind)
                })?;
                out.push((line, task));
            }
            (out, ctx.path.to_owned())
        }
    };
    if lined.is_empty() {
        return Err(SpecError::in_file(&file, "tasks", SpecErrorKind::NoTasks));
    }
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(lined.len());
    for (line, task) in &lined {
        if let Some(first) = seen.insert(task.id.as_str(), *line) {
            return Err(SpecError::at(
                &file,
                *line,
                "id",
                SpecErrorKind::Duplicate {
                    what: "task",
                    id: task.id.to_string(),
                    first_line: Some(first),
                },
            ));
        }
    }
    drop(seen);
    Ok(lined.into_iter().map(|(_, t)| t).collect())
}

/// TOML values as JSON; datetimes become their RFC 3339 text.
fn toml_to_json(v: toml::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        toml::Value::String(s) => J::String(s),
        toml::Value::Integer(i) => J::from(i),
        toml::Value::Float(f) => serde_json::Number::from_f64(f).map_or(J::Null, J::Number),
        toml::Value::Boolean(b) => J::Bool(b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(a) => J::Array(a.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => {
            J::Object(t.into_iter().map(|(k, v)| (k, toml_to_json(v))).collect())
        }
    }
}
