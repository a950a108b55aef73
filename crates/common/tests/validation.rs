//! Campaign validation: each error names its kind, the file,
//! the 1-based line and the field, and its Display reads `file:line: field: message`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use lanes_common::spec::{self, Campaign, SpecError, SpecErrorKind};
use tempfile::TempDir;

/// A valid campaign; each test breaks one thing.
const VALID: &str = r#"id = "valid-campaign"
phase1_runs = 2
schedule_seed = 7
cutoff_utc = "2026-12-31T00:00:00Z"

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

const FILE: &str = "campaign.toml";

fn load(text: &str) -> Result<Campaign, SpecError> {
    spec::load_str(text, Path::new(FILE), Path::new("."))
}

fn load_err(text: &str) -> SpecError {
    match load(text) {
        Ok(_) => panic!("campaign loaded, expected an error:\n{text}"),
        Err(e) => e,
    }
}

fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} is not in the campaign text");
    text.replacen(from, to, 1)
}

/// The 1-based line of the first occurrence of `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not found"));
    text[..at].matches('\n').count() + 1
}

/// Checks the place of an error and that Display leads with it.
fn assert_place(e: &SpecError, file: &Path, line: Option<usize>, field: &str) {
    assert_eq!(e.file, file, "file of {e}");
    assert_eq!(e.line, line, "line of {e}");
    assert_eq!(e.field, field, "field of {e}");
    let shown = e.to_string();
    let place = match line {
        Some(l) => format!("{}:{l}: ", file.display()),
        None => format!("{}: ", file.display()),
    };
    assert!(
        shown.starts_with(&place),
        "{shown:?} does not start with {place:?}"
    );
    if !field.is_empty() {
        assert!(shown.contains(field), "{shown:?} does not name {field}");
    }
}

/// A campaign over a tasks file, in a temporary folder.
struct WithTasksFile {
    dir: TempDir,
    campaign: PathBuf,
    tasks: PathBuf,
}

impl WithTasksFile {
    fn new(tasks_jsonl: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tasks = dir.path().join("tasks.jsonl");
        std::fs::write(&tasks, tasks_jsonl).unwrap();
        let campaign = dir.path().join(FILE);
        let text = VALID.replace(
            "items = [\n  { id = \"t1\" },\n  { id = \"t2\", payload = { x = 1 } },\n]",
            "file = \"tasks.jsonl\"",
        );
        assert!(text.contains("file = \"tasks.jsonl\""));
        std::fs::write(&campaign, text).unwrap();
        Self {
            dir,
            campaign,
            tasks,
        }
    }

    fn load(&self) -> Result<Campaign, SpecError> {
        spec::load_file(&self.campaign)
    }

    fn load_err(&self) -> SpecError {
        match self.load() {
            Ok(_) => panic!("campaign loaded, expected an error"),
            Err(e) => e,
        }
    }
}

#[test]
fn the_valid_campaign_loads() {
    let c = load(VALID).unwrap();
    assert_eq!(c.spec.arms.len(), 2);
    assert_eq!(c.tasks.len(), 2);
    let f = WithTasksFile::new("{\"id\":\"t1\"}\n{\"id\":\"t2\",\"payload\":{\"x\":1}}\n");
    assert_eq!(f.load().unwrap().tasks, c.tasks);
    assert!(f.dir.path().exists());
}

// ---- unknown keys ----------------------------------------------------------------------------

#[test]
fn unknown_top_level_key() {
    let text = edit(
        VALID,
        "schedule_seed = 7\n",
        "schedule_seed = 7\nschedule_sead = 8\n",
    );
    let e = load_err(&text);
    assert!(
        matches!(&*e.kind, SpecErrorKind::UnknownKey(k) if k == "schedule_sead"),
        "{e:?}"
    );
    assert_place(&e, Path::new(FILE), Some(4), "schedule_sead");
    assert_eq!(line_of(&text, "schedule_sead"), 4);
    assert!(e.to_string().contains("unknown key `schedule_sead`"));
}

