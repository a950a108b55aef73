//! Resume and amendments: compare a recorded campaign with a resubmitted one.
//!
//! A resume is refused, with every conflict named field by field, when a measured option that
//! applies to every trial changed (the driver's kind and env among them), when an existing
//! task changed or moved, or when a trial that
//! already has rows would now be scheduled differently. It is an amendment when the schedule
//! only grows (tasks appended, more runs). Operational options may always change.

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::limits::{
    MAX_REFUSAL_BYTES, MAX_REFUSAL_ITEMS, MAX_REFUSAL_TEXT_BYTES, cut_quoted, status_bytes,
};
use crate::schedule::{self, Trial};
use crate::spec::{Campaign, CampaignSpec, DriverConfig, DriverKind, Task};
use crate::spec_hash::{measured_header, task_line};

/// One refused difference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conflict {
    /// A dotted path: `arms[0].config`, `retry.infra_retries`, `driver.expect.<pin>`,
    /// `tasks[MB-01].payload_sha256`, `trial MB-01.r3.a.phase`.
    pub field: String,
    pub recorded: String,
    pub submitted: String,
}

/// A refused resume in words that fit a gRPC status, whose message and details travel in its
/// trailers: the first conflicts, each text cut to [`MAX_REFUSAL_TEXT_BYTES`], at most
/// [`MAX_REFUSAL_ITEMS`] of them in about [`MAX_REFUSAL_BYTES`]; the rest are counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub listed: Vec<Conflict>,
    /// Conflicts beyond `listed`.
    pub more: usize,
}

impl Refusal {
    pub fn new(conflicts: Vec<Conflict>) -> Self {
        let total = conflicts.len();
        let mut listed = Vec::new();
        let mut bytes = 0;
        for mut c in conflicts {
            for text in [&mut c.field, &mut c.recorded, &mut c.submitted] {
                cut_quoted(text, MAX_REFUSAL_TEXT_BYTES);
            }
            let n = status_bytes(&c.field)
                + status_bytes(&c.recorded)
                + status_bytes(&c.submitted)
                + "; : recorded , submitted ".len();
            // The first always fits, so a refusal never comes without a reason.
            if !listed.is_empty()
                && (listed.len() == MAX_REFUSAL_ITEMS || bytes + n > MAX_REFUSAL_BYTES)
            {
                break;
            }
            bytes += n;
            listed.push(c);
        }
        Self {
            more: total - listed.len(),
            listed,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("resume refused: ")?;
        for (i, c) in self.listed.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(
                f,
                "{}: recorded {}, submitted {}",
                c.field, c.recorded, c.submitted
            )?;
        }
        if self.more > 0 {
            write!(f, "; and {} more", self.more)?;
        }
        Ok(())
    }
}

/// What an accepted resubmission does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumePlan {
    /// The schedule grew: the new spec hash must be recorded as an amendment.
    pub amended: bool,
    pub added_tasks: usize,
    pub added_trials: u64,
    /// Operational options that changed (always allowed), by name.
    pub operational_changes: Vec<String>,
}

