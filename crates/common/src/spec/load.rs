//! Reading a campaign file: TOML with unknown keys refused, then validation with line numbers.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::error::{SpecError, SpecErrorKind};
use super::harbor;
use super::tasks::{build_task, parse_tasks_jsonl, unknown_field};
use super::validate::{SpecInvalid, validate_tasks};
use super::{
    Arm, Campaign, CampaignSpec, ContainerConfig, Defaults, DriverConfig, DriverKind, MAX_ARMS,
    Operational, Pairing, RetryPolicy, SimConfig, Task,
};
use crate::ids::{ArmId, CampaignId, DriverName};
use crate::utc;

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
    config: Option<Spanned<toml::Value>>,
    provider: Option<String>,
    expected_cost_usd: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTasks {
    file: Option<Spanned<String>>,
    items: Option<Vec<RawInlineTask>>,
    /// A folder of Harbor task folders.
    harbor: Option<Spanned<String>>,
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
    payload: Option<Spanned<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDriver {
    command: Option<Vec<String>>,
    name: Option<String>,
    sim: Option<SimConfig>,
    container: Option<ContainerConfig>,
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
///
/// Parsing builds the typed campaign (ids, times and payloads are checked as they are built);
/// the campaign rules are then `CampaignSpec::validate` and `validate_tasks`, the same checks a
/// gRPC submit runs, with the line of each field looked up for the error.
pub fn load_str(text: &str, path: &Path, base: &Path) -> Result<Campaign, SpecError> {
    match load(text, path, TasksFrom::Folder(base))? {
        (spec, Some(tasks)) => Ok(Campaign { spec, tasks }),
        (_, None) => Err(SpecError::in_file(path, "tasks", SpecErrorKind::NoTasks)),
    }
}

/// Validates campaign text sent to the coordinator, whose tasks may come inline
/// (`[[tasks.items]]`, returned) or be sent beside it (`None`). A `[tasks] file` is refused:
/// the coordinator reads no file a client names.
pub fn load_sent_str(
    text: &str,
    path: &Path,
) -> Result<(CampaignSpec, Option<Vec<Task>>), SpecError> {
    load(text, path, TasksFrom::Sent)
}

/// Where `[tasks] file` is read from, if anywhere.
#[derive(Clone, Copy)]
enum TasksFrom<'a> {
    /// Relative to this folder (a campaign file on the user's machine).
    Folder(&'a Path),
    /// Nowhere: the text was sent over the network.
    Sent,
}

fn load(
    text: &str,
    path: &Path,
    from: TasksFrom<'_>,
) -> Result<(CampaignSpec, Option<Vec<Task>>), SpecError> {
    let mut ctx = Ctx {
        path,
        line_starts: line_starts(text),
        lines: HashMap::new(),
        first_arm_line: HashMap::new(),
    };
    let raw: RawCampaign = toml::from_str(text).map_err(|e| ctx.toml_error(&e))?;

    let id = CampaignId::new(raw.id.get_ref())
        .map_err(|e| ctx.at(raw.id.span(), "id", SpecErrorKind::InvalidId(e)))?;
    ctx.mark("id", raw.id.span());
    ctx.mark("phase1_runs", raw.phase1_runs.span());
    let ops = operational(&mut ctx, &raw)?;
    let defaults = defaults(&mut ctx, raw.defaults);
    let arms = arms(&mut ctx, raw.arms)?;
    let (driver, expect) = match raw.driver {
        Some(d) => {
            let span = d.span();
            driver(&mut ctx, span, d.into_inner())?
        }
        None => {
            return Err(SpecError::in_file(
                path,
                "driver",
                SpecErrorKind::invalid("missing [driver] with `name`, `command` or `sim`"),
            ));
        }
    };
    let spec = CampaignSpec {
        id,
        phase1_runs: *raw.phase1_runs.get_ref(),
        phase2_runs: raw.phase2_runs,
        schedule_seed: raw.schedule_seed,
        pairing: raw.pairing,
        gate: raw.gate,
        defaults,
        arms,
        retry: retry(raw.retry),
        expect,
        ops,
        driver,
        smoke: None,
    };
    spec.validate().map_err(|e| ctx.spec_error(e))?;
    let tasks = match raw.tasks {
        Some(t) => {
            let span = t.span();
            Some(tasks(&ctx, from, span, t.into_inner())?)
        }
        None => None,
    };
    Ok((spec, tasks))
}

/// The file being read, to turn byte spans into line numbers, and the line of each field.
struct Ctx<'a> {
    path: &'a Path,
    /// Byte offset where each line after the first starts: a campaign with 100k inline tasks
    /// asks for a line per task, and counting newlines from the top each time is quadratic.
    line_starts: Vec<usize>,
    /// Field (`lease_ttl_s`, `arms[1]`, `driver`) → the line it is written on.
    lines: HashMap<String, usize>,
    /// Arm id → the line of its first definition, for duplicate errors.
    first_arm_line: HashMap<String, usize>,
}

/// Where each line after the first starts in `text`.
fn line_starts(text: &str) -> Vec<usize> {
    text.bytes()
        .enumerate()
        .filter(|&(_, b)| b == b'\n')
        .map(|(i, _)| i + 1)
        .collect()
}

impl Ctx<'_> {
    /// The 1-based line holding byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        // Lines starting at or before `offset`, plus the first line.
        self.line_starts.partition_point(|&start| start <= offset) + 1
    }

    fn at(&self, span: std::ops::Range<usize>, field: &str, kind: SpecErrorKind) -> SpecError {
        SpecError::at(self.path, self.line_of(span.start), field, kind)
    }

    fn mark(&mut self, field: impl Into<String>, span: std::ops::Range<usize>) {
        let line = self.line_of(span.start);
        self.lines.insert(field.into(), line);
    }

    /// The line of `field`, or of the nearest enclosing field that has one (`arms[1].provider`
    /// is on the line of `arms[1]`); `None` for what is missing from the whole file.
    fn line_for(&self, field: &str) -> Option<usize> {
        let mut f = field;
        loop {
            if let Some(line) = self.lines.get(f) {
                return Some(*line);
            }
            f = &f[..f.rfind(['.', '['])?];
        }
    }

    /// A rule of `CampaignSpec::validate`, placed in the file.
    fn spec_error(&self, e: SpecInvalid) -> SpecError {
        let mut kind = e.kind;
        if let SpecErrorKind::Duplicate { id, first_line, .. } = &mut kind {
            *first_line = self.first_arm_line.get(id.as_str()).copied();
        }
        SpecError {
            file: self.path.to_owned(),
            line: self.line_for(&e.field),
            field: e.field,
            kind: Box::new(kind),
        }
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

fn defaults(ctx: &mut Ctx<'_>, raw: RawDefaults) -> Defaults {
    let d = Defaults::default();
    let mut value = |field: &str, v: Option<Spanned<u32>>, default: u32| match v {
        Some(v) => {
            ctx.mark(field, v.span());
            v.into_inner()
        }
        None => default,
    };
    let timeout_s = value("defaults.timeout_s", raw.timeout_s, d.timeout_s);
    let max_turns = value("defaults.max_turns", raw.max_turns, d.max_turns);
    let max_cost_usd = match raw.max_cost_usd {
        Some(v) => {
            ctx.mark("defaults.max_cost_usd", v.span());
            Some(v.into_inner())
        }
        None => d.max_cost_usd,
    };
    Defaults {
        timeout_s,
        max_turns,
        max_cost_usd,
    }
}

fn arms(ctx: &mut Ctx<'_>, raw: Vec<RawArm>) -> Result<Vec<Arm>, SpecError> {
    if let Some(extra) = raw.get(MAX_ARMS) {
        ctx.mark("arms", extra.id.span());
    }
    let mut arms = Vec::with_capacity(raw.len());
    for (i, a) in raw.into_iter().enumerate() {
        let field = format!("arms[{i}]");
        let id = ArmId::new(a.id.get_ref()).map_err(|e| {
            ctx.at(
                a.id.span(),
                &format!("{field}.id"),
                SpecErrorKind::InvalidId(e),
            )
        })?;
        let line = ctx.line_of(a.id.span().start);
        ctx.first_arm_line.entry(id.to_string()).or_insert(line);
        ctx.mark(&field, a.id.span());
        if let Some(v) = &a.expected_cost_usd {
            ctx.mark(format!("{field}.expected_cost_usd"), v.span());
        }
        let config = match a.config {
            Some(v) => {
                let span = v.span();
                let mut path = format!("{field}.config");
                toml_to_json(v.into_inner(), &mut path)
                    .map_err(|value| ctx.at(span, &path, SpecErrorKind::NotFinite(value)))?
            }
            None => serde_json::Value::Object(Default::default()),
        };
        arms.push(Arm {
            provider: a.provider.unwrap_or_else(|| id.to_string()),
            id,
            config,
            expected_cost_usd: a.expected_cost_usd.map(Spanned::into_inner),
        });
    }
    Ok(arms)
}

fn operational(ctx: &mut Ctx<'_>, raw: &RawCampaign) -> Result<Operational, SpecError> {
    let d = Operational::default();
    let cutoff_utc = match &raw.cutoff_utc {
        Some(v) => Some(
            utc::parse_rfc3339(v.get_ref())
                .map_err(|e| ctx.at(v.span(), "cutoff_utc", SpecErrorKind::BadCutoff(e)))?,
        ),
        None => None,
    };
    if let Some(v) = &raw.lease_ttl_s {
        ctx.mark("lease_ttl_s", v.span());
    }
    for (field, v) in [
        ("budget_cap_usd", &raw.budget_cap_usd),
        ("quota_wait", &raw.quota_wait),
        ("quota_stop", &raw.quota_stop),
    ] {
        if let Some(v) = v {
            ctx.mark(field, v.span());
        }
    }
    Ok(Operational {
        lease_ttl_s: raw
            .lease_ttl_s
            .as_ref()
            .map_or(d.lease_ttl_s, |v| *v.get_ref()),
        publish_grace_s: raw.publish_grace_s.unwrap_or(d.publish_grace_s),
        cutoff_utc,
        budget_cap_usd: raw.budget_cap_usd.as_ref().map(|v| *v.get_ref()),
        quota_wait: raw
            .quota_wait
            .as_ref()
            .map_or(d.quota_wait, |v| *v.get_ref()),
        quota_stop: raw.quota_stop.as_ref().map(|v| *v.get_ref()),
        rate_limit_pause: raw.rate_limit_pause.unwrap_or(d.rate_limit_pause),
    })
}

fn retry(raw: RawRetry) -> RetryPolicy {
    RetryPolicy {
        rate_limit_backoff_s: raw.rate_limit_backoff_s,
        overloaded_retries: raw.overloaded_retries,
        overloaded_backoff_s: raw.overloaded_backoff_s,
        auth_backoff_s: raw.auth_backoff_s,
        preflight_limit: raw.preflight_limit,
        infra_retries: raw.infra_retries,
        infra_backoff_s: raw.infra_backoff_s,
    }
}

fn driver(
    ctx: &mut Ctx<'_>,
    span: std::ops::Range<usize>,
    raw: RawDriver,
) -> Result<(DriverConfig, BTreeMap<String, String>), SpecError> {
    ctx.mark("driver", span.clone());
    let err = |field: &str, msg: String| ctx.at(span.clone(), field, SpecErrorKind::invalid(msg));
    let set = [
        raw.command.is_some(),
        raw.name.is_some(),
        raw.sim.is_some(),
        raw.container.is_some(),
    ];
    let kind = match (raw.command, raw.name, raw.sim, raw.container) {
        _ if set.iter().filter(|s| **s).count() > 1 => {
            return Err(err(
                "driver",
                "set exactly one of `name`, `command`, `sim` and `container`".into(),
            ));
        }
        (Some(cmd), ..) => DriverKind::Command(cmd),
        (_, Some(name), ..) => DriverKind::Named(
            DriverName::new(name)
                .map_err(|e| ctx.at(span.clone(), "driver.name", SpecErrorKind::InvalidId(e)))?,
        ),
        (_, _, Some(sim), _) => DriverKind::Sim(sim),
        (_, _, _, Some(c)) => DriverKind::Container(c),
        (None, None, None, None) => {
            return Err(err(
                "driver",
                "set `name`, `command`, `sim` or `container`".into(),
            ));
        }
    };
    Ok((
        DriverConfig {
            kind,
            secret_payload_keys: raw.secret_payload_keys,
            env: raw.env,
        },
        raw.expect,
    ))
}

/// `[tasks] harbor = "DIR"`: every task folder under DIR, relative to the campaign file. Each
/// task's payload holds its `task.toml` settings and the digests of its files; its
/// `timeout_s` is the task's agent timeout.
fn harbor_tasks(
    ctx: &Ctx<'_>,
    from: TasksFrom<'_>,
    dir: Spanned<String>,
) -> Result<Vec<Task>, SpecError> {
    let TasksFrom::Folder(base) = from else {
        return Err(ctx.at(
            dir.span(),
            "tasks.harbor",
            SpecErrorKind::invalid(
                "the coordinator reads no folder a client names: `lanes submit` reads the task \
                 folders and sends them beside the campaign",
            ),
        ));
    };
    let path = base.join(dir.get_ref());
    let refused = |e: harbor::HarborError| {
        ctx.at(
            dir.span(),
            "tasks.harbor",
            SpecErrorKind::invalid(e.to_string()),
        )
    };
    let loaded = harbor::load_dir(&path).map_err(refused)?;
    let mut tasks = Vec::with_capacity(loaded.len());
    for (id, _, settings) in loaded {
        let timeout_s = settings.timeout_s();
        let payload = serde_json::json!({ harbor::PAYLOAD_KEY: settings });
        let task = build_task(
            id.clone(),
            None,
            Vec::new(),
            timeout_s,
            None,
            None,
            Some(&payload),
        )
        .map_err(|(field, kind)| {
            ctx.at(
                dir.span(),
                "tasks.harbor",
                SpecErrorKind::invalid(format!("task folder `{id}`: {field}: {kind}")),
            )
        })?;
        tasks.push(task);
    }
    validate_tasks(&tasks).map_err(|e| {
        ctx.at(
            dir.span(),
            "tasks.harbor",
            SpecErrorKind::invalid(e.to_string()),
        )
    })?;
    Ok(tasks)
}

fn tasks(
    ctx: &Ctx<'_>,
    from: TasksFrom<'_>,
    span: std::ops::Range<usize>,
    raw: RawTasks,
) -> Result<Vec<Task>, SpecError> {
    let sources = [
        raw.file.is_some(),
        raw.items.is_some(),
        raw.harbor.is_some(),
    ];
    if sources.iter().filter(|s| **s).count() > 1 {
        return Err(ctx.at(
            span,
            "tasks",
            SpecErrorKind::invalid("set one of `file`, `items` or `harbor`"),
        ));
    }
    if let Some(dir) = raw.harbor {
        return harbor_tasks(ctx, from, dir);
    }
    let (lined, file, inline): (Vec<(usize, Task)>, PathBuf, bool) = match (raw.file, raw.items) {
        (Some(_), Some(_)) => unreachable!("refused above"),
        (None, None) => return Err(ctx.at(span, "tasks", SpecErrorKind::NoTasks)),
        (Some(file), None) => {
            let TasksFrom::Folder(base) = from else {
                return Err(ctx.at(
                    file.span(),
                    "tasks.file",
                    SpecErrorKind::invalid(
                        "the coordinator reads no file a client names: send the tasks in \
                         SubmitRequest.tasks (or SubmitStream chunks), or write them inline \
                         as [[tasks.items]]",
                    ),
                ));
            };
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
            (parse_tasks_jsonl(&path, &text)?, path, false)
        }
        (None, Some(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let line = ctx.line_of(item.id.span().start);
                let payload = match item.payload {
                    Some(p) => {
                        let span = p.span();
                        let mut path = format!("tasks.items[{i}].payload");
                        let json = toml_to_json(p.into_inner(), &mut path).map_err(|value| {
                            ctx.at(span, &path, SpecErrorKind::NotFinite(value))
                        })?;
                        Some(json)
                    }
                    None => None,
                };
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
            (out, ctx.path.to_owned(), true)
        }
    };
    let (lines, tasks): (Vec<usize>, Vec<Task>) = lined.into_iter().unzip();
    validate_tasks(&tasks).map_err(|e| {
        let mut kind = e.kind;
        let Some(i) = e.index else {
            return match kind {
                SpecErrorKind::NoTasks => SpecError::in_file(&file, "tasks", kind),
                _ if inline => ctx.at(span.clone(), "tasks.items", kind),
                _ => SpecError::in_file(&file, "tasks", kind),
            };
        };
        if let SpecErrorKind::Duplicate { id, first_line, .. } = &mut kind {
            *first_line = tasks
                .iter()
                .position(|t| t.id.as_str() == id.as_str())
                .map(|first| lines[first]);
        }
        let field = if inline {
            format!("tasks.items[{i}].{}", e.field)
        } else {
            e.field
        };
        SpecError::at(&file, lines[i], field, kind)
    })?;
    Ok(tasks)
}

/// A TOML value (a payload, an arm's config) as JSON; datetimes become their RFC 3339 text.
/// TOML's `nan` and `inf` are refused, not stored as null: the error is how the float is
/// spelled, and `path` (the value's own, `arms[0].config`) is left at it (`arms[0].config.t[1]`).
fn toml_to_json(v: toml::Value, path: &mut String) -> Result<serde_json::Value, &'static str> {
    use serde_json::Value as J;
    use std::fmt::Write as _;
    Ok(match v {
        toml::Value::String(s) => J::String(s),
        toml::Value::Integer(i) => J::from(i),
        toml::Value::Float(f) => match serde_json::Number::from_f64(f) {
            Some(n) => J::Number(n),
            None if f.is_nan() => return Err("nan"),
            None if f > 0.0 => return Err("inf"),
            None => return Err("-inf"),
        },
        toml::Value::Boolean(b) => J::Bool(b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(a) => {
            let mut out = Vec::with_capacity(a.len());
            for (i, v) in a.into_iter().enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                out.push(toml_to_json(v, path)?);
                path.truncate(len);
            }
            J::Array(out)
        }
        toml::Value::Table(t) => {
            let mut out = serde_json::Map::with_capacity(t.len());
            for (k, v) in t {
                let len = path.len();
                let _ = write!(path, ".{k}");
                let v = toml_to_json(v, path)?;
                path.truncate(len);
                out.insert(k, v);
            }
            J::Object(out)
        }
    })
}
