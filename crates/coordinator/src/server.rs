//! The coordinator server: both services, gRPC health, limits, the reaper, and graceful
//! shutdown. `run` takes its listener and shutdown signal from the caller (tests bind
//! 127.0.0.1:0; the binary binds `--listen`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;

use lanes_common::proto::campaign_service_server::CampaignServiceServer;
use lanes_common::proto::lane_service_server::LaneServiceServer;

use crate::auth::{AuthConfig, BearerAuth, Role, TokenError};
use crate::metrics::CoordinatorMetrics;
use crate::service::Shared;
use crate::service::campaign::CampaignSvc;
use crate::service::lane::LaneSvc;
use crate::store::{Clock, MeteredStore, Store, StoreBackend};

/// How the coordinator runs.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// The tokens each role accepts; [`run`] refuses to start with a role open unless
    /// `auth.insecure_no_auth` is set.
    pub auth: AuthConfig,
    /// Largest request a client may send (a submit carries every task).
    pub max_client_message_bytes: usize,
    /// Largest message on a lane session. A campaign whose largest assignment would not fit
    /// (with 1/8 headroom) is refused at submit.
    pub max_lane_message_bytes: usize,
    /// Most trials one campaign may have (`--max-trials`); more is refused at submit.
    pub max_trials: u64,
    /// Submits running at once (`--max-concurrent-submits`); more get `RESOURCE_EXHAUSTED`.
    pub max_concurrent_submits: usize,
    /// Watch and Rows streams one bearer token may hold open (`--max-streams-per-token`);
    /// more get `RESOURCE_EXHAUSTED`.
    pub max_streams_per_token: usize,
    pub max_concurrent_streams: u32,
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
    /// How often Watch and Rows poll the store.
    pub poll: Duration,
    /// How often the reaper runs.
    pub reap_every: Duration,
    /// The reaper waits this long after start and after a store outage (one lease TTL).
    pub reaper_start_delay: Duration,
    /// How the replica watches its store (lane sessions get GoAway while it is down).
    pub store_watch: crate::store_health::StoreWatch,
    /// Serve TLS (and, with a client CA, mutual TLS for lane sessions); plaintext when `None`.
    pub tls: Option<crate::tls::ServerTls>,
    /// Count into these metrics, for a store of this backend (the caller serves them); off
    /// when `None`.
    pub metrics: Option<(Arc<CoordinatorMetrics>, StoreBackend)>,
    /// How the web dashboard is served, when [`Listeners::ui`] is given.
    pub dashboard: crate::dashboard::DashboardConfig,
    /// Where workers upload attempts' files (`--artifact-store`): the dashboard and
    /// `ReadArtifact` read them back, and `Delete` removes a campaign's. `None`: neither.
    pub artifact_store: Option<lanes_artifacts::ArtifactStore>,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        Self {
            auth: AuthConfig::default(),
            max_client_message_bytes: 256 * 1024 * 1024,
            max_lane_message_bytes: 4 * 1024 * 1024,
            max_trials: lanes_common::limits::DEFAULT_MAX_TRIALS,
            max_concurrent_submits: 4,
            max_streams_per_token: 64,
            max_concurrent_streams: 1024,
            keepalive_interval: Duration::from_secs(20),
            keepalive_timeout: Duration::from_secs(10),
            poll: Duration::from_millis(200),
            reap_every: Duration::from_secs(1),
            reaper_start_delay: Duration::from_secs(30),
            store_watch: Default::default(),
            tls: None,
            metrics: None,
            dashboard: Default::default(),
            artifact_store: None,
        }
    }
}

/// Why the server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("grpc server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("{0}")]
    Auth(#[from] TokenError),
    #[error("the reflection service cannot be built: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("the dashboard cannot be served: {0}")]
    Dashboard(#[from] std::io::Error),
}

/// Where the coordinator listens: the API, and optionally the gRPC health service alone
/// (`--health-listen`) and the web dashboard (`--ui-listen`).
#[derive(Debug)]
pub struct Listeners {
    pub api: TcpListener,
    pub health: Option<TcpListener>,
    pub ui: Option<TcpListener>,
}

/// The connections `listener` accepts, with Nagle's algorithm off. A lane session's answers
/// are small messages written while earlier ones are unacknowledged; with Nagle on, the
/// kernel holds each until the peer's delayed ACK (up to 40 ms), which was most of the claim
/// latency's tail.
pub(crate) fn incoming(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener).with_nodelay(Some(true))
}

/// Serves until `shutdown` resolves, then stops accepting, tells lanes to reconnect, and lets
/// in-flight calls finish.
pub async fn run(
    config: CoordinatorConfig,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    run_with_health(config, store, clock, listener, None, shutdown).await
}

/// [`run`], and with `health_listener` the gRPC health service alone on that plaintext
/// listener too (`--health-listen`), until the API server has stopped.
pub async fn run_with_health(
    config: CoordinatorConfig,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    listener: TcpListener,
    health_listener: Option<TcpListener>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let listeners = Listeners {
        api: listener,
        health: health_listener,
        ui: None,
    };
    serve(config, store, clock, listeners, shutdown).await
}

