//! The standard gRPC health service (`grpc.health.v1`), on the API port and, with
//! `--health-listen`, alone on a plaintext port of its own: kubelet's gRPC probes speak
//! neither TLS nor bearer auth.
//!
//! What each service name reports:
//! - `""` and the two API services: SERVING while the store answers and the replica is not
//!   shutting down. A readiness probe on it takes a replica that cannot commit anything out of
//!   its Service, and takes a draining one out before its sessions are sent away.
//! - [`LIVENESS`]: SERVING while the process serves. A liveness probe must not follow the
//!   store, or a Redis outage would restart every replica at once.

use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use lanes_common::proto::campaign_service_server::CampaignServiceServer;
use lanes_common::proto::lane_service_server::LaneServiceServer;

use crate::service::campaign::CampaignSvc;
use crate::service::lane::LaneSvc;

/// The health service name a liveness probe asks about.
pub const LIVENESS: &str = "liveness";

/// The reporter and the service to mount, with [`LIVENESS`] and the readiness names set.
pub(crate) async fn service() -> (
    HealthReporter,
    tonic_health::pb::health_server::HealthServer<impl tonic_health::pb::health_server::Health>,
) {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(LIVENESS, ServingStatus::Serving)
        .await;
    set_ready(&reporter, true).await;
    (reporter, service)
}

async fn set_ready(reporter: &HealthReporter, ready: bool) {
    let status = if ready {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    reporter.set_service_status("", status).await;
    if ready {
        reporter
            .set_serving::<CampaignServiceServer<CampaignSvc>>()
            .await;
        reporter.set_serving::<LaneServiceServer<LaneSvc>>().await;
    } else {
        reporter
            .set_not_serving::<CampaignServiceServer<CampaignSvc>>()
            .await;
        reporter
            .set_not_serving::<LaneServiceServer<LaneSvc>>()
            .await;
    }
}

/// Keeps the readiness names equal to "the store is up and we are not stopping" until the
/// replica stops.
pub(crate) async fn follow(
    reporter: HealthReporter,
    mut store_up: watch::Receiver<bool>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut ready = true;
    loop {
        let now = *store_up.borrow_and_update() && !*stopping.borrow_and_update();
        if now != ready {
            ready = now;
            set_ready(&reporter, ready).await;
        }
        if *stopping.borrow() {
            return;
        }
        tokio::select! {
            changed = store_up.changed() => if changed.is_err() { return },
            changed = stopping.changed() => if changed.is_err() { return },
        }
    }
}

/// Serves only the health service, without TLS or auth, until `stopped` resolves. The port is
/// unauthenticated, so what one client may hold is bounded: a few streams per connection, and
/// no call (a `Watch` included) longer than a probe needs.
pub(crate) async fn serve_alone<S>(
    listener: TcpListener,
    service: tonic_health::pb::health_server::HealthServer<S>,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error>
where
    S: tonic_health::pb::health_server::Health,
{
    tonic::transport::Server::builder()
        .max_concurrent_streams(Some(8))
        .concurrency_limit_per_connection(8)
        .timeout(std::time::Duration::from_secs(10))
        .add_service(service)
        .serve_with_incoming_shutdown(super::server::incoming(listener), stopped)
        .await
}