#[test]
fn unknown_key_in_defaults() {
    let text = edit(VALID, "max_turns = 10\n", "max_turns = 10\ntimeout = 5\n");
    let e = load_err(&text);
    assert!(
        matches!(&*e.kind, SpecErrorKind::UnknownKey(k) if k == "timeout"),
        "{e:?}"
    );
    assert_place(
        &e,
        Path::new(FILE),
        Some(line_of(&text, "timeout = 5")),
        "timeout",
    );
    assert_eq!(e.line, Some(9));
}

#[test]
fn unknown_key_in_an_arm() {
    let text = edit(
        VALID,
        "id = \"beta\"\n",
        "id = \"beta\"\nprovder = \"openai\"\n",
    );
    let e = load_err(&text);
    assert!(
        matches!(&*e.kind, SpecErrorKind::UnknownKey(k) if k == "provder"),
        "{e:?}"
    );
    assert_place(&e, Path::new(FILE), Some(16), "provder");
    assert_eq!(line_of(&text, "provder"), 16);
}

#[test]
fn unknown_key_in_a_retry_table() {
    let text = format!("{VALID}\n[retry]\ninfra_retires = 2\n");
    let e = load_err(&text);
    assert!(
        matches!(&*e.kind, SpecErrorKind::UnknownKey(k) if k == "infra_retires"),
        "{e:?}"
    );
    assert_place(
        &e,
        Path::new(FILE),
        Some(line_of(&text, "infra_retires")),
        "infra_retires",
    );
}

#[test]
fn unknown_key_in_a_tasks_file_line() {
    let f = WithTasksFile::new("{\"id\":\"t1\"}\n{\"id\":\"t2\",\"paylod\":{}}\n{\"id\":\"t3\"}\n");
    let e = f.load_err();
    assert!(
        matches!(&*e.kind, SpecErrorKind::UnknownKey(k) if k == "paylod"),
        "{e:?}"
    );
    assert_place(&e, &f.tasks, Some(2), "tasks");
    assert!(e.to_string().contains("unknown key `paylod`"));
}

#[test]
fn unknown_key_in_the_sim_driver() {
    let text = edit(VALID, "sim = {}", "sim = { boot_s = 1.0, boot_secs = 2.0 }");
    let e = load_err(&text);
    assert!(
        matches!(&*e.kind, SpecErrorKind::UnknownKey(k) if k == "boot_secs"),
        "{e:?}"
    );
    assert_place(
        &e,
        Path::new(FILE),
        Some(line_of(&text, "boot_secs")),
        "boot_secs",
    );
}

// ---- ids -------------------------------------------------------------------------------------

#[test]
fn campaign_id_that_does_not_match_its_pattern() {
    let text = edit(VALID, "id = \"valid-campaign\"", "id = \"Valid_Campaign\"");
    let e = load_err(&text);
    match &*e.kind {
        SpecErrorKind::InvalidId(id) => {
            assert_eq!((id.kind, id.value.as_str()), ("campaign", "Valid_Campaign"));
            assert_eq!(id.pattern, "^[a-z0-9][a-z0-9-]{0,62}$");
        }
        other => panic!("expected InvalidId, got {other:?}"),
    }
    assert_place(&e, Path::new(FILE), Some(1), "id");
}

#[test]
fn arm_id_that_does_not_match_its_pattern() {
    let text = edit(VALID, "id = \"beta\"", "id = \"be.ta\"");
    let e = load_err(&text);
    assert!(
        matches!(&*e.kind, SpecErrorKind::InvalidId(id) if id.kind == "arm" && id.value == "be.ta"),
        "{e:?}"
    );
    assert_place(
        &e,
        Path::new(FILE),
        Some(line_of(&text, "be.ta")),
        "arms[1].id",
    );
    assert_eq!(e.line, Some(15));
}

#[test]
fn inline_task_id_that_does_not_match_its_pattern() {
    let text = edit(VALID, "{ id = \"t2\"", "{ id = \"-t2\"");
    let e = load_err(&text);
    assert!(
        matches!(&*e.kind, SpecErrorKind::InvalidId(id) if id.kind == "task" && id.value == "-t2"),
        "{e:?}"
    );
    assert_place(
        &e,
        Path::new(FILE),
        Some(line_of(&text, "-t2")),
        "tasks.items[1].id",
    );
}

