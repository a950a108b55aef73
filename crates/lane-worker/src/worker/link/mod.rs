//! How the worker reaches its coordinator replicas: the seam between the worker and the
//! network. [`GrpcLink`] dials the replicas over gRPC; tests plug in a link that serves
//! sessions from a coordinator in the same process, so the supervisor and the lanes run in
//! one process under paused time.

mod grpc;
#[cfg(test)]
pub(crate) mod memory;

use std::future::Future;
use std::pin::Pin;

use tokio::sync::mpsc;
use tokio_stream::Stream;

use lanes_common::proto as pb;

pub use grpc::GrpcLink;

/// What the coordinator sends on a session; an error ends the session, with its reason.
pub type Inbound = Pin<Box<dyn Stream<Item = Result<pb::CoordinatorMessage, String>> + Send>>;

/// A boxed future, so links can be used as trait objects.
pub type LinkFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An open session with one replica.
pub struct LinkSession {
    /// Messages to the coordinator. The session ends when this is dropped.
    pub tx: mpsc::Sender<pb::WorkerMessage>,
    /// Messages from the coordinator.
    pub inbound: Inbound,
}

/// A way to open sessions with the coordinator's replicas.
pub trait CoordinatorLink: Send + Sync + 'static {
    /// The replicas, by name (for logs). Sessions go to them in turn.
    fn replicas(&self) -> Vec<String>;

    /// Opens a session with replica `replica` and sends `register` as its first message.
    fn open(
        &self,
        replica: usize,
        register: pb::Register,
    ) -> LinkFuture<'_, Result<LinkSession, String>>;

    /// A task folder by digest, as the coordinator keeps it (an encoded `TaskBundle`, not
    /// yet checked), from the first replica that answers.
    fn fetch_bundle<'a>(&'a self, digest: &'a str) -> LinkFuture<'a, Result<Vec<u8>, String>>;
}
