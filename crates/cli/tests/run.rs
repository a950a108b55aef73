//! `lanes run` as a user runs it: the quick start reaches done and prints the report, a second
//! run resumes without re-running anything, and drift is refused.

use std::process::Command;

fn lanes() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lanes"))
}

fn quickstart() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart/campaign.toml")
}

#[test]
fn the_quick_start_runs_to_done_resumes_and_refuses_drift() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = lanes()
        .arg("run")
        .arg(quickstart())
        .args(["--lanes", "4", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("done: 120/120 final"), "{stdout}");
    // Its first lines: the campaign, the dashboard's address, and a one-time login link
    // (a code, never a token).
    let first: Vec<&str> = stdout.lines().take(3).collect();
    assert!(
        first[0].starts_with("campaign quickstart submitted"),
        "{stdout}"
    );
    let ui = first[1]
        .strip_prefix("dashboard on http://127.0.0.1:")
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(ui.ends_with("/campaigns/quickstart"), "{stdout}");
    let link = first[2]
        .strip_prefix("log in (one-time link, 5 minutes): http://127.0.0.1:")
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        link.contains("/login?code=") && link.ends_with("&next=/campaigns/quickstart"),
        "{stdout}"
    );
    let audit = stdout.find("COMPLETENESS").expect("the report's audit");
    let arms = stdout.find("PER ARM").expect("the per-arm table");
    assert!(audit < arms, "the audit comes first");
    assert!(stdout.contains("careful vs quick"), "{stdout}");
    assert!(
        !data.join("lanes.addr").exists(),
        "the address file is removed at the end"
    );

    // Client commands work on the finished run's data dir (its store, opened directly).
    let status = lanes()
        .args(["status", "quickstart", "--json", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["state"], "done");
    assert_eq!(
        (v["trials_total"].as_u64(), v["trials_final"].as_u64()),
        (Some(120), Some(120))
    );
    assert!(v["counts_by_status"]["completed"].as_u64().unwrap() > 0);
    let csv = lanes()
        .args(["results", "quickstart", "--format", "csv", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(csv.status.success());
    let text = String::from_utf8(csv.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(header[0], "seq");
    let rows: Vec<&str> = lines.collect();
    assert!(rows.len() >= 120, "{} rows", rows.len());
    for r in &rows {
        // No field of these rows holds a comma or quote, so a plain split is exact.
        assert_eq!(r.split(',').count(), header.len(), "{r}");
    }
    let report = lanes()
        .args(["report", "quickstart", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(report.status.success());
    assert!(String::from_utf8_lossy(&report.stdout).contains("PER ARM"));

    // A second run resumes: nothing final runs again, and the report is the same.
    let again = lanes()
        .arg("run")
        .arg(quickstart())
        .arg("--data-dir")
        .arg(&data)
        .arg("--no-ui")
        .output()
        .unwrap();
    let stdout2 = String::from_utf8_lossy(&again.stdout);
    assert!(again.status.success(), "{stdout2}");
    assert!(stdout2.contains("resumed: 120 trials"), "{stdout2}");
    assert!(
        !stdout2.contains("dashboard"),
        "--no-ui serves none: {stdout2}"
    );
    let rows = |s: &str| {
        s.lines()
            .find(|l| l.starts_with("rows:"))
            .map(str::to_owned)
    };
    assert_eq!(rows(&stdout), rows(&stdout2), "no new rows on resume");

    // Drift is refused with the field named, and exit code 3.
    let text = std::fs::read_to_string(quickstart())
        .unwrap()
        .replace("effort = \"high\"", "effort = \"max\"");
    let drifted = dir.path().join("drifted.toml");
    std::fs::write(&drifted, text).unwrap();
    let refused = lanes()
        .arg("run")
        .arg(&drifted)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(3));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("arms[0].config.effort"), "{err}");
}

/// A one-arm sim campaign of `tasks` tasks.
fn sim_campaign(id: &str, tasks: usize, driver: &str) -> String {
    let items: Vec<String> = (0..tasks).map(|i| format!("{{ id = \"T{i}\" }}")).collect();
    format!(
        "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 5\nlease_ttl_s = 5\n[[arms]]\nid = \"a\"\n[driver]\n{driver}\n[tasks]\nitems = [{}]\n",
        items.join(", ")
    )
}

/// `lanes run` serves only the campaign it was given: another campaign in the same store (one
/// that sorts first, so it would be served first) is left untouched.
#[test]
fn lanes_run_takes_no_work_of_another_campaign_in_the_store() {
    use lanes_coordinator::store::{Clock, EmbeddedStore, Store, SystemClock};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let other = lanes_common::ids::CampaignId::new("a-other").unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = EmbeddedStore::open(&data).unwrap();
        let c = lanes_common::spec::load_str(
            &sim_campaign("a-other", 6, "sim = {}"),
            std::path::Path::new("other.toml"),
            std::path::Path::new("."),
        )
        .unwrap();
        store.submit(c, SystemClock.now_ms()).await.unwrap();
    });
    let mine = dir.path().join("mine.toml");
    std::fs::write(&mine, sim_campaign("mine", 4, "sim = {}")).unwrap();
    let out = lanes()
        .arg("run")
        .arg(&mine)
        .args(["--lanes", "2", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("done: 4/4 final"), "{stdout}");
    rt.block_on(async {
        let store = EmbeddedStore::open(&data).unwrap();
        let st = store.status(&other, SystemClock.now_ms()).await.unwrap();
        assert_eq!(
            (st.trials_final, st.rows_total, st.in_flight.len()),
            (0, 0, 0),
            "{st:?}"
        );
    });
}

/// A campaign that names a driver needs `lanes run --drivers FILE` with that driver.
#[test]
fn lanes_run_of_a_named_driver_needs_a_drivers_file_that_has_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("named.toml");
    std::fs::write(&file, sim_campaign("named", 1, "name = \"osworld\"")).unwrap();
    let out = lanes()
        .arg("run")
        .arg(&file)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`osworld`") && err.contains("--drivers"),
        "{err}"
    );
}