#[test]
fn tasks_file_id_that_does_not_match_its_pattern() {
    let f = WithTasksFile::new("{\"id\":\"t1\"}\n\n{\"id\":\"a/b\"}\n");
    let e = f.load_err();
    assert!(
        matches!(&*e.kind, SpecErrorKind::InvalidId(id) if id.kind == "task" && id.value == "a/b"),
        "{e:?}"
    );
    // Blank lines still count toward line numbers.
    assert_place(&e, &f.tasks, Some(3), "id");
}

// ---- duplicates ------------------------------------------------------------------------------

#[test]
fn duplicate_task_ids_in_a_tasks_file() {
    let f =
        WithTasksFile::new("{\"id\":\"t1\"}\n{\"id\":\"t2\"}\n{\"id\":\"t3\"}\n{\"id\":\"t2\"}\n");
    let e = f.load_err();
    assert_eq!(
        *e.kind,
        SpecErrorKind::Duplicate {
            what: "task",
            id: "t2".into(),
            first_line: Some(2),
        }
    );
    assert_place(&e, &f.tasks, Some(4), "id");
    assert!(e.to_string().contains("first defined on line 2"), "{e}");
}

#[test]
fn duplicate_inline_task_ids() {
    let text = edit(VALID, "{ id = \"t2\"", "{ id = \"t1\"");
    let e = load_err(&text);
    assert_eq!(
        *e.kind,
        SpecErrorKind::Duplicate {
            what: "task",
            id: "t1".into(),
            first_line: Some(19),
        }
    );
    assert_place(&e, Path::new(FILE), Some(20), "tasks.items[1].id");
}

#[test]
fn duplicate_inline_task_ids_deep_in_a_large_campaign() {
    // Thousands of inline items, some spread over several lines: the lines named are the
    // ones the items are written on, counted from the top of the file.
    let mut items = String::new();
    for i in 0..5_000 {
        if i % 7 == 0 {
            writeln!(items, "  {{\n    id = \"t{i}\" }},").unwrap();
        } else {
            writeln!(items, "  {{ id = \"t{i}\" }},").unwrap();
        }
    }
    items.push_str("  { id = \"t4095\" },\n");
    let text = edit(
        VALID,
        "  { id = \"t1\" },\n  { id = \"t2\", payload = { x = 1 } },\n",
        &items,
    );
    let e = load_err(&text);
    let first = line_of(&text, "id = \"t4095\"");
    let again = text[..text.rfind("id = \"t4095\"").unwrap()]
        .matches('\n')
        .count()
        + 1;
    assert_eq!(
        *e.kind,
        SpecErrorKind::Duplicate {
            what: "task",
            id: "t4095".into(),
            first_line: Some(first),
        }
    );
    assert_place(&e, Path::new(FILE), Some(again), "tasks.items[5000].id");
}

#[test]
fn duplicate_arm_ids() {
    let text = edit(VALID, "id = \"beta\"", "id = \"alpha\"");
    let e = load_err(&text);
    assert_eq!(
        *e.kind,
        SpecErrorKind::Duplicate {
            what: "arm",
            id: "alpha".into(),
            first_line: Some(11),
        }
    );
    assert_place(&e, Path::new(FILE), Some(15), "arms[1].id");
    assert!(e.to_string().contains("first defined on line 11"), "{e}");
}

// ---- counts ----------------------------------------------------------------------------------

#[test]
fn zero_arms() {
    let text = edit(
        VALID,
        "[[arms]]\nid = \"alpha\"\nconfig = { model = \"m\" }\n\n[[arms]]\nid = \"beta\"\n",
        "",
    );
    let e = load_err(&text);
    assert_eq!(*e.kind, SpecErrorKind::NoArms);
    // There is no line to point at: the arms are missing from the whole file.
    assert_place(&e, Path::new(FILE), None, "arms");
}

