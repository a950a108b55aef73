//! What an operator does around a pre-registered campaign, through the `lanes` binary: smoke
//! runs derived from it with their own ledger.

mod support;

use std::path::Path;

use support::{campaign, lanes_in};

fn ok(out: std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn rows(dir: &Path, id: &str) -> Vec<serde_json::Value> {
    ok(lanes_in(dir).args(["results", id]).output().unwrap())
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_smoke_run_has_its_own_ledger_and_leaves_the_campaign_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let file = campaign(dir.path(), "prereg", 12, 0.001);
    let run = |args: &[&str]| {
        lanes_in(dir.path())
            .arg("run")
            .arg(&file)
            .args(args)
            .output()
    };
    let said = ok(run(&["--smoke", "--tasks", "T00?", "--arms", "b", "--runs", "2"]).unwrap());
    let line = said.lines().next().unwrap();
    assert!(
        line.starts_with("smoke run prereg-smoke of prereg (sha256:")
            && line.contains("10 tasks x 1 arms x 2 runs = 20 trials, spec sha256:"),
        "{said}"
    );

    let smoke = rows(dir.path(), "prereg-smoke");
    assert_eq!(smoke.len(), 20);
    for r in &smoke {
        assert_eq!(r["smoke"], true, "{r}");
        assert_eq!(r["arm"], "b");
        assert!(r["task"].as_str().unwrap().starts_with("T00"), "{r}");
    }
    // The pre-registered campaign was never submitted, so it has no rows at all.
    let missing = lanes_in(dir.path())
        .args(["status", "prereg"])
        .output()
        .unwrap();
    assert!(!missing.status.success());

    ok(run(&[]).unwrap());
    let main = rows(dir.path(), "prereg");
    assert_eq!(main.len(), 24);
    assert!(main.iter().all(|r| r.get("smoke").is_none()), "{main:?}");
    let report = |id: &str| ok(lanes_in(dir.path()).args(["report", id]).output().unwrap());
    assert!(report("prereg-smoke").contains("SMOKE RUN: derived from campaign prereg"));
    let main_report = report("prereg");
    assert!(!main_report.contains("SMOKE"), "{main_report}");
    assert!(main_report.contains("rows: 24 "), "{main_report}");

    // The same smoke run again resumes it; a selection the campaign lacks is refused.
    ok(run(&["--smoke", "--tasks", "T00?", "--arms", "b", "--runs", "2"]).unwrap());
    assert_eq!(rows(dir.path(), "prereg-smoke").len(), 20);
    let bad = run(&["--smoke", "--arms", "a,c"]).unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("no arm \"c\" (its arms: a, b)"), "{stderr}");
    let bad = run(&["--smoke", "--tasks", "X*"]).unwrap();
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("matches none of the campaign's 12 tasks"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let bad = run(&["--tasks", "T*"]).unwrap();
    assert_eq!(bad.status.code(), Some(2), "--tasks needs --smoke");
}
