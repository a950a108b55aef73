//! What the `lanes` binary's process tests share: the binary, a child killed with the test,
//! and its stderr read line by line.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
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