#[test]
fn zero_tasks_in_an_empty_tasks_file() {
    for empty in ["", "\n\n  \n"] {
        let f = WithTasksFile::new(empty);
        let e = f.load_err();
        assert_eq!(*e.kind, SpecErrorKind::NoTasks);
        assert_place(&e, &f.tasks, None, "tasks");
    }
}

#[test]
fn zero_inline_tasks() {
    let text = edit(
        VALID,
        "items = [\n  { id = \"t1\" },\n  { id = \"t2\", payload = { x = 1 } },\n]",
        "items = []",
    );
    let e = load_err(&text);
    assert_eq!(*e.kind, SpecErrorKind::NoTasks);
    assert_place(&e, Path::new(FILE), None, "tasks");
}

#[test]
fn phase1_runs_zero() {
    let text = edit(VALID, "phase1_runs = 2", "phase1_runs = 0");
    let e = load_err(&text);
    assert_eq!(*e.kind, SpecErrorKind::ZeroPhase1Runs);
    assert_place(&e, Path::new(FILE), Some(2), "phase1_runs");
}

// ---- payloads and files ----------------------------------------------------------------------

#[test]
fn payload_over_64_kib() {
    // The canonical payload {"s":"..."} is 8 bytes plus the string.
    let fits = format!(
        "{{\"id\":\"t1\",\"payload\":{{\"s\":\"{}\"}}}}\n",
        "x".repeat(65536 - 8)
    );
    let f = WithTasksFile::new(&fits);
    assert_eq!(f.load().unwrap().tasks[0].payload.json().len(), 65536);

    let over = format!(
        "{{\"id\":\"t1\"}}\n{{\"id\":\"t2\",\"payload\":{{\"s\":\"{}\"}}}}\n",
        "x".repeat(65536 - 7)
    );
    let f = WithTasksFile::new(&over);
    let e = f.load_err();
    assert_eq!(*e.kind, SpecErrorKind::PayloadTooLarge { bytes: 65537 });
    assert_place(&e, &f.tasks, Some(2), "payload");
    assert!(e.to_string().contains("64 KiB"), "{e}");
}

#[test]
fn inline_payload_over_64_kib() {
    let big = "y".repeat(70_000);
    let text = edit(
        VALID,
        "payload = { x = 1 }",
        &format!("payload = {{ x = \"{big}\" }}"),
    );
    let e = load_err(&text);
    assert!(
        matches!(*e.kind, SpecErrorKind::PayloadTooLarge { bytes } if bytes > 65536),
        "{e:?}"
    );
    assert_place(&e, Path::new(FILE), Some(20), "tasks.items[1].payload");
}

#[test]
fn nan_or_inf_in_a_payload_or_an_arm_config_is_refused_on_its_line() {
    // TOML has nan and inf, JSON has neither: they used to be stored as null.
    let text = edit(
        VALID,
        "payload = { x = 1 }",
        "payload = { x = 1, deep = { f = nan } }",
    );
    let e = load_err(&text);
    assert_place(
        &e,
        Path::new(FILE),
        Some(20),
        "tasks.items[1].payload.deep.f",
    );
    assert!(e.to_string().contains("not nan"), "{e}");

    let text = edit(
        VALID,
        "config = { model = \"m\" }",
        "config = { model = \"m\", t = [1.0, -inf] }",
    );
    let e = load_err(&text);
    assert_place(&e, Path::new(FILE), Some(12), "arms[0].config.t[1]");
    assert!(e.to_string().contains("not -inf"), "{e}");

    // A tasks file cannot carry one either: JSON has no NaN, and 1e999 is out of range.
    for bad in ["1e999", "NaN", "-Infinity"] {
        let f = WithTasksFile::new(&format!(
            "{{\"id\":\"t1\"}}\n{{\"id\":\"t2\",\"payload\":{{\"x\":{bad}}}}}\n"
        ));
        let e = f.load_err();
        assert_place(&e, &f.tasks, Some(2), "tasks");
    }
}