/// `lanes run --artifact-store file://…` uploads every attempt (a shared mount is a store), and
/// its rows name the objects; a malformed store URL is bad input, said before anything runs.
#[test]
fn lanes_run_keeps_its_attempts_in_an_artifact_store() {
    use lanes_coordinator::store::{EmbeddedStore, Store};
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("kept.toml");
    std::fs::write(&file, sim_campaign("kept", 3, "sim = {}")).unwrap();
    let bad = lanes()
        .arg("run")
        .arg(&file)
        .args(["--artifact-store", "ftp://somewhere/x", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(
        said.contains("--artifact-store") && said.contains("expected s3://"),
        "{said}"
    );

    let mount = dir.path().join("mount");
    let url = format!("file://{}", mount.display());
    let out = lanes()
        .arg("run")
        .arg(&file)
        .args(["--lanes", "2", "--artifact-store", &url, "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("done: 3/3 final"), "{stdout}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let rows = rt.block_on(async {
        let store = EmbeddedStore::open(&data).unwrap();
        let id = lanes_common::ids::CampaignId::new("kept").unwrap();
        store.rows(&id, 0, usize::MAX).await.unwrap()
    });
    assert_eq!(rows.len(), 3);
    for r in &rows {
        let manifest = format!("{url}/kept/{}/a{}/manifest.json", r.trial_id, r.attempt);
        assert_eq!(r.record.artifacts[0], manifest, "{:?}", r.record.artifacts);
        let local = manifest.strip_prefix("file://").unwrap();
        let m: serde_json::Value = serde_json::from_slice(&std::fs::read(local).unwrap()).unwrap();
        assert!(
            m["files"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["path"] == "outcome.json"),
            "{m}"
        );
    }
}
