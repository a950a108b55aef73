//! Resume and amendments: `resume::compare` refuses drift field by field, accepts
//! growth as an amendment, and lets operational options change freely.

use std::path::Path;

use lanes_common::resume::{Conflict, ResumePlan, compare};
use lanes_common::schedule::{self, Trial};
use lanes_common::spec::{self, Campaign};

const BASE: &str = r#"
id = "resume-test"
phase1_runs = 2
phase2_runs = 1
schedule_seed = 20261005
pairing = "group"
gate = false
lease_ttl_s = 30
publish_grace_s = 900
cutoff_utc = "2026-12-31T00:00:00Z"
budget_cap_usd = 250.0
quota_wait = 0.95
quota_stop = 0.99

[defaults]
timeout_s = 240
max_turns = 30
max_cost_usd = 6.0

[[arms]]
id = "cc-cua"
config = { model = "sonnet", effort = "high" }
provider = "anthropic"
expected_cost_usd = 0.8

[[arms]]
id = "codex"
config = { model = "gpt", effort = "low" }
provider = "openai"

[tasks]
items = [
  { id = "MB-01", payload = { instruction = "open the file" } },
  { id = "MB-02", payload = { instruction = "close the file" } },
]

[driver]
command = ["python3", "driver.py"]
secret_payload_keys = ["vm_password"]

[driver.expect]
dataset_commit = "a1b2c3d"

[retry]
infra_retries = 1
overloaded_retries = 3
"#;

fn load(text: &str) -> Campaign {
    spec::load_str(text, Path::new("x.toml"), Path::new("."))
        .unwrap_or_else(|e| panic!("campaign does not load: {e}\n{text}"))
}

/// `BASE` with `from` replaced by `to`; `from` must be there.
fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} is not in the campaign text");
    text.replacen(from, to, 1)
}

fn trials(c: &Campaign) -> Vec<Trial> {
    schedule::trials(c).collect()
}

fn phase1_trials(c: &Campaign) -> Vec<Trial> {
    schedule::trials(c)
        .filter(|t| t.phase == schedule::SchedulePhase::First)
        .collect()
}

fn conflicts(old: &Campaign, new: &Campaign, recorded: &[Trial]) -> Vec<Conflict> {
    match compare(old, new, recorded) {
        Ok(plan) => panic!("expected a refusal, got {plan:?}"),
        Err(c) => c,
    }
}

fn fields(conflicts: &[Conflict]) -> Vec<&str> {
    conflicts.iter().map(|c| c.field.as_str()).collect()
}

fn plan(old: &Campaign, new: &Campaign, recorded: &[Trial]) -> ResumePlan {
    compare(old, new, recorded).unwrap_or_else(|c| panic!("expected acceptance, got {c:#?}"))
}

#[test]
fn an_identical_resubmission_is_a_plain_resume() {
    let old = load(BASE);
    let new = load(BASE);
    for recorded in [vec![], trials(&old)] {
        assert_eq!(
            plan(&old, &new, &recorded),
            ResumePlan {
                amended: false,
                added_tasks: 0,
                added_trials: 0,
                operational_changes: vec![],
            }
        );
    }
}

