//! The driver child process: one long-lived child per lane, speaking the driver protocol over
//! its stdin/stdout (see [`super::codec`]).
//!
//! Four tasks serve one [`DriverProcess`]:
//! - a **writer** sends request and notification lines to the child's stdin, in order;
//! - a **reader** decodes the child's stdout: responses go to the pending call with their id
//!   (so they may arrive in any order), `progress` and `log` notifications go to the channel of
//!   [`DriverProcess::take_notifications`], and anything else that is not allowed (a malformed
//!   or oversized line, an unknown id, a request from the driver) kills the child;
//! - a **stderr copier** appends the child's stderr to the file of
//!   [`DriverProcess::set_stderr_file`] and keeps its last [`STDERR_TAIL_BYTES`] in memory;
//! - a **supervisor** owns the child, kills it on demand and reaps it.
//!
//! Once the child has exited, been killed or broken the protocol, the process is *dead*: every
//! pending and future call fails at once, and [`DriverProcess::is_alive`] is false. A call that
//! passes its deadline kills the child, so a hung driver never blocks the lane.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::codec::{self, Incoming, RpcError};
use super::protocol::{LogParams, MAX_LINE_BYTES, ProgressParams, method};

/// How much of the child's stderr is kept in memory for error messages.
pub const STDERR_TAIL_BYTES: usize = 4096;
/// How long the readers may keep draining the pipes after the child exited (a grandchild that
/// inherited them may hold them open).
const DRAIN_GRACE: Duration = Duration::from_millis(500);
/// How long a child that closed its stdout may take to exit before it is killed.
const STDOUT_CLOSED_GRACE: Duration = Duration::from_millis(500);
/// How long `kill` and a passed deadline wait for the child to be reaped.
const REAP_WAIT: Duration = Duration::from_secs(2);

/// How to start a driver.
///
/// `program` is resolved at spawn: an absolute path is used as is; a relative path with a
/// directory part (`./drv`, `bin/drv`) resolves against `cwd`, or the current directory when
/// `cwd` is `None`; a plain name (`python3`) is looked up in `PATH`.
///
/// `env` values are secrets: `Debug` prints only their names, and they are never logged.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DriverCommand {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// Variables added to the worker's environment.
    pub env: Vec<(String, String)>,
}

impl fmt::Debug for DriverCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env_names: Vec<&str> = self.env.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("DriverCommand")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("env", &env_names)
            .finish()
    }
}

/// A notification from the driver that the lane cares about.
#[derive(Debug, Clone, PartialEq)]
pub enum Notification {
    Progress(ProgressParams),
    Log(LogParams),
}

/// Why a driver call (or spawn) failed.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("cannot start driver `{program}`: {source}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("driver exited ({status}){}", tail_suffix(.stderr_tail))]
    Exited { status: String, stderr_tail: String },
    #[error("driver call `{method}` passed its deadline of {after:?}; the driver was killed")]
    Deadline { method: String, after: Duration },
    #[error("driver protocol error: {0}")]
    Protocol(String),
    /// A JSON-RPC error answer: the call failed, the driver is fine.
    #[error("driver call `{method}` failed ({code}): {message}")]
    Rpc {
        method: String,
        code: i64,
        message: String,
        failure_kind: Option<String>,
    },
    #[error("driver call `{method}` returned a bad result: {reason}")]
    BadResult { method: String, reason: String },
    /// The lane could not encode a call (nothing was sent; the driver is fine).
    #[error("cannot send driver call `{method}`: {reason}")]
    BadParams { method: String, reason: String },
}

fn tail_suffix(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!("; stderr tail: {tail}")
    }
}

impl DriverError {
    /// The driver is broken and must be restarted; the attempt is `driver_crash`.
    pub fn is_crash(&self) -> bool {
        matches!(
            self,
            Self::Exited { .. }
                | Self::Deadline { .. }
                | Self::Protocol(_)
                | Self::BadResult { .. }
        )
    }

    /// The failure kind of this error: the driver's `data.failure_kind` for a JSON-RPC error
    /// answer, `driver_crash` for a crash, `None` otherwise.
    pub fn failure_kind(&self) -> Option<&str> {
        match self {
            Self::Rpc { failure_kind, .. } => failure_kind.as_deref(),
            e if e.is_crash() => Some("driver_crash"),
            _ => None,
        }
    }
}

/// A running driver child. Dropping it kills the child.
pub struct DriverProcess {
    shared: Arc<Shared>,
    writer: Mutex<Option<mpsc::UnboundedSender<String>>>,
    notifications: Mutex<Option<mpsc::UnboundedReceiver<Notification>>>,
    exited: watch::Receiver<bool>,
    next_id: AtomicU64,
    pid: Option<u32>,
}

impl fmt::Debug for DriverProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DriverProcess")
            .field("program", &self.shared.program)
            .field("pid", &self.pid)
            .field("alive", &self.is_alive())
            .finish_non_exhaustive()
    }
}

type Reply = Result<Result<Value, RpcError>, DriverError>;

/// State shared by the handle and its tasks.
struct Shared {
    program: String,
    state: Mutex<State>,
    stderr: Mutex<StderrState>,
    /// Asks the supervisor to kill the child.
    kill: Notify,
}

#[derive(Default)]
struct State {
    pending: HashMap<u64, oneshot::Sender<Reply>>,
    dead: Option<Dead>,
    exited: bool,
}

/// Why the process can take no more calls.
#[derive(Debug, Clone)]
enum Dead {
    Protocol(String),
    /// Exited or killed; the status or the reason it was killed.
    Exited(String),
}

#[derive(Default)]
struct StderrState {
    path: Option<PathBuf>,
    /// Bumped by every `set_stderr_file`.
    generation: u64,
    tail: Vec<u8>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn stderr_tail(&self) -> String {
        let st = lock(&self.stderr);
        String::from_utf8_lossy(&st.tail).trim_end().to_owned()
    }

