//! The in-memory link (tests only): sessions are served by [`InProcessCoordinator`] replicas
//! in the same process, over a real embedded store, and every message in either direction is
//! recorded in a [`Tap`] that tests wait on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use lanes_common::proto as pb;
use lanes_common::proto::coordinator_message::Msg as Out;
use lanes_common::proto::worker_message::Msg as In;
use lanes_coordinator::InProcessCoordinator;

use super::{CoordinatorLink, LinkFuture, LinkSession};

/// One message seen on a session.
// A test log: boxing the large variant would only make the matches noisier.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub(crate) enum Seen {
    /// The worker sent this to `replica`.
    Sent { replica: usize, msg: In },
    /// `replica` sent this to the worker.
    Got { replica: usize, msg: Out },
}

/// Everything that crossed the link, in order.
#[derive(Default)]
pub(crate) struct Tap {
    log: Mutex<Vec<Seen>>,
    changed: Notify,
}

impl Tap {
    fn push(&self, seen: Seen) {
        self.log.lock().expect("tap lock").push(seen);
        self.changed.notify_waiters();
    }

    pub(crate) fn snapshot(&self) -> Vec<Seen> {
        self.log.lock().expect("tap lock").clone()
    }

    /// Waits until `f` finds what it looks for in the log. Time is paused in these tests, so
    /// the deadline is virtual: it fails a test that waits for something that never comes
    /// without making it slow.
    pub(crate) async fn wait_for<T>(&self, what: &str, f: impl Fn(&[Seen]) -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
        loop {
            let changed = self.changed.notified();
            if let Some(t) = f(&self.log.lock().expect("tap lock")) {
                return t;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                panic!("never saw {what}; the log: {:#?}", self.snapshot());
            }
        }
    }
}

/// Sessions with in-process replicas.
pub(crate) struct MemoryLink {
    pub(crate) replicas: Vec<Arc<InProcessCoordinator>>,
    pub(crate) tap: Arc<Tap>,
}

impl CoordinatorLink for MemoryLink {
    fn fetch_bundle<'a>(&'a self, digest: &'a str) -> LinkFuture<'a, Result<Vec<u8>, String>> {
        Box::pin(async move {
            Err(format!(
                "the in-process link fetches no task folder ({digest})"
            ))
        })
    }

    fn replicas(&self) -> Vec<String> {
        (0..self.replicas.len())
            .map(|i| format!("memory:{i}"))
            .collect()
    }

    fn open(
        &self,
        replica: usize,
        register: pb::Register,
    ) -> LinkFuture<'_, Result<LinkSession, String>> {
        Box::pin(async move {
            let coordinator = self
                .replicas
                .get(replica)
                .ok_or_else(|| format!("no replica {replica}"))?;
            let (tx, rx) = mpsc::channel(256);
            tx.send(pb::WorkerMessage {
                msg: Some(In::Register(register)),
            })
            .await
            .map_err(|_| "session closed")?;
            let tap = self.tap.clone();
            let to_coordinator = ReceiverStream::new(rx).map(move |m: pb::WorkerMessage| {
                if let Some(msg) = &m.msg {
                    tap.push(Seen::Sent {
                        replica,
                        msg: msg.clone(),
                    });
                }
                Ok(m)
            });
            let tap = self.tap.clone();
            let inbound = coordinator.session(to_coordinator).map(move |r| match r {
                Ok(m) => {
                    if let Some(msg) = &m.msg {
                        tap.push(Seen::Got {
                            replica,
                            msg: msg.clone(),
                        });
                    }
                    Ok(m)
                }
                Err(s) => Err(format!("session ended: {}", s.message())),
            });
            Ok(LinkSession {
                tx,
                inbound: Box::pin(inbound),
            })
        })
    }
}
