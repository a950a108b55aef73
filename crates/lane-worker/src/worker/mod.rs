//! The worker process: a [`supervisor`] actor that owns the coordinator session and the
//! outbox, and one [`lane`] actor per VM slot that runs attempts through the pure lifecycle.

pub(crate) mod lane;
pub mod link;
pub(crate) mod session;
pub(crate) mod supervisor;
#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::time::Duration;

use lanes_common::ids::HostName;

/// This machine's host name (`/etc/hostname`), or `localhost` when it has none that is a
/// host name.
pub fn machine_host() -> HostName {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .and_then(|s| HostName::new(s.trim()).ok())
        .unwrap_or_else(|| HostName::new("localhost").expect("a host name"))
}

/// How a worker runs.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The coordinator replicas, e.g. `http://127.0.0.1:7700`. The worker uses one at a time
    /// and moves to the next when its session fails, stops answering or says GoAway.
    pub coordinators: Vec<String>,
    /// The lane role's bearer token. Never logged.
    pub token: Option<String>,
    /// The CA and client certificate for `https://` coordinators.
    pub tls: lanes_dial::ClientTls,
    pub worker_id: String,
    pub host: HostName,
    pub lanes: u32,
    pub artifacts: PathBuf,
    /// The outbox directory (default `<artifacts>/.outbox`).
    pub outbox: PathBuf,
    /// Replaces every campaign's driver on this host (`--driver`).
    pub driver_override: Option<Vec<String>>,
    /// What this worker runs besides the sim: its named drivers, whether campaign commands
    /// may run, the env names they may receive, and the campaigns it is limited to.
    pub drivers: crate::drivers::Drivers,
    /// The command that runs the built-in sim driver (normally `lanes driver sim`).
    pub sim_command: Vec<String>,
    /// Below this much free disk under `artifacts`, no work credits are sent.
    pub disk_floor_gb: Option<f64>,
    /// The arms this worker serves; empty means all.
    pub arms: Vec<String>,
    /// How long in-flight attempts may run after SIGTERM before they are cancelled.
    pub shutdown_grace: Duration,
    /// Where `lanes worker drain` reaches this worker ([`crate::control`]); none when `None`.
    pub control_socket: Option<crate::control::ControlSocket>,
    /// How long an agent may take to stop after `cancel` (at its timeout) before the driver
    /// is declared hung, killed and restarted.
    pub cancel_grace: Duration,
    /// How often the guest's health URL is polled during the agent phase.
    pub guest_poll: Duration,
    /// How long the guest may stay unreachable before the attempt is `guest_lost`.
    pub guest_grace: Duration,
    /// Task folders on this host by digest (`sha256:…`), for tasks that are folders
    /// (`[tasks] harbor`): `lanes run` gives its campaign's. Others are fetched from the
    /// coordinator and cached under the outbox. The lane names the folder to the driver.
    pub task_folders: std::collections::BTreeMap<String, std::path::PathBuf>,
    /// The HTTP client's trust and bounds, for task APIs and guest health URLs.
    pub http: crate::http::HttpOptions,
    /// Count into these metrics (the caller serves them); off when `None`.
    pub metrics: Option<crate::metrics::WorkerMetrics>,
    /// Where published attempts' folders are uploaded before their outcome is sent
    /// (`--artifact-store`); they stay on this host only when `None`.
    pub artifact_store: Option<lanes_artifacts::ArtifactStore>,
}

/// Why the worker could not run.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("cannot start the worker: {0}")]
    Start(String),
}

/// Runs the worker until `shutdown` resolves, then stops asking for work, lets in-flight
/// attempts finish up to the grace period, cancels the rest (the store records `cancelled`),
/// flushes the outbox and shuts the drivers down.
pub async fn run(
    config: WorkerConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), WorkerError> {
    let link = link::GrpcLink::new(
        config.coordinators.clone(),
        config.token.clone(),
        config.tls.clone(),
    );
    run_with_link(config, std::sync::Arc::new(link), shutdown).await
}

