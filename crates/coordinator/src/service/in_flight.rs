//! A session's messages about leases that are still being worked out. Each runs as its own
//! task, so a worker's many lanes share the store's group commits; its store work starts only
//! once the earlier messages about the same leases have finished, and the answers go out in
//! the order the messages came.
//!
//! Ordering is kept by the tasks, not by the session's loop: a message that must wait for an
//! earlier one (an outcome behind the heartbeat renewing its lease, which may linger for
//! company before it commits) never stops the loop from reading the messages behind it. Work
//! requests among those are answered as soon as their claim is done.

use std::collections::VecDeque;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::Status;

use lanes_common::proto as pb;

use super::lane::{Answer, Leases};

/// The answers to one message, or why the session must end.
pub(super) type Answers = Result<Vec<pb::CoordinatorMessage>, Status>;

/// One message in flight.
struct Entry {
    leases: Leases,
    /// Closed (its sender dropped) once the message's store work is over, however it ended.
    finished: watch::Receiver<()>,
    task: JoinHandle<Answers>,
}

/// A session's messages in flight, oldest first.
#[derive(Default)]
pub(super) struct InFlight {
    entries: VecDeque<Entry>,
}

impl InFlight {
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Starts `answer` as a task that first waits for the messages in flight about any of
    /// `leases`. Returns at once.
    pub(super) fn push(&mut self, leases: Leases, answer: Answer) {
        let earlier: Vec<watch::Receiver<()>> = self
            .entries
            .iter()
            .filter(|e| e.leases.overlaps(&leases))
            .map(|e| e.finished.clone())
            .collect();
        let (done, finished) = watch::channel(());
        let task = tokio::spawn(async move {
            for mut e in earlier {
                // Nothing is ever sent: this returns when the earlier task drops its sender.
                let _ = e.changed().await;
            }
            let answers = answer.await;
            drop(done);
            answers
        });
        self.entries.push_back(Entry {
            leases,
            finished,
            task,
        });
    }

    /// The oldest message's answers, once it is done; pending forever when none is in
    /// flight (callers guard on `is_empty`).
    pub(super) async fn oldest(&mut self) -> Result<Answers, tokio::task::JoinError> {
        let Some(front) = self.entries.front_mut() else {
            return std::future::pending().await;
        };
        let done = (&mut front.task).await;
        self.entries.pop_front();
        done
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tokio::sync::oneshot;

    use lanes_common::proto::coordinator_message::Msg as Out;

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

    fn lease(trial: &str) -> Leases {
        Leases::Of(vec![("c".into(), trial.into(), 1)])
    }

    /// An answer naming `name` in a heartbeat ack, so the test can tell answers apart.
    fn named(name: &str) -> Vec<pb::CoordinatorMessage> {
        vec![pb::CoordinatorMessage {
            msg: Some(Out::HeartbeatAck(pb::HeartbeatAck {
                tokens: vec![pb::TokenRenewal {
                    campaign: name.to_owned(),
                    ..Default::default()
                }],
            })),
        }]
    }

    fn name_of(a: &[pb::CoordinatorMessage]) -> String {
        match &a[0].msg {
            Some(Out::HeartbeatAck(h)) => h.tokens[0].campaign.clone(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_message_waits_for_earlier_ones_about_its_lease_without_holding_back_the_rest() {
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let note = |log: &Arc<Mutex<Vec<String>>>, s: &str| log.lock().unwrap().push(s.into());
        let mut q = InFlight::default();

        // A heartbeat whose commit is slow (it lingers for company).
        let (release_a, gate_a) = oneshot::channel::<()>();
        let l = log.clone();
        q.push(
            lease("t1"),
            Box::pin(async move {
                let _ = gate_a.await;
                note(&l, "a done");
                Ok(named("a"))
            }),
        );
        // The outcome of the same lease: it must wait for the heartbeat.
        let l = log.clone();
        q.push(
            lease("t1"),
            Box::pin(async move {
                note(&l, "b started");
                Ok(named("b"))
            }),
        );
        // A message about another lease, pushed while the heartbeat is still open: `push`
        // returned, so the session keeps reading.
        let (c_done, c_finished) = oneshot::channel::<()>();
        let l = log.clone();
        q.push(
            lease("t2"),
            Box::pin(async move {
                note(&l, "c done");
                let _ = c_done.send(());
                Ok(named("c"))
            }),
        );
        assert_eq!(q.len(), 3);
        // The unrelated message runs to its end while the heartbeat is held; the runtime has
        // run every task spawned before it, and the outcome has not started.
        c_finished.await.unwrap();
        assert_eq!(*log.lock().unwrap(), vec!["c done".to_owned()]);

        release_a.send(()).unwrap();
        let mut answered = Vec::new();
        while !q.is_empty() {
            answered.push(name_of(&q.oldest().await.unwrap().unwrap()));
        }
        // Answers in the order the messages came; the outcome's work after the heartbeat's.
        assert_eq!(answered, ["a", "b", "c"]);
        assert_eq!(
            *log.lock().unwrap(),
            ["c done", "a done", "b started"].map(String::from)
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_failed_earlier_message_still_lets_the_next_one_run() {
        let mut q = InFlight::default();
        q.push(
            Leases::All,
            Box::pin(async { Err(Status::invalid_argument("bad")) }),
        );
        q.push(lease("t1"), Box::pin(async { Ok(named("after")) }));
        assert!(q.oldest().await.unwrap().is_err());
        assert_eq!(name_of(&q.oldest().await.unwrap().unwrap()), "after");
        assert!(q.is_empty());
    }
}
