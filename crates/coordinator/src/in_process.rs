//! A coordinator replica served in the caller's process, without gRPC: lane sessions are
//! channels into the same session code the gRPC handler runs, over a real store. Tests use
//! it to run a worker against a real coordinator in one process, under paused time; it also
//! lets them take the replica's store away or shut it down, as the fault suite does to real
//! processes.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use lanes_common::proto as pb;

use crate::service::Shared;
use crate::service::session::serve_session;
use crate::store::{Clock, Store};

/// One replica: its store, clock and session state.
pub struct InProcessCoordinator {
    shared: Shared,
    shutdown: watch::Sender<bool>,
    /// Taken at shutdown: a stopping replica's store watch stops too.
    store_up: Mutex<Option<watch::Sender<bool>>>,
}

impl InProcessCoordinator {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (store_up, store_up_rx) = watch::channel(true);
        Self {
            shared: Shared {
                campaigns: Default::default(),
                store,
                clock,
                poll: std::time::Duration::from_millis(200),
                shutdown: shutdown_rx,
                workers: Default::default(),
                store_up: store_up_rx,
                mutual_tls: false,
                leases: crate::service::leases::Leases::new(),
                limits: Arc::new(crate::service::limits::Limits::of(&Default::default())),
                metrics: None,
                links: None,
                artifact_store: None,
            },
            shutdown,
            store_up: Mutex::new(Some(store_up)),
        }
    }

    /// Serves a lane session: `inbound` is what the worker sends; the stream returned is what
    /// the coordinator answers, ending when the session does.
    pub fn session<S>(&self, inbound: S) -> ReceiverStream<Result<pb::CoordinatorMessage, Status>>
    where
        S: Stream<Item = Result<pb::WorkerMessage, Status>> + Unpin + Send + 'static,
    {
        ReceiverStream::new(serve_session(self.shared.clone(), inbound, None))
    }

    /// Whether this replica reaches its store: while it does not, sessions get GoAway.
    pub fn set_store_up(&self, up: bool) {
        if let Some(tx) = &*self.store_up.lock().expect("store watch lock") {
            let _ = tx.send(up);
        }
    }

    /// Shuts the replica down as the server does: the shutdown signal fires and the store
    /// watch stops. Its sessions get GoAway.
    pub fn shut_down(&self) {
        let _ = self.shutdown.send(true);
        self.store_up.lock().expect("store watch lock").take();
    }

    /// The workers with a session on this replica.
    pub fn workers(&self) -> Vec<pb::WorkerInfo> {
        self.shared
            .workers
            .list()
            .into_iter()
            .map(|(info, _)| info)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_common::proto::coordinator_message::Msg as Out;
    use lanes_common::proto::worker_message::Msg as In;
    use tokio_stream::StreamExt;

    use crate::store::{EmbeddedStore, SystemClock};

    /// Both signals fire together at shutdown; whichever the session sees, it says GoAway.
    /// Before the session preferred the shutdown, about half of these ended silently.
    #[tokio::test]
    async fn a_shutdown_always_says_go_away_though_the_store_watch_stops_with_it() {
        for round in 0..32 {
            let dir = tempfile::tempdir().unwrap();
            let store = EmbeddedStore::open(dir.path()).unwrap();
            let c = InProcessCoordinator::new(Arc::new(store), Arc::new(SystemClock));
            let (tx, rx) = tokio::sync::mpsc::channel(8);
            tx.send(Ok(pb::WorkerMessage {
                msg: Some(In::Register(pb::Register {
                    worker_id: "w".into(),
                    host: "h".into(),
                    lanes: 1,
                    protocol: lanes_common::protocol::LANE_PROTOCOL,
                    ..Default::default()
                })),
            }))
            .await
            .unwrap();
            let mut out = c.session(ReceiverStream::new(rx));
            let registered = out.next().await.unwrap().unwrap();
            assert!(matches!(registered.msg, Some(Out::Registered(_))));
            c.shut_down();
            match out.next().await {
                Some(Ok(pb::CoordinatorMessage {
                    msg: Some(Out::GoAway(g)),
                })) => assert!(g.reason.contains("shutting down")),
                other => panic!("round {round}: expected go-away, got {other:?}"),
            }
        }
    }
}
