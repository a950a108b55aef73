//! The coordinator session: connects, registers, forwards every message to the supervisor, and
//! reconnects with jittered backoff when the stream ends (coordinator restart, GoAway, network).
//!
//! A paused or partitioned replica keeps its TCP connection open, so an ended stream is not
//! enough to notice it: HTTP/2 keepalive pings with a timeout end the connection when the
//! replica stops answering them, and the supervisor ends the session when heartbeat
//! acknowledgements stop coming. With several replicas configured, each new session goes to
//! the next one in turn; the supervisor then re-announces what is in flight and replays the
//! outbox there.

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;

use lanes_common::proto as pb;

use super::WorkerConfig;
use super::link::CoordinatorLink;
use super::supervisor::SupMsg;

/// Bounds of the reconnect backoff.
const BACKOFF_MIN: Duration = Duration::from_millis(200);
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A session that lasted this long resets the backoff.
const STABLE_SESSION: Duration = Duration::from_secs(10);

fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or(0);
    // Up to +50%, so a fleet that lost its coordinator does not reconnect in lockstep.
    d + d.mul_f64(f64::from(nanos % 1000) / 2000.0)
}

/// Runs sessions until `stop` fires, moving to the next replica after each one ends.
pub(crate) async fn run(
    config: Arc<WorkerConfig>,
    link: Arc<dyn CoordinatorLink>,
    supervisor: ActorRef<SupMsg>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let replicas = link.replicas();
    if replicas.is_empty() {
        tracing::error!("no coordinator address configured");
        return;
    }
    let mut backoff = BACKOFF_MIN;
    let mut next = 0usize;
    loop {
        if *stop.borrow() {
            return;
        }
        let replica = next % replicas.len();
        let name = &replicas[replica];
        next = next.wrapping_add(1);
        let started = tokio::time::Instant::now();
        if let Err(e) = session(
            &config,
            link.as_ref(),
            replica,
            name,
            &supervisor,
            &mut stop,
        )
        .await
        {
            tracing::warn!(coordinator = %name, error = %e, "coordinator session failed");
        }
        let _ = supervisor.cast(SupMsg::Disconnected);
        // Only a session that lasted resets the backoff: replicas that answer GoAway at once
        // (their store is down) must not be hammered.
        if started.elapsed() >= STABLE_SESSION {
            backoff = BACKOFF_MIN;
        }
        let wait = if replicas.len() > 1 && !next.is_multiple_of(replicas.len()) {
            // Another replica is there to try in this round: go straight to it.
            BACKOFF_MIN
        } else {
            let w = backoff;
            backoff = (backoff * 2).min(BACKOFF_MAX);
            w
        };
        tokio::select! {
            _ = tokio::time::sleep(jitter(wait)) => {}
            _ = stop.changed() => return,
        }
    }
}

async fn session(
    config: &WorkerConfig,
    link: &dyn CoordinatorLink,
    replica: usize,
    name: &str,
    supervisor: &ActorRef<SupMsg>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    let mut register = pb::Register {
        worker_id: config.worker_id.clone(),
        host: config.host.to_string(),
        lanes: config.lanes,
        version: env!("CARGO_PKG_VERSION").into(),
        labels: Default::default(),
        arms: config.arms.clone(),
        protocol: lanes_common::protocol::LANE_PROTOCOL,
        ..Default::default()
    };
    let offer = config.drivers.offer(config.driver_override.is_some());
    lanes_common::convert::register_offer(&offer, &mut register);
    let mut opened = link.open(replica, register).await?;
    // The supervisor ends the session through this when acknowledgements stop coming.
    let (end_tx, mut end_rx) = mpsc::channel::<String>(1);
    supervisor
        .cast(SupMsg::Connected(opened.tx.clone(), end_tx))
        .map_err(|_| "supervisor gone")?;
    tracing::info!(coordinator = %name, "connected");
    loop {
        tokio::select! {
            Some(why) = end_rx.recv() => return Err(why),
            m = opened.inbound.next() => match m {
                Some(Ok(m)) => {
                    let go_away = matches!(m.msg, Some(pb::coordinator_message::Msg::GoAway(_)));
                    let _ = supervisor.cast(SupMsg::Inbound(m));
                    if go_away {
                        return Ok(());
                    }
                }
                Some(Err(e)) => return Err(e),
                None => return Ok(()),
            },
            _ = stop.changed() => return Ok(()),
        }
    }
}
