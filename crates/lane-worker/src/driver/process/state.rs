//! The state a driver's handle shares with its tasks: the calls awaiting an answer (by
//! request id), whether the process is dead and why, the stderr file and tail, and the
//! secrets scrubbed from everything the driver says.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::{Notify, oneshot};

use super::DriverError;
use super::stderr::STDERR_FILE_MAX_BYTES;
use crate::driver::codec::RpcError;
use crate::secrets::Secrets;

/// What a pending call receives: the driver's answer, or why there will be none.
pub(super) type Reply = Result<Result<Value, RpcError>, DriverError>;

/// State shared by the handle and its tasks.
pub(super) struct Shared {
    pub(super) program: String,
    pub(super) state: Mutex<State>,
    pub(super) stderr: Mutex<StderrState>,
    /// Its env values, plus the current attempt's secrets: masked in its stderr, its
    /// notifications and the error messages quoting it.
    pub(super) secrets: Mutex<Secrets>,
    /// The values of its explicit env, secrets for its whole life.
    pub(super) env_secrets: Secrets,
    /// Asks the supervisor to kill the child.
    pub(super) kill: Notify,
}

/// The calls awaiting an answer, and the life of the process.
#[derive(Default)]
pub(super) struct State {
    pub(super) pending: HashMap<u64, oneshot::Sender<Reply>>,
    pub(super) dead: Option<Dead>,
    pub(super) exited: bool,
}

/// Why the process can take no more calls.
#[derive(Debug, Clone)]
pub(super) enum Dead {
    Protocol(String),
    /// Exited or killed; the status or the reason it was killed.
    Exited(String),
}

/// Where the child's stderr goes, and its last bytes (scrubbed).
pub(super) struct StderrState {
    pub(super) path: Option<PathBuf>,
    /// Bumped by every `set_stderr_file`.
    pub(super) generation: u64,
    pub(super) tail: Vec<u8>,
    /// A file reaching this size is rotated to `<file>.1`.
    pub(super) max_file_bytes: u64,
}

impl Default for StderrState {
    fn default() -> Self {
        Self {
            path: None,
            generation: 0,
            tail: Vec::new(),
            max_file_bytes: STDERR_FILE_MAX_BYTES,
        }
    }
}

/// Locks `m`; a panic elsewhere while it was held leaves nothing half-done here.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    pub(super) fn stderr_tail(&self) -> String {
        let st = lock(&self.stderr);
        String::from_utf8_lossy(&st.tail).trim_end().to_owned()
    }

    pub(super) fn secrets(&self) -> Secrets {
        lock(&self.secrets).clone()
    }

    /// `text` with the driver's secrets masked.
    pub(super) fn scrubbed(&self, text: &str) -> String {
        lock(&self.secrets).scrubbed(text)
    }

    pub(super) fn dead(&self) -> Option<Dead> {
        lock(&self.state).dead.clone()
    }

    /// Marks the process dead (the first reason wins) and fails every pending call.
    pub(super) fn fail(&self, dead: Dead) {
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
    pub(super) fn protocol_error(&self, message: String) {
        // The message may quote the driver's line.
        let message = self.scrubbed(&message);
        tracing::warn!(driver = %self.program, "driver protocol error: {message}; killing it");
        self.fail(Dead::Protocol(message));
        self.kill.notify_one();
    }
}

impl Dead {
    pub(super) fn error(&self, stderr_tail: &str) -> DriverError {
        match self {
            Self::Protocol(message) => DriverError::Protocol(message.clone()),
            Self::Exited(status) => DriverError::Exited {
                status: status.clone(),
                stderr_tail: stderr_tail.to_owned(),
            },
        }
    }
}
