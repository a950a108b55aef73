//! `[tasks] harbor = "DIR"`: Harbor task folders loaded as tasks, their digests in the spec
//! hash, a resume after an edit refused naming the file, and the forms a coordinator refuses.

use std::path::Path;

use lanes_common::resume;
use lanes_common::spec::harbor::HarborTask;
use lanes_common::spec::{load_sent_str, load_str};
use lanes_common::spec_hash::spec_hash;

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn task(dir: &Path, id: &str, agent_timeout: &str) {
    let t = dir.join("tasks").join(id);
    write(
        &t,
        "task.toml",
        &format!(
            "schema_version = \"1.1\"\n[metadata]\ndifficulty = \"easy\"\n[agent]\n\
             timeout_sec = {agent_timeout}\n[environment]\nallow_internet = false\n\
             workdir = \"/app\"\nmemory_mb = 256\n"
        ),
    );
    write(&t, "instruction.md", "Create /app/done.\n");
    write(&t, "environment/Dockerfile", "FROM localhost/base:1\n");
    write(
        &t,
        "tests/test.sh",
        "test -f /app/done && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
    );
    write(&t, "solution/solve.sh", "touch /app/done\n");
}

const CAMPAIGN: &str = r#"id = "tb"
schedule_seed = 1
phase1_runs = 1
[tasks]
harbor = "tasks"
[driver]
sim = {}
[[arms]]
id = "oracle"
config = { agent = "oracle" }
"#;

#[test]
fn task_folders_become_tasks_whose_files_the_spec_hash_covers() {
    let root = tempfile::tempdir().unwrap();
    task(root.path(), "b-task", "60.0");
    task(root.path(), "a-task", "30.5");
    let c = load_str(CAMPAIGN, &root.path().join("c.toml"), root.path()).unwrap();
    let ids: Vec<&str> = c.tasks.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["a-task", "b-task"]);
    assert_eq!(
        c.tasks[0].timeout_s,
        Some(31),
        "the agent timeout, rounded up"
    );
    let h = HarborTask::from_payload(&c.tasks[0].payload.value())
        .expect("a harbor payload")
        .unwrap();
    assert_eq!(h.memory_mb, Some(256));
    assert!(!h.allow_internet);
    assert!(h.files.contains_key("solution/solve.sh"));

    // Any byte of any file changes the spec hash, and a resume names the file.
    let before = spec_hash(&c.spec, &c.tasks);
    write(
        &root.path().join("tasks/b-task"),
        "tests/test.sh",
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    let edited = load_str(CAMPAIGN, &root.path().join("c.toml"), root.path()).unwrap();
    assert_ne!(spec_hash(&edited.spec, &edited.tasks), before);
    let conflicts = resume::compare(&c, &edited, []).unwrap_err();
    let fields: Vec<&str> = conflicts.iter().map(|c| c.field.as_str()).collect();
    assert!(
        fields.contains(&"tasks[b-task].harbor.files.tests/test.sh"),
        "{fields:?}"
    );
    assert!(
        !fields.iter().any(|f| f.contains("a-task")),
        "only the edited task conflicts: {fields:?}"
    );
}

#[test]
fn a_task_folder_lanes_cannot_run_is_refused_at_load_naming_task_and_key() {
    let root = tempfile::tempdir().unwrap();
    task(root.path(), "ok", "60.0");
    task(root.path(), "gpu", "60.0");
    write(
        &root.path().join("tasks/gpu"),
        "task.toml",
        "version = \"1.0\"\n[environment]\ngpus = 2\n",
    );
    let e = load_str(CAMPAIGN, &root.path().join("c.toml"), root.path()).unwrap_err();
    let text = e.to_string();
    assert_eq!(e.field, "tasks.harbor");
    assert!(
        text.contains("task `gpu`") && text.contains("environment.gpus"),
        "{text}"
    );
}

#[test]
fn a_coordinator_reads_no_task_folder_a_client_names() {
    let e = load_sent_str(CAMPAIGN, Path::new("campaign_toml")).unwrap_err();
    assert_eq!(e.field, "tasks.harbor");
    assert!(e.to_string().contains("lanes submit"), "{e}");
    // Two sources at once are refused.
    let both = CAMPAIGN.replace("[tasks]\n", "[tasks]\nitems = [{ id = \"x\" }]\n");
    let e = load_sent_str(&both, Path::new("campaign_toml")).unwrap_err();
    assert!(e.to_string().contains("`harbor`"), "{e}");
}

/// The example's task folders load as tasks (each offline, in /app).
#[test]
fn the_terminal_example_loads() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/terminal/tasks");
    let tasks = lanes_common::spec::harbor::load_dir(&dir).unwrap();
    assert!(tasks.len() >= 6, "{}", tasks.len());
    for (id, _, t) in &tasks {
        assert!(!t.allow_internet, "{id}");
        assert_eq!(t.workdir.as_deref(), Some("/app"), "{id}");
        assert!(t.files.contains_key("solution/solve.sh"), "{id}");
    }
}