/// The parts of a recorded trial that must not change once it has rows.
fn trial_fields(t: &Trial) -> [(&'static str, String); 11] {
    [
        ("task", t.task.to_string()),
        ("arm", t.arm.to_string()),
        ("run_index", t.run_index.to_string()),
        ("phase", t.phase.to_string()),
        ("block", t.block.to_string()),
        ("task_pos", t.task_pos.to_string()),
        ("arm_slot", t.arm_slot.to_string()),
        ("first_arm", t.first_arm.to_string()),
        ("seed", t.seed.to_string()),
        ("timeout_s", t.timeout_s.to_string()),
        ("payload_sha256", t.payload_sha256.clone()),
    ]
}

fn diff_values(prefix: &str, old: &Value, new: &Value, out: &mut Vec<Conflict>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let null = Value::Null;
                let field = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                diff_values(
                    &field,
                    a.get(k).unwrap_or(&null),
                    b.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(Conflict {
            field: prefix.to_owned(),
            recorded: a.to_string(),
            submitted: b.to_string(),
        }),
        _ => {}
    }
}

/// Compares the campaign-wide measured options. Run counts may only grow.
fn measured_conflicts(old: &CampaignSpec, new: &CampaignSpec) -> Vec<Conflict> {
    let strip = |spec: &CampaignSpec| {
        let mut h = measured_header(spec);
        let m = h.as_object_mut().expect("header is an object");
        m.remove("phase1_runs");
        m.remove("phase2_runs");
        // Arms compare by position so the conflict names `arms[i].field`.
        let arms = m.remove("arms").unwrap_or(Value::Null);
        if let Value::Array(items) = arms {
            for (i, a) in items.into_iter().enumerate() {
                m.insert(format!("arms[{i}]"), a);
            }
        }
        // Name the pins as the campaign file does: `[driver.expect]`.
        if let Some(expect) = m.remove("expect") {
            m.insert("driver.expect".to_owned(), expect);
        }
        h
    };
    let mut out = Vec::new();
    diff_values("", &strip(old), &strip(new), &mut out);
    for (field, a, b) in [
        ("phase1_runs", old.phase1_runs, new.phase1_runs),
        ("phase2_runs", old.phase2_runs, new.phase2_runs),
    ] {
        if b < a {
            out.push(Conflict {
                field: field.into(),
                recorded: a.to_string(),
                submitted: format!("{b} (runs may only grow)"),
            });
        }
    }
    out
}

/// The driver a campaign runs under is part of what it measures: any change to its kind
/// (`name`, `command`, `sim`) or env is refused; a new driver needs a new campaign id. Env
/// values may be secrets, so a conflict names the variable, never its values.
fn driver_conflicts(old: &DriverConfig, new: &DriverConfig) -> Vec<Conflict> {
    let mut out = Vec::new();
    let describe = |k: &DriverKind| match k {
        DriverKind::Command(cmd) => format!("command {cmd:?}"),
        DriverKind::Named(name) => format!("name {name:?}"),
        DriverKind::Sim(_) => "sim".to_owned(),
        DriverKind::Container(_) => "container".to_owned(),
    };
    match (&old.kind, &new.kind) {
        (DriverKind::Command(a), DriverKind::Command(b)) => {
            if a != b {
                out.push(Conflict {
                    field: "driver.command".into(),
                    recorded: format!("{a:?}"),
                    submitted: format!("{b:?}"),
                });
            }
        }
        (DriverKind::Named(a), DriverKind::Named(b)) => {
            if a != b {
                out.push(Conflict {
                    field: "driver.name".into(),
                    recorded: a.to_string(),
                    submitted: b.to_string(),
                });
            }
        }
        (DriverKind::Sim(a), DriverKind::Sim(b)) => {
            let json = |s| serde_json::to_value(s).unwrap_or(Value::Null);
            diff_values("driver.sim", &json(a), &json(b), &mut out);
        }
        (DriverKind::Container(a), DriverKind::Container(b)) => {
            let json = |s| serde_json::to_value(s).unwrap_or(Value::Null);
            diff_values("driver.container", &json(a), &json(b), &mut out);
        }
        (
            a @ (DriverKind::Command(_)
            | DriverKind::Named(_)
            | DriverKind::Sim(_)
            | DriverKind::Container(_)),
            b,
        ) => {
            out.push(Conflict {
                field: "driver".into(),
                recorded: describe(a),
                submitted: describe(b),
            });
        }
    }
    let names: BTreeSet<&String> = old.env.keys().chain(new.env.keys()).collect();
    for name in names {
        let (a, b) = (old.env.get(name), new.env.get(name));
        if a == b {
            continue;
        }
        let (recorded, submitted) = match (a, b) {
            (Some(_), Some(_)) => ("set", "set to another value"),
            (Some(_), None) => ("set", "unset"),
            (None, _) => ("unset", "set"),
        };
        out.push(Conflict {
            field: format!("driver.env.{name}"),
            recorded: recorded.to_owned(),
            submitted: submitted.to_owned(),
        });
    }
    out
}

fn task_conflicts(old: &[Task], new: &[Task]) -> Vec<Conflict> {
    let mut out = Vec::new();
    if new.len() < old.len() {
        out.push(Conflict {
            field: "tasks".into(),
            recorded: format!("{} tasks", old.len()),
            submitted: format!("{} tasks (tasks may only be appended)", new.len()),
        });
    }
    for (pos, (a, b)) in old.iter().zip(new).enumerate() {
        if a.id != b.id {
            out.push(Conflict {
                field: format!("tasks[{pos}].id"),
                recorded: a.id.to_string(),
                submitted: format!("{} (tasks may only be appended)", b.id),
            });
            continue;
        }
        diff_values(
            &format!("tasks[{}]", a.id),
            &task_line(a),
            &task_line(b),
            &mut out,
        );
        // A Harbor task folder edited after the start: name the files, not only the hash.
        let files = |t: &Task| {
            t.payload
                .value()
                .get(crate::spec::harbor::PAYLOAD_KEY)
                .and_then(|h| h.get("files"))
                .cloned()
        };
        if let (Some(fa), Some(fb)) = (files(a), files(b)) {
            diff_values(&format!("tasks[{}].harbor.files", a.id), &fa, &fb, &mut out);
        }
    }
    out
}

fn operational_changes(old: &CampaignSpec, new: &CampaignSpec) -> Vec<String> {
    let mut out = Vec::new();
    let o = (&old.ops, &new.ops);
    if o.0.lease_ttl_s != o.1.lease_ttl_s {
        out.push("lease_ttl_s".to_owned());
    }
    if o.0.publish_grace_s != o.1.publish_grace_s {
        out.push("publish_grace_s".to_owned());
    }
    if o.0.cutoff_utc != o.1.cutoff_utc {
        out.push("cutoff_utc".to_owned());
    }
    if o.0.budget_cap_usd != o.1.budget_cap_usd {
        out.push("budget_cap_usd".to_owned());
    }
    if o.0.quota_wait != o.1.quota_wait {
        out.push("quota_wait".to_owned());
    }
    if o.0.quota_stop != o.1.quota_stop {
        out.push("quota_stop".to_owned());
    }
    if old.driver.secret_payload_keys != new.driver.secret_payload_keys {
        out.push("driver.secret_payload_keys".to_owned());
    }
    for (i, (a, b)) in old.arms.iter().zip(&new.arms).enumerate() {
        if a.provider != b.provider {
            out.push(format!("arms[{i}].provider"));
        }
        if a.expected_cost_usd != b.expected_cost_usd {
            out.push(format!("arms[{i}].expected_cost_usd"));
        }
    }
    out
}

/// Compares the recorded campaign with a resubmission. `recorded_trials` are the trials that
/// already have rows, as they were scheduled when their rows were written.
pub fn compare<'a>(
    old: &Campaign,
    new: &Campaign,
    recorded_trials: impl IntoIterator<Item = &'a Trial>,
) -> Result<ResumePlan, Vec<Conflict>> {
    let mut conflicts = measured_conflicts(&old.spec, &new.spec);
    conflicts.extend(driver_conflicts(&old.spec.driver, &new.spec.driver));
    conflicts.extend(task_conflicts(&old.tasks, &new.tasks));
    if old.spec.id != new.spec.id {
        conflicts.push(Conflict {
            field: "id".into(),
            recorded: old.spec.id.to_string(),
            submitted: new.spec.id.to_string(),
        });
    }
    let recorded: Vec<&Trial> = recorded_trials.into_iter().collect();
    if !recorded.is_empty() {
        let wanted: HashMap<&str, &Trial> =
            recorded.iter().map(|t| (t.trial_id.as_str(), *t)).collect();
        let mut found = 0usize;
        for t in schedule::trials(new) {
            let Some(old_t) = wanted.get(t.trial_id.as_str()) else {
                continue;
            };
            found += 1;
            for ((name, a), (_, b)) in trial_fields(old_t).into_iter().zip(trial_fields(&t)) {
                if a != b {
                    conflicts.push(Conflict {
                        field: format!("trial {}.{name}", t.trial_id),
                        recorded: a,
                        submitted: b,
                    });
                }
            }
        }
        if found < wanted.len() {
            let new_ids: std::collections::HashSet<String> = schedule::trials(new)
                .map(|t| t.trial_id.to_string())
                .collect();
            let mut missing: Vec<&str> = wanted
                .keys()
                .copied()
                .filter(|id| !new_ids.contains(*id))
                .collect();
            missing.sort_unstable();
            for id in missing {
                conflicts.push(Conflict {
                    field: format!("trial {id}"),
                    recorded: "has rows".into(),
                    submitted: "not in the schedule".into(),
                });
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(conflicts);
    }
    let old_count = schedule::trial_count(&old.spec, old.tasks.len());
    let new_count = schedule::trial_count(&new.spec, new.tasks.len());
    Ok(ResumePlan {
        amended: new_count > old_count,
        added_tasks: new.tasks.len() - old.tasks.len(),
        added_trials: new_count - old_count,
        operational_changes: operational_changes(&old.spec, &new.spec),
    })
}
