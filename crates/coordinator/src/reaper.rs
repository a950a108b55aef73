//! The reaper: every replica runs it, applying the store's reap rules to every campaign. The
//! store makes concurrent reaps safe, so replicas need no coordination.
//!
//! It starts one TTL after the replica starts, and again one TTL after its store connection
//! comes back from an outage: otherwise every lease would look expired at once, because lanes
//! could not renew while the store was down, and every in-flight trial would burn its budget.

use std::sync::Arc;
use std::time::Duration;

use crate::metrics::CoordinatorMetrics;
use crate::store::{Clock, Store, StoreError};

/// Runs until `shutdown` fires.
pub(crate) async fn run(
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    startup_delay_ms: i64,
    every: Duration,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    metrics: Option<Arc<CoordinatorMetrics>>,
) {
    let mut start_at = clock.now_ms() + startup_delay_ms;
    let mut down = false;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.changed() => return,
        }
        let ids = match store.list().await {
            Ok(ids) => ids,
            Err(e) => {
                note_outage(&mut down, &e);
                continue;
            }
        };
        if down {
            // The store is back: wait a TTL so lanes can renew before anything is reaped.
            down = false;
            start_at = clock.now_ms() + startup_delay_ms;
            tracing::info!("store reachable again; reaping resumes after one lease ttl");
        }
        if clock.now_ms() < start_at {
            continue;
        }
        // Leases held by every campaign, as this pass leaves them: published only when the
        // pass went through every campaign.
        let mut held = Some(0u64);
        'campaigns: for id in ids {
            // A pass takes a bounded batch; a full one means more may be due now.
            loop {
                match store.reap(&id, clock.now_ms()).await {
                    Ok(r) => {
                        if let Some(m) = &metrics {
                            m.reaped(&r);
                        }
                        if !r.more {
                            held = held.map(|h| h + r.leases_open);
                        }
                        if r.cancelled + r.expired > 0 {
                            tracing::info!(campaign = %id, cancelled = r.cancelled, expired = r.expired, deferred = r.deferred, "reaped");
                        }
                        if !r.more {
                            break;
                        }
                    }
                    Err(e) => {
                        held = None;
                        note_outage(&mut down, &e);
                        if down {
                            break 'campaigns;
                        }
                        break;
                    }
                }
            }
        }
        if let (Some(m), Some(held)) = (&metrics, held) {
            m.set_leases_in_flight(held);
        }
    }
}

fn note_outage(down: &mut bool, e: &StoreError) {
    if e.is_retryable() {
        if !*down {
            tracing::warn!(error = %e, "store unreachable; reaping paused");
        }
        *down = true;
    } else {
        tracing::warn!(error = %e, "reap failed");
    }
}
