//! One validation path: every campaign the file loader refuses, a gRPC submit (the
//! `SubmitRequest` → `Campaign` conversion the coordinator runs) refuses too, for the same
//! field and the same reason.
//!
//! Each case breaks one rule twice: in the campaign file's text (loaded, and sent as
//! `campaign_toml`), and in the parsed campaign a client would submit as `spec_json`.

use std::path::Path;

use lanes_common::proto as pb;
use lanes_common::spec::{self, Campaign, DriverKind, SimFault, SpecErrorKind};
use lanes_common::submit::{SubmitAssembly, Violation};

const VALID: &str = r#"id = "valid-campaign"
phase1_runs = 2
schedule_seed = 7
quota_wait = 0.9

[defaults]
timeout_s = 60
max_turns = 10

[[arms]]
id = "alpha"
config = { model = "m" }

[[arms]]
id = "beta"

[tasks]
items = [
  { id = "t1" },
  { id = "t2", payload = { x = 1 } },
]

[driver]
sim = {}
"#;

fn load(text: &str) -> Result<Campaign, spec::SpecError> {
    spec::load_str(text, Path::new("campaign.toml"), Path::new("."))
}

fn edit(from: &str, to: &str) -> String {
    assert!(VALID.contains(from), "{from:?} is not in the campaign text");
    VALID.replacen(from, to, 1)
}

fn wire(c: &Campaign) -> pb::SubmitRequest {
    pb::SubmitRequest::try_from(c).unwrap()
}

fn spec_json(r: &mut pb::SubmitRequest) -> &mut String {
    match &mut r.spec {
        Some(pb::submit_request::Spec::SpecJson(json)) => json,
        other => panic!("not a spec_json request: {other:?}"),
    }
}

/// The field a submit names for a field of the campaign file: where `spec_json` keeps it.
fn wire_field(file_field: &str) -> String {
    if let Some(rest) = file_field.strip_prefix("tasks.items") {
        return format!("tasks{}", rest.replace(".payload", ".payload_json"));
    }
    if file_field == "tasks" {
        return "tasks".to_owned();
    }
    let operational = [
        "lease_ttl_s",
        "publish_grace_s",
        "cutoff_utc",
        "budget_cap_usd",
        "quota_wait",
        "quota_stop",
        "rate_limit_pause",
    ];
    if operational.iter().any(|k| file_field.starts_with(k)) {
        return format!("spec_json.ops.{file_field}");
    }
    let moved = file_field
        .replacen("driver.sim", "driver.kind.sim", 1)
        .replacen("driver.command", "driver.kind.command", 1)
        .replacen("driver.name", "driver.kind.named", 1)
        .replacen("driver.expect", "expect", 1);
    format!("spec_json.{moved}")
}

/// Breaks the rule in what a client submits.
type Submit = Box<dyn Fn(&mut Campaign, &mut pb::SubmitRequest)>;

/// A rule broken in the file and on the wire.
struct Case {
    name: &'static str,
    file: String,
    submit: Submit,
}

fn case(
    name: &'static str,
    file: String,
    submit: impl Fn(&mut Campaign, &mut pb::SubmitRequest) + 'static,
) -> Case {
    Case {
        name,
        file,
        submit: Box::new(submit),
    }
}

/// Re-encodes the spec after `f` changed it.
fn spec_change(
    f: impl Fn(&mut Campaign) + 'static,
) -> impl Fn(&mut Campaign, &mut pb::SubmitRequest) + 'static {
    move |c, r| {
        f(c);
        *r = wire(c);
    }
}

fn sim(c: &mut Campaign) -> &mut lanes_common::spec::SimConfig {
    match &mut c.spec.driver.kind {
        DriverKind::Sim(s) => s,
        DriverKind::Command(_) | DriverKind::Named(_) | DriverKind::Container(_) => {
            panic!("the valid campaign uses the sim")
        }
    }
}

