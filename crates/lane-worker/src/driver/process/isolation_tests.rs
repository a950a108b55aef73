//! Tests of what a driver cannot do to the worker (real python3 children): see the worker's
//! environment, leave processes behind, or get a secret into the worker's files, logs and
//! error messages.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::env::PASSED_THROUGH;
use super::group::is_gone;
use super::state::lock;
use super::tests::{CALL, ECHO, PRELUDE, driver, driver_with_env, eventually, read};
use super::{DriverCommand, DriverError, DriverProcess, Notification};
use crate::secrets::Secrets;

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The python interpreter itself, not a launcher script (a pyenv shim is a shell script that
/// adds variables of its own).
fn real_python() -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_driver_gets_a_clean_environment_and_never_a_worker_credential() {
    // The test process has plenty of variables a driver must not see (CARGO_*, ...).
    assert!(std::env::vars().any(|(k, _)| !PASSED_THROUGH.contains(&k.as_str())));
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("driver.py");
    std::fs::write(
        &script,
        format!("{PRELUDE}\nfor msg in requests():\n    ok(msg, dict(os.environ))\n"),
    )
    .unwrap();
    let d = DriverProcess::spawn(&DriverCommand {
        program: real_python(),
        args: vec![script.display().to_string()],
        env: pairs(&[
            ("API_KEY", "k-123456"),
            ("LANES_LANE_TOKEN", "lane-token-1"),
            ("LANES_CLIENT_TOKEN", "client-token-1"),
        ]),
        ..DriverCommand::default()
    })
    .await
    .unwrap();
    let env: BTreeMap<String, String> = d.call("env", &json!({}), CALL).await.unwrap();
    for name in env.keys() {
        // Python sets LC_CTYPE itself when the locale is C (PEP 538).
        assert!(
            ["API_KEY", "LC_CTYPE"].contains(&name.as_str())
                || PASSED_THROUGH.contains(&name.as_str()),
            "the driver sees {name}: {env:?}"
        );
    }
    assert_eq!(env["API_KEY"], "k-123456");
    assert_eq!(env.get("PATH"), std::env::var("PATH").ok().as_ref());
    assert!(!env.keys().any(|k| k.starts_with("LANES_")), "{env:?}");
}

/// A driver that starts `sleep` (in its process group) and answers its pid.
const SPAWNER: &str = r#"
import subprocess
for msg in requests():
    if msg["method"] == "exit":
        ok(msg, None)
        sys.exit(0)
    child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ok(msg, child.pid)
"#;

async fn wait_gone(what: &str, pid: u32) {
    eventually(what, || async move { is_gone(pid) }).await;
}

#[tokio::test]
async fn killing_a_driver_kills_its_grandchild() {
    let d = driver(SPAWNER).await;
    let grandchild: u32 = d.call("spawn", &json!({}), CALL).await.unwrap();
    assert!(!is_gone(grandchild));
    d.kill().await;
    wait_gone("the grandchild to die with its driver", grandchild).await;
}

#[tokio::test]
async fn a_driver_that_exits_or_is_dropped_leaves_nothing_behind() {
    let d = driver(SPAWNER).await;
    let grandchild: u32 = d.call("spawn", &json!({}), CALL).await.unwrap();
    let _: Value = d.call("exit", &json!({}), CALL).await.unwrap();
    d.wait().await;
    wait_gone("the exited driver's grandchild", grandchild).await;

    let d = driver(SPAWNER).await;
    let grandchild: u32 = d.call("spawn", &json!({}), CALL).await.unwrap();
    drop(d);
    wait_gone("the dropped driver's grandchild", grandchild).await;
}

#[tokio::test]
async fn a_running_driver_is_recorded_until_it_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("driver.py");
    std::fs::write(&script, format!("{PRELUDE}\n{ECHO}\n")).unwrap();
    let records = dir.path().join("drivers");
    let d = DriverProcess::spawn(&DriverCommand {
        program: "python3".into(),
        args: vec![script.display().to_string()],
        record_dir: Some(records.clone()),
        ..DriverCommand::default()
    })
    .await
    .unwrap();
    let pid = d.id().unwrap();
    let record: Value = serde_json::from_str(&read(&records.join(format!("{pid}.json")))).unwrap();
    assert_eq!(
        (record["pid"].as_u64(), record["pgid"].as_u64()),
        (Some(pid.into()), Some(pid.into()))
    );
    d.kill().await;
    assert_eq!(std::fs::read_dir(&records).unwrap().count(), 0);
}