    fn dead(&self) -> Option<Dead> {
        lock(&self.state).dead.clone()
    }

    /// Marks the process dead (the first reason wins) and fails every pending call.
    fn fail(&self, dead: Dead) {
        let pending = {
            let mut st = lock(&self.state);
            if st.dead.is_some() {
                return;
            }
            st.dead = Some(dead.clone());
            std::mem::take(&mut st.pending)
        };
        if pending.is_empty() {
            return;
        }
        let tail = self.stderr_tail();
        for (_, tx) in pending {
            let _ = tx.send(Err(dead.error(&tail)));
        }
    }

    /// A protocol violation: dead, and the child is killed.
    fn protocol_error(&self, message: String) {
        tracing::warn!(driver = %self.program, "driver protocol error: {message}; killing it");
        self.fail(Dead::Protocol(message));
        self.kill.notify_one();
    }
}

impl Dead {
    fn error(&self, stderr_tail: &str) -> DriverError {
        match self {
            Self::Protocol(message) => DriverError::Protocol(message.clone()),
            Self::Exited(status) => DriverError::Exited {
                status: status.clone(),
                stderr_tail: stderr_tail.to_owned(),
            },
        }
    }
}

impl DriverProcess {
    /// Starts the driver child. It does not send `initialize`; the lane does.
    pub async fn spawn(spec: &DriverCommand) -> Result<DriverProcess, DriverError> {
        let spawn_err = |source| DriverError::Spawn {
            program: spec.program.clone(),
            source,
        };
        let (program, cwd) = resolve(&spec.program, spec.cwd.as_deref()).map_err(spawn_err)?;

        let mut cmd = Command::new(&program);
        cmd.args(&spec.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(cwd) = &cwd {
            cmd.current_dir(cwd);
        }
        for (name, value) in &spec.env {
            cmd.env(name, value);
        }
        let mut child = cmd.spawn().map_err(spawn_err)?;
        let pid = child.id();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            // Cannot happen: all three are piped.
            return Err(spawn_err(io::Error::other(
                "the child's stdio is not piped",
            )));
        };
        tracing::debug!(
            program = %program.display(),
            args = ?spec.args,
            cwd = ?cwd,
            env = ?spec.env.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            pid,
            "driver started"
        );

        let shared = Arc::new(Shared {
            program: spec.program.clone(),
            state: Mutex::new(State::default()),
            stderr: Mutex::new(StderrState::default()),
            kill: Notify::new(),
        });
        let (line_tx, line_rx) = mpsc::unbounded_channel();
        let (note_tx, note_rx) = mpsc::unbounded_channel();
        let (exited_tx, exited_rx) = watch::channel(false);

        tokio::spawn(write_stdin(stdin, line_rx));
        let stdout_task = tokio::spawn(read_stdout(shared.clone(), stdout, note_tx));
        let stderr_task = tokio::spawn(copy_stderr(shared.clone(), stderr));
        tokio::spawn(supervise(
            shared.clone(),
            child,
            stdout_task,
            stderr_task,
            exited_tx,
        ));

        Ok(DriverProcess {
            shared,
            writer: Mutex::new(Some(line_tx)),
            notifications: Mutex::new(Some(note_rx)),
            exited: exited_rx,
            next_id: AtomicU64::new(1),
            pid,
        })
    }

    /// Calls `method` and waits for its answer, at most `deadline`; past it the child is killed
    /// and the call fails with [`DriverError::Deadline`].
    ///
    /// Dropping the future abandons the call; its late answer is discarded.
    pub async fn call<P, R>(
        &self,
        method: &str,
        params: &P,
        deadline: Duration,
    ) -> Result<R, DriverError>
    where
        P: Serialize + ?Sized,
        R: DeserializeOwned,
    {
        let bad_params = |reason: String| DriverError::BadParams {
            method: method.to_owned(),
            reason,
        };
        let params = serde_json::to_value(params).map_err(|e| bad_params(e.to_string()))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let line = codec::encode_request(id, method, &params);
        if line.len() - 1 > MAX_LINE_BYTES {
            return Err(bad_params(format!(
                "the request is {} bytes, over the {MAX_LINE_BYTES}-byte line limit",
                line.len() - 1
            )));
        }

        let (tx, rx) = oneshot::channel();
        {
            let mut st = lock(&self.shared.state);
            if let Some(dead) = st.dead.clone() {
                drop(st);
                return Err(dead.error(&self.shared.stderr_tail()));
            }
            st.pending.insert(id, tx);
        }
        // If the writer is gone the child is going too; the supervisor fails the call.
        self.send_line(line);

        match tokio::time::timeout(deadline, rx).await {
            Ok(Ok(Ok(Ok(result)))) => {
                serde_json::from_value(result).map_err(|e| DriverError::BadResult {
                    method: method.to_owned(),
                    reason: e.to_string(),
                })
            }
            Ok(Ok(Ok(Err(rpc)))) => Err(DriverError::Rpc {
                method: method.to_owned(),
                code: rpc.code,
                message: rpc.message,
                failure_kind: rpc.data.and_then(|d| d.failure_kind),
            }),
            Ok(Ok(Err(error))) => Err(error),
            // The sender was dropped without an answer (only when the process is torn down).
            Ok(Err(_)) => Err(self
                .shared
                .dead()
                .unwrap_or_else(|| Dead::Exited("driver went away".to_owned()))
                .error(&self.shared.stderr_tail())),
            Err(_) => {
                tracing::warn!(
                    driver = %self.shared.program,
                    method,
                    ?deadline,
                    "driver call passed its deadline; killing the driver"
                );
                self.kill_for(format!(
                    "killed: `{method}` passed its deadline of {deadline:?}"
                ))
                .await;
                Err(DriverError::Deadline {
                    method: method.to_owned(),
                    after: deadline,
                })
            }
        }
    }

