//! The supervisor task: it owns the child and its process group, kills the group on demand
//! (or when the child closed its stdout but lingers), reaps the child, kills whatever it left
//! in its group, lets the readers drain, then marks the process dead.

use std::io;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::Child;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::group::Group;
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

/// Owns the child: kills its group on demand (or when it closed its stdout but lingers), reaps
/// it, kills what is left of its group, lets the readers drain, then marks the process dead and
/// exited. Dropping the task (a runtime shutting down) still kills the group.
pub(super) async fn supervise(
    shared: Arc<Shared>,
    mut child: Child,
    group: Group,
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
                group.kill();
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
                group.kill();
                let _ = child.start_kill();
                let status = status_text(child.wait().await);
                break format!("closed its stdout and was killed, {status}");
            }
        }
    };
    // The driver is gone: nothing it started may outlive it (this also closes the pipes that
    // a grandchild inherited, so the readers finish).
    group.kill();
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
    // Reaped, group killed, record removed: no pid from here on, even for the calls failed
    // just below.
    drop(group);
    lock(&shared.state).exited = true;
    shared.fail(Dead::Exited(status));
    let _ = exited.send(true);
}
