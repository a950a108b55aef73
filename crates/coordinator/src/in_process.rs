//! A coordinator replica served in the caller's process, without gRPC: lane sessions are
//! channels into the same session code the gRPC handler runs, over a real store. Tests use
//! it to run a worker against a real coordinator in one process, under paused time; it also
//! lets them take the replica's store away or shut it down, as the fault suite does to real
//! processes.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

use lanes_common::proto as pb;

use crate::service::Shared;
use crate::service::lane::serve_session;
use crate::store::{Clock, Store};

/// One replica: its store, clock and session state.
pub struct InProcessCoordinator {
    shared: Shared,
    shutdown: watch::Sender<bool>,
    store_up: watch::Sender<bool>,
}

impl InProcessCoordinator {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (store_up, store_up_rx) = watch::channel(true);
        Self {
            shared: Shared {
                store,
                clock,
                poll: std::time::Duration::from_millis(200),
                shutdown: shutdown_rx,
                workers: Default::default(),
                store_up: store_up_rx,
            },
            shutdown,
            store_up,
        }
    }

    /// Serves a lane session: `inbound` is what the worker sends; the stream returned is what
    /// the coordinator answers, ending when the session does.
    pub fn session<S>(&self, inbound: S) -> ReceiverStream<Result<pb::CoordinatorMessage, Status>>
    where
        S: Stream<Item = Result<pb::WorkerMessage, Status>> + Unpin + Send + 'static,
    {
        ReceiverStream::new(serve_session(self.shared.clone(), inbound))
    }

    /// Whether this replica reaches its store: while it does not, sessions get GoAway.
    pub fn set_store_up(&self, up: bool) {
        let _ = self.store_up.send(up);
    }

    /// Shuts the replica down: its sessions get GoAway.
    pub fn shut_down(&self) {
        let _ = self.shutdown.send(true);
    }

    /// The workers with a session on this replica.
    pub fn workers(&self) -> Vec<pb::WorkerInfo> {
        self.shared.workers.list()
    }
}