    /// Sends a notification (e.g. `cancel`); fire and forget. Dropped when the driver is dead.
    pub fn notify<P: Serialize + ?Sized>(&self, method: &str, params: &P) {
        if !self.is_alive() {
            tracing::debug!(driver = %self.shared.program, method, "driver is dead: notification dropped");
            return;
        }
        match serde_json::to_value(params) {
            Ok(params) => self.send_line(codec::encode_notification(method, &params)),
            Err(e) => tracing::warn!(method, "cannot encode driver notification: {e}"),
        }
    }

    /// The `progress` and `log` notifications, in order. Only the first call gets them.
    pub fn take_notifications(&self) -> Option<mpsc::UnboundedReceiver<Notification>> {
        lock(&self.notifications).take()
    }

    /// Appends the child's stderr read from now on to `path` (created, with its parent
    /// directories, when missing), or to no file for `None`.
    pub fn set_stderr_file(&self, path: Option<PathBuf>) {
        let mut st = lock(&self.shared.stderr);
        st.path = path;
        st.generation += 1;
    }

    /// The last [`STDERR_TAIL_BYTES`] of the child's stderr (lossy UTF-8, trailing whitespace
    /// trimmed).
    pub fn stderr_tail(&self) -> String {
        self.shared.stderr_tail()
    }

    /// Sends `shutdown`, closes the child's stdin and waits up to `grace` for it to exit; then
    /// kills it.
    pub async fn shutdown(self, grace: Duration) {
        let start = Instant::now();
        if self.is_alive() {
            let answer: Result<Value, _> = self
                .call(method::SHUTDOWN, &serde_json::json!({}), grace)
                .await;
            if let Err(e) = answer {
                tracing::debug!(driver = %self.shared.program, "driver shutdown: {e}");
            }
            lock(&self.writer).take();
            let left = grace.saturating_sub(start.elapsed());
            if tokio::time::timeout(left, self.wait()).await.is_ok() {
                return;
            }
            tracing::debug!(driver = %self.shared.program, ?grace, "driver did not exit in time");
        }
        self.kill_for(format!("killed: did not exit within {grace:?} of shutdown"))
            .await;
    }

    /// Kills the child and waits (briefly) until it is reaped. Pending and later calls fail
    /// with [`DriverError::Exited`].
    pub async fn kill(&self) {
        self.kill_for("killed by the lane".to_owned()).await;
    }

    /// Waits until the child has exited and been reaped.
    pub async fn wait(&self) {
        let mut exited = self.exited.clone();
        // An error means the supervisor is gone, i.e. the runtime is shutting down.
        let _ = exited.wait_for(|exited| *exited).await;
    }

    /// The driver can take calls: it has not exited, been killed or broken the protocol.
    pub fn is_alive(&self) -> bool {
        lock(&self.shared.state).dead.is_none()
    }

    /// The child's process id, until it has been reaped.
    pub fn id(&self) -> Option<u32> {
        if lock(&self.shared.state).exited {
            None
        } else {
            self.pid
        }
    }

    async fn kill_for(&self, reason: String) {
        self.shared.fail(Dead::Exited(reason));
        self.shared.kill.notify_one();
        if tokio::time::timeout(REAP_WAIT, self.wait()).await.is_err() {
            tracing::warn!(driver = %self.shared.program, pid = ?self.pid, "driver not reaped after kill");
        }
    }

    fn send_line(&self, line: String) {
        if let Some(tx) = lock(&self.writer).as_ref() {
            let _ = tx.send(line);
        }
    }
}

impl Drop for DriverProcess {
    fn drop(&mut self) {
        self.shared
            .fail(Dead::Exited("the driver handle was dropped".to_owned()));
        self.shared.kill.notify_one();
    }
}

/// Resolves `program` (see [`DriverCommand`]) and makes `cwd` absolute.
fn resolve(program: &str, cwd: Option<&Path>) -> io::Result<(PathBuf, Option<PathBuf>)> {
    if program.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty program"));
    }
    let path = Path::new(program);
    let has_dir = path.parent().is_some_and(|dir| !dir.as_os_str().is_empty());
    let needs_base = (cwd.is_some_and(Path::is_relative)) || (has_dir && path.is_relative());
    let base = if needs_base {
        Some(std::env::current_dir()?)
    } else {
        None
    };
    let cwd = cwd.map(|cwd| match &base {
        Some(base) => base.join(cwd),
        None => cwd.to_path_buf(),
    });
    let program = if path.is_absolute() || !has_dir {
        path.to_path_buf()
    } else {
        match (&cwd, &base) {
            (Some(cwd), _) => cwd.join(path),
            (None, Some(base)) => base.join(path),
            (None, None) => path.to_path_buf(),
        }
    };
    Ok((program, cwd))
}

async fn write_stdin(mut stdin: ChildStdin, mut lines: mpsc::UnboundedReceiver<String>) {
    while let Some(line) = lines.recv().await {
        let written = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await
        };
        if let Err(e) = written.await {
            tracing::debug!("cannot write to the driver's stdin: {e}");
            return;
        }
    }
    // Every sender is gone: dropping stdin closes it, which tells the child to finish.
}

/// One line read by [`read_line`].
enum Line {
    /// The line is in the buffer, without its newline.
    Complete,
    /// The line grew past the limit (the buffer holds what was read of it).
    TooLong,
    Eof,
}