#[tokio::test]
async fn secrets_are_masked_in_stderr_notifications_and_errors() {
    let env_secret = "ENV-SECRET-4d1f";
    let attempt_secret = "ATTEMPT-SECRET-93ac";
    let d = driver_with_env(
        r#"
for msg in requests():
    p = msg.get("params") or {}
    if msg["method"] == "leak":
        for s in p["secrets"]:
            # Split across two writes, so the lane reads it in two pieces.
            err("stderr " + s[:5]); time.sleep(0.05); err(s[5:] + "\n")
        note("log", {"level": "info", "message": "log " + " ".join(p["secrets"])})
        note("progress", {"tag": "t", "message": "progress " + " ".join(p["secrets"])})
        send({"id": msg["id"], "error": {"code": -32000, "message": "error " + " ".join(p["secrets"])}})
    elif msg["method"] == "bad_result":
        ok(msg, {"verified": p["secrets"][0]})
    elif msg["method"] == "bad_line":
        raw("not json " + p["secrets"][1] + "\n")
"#,
        pairs(&[("API_KEY", env_secret)]),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("driver.stderr");
    d.set_stderr_file(
        Some(file.clone()),
        &Secrets::new([attempt_secret.to_owned()]),
    );
    let mut notes = d.take_notifications().unwrap();
    let leaked = [env_secret, attempt_secret];
    let secrets = json!({"secrets": leaked});
    let clean = |text: &str| leaked.iter().all(|s| !text.contains(s));

    let err = d
        .call::<_, Value>("leak", &secrets, CALL)
        .await
        .unwrap_err();
    assert!(
        matches!(err, DriverError::Rpc { .. }) && clean(&err.to_string()),
        "{err}"
    );
    for _ in 0..2 {
        let note = tokio::time::timeout(CALL, notes.recv())
            .await
            .unwrap()
            .unwrap();
        let text = match &note {
            Notification::Log(l) => l.message.clone(),
            Notification::Progress(p) => p.message.clone().unwrap(),
        };
        assert!(text.contains("***") && clean(&text), "{note:?}");
    }
    let err = d
        .call::<_, crate::driver::protocol::EnvResult>("bad_result", &secrets, CALL)
        .await
        .unwrap_err();
    assert!(
        matches!(err, DriverError::BadResult { .. }) && clean(&err.to_string()),
        "{err}"
    );
    eventually("both stderr lines", || async {
        read(&file).matches("stderr ***").count() == 2
    })
    .await;

    let err = d
        .call::<_, Value>("bad_line", &secrets, CALL)
        .await
        .unwrap_err();
    assert!(
        matches!(err, DriverError::Protocol(_)) && clean(&err.to_string()),
        "{err}"
    );
    d.wait().await;
    assert!(clean(&read(&file)), "{}", read(&file));
    let tail = d.stderr_tail();
    assert!(tail.contains("stderr ***") && clean(&tail), "{tail}");
}

#[tokio::test]
async fn the_stderr_file_rotates_at_its_cap() {
    let d = driver(ECHO).await;
    lock(&d.shared.stderr).max_file_bytes = 1000;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("driver.stderr");
    d.set_stderr_file(Some(file.clone()), &Secrets::default());
    let mut rotated = file.clone().into_os_string();
    rotated.push(".1");
    let rotated = std::path::PathBuf::from(rotated);
    for i in 0..30 {
        let line = format!("line {i:02} {}\n", "x".repeat(90));
        d.call::<_, Value>("say", &json!({"text": line}), CALL)
            .await
            .unwrap();
    }
    eventually("the last line", || async {
        read(&file).contains("line 29")
    })
    .await;
    let (now, before) = (read(&file), read(&rotated));
    assert!(
        now.len() <= 1000 && before.len() <= 1000,
        "{} {}",
        now.len(),
        before.len()
    );
    assert!(
        !before.is_empty() && !before.contains("line 00"),
        "only one old file is kept"
    );
    assert!(
        before.contains("line 1")
            && now.contains("line 2")
            && now.ends_with(&format!("{}\n", "x".repeat(90)))
    );
    d.process.shutdown(Duration::from_secs(2)).await;
}
