//! The coordinator session: connects, registers, forwards every message to the supervisor, and
//! reconnects with jittered backoff when the stream ends (coordinator restart, GoAway, network).

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use lanes_common::proto as pb;
use lanes_common::proto::lane_service_client::LaneServiceClient;
use lanes_common::proto::worker_message::Msg as In;

use super::WorkerConfig;
use super::supervisor::SupMsg;

/// Bounds of the reconnect backoff.
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(0);
    // Up to +50%, so a fleet that lost its coordinator does not reconnect in lockstep.
    d + d.mul_f64(f64::from(nanos % 1000) / 2000.0)
}

/// Runs sessions until `stop` fires.
pub(crate) async fn run(
    config: Arc<WorkerConfig>,
    supervisor: ActorRef<SupMsg>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut backoff = BACKOFF_MIN;
    loop {
        if *stop.borrow() {
            return;
        }
        match session(&config, &supervisor, &mut stop).await {
            Ok(()) => backoff = BACKOFF_MIN,
            Err(e) => tracing::warn!(error = %e, "coordinator session failed"),
        }
        let _ = supervisor.cast(SupMsg::Disconnected);
        tokio::select! {
            _ = tokio::time::sleep(jitter(backoff)) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

async fn session(
    config: &WorkerConfig,
    supervisor: &ActorRef<SupMsg>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let channel = Channel::from_shared(config.coordinator.clone())
        .map_err(|e| format!("bad coordinator url: {e}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", config.coordinator))?;
    let token: Option<MetadataValue<_>> = match &config.token {
        Some(t) => Some(
            format!("Bearer {t}")
                .parse()
                .map_err(|_| "the lane token is not valid header text".to_owned())?,
        ),
        None => None,
    };
    let mut client =
        LaneServiceClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
            if let Some(t) = &token {
                req.metadata_mut().insert("authorization", t.clone());
            }
            Ok(req)
        });
    let (tx, rx) = mpsc::channel(256);
    tx.send(pb::WorkerMessage {
        msg: Some(In::Register(pb::Register {
            worker_id: config.worker_id.clone(),
            host: config.host.clone(),
            lanes: config.lanes,
            version: env!("CARGO_PKG_VERSION").into(),
            labels: Default::default(),
            arms: config.arms.clone(),
        })),
    })
    .await
    .map_err(|_| "session closed")?;
    let mut inbound = client
        .session(ReceiverStream::new(rx))
        .await
        .map_err(|s| format!("session refused: {} ({:?})", s.message(), s.code()))?
        .into_inner();
    supervisor
        .cast(SupMsg::Connected(tx))
        .map_err(|_| "supervisor gone")?;
    tracing::info!(coordinator = %config.coordinator, "connected");
    loop {
        tokio::select! {
            m = inbound.next() => match m {
                Some(Ok(m)) => {
                    let go_away = matches!(m.msg, Some(pb::coordinator_message::Msg::GoAway(_)));
                    let _ = supervisor.cast(SupMsg::Inbound(m));
                    if go_away {
                        return Ok(());
                    }
                }
                Some(Err(s)) => return Err(format!("session ended: {} ({:?})", s.message(), s.code())),
                None => return Ok(()),
            },
            _ = stop.changed() => return Ok(()),
        }
    }
}