/// Reads one line into `buf` without ever holding more than `limit` bytes (plus one read).
/// A last line without a newline counts as a line.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    limit: usize,
) -> io::Result<Line> {
    buf.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if buf.is_empty() {
                Line::Eof
            } else {
                Line::Complete
            });
        }
        let (used, done) = match available.iter().position(|&b| b == b'\n') {
            Some(at) => {
                buf.extend_from_slice(&available[..at]);
                (at + 1, true)
            }
            None => {
                buf.extend_from_slice(available);
                (available.len(), false)
            }
        };
        reader.consume(used);
        if buf.strip_suffix(b"\r").unwrap_or(buf).len() > limit {
            return Ok(Line::TooLong);
        }
        if done {
            return Ok(Line::Complete);
        }
    }
}

async fn read_stdout(
    shared: Arc<Shared>,
    stdout: ChildStdout,
    notes: mpsc::UnboundedSender<Notification>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut line = Vec::new();
    loop {
        match read_line(&mut reader, &mut line, MAX_LINE_BYTES).await {
            Ok(Line::Complete) => {}
            Ok(Line::TooLong) => {
                return shared.protocol_error(format!(
                    "bad line: line too long: more than {MAX_LINE_BYTES} bytes"
                ));
            }
            Ok(Line::Eof) => return,
            Err(e) => {
                tracing::debug!(driver = %shared.program, "cannot read the driver's stdout: {e}");
                return;
            }
        }
        // Blank lines carry nothing; tolerate them.
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let message = match codec::decode(&line) {
            Ok(message) => message,
            Err(e) => return shared.protocol_error(format!("bad line: {e}")),
        };
        match message {
            Incoming::Response { id, result } => {
                let tx = lock(&shared.state).pending.remove(&id);
                match tx {
                    // The caller may have given up (dropped its future); that is fine.
                    Some(tx) => {
                        let _ = tx.send(Ok(result));
                    }
                    None if shared.dead().is_some() => return,
                    None => {
                        return shared.protocol_error(format!("answer to unknown id {id}"));
                    }
                }
            }
            Incoming::Notification { method, params } => {
                notification(&shared, &notes, &method, params)
            }
            Incoming::Request { id, method } => {
                return shared.protocol_error(format!(
                    "request from the driver (`{method}`, id {id}); drivers may only answer and notify"
                ));
            }
        }
    }
}

fn notification(
    shared: &Shared,
    notes: &mpsc::UnboundedSender<Notification>,
    method: &str,
    params: Value,
) {
    let note = match method {
        method::PROGRESS => serde_json::from_value(params).map(Notification::Progress),
        method::LOG => serde_json::from_value(params).map(|log: LogParams| {
            tracing::debug!(driver = %shared.program, level = %log.level, "driver log: {}", log.message);
            Notification::Log(log)
        }),
        _ => {
            tracing::debug!(driver = %shared.program, method, "ignoring unknown driver notification");
            return;
        }
    };
    match note {
        // Nobody listening is fine.
        Ok(note) => {
            let _ = notes.send(note);
        }
        Err(e) => {
            tracing::debug!(driver = %shared.program, method, "ignoring malformed driver notification: {e}")
        }
    }
}

async fn copy_stderr(shared: Arc<Shared>, mut stderr: ChildStderr) {
    let mut buf = vec![0u8; 8192];
    let mut generation = 0;
    let mut file: Option<tokio::fs::File> = None;
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(driver = %shared.program, "cannot read the driver's stderr: {e}");
                break;
            }
        };
        let chunk = &buf[..n];
        let switch_to = {
            let mut st = lock(&shared.stderr);
            st.tail.extend_from_slice(chunk);
            let excess = st.tail.len().saturating_sub(STDERR_TAIL_BYTES);
            st.tail.drain(..excess);
            (st.generation != generation).then(|| (st.generation, st.path.clone()))
        };
        if let Some((new_generation, path)) = switch_to {
            generation = new_generation;
            if let Some(mut old) = file.take() {
                let _ = old.flush().await;
            }
            if let Some(path) = path {
                file = open_append(&path)
                    .await
                    .inspect_err(|e| {
                        tracing::warn!(path = %path.display(), "cannot open the driver's stderr file: {e}");
                    })
                    .ok();
            }
        }
        if let Some(f) = file.as_mut() {
            let written = async {
                f.write_all(chunk).await?;
                f.flush().await
            };
            if let Err(e) = written.await {
                tracing::warn!(driver = %shared.program, "cannot write the driver's stderr file: {e}");
                file = None;
            }
        }
    }
}

async fn open_append(path: &Path) -> io::Result<tokio::fs::File> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(dir).await?;
    }
    tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .await
}

fn status_text(status: io::Result<ExitStatus>) -> String {
    match status {
        Ok(status) => status.to_string(),
        Err(e) => format!("unknown status: {e}"),
    }
}

/// Owns the child: kills it on demand (or when it closed its stdout but lingers), reaps it,
/// lets the readers drain, then marks the process dead and exited.
async fn supervise(
    shared: Arc<Shared>,
    mut child: Child,
    mut stdout_task: JoinHandle<()>,
    mut stderr_task: JoinHandle<()>,
    exited: watch::Sender<bool>,
) {
    let mut stdout_done = false;
    let mut kill_at: Option<Instant> = None;
    let status = loop {
        tokio::select! {
            biased;
            () = shared.kill.notified() => {
                let _ = child.start_kill();
                break status_text(child.wait().await);
            }
            status = child.wait() => break status_text(status),
            _ = &mut stdout_task, if !stdout_done => {
                stdout_done = true;
                kill_at = Some(Instant::now() + STDOUT_CLOSED_GRACE);
            }
            () = tokio::time::sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                tracing::warn!(driver = %shared.program, "driver closed its stdout but did not exit; killing it");
                let _ = child.start_kill();
                let status = status_text(child.wait().await);
                break format!("closed its stdout and was killed, {status}");
            }
        }
    };
    if !stdout_done
        && tokio::time::timeout(DRAIN_GRACE, &mut stdout_task)
            .await
            .is_err()
    {
        stdout_task.abort();
    }
    if tokio::time::timeout(DRAIN_GRACE, &mut stderr_task)
        .await
        .is_err()
    {
        stderr_task.abort();
    }
    tracing::debug!(driver = %shared.program, %status, "driver exited");
    // Reaped: no pid from here on, even for the calls failed just below.
    lock(&shared.state).exited = true;
    shared.fail(Dead::Exited(status));
    let _ = exited.send(true);
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use serde_json::json;

    use super::*;
    use crate::driver::protocol::{AgentStatus, CancelParams, EnvResult, HealthResult};

    const CALL: Duration = Duration::from_secs(5);

    /// The helpers every test driver script starts with.
    const PRELUDE: &str = r#"
