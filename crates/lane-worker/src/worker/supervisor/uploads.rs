//! The supervisor's side of the artifact store: an outcome whose attempt folder must be
//! uploaded first waits here, durable in the outbox, and is sent only once its files are in
//! the store (its row then lists their URIs, the manifest first).
//!
//! - An unavailable store (down, slow, failing with 5xx) is tried again with a backoff of
//!   1 s doubling to 60 s, for as long as it takes: nothing is refused or lost by waiting.
//! - A store that refuses for good (a wrong bucket, no permission) ends the wait at once: the
//!   outcome is sent with its local paths and the refusal in `publication_errors`.
//! - While as many outcomes wait as the worker has lanes, it takes no new work
//!   ([`Uploads::full`]); each lane can still finish the attempt it runs.
//! - A restarted worker finds these entries in its outbox and uploads them again.

use std::collections::BTreeMap;
use std::time::Duration;

use ractor::ActorRef;
use tokio::time::Instant;

use lanes_artifacts::{StoreError, Uploaded};
use lanes_common::ids::AttemptTag;
use lanes_common::limits::{MAX_ARTIFACT_BYTES, MAX_ARTIFACTS, fit_outcome};

use lanes_common::proto::worker_message::Msg as In;

use lanes_common::row::Phase;

use super::{InFlight, SupMsg, SupState, Supervisor};
use crate::outbox::Entry;

const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Outcomes waiting for their upload.
#[derive(Default)]
pub(super) struct Uploads {
    waiting: BTreeMap<AttemptTag, Waiting>,
}

struct Waiting {
    entry: Entry,
    running: bool,
    /// Failed tries so far (for the backoff and the logs).
    tries: u32,
    next_at: Instant,
}

impl Uploads {
    /// Entries read back from the outbox at start, still to upload.
    pub(super) fn resumed(entries: impl IntoIterator<Item = Entry>) -> Self {
        let now = Instant::now();
        Self {
            waiting: entries
                .into_iter()
                .map(|entry| {
                    let w = Waiting {
                        entry,
                        running: false,
                        tries: 0,
                        next_at: now,
                    };
                    (w.entry.tag(), w)
                })
                .collect(),
        }
    }

    pub(super) fn add(&mut self, entry: Entry) {
        let tag = entry.tag();
        self.waiting.entry(tag).or_insert(Waiting {
            entry,
            running: false,
            tries: 0,
            next_at: Instant::now(),
        });
    }

    pub(super) fn contains(&self, tag: &AttemptTag) -> bool {
        self.waiting.contains_key(tag)
    }

    pub(super) fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether the worker must take no new work: as many outcomes wait as it has lanes.
    pub(super) fn full(&self, lanes: u32) -> bool {
        self.waiting.len() >= lanes.max(1) as usize
    }
}

/// Tracks the leases of the entries a previous process left waiting for their upload, as
/// in phase publish: renewed by heartbeats and announced on reconnect until acknowledged,
/// so an outage of the store that outlasts a restart does not expire them. (They are in the
/// lease journal already.)
pub(super) fn track_resumed(state: &mut SupState) {
    for (tag, w) in &state.uploads.waiting {
        let lease = w.entry.lease.clone();
        state.held.hold(lease.expose());
        state.in_flight.entry(tag.clone()).or_insert(InFlight {
            lease,
            lane: w.entry.outcome.lane.to_string(),
            phase: Phase::Publish,
            // Not known after a restart; it only bounds how long a heartbeat may go
            // unacknowledged, which is capped anyway.
            ttl: Duration::from_secs(30),
            traceparent: String::new(),
            span: None,
        });
    }
}

impl Supervisor {
    /// Starts every upload that is due and not running.
    pub(super) fn start_uploads(&self, myself: &ActorRef<SupMsg>, state: &mut SupState) {
        let Some(store) = &self.config.artifact_store else {
            return;
        };
        let now = Instant::now();
        for (tag, w) in &mut state.uploads.waiting {
            if w.running || w.next_at > now {
                continue;
            }
            let Some(dir) = w.entry.upload.clone() else {
                continue;
            };
            w.running = true;
            let (store, tag, me) = (store.clone(), tag.clone(), myself.clone());
            tokio::spawn(async move {
                let result = store.upload_attempt(&dir, &tag).await;
                let _ = me.cast(SupMsg::Uploaded { tag, result });
            });
        }
    }

    /// An upload ended: the outcome, now listing the objects (or the refusal), is sent; an
    /// unavailable store is tried again later.
    ///
    /// The outbox entry is not written again: a rewrite in place has a window in which a
    /// crash leaves the slot empty or torn, which would lose a durable outcome. The entry on
    /// disk keeps its folder to upload; a worker that restarts before the acknowledgement
    /// uploads it again (the same objects) and sends the same outcome, which the store takes
    /// once.
    pub(super) async fn uploaded(
        &self,
        state: &mut SupState,
        tag: AttemptTag,
        result: Result<Uploaded, StoreError>,
    ) {
        let Some(w) = state.uploads.waiting.get_mut(&tag) else {
            return;
        };
        w.running = false;
        let entry = match result {
            Err(e) if e.is_transient() => {
                w.tries += 1;
                let wait = FIRST_BACKOFF
                    .saturating_mul(1 << (w.tries - 1).min(6))
                    .min(MAX_BACKOFF);
                w.next_at = Instant::now() + wait;
                tracing::warn!(attempt = %tag, tries = w.tries, retry_in_s = wait.as_secs(), error = %e, "artifact upload failed; the outcome waits in the outbox");
                return;
            }
            result => {
                let mut entry = state.uploads.waiting.remove(&tag).expect("present").entry;
                with_upload(&mut entry, result);
                entry
            }
        };
        // In the mirror of the outbox from now on: replayed from there, and removed on
        // the acknowledgement like any other entry.
        let o = super::outbox_io::wire_outcome(state, &entry);
        state.pending.insert(tag, entry);
        Self::send(state, In::Outcome(o)).await;
    }
}

/// The entry as its upload left it: it lists the objects, or says why they are not there.
fn with_upload(entry: &mut Entry, result: Result<Uploaded, StoreError>) {
    entry.upload = None;
    let tag = entry.tag();
    let record = &mut entry.outcome.record;
    match result {
        Ok(up) => {
            // The manifest comes first and lists every file; a URI too long for a row is
            // only in the manifest.
            record.artifacts = up
                .uris
                .into_iter()
                .filter(|u| u.len() <= MAX_ARTIFACT_BYTES)
                .take(MAX_ARTIFACTS)
                .collect();
            record.publication_errors.extend(
                up.skipped
                    .into_iter()
                    .map(|s| format!("artifact store: {s}")),
            );
        }
        Err(e) => {
            tracing::error!(attempt = %tag, error = %e, "the artifact store refused the attempt's files; its row keeps their local paths");
            record.publication_errors.push(e.to_string());
        }
    }
    fit_outcome(&mut entry.outcome);
}
