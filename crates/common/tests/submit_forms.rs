//! The forms a client submits in: a minimal `spec_json` with the campaign file's defaults, a
//! campaign file's text (`campaign_toml`) with tasks inline or sent beside it, and a stream of
//! chunks. Every cheap problem is listed at once.

use std::path::Path;

use lanes_common::proto as pb;
use lanes_common::spec::{self, Campaign};
use lanes_common::spec_hash::spec_hash;
use lanes_common::submit::{SubmitAssembly, SubmitInvalid};
use pb::submit_request::Spec;

const MINIMAL_TOML: &str = r#"id = "minimal"
phase1_runs = 1
schedule_seed = 7

[[arms]]
id = "a"

[[arms]]
id = "b"
config = { model = "m", temperature = 0.5 }

[driver]
sim = {}
"#;

const MINIMAL_JSON: &str = r#"{
  "id": "minimal", "phase1_runs": 1, "schedule_seed": 7,
  "arms": [{"id": "a"}, {"id": "b", "config": {"model": "m", "temperature": 0.5}}],
  "driver": {"kind": {"sim": {}}}
}"#;

fn task(id: &str, payload: &str) -> pb::TaskSpec {
    pb::TaskSpec {
        id: id.into(),
        payload_json: payload.into(),
        ..Default::default()
    }
}

