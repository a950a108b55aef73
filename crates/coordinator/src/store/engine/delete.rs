//! Whether a campaign may be deleted: only when it runs nothing, so that no attempt in
//! flight can score into a ledger that is gone. Each backend then removes every key of it in
//! one atomic step (the embedded store in one transaction, Redis in one script that checks
//! the campaign's version).

use lanes_common::ids::CampaignId;
use lanes_common::state::CampaignState;

use super::{Deleted, Meta, R, StoreError};

/// What deleting the campaign of `meta` removes, or why it may not be deleted now.
pub(crate) fn deletable(meta: &Meta, c: &CampaignId) -> R<Deleted> {
    let refuse = |why: String| Err(StoreError::Active(c.clone(), why));
    match meta.state {
        CampaignState::Running => {
            return refuse(format!(
                "is running: stop it first (lanes stop {c}), then delete it once it is stopped"
            ));
        }
        CampaignState::Stopping => {
            return refuse(format!(
                "is stopping: {} attempts are still in flight",
                meta.leases_open
            ));
        }
        CampaignState::Stopped | CampaignState::Done => {}
    }
    if meta.leases_open > 0 {
        return refuse(format!(
            "has {} attempts in flight: wait until they end",
            meta.leases_open
        ));
    }
    Ok(Deleted {
        rows: meta.next_seq,
        trials: meta.trials_total,
    })
}
