//! Who hears about committed transactions: the metrics count attempts and final trials from
//! the events a transaction wrote, and only once its commit succeeded, so the counts agree
//! with the ledger (an operation that failed, or a transaction that lost a conflict and ran
//! again, reports nothing).

use std::sync::{Arc, RwLock};

use lanes_common::ids::CampaignId;

use super::api::Event;

/// Told about each committed transaction's events, on the thread or task that committed it:
/// it must be quick and never block.
pub trait CommitObserver: Send + Sync + 'static {
    /// The events one committed transaction (or one operation of a shared one) wrote, in
    /// order. Never called with an empty slice.
    fn committed(&self, campaign: &CampaignId, events: &[Event]);

    /// A commit lost to another writer's and its operations run again (Redis only).
    fn conflicted(&self) {}
}

/// The observer a backend reports to, shared by the store's clones; empty until one is set.
#[derive(Clone, Default)]
pub(crate) struct ObserverSlot(Arc<RwLock<Option<Arc<dyn CommitObserver>>>>);

impl ObserverSlot {
    pub(crate) fn set(&self, observer: Arc<dyn CommitObserver>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Some(observer);
    }

    fn get(&self) -> Option<Arc<dyn CommitObserver>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn committed(&self, campaign: &CampaignId, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        if let Some(o) = self.get() {
            o.committed(campaign, events);
        }
    }

    pub(crate) fn conflicted(&self) {
        if let Some(o) = self.get() {
            o.conflicted();
        }
    }
}