fn cases() -> Vec<Case> {
    let many_arms: String = (0..65)
        .map(|i| format!("[[arms]]\nid = \"a{i}\"\n\n"))
        .collect();
    let big = "x".repeat(70_000);
    let big2 = big.clone();
    vec![
        case(
            "phase1_runs = 0",
            edit("phase1_runs = 2", "phase1_runs = 0"),
            spec_change(|c| c.spec.phase1_runs = 0),
        ),
        case(
            "too many runs",
            edit("phase1_runs = 2", "phase1_runs = 2\nphase2_runs = 9999"),
            spec_change(|c| c.spec.phase2_runs = 9999),
        ),
        case(
            "runs overflow u32",
            edit(
                "phase1_runs = 2",
                "phase1_runs = 2\nphase2_runs = 4294967295",
            ),
            spec_change(|c| c.spec.phase2_runs = u32::MAX),
        ),
        case(
            "lease_ttl_s = 2",
            edit("schedule_seed = 7", "schedule_seed = 7\nlease_ttl_s = 2"),
            spec_change(|c| c.spec.ops.lease_ttl_s = 2),
        ),
        case(
            "budget_cap_usd = 0",
            edit(
                "schedule_seed = 7",
                "schedule_seed = 7\nbudget_cap_usd = 0.0",
            ),
            spec_change(|c| c.spec.ops.budget_cap_usd = Some(0.0)),
        ),
        case(
            "quota_wait = 1.5",
            edit("quota_wait = 0.9", "quota_wait = 1.5"),
            spec_change(|c| c.spec.ops.quota_wait = 1.5),
        ),
        case(
            "quota_stop below quota_wait",
            edit("quota_wait = 0.9", "quota_wait = 0.9\nquota_stop = 0.5"),
            spec_change(|c| c.spec.ops.quota_stop = Some(0.5)),
        ),
        case(
            "quota_stop = 2",
            edit("quota_wait = 0.9", "quota_wait = 0.9\nquota_stop = 2.0"),
            spec_change(|c| c.spec.ops.quota_stop = Some(2.0)),
        ),
        case(
            "defaults.timeout_s = 0",
            edit("timeout_s = 60", "timeout_s = 0"),
            spec_change(|c| c.spec.defaults.timeout_s = 0),
        ),
        case(
            "defaults.max_turns = 0",
            edit("max_turns = 10", "max_turns = 0"),
            spec_change(|c| c.spec.defaults.max_turns = 0),
        ),
        case(
            "defaults.max_cost_usd = -1",
            edit("max_turns = 10", "max_turns = 10\nmax_cost_usd = -1.0"),
            spec_change(|c| c.spec.defaults.max_cost_usd = Some(-1.0)),
        ),
        case(
            "no arms",
            edit(
                "[[arms]]\nid = \"alpha\"\nconfig = { model = \"m\" }\n\n[[arms]]\nid = \"beta\"\n",
                "",
            ),
            spec_change(|c| c.spec.arms.clear()),
        ),
        case(
            "65 arms",
            edit(
                "[[arms]]\nid = \"alpha\"",
                &format!("{many_arms}[[arms]]\nid = \"alpha\""),
            ),
            spec_change(|c| {
                let arm = c.spec.arms[0].clone();
                c.spec.arms = (0..65)
                    .map(|i| spec::Arm {
                        id: lanes_common::ArmId::new(format!("a{i}")).unwrap(),
                        provider: format!("a{i}"),
                        ..arm.clone()
                    })
                    .collect();
            }),
        ),
        case(
            "duplicate arm id",
            edit("id = \"beta\"", "id = \"alpha\""),
            spec_change(|c| {
                c.spec.arms[1].id = c.spec.arms[0].id.clone();
                c.spec.arms[1].provider = "alpha".into();
            }),
        ),
        case(
            "empty provider",
            edit("id = \"beta\"", "id = \"beta\"\nprovider = \"\""),
            spec_change(|c| c.spec.arms[1].provider.clear()),
        ),
        case(
            "provider too long",
            edit(
                "id = \"beta\"",
                &format!("id = \"beta\"\nprovider = \"{}\"", "p".repeat(129)),
            ),
            spec_change(|c| c.spec.arms[1].provider = "p".repeat(129)),
        ),
        case(
            "expected_cost_usd = -1",
            edit("id = \"beta\"", "id = \"beta\"\nexpected_cost_usd = -1.0"),
            spec_change(|c| c.spec.arms[1].expected_cost_usd = Some(-1.0)),
        ),
        case(
            "arm config too large",
            edit(
                "config = { model = \"m\" }",
                &format!("config = {{ model = \"{big}\" }}"),
            ),
            spec_change(move |c| c.spec.arms[0].config = serde_json::json!({ "model": big2 })),
        ),
        case(
            "retry.preflight_limit = 0",
            format!("{VALID}\n[retry]\npreflight_limit = 0\n"),
            spec_change(|c| c.spec.retry.preflight_limit = 0),
        ),
        case(
            "empty command",
            edit("sim = {}", "command = [\"\"]"),
            spec_change(|c| c.spec.driver.kind = DriverKind::Command(vec![String::new()])),
        ),
        case(
            "too many command arguments",
            edit(
                "sim = {}",
                &format!("command = [{}]", vec!["\"a\""; 257].join(", ")),
            ),
            spec_change(|c| c.spec.driver.kind = DriverKind::Command(vec!["a".into(); 257])),
        ),
        case(
            "sim pass rate over 1",
            edit("sim = {}", "sim = { default_pass_rate = 2.0 }"),
            spec_change(|c| sim(c).default_pass_rate = 2.0),
        ),
        case(
            "sim fault the reaper owns",
            edit("sim = {}", "sim = { faults = { lease_expired = 0.1 } }"),
            spec_change(|c| {
                sim(c).faults.insert(
                    SimFault::Kind(lanes_common::row::FailureKind::LeaseExpired),
                    0.1,
                );
            }),
        ),
        case(
            "empty secret key",
            edit("sim = {}", "sim = {}\nsecret_payload_keys = [\"\"]"),
            spec_change(|c| c.spec.driver.secret_payload_keys = vec![String::new()]),
        ),
        case(
            "pin value too long",
            format!(
                "{VALID}\n[driver.expect]\nversion = \"{}\"\n",
                "v".repeat(1025)
            ),
            spec_change(|c| {
                c.spec.expect.insert("version".into(), "v".repeat(1025));
            }),
        ),
        case(
            "task timeout_s = 0",
            edit("{ id = \"t2\"", "{ id = \"t2\", timeout_s = 0"),
            spec_change(|c| c.tasks[1].timeout_s = Some(0)),
        ),
        case(
            "task max_turns = 0",
            edit("{ id = \"t2\"", "{ id = \"t2\", max_turns = 0"),
            spec_change(|c| c.tasks[1].max_turns = Some(0)),
        ),
        case(
            "task max_cost_usd = -1",
            edit("{ id = \"t2\"", "{ id = \"t2\", max_cost_usd = -1.0"),
            spec_change(|c| c.tasks[1].max_cost_usd = Some(-1.0)),
        ),
        case(
            "task group too long",
            edit(
                "{ id = \"t2\"",
                &format!("{{ id = \"t2\", group = \"{}\"", "g".repeat(257)),
            ),
            spec_change(|c| c.tasks[1].group = Some("g".repeat(257))),
        ),
        case(
            "too many tags",
            edit(
                "{ id = \"t2\"",
                &format!("{{ id = \"t2\", tags = [{}]", vec!["\"t\""; 65].join(",")),
            ),
            spec_change(|c| c.tasks[1].tags = vec!["t".into(); 65]),
        ),
        case(
            "tag too long",
            edit(
                "{ id = \"t2\"",
                &format!("{{ id = \"t2\", tags = [\"{}\"]", "t".repeat(257)),
            ),
            spec_change(|c| c.tasks[1].tags = vec!["t".repeat(257)]),
        ),
        case(
            "duplicate task ids",
            edit("{ id = \"t2\"", "{ id = \"t1\""),
            |_, r| r.tasks[1].id = "t1".into(),
        ),
        case(
            "no tasks",
            edit(
                "items = [\n  { id = \"t1\" },\n  { id = \"t2\", payload = { x = 1 } },\n]",
                "items = []",
            ),
            |_, r| r.tasks.clear(),
        ),
        case(
            "task id",
            edit("{ id = \"t2\"", "{ id = \"-t2\""),
            |_, r| r.tasks[1].id = "-t2".into(),
        ),
        case(
            "payload over 64 KiB",
            edit(
                "payload = { x = 1 }",
                &format!("payload = {{ x = \"{}\" }}", "y".repeat(70_000)),
            ),
            |_, r| r.tasks[1].payload_json = format!("{{\"x\":\"{}\"}}", "y".repeat(70_000)),
        ),
        case(
            "payload not an object",
            edit("payload = { x = 1 }", "payload = [1, 2]"),
            |_, r| r.tasks[1].payload_json = "[1,2]".into(),
        ),
        case(
            "campaign id",
            edit("id = \"valid-campaign\"", "id = \"Valid_Campaign\""),
            |_, r| {
                let json = spec_json(r);
                *json = json.replace("\"valid-campaign\"", "\"Valid_Campaign\"")
            },
        ),
        case("arm id", edit("id = \"beta\"", "id = \"be.ta\""), |_, r| {
            let json = spec_json(r);
            *json = json.replace("\"id\":\"beta\"", "\"id\":\"be.ta\"")
        }),
    ]
}