import json, os, sys, time
def send(o):
    o["jsonrpc"] = "2.0"
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()
def raw(s):
    sys.stdout.write(s)
    sys.stdout.flush()
def err(s):
    sys.stderr.write(s)
    sys.stderr.flush()
def ok(msg, result):
    send({"id": msg["id"], "result": result})
def note(method, params):
    send({"method": method, "params": params})
def requests():
    while True:
        line = sys.stdin.readline()
        if not line:
            return
        yield json.loads(line)
"#;

    struct Driver {
        process: DriverProcess,
        _dir: tempfile::TempDir,
    }

    impl std::ops::Deref for Driver {
        type Target = DriverProcess;
        fn deref(&self) -> &DriverProcess {
            &self.process
        }
    }

    /// A python3 driver running `body` after [`PRELUDE`].
    async fn driver(body: &str) -> Driver {
        driver_with_env(body, Vec::new()).await
    }

    async fn driver_with_env(body: &str, env: Vec<(String, String)>) -> Driver {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("driver.py");
        std::fs::write(&script, format!("{PRELUDE}\n{body}\n")).unwrap();
        let spec = DriverCommand {
            program: "python3".into(),
            args: vec!["-u".into(), script.display().to_string()],
            cwd: Some(dir.path().to_path_buf()),
            env,
        };
        let process = DriverProcess::spawn(&spec).await.unwrap();
        Driver { process, _dir: dir }
    }

    /// An echo driver: answers every request with its params, `fail` with an error, and exits
    /// on `shutdown`.
    const ECHO: &str = r#"
for msg in requests():
    if "id" not in msg:
        note("progress", {"tag": "got " + msg["method"], "message": json.dumps(msg.get("params"))})
        continue
    if msg["method"] == "fail":
        send({"id": msg["id"], "error": {"code": -32000, "message": "provider said no",
              "data": {"failure_kind": "rate_limit", "reset_epoch": 5}}})
    elif msg["method"] == "shutdown":
        ok(msg, None)
        sys.exit(0)
    elif msg["method"] == "say":
        err(msg["params"]["text"])
        ok(msg, None)
    else:
        ok(msg, msg["params"])
