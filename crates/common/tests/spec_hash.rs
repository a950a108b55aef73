//! The spec hash: sha256 over a canonical encoding of every measured option. It is
//! pinned, unchanged by operational options and by formatting, and changed by every measured
//! option.

use std::collections::HashSet;
use std::path::Path;

use lanes_common::spec::{self, Campaign};
use lanes_common::spec_hash::spec_hash;

const BASE: &str = r#"
id = "hash-test"
phase1_runs = 3
phase2_runs = 2
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
id = "cc-cua-driver"
config = { model = "claude-sonnet-5-5", effort = "high", tools = ["computer", "bash"] }
provider = "anthropic"
expected_cost_usd = 0.8

[[arms]]
id = "cc-codex-cu"
config = { model = "gpt-6", effort = "medium" }

[tasks]
items = [
  { id = "MB-01", group = "files", tags = ["easy"], payload = { instruction = "open a.txt", proxy = false } },
  { id = "MB-02", timeout_s = 120, payload = { instruction = "close b.txt", steps = [1, 2, 3] } },
  { id = "MB-03", max_turns = 12, max_cost_usd = 2.5 },
]

[driver]
command = ["python3", "osworld_driver.py", "--provider", "docker"]
secret_payload_keys = ["vm_password"]
env = { OPENAI_API_KEY = "$OPENAI_API_KEY" }

[driver.expect]
dataset_commit = "a1b2c3d"

[retry]
rate_limit_backoff_s = 60
overloaded_retries = 3
overloaded_backoff_s = 30
auth_backoff_s = 30
preflight_limit = 3
infra_retries = 1
infra_backoff_s = 5
"#;

/// Computed once from `BASE` and pinned; reproduced independently in python3 from the
/// documented encoding (`lanes-spec-hash/1`: the canonical JSON header line, then one canonical
/// line per task with its payload's sha256). Any change here changes the hash of every recorded
/// campaign, and so turns every resume into a conflict.
const BASE_HASH: &str = "sha256:52a81528c0c6094f97b4f8731c2c2e6fe4d776dc87659427506c592eeb5840dd";

fn load(text: &str) -> Campaign {
    spec::load_str(text, Path::new("x.toml"), Path::new("."))
        .unwrap_or_else(|e| panic!("campaign does not load: {e}\n{text}"))
}

fn hash(text: &str) -> String {
    let c = load(text);
    spec_hash(&c.spec, &c.tasks)
}

fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} is not in the campaign text");
    text.replacen(from, to, 1)
}

#[test]
fn the_hash_of_a_fixed_campaign_is_pinned() {
    let h = hash(BASE);
    assert_eq!(h, BASE_HASH);
    assert!(h.starts_with("sha256:") && h.len() == 7 + 64);
    // Deterministic across loads.
    assert_eq!(hash(BASE), h);
}

