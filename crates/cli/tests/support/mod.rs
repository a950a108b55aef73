//! What the `lanes` binary's process tests share: the binary, a child killed with the test,
//! and its stderr read line by line.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

pub fn lanes() -> Command {
    Command::new(env!("CARGO_BIN_EXE_lanes"))
}

/// Kills the child when the test ends, even by a panic.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `cmd` with stderr piped and read line by line on a thread of its own, so that the
/// child never blocks on a full pipe.
pub fn spawn(mut cmd: Command) -> (Killed, Receiver<String>) {
    let mut child = cmd
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (Killed(child), rx)
}

/// The `addr=` of the first log line containing `what` (within 30 s).
pub fn logged_addr(rx: &Receiver<String>, what: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    loop {
        let line = rx
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_else(|_| panic!("no {what:?} line; stderr: {seen:#?}"));
        if line.contains(what)
            && let Some(i) = line.find("addr=")
        {
            return line[i + 5..].split_whitespace().next().unwrap().to_owned();
        }
        seen.push(line);
    }
}

/// `lanes ARGS --coordinator API` with the client token `token`.
pub fn client(api: &str, token: &str, args: &[&str]) -> std::process::Output {
    lanes()
        .args(args)
        .args(["--coordinator", api])
        .env("LANES_CLIENT_TOKEN", token)
        .output()
        .unwrap()
}

/// [`client`], which must succeed: its stdout.
pub fn client_ok(api: &str, token: &str, args: &[&str]) -> String {
    let out = client(api, token, args);
    assert!(
        out.status.success(),
        "lanes {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `lanes` run in `dir`, with no coordinator or token from the environment.
pub fn lanes_in(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_lanes"));
    c.current_dir(dir)
        .env_remove("LANES_COORDINATOR")
        .env_remove("LANES_CLIENT_TOKEN")
        .env_remove("LANES_CLIENT_TOKEN_FILE");
    c
}

/// A fast sim campaign of `tasks` tasks and two arms, written into `dir`.
pub fn campaign(dir: &Path, id: &str, tasks: usize, agent_s: f64) -> std::path::PathBuf {
    let mut text = format!(
        "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 5\npairing = \"none\"\nlease_ttl_s = 10\n\
         [defaults]\ntimeout_s = 10\nmax_turns = 10\n\
         [[arms]]\nid = \"a\"\nprovider = \"pa\"\n[[arms]]\nid = \"b\"\nprovider = \"pb\"\n\
         [driver]\nsim = {{ boot_s = 0.001, reset_s = 0.001, agent_s = [{agent_s}, {agent_s}], \
         evaluate_s = 0.001, pass_rate = {{ a = 0.5, b = 0.5 }} }}\n[tasks]\nitems = [\n"
    );
    for i in 0..tasks {
        text.push_str(&format!("  {{ id = \"T{i:03}\" }},\n"));
    }
    text.push_str("]\n");
    let path = dir.join(format!("{id}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}
