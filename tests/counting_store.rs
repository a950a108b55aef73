//! A real store seen through a counter: every operation goes to the wrapped store unchanged, and
//! `list` calls (one per work request a lane session handles) are counted, so a test can see
//! how often workers ask for work. Submits and completions can be held at the door (counted
//! while they wait), so a test can keep several in flight at once; renewals are counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use lanes_coordinator::store::*;

/// Wraps a store and counts its `list` calls.
pub struct CountingStore {
    inner: Arc<dyn Store>,
    lists: AtomicU64,
    /// While `true`, submits wait before they reach the store.
    hold: tokio::sync::watch::Sender<bool>,
    held: AtomicU64,
    /// While `true`, completions wait before they reach the store.
    hold_complete: tokio::sync::watch::Sender<bool>,
    completes_held: AtomicU64,
    renews: AtomicU64,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            lists: AtomicU64::new(0),
            hold: tokio::sync::watch::channel(false).0,
            held: AtomicU64::new(0),
            hold_complete: tokio::sync::watch::channel(false).0,
            completes_held: AtomicU64::new(0),
            renews: AtomicU64::new(0),
        }
    }

    /// Holds completions (`true`) until they are let through (`false`).
    pub fn hold_completes(&self, hold: bool) {
        self.hold_complete.send_replace(hold);
    }

    /// Completions waiting at the door now.
    pub fn completes_held(&self) -> u64 {
        self.completes_held.load(Ordering::SeqCst)
    }

    /// `renew` calls so far.
    pub fn renews(&self) -> u64 {
        self.renews.load(Ordering::SeqCst)
    }

    /// Holds submits (`true`) until they are let through (`false`).
    pub fn hold_submits(&self, hold: bool) {
        self.hold.send_replace(hold);
    }

    /// Submits waiting at the door now.
    pub fn submits_held(&self) -> u64 {
        self.held.load(Ordering::SeqCst)
    }

    /// `list` calls so far.
    pub fn lists(&self) -> u64 {
        self.lists.load(Ordering::SeqCst)
    }
}

impl CountingStore {
    /// Waits while `hold` says so, counted in `held`.
    async fn door(hold: &tokio::sync::watch::Sender<bool>, held: &AtomicU64) {
        let mut hold = hold.subscribe();
        if *hold.borrow_and_update() {
            held.fetch_add(1, Ordering::SeqCst);
            let _ = hold.wait_for(|h| !*h).await;
            held.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl Store for CountingStore {
    async fn execute(&self, op: Op) -> Result<Answer, StoreError> {
        match &op {
            Op::Campaign(CampaignOp::Submit { .. }) => Self::door(&self.hold, &self.held).await,
            Op::Campaign(CampaignOp::Complete { .. }) => {
                Self::door(&self.hold_complete, &self.completes_held).await
            }
            Op::Campaign(CampaignOp::Renew { .. }) => {
                self.renews.fetch_add(1, Ordering::SeqCst);
            }
            Op::List => {
                self.lists.fetch_add(1, Ordering::SeqCst);
            }
            _ => {}
        }
        self.inner.execute(op).await
    }

    fn set_observer(&self, observer: Arc<dyn CommitObserver>) {
        self.inner.set_observer(observer);
    }
}