#[test]
fn operational_options_leave_the_hash_unchanged() {
    let base = hash(BASE);
    let cases: &[(&str, &str)] = &[
        (
            r#"cutoff_utc = "2026-12-31T00:00:00Z""#,
            r#"cutoff_utc = "2027-06-30T12:00:00Z""#,
        ),
        (r#"cutoff_utc = "2026-12-31T00:00:00Z""#, ""),
        ("budget_cap_usd = 250.0", "budget_cap_usd = 1000.0"),
        ("budget_cap_usd = 250.0", ""),
        ("lease_ttl_s = 30", "lease_ttl_s = 90"),
        ("publish_grace_s = 900", "publish_grace_s = 30"),
        ("quota_wait = 0.95", "quota_wait = 0.5"),
        ("quota_stop = 0.99", "quota_stop = 1.0"),
        ("quota_stop = 0.99", ""),
        (
            r#"command = ["python3", "osworld_driver.py", "--provider", "docker"]"#,
            r#"command = ["/usr/bin/python3", "other.py"]"#,
        ),
        (
            r#"command = ["python3", "osworld_driver.py", "--provider", "docker"]"#,
            "sim = { boot_s = 0.5, agent_s = [1, 4], pass_rate = { cc-cua-driver = 0.6 }, faults = { boot_failed = 0.02 } }",
        ),
        (
            r#"secret_payload_keys = ["vm_password"]"#,
            r#"secret_payload_keys = ["vm_password", "proxy"]"#,
        ),
        (r#"secret_payload_keys = ["vm_password"]"#, ""),
        (
            r#"env = { OPENAI_API_KEY = "$OPENAI_API_KEY" }"#,
            r#"env = { OPENAI_API_KEY = "$OTHER_KEY", HTTP_PROXY = "http://p:3128" }"#,
        ),
        (r#"provider = "anthropic""#, r#"provider = "bedrock""#),
        ("expected_cost_usd = 0.8", "expected_cost_usd = 2.0"),
    ];
    for (from, to) in cases {
        assert_eq!(
            hash(&edit(BASE, from, to)),
            base,
            "changing {from:?} to {to:?} changed the hash"
        );
    }
}

#[test]
fn measured_options_change_the_hash() {
    let base = hash(BASE);
    let cases: &[(&str, &str)] = &[
        // Tasks and their payloads.
        (
            r#"instruction = "open a.txt""#,
            r#"instruction = "open c.txt""#,
        ),
        ("proxy = false", "proxy = true"),
        ("steps = [1, 2, 3]", "steps = [1, 3, 2]"),
        (
            r#"{ id = "MB-03", max_turns = 12, max_cost_usd = 2.5 },"#,
            r#"{ id = "MB-03", max_turns = 12, max_cost_usd = 2.5 },
  { id = "MB-04" },"#,
        ),
        (
            r#"{ id = "MB-03", max_turns = 12, max_cost_usd = 2.5 },"#,
            "",
        ),
        (r#"group = "files""#, r#"group = "dirs""#),
        (r#"tags = ["easy"]"#, r#"tags = ["easy", "gui"]"#),
        ("timeout_s = 120,", "timeout_s = 121,"),
        ("max_turns = 12,", "max_turns = 13,"),
        ("max_cost_usd = 2.5", "max_cost_usd = 2.75"),
        // Arms and their config, in rotation order.
        (r#"effort = "high""#, r#"effort = "low""#),
        (
            r#"tools = ["computer", "bash"]"#,
            r#"tools = ["bash", "computer"]"#,
        ),
        (r#"id = "cc-codex-cu""#, r#"id = "cc-codex""#),
        ("[tasks]", "[[arms]]\nid = \"third\"\n\n[tasks]"),
        // Run counts, seed, pairing, gate.
        ("phase1_runs = 3", "phase1_runs = 4"),
        ("phase2_runs = 2", "phase2_runs = 1"),
        ("schedule_seed = 20261005", "schedule_seed = 20261006"),
        (r#"pairing = "group""#, r#"pairing = "none""#),
        ("gate = false", "gate = true"),
        // [defaults].
        ("timeout_s = 240", "timeout_s = 300"),
        ("max_turns = 30", "max_turns = 31"),
        ("max_cost_usd = 6.0", "max_cost_usd = 6.5"),
        ("max_cost_usd = 6.0", ""),
        // Every [retry] key.
        ("rate_limit_backoff_s = 60", "rate_limit_backoff_s = 61"),
        ("overloaded_retries = 3", "overloaded_retries = 4"),
        ("overloaded_backoff_s = 30", "overloaded_backoff_s = 31"),
        ("auth_backoff_s = 30", "auth_backoff_s = 31"),
        ("preflight_limit = 3", "preflight_limit = 4"),
        ("infra_retries = 1", "infra_retries = 2"),
        ("infra_backoff_s = 5", "infra_backoff_s = 6"),
        // [driver.expect].
        (
            r#"dataset_commit = "a1b2c3d""#,
            r#"dataset_commit = "a1b2c3e""#,
        ),
        (
            r#"dataset_commit = "a1b2c3d""#,
            "dataset_commit = \"a1b2c3d\"\nagent_sha256 = \"beef\"",
        ),
    ];
    let mut seen = HashSet::from([base.clone()]);
    for (from, to) in cases {
        let h = hash(&edit(BASE, from, to));
        assert_ne!(
            h, base,
            "changing {from:?} to {to:?} left the hash unchanged"
        );
        assert!(
            seen.insert(h),
            "changing {from:?} to {to:?} collides with another change"
        );
    }
}

#[test]
fn swapping_arm_order_changes_the_hash() {
    // Arm order is the rotation order, so it is measured.
    let swapped = r#"
id = "s"
phase1_runs = 1
schedule_seed = 1
[[arms]]
id = "b"
[[arms]]
id = "a"
[tasks]
items = [{ id = "t" }]
[driver]
sim = {}
"#;
    let original = swapped
        .replacen(r#"id = "b""#, "@@", 1)
        .replacen(r#"id = "a""#, r#"id = "b""#, 1)
        .replacen("@@", r#"id = "a""#, 1);
    assert_ne!(hash(swapped), hash(&original));
}

#[test]
fn toml_key_order_and_formatting_do_not_change_the_hash() {
    // The same campaign as BASE: keys reordered, tables written differently, defaults
    // written out or left implicit, comments and blank lines added.
    let reformatted = r#"
# the same campaign, written another way
schedule_seed = 20261005
id = "hash-test"
quota_stop = 0.99
phase2_runs = 2
budget_cap_usd = 250.0
phase1_runs = 3
cutoff_utc = "2026-12-31T00:00:00Z"

[retry]
infra_backoff_s = 5
infra_retries = 1
overloaded_retries = 3

[driver.expect]
dataset_commit = "a1b2c3d"

[driver]
env.OPENAI_API_KEY = "$OPENAI_API_KEY"
secret_payload_keys = ["vm_password"]
command = [
  "python3",
  "osworld_driver.py",
  "--provider",
  "docker",
]

[[arms]]
provider = "anthropic"
id = "cc-cua-driver"
expected_cost_usd = 0.8

[arms.config]
tools = ["computer", "bash"]
effort = "high"
model = "claude-sonnet-5-5"

[[arms]]
config.effort = "medium"
config.model = "gpt-6"
id = "cc-codex-cu"

[defaults]
max_cost_usd = 6.0
max_turns = 30
timeout_s = 240

[[tasks.items]]
payload = { proxy = false, instruction = "open a.txt" }
tags = ["easy"]
group = "files"
id = "MB-01"

[[tasks.items]]
id = "MB-02"
timeout_s = 120

[tasks.items.payload]
steps = [1, 2, 3]
instruction = "close b.txt"

[[tasks.items]]
max_cost_usd = 2.5
max_turns = 12
id = "MB-03"
"#;
    assert_eq!(hash(reformatted), hash(BASE));
}

#[test]
fn a_tasks_file_hashes_like_inline_items() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tasks.jsonl"),
        concat!(
            r#"{"id":"MB-01","group":"files","tags":["easy"],"payload":{"proxy":false,"instruction":"open a.txt"}}"#,
            "\n\n",
            r#"{"payload":{"instruction":"close b.txt","steps":[1,2,3]},"timeout_s":120,"id":"MB-02"}"#,
            "\n",
            r#"{"id":"MB-03","max_turns":12,"max_cost_usd":2.5}"#,
            "\n",
        ),
    )
    .unwrap();
    let start = BASE.find("items = [").unwrap();
    let end = BASE[start..].find("\n]\n").unwrap() + start + 3;
    let text = format!("{}file = \"tasks.jsonl\"\n{}", &BASE[..start], &BASE[end..]);
    let path = dir.path().join("campaign.toml");
    std::fs::write(&path, &text).unwrap();
    let c = spec::load_file(&path).unwrap();
    assert_eq!(c.tasks.len(), 3);
    assert_eq!(spec_hash(&c.spec, &c.tasks), hash(BASE));
}