#[test]
fn measured_drift_is_refused_naming_the_field() {
    let old = load(BASE);
    let cases: &[(&str, &str, &str)] = &[
        (
            r#"config = { model = "sonnet", effort = "high" }"#,
            r#"config = { model = "opus", effort = "high" }"#,
            "arms[0].config.model",
        ),
        (
            r#"config = { model = "gpt", effort = "low" }"#,
            r#"config = { model = "gpt", effort = "low", temperature = 0 }"#,
            "arms[1].config.temperature",
        ),
        (
            "infra_retries = 1",
            "infra_retries = 2",
            "retry.infra_retries",
        ),
        (
            "overloaded_retries = 3",
            "overloaded_retries = 4",
            "retry.overloaded_retries",
        ),
        (
            "schedule_seed = 20261005",
            "schedule_seed = 20261006",
            "schedule_seed",
        ),
        (r#"pairing = "group""#, r#"pairing = "none""#, "pairing"),
        ("gate = false", "gate = true", "gate"),
        ("timeout_s = 240", "timeout_s = 241", "defaults.timeout_s"),
        ("max_turns = 30", "max_turns = 31", "defaults.max_turns"),
        (
            r#"dataset_commit = "a1b2c3d""#,
            r#"dataset_commit = "ffff000""#,
            "driver.expect.dataset_commit",
        ),
        (
            r#"dataset_commit = "a1b2c3d""#,
            "dataset_commit = \"a1b2c3d\"\nagent_sha256 = \"00\"",
            "driver.expect.agent_sha256",
        ),
        (
            r#"instruction = "close the file""#,
            r#"instruction = "close the door""#,
            "tasks[MB-02].payload_sha256",
        ),
        (r#"id = "codex""#, r#"id = "codex2""#, "arms[1].id"),
    ];
    for (from, to, field) in cases {
        let new = load(&edit(BASE, from, to));
        // Refused with no rows yet: the option applies to every trial.
        let c = conflicts(&old, &new, &[]);
        assert!(
            fields(&c).contains(field),
            "changing {from:?} to {to:?}: expected a conflict on {field}, got {:?}",
            fields(&c)
        );
        // And refused, naming the same field, once rows exist.
        let c = conflicts(&old, &new, &phase1_trials(&old));
        assert!(fields(&c).contains(field), "{field}: {:?}", fields(&c));
    }
}

#[test]
fn a_conflict_says_what_was_recorded_and_what_was_submitted() {
    let old = load(BASE);
    let new = load(&edit(BASE, "infra_retries = 1", "infra_retries = 2"));
    assert_eq!(
        conflicts(&old, &new, &[]),
        vec![Conflict {
            field: "retry.infra_retries".into(),
            recorded: "1".into(),
            submitted: "2".into(),
        }]
    );
    let new = load(&edit(
        BASE,
        r#"config = { model = "sonnet", effort = "high" }"#,
        r#"config = { model = "opus", effort = "high" }"#,
    ));
    assert_eq!(
        conflicts(&old, &new, &[]),
        vec![Conflict {
            field: "arms[0].config.model".into(),
            recorded: "\"sonnet\"".into(),
            submitted: "\"opus\"".into(),
        }]
    );
}

#[test]
fn every_conflict_is_listed() {
    let old = load(BASE);
    let text = edit(BASE, "infra_retries = 1", "infra_retries = 2");
    let text = edit(&text, "gate = false", "gate = true");
    let text = edit(&text, "timeout_s = 240", "timeout_s = 100");
    let c = conflicts(&old, &load(&text), &[]);
    let f = fields(&c);
    for field in ["retry.infra_retries", "gate", "defaults.timeout_s"] {
        assert!(f.contains(&field), "{field} missing from {f:?}");
    }
    assert_eq!(f.len(), 3, "{f:?}");
}

#[test]
fn a_recorded_trial_scheduled_differently_is_refused() {
    let old = load(BASE);
    // A new seed moves every run's seed: every recorded trial says so.
    let new = load(&edit(BASE, "schedule_seed = 20261005", "schedule_seed = 1"));
    let recorded = [trials(&old)[0].clone()];
    let c = conflicts(&old, &new, &recorded);
    assert_eq!(
        fields(&c),
        vec!["schedule_seed", "trial MB-01.r0.cc-cua.seed"]
    );
    // A new default timeout reaches the recorded trial too.
    let new = load(&edit(BASE, "timeout_s = 240", "timeout_s = 241"));
    let c = conflicts(&old, &new, &recorded);
    assert!(
        fields(&c).contains(&"trial MB-01.r0.cc-cua.timeout_s"),
        "{c:?}"
    );
}

#[test]
fn reordering_tasks_is_refused() {
    let old = load(BASE);
    let swapped = edit(
        &edit(
            BASE,
            r#"{ id = "MB-01", payload = { instruction = "open the file" } },"#,
            "@@",
        ),
        r#"{ id = "MB-02", payload = { instruction = "close the file" } },"#,
        r#"{ id = "MB-02", payload = { instruction = "close the file" } },
  { id = "MB-01", payload = { instruction = "open the file" } },"#,
    )
    .replace("@@", "");
    let new = load(&swapped);
    assert_eq!(new.tasks[0].id.as_str(), "MB-02");
    let c = conflicts(&old, &new, &[]);
    assert_eq!(fields(&c), vec!["tasks[0].id", "tasks[1].id"]);
    // Recorded trials would also sit elsewhere in the schedule.
    let c = conflicts(&old, &new, &phase1_trials(&old));
    assert!(
        fields(&c).contains(&"trial MB-01.r0.cc-cua.task_pos"),
        "{c:?}"
    );
}

#[test]
fn removing_tasks_arms_or_runs_is_refused() {
    let old = load(BASE);
    let new = load(&edit(
        BASE,
        r#"  { id = "MB-02", payload = { instruction = "close the file" } },"#,
        "",
    ));
    assert!(fields(&conflicts(&old, &new, &[])).contains(&"tasks"));

    let new = load(&edit(BASE, "phase2_runs = 1", "phase2_runs = 0"));
    assert_eq!(fields(&conflicts(&old, &new, &[])), vec!["phase2_runs"]);
    let new = load(&edit(BASE, "phase1_runs = 2", "phase1_runs = 1"));
    assert!(fields(&conflicts(&old, &new, &[])).contains(&"phase1_runs"));

    // Adding an arm changes what every run group measures.
    let new = load(&edit(
        BASE,
        "[tasks]",
        "[[arms]]\nid = \"third\"\n\n[tasks]",
    ));
    assert!(fields(&conflicts(&old, &new, &[])).contains(&"arms[2]"));
}

#[test]
fn appending_tasks_is_an_amendment() {
    let old = load(BASE);
    let new = load(&edit(
        BASE,
        r#"  { id = "MB-02", payload = { instruction = "close the file" } },"#,
        r#"  { id = "MB-02", payload = { instruction = "close the file" } },
  { id = "MB-03" },
  { id = "MB-04", payload = { x = 1 } },"#,
    ));
    // Rows exist for every trial, phase 2 included: appended tasks change none of them.
    let p = plan(&old, &new, &trials(&old));
    assert_eq!(
        p,
        ResumePlan {
            amended: true,
            added_tasks: 2,
            // 2 tasks x 3 runs x 2 arms.
            added_trials: 12,
            operational_changes: vec![],
        }
    );
}

#[test]
fn more_runs_is_an_amendment() {
    let old = load(BASE);
    let new = load(&edit(BASE, "phase2_runs = 1", "phase2_runs = 3"));
    let p = plan(&old, &new, &trials(&old));
    assert_eq!(
        (p.amended, p.added_tasks, p.added_trials),
        // 2 tasks x 2 runs x 2 arms.
        (true, 0, 8)
    );
    // More phase-1 runs are fine while no phase-2 trial has rows.
    let new = load(&edit(BASE, "phase1_runs = 2", "phase1_runs = 3"));
    let p = plan(&old, &new, &phase1_trials(&old));
    assert_eq!((p.amended, p.added_trials), (true, 4));
}

#[test]
fn more_phase1_runs_refused_once_a_phase2_trial_has_rows() {
    let old = load(BASE);
    let new = load(&edit(BASE, "phase1_runs = 2", "phase1_runs = 3"));
    let phase2: Vec<Trial> = trials(&old)
        .into_iter()
        .filter(|t| t.phase == schedule::SchedulePhase::Second)
        .collect();
    let recorded = [phase2[0].clone()];
    assert_eq!(recorded[0].trial_id.as_str(), "MB-01.r2.cc-cua");
    let c = conflicts(&old, &new, &recorded);
    let phase = c
        .iter()
        .find(|c| c.field == "trial MB-01.r2.cc-cua.phase")
        .unwrap_or_else(|| panic!("no phase conflict in {c:?}"));
    assert_eq!(
        (phase.recorded.as_str(), phase.submitted.as_str()),
        ("2", "1")
    );
    assert!(fields(&c).contains(&"trial MB-01.r2.cc-cua.block"));
}

#[test]
fn operational_changes_are_free_and_listed() {
    let old = load(BASE);
    let cases: &[(&str, &str, &str)] = &[
        (
            r#"cutoff_utc = "2026-12-31T00:00:00Z""#,
            r#"cutoff_utc = "2027-01-31T00:00:00Z""#,
            "cutoff_utc",
        ),
        (
            "budget_cap_usd = 250.0",
            "budget_cap_usd = 500.0",
            "budget_cap_usd",
        ),
        ("lease_ttl_s = 30", "lease_ttl_s = 60", "lease_ttl_s"),
        (
            "publish_grace_s = 900",
            "publish_grace_s = 60",
            "publish_grace_s",
        ),
        ("quota_wait = 0.95", "quota_wait = 0.9", "quota_wait"),
        ("quota_stop = 0.99", "quota_stop = 1.0", "quota_stop"),
        (
            r#"secret_payload_keys = ["vm_password"]"#,
            r#"secret_payload_keys = ["vm_password", "proxy"]"#,
            "driver.secret_payload_keys",
        ),
        (
            r#"provider = "anthropic""#,
            r#"provider = "bedrock""#,
            "arms[0].provider",
        ),
        (
            "expected_cost_usd = 0.8",
            "expected_cost_usd = 1.5",
            "arms[0].expected_cost_usd",
        ),
    ];
    let recorded = trials(&old);
    for (from, to, name) in cases {
        let new = load(&edit(BASE, from, to));
        assert_eq!(
            plan(&old, &new, &recorded),
            ResumePlan {
                amended: false,
                added_tasks: 0,
                added_trials: 0,
                operational_changes: vec![name.to_string()],
            },
            "changing {from:?} to {to:?}"
        );
    }
    // All at once, each listed.
    let mut text = BASE.to_owned();
    for (from, to, _) in cases {
        text = edit(&text, from, to);
    }
    let p = plan(&old, &load(&text), &recorded);
    assert_eq!(
        p.operational_changes,
        vec![
            "lease_ttl_s",
            "publish_grace_s",
            "cutoff_utc",
            "budget_cap_usd",
            "quota_wait",
            "quota_stop",
            "driver.secret_payload_keys",
            "arms[0].provider",
            "arms[0].expected_cost_usd",
        ]
    );
    assert!(!p.amended);
}

#[test]
fn growth_and_operational_changes_together() {
    let old = load(BASE);
    let text = edit(BASE, "phase2_runs = 1", "phase2_runs = 2");
    let text = edit(&text, "lease_ttl_s = 30", "lease_ttl_s = 45");
    let p = plan(&old, &load(&text), &trials(&old));
    assert_eq!(
        p,
        ResumePlan {
            amended: true,
            added_tasks: 0,
            added_trials: 4,
            operational_changes: vec!["lease_ttl_s".into()],
        }
    );
}

#[test]
fn a_different_campaign_id_is_refused() {
    let old = load(BASE);
    let new = load(&edit(BASE, r#"id = "resume-test""#, r#"id = "other""#));
    assert_eq!(fields(&conflicts(&old, &new, &[])), vec!["id"]);
}

/// The driver is part of what a campaign measures: a resubmission that changes its command,
/// its kind, its name, its sim settings or its env is refused, naming the field (and never an
/// env value, which may be a secret). A new driver needs a new campaign id.
#[test]
fn a_driver_change_is_refused_naming_the_field() {
    let old = load(BASE);
    let cases: &[(&str, &str, &str)] = &[
        (
            r#"command = ["python3", "driver.py"]"#,
            r#"command = ["/opt/venv/bin/python", "driver.py", "--fast"]"#,
            "driver.command",
        ),
        (
            r#"command = ["python3", "driver.py"]"#,
            "sim = {}",
            "driver",
        ),
        (
            r#"command = ["python3", "driver.py"]"#,
            r#"name = "osworld""#,
            "driver",
        ),
        (
            r#"secret_payload_keys = ["vm_password"]"#,
            "secret_payload_keys = [\"vm_password\"]\nenv = { API_KEY = \"sk-secret-value\" }",
            "driver.env.API_KEY",
        ),
    ];
    for (from, to, field) in cases {
        let new = load(&edit(BASE, from, to));
        for recorded in [&[][..], &trials(&old)[..]] {
            let c = conflicts(&old, &new, recorded);
            assert_eq!(fields(&c), vec![*field], "changing {from:?} to {to:?}");
            assert!(
                c.iter().all(
                    |c| !c.recorded.contains("sk-secret") && !c.submitted.contains("sk-secret")
                ),
                "{c:?}"
            );
        }
    }
    // Between named drivers, between sim settings, and between env values.
    let named = load(&edit(
        BASE,
        r#"command = ["python3", "driver.py"]"#,
        r#"name = "osworld""#,
    ));
    let renamed = load(&edit(
        BASE,
        r#"command = ["python3", "driver.py"]"#,
        r#"name = "osworld2""#,
    ));
    assert_eq!(
        fields(&conflicts(&named, &renamed, &[])),
        vec!["driver.name"]
    );
    let sim = load(&edit(
        BASE,
        r#"command = ["python3", "driver.py"]"#,
        "sim = { boot_s = 1.0 }",
    ));
    let sim2 = load(&edit(
        BASE,
        r#"command = ["python3", "driver.py"]"#,
        "sim = { boot_s = 2.0 }",
    ));
    assert_eq!(
        fields(&conflicts(&sim, &sim2, &[])),
        vec!["driver.sim.boot_s"]
    );
    let env = |v: &str| {
        load(&edit(
            BASE,
            r#"secret_payload_keys = ["vm_password"]"#,
            &format!("env = {{ API_KEY = \"{v}\" }}"),
        ))
    };
    let c = conflicts(&env("$API_KEY"), &env("$OTHER_KEY"), &[]);
    assert_eq!(fields(&c), vec!["driver.env.API_KEY"]);
    assert_eq!(
        (c[0].recorded.as_str(), c[0].submitted.as_str()),
        ("set", "set to another value")
    );
}

#[test]
fn a_refusal_of_thousands_of_conflicts_lists_the_first_and_counts_the_rest() {
    use lanes_common::limits::{MAX_REFUSAL_BYTES, MAX_REFUSAL_ITEMS};
    use lanes_common::resume::Refusal;
    // A refusal travels in a gRPC status: 20,000 conflicts in full overflowed a client's
    // metadata limit, and the client saw RESOURCE_EXHAUSTED instead of the refusal.
    let conflicts: Vec<Conflict> = (0..20_000)
        .map(|i| Conflict {
            field: format!("tasks[T{i}].payload_sha256"),
            recorded: "a".repeat(64),
            submitted: "b".repeat(64),
        })
        .collect();
    let r = Refusal::new(conflicts.clone());
    assert_eq!(r.listed[..], conflicts[..r.listed.len()]);
    assert!(r.listed.len() <= MAX_REFUSAL_ITEMS);
    assert_eq!(r.listed.len() + r.more, conflicts.len());
    let shown = r.to_string();
    assert!(shown.starts_with("resume refused: tasks[T0].payload_sha256: recorded aaa"));
    assert!(
        shown.ends_with(&format!("; and {} more", r.more)),
        "{shown}"
    );
    assert!(
        shown.len() <= 2 * MAX_REFUSAL_BYTES,
        "{} bytes",
        shown.len()
    );

    // One huge value is cut, never dropped: a refusal always says why.
    let r = Refusal::new(vec![Conflict {
        field: "arms[0].config.prompt".into(),
        recorded: "x".repeat(60_000),
        submitted: "y".repeat(60_000),
    }]);
    assert_eq!((r.listed.len(), r.more), (1, 0));
    let shown = r.to_string();
    assert!(
        shown.contains("arms[0].config.prompt: recorded xxx"),
        "{shown}"
    );
    assert!(shown.len() <= MAX_REFUSAL_BYTES, "{} bytes", shown.len());
}