"#;

    /// Polls `check` every 10 ms until it holds, at most 5 s (generous for loaded machines; it normally takes milliseconds).
    async fn eventually<F, Fut>(what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let until = Instant::now() + Duration::from_secs(5);
        while !check().await {
            assert!(Instant::now() < until, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_default()
    }

    #[tokio::test]
    async fn a_normal_call() {
        let d = driver(ECHO).await;
        assert!(d.is_alive());
        assert!(d.id().is_some());
        let got: EnvResult = d
            .call(
                "reset",
                &json!({"verified": true, "health_url": "http://g/h"}),
                CALL,
            )
            .await
            .unwrap();
        assert_eq!(
            got,
            EnvResult {
                verified: true,
                health_url: Some("http://g/h".into())
            }
        );
        let got: HealthResult = d
            .call("health", &HealthResult { ok: true }, CALL)
            .await
            .unwrap();
        assert!(got.ok);
        assert!(d.is_alive());
    }

    #[tokio::test]
    async fn out_of_order_responses_reach_their_calls() {
        let d = driver(
            r#"
gen = requests()
first, second = next(gen), next(gen)
ok(second, "second:" + second["params"]["name"])
ok(first, "first:" + first["params"]["name"])
for msg in gen:
    ok(msg, None)
"#,
        )
        .await;
        let (pa, pb) = (json!({"name": "a"}), json!({"name": "b"}));
        let (a, b) = tokio::join!(
            d.call::<_, String>("x", &pa, CALL),
            d.call::<_, String>("x", &pb, CALL),
        );
        let mut got = [a.unwrap(), b.unwrap()];
        got.sort();
        // Whichever went out first was answered last, and each got its own answer.
        assert!(
            got == ["first:a", "second:b"] || got == ["first:b", "second:a"],
            "{got:?}"
        );
        assert!(d.is_alive());
    }

    #[tokio::test]
    async fn a_json_rpc_error_leaves_the_driver_fine() {
        let d = driver(ECHO).await;
        let err = d
            .call::<_, Value>("fail", &json!({}), CALL)
            .await
            .unwrap_err();
        let DriverError::Rpc {
            method,
            code,
            message,
            failure_kind,
        } = &err
        else {
            panic!("expected Rpc, got {err:?}");
        };
        assert_eq!(
            (method.as_str(), *code, message.as_str()),
            ("fail", -32000, "provider said no")
        );
        assert_eq!(failure_kind.as_deref(), Some("rate_limit"));
        assert!(!err.is_crash());
        assert_eq!(err.failure_kind(), Some("rate_limit"));
        assert!(d.is_alive());
        assert_eq!(d.call::<_, u32>("echo", &7, CALL).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_malformed_line_is_a_protocol_error_and_later_calls_fail() {
        let d = driver(
            r#"
for msg in requests():
    raw("this is not json\n")
"#,
        )
        .await;
        let err = d
            .call::<_, Value>("boot", &json!({}), CALL)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, DriverError::Protocol(m) if m.contains("not json")),
            "{err}"
        );
        assert!(err.to_string().contains("\"this is not json\""), "{err}");
        assert!(err.is_crash());
        assert_eq!(err.failure_kind(), Some("driver_crash"));
        assert!(!d.is_alive());
        let later = d
            .call::<_, Value>("boot", &json!({}), CALL)
            .await
            .unwrap_err();
        assert!(matches!(later, DriverError::Protocol(_)), "{later}");
        eventually("the child to be reaped", || async { d.id().is_none() }).await;
    }

    #[tokio::test]
    async fn a_malformed_line_fails_every_pending_call() {
        let d = driver(
            r#"
gen = requests()
next(gen); next(gen)
raw('{"jsonrpc": "1.0", "id": 1, "result": 1}\n')
time.sleep(30)
"#,
        )
        .await;
        let params = json!({});
        let (a, b) = tokio::join!(
            d.call::<_, Value>("a", &params, CALL),
            d.call::<_, Value>("b", &params, CALL),
        );
        for err in [a.unwrap_err(), b.unwrap_err()] {
            assert!(
                matches!(&err, DriverError::Protocol(m) if m.contains("2.0")),
                "{err}"
            );
        }
        d.wait().await;
        assert_eq!(d.id(), None);
    }

    #[tokio::test]
    async fn an_oversized_line_is_a_protocol_error() {
        let d = driver(&format!(
            r#"
for msg in requests():
    raw('{{"jsonrpc": "2.0", "id": %d, "result": "' % msg["id"] + "x" * {} + '"}}\n')
"#,
            MAX_LINE_BYTES + 10
        ))
        .await;
        let err = d
            .call::<_, Value>("boot", &json!({}), CALL)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, DriverError::Protocol(m) if m.contains("too long")),
            "{err}"
        );
        assert!(!d.is_alive());
        d.wait().await;
    }

    #[tokio::test]
    async fn an_unknown_id_is_a_protocol_error() {
        let d = driver(
            r#"
for msg in requests():
    send({"id": msg["id"] + 100, "result": None})
"#,
        )
        .await;
        let err = d
            .call::<_, Value>("boot", &json!({}), CALL)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, DriverError::Protocol(m) if m.contains("unknown id")),
            "{err}"
        );
        assert!(!d.is_alive());
    }

    #[tokio::test]
    async fn a_request_from_the_driver_is_a_protocol_error() {
        let d = driver(
            r#"
for msg in requests():
    send({"id": 1, "method": "please"})
"#,
        )
        .await;
        let err = d
            .call::<_, Value>("boot", &json!({}), CALL)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, DriverError::Protocol(m) if m.contains("`please`")),
            "{err}"
        );
        assert!(!d.is_alive());
    }

    #[tokio::test]
    async fn a_driver_that_exits_fails_with_its_stderr_tail() {
        let d = driver(
            r#"
for msg in requests():
    err("x" * 10000 + "\nTraceback: boom\n")
    sys.exit(3)
"#,
        )
        .await;
        let err = d
            .call::<_, Value>("boot", &json!({}), CALL)
            .await
            .unwrap_err();
        let DriverError::Exited {
            status,
            stderr_tail,
        } = &err
        else {
            panic!("expected Exited, got {err:?}");
        };
        assert!(status.contains('3'), "{status}");
        assert!(stderr_tail.ends_with("Traceback: boom"), "{stderr_tail}");
        assert!(stderr_tail.len() <= STDERR_TAIL_BYTES);
        assert!(err.is_crash());
        assert!(!d.is_alive());
        d.wait().await;
        assert_eq!(d.id(), None);
        let later = d
            .call::<_, Value>("boot", &json!({}), CALL)
            .await
            .unwrap_err();
        assert!(matches!(later, DriverError::Exited { .. }), "{later}");
    }

    #[tokio::test]
    async fn a_hang_past_the_deadline_kills_the_driver() {
        let d = driver(
            r#"
for msg in requests():
    time.sleep(60)
"#,
        )
        .await;
        let start = Instant::now();
        let deadline = Duration::from_millis(300);
        let err = d
            .call::<_, Value>("run_agent", &json!({}), deadline)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, DriverError::Deadline { method, after } if method == "run_agent" && *after == deadline),
            "{err:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(4));
        assert!(err.is_crash());
        assert!(!d.is_alive());
        assert_eq!(d.id(), None, "the child is reaped when the call returns");
        let later = d
            .call::<_, Value>("health", &json!({}), CALL)
            .await
            .unwrap_err();
        assert!(
            matches!(&later, DriverError::Exited { status, .. } if status.contains("deadline")),
            "{later}"
        );
    }

    #[tokio::test]
    async fn a_driver_that_closes_stdout_but_lingers_is_killed() {
        let d = driver(
            r#"
for msg in requests():
    err("closing stdout\n")
    os.close(1)
    time.sleep(60)
"#,
        )
        .await;
        let start = Instant::now();
        let err = d
            .call::<_, Value>("boot", &json!({}), CALL)
            .await
            .unwrap_err();
        let DriverError::Exited {
            status,
            stderr_tail,
        } = &err
        else {
            panic!("expected Exited, got {err:?}");
        };
        assert!(
            status.starts_with("closed its stdout and was killed"),
            "{status}"
        );
        assert_eq!(stderr_tail, "closing stdout");
        assert!(start.elapsed() < Duration::from_secs(4));
        assert!(!d.is_alive());
        assert_eq!(d.id(), None);
    }

    #[tokio::test]
    async fn progress_and_log_notifications_are_delivered() {
        let d = driver(
            r#"
for msg in requests():
    note("progress", {"tag": "t1", "turns": 1})
    note("log", {"level": "info", "message": "thinking"})
    note("progress", {"tag": "t1", "turns": 2, "message": "clicked"})
    ok(msg, {"status": "completed"})
"#,
        )
        .await;
        let mut notes = d.take_notifications().unwrap();
        assert!(d.take_notifications().is_none(), "only once");
        let got: crate::driver::protocol::AgentResult =
            d.call("run_agent", &json!({}), CALL).await.unwrap();
        assert_eq!(got.status, AgentStatus::Completed);
        // The notifications came before the answer, so they are already queued.
        assert_eq!(
            notes.try_recv().unwrap(),
            Notification::Progress(ProgressParams {
                tag: "t1".into(),
                turns: Some(1),
                message: None
            })
        );
        assert_eq!(
            notes.try_recv().unwrap(),
            Notification::Log(LogParams {
                level: "info".into(),
                message: "thinking".into()
            })
        );
        assert_eq!(
            notes.try_recv().unwrap(),
            Notification::Progress(ProgressParams {
                tag: "t1".into(),
                turns: Some(2),
                message: Some("clicked".into())
            })
        );
        assert!(notes.try_recv().is_err());
    }

    #[tokio::test]
    async fn unknown_and_malformed_notifications_are_ignored() {
        let d = driver(
            r#"
for msg in requests():
    note("telemetry", {"cpu": 3})
    note("log", {"level": "info"})
    send({"method": "heartbeat"})
    note("progress", {"tag": "t"})
    ok(msg, 1)
"#,
        )
        .await;
        let mut notes = d.take_notifications().unwrap();
        assert_eq!(d.call::<_, u32>("x", &json!({}), CALL).await.unwrap(), 1);
        assert!(d.is_alive());
        assert_eq!(
            notes.try_recv().unwrap(),
            Notification::Progress(ProgressParams {
                tag: "t".into(),
                turns: None,
                message: None
            })
        );
        assert!(notes.try_recv().is_err());
    }

    #[tokio::test]
    async fn notify_reaches_the_driver() {
        let d = driver(ECHO).await;
        let mut notes = d.take_notifications().unwrap();
        d.notify(method::CANCEL, &CancelParams { tag: "t-9".into() });
        let got = tokio::time::timeout(CALL, notes.recv())
            .await
            .unwrap()
            .unwrap();
        let Notification::Progress(p) = got else {
            panic!("expected progress, got {got:?}")
        };
        assert_eq!(p.tag, "got cancel");
        assert_eq!(p.message.as_deref(), Some(r#"{"tag": "t-9"}"#));
    }

    #[tokio::test]
    async fn stderr_goes_to_the_file_set_last() {
        let d = driver(ECHO).await;
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("a1").join("driver.stderr");
        let second = dir.path().join("a2").join("driver.stderr");

        d.call::<_, Value>("say", &json!({"text": "before any file\n"}), CALL)
            .await
            .unwrap();
        eventually("the tail", || async {
            d.stderr_tail().contains("before any file")
        })
        .await;

        d.set_stderr_file(Some(first.clone()));
        d.call::<_, Value>("say", &json!({"text": "one\n"}), CALL)
            .await
            .unwrap();
        eventually("the first file", || async { read(&first).contains("one") }).await;

        d.set_stderr_file(Some(second.clone()));
        d.call::<_, Value>("say", &json!({"text": "two\n"}), CALL)
            .await
            .unwrap();
        eventually("the second file", || async {
            read(&second).contains("two")
        })
        .await;

        d.set_stderr_file(None);
        d.call::<_, Value>("say", &json!({"text": "three\n"}), CALL)
            .await
            .unwrap();
        eventually("the tail", || async { d.stderr_tail().ends_with("three") }).await;

        assert_eq!(read(&first), "one\n");
        assert_eq!(read(&second), "two\n");
        assert_eq!(d.stderr_tail(), "before any file\none\ntwo\nthree");
    }

    #[tokio::test]
    async fn a_result_that_does_not_deserialize_is_bad_result() {
        let d = driver(ECHO).await;
        let err = d
            .call::<_, HealthResult>("health", &json!("nope"), CALL)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, DriverError::BadResult { method, .. } if method == "health"),
            "{err}"
        );
        assert!(err.is_crash());
    }

    #[tokio::test]
    async fn shutdown_lets_the_driver_exit() {
        let d = driver(ECHO).await;
        let start = Instant::now();
        d.process.shutdown(Duration::from_secs(20)).await;
        assert!(start.elapsed() < Duration::from_secs(4));
    }

    #[tokio::test]
    async fn shutdown_kills_a_driver_that_ignores_it() {
        let d = driver(
            r#"
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for msg in requests():
    pass
time.sleep(60)
"#,
        )
        .await;
        let start = Instant::now();
        d.process.shutdown(Duration::from_millis(300)).await;
        assert!(start.elapsed() < Duration::from_secs(4));
    }

    #[tokio::test]
    async fn kill_fails_pending_and_later_calls() {
        let d = Arc::new(
            driver(
                r#"
for msg in requests():
    time.sleep(60)
"#,
            )
            .await,
        );
        let pending = tokio::spawn({
            let d = d.clone();
            async move { d.call::<_, Value>("run_agent", &json!({}), CALL).await }
        });
        eventually("the call to be pending", || async {
            !lock(&d.shared.state).pending.is_empty()
        })
        .await;
        d.kill().await;
        assert!(!d.is_alive());
        assert_eq!(d.id(), None);
        let err = pending.await.unwrap().unwrap_err();
        assert!(
            matches!(&err, DriverError::Exited { status, .. } if status == "killed by the lane"),
            "{err}"
        );
        let later = d
            .call::<_, Value>("health", &json!({}), CALL)
            .await
            .unwrap_err();
        assert!(matches!(later, DriverError::Exited { .. }), "{later}");
        d.notify(method::CANCEL, &CancelParams { tag: "t".into() }); // dropped, no panic
    }

    #[tokio::test]
    async fn env_is_passed_and_debug_hides_its_values() {
        let d = driver_with_env(
            r#"
for msg in requests():
    ok(msg, os.environ.get("LANES_TEST_SECRET"))
"#,
            vec![("LANES_TEST_SECRET".into(), "hunter2".into())],
        )
        .await;
        assert_eq!(
            d.call::<_, String>("x", &json!({}), CALL).await.unwrap(),
            "hunter2"
        );

        let spec = DriverCommand {
            program: "drv".into(),
            args: vec!["--fast".into()],
            cwd: None,
            env: vec![("API_KEY".into(), "sk-very-secret".into())],
        };
        let debug = format!("{spec:?}");
        assert!(
            debug.contains("API_KEY") && debug.contains("--fast"),
            "{debug}"
        );
        assert!(!debug.contains("sk-very-secret"), "{debug}");
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_error() {
        let spec = DriverCommand {
            program: "./no-such-driver".into(),
            ..DriverCommand::default()
        };
        let err = DriverProcess::spawn(&spec).await.unwrap_err();
        assert!(
            matches!(&err, DriverError::Spawn { program, .. } if program == "./no-such-driver"),
            "{err}"
        );
        assert!(!err.is_crash());
        assert_eq!(err.failure_kind(), None);
        let err = DriverProcess::spawn(&DriverCommand::default())
            .await
            .unwrap_err();
        assert!(matches!(err, DriverError::Spawn { .. }), "{err}");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_relative_program_resolves_against_cwd() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("bin").join("drv");
        std::fs::create_dir_all(script.parent().unwrap()).unwrap();
        std::fs::write(
            &script,
            format!("#!/usr/bin/env python3\n{PRELUDE}\n{ECHO}\n"),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let spec = DriverCommand {
            program: "./bin/drv".into(),
            cwd: Some(dir.path().to_path_buf()),
            ..DriverCommand::default()
        };
        let d = DriverProcess::spawn(&spec).await.unwrap();
        assert_eq!(d.call::<_, String>("x", &"hi", CALL).await.unwrap(), "hi");
        d.shutdown(Duration::from_secs(2)).await;
    }

    #[test]
    fn resolves_programs() {
        let here = std::env::current_dir().unwrap();
        let abs = if cfg!(windows) { "C:\\drv" } else { "/opt/drv" };
        assert_eq!(resolve(abs, None).unwrap(), (PathBuf::from(abs), None));
        assert_eq!(
            resolve("python3", None).unwrap(),
            (PathBuf::from("python3"), None)
        );
        assert_eq!(resolve("./drv", None).unwrap(), (here.join("./drv"), None));
        assert_eq!(
            resolve("bin/drv", Some(Path::new("/srv/lane"))).unwrap(),
            (
                PathBuf::from("/srv/lane/bin/drv"),
                Some(PathBuf::from("/srv/lane"))
            )
        );
        assert_eq!(
            resolve("python3", Some(Path::new("work"))).unwrap(),
            (PathBuf::from("python3"), Some(here.join("work")))
        );
        assert_eq!(
            resolve("./drv", Some(Path::new("work"))).unwrap(),
            (here.join("work").join("./drv"), Some(here.join("work")))
        );
        assert!(resolve("", None).is_err());
    }

    #[test]
    fn errors_classify() {
        let rpc = DriverError::Rpc {
            method: "boot".into(),
            code: -32000,
            message: "m".into(),
            failure_kind: None,
        };
        assert!(!rpc.is_crash());
        assert_eq!(rpc.failure_kind(), None);
        let bad = DriverError::BadParams {
            method: "boot".into(),
            reason: "r".into(),
        };
        assert!(!bad.is_crash());
        let exited = DriverError::Exited {
            status: "exit status: 1".into(),
            stderr_tail: String::new(),
        };
        assert_eq!(exited.to_string(), "driver exited (exit status: 1)");
        let exited = DriverError::Exited {
            status: "exit status: 1".into(),
            stderr_tail: "boom".into(),
        };
        assert_eq!(
            exited.to_string(),
            "driver exited (exit status: 1); stderr tail: boom"
        );
        let deadline = DriverError::Deadline {
            method: "reset".into(),
            after: Duration::from_secs(3),
        };
        assert!(deadline.is_crash());
        assert_eq!(deadline.failure_kind(), Some("driver_crash"));
        assert_eq!(
            deadline.to_string(),
            "driver call `reset` passed its deadline of 3s; the driver was killed"
        );
    }

    #[tokio::test]
    async fn read_line_bounds_memory() {
        let input: &[u8] = b"short\n\nlast";
        let mut reader = BufReader::new(input);
        let mut buf = Vec::new();
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Line::Complete
        ));
        assert_eq!(buf, b"short");
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Line::Complete
        ));
        assert_eq!(buf, b"");
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Line::Complete
        ));
        assert_eq!(buf, b"last");
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Line::Eof
        ));

        let input: &[u8] = b"0123456789\r\n0123456789a\n";
        let mut reader = BufReader::with_capacity(4, input);
        assert!(matches!(
            read_line(&mut reader, &mut buf, 10).await.unwrap(),
            Line::Complete
        ));
        assert_eq!(buf, b"0123456789\r");
        let got = read_line(&mut reader, &mut buf, 10).await.unwrap();
        assert!(matches!(got, Line::TooLong));
        assert!(buf.len() <= 12, "stops early");
    }
}
