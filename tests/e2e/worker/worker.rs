//! A `lanes worker` process (the binary this suite is built with), killed on drop.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use lanes_tests::coordinator::LANE_TOKEN;

/// A worker process, killed on drop.
pub struct Worker(pub Child);

impl Worker {
    pub fn start(coordinator: &str, artifacts: &Path, lanes: u32, host: &str) -> Self {
        Self::start_with(coordinator, artifacts, lanes, host, &[], None)
    }

    /// With extra env variables, and stderr (debug logs) written to `log`. Like every worker
    /// of these suites but the policy ones, it runs campaigns' own driver commands
    /// (`--allow-campaign-commands`).
    pub fn start_with(
        coordinator: &str,
        artifacts: &Path,
        lanes: u32,
        host: &str,
        env: &[(&str, &str)],
        log: Option<&Path>,
    ) -> Self {
        Self::start_args(
            coordinator,
            artifacts,
            lanes,
            host,
            env,
            log,
            &["--allow-campaign-commands"],
        )
    }

    /// With exactly the extra arguments given (no `--allow-campaign-commands` unless listed).
    pub fn start_args(
        coordinator: &str,
        artifacts: &Path,
        lanes: u32,
        host: &str,
        env: &[(&str, &str)],
        log: Option<&Path>,
        args: &[&str],
    ) -> Self {
        let stderr = match log {
            Some(p) => Stdio::from(std::fs::File::create(p).unwrap()),
            None => Stdio::inherit(),
        };
        let child = Command::new(env!("CARGO_BIN_EXE_lanes"))
            .envs(env.iter().copied())
            .env("RUST_LOG", if log.is_some() { "debug" } else { "warn" })
            .args([
                "worker",
                "--coordinator",
                coordinator,
                "--lanes",
                &lanes.to_string(),
            ])
            .arg("--artifacts")
            .arg(artifacts)
            .args([
                "--host",
                host,
                "--cancel-grace-s",
                "1",
                "--shutdown-grace-s",
                "5",
            ])
            .args(args)
            .env("LANES_LANE_TOKEN", LANE_TOKEN)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start lanes worker");
        Self(child)
    }

    /// Runs in `dir`, where relative driver commands resolve.
    pub fn start_in(dir: &Path, coordinator: &str, artifacts: &Path, lanes: u32) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_lanes"))
            .current_dir(dir)
            .args([
                "worker",
                "--coordinator",
                coordinator,
                "--lanes",
                &lanes.to_string(),
            ])
            .arg("--artifacts")
            .arg(artifacts)
            .args([
                "--host",
                "h",
                "--cancel-grace-s",
                "5",
                "--allow-campaign-commands",
            ])
            .env("LANES_LANE_TOKEN", LANE_TOKEN)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start lanes worker");
        Self(child)
    }

    pub fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}
