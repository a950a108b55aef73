//! The supervisor task: it owns the child, kills it on demand (or when it closed its stdout
//! but lingers), reaps it, lets the readers drain, then marks the process dead.

use std::io;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::Child;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::state::{Dead, Shared, lock};

/// How long the readers may keep draining the pipes after the child exited (a grandchild that
/// inherited them may hold them open).
const DRAIN_GRACE: Duration = Duration::from_millis(500);
/// How long a child that closed its stdout may take to exit before it is killed.
const STDOUT_CLOSED_GRACE: Duration = Duration::from_millis(500);

fn status_text(status: io::Result<ExitStatus>) -> String {
    match status {
        Ok(status) => status.to_string(),
        Err(e) => format!("unknown status: {e}"),
    }
}

/// Owns the child: kills it on demand (or when it closed its stdout but lingers), reaps it,
/// lets the readers drain, then marks the process dead and exited.
pub(super) async fn supervise(
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
