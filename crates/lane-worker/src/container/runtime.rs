//! The container runtime's CLI (`podman` or `docker`, which share the commands used here):
//! build, run, exec, copy, list by label and remove. Each call is one child process; its
//! settings (`CONTAINER_HOST`, `DOCKER_HOST`, `CONTAINERS_CONF`…) come from the environment
//! the operator started the worker with.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::Command;

/// The most output kept of one command (the rest is counted, not kept).
pub const MAX_OUTPUT_BYTES: usize = 256 * 1024;

/// Labels every container of Lanes carries: the orphan sweep and `teardown` find them so.
pub const LABEL_WORKER: &str = "lanes.worker";
pub const LABEL_LANE: &str = "lanes.lane";
pub const LABEL_TAG: &str = "lanes.tag";

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot run `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("`{command}` failed (exit {code:?}): {stderr}")]
    Failed {
        command: String,
        code: Option<i32>,
        stderr: String,
    },
    #[error("`{command}` did not finish within {limit:?}")]
    TimedOut { command: String, limit: Duration },
}

/// What a command printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// `None` when it was killed at its time limit.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// How a container for one attempt is started.
#[derive(Debug, Clone, Default)]
pub struct RunSpec {
    pub name: String,
    pub image: String,
    pub labels: BTreeMap<String, String>,
    pub network: bool,
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    pub pids_limit: u32,
    pub workdir: Option<String>,
    pub env: BTreeMap<String, String>,
}

/// How a command runs inside a container.
#[derive(Debug, Clone, Default)]
pub struct ExecSpec {
    pub workdir: Option<String>,
    pub env: BTreeMap<String, String>,
    /// Names whose values the runtime takes from its own environment (`--env NAME`), so a
    /// secret never appears on a command line.
    pub passed: Vec<String>,
}

/// The CLI of one runtime.
#[derive(Debug, Clone)]
pub struct Runtime {
    program: String,
    /// The folder its commands run in: conmon leaves files there (an `oom` marker when a
    /// container meets its memory limit), which must not land in the worker's folder.
    cwd: Option<std::path::PathBuf>,
}

impl Runtime {
    pub fn new(program: impl Into<String>) -> Self {
        Self {
            program: program.into(),
            cwd: None,
        }
    }

    /// Runs every command in `dir` (created when missing).
    pub fn in_dir(mut self, dir: &Path) -> Self {
        let _ = std::fs::create_dir_all(dir);
        self.cwd = Some(dir.to_owned());
        self
    }

    pub fn program(&self) -> &str {
        &self.program
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.program);
        // A folder removed meanwhile must not stop the runtime (the cleanup at exit included).
        if let Some(dir) = self.cwd.as_ref().filter(|d| d.is_dir()) {
            c.current_dir(dir);
        }
        c.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        c
    }

    /// Runs the CLI with `args`, killed past `limit`; any exit code is an `Output`.
    async fn output(
        &self,
        mut cmd: Command,
        what: &str,
        limit: Duration,
    ) -> Result<Output, RuntimeError> {
        let mut child = cmd.spawn().map_err(|source| RuntimeError::Spawn {
            program: self.program.clone(),
            source,
        })?;
        let (mut out, mut err) = (
            child.stdout.take().expect("piped"),
            child.stderr.take().expect("piped"),
        );
        let read = async {
            let (mut o, mut e) = (Vec::new(), Vec::new());
            let (mut out_kept, mut err_kept) = (
                (&mut out).take(MAX_OUTPUT_BYTES as u64),
                (&mut err).take(MAX_OUTPUT_BYTES as u64),
            );
            let _ = tokio::join!(out_kept.read_to_end(&mut o), err_kept.read_to_end(&mut e));
            // Past the kept bytes, drain so the child never blocks on a full pipe.
            let (mut sink_o, mut sink_e) = (tokio::io::sink(), tokio::io::sink());
            let _ = tokio::join!(
                tokio::io::copy(&mut out, &mut sink_o),
                tokio::io::copy(&mut err, &mut sink_e)
            );
            let status = child.wait().await;
            (o, e, status)
        };
        match tokio::time::timeout(limit, read).await {
            Ok((o, e, status)) => Ok(Output {
                code: status.ok().and_then(|s| s.code()),
                stdout: String::from_utf8_lossy(&o).into_owned(),
                stderr: String::from_utf8_lossy(&e).into_owned(),
            }),
            Err(_) => Err(RuntimeError::TimedOut {
                command: what.to_owned(),
                limit,
            }),
        }
    }

    /// Runs the CLI and requires exit 0; its stdout, trimmed.
    async fn ok(&self, args: &[&str], limit: Duration) -> Result<String, RuntimeError> {
        let what = format!("{} {}", self.program, args.first().copied().unwrap_or(""));
        let o = self.output(self.command(args), &what, limit).await?;
        if o.code == Some(0) {
            Ok(o.stdout.trim().to_owned())
        } else {
            Err(RuntimeError::Failed {
                command: what,
                code: o.code,
                stderr: tail(&o.stderr, 2000),
            })
        }
    }

    /// The runtime's version line, for the driver's pins.
    pub async fn version(&self) -> Result<String, RuntimeError> {
        self.ok(&["--version"], Duration::from_secs(30)).await
    }

    /// Whether an image of that name exists locally.
    pub async fn image_exists(&self, image: &str) -> bool {
        self.ok(
            &["image", "inspect", "--format", "{{.Id}}", image],
            Duration::from_secs(60),
        )
        .await
        .is_ok()
    }

    /// The image's id (`sha256:…`).
    pub async fn image_id(&self, image: &str) -> Result<String, RuntimeError> {
        let id = self
            .ok(
                &["image", "inspect", "--format", "{{.Id}}", image],
                Duration::from_secs(60),
            )
            .await?;
        Ok(if id.starts_with("sha256:") {
            id
        } else {
            format!("sha256:{id}")
        })
    }

    /// Builds `context` (its `Dockerfile`) as `tag`, within `limit`; the build output is
    /// returned on failure.
    pub async fn build(
        &self,
        context: &Path,
        tag: &str,
        limit: Duration,
    ) -> Result<(), RuntimeError> {
        let ctx = context.display().to_string();
        self.ok(&["build", "-q", "-t", tag, &ctx], limit)
            .await
            .map(|_| ())
    }

    /// Starts a container that sleeps, for one attempt; its id.
    pub async fn run(&self, spec: &RunSpec) -> Result<String, RuntimeError> {
        let mut args: Vec<String> = vec![
            "run".into(),
            "-d".into(),
            "--name".into(),
            spec.name.clone(),
            "--security-opt".into(),
            "no-new-privileges".into(),
            "--pids-limit".into(),
            spec.pids_limit.to_string(),
        ];
        for (k, v) in &spec.labels {
            args.extend(["--label".into(), format!("{k}={v}")]);
        }
        if !spec.network {
            args.extend(["--network".into(), "none".into()]);
        }
        if let Some(c) = spec.cpus {
            args.extend(["--cpus".into(), format!("{c}")]);
        }
        if let Some(m) = spec.memory_mb {
            // The swap limit equal to the memory limit: no swap beyond it.
            args.extend([
                "--memory".into(),
                format!("{m}m"),
                "--memory-swap".into(),
                format!("{m}m"),
            ]);
        }
        for (k, v) in &spec.env {
            args.extend(["--env".into(), format!("{k}={v}")]);
        }
        args.extend([
            spec.image.clone(),
            "sh".into(),
            "-c".into(),
            "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done".into(),
        ]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let id = self.ok(&refs, Duration::from_secs(120)).await?;
        // The workdir may not exist in the image (a `WORKDIR` no later step wrote into):
        // every exec runs there, so it is made now.
        if let Some(w) = &spec.workdir {
            self.ok(&["exec", &id, "mkdir", "-p", w], Duration::from_secs(60))
                .await?;
        }
        Ok(id)
    }

    /// Runs `script` with `sh -c` in the container, killed past `limit` (only the exec client:
    /// see [`Runtime::kill_processes`]).
    pub async fn exec(
        &self,
        container: &str,
        script: &str,
        spec: &ExecSpec,
        limit: Duration,
    ) -> Result<Output, RuntimeError> {
        let mut args: Vec<String> = vec!["exec".into()];
        if let Some(w) = &spec.workdir {
            args.extend(["--workdir".into(), w.clone()]);
        }
        for (k, v) in &spec.env {
            args.extend(["--env".into(), format!("{k}={v}")]);
        }
        for name in &spec.passed {
            args.extend(["--env".into(), name.clone()]);
        }
        args.extend([container.into(), "sh".into(), "-c".into(), script.into()]);
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self.output(
            self.command(&refs),
            &format!("{} exec", self.program),
            limit,
        )
        .await
    }

    /// Kills every process of the container but its first (the sleeper): an agent's
    /// background processes included, which killing the `exec` client leaves running.
    pub async fn kill_processes(&self, container: &str) -> Result<(), RuntimeError> {
        self.ok(
            &[
                "exec",
                container,
                "sh",
                "-c",
                "kill -9 -1 2>/dev/null; true",
            ],
            Duration::from_secs(60),
        )
        .await
        .map(|_| ())
    }

    /// Copies a host folder's contents to `dest` in the container (created).
    pub async fn copy_in(
        &self,
        container: &str,
        src: &Path,
        dest: &str,
    ) -> Result<(), RuntimeError> {
        self.ok(
            &["exec", container, "mkdir", "-p", dest],
            Duration::from_secs(60),
        )
        .await?;
        let from = format!("{}/.", src.display());
        let to = format!("{container}:{dest}");
        self.ok(&["cp", &from, &to], Duration::from_secs(300))
            .await
            .map(|_| ())
    }

    /// Copies `src` of the container to the host folder `dest` (created).
    pub async fn copy_out(
        &self,
        container: &str,
        src: &str,
        dest: &Path,
    ) -> Result<(), RuntimeError> {
        std::fs::create_dir_all(dest).map_err(|source| RuntimeError::Spawn {
            program: format!("mkdir {}", dest.display()),
            source,
        })?;
        let from = format!("{container}:{src}/.");
        let to = dest.display().to_string();
        self.ok(&["cp", &from, &to], Duration::from_secs(300))
            .await
            .map(|_| ())
    }

    /// Whether the container is running.
    pub async fn is_running(&self, container: &str) -> bool {
        self.ok(
            &["inspect", "--format", "{{.State.Running}}", container],
            Duration::from_secs(60),
        )
        .await
        .is_ok_and(|s| s == "true")
    }

    /// The ids of the containers (running or not) that carry every label given.
    pub async fn list(&self, labels: &[(&str, &str)]) -> Result<Vec<String>, RuntimeError> {
        let mut args: Vec<String> =
            vec!["ps".into(), "-a".into(), "-q".into(), "--no-trunc".into()];
        for (k, v) in labels {
            args.extend(["--filter".into(), format!("label={k}={v}")]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = self.ok(&refs, Duration::from_secs(60)).await?;
        Ok(out
            .lines()
            .map(str::to_owned)
            .filter(|l| !l.is_empty())
            .collect())
    }

    /// Removes containers at once (killed, not stopped politely).
    pub async fn remove(&self, containers: &[String]) -> Result<(), RuntimeError> {
        if containers.is_empty() {
            return Ok(());
        }
        let mut args = vec!["rm", "-f", "-t", "0"];
        args.extend(containers.iter().map(String::as_str));
        self.ok(&args, Duration::from_secs(120)).await.map(|_| ())
    }
}

/// The last `max` bytes of `s`, on a character boundary.
pub fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.trim().to_owned();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", s[start..].trim())
}
