//! The claim path's list of campaigns: the store's list, read at most once per
//! [`FRESH_FOR`] however many lanes ask for work meanwhile, with the campaigns that have
//! nothing more to hand out (done or stopped) passed over until the next read.
//!
//! Every work request walks the campaigns. Reading the list from the store for each one cost
//! a claim two extra round trips on Redis (the index, then which of its ids committed), each
//! queued behind the commits in flight; and each finished campaign the walk met cost a claim
//! of its own, a store round that answers "done". A campaign this replica submits, amends,
//! requeues or deletes is seen at once ([`CampaignList::forget`]); one changed through
//! another replica within [`FRESH_FOR`], which a lane told "no work" hears about when it
//! asks again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use lanes_common::ids::CampaignId;
use lanes_common::policy::NoWorkReason;

use crate::store::{Store, StoreError};

/// How long a list read from the store serves claims.
pub const FRESH_FOR: Duration = Duration::from_millis(100);

/// One read of the list: what claims walk until the next.
#[derive(Debug)]
pub struct Snapshot {
    /// When it was read (tokio's clock, so tests with paused time see it age).
    at: Instant,
    generation: u64,
    ids: Vec<CampaignId>,
    /// Campaigns that answered done or stopped since this read, with that answer.
    settled: Mutex<HashMap<CampaignId, (NoWorkReason, u64)>>,
}

impl Snapshot {
    /// The committed campaigns, in id order.
    pub fn ids(&self) -> &[CampaignId] {
        &self.ids
    }

    /// What `c` answered if it is done or stopped: no claim can change that until the store
    /// changes, which a new read sees.
    pub fn settled(&self, c: &CampaignId) -> Option<(NoWorkReason, u64)> {
        self.lock().get(c).cloned()
    }

    /// Remembers `c`'s answer if it says the campaign has nothing more to hand out.
    pub fn answered(&self, c: &CampaignId, reason: &NoWorkReason, retry_after_ms: u64) {
        if matches!(reason, NoWorkReason::Done | NoWorkReason::Stopped { .. }) {
            self.lock()
                .insert(c.clone(), (reason.clone(), retry_after_ms));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CampaignId, (NoWorkReason, u64)>> {
        // Plain data: a panic elsewhere leaves it usable.
        self.settled.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The cached list. One read is in flight at a time: concurrent claims wait for it rather
/// than each reading the list.
pub struct CampaignList {
    read: tokio::sync::Mutex<Option<Arc<Snapshot>>>,
    /// Bumped by [`Self::forget`]: a read from an older generation is stale.
    generation: AtomicU64,
    fresh_for: Duration,
}

impl Default for CampaignList {
    fn default() -> Self {
        Self::fresh_for(FRESH_FOR)
    }
}

impl std::fmt::Debug for CampaignList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CampaignList").finish_non_exhaustive()
    }
}

impl CampaignList {
    /// A list whose reads serve claims for `fresh_for` (tests use a long one).
    pub fn fresh_for(fresh_for: Duration) -> Self {
        Self {
            read: tokio::sync::Mutex::new(None),
            generation: AtomicU64::new(0),
            fresh_for,
        }
    }

    /// The list as of at most the freshness ago (or the last [`Self::forget`]); with
    /// `reread`, as of now. Also says whether this call read it from the store.
    pub async fn get(
        &self,
        store: &dyn Store,
        reread: bool,
    ) -> Result<(Arc<Snapshot>, bool), StoreError> {
        let mut read = self.read.lock().await;
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(r) = read.as_ref()
            && !reread
            && r.generation == generation
            && r.at.elapsed() < self.fresh_for
        {
            return Ok((r.clone(), false));
        }
        let at = Instant::now();
        let ids = store.list().await?;
        let snapshot = Arc::new(Snapshot {
            at,
            generation,
            ids,
            settled: Mutex::default(),
        });
        *read = Some(snapshot.clone());
        Ok((snapshot, true))
    }

    /// The campaigns changed here (a submit, a requeue or a delete): the next claim reads
    /// the list again, and asks every campaign again. A read in flight meanwhile serves no
    /// later claim.
    pub fn forget(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}
