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

#[test]
fn an_archive_reads_back_as_the_same_report_and_a_delete_frees_the_campaign() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = campaign(d, "kept", 8, 0.001);
    ok(lanes_in(d).arg("run").arg(&file).output().unwrap());
    let report = |args: &[&str]| ok(lanes_in(d).arg("report").args(args).output().unwrap());
    let live = report(&["kept", "--format", "json"]);

    for name in ["kept.jsonl", "kept.jsonl.gz"] {
        let said = ok(lanes_in(d)
            .args(["archive", "kept", "--to", name])
            .output()
            .unwrap());
        assert!(
            said.contains("8 tasks and 16 rows archived") && said.contains("campaign done"),
            "{said}"
        );
        assert_eq!(
            report(&["--from", name, "--format", "json"]),
            live,
            "{name}"
        );
        assert!(report(&["--from", name]).contains("PER ARM"));
    }
    let gz = std::fs::read(d.join("kept.jsonl.gz")).unwrap();
    assert_eq!(&gz[..2], &[0x1f, 0x8b], "gzip");
    // An existing file is kept unless --force.
    let again = lanes_in(d)
        .args(["archive", "kept", "--to", "kept.jsonl"])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
    // A cut archive is refused, not read as a smaller campaign.
    let text = std::fs::read_to_string(d.join("kept.jsonl")).unwrap();
    let cut: Vec<&str> = text.lines().collect();
    std::fs::write(d.join("cut.jsonl"), cut[..cut.len() - 2].join("\n")).unwrap();
    let refused = lanes_in(d)
        .args(["report", "--from", "cut.jsonl"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("cut short"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // Delete asks for --yes, then frees the id; the archive still reports.
    let asked = lanes_in(d).args(["delete", "kept"]).output().unwrap();
    assert_eq!(asked.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&asked.stderr);
    assert!(
        stderr.contains("pass --yes") && stderr.contains("16 rows"),
        "{stderr}"
    );
    assert!(ok(lanes_in(d).args(["status", "kept"]).output().unwrap()).contains("kept"));
    let said = ok(lanes_in(d)
        .args(["delete", "kept", "--yes"])
        .output()
        .unwrap());
    assert_eq!(said.trim(), "kept: deleted (16 trials, 16 rows)");
    assert!(
        !lanes_in(d)
            .args(["status", "kept"])
            .output()
            .unwrap()
            .status
            .success()
    );
    assert_eq!(
        report(&["--from", "kept.jsonl.gz", "--format", "json"]),
        live
    );
}

#[test]
fn a_running_campaign_is_not_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A store with the campaign submitted and no lanes: it stays running.
    let file = campaign(d, "busy", 4, 0.001);
    let data = d.join(".lanes");
    std::fs::create_dir_all(&data).unwrap();
    ok(lanes_in(d)
        .arg("submit")
        .arg(&file)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap());
    let refused = lanes_in(d)
        .args(["delete", "busy", "--yes"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("is running: stop it first"), "{stderr}");
    ok(lanes_in(d).args(["stop", "busy"]).output().unwrap());
    let said = ok(lanes_in(d)
        .args(["delete", "busy", "--yes"])
        .output()
        .unwrap());
    assert_eq!(said.trim(), "busy: deleted (8 trials, 0 rows)");
}

#[test]
fn an_operator_retry_pass_is_in_the_ledger_and_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Boots fail often and no infra retry is allowed: some trials end excluded.
    let mut text = String::from(
        "id = \"flaky\"\nphase1_runs = 1\nschedule_seed = 5\npairing = \"none\"\n\
         [[arms]]\nid = \"a\"\n[[arms]]\nid = \"b\"\n\
         [driver]\nsim = { faults = { boot_failed = 0.4 } }\n\
         [retry]\ninfra_retries = 0\ninfra_backoff_s = 0\n[tasks]\nitems = [\n",
    );
    for i in 0..15 {
        text.push_str(&format!("  {{ id = \"T{i:02}\" }},\n"));
    }
    text.push_str("]\n");
    let file = d.join("flaky.toml");
    std::fs::write(&file, text).unwrap();
    let run = || lanes_in(d).arg("run").arg(&file).output().unwrap();
    run();
    let status = |id: &str| -> serde_json::Value {
        serde_json::from_str(&ok(lanes_in(d)
            .args(["status", id, "--json"])
            .output()
            .unwrap()))
        .unwrap()
    };
    let excluded = status("flaky")["trials_excluded"].as_u64().unwrap();
    assert!(excluded > 0, "no trial was excluded");

    let nothing = ok(lanes_in(d)
        .args([
            "retry",
            "flaky",
            "--excluded",
            "--reason",
            "infra_failure:guest_*",
        ])
        .args(["--note", "wrong kind"])
        .output()
        .unwrap());
    assert!(nothing.contains("nothing requeued"), "{nothing}");
    let said = ok(lanes_in(d)
        .args([
            "retry",
            "flaky",
            "--excluded",
            "--reason",
            "infra_failure:boot_*",
        ])
        .args(["--note", "boot image fixed"])
        .output()
        .unwrap());
    assert!(
        said.contains(&format!("retry pass 1 requeued {excluded} trials"))
            && said.contains("campaign running"),
        "{said}"
    );
    let requeued: Vec<serde_json::Value> = rows(d, "flaky")
        .into_iter()
        .filter(|r| r["status"] == "requeued")
        .collect();
    assert_eq!(requeued.len() as u64, excluded);
    for r in &requeued {
        assert_eq!(r["retry_pass"], 1);
        assert_eq!(r["requeue"]["note"], "boot image fixed");
        assert_eq!(
            r["requeue"]["selection"],
            "excluded, reason infra_failure:boot_*"
        );
    }

    // Running the file again resumes the campaign and runs the requeued trials.
    run();
    assert_eq!(status("flaky")["state"], "done");
    let report = ok(lanes_in(d).args(["report", "flaky"]).output().unwrap());
    assert!(
        report.contains("OPERATOR RETRIES")
            && report.contains("pass 1 at ")
            && report.contains(&format!("{excluded} trials requeued (excluded, reason infra_failure:boot_*): boot image fixed")),
        "{report}"
    );
    let json: serde_json::Value = serde_json::from_str(&ok(lanes_in(d)
        .args(["report", "flaky", "--format", "json"])
        .output()
        .unwrap()))
    .unwrap();
    let per_arm: u64 = json["operator_retries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["requeued"].as_u64().unwrap())
        .sum();
    assert_eq!(per_arm, excluded);
    let missing = lanes_in(d)
        .args(["retry", "flaky", "--note", "x"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2), "--excluded is required");
}
