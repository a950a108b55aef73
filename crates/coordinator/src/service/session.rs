//! One lane session's loop: it reads the worker's messages and answers them. Work requests
//! are answered beside the loop; messages about leases (heartbeats, outcomes, releases,
//! forfeits, reconnects) go to the session's [`InFlight`] queue, which runs each as its own
//! task after the earlier ones about the same lease and hands their answers back in order.
//! The loop itself never waits for a store operation, so it keeps reading.

use tokio::sync::mpsc;
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

use lanes_common::proto as pb;
use lanes_common::proto::coordinator_message::Msg as Out;

use super::Shared;
use super::in_flight::{Answers, InFlight};
use super::lane::{Handled, LaneSvc, Later};
use crate::grpc_status::bad_field;

/// Messages of one session in the store at once; the session reads no more until the oldest
/// is answered (the worker's credits and heartbeats bound it far below this in practice).
const MAX_IN_FLIGHT: usize = 1024;

type Reply = Result<pb::CoordinatorMessage, Status>;

/// Serves one lane session: reads the worker's messages from `inbound` and answers on the
/// returned channel until either side ends it. The gRPC handler and the in-process
/// coordinator both run sessions through here.
///
/// `identity` is the worker id the session's client certificate names (mutual TLS): the
/// worker must register under it.
pub(crate) fn serve_session<S>(
    shared: Shared,
    inbound: S,
    identity: Option<String>,
) -> mpsc::Receiver<Reply>
where
    S: Stream<Item = Result<pb::WorkerMessage, Status>> + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    let svc = LaneSvc { shared, identity };
    tokio::spawn(run(svc, inbound, tx));
    rx
}

fn go_away(reason: &str) -> Reply {
    Ok(pb::CoordinatorMessage {
        msg: Some(Out::GoAway(pb::GoAway {
            reason: reason.to_owned(),
        })),
    })
}

/// Sends the answers of the oldest message in flight; `false` when the session must end.
async fn deliver(task: Result<Answers, tokio::task::JoinError>, tx: &mpsc::Sender<Reply>) -> bool {
    match task {
        Ok(Ok(answers)) => {
            for a in answers {
                let _ = tx.send(Ok(a)).await;
            }
            true
        }
        // A malformed message ends the session with the field named.
        Ok(Err(status)) => {
            let _ = tx.send(Err(status)).await;
            false
        }
        Err(e) => {
            tracing::error!(error = %e, "a lane message's task failed");
            let _ = tx.send(Err(Status::internal("internal error"))).await;
            false
        }
    }
}

async fn run<S>(svc: LaneSvc, mut inbound: S, tx: mpsc::Sender<Reply>)
where
    S: Stream<Item = Result<pb::WorkerMessage, Status>> + Unpin + Send + 'static,
{
    let mut worker = None;
    let mut shutdown = svc.shared.shutdown.clone();
    let mut store_up = svc.shared.store_up.clone();
    let mut in_flight = InFlight::default();
    loop {
        // A replica that cannot reach its store could renew nothing: send the worker to one
        // that can (also at the start of a session).
        if !*store_up.borrow_and_update() {
            let _ = tx
                .send(go_away("this replica cannot reach its store"))
                .await;
            return;
        }
        // Biased: when the replica shuts down, its store watch stops too, and the session
        // must see the shutdown (and say GoAway), not the watch closing.
        let next = tokio::select! {
            biased;
            _ = shutdown.changed() => {
                let _ = tx.send(go_away("coordinator shutting down")).await;
                return;
            }
            changed = store_up.changed() => {
                if changed.is_err() {
                    // The watch is gone: the server is stopping.
                    let _ = tx.send(go_away("coordinator shutting down")).await;
                    return;
                }
                continue;
            }
            done = in_flight.oldest(), if !in_flight.is_empty() => {
                if !deliver(done, &tx).await {
                    return;
                }
                continue;
            }
            m = inbound.next(), if in_flight.len() < MAX_IN_FLIGHT => m,
        };
        let m = match next {
            // The worker is gone: what it sent is still done in the store (it would replay
            // it otherwise); the answers have nowhere to go.
            None => return,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "session ended");
                return;
            }
            Some(Ok(pb::WorkerMessage { msg: None })) => {
                let _ = tx.send(Err(bad_field("msg", "empty message"))).await;
                return;
            }
            Some(Ok(pb::WorkerMessage { msg: Some(m) })) => m,
        };
        match svc.handle(&mut worker, m, &tx).await {
            Ok(Handled::Done) => {}
            Ok(Handled::Later(Later { leases, answer })) => in_flight.push(leases, answer),
            Err(status) => {
                // A malformed message ends the session with the field named.
                let _ = tx.send(Err(status)).await;
                return;
            }
        }
    }
}