/// Kills the drivers (and everything in their process groups) that an earlier process of
/// this worker left running when it was killed, before this one claims anything.
async fn sweep_orphans(config: &WorkerConfig) {
    use crate::driver::process::{RECORDS_DIR, sweep_orphans};
    let records = config.outbox.join(RECORDS_DIR);
    match tokio::task::spawn_blocking(move || sweep_orphans(&records)).await {
        Ok(Ok(0)) => {}
        Ok(Ok(killed)) => {
            tracing::warn!(
                killed,
                "killed drivers left running by an earlier worker process"
            )
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot sweep the drivers of an earlier worker process")
        }
        Err(e) => tracing::warn!(error = %e, "the driver sweep failed"),
    }
}

/// [`run`], with sessions opened through `link` instead of gRPC to `config.coordinators`.
pub async fn run_with_link(
    config: WorkerConfig,
    link: std::sync::Arc<dyn link::CoordinatorLink>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), WorkerError> {
    use ractor::Actor;
    let http = crate::http::HttpClient::new(&config.http)
        .map_err(|e| WorkerError::Start(format!("http client: {e}")))?;
    let config = std::sync::Arc::new(config);
    sweep_orphans(&config).await;
    let folders = std::sync::Arc::new(crate::task_folders::TaskFolders::fetching(
        config.task_folders.clone(),
        config.outbox.join(crate::task_folders::CACHE_DIR),
        link.clone(),
    ));
    let (sup, handle) = Actor::spawn(
        Some(format!("worker:{}", config.worker_id)),
        supervisor::Supervisor {
            config: config.clone(),
            http,
            leases: Default::default(),
            folders,
        },
        (),
    )
    .await
    .map_err(|e| WorkerError::Start(e.to_string()))?;
    let control = match &config.control_socket {
        Some(socket) => match crate::control::bind(&socket.path).await {
            Ok(listener) => Some(tokio::spawn(crate::control::serve(listener, sup.clone()))),
            Err(e) if socket.required || matches!(e, crate::control::ControlError::InUse(_)) => {
                sup.stop(None);
                let _ = handle.await;
                return Err(WorkerError::Start(e.to_string()));
            }
            Err(e) => {
                tracing::warn!(error = %e, "no control socket: `lanes worker drain` cannot reach this worker (give --control-socket)");
                None
            }
        },
        None => None,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let session = tokio::spawn(session::run(config.clone(), link, sup.clone(), stop_rx));
    shutdown.await;
    tracing::info!("shutting down: no new work; in-flight attempts may finish");
    let _ = sup.cast(supervisor::SupMsg::Drain);
    let pending =
        || async { ractor::call_t!(sup, supervisor::SupMsg::Pending, 2_000).unwrap_or((0, 0)) };
    let grace = tokio::time::Instant::now() + config.shutdown_grace;
    while pending().await.0 > 0 && tokio::time::Instant::now() < grace {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if pending().await.0 > 0 {
        tracing::warn!("grace period over: cancelling in-flight attempts");
        let _ = sup.cast(supervisor::SupMsg::CancelAll);
    }
    let flush = tokio::time::Instant::now() + Duration::from_secs(10);
    while pending().await != (0, 0) && tokio::time::Instant::now() < flush {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (left, unacked) = pending().await;
    if left > 0 || unacked > 0 {
        tracing::warn!(
            in_flight = left,
            unacknowledged = unacked,
            "stopping with work outstanding; the outbox is replayed at the next start"
        );
    }
    let _ = stop_tx.send(true);
    let _ = session.await;
    if let Some(control) = control {
        control.abort();
        if let Some(socket) = &config.control_socket {
            let _ = std::fs::remove_file(&socket.path);
        }
    }
    sup.stop(None);
    let _ = handle.await;
    Ok(())
}
