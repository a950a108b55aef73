//! `lanes schedule` end to end: the real binary on the shipped example and on bad files.

use std::process::Command;

fn lanes() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lanes"))
}

fn example() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sim/campaign.toml")
}

#[test]
fn prints_the_shipped_example_schedule_then_a_summary() {
    let out = lanes().arg("schedule").arg(example()).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (summary, trials) = lines.split_last().unwrap();
    assert_eq!(summary["summary"], true);
    assert_eq!(summary["trials"], 80);
    assert_eq!(trials.len(), 80);
    assert!(
        summary["spec_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    for key in [
        "trial_id",
        "task",
        "arm",
        "run_index",
        "phase",
        "block",
        "order_index",
        "task_pos",
        "arm_slot",
        "first_arm",
        "seed",
        "timeout_s",
        "max_turns",
    ] {
        assert!(trials[0].get(key).is_some(), "missing {key}");
    }
    for (i, t) in trials.iter().enumerate() {
        assert_eq!(t["order_index"], i as u64);
    }
    // The payload's secret never reaches the schedule.
    assert!(!text.contains("hunter2"));
}

#[test]
fn table_format_ends_with_the_count_and_hash() {
    let out = lanes()
        .args(["schedule", "--format", "table"])
        .arg(example())
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with("80 trials (10 tasks x 4 runs x 2 arms), spec_hash sha256:"),
        "{last}"
    );
}

#[test]
fn a_bad_file_exits_2_with_the_message_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "id = \"x\"\nphase1_runs = 1\nschedule_seed = 1\nschedul_seed = 2\n",
    )
    .unwrap();
    let out = lanes().arg("schedule").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("c.toml:4"), "{err}");
    assert!(err.contains("unknown key `schedul_seed`"), "{err}");
    assert!(out.stdout.is_empty());

    let out = lanes()
        .arg("schedule")
        .arg(dir.path().join("missing.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