#[test]
fn a_payload_that_is_not_an_object_is_refused_on_its_line() {
    let text = edit(VALID, "payload = { x = 1 }", "payload = [1, 2]");
    let e = load_err(&text);
    assert_place(&e, Path::new(FILE), Some(20), "tasks.items[1].payload");
    assert!(e.to_string().contains("must be a JSON object"), "{e}");
    for bad in ["[1,2]", "3", "\"s\"", "true"] {
        let f = WithTasksFile::new(&format!(
            "{{\"id\":\"t1\"}}\n{{\"id\":\"t2\",\"payload\":{bad}}}\n"
        ));
        let e = f.load_err();
        assert_place(&e, &f.tasks, Some(2), "payload");
        assert!(
            e.to_string().contains("must be a JSON object"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn a_key_twice_in_a_tasks_file_payload_is_refused_on_its_line() {
    // serde_json keeps the last value of a repeated key without a word.
    let f = WithTasksFile::new(
        "{\"id\":\"t1\"}\n{\"id\":\"t2\",\"payload\":{\"a\":{\"k\":1,\"k\":2}}}\n",
    );
    let e = f.load_err();
    assert_place(&e, &f.tasks, Some(2), "tasks");
    let shown = e.to_string();
    assert!(
        shown.contains("duplicate key \"k\"") && shown.contains("payload.a"),
        "{shown}"
    );
}

#[test]
fn missing_tasks_file() {
    let f = WithTasksFile::new("{\"id\":\"t1\"}\n");
    std::fs::remove_file(&f.tasks).unwrap();
    let e = f.load_err();
    match &*e.kind {
        SpecErrorKind::TasksFileMissing { path, .. } => assert_eq!(path, &f.tasks),
        other => panic!("expected TasksFileMissing, got {other:?}"),
    }
    let text = std::fs::read_to_string(&f.campaign).unwrap();
    assert_place(
        &e,
        &f.campaign,
        Some(line_of(&text, "file = \"tasks.jsonl\"")),
        "tasks.file",
    );
    assert_eq!(e.line, Some(18));
    assert!(
        e.to_string().contains(&f.tasks.display().to_string()),
        "{e}"
    );
}

#[test]
fn bad_json_on_line_3_of_a_tasks_file() {
    let f =
        WithTasksFile::new("{\"id\":\"t1\"}\n{\"id\":\"t2\"}\n{\"id\":\"t3\",}\n{\"id\":\"t4\"}\n");
    let e = f.load_err();
    assert!(matches!(&*e.kind, SpecErrorKind::BadJson(_)), "{e:?}");
    assert_place(&e, &f.tasks, Some(3), "tasks");
    assert!(e.to_string().contains("bad JSON"), "{e}");
}

#[test]
fn bad_cutoff_time() {
    for bad in ["2026-13-01T00:00:00Z", "tomorrow", "2026-12-31"] {
        let text = edit(
            VALID,
            "cutoff_utc = \"2026-12-31T00:00:00Z\"",
            &format!("cutoff_utc = \"{bad}\""),
        );
        let e = load_err(&text);
        match &*e.kind {
            SpecErrorKind::BadCutoff(u) => assert_eq!(u.value, bad),
            other => panic!("expected BadCutoff for {bad:?}, got {other:?}"),
        }
        assert_place(&e, Path::new(FILE), Some(4), "cutoff_utc");
    }
}

// ---- scale -----------------------------------------------------------------------------------

#[test]
fn a_tasks_file_of_200k_lines_loads() {
    const N: usize = 200_000;
    let mut jsonl = String::with_capacity(N * 16);
    for i in 0..N {
        writeln!(jsonl, "{{\"id\":\"task-{i}\"}}").unwrap();
    }
    let f = WithTasksFile::new(&jsonl);
    let c = f.load().unwrap();
    assert_eq!(c.tasks.len(), N);
    assert_eq!(c.tasks[0].id.as_str(), "task-0");
    assert_eq!(c.tasks[N - 1].id.as_str(), format!("task-{}", N - 1));
    assert_eq!(
        lanes_common::schedule::trial_count(&c.spec, c.tasks.len()),
        (N * 2 * 2) as u64
    );
}
