//! Watches the store from this replica. A replica that cannot reach its store can neither
//! renew leases nor take outcomes, so once the store has been unreachable for longer than one
//! heartbeat interval its lane sessions are sent GoAway: their workers move to a replica that
//! can reach it. New sessions are turned away the same way until the store answers again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::store::Store;

/// How the store is watched.
#[derive(Debug, Clone, Copy)]
pub struct StoreWatch {
    /// How often the store is pinged.
    pub every: Duration,
    /// How long one ping may take before it counts as a failure.
    pub timeout: Duration,
    /// Unreachable for longer than this (one heartbeat interval) is down.
    pub down_after: Duration,
}

impl Default for StoreWatch {
    fn default() -> Self {
        Self {
            every: Duration::from_millis(250),
            timeout: Duration::from_millis(750),
            down_after: Duration::from_secs(1),
        }
    }
}

/// Runs until `shutdown` fires, publishing `true` while the store is reachable.
pub(crate) async fn run(
    store: Arc<dyn Store>,
    watch: StoreWatch,
    up: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut failing_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(watch.every) => {}
            _ = shutdown.changed() => return,
        }
        let answer = tokio::time::timeout(watch.timeout, store.ping()).await;
        match answer {
            Ok(Ok(())) => {
                failing_since = None;
                if !*up.borrow() {
                    tracing::info!("store reachable again: lane sessions are welcome");
                    let _ = up.send(true);
                }
            }
            Ok(Err(e)) => note_failure(&up, &mut failing_since, watch.down_after, &e.to_string()),
            Err(_) => note_failure(
                &up,
                &mut failing_since,
                watch.down_after,
                &format!("no answer within {:?}", watch.timeout),
            ),
        }
    }
}

fn note_failure(
    up: &watch::Sender<bool>,
    failing_since: &mut Option<tokio::time::Instant>,
    down_after: Duration,
    why: &str,
) {
    let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
    if *up.borrow() && since.elapsed() > down_after {
        tracing::warn!(error = %why, "store unreachable: sending GoAway to lane sessions");
        let _ = up.send(false);
    }
}