/// Serves every listener of `listeners` until `shutdown` resolves (see [`run`]).
pub async fn serve(
    config: CoordinatorConfig,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let Listeners {
        api: listener,
        health: health_listener,
        ui: ui_listener,
    } = listeners;
    config.auth.check()?;
    for (role, tokens) in [
        (Role::Client, &config.auth.client),
        (Role::Lane, &config.auth.lane),
    ] {
        if tokens.is_empty() {
            tracing::warn!(%role, "--insecure-no-auth: this role is open to anyone who can reach the coordinator");
        }
    }
    let metrics = config.metrics.as_ref().map(|(m, _)| m.clone());
    let store = match &config.metrics {
        Some((m, backend)) => {
            store.set_observer(m.clone());
            Arc::new(MeteredStore::new(store, *backend, m.clone())) as Arc<dyn Store>
        }
        None => store,
    };
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let (up_tx, up_rx) = tokio::sync::watch::channel(true);
    let watcher = tokio::spawn(crate::store_health::run(
        store.clone(),
        config.store_watch,
        up_tx,
        stop_rx.clone(),
    ));
    let shared = Shared {
        campaigns: Default::default(),
        store: store.clone(),
        clock: clock.clone(),
        poll: config.poll,
        shutdown: stop_rx.clone(),
        workers: Default::default(),
        store_up: up_rx,
        mutual_tls: config
            .tls
            .as_ref()
            .is_some_and(|t| t.client_ca_pem.is_some()),
        leases: crate::service::leases::Leases::new(),
        limits: Arc::new(crate::service::limits::Limits::of(&config)),
        metrics: metrics.clone(),
        links: match &ui_listener {
            Some(l) => Some(Arc::new(crate::login::Links::new(
                config.dashboard.public_url.as_deref(),
                config.dashboard.code_ttl,
                l.local_addr()?,
                config.tls.is_some(),
            ))),
            None => None,
        },
        artifact_store: config.artifact_store.clone(),
    };
    let warm = shared.clone();
    tokio::spawn(async move { warm.leases.warm(warm.store.as_ref()).await });
    let (health, health_service) = crate::health::service().await;
    let health_follower = tokio::spawn(crate::health::follow(
        health,
        shared.store_up.clone(),
        stop_rx.clone(),
    ));
    let reaper = tokio::spawn(crate::reaper::run(
        store,
        clock,
        config.reaper_start_delay.as_millis() as i64,
        config.reap_every,
        stop_rx,
        metrics.clone(),
    ));

    let (served_tx, served_rx) = tokio::sync::oneshot::channel::<()>();
    let health_alone = health_listener.map(|listener| {
        tokio::spawn(crate::health::serve_alone(
            listener,
            health_service.clone(),
            async move {
                let _ = served_rx.await;
            },
        ))
    });

    // The dashboard stops with the API server: it ends when `served_rx` fires too.
    let (ui_stop_tx, ui_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let ui = match ui_listener {
        Some(listener) => {
            let (shared, tokens, dashboard, tls) = (
                shared.clone(),
                config.auth.client.clone(),
                config.dashboard.clone(),
                config.tls.clone(),
            );
            Some(tokio::spawn(async move {
                crate::dashboard::serve(
                    shared,
                    tokens,
                    dashboard,
                    listener,
                    tls.as_ref(),
                    async move {
                        let _ = ui_stop_rx.await;
                    },
                )
                .await
            }))
        }
        None => None,
    };

    let campaigns = CampaignServiceServer::new(CampaignSvc {
        shared: shared.clone(),
    })
    .max_decoding_message_size(config.max_client_message_bytes)
    .max_encoding_message_size(config.max_client_message_bytes);
    let lanes = LaneServiceServer::new(LaneSvc {
        shared,
        identity: None,
    })
    .max_decoding_message_size(config.max_lane_message_bytes)
    .max_encoding_message_size(config.max_lane_message_bytes);

    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: telling sessions to reconnect");
        let _ = stop_tx.send(true);
    };
    let auth = |role, tokens| {
        let auth = BearerAuth::new(role, tokens);
        match &metrics {
            Some(m) => auth.counting_refusals(m.auth_refused_counter(role)),
            None => auth,
        }
    };
    // Reflection (grpcurl, grpcui) describes the API to whoever may call CampaignService.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(lanes_common::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = &config.tls {
        builder = builder.tls_config(tls.config())?;
    }
    let served = builder
        .max_concurrent_streams(Some(config.max_concurrent_streams))
        .http2_keepalive_interval(Some(config.keepalive_interval))
        .http2_keepalive_timeout(Some(config.keepalive_timeout))
        .add_service(health_service)
        .add_service(InterceptedService::new(
            campaigns,
            auth(Role::Client, config.auth.client.clone()),
        ))
        .add_service(InterceptedService::new(
            lanes,
            auth(Role::Lane, config.auth.lane.clone()),
        ))
        .add_service(InterceptedService::new(
            reflection_v1,
            auth(Role::Client, config.auth.client.clone()),
        ))
        .add_service(InterceptedService::new(
            reflection_v1alpha,
            auth(Role::Client, config.auth.client.clone()),
        ))
        .serve_with_incoming_shutdown(incoming(listener), signal)
        .await;
    reaper.abort();
    watcher.abort();
    health_follower.abort();
    let _ = served_tx.send(());
    let _ = ui_stop_tx.send(());
    if let Some(ui) = ui
        && let Ok(Err(e)) = ui.await
    {
        tracing::warn!(error = %e, "the dashboard failed");
    }
    if let Some(alone) = health_alone
        && let Ok(Err(e)) = alone.await
    {
        tracing::warn!(error = %e, "the health port failed");
    }
    served.map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use tokio_stream::StreamExt;

    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nagle_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut accepted = incoming(listener);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let conn = accepted.next().await.unwrap().unwrap();
        assert!(conn.nodelay().unwrap());
    }
}
