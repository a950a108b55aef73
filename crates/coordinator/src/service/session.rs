//! One lane session's loop: it reads the worker's messages and answers them. Messages about
//! leases (heartbeats, outcomes, releases, forfeits, reconnects) each run as their own task,
//! so a worker's many lanes share the store's group commits instead of waiting for each
//! other's, and their answers go out in the order the messages came. A message waits for the
//! earlier ones about the same lease (a reconnect or a forfeit for all of them), so what one
//! attempt's messages do in the store happens in the order the worker sent them.

use std::collections::VecDeque;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

use lanes_common::proto as pb;
use lanes_common::proto::coordinator_message::Msg as Out;

use super::Shared;
use super::lane::{Handled, LaneSvc, Later, Leases};
use crate::grpc_status::bad_field;

/// Messages of one session in the store at once; the session reads no more until the oldest
/// is answered (the worker's credits and heartbeats bound it far below this in practice).
const MAX_IN_FLIGHT: usize = 1024;

type Reply = Result<pb::CoordinatorMessage, Status>;

/// A message whose answer is being worked out, oldest first.
struct InFlight {
    leases: Leases,
    task: JoinHandle<Result<Vec<pb::CoordinatorMessage>, Status>>,
}

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
async fn deliver(
    task: Result<Result<Vec<pb::CoordinatorMessage>, Status>, tokio::task::JoinError>,
    tx: &mpsc::Sender<Reply>,
) -> bool {
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
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
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
            done = async { (&mut in_flight.front_mut().expect("not empty").task).await },
                if !in_flight.is_empty() =>
            {
                in_flight.pop_front();
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
            Ok(Handled::Later(Later { leases, answer })) => {
                // Earlier messages about the same leases are answered first.
                while in_flight.iter().any(|f| f.leases.overlaps(&leases)) {
                    let oldest = in_flight.pop_front().expect("not empty");
                    if !deliver(oldest.task.await, &tx).await {
                        return;
                    }
                }
                in_flight.push_back(InFlight {
                    leases,
                    task: tokio::spawn(answer),
                });
            }
            Err(status) => {
                // A malformed message ends the session with the field named.
                let _ = tx.send(Err(status)).await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(trial: &str) -> (String, String, u32) {
        ("c".into(), trial.into(), 1)
    }

    #[test]
    fn messages_wait_only_for_earlier_ones_about_the_same_lease() {
        let a = Leases::Of(vec![key("t1"), key("t2")]);
        let b = Leases::Of(vec![key("t3")]);
        let c = Leases::Of(vec![key("t2")]);
        assert!(!a.overlaps(&b));
        assert!(a.overlaps(&c) && c.overlaps(&a));
        // Another attempt of the same trial is another lease.
        assert!(!Leases::Of(vec![("c".into(), "t1".into(), 2)]).overlaps(&a));
        assert!(Leases::All.overlaps(&b) && b.overlaps(&Leases::All));
        assert!(Leases::All.overlaps(&Leases::Of(Vec::new())));
    }
}