#[test]
fn a_submit_refuses_what_the_loader_refuses() {
    let valid = load(VALID).unwrap();
    Campaign::try_from(wire(&valid)).expect("the valid campaign submits");
    let mut failures = Vec::new();
    for c in cases() {
        let file_err = match load(&c.file) {
            Ok(_) => panic!("{}: the loader took it", c.name),
            Err(e) => e,
        };
        // The file's own text, sent as campaign_toml: the loader's error, line and all.
        let sent = pb::SubmitRequest {
            spec: Some(pb::submit_request::Spec::CampaignToml(c.file.clone())),
            tasks: Vec::new(),
        };
        match Campaign::try_from(sent) {
            Ok(_) => failures.push(format!("{}: campaign_toml took it", c.name)),
            Err(e) => {
                let v = &e.violations[0];
                let field = match file_err.field.as_str() {
                    "" => "campaign_toml".to_owned(),
                    f => format!("campaign_toml.{f}"),
                };
                let description = match file_err.line {
                    Some(line) => format!("line {line}: {}", file_err.kind),
                    None => file_err.kind.to_string(),
                };
                if v.field != field || v.description != description {
                    failures.push(format!(
                        "{}: the file says {field}: {description:?}, campaign_toml {}: {:?}",
                        c.name, v.field, v.description
                    ));
                }
            }
        }
        let mut campaign = valid.clone();
        let mut request = wire(&campaign);
        (c.submit)(&mut campaign, &mut request);
        let wire_err: Violation = match Campaign::try_from(request) {
            Ok(_) => {
                failures.push(format!(
                    "{}: a submit took it; the file: {file_err}",
                    c.name
                ));
                continue;
            }
            Err(e) => e.violations[0].clone(),
        };
        // The same reason; only the file knows lines.
        let mut kind = (*file_err.kind).clone();
        if let SpecErrorKind::Duplicate { first_line, .. } = &mut kind {
            *first_line = None;
        }
        let reason = kind.to_string();
        if !wire_err.description.contains(&reason) {
            failures.push(format!(
                "{}: the file says {reason:?}, a submit {:?}",
                c.name, wire_err.description
            ));
        }
        // The same field, or for a value its type refuses, the spec as a whole.
        let parse_error =
            matches!(kind, SpecErrorKind::InvalidId(_)) && wire_err.field == "spec_json";
        if !(parse_error || wire_err.field == wire_field(&file_err.field)) {
            failures.push(format!(
                "{}: the file names {:?}, a submit {:?}",
                c.name, file_err.field, wire_err.field
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The first violation of a refused submit.
fn first_violation(r: pb::SubmitRequest) -> Violation {
    match Campaign::try_from(r) {
        Ok(_) => panic!("the submit was taken"),
        Err(e) => e.violations[0].clone(),
    }
}

#[test]
fn a_key_twice_in_spec_json_or_a_payload_is_refused_naming_the_key_and_its_path() {
    let valid = load(VALID).unwrap();
    // At the top level: the last `id` used to win, changing the campaign's id.
    let mut r = wire(&valid);
    let json = spec_json(&mut r);
    *json = json.replacen('{', "{\"id\":\"other-campaign\",", 1);
    let v = first_violation(r);
    assert_eq!(v.field, "spec_json.id", "{v:?}");
    assert!(v.description.contains("duplicate key \"id\""), "{v:?}");

    // At any depth: an arm's config.
    let mut r = wire(&valid);
    let json = spec_json(&mut r);
    assert!(json.contains("\"model\":\"m\""), "{json}");
    *json = json.replacen("\"model\":\"m\"", "\"model\":\"m\",\"model\":\"n\"", 1);
    let v = first_violation(r);
    assert_eq!(v.field, "spec_json.arms[0].config.model", "{v:?}");
    assert!(v.description.contains("duplicate key \"model\""), "{v:?}");

    // A task's payload_json, sent whole or in a stream chunk.
    let mut r = wire(&valid);
    r.tasks[1].payload_json = r#"{"x":1,"y":[{"z":1,"z":2}]}"#.into();
    let v = first_violation(r.clone());
    assert_eq!(v.field, "tasks[1].payload_json.y[0].z", "{v:?}");
    assert!(v.description.contains("duplicate key \"z\""), "{v:?}");
    let tasks = std::mem::take(&mut r.tasks);
    let mut stream = SubmitAssembly::new(usize::MAX);
    stream
        .push(pb::SubmitChunk {
            chunk: Some(pb::submit_chunk::Chunk::Header(r)),
        })
        .unwrap();
    stream
        .push(pb::SubmitChunk {
            chunk: Some(pb::submit_chunk::Chunk::Tasks(pb::TaskChunk { tasks })),
        })
        .unwrap();
    let e = stream.finish().unwrap_err();
    assert_eq!(e.violations[0].field, "tasks[1].payload_json.y[0].z", "{e}");
}

#[test]
fn a_payload_json_that_is_not_an_object_is_refused() {
    let valid = load(VALID).unwrap();
    for bad in ["[1,2]", "3", "null", "\"s\""] {
        let mut r = wire(&valid);
        r.tasks[1].payload_json = bad.into();
        let v = first_violation(r);
        assert_eq!(v.field, "tasks[1].payload_json", "{bad}: {v:?}");
        assert!(
            v.description.contains("must be a JSON object"),
            "{bad}: {v:?}"
        );
    }
}

#[test]
fn nan_in_a_campaign_toml_is_refused_naming_its_line() {
    let text = edit("payload = { x = 1 }", "payload = { x = nan }");
    let v = first_violation(pb::SubmitRequest {
        spec: Some(pb::submit_request::Spec::CampaignToml(text)),
        tasks: Vec::new(),
    });
    assert_eq!(v.field, "campaign_toml.tasks.items[1].payload.x", "{v:?}");
    assert!(v.description.starts_with("line 20: "), "{v:?}");
    assert!(v.description.contains("not nan"), "{v:?}");
}
