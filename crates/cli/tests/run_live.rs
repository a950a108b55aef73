//! `lanes run` while it runs: the live view in a pseudo-terminal, `lanes status --data-dir`
//! against the running process, Ctrl-C draining, and a second run resuming without re-running
//! any final trial.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn lanes() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lanes"))
}

fn quickstart() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart/campaign.toml")
}

#[test]
fn the_progress_view_renders_in_a_pseudo_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = format!(
        "{} run {} --lanes 16 --data-dir {}",
        env!("CARGO_BIN_EXE_lanes"),
        quickstart().display(),
        dir.path().join("data").display()
    );
    // util-linux `script` gives the command a pseudo-terminal.
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .expect("script(1)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("trials ["), "the live view was drawn");
    assert!(text.contains("COMPLETENESS"), "then the report");
    assert!(!text.contains("panicked"), "{text}");
}

/// The loopback API of a running `lanes run` is private: its file is 0600 in a 0700 data
/// directory, a call without its token is refused, and the token it holds works.
fn api_private(data: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&data.join("lanes.addr")), 0o600);
    assert_eq!(mode(data), 0o700);
    let url = text.lines().next().unwrap();
    let token = text
        .lines()
        .find_map(|l| l.strip_prefix("client_token="))
        .unwrap();
    assert!(token.len() >= 32, "a random token");
    let open = lanes()
        .args(["status", "slow", "--json", "--coordinator", url])
        .env_remove("LANES_CLIENT_TOKEN")
        .output()
        .unwrap();
    assert!(!open.status.success(), "the loopback API is not open");
    let err = String::from_utf8_lossy(&open.stderr);
    assert!(err.contains("missing bearer token"), "{err}");
    let authed = lanes()
        .args(["status", "slow", "--json", "--coordinator", url])
        .env("LANES_CLIENT_TOKEN", token)
        .output()
        .unwrap();
    assert!(
        authed.status.success(),
        "{}",
        String::from_utf8_lossy(&authed.stderr)
    );
}

fn status(data: &std::path::Path) -> serde_json::Value {
    let out = lanes()
        .args(["status", "slow", "--json", "--data-dir"])
        .arg(data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn rows(data: &std::path::Path) -> Vec<serde_json::Value> {
    let out = lanes()
        .args(["results", "slow", "--data-dir"])
        .arg(data)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn an_interrupted_run_resumes_without_rerunning_final_trials() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let file = dir.path().join("slow.toml");
    let text = std::fs::read_to_string(quickstart())
        .unwrap()
        .replace("id = \"quickstart\"", "id = \"slow\"")
        .replace("agent_s = [0.1, 0.4]", "agent_s = [0.3, 0.6]");
    std::fs::write(&file, text).unwrap();
    let mut first = lanes()
        .arg("run")
        .arg(&file)
        .args(["--lanes", "4", "--data-dir"])
        .arg(&data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // `lanes status --data-dir` reaches the running process through lanes.addr.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut api_checked = false;
    loop {
        if !api_checked
            && let Ok(text) = std::fs::read_to_string(data.join("lanes.addr"))
            && text.contains("lane_token=")
        {
            api_private(&data, &text);
            api_checked = true;
        }
        if data.join("lanes.addr").exists() {
            let st = status(&data);
            if st["trials_final"].as_u64().unwrap_or(0) >= 12 {
                assert_eq!(st["state"], "running");
                break;
            }
        }
        assert!(Instant::now() < deadline, "the first run made no progress");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        Command::new("kill")
            .args(["-INT", &first.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    let code = loop {
        if let Some(s) = first.try_wait().unwrap() {
            break s.code();
        }
        assert!(Instant::now() < deadline, "Ctrl-C did not stop the run");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(5), "stopped by the user");
    // After it has finished, status opens the store directly.
    let st = status(&data);
    assert_eq!(st["state"], "stopped");
    assert_eq!(st["stop_reason"], "STOPPED_USER");
    let before = rows(&data);
    let final_before: BTreeMap<String, usize> = {
        let mut m = BTreeMap::new();
        for r in &before {
            if r["final"] == true {
                m.insert(r["trial_id"].as_str().unwrap().to_owned(), 0);
            }
        }
        for r in &before {
            if let Some(n) = m.get_mut(r["trial_id"].as_str().unwrap()) {
                *n += 1;
            }
        }
        m
    };
    assert!(!final_before.is_empty());

    // Resumed with more lanes than the first run had: the lanes are this run's, not the
    // campaign's.
    let second = lanes()
        .arg("run")
        .arg(&file)
        .args(["--lanes", "16", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&second.stdout);
    assert!(second.status.success(), "{out}");
    assert!(out.contains("resumed"), "{out}");
    assert!(out.contains("done: 120/120 final"), "{out}");
    let after = rows(&data);
    for (trial, n) in &final_before {
        let now = after
            .iter()
            .filter(|r| r["trial_id"] == trial.as_str())
            .count();
        assert_eq!(now, *n, "{trial} was final, and ran again");
    }
    // Every trial ends counted once, or excluded after its retries.
    let mut counted: BTreeMap<String, (usize, bool)> = BTreeMap::new();
    for r in &after {
        let e = counted
            .entry(r["trial_id"].as_str().unwrap().to_owned())
            .or_default();
        e.0 += usize::from(r["counted"] == true);
        e.1 |= r["final"] == true && r["excluded"] == true;
    }
    assert_eq!(counted.len(), 120);
    for (t, (n, excluded)) in counted {
        assert!(
            n == 1 || (n == 0 && excluded),
            "{t}: counted {n}, excluded {excluded}"
        );
    }
}
