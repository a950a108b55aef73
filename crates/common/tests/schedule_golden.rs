//! Golden schedules: 1, 2 and 3 arms, each with and without phase 2.
//!
//! The goldens under `tests/golden/` were generated once with `UPDATE_GOLDEN=1` and checked by
//! hand, and by an independent script, against the scheduling rules: task-major blocks, phase 1 then
//! phase 2, the first arm rotating by `(task_pos + run_index) mod n_arms`, and the seed being the
//! first 8 bytes big-endian of sha256(`<schedule_seed>:<task>:<run_index>`). A change to any line
//! is a change to the pre-registered schedule of every existing campaign.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use lanes_common::schedule::{self, Trial};
use lanes_common::spec::{self, Campaign};
use serde::Serialize;

const SCHEDULE_SEED: u64 = 20261005;
const ARMS: [&str; 3] = ["alpha", "beta", "gamma"];
const TASKS: [&str; 3] = ["MB-01", "MB-02", "osw:chrome.3"];

/// One golden line: the schedule place of a trial, in this key order.
#[derive(Serialize)]
struct GoldenLine<'a> {
    trial_id: &'a str,
    phase: u8,
    block: &'a str,
    order_index: u64,
    task_pos: u32,
    arm_slot: u32,
    first_arm: &'a str,
    seed: u64,
    run_index: u32,
}

fn campaign(n_arms: usize, phase2_runs: u32) -> Campaign {
    let mut text = format!(
        "id = \"golden\"\nphase1_runs = 2\nphase2_runs = {phase2_runs}\nschedule_seed = {SCHEDULE_SEED}\n"
    );
    for arm in &ARMS[..n_arms] {
        writeln!(
            text,
            "\n[[arms]]\nid = \"{arm}\"\nconfig = {{ model = \"m-{arm}\" }}"
        )
        .unwrap();
    }
    let items: Vec<String> = TASKS
        .iter()
        .map(|t| format!("{{ id = \"{t}\", payload = {{ instruction = \"do {t}\" }} }}"))
        .collect();
    writeln!(
        text,
        "\n[tasks]\nitems = [{}]\n\n[driver]\nsim = {{}}",
        items.join(", ")
    )
    .unwrap();
    spec::load_str(&text, Path::new("x.toml"), Path::new(".")).expect("golden campaign loads")
}

fn render(trials: &[Trial]) -> String {
    let mut out = String::new();
    for t in trials {
        let line = GoldenLine {
            trial_id: t.trial_id.as_str(),
            phase: t.phase.number(),
            block: t.block.as_str(),
            order_index: t.order_index,
            task_pos: t.task_pos,
            arm_slot: t.arm_slot,
            first_arm: t.first_arm.as_str(),
            seed: t.seed,
            run_index: t.run_index,
        };
        out.push_str(&serde_json::to_string(&line).unwrap());
        out.push('\n');
    }
    out
}

fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{name}.jsonl"))
}

fn check_golden(n_arms: usize, phase2_runs: u32) {
    let name = format!(
        "schedule_{n_arms}arm{}_{}",
        if n_arms == 1 { "" } else { "s" },
        if phase2_runs > 0 {
            "phase2"
        } else {
            "phase1_only"
        }
    );
    let c = campaign(n_arms, phase2_runs);
    let trials: Vec<Trial> = schedule::trials(&c).collect();
    let expected_count = TASKS.len() * (2 + phase2_runs as usize) * n_arms;
    assert_eq!(trials.len(), expected_count, "{name}: trial count");
    assert_eq!(
        schedule::trial_count(&c.spec, c.tasks.len()),
        expected_count as u64
    );
    let actual = render(&trials);
    let path = golden_path(&name);
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; generate it with UPDATE_GOLDEN=1 and check it by hand",
            path.display()
        )
    });
    let golden_lines: Vec<&str> = golden.lines().collect();
    let actual_lines: Vec<&str> = actual.lines().collect();
    for (i, (g, a)) in golden_lines.iter().zip(&actual_lines).enumerate() {
        assert_eq!(
            a,
            g,
            "{name}: line {} differs from {}",
            i + 1,
            path.display()
        );
    }
    assert_eq!(
        actual_lines.len(),
        golden_lines.len(),
        "{name}: line count differs from {}",
        path.display()
    );
}

#[test]
fn golden_one_arm_phase1_only() {
    check_golden(1, 0);
}

#[test]
fn golden_one_arm_with_phase2() {
    check_golden(1, 1);
}

#[test]
fn golden_two_arms_phase1_only() {
    check_golden(2, 0);
}

#[test]
fn golden_two_arms_with_phase2() {
    check_golden(2, 1);
}

#[test]
fn golden_three_arms_phase1_only() {
    check_golden(3, 0);
}

#[test]
fn golden_three_arms_with_phase2() {
    check_golden(3, 1);
}

/// Seeds computed independently with python3:
/// `int.from_bytes(hashlib.sha256(b"20261005:MB-01:0").digest()[:8], "big")`.
#[test]
fn seeds_match_an_independent_sha256() {
    let c = campaign(2, 1);
    let seed_of = |task: &str, run: u32| {
        schedule::trials(&c)
            .find(|t| t.task.as_str() == task && t.run_index == run)
            .map(|t| t.seed)
            .unwrap()
    };
    for (task, run, expected) in SEEDS {
        assert_eq!(seed_of(task, run), expected, "seed of {task} run {run}");
        assert_eq!(
            schedule::run_seed(
                SCHEDULE_SEED,
                &lanes_common::TaskId::new(task).unwrap(),
                run
            ),
            expected
        );
    }
}

const SEEDS: [(&str, u32, u64); 5] = [
    ("MB-01", 0, 15_639_166_181_945_465_032),
    ("MB-01", 2, 5_839_287_890_782_297_031),
    ("MB-02", 1, 7_420_513_946_363_564_549),
    ("osw:chrome.3", 0, 807_506_508_990_764_633),
    ("osw:chrome.3", 2, 1_196_751_701_072_905_752),
];