fn tasks() -> Vec<pb::TaskSpec> {
    vec![task("t1", r#"{"q": 1}"#), task("t2", ""), task("t3", "{}")]
}

fn request(spec: Spec, tasks: Vec<pb::TaskSpec>) -> pb::SubmitRequest {
    pb::SubmitRequest {
        spec: Some(spec),
        tasks,
    }
}

/// The minimal campaign as a file with the same tasks inline.
fn from_file() -> Campaign {
    let text = format!(
        "{MINIMAL_TOML}\n[tasks]\nitems = [{{ id = \"t1\", payload = {{ q = 1 }} }}, \
         {{ id = \"t2\" }}, {{ id = \"t3\" }}]\n"
    );
    spec::load_str(&text, Path::new("minimal.toml"), Path::new(".")).unwrap()
}

fn refused(r: pb::SubmitRequest) -> SubmitInvalid {
    match Campaign::try_from(r) {
        Ok(c) => panic!("took {:?}", c.spec.id),
        Err(e) => e,
    }
}

fn fields(e: &SubmitInvalid) -> Vec<&str> {
    e.violations.iter().map(|v| v.field.as_str()).collect()
}

#[test]
fn a_minimal_spec_json_gets_the_campaign_file_defaults() {
    let c = Campaign::try_from(request(Spec::SpecJson(MINIMAL_JSON.into()), tasks())).unwrap();
    let file = from_file();
    assert_eq!(c, file);
    assert_eq!(
        c.spec.arms[0].provider, "a",
        "the provider defaults to the arm id"
    );
    assert_eq!(c.spec.defaults.timeout_s, 600);
    assert_eq!(c.spec.ops.lease_ttl_s, 30);
    assert!(c.spec.ops.rate_limit_pause);
    assert_eq!(
        spec_hash(&c.spec, &c.tasks),
        spec_hash(&file.spec, &file.tasks)
    );
}

#[test]
fn null_means_the_default_for_an_optional_key() {
    let json = MINIMAL_JSON.replace(
        r#""schedule_seed": 7,"#,
        r#""schedule_seed": 7, "phase2_runs": null,
           "ops": {"quota_wait": null, "budget_cap_usd": null},
           "defaults": {"max_cost_usd": null},"#,
    );
    let c = Campaign::try_from(request(Spec::SpecJson(json), tasks())).unwrap();
    assert_eq!(c, from_file());
}

#[test]
fn every_missing_and_unknown_key_and_bad_task_is_listed_at_once() {
    let json = r#"{
      "phase2_runs": 1, "lease_ttl": 3, "schedule_seed": null,
      "arms": [{"idd": "a"}, {"id": "b", "provder": "p"}],
      "driver": {"sim": {}}
    }"#;
    let bad_tasks = vec![task("bad/id", ""), task("ok", ""), task("t3", "{not json")];
    let e = refused(request(Spec::SpecJson(json.into()), bad_tasks));
    let got = fields(&e);
    for want in [
        "tasks[0].id",
        "tasks[2].payload_json",
        "spec_json.id",
        "spec_json.phase1_runs",
        "spec_json.schedule_seed",
        "spec_json.lease_ttl",
        "spec_json.arms[0].id",
        "spec_json.arms[0].idd",
        "spec_json.arms[1].provder",
        "spec_json.driver.kind",
        "spec_json.driver.sim",
    ] {
        assert!(got.contains(&want), "{want} is not among {got:?}");
    }
    assert_eq!(got.len(), 11, "{got:?}");
    let unknown = e
        .violations
        .iter()
        .find(|v| v.field == "spec_json.lease_ttl")
        .unwrap();
    assert!(
        unknown.description.contains("lease_ttl_s") || unknown.description.contains("ops"),
        "an unknown key lists the known ones: {}",
        unknown.description
    );
    let message = e.to_string();
    assert!(message.contains("spec_json.id: is required"), "{message}");
}

#[test]
fn many_violations_stay_small_enough_for_grpc_trailers() {
    let mut spec: serde_json::Value = serde_json::from_str(MINIMAL_JSON).unwrap();
    for i in 0..200 {
        spec[format!("an_unknown_key_with_a_rather_long_name_{i:03}")] = 1.into();
    }
    let e = refused(request(Spec::SpecJson(spec.to_string()), tasks()));
    let text: usize = e
        .violations
        .iter()
        .map(|v| v.field.len() + v.description.len())
        .sum();
    assert!(text <= 2048, "{text} bytes");
    assert!(e.violations.len() > 5 && e.more > 0, "{e}");
    assert_eq!(e.violations.len() + e.more, 200);
    assert!(e.to_string().ends_with(&format!("and {} more", e.more)));
}

#[test]
fn a_rule_names_the_field_where_spec_json_keeps_it() {
    let json = MINIMAL_JSON.replace(
        r#""schedule_seed": 7,"#,
        r#""schedule_seed": 7, "ops": {"lease_ttl_s": 1},"#,
    );
    let e = refused(request(Spec::SpecJson(json), tasks()));
    assert_eq!(fields(&e), ["spec_json.ops.lease_ttl_s"]);
    let json = MINIMAL_JSON.replace(r#"{"sim": {}}"#, r#"{"sim": {"boot_s": -1}}"#);
    let e = refused(request(Spec::SpecJson(json), tasks()));
    assert_eq!(fields(&e), ["spec_json.driver.kind.sim"]);
}

#[test]
fn a_type_error_or_a_broken_rule_names_the_field() {
    let json = MINIMAL_JSON.replace(r#""phase1_runs": 1"#, r#""phase1_runs": "one""#);
    let e = refused(request(Spec::SpecJson(json), tasks()));
    assert_eq!(fields(&e), ["spec_json"]);
    assert!(e.to_string().contains("invalid type"), "{e}");

    let json = MINIMAL_JSON.replace(r#""phase1_runs": 1"#, r#""phase1_runs": 0"#);
    let e = refused(request(Spec::SpecJson(json), tasks()));
    assert_eq!(fields(&e), ["spec_json.phase1_runs"]);

    let e = refused(request(Spec::SpecJson("[1]".into()), tasks()));
    assert_eq!(fields(&e), ["spec_json"]);
    let e = refused(pb::SubmitRequest {
        spec: None,
        tasks: tasks(),
    });
    assert_eq!(fields(&e), ["spec"]);
}

#[test]
fn campaign_toml_takes_tasks_inline_or_sent_but_reads_no_file() {
    let file = from_file();
    let inline = format!(
        "{MINIMAL_TOML}\n[tasks]\nitems = [{{ id = \"t1\", payload = {{ q = 1 }} }}, \
         {{ id = \"t2\" }}, {{ id = \"t3\" }}]\n"
    );
    let c = Campaign::try_from(request(Spec::CampaignToml(inline.clone()), vec![])).unwrap();
    assert_eq!(c, file);
    let c = Campaign::try_from(request(Spec::CampaignToml(MINIMAL_TOML.into()), tasks())).unwrap();
    assert_eq!(c, file);

    let e = refused(request(Spec::CampaignToml(inline), tasks()));
    assert_eq!(fields(&e), ["tasks"]);
    assert!(e.to_string().contains("one way"), "{e}");

    let e = refused(request(Spec::CampaignToml(MINIMAL_TOML.into()), vec![]));
    assert_eq!(fields(&e), ["tasks"]);

    let with_file = format!("{MINIMAL_TOML}\n[tasks]\nfile = \"/etc/passwd\"\n");
    let e = refused(request(Spec::CampaignToml(with_file), tasks()));
    assert_eq!(fields(&e), ["campaign_toml.tasks.file"]);
    let d = &e.violations[0].description;
    assert!(
        d.starts_with("line 16: ") && d.contains("send the tasks"),
        "{d}"
    );
}

#[test]
fn campaign_toml_errors_carry_the_line() {
    let text = MINIMAL_TOML.replace("id = \"b\"", "id = \"a\"");
    let e = refused(request(Spec::CampaignToml(text), tasks()));
    assert_eq!(fields(&e), ["campaign_toml.arms[1].id"]);
    assert_eq!(
        e.violations[0].description,
        "line 9: duplicate arm id \"a\" (first defined on line 6)"
    );
    let e = refused(request(
        Spec::CampaignToml("id = \"x\"\nphase1_runs = 1\nseed = 3\n".into()),
        tasks(),
    ));
    assert_eq!(fields(&e), ["campaign_toml.seed"]);
    assert!(
        e.violations[0]
            .description
            .starts_with("line 3: unknown key"),
        "{:?}",
        e.violations[0]
    );
}

fn header(spec: Spec, tasks: Vec<pb::TaskSpec>) -> pb::SubmitChunk {
    pb::SubmitChunk {
        chunk: Some(pb::submit_chunk::Chunk::Header(request(spec, tasks))),
    }
}

fn chunk(tasks: Vec<pb::TaskSpec>) -> pb::SubmitChunk {
    pb::SubmitChunk {
        chunk: Some(pb::submit_chunk::Chunk::Tasks(pb::TaskChunk { tasks })),
    }
}

#[test]
fn a_stream_of_chunks_is_the_same_campaign_as_one_request() {
    let mut all = tasks();
    let mut a = SubmitAssembly::new(1 << 20);
    a.push(header(
        Spec::SpecJson(MINIMAL_JSON.into()),
        vec![all.remove(0)],
    ))
    .unwrap();
    a.push(chunk(vec![all.remove(0)])).unwrap();
    a.push(chunk(vec![])).unwrap();
    a.push(chunk(all)).unwrap();
    assert_eq!(a.finish().unwrap(), from_file());
}

#[test]
fn a_stream_out_of_order_or_too_large_is_refused() {
    let mut a = SubmitAssembly::new(1 << 20);
    let e = a.push(chunk(tasks())).unwrap_err();
    assert_eq!(fields(&e), ["header"]);

    let mut a = SubmitAssembly::new(1 << 20);
    a.push(header(Spec::SpecJson(MINIMAL_JSON.into()), vec![]))
        .unwrap();
    let e = a
        .push(header(Spec::SpecJson(MINIMAL_JSON.into()), vec![]))
        .unwrap_err();
    assert_eq!(fields(&e), ["header"]);

    let e = SubmitAssembly::new(1 << 20).finish().unwrap_err();
    assert_eq!(fields(&e), ["header"]);

    let mut a = SubmitAssembly::new(600);
    a.push(header(Spec::SpecJson(MINIMAL_JSON.into()), vec![]))
        .unwrap();
    let big = vec![task("t1", &format!("{{\"x\":\"{}\"}}", "y".repeat(400)))];
    let e = a.push(chunk(big)).unwrap_err();
    assert!(e.to_string().contains("--max-client-message-bytes"), "{e}");
}
