//! The supervisor's side of the outbox: every write, rewrite and removal runs in a blocking
//! task and answers with a message; replays come from the in-memory mirror.

use ractor::{ActorRef, RpcReplyPort};

use lanes_common::ids::AttemptTag;
use lanes_common::proto as pb;
use lanes_common::proto::worker_message::Msg as In;
use lanes_common::row::Phase;

use super::{SupMsg, SupState, Supervisor};
use crate::outbox::{Entry, Outbox};

impl Supervisor {
    /// Writes an entry to the outbox (fsynced) in a blocking task; `Persisted` carries on.
    pub(super) fn publish(
        &self,
        myself: &ActorRef<SupMsg>,
        state: &SupState,
        mut entry: Box<Entry>,
        reply: Option<RpcReplyPort<()>>,
    ) {
        // The lane never sees the lease secret; the entry takes it from the tracked lease,
        // so a replay after a restart can still prove the lease.
        if entry.lease.is_empty()
            && let Some(f) = state.in_flight.get(&entry.tag())
        {
            entry.lease = f.lease.clone();
        }
        let (me, outbox) = (myself.clone(), state.outbox.clone());
        tokio::spawn(async move {
            let (entry, written) = tokio::task::spawn_blocking(move || {
                let written = outbox.put(&entry).map(|_| entry.seal_record());
                (entry, written.map_err(|e| e.to_string()))
            })
            .await
            .expect("the outbox write does not panic");
            let _ = me.cast(SupMsg::Persisted {
                entry,
                written,
                reply,
            });
        });
    }

    /// Answers `reply` once the entry is durable, then sends it. A failed outbox write is
    /// disclosed in the row, the outcome is kept in memory, and the send is still attempted.
    pub(super) async fn persisted(
        &self,
        myself: &ActorRef<SupMsg>,
        state: &mut SupState,
        mut entry: Box<Entry>,
        written: Result<(), String>,
        reply: Option<RpcReplyPort<()>>,
    ) {
        match written {
            // Durable, and its folder still to upload: sent once the store has it.
            Ok(()) if entry.upload.is_some() && self.config.artifact_store.is_some() => {
                if let Some(reply) = reply {
                    let _ = reply.send(());
                }
                if let Some(f) = state.in_flight.get_mut(&entry.tag()) {
                    f.phase = Phase::Publish;
                }
                state.uploads.add(*entry);
                self.start_uploads(myself, state);
                return;
            }
            Ok(()) => {
                state.pending.insert(entry.tag(), (*entry).clone());
            }
            Err(e) => {
                tracing::error!(
                    error = %e,
                    trial = %entry.outcome.token,
                    "outbox write failed: the outcome is kept in memory and written again every tick; no new work is taken until the outbox is writable"
                );
                entry
                    .outcome
                    .record
                    .publication_errors
                    .push(format!("outbox: {e}"));
                // Sent now, from memory: its folder stays on this host (an upload would need
                // the outbox to hold the entry while it waits).
                entry.upload = None;
                state.unpersisted.insert(entry.tag(), (*entry).clone());
                state.outbox_broken = true;
            }
        }
        if let Some(reply) = reply {
            let _ = reply.send(());
        }
        if let Some(f) = state.in_flight.get_mut(&entry.tag()) {
            f.phase = Phase::Publish;
        }
        let o = wire_outcome(state, &entry);
        Self::send(state, In::Outcome(o)).await;
        Self::tell_status(state, false).await;
    }

    /// Writes the outcomes the outbox could not take again, in a blocking task; once all are
    /// on disk (`Repersisted`), work is taken again.
    pub(super) fn persist_again(myself: &ActorRef<SupMsg>, state: &mut SupState) {
        if !state.outbox_broken || state.repersisting {
            return;
        }
        state.repersisting = true;
        let (me, outbox) = (myself.clone(), state.outbox.clone());
        let entries: Vec<Entry> = state.unpersisted.values().cloned().collect();
        tokio::spawn(async move {
            let (written, error) = tokio::task::spawn_blocking(move || {
                let mut written = Vec::new();
                for e in &entries {
                    if let Err(err) = outbox.put(e) {
                        return (written, Some(err.to_string()));
                    }
                    e.seal_record();
                    written.push(e.clone());
                }
                // Every kept outcome may have been acknowledged already: probe the disk itself.
                (written, outbox.probe().err().map(|e| e.to_string()))
            })
            .await
            .unwrap_or_else(|e| (Vec::new(), Some(e.to_string())));
            let _ = me.cast(SupMsg::Repersisted {
                written: written.iter().map(Entry::tag).collect(),
                error,
            });
        });
    }

    /// What a rewrite of the kept outcomes achieved.
    pub(super) fn repersisted(
        state: &mut SupState,
        written: Vec<AttemptTag>,
        error: Option<String>,
    ) {
        state.repersisting = false;
        for t in written {
            if let Some(e) = state.unpersisted.remove(&t) {
                state.pending.insert(t, e);
            }
        }
        match error {
            Some(err) => tracing::warn!(error = %err, "outbox still not writable; taking no work"),
            None if state.unpersisted.is_empty() => {
                state.outbox_broken = false;
                tracing::info!("outbox writable again: taking work");
            }
            // Acknowledged from memory meanwhile, or more came in: the next tick writes them.
            None => {}
        }
    }

    /// Runs blocking outbox housekeeping (removing or setting aside an entry) off the actor.
    pub(super) fn outbox_task(
        state: &SupState,
        what: &'static str,
        f: impl FnOnce(&Outbox) -> std::io::Result<()> + Send + 'static,
    ) {
        let outbox = state.outbox.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(e) = f(&outbox) {
                tracing::error!(error = %e, "cannot {what}");
            }
        });
    }

    /// Sends every unacknowledged outcome again, from memory: what the disk could not take,
    /// and the mirror of what it holds.
    pub(super) async fn replay(&self, state: &mut SupState) {
        let entries: Vec<Entry> = state
            .unpersisted
            .values()
            .chain(state.pending.values())
            .cloned()
            .collect();
        for e in entries {
            tracing::info!(trial = %e.outcome.token, "replaying an unacknowledged outcome");
            let o = wire_outcome(state, &e);
            Self::send(state, In::Outcome(o)).await;
        }
    }
}

/// The outcome message of an outbox entry: its lease secret, and the attempt's traceparent
/// while this process still tracks the attempt.
pub(super) fn wire_outcome(state: &SupState, e: &Entry) -> pb::Outcome {
    let mut o = pb::Outcome::from(e.outcome.clone());
    o.campaign = e.campaign.to_string();
    o.token = o.token.map(|t| pb::Token {
        lease: e.lease.expose().to_owned(),
        ..t
    });
    if let Some(f) = state.in_flight.get(&e.tag()) {
        o.traceparent = f.traceparent.clone();
    }
    o
}
