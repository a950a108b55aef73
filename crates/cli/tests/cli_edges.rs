//! The CLI's rough edges, each found by using it as a new user would: client commands after
//! `lanes run` in the same folder, output piped into `head`, the words `lanes stop` prints, the
//! help text, and the message of a coordinator that is not there.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

mod support;

use support::{campaign, lanes_in as lanes};

/// Reads one line of the child's stdout, then closes the pipe, as `| head -1` does; the
/// child must then end by itself, quietly and with status 0.
fn read_one_line_and_close(mut cmd: Command) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(!line.is_empty(), "no output at all");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

#[test]
fn after_lanes_run_here_client_commands_find_it_and_stop_quietly_when_piped() {
    let dir = tempfile::tempdir().unwrap();
    let file = campaign(dir.path(), "edges", 100, 0.001);
    let run = lanes(dir.path()).arg("run").arg(&file).output().unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(dir.path().join(".lanes").is_dir());

    // No --coordinator, no --data-dir: ./.lanes.
    let status = lanes(dir.path())
        .args(["status", "edges", "--json"])
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["state"], "done");

    // 200 rows are far more than a pipe holds.
    let mut results = lanes(dir.path());
    results.args(["results", "edges"]);
    read_one_line_and_close(results);

    // `lanes stop` says the state in words.
    let stop = lanes(dir.path()).args(["stop", "edges"]).output().unwrap();
    let said = String::from_utf8_lossy(&stop.stdout);
    assert!(
        stop.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    assert_eq!(said.trim(), "edges: done");

    // An explicit coordinator still wins over ./.lanes.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let refused = lanes(dir.path())
        .args(["status", "edges", "--coordinator"])
        .arg(format!("http://{dead}"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&format!("cannot reach the coordinator at http://{dead}")),
        "{stderr}"
    );
    // Each cause once: not "tcp connect error: tcp connect error".
    let words: Vec<&str> = stderr.split(": ").collect();
    assert!(
        words.windows(2).all(|w| w[0] != w[1]),
        "a cause is repeated: {stderr}"
    );
}

#[test]
fn lanes_run_piped_into_head_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let file = campaign(dir.path(), "headed", 40, 0.05);
    let mut run = lanes(dir.path());
    run.arg("run").arg(&file);
    read_one_line_and_close(run);
}

#[test]
fn the_run_help_names_each_default_once() {
    let out = Command::new(env!("CARGO_BIN_EXE_lanes"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("[default: .lanes]"), "{help}");
    for line in help.lines() {
        assert!(
            line.matches("[default:").count() <= 1,
            "a default said twice: {line}"
        );
    }
}
