//! The driver child process: one long-lived child per lane, speaking the driver protocol over
//! its stdin/stdout (see [`super::codec`]).
//!
//! Four tasks serve one [`DriverProcess`]:
//! - a **writer** sends request and notification lines to the child's stdin, in order;
//! - a **reader** decodes the child's stdout: responses go to the pending call with their id
//!   (so they may arrive in any order), `progress` and `log` notifications go to the channel of
//!   [`DriverProcess::take_notifications`], and anything else that is not allowed (a malformed
//!   or oversized line, an unknown id, a request from the driver) kills the child;
//! - a **stderr copier** appends the child's stderr, scrubbed of its secrets, to the file of
//!   [`DriverProcess::set_stderr_file`] and keeps its last [`STDERR_TAIL_BYTES`] in memory;
//!   [`DriverProcess::flush_stderr`] waits until what the pipe holds is copied;
//! - a **supervisor** owns the child, kills it on demand and reaps it.
//!
//! The child starts from a clean environment ([`env`]) and leads its own process group: every
//! kill, and the child's own exit, takes the whole group, so nothing it started outlives it
//! ([`group`], which also records running drivers for [`sweep_orphans`]).
//!
//! Once the child has exited, been killed or broken the protocol, the process is *dead*: every
//! pending and future call fails at once, and [`DriverProcess::is_alive`] is false. A call that
//! passes its deadline kills the child, so a hung driver never blocks the lane.

mod command;
pub mod env;
mod error;
mod group;
#[cfg(test)]
mod isolation_tests;
mod state;
mod stderr;
mod supervise;
#[cfg(test)]
mod tests;
mod wire;

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::process::Command;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::time::Instant;

pub use command::{DriverCommand, RunAs};
pub use error::DriverError;
pub use group::{RECORDS_DIR, sweep_orphans};
pub use stderr::{STDERR_FILE_MAX_BYTES, STDERR_TAIL_BYTES};
pub use wire::Notification;

use super::codec;
use super::protocol::{MAX_LINE_BYTES, method};
use crate::secrets::Secrets;
use command::resolve;
use group::Group;
use state::{Dead, Shared, State, StderrState, lock};
use stderr::{Flush, copy_stderr};
use supervise::supervise;
use wire::{read_stdout, write_stdin};

/// How long `kill` and a passed deadline wait for the child to be reaped.
const REAP_WAIT: Duration = Duration::from_secs(2);

/// How long [`DriverProcess::flush_stderr`] waits for the copier (which only waits on its
/// own file writes) before the attempt goes on without it.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// A running driver child. Dropping it kills the child.
pub struct DriverProcess {
    shared: Arc<Shared>,
    writer: Mutex<Option<mpsc::UnboundedSender<String>>>,
    flushes: mpsc::UnboundedSender<Flush>,
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

impl DriverProcess {
    /// Starts the driver child. It does not send `initialize`; the lane does.
    pub async fn spawn(spec: &DriverCommand) -> Result<DriverProcess, DriverError> {
        let spawn_err = |source| DriverError::Spawn {
            program: spec.program.clone(),
            source,
        };
        let (program, cwd) = resolve(&spec.program, spec.cwd.as_deref()).map_err(spawn_err)?;

        let (env, refused) = env::driver_env(&spec.env, std::env::vars_os());
        if !refused.is_empty() {
            tracing::warn!(program = %spec.program, refused = ?refused, "worker credentials are never passed to a driver");
        }
        let mut cmd = Command::new(&program);
        cmd.args(&spec.args)
            .env_clear()
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so one signal reaches whatever it starts.
            .process_group(0)
            .kill_on_drop(true);
        if let Some(cwd) = &cwd {
            cmd.current_dir(cwd);
        }
        // Switching account also drops the worker's supplementary groups (std clears them
        // when a uid is set and the worker may change groups, i.e. runs as root).
        if let Some(user) = spec.user {
            cmd.uid(user.uid).gid(user.gid);
        }
        let mut child = cmd.spawn().map_err(spawn_err)?;
        let pid = child.id();
        let group = Group::start(pid, spec.record_dir.as_deref());
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

        let env_secrets = Secrets::new(spec.env.iter().map(|(_, value)| value.clone()));
        let shared = Arc::new(Shared {
            program: spec.program.clone(),
            state: Mutex::new(State::default()),
            stderr: Mutex::new(StderrState::default()),
            secrets: Mutex::new(env_secrets.clone()),
            env_secrets,
            kill: Notify::new(),
        });
        let (line_tx, line_rx) = mpsc::unbounded_channel();
        let (note_tx, note_rx) = mpsc::unbounded_channel();
        let (exited_tx, exited_rx) = watch::channel(false);
        let (flushes, flush_rx) = mpsc::unbounded_channel();

        tokio::spawn(write_stdin(stdin, line_rx));
        let stdout_task = tokio::spawn(read_stdout(shared.clone(), stdout, note_tx));
        let stderr_task = tokio::spawn(copy_stderr(shared.clone(), stderr, flush_rx));
        tokio::spawn(supervise(
            shared.clone(),
            child,
            group,
            stdout_task,
            stderr_task,
            exited_tx,
        ));

        Ok(DriverProcess {
            shared,
            writer: Mutex::new(Some(line_tx)),
            flushes,
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
                    // A parse error may quote the driver's value.
                    reason: self.shared.scrubbed(&e.to_string()),
                })
            }
            Ok(Ok(Ok(Err(rpc)))) => Err(DriverError::Rpc {
                method: method.to_owned(),
                code: rpc.code,
                message: self.shared.scrubbed(&rpc.message),
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
    /// directories, when missing), or to no file for `None`; from now on `secrets` (an
    /// attempt's) are masked, with the driver's env values, in its stderr, its notifications
    /// and the error messages quoting it.
    pub fn set_stderr_file(&self, path: Option<PathBuf>, secrets: &Secrets) {
        *lock(&self.shared.secrets) = self.shared.env_secrets.union(secrets);
        let mut st = lock(&self.shared.stderr);
        st.path = path;
        st.generation += 1;
    }

    /// Waits until what the child has written to stderr so far is in the file (and the tail).
    /// The lane calls it once an attempt's last answer is in, before it reads the attempt's
    /// folder: the answer on stdout can overtake the stderr written before it.
    pub async fn flush_stderr(&self) {
        let (done, copied) = oneshot::channel();
        if self.flushes.send(done).is_err() {
            return; // the copier has finished: the pipe closed and all of it is copied
        }
        if tokio::time::timeout(FLUSH_WAIT, copied).await.is_err() {
            tracing::warn!(driver = %self.shared.program, "the driver's stderr was not copied in time");
        }
    }

    /// The last [`STDERR_TAIL_BYTES`] of the child's stderr, scrubbed (lossy UTF-8, trailing
    /// whitespace trimmed).
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
