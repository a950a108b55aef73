//! The scheduler: answers one lane's work request with one unit of work from the first
//! campaign that has any and whose driver the lane's worker runs, or with the most telling
//! reason why none has and when to ask again.
//! The unit comes with the driver it was leased under (read in the claim's transaction).

use std::collections::BTreeSet;
use std::sync::Arc;

use tracing::Instrument;

use lanes_common::ids::{ArmId, HostName, LaneName};
use lanes_common::policy::{NoWorkReason, WorkerOffer};

use crate::campaign_list::{CampaignList, Snapshot};
use crate::store::{Assignment, ClaimOutcome, ClaimRequest, Clock, Store, StoreError};

/// Retry-after hint when no campaign can be asked at all (none exists, or the store cannot
/// list them), and for a campaign this lane is excluded from.
pub const IDLE_RETRY_MS: u64 = 5_000;
/// Retry-after hint after a campaign's claim failed in the store.
pub const CLAIM_FAILED_RETRY_MS: u64 = 1_000;

/// A lane asking for work.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkRequest {
    pub lane: LaneName,
    pub host: HostName,
    pub worker: String,
    /// The arms the lane serves; `None` means every arm.
    pub arms: Option<Vec<ArmId>>,
    /// Campaigns this lane will not take work from (e.g. it failed their identity pins).
    pub exclude: BTreeSet<String>,
    /// What the lane's worker runs, and the campaigns it is limited to.
    pub offer: Arc<WorkerOffer>,
}

/// The answer to one work request.
#[derive(Debug, Clone, PartialEq)]
pub enum Scheduled {
    /// One unit, with the driver it runs under.
    Assigned(Box<Assignment>),
    /// No work anywhere: the most telling reason, and when to ask again.
    NoWork {
        reason: NoWorkReason,
        retry_after_ms: u64,
    },
}

/// Walks the campaigns in id order and claims one unit from the first that has one. A walk
/// over a list read earlier that finds no work walks again over a list read now: a campaign
/// submitted through another replica meanwhile is served at once, not after the lane's
/// retry-after wait, and only lanes that find no work pay for the read.
pub async fn schedule(
    store: &dyn Store,
    clock: &dyn Clock,
    campaigns: &CampaignList,
    req: &WorkRequest,
) -> Scheduled {
    let mut reread = false;
    loop {
        let (list, read_now) = match campaigns.get(store, reread).await {
            Ok(got) => got,
            Err(e) => {
                return Scheduled::NoWork {
                    reason: NoWorkReason::StoreUnavailable {
                        error: e.to_string(),
                    },
                    retry_after_ms: IDLE_RETRY_MS,
                };
            }
        };
        match walk(store, clock, &list, req).await {
            Scheduled::NoWork { .. } if !read_now => reread = true,
            scheduled => return scheduled,
        }
    }
}

/// One walk over `list`.
async fn walk(
    store: &dyn Store,
    clock: &dyn Clock,
    list: &Snapshot,
    req: &WorkRequest,
) -> Scheduled {
    let mut reasons = Vec::new();
    for c in list.ids() {
        // A worker limited to some campaigns (`lanes run`) never hears of the others.
        if !req.offer.takes_campaign(c) {
            continue;
        }
        if req.exclude.contains(c.as_str()) {
            reasons.push((NoWorkReason::LaneExcluded, IDLE_RETRY_MS));
            continue;
        }
        if let Some(settled) = list.settled(c) {
            reasons.push(settled);
            continue;
        }
        let claim = ClaimRequest {
            lane: req.lane.clone(),
            host: req.host.clone(),
            worker: req.worker.clone(),
            arms: req.arms.clone(),
            offer: req.offer.clone(),
            max_units: 1,
        };
        let span = tracing::info_span!(
            "claim",
            campaign = %c,
            lane = %req.lane,
            trial = tracing::field::Empty,
            token = tracing::field::Empty
        );
        let claimed = store
            .claim(c, claim, clock.now_ms())
            .instrument(span.clone())
            .await;
        match claimed {
            Ok(ClaimOutcome::Assigned(units)) => {
                let Some(a) = units.into_iter().next() else {
                    continue;
                };
                if let Some(first) = a.trials.first() {
                    span.record("trial", first.trial.trial_id.as_str());
                    span.record("token", tracing::field::display(&first.token));
                }
                span.in_scope(|| tracing::info!(trials = a.trials.len(), "assigned"));
                return Scheduled::Assigned(Box::new(a));
            }
            Ok(ClaimOutcome::NoWork {
                reason,
                retry_after_ms,
            }) => {
                list.answered(c, &reason, retry_after_ms);
                reasons.push((reason, retry_after_ms));
            }
            // Deleted since the list was read (through another replica): nothing to say.
            Err(StoreError::UnknownCampaign(_)) => continue,
            Err(e) => {
                tracing::warn!(campaign = %c, error = %e, "claim failed");
                reasons.push((
                    NoWorkReason::NothingReady { next_ms: None },
                    CLAIM_FAILED_RETRY_MS,
                ));
            }
        }
    }
    let (reason, retry_after_ms) = most_telling(reasons);
    Scheduled::NoWork {
        reason,
        retry_after_ms,
    }
}

/// Why no campaign had work: the reason that says most about when work may come (a wait on
/// something that ends beats a campaign this lane cannot serve, which beats a stopped one,
/// which beats a done one), and among equals the soonest time to ask again.
pub fn most_telling(reasons: Vec<(NoWorkReason, u64)>) -> (NoWorkReason, u64) {
    reasons
        .into_iter()
        .min_by_key(|(r, after)| (rank(r), *after))
        .unwrap_or((NoWorkReason::NoCampaigns, IDLE_RETRY_MS))
}

/// Lower ranks tell more.
fn rank(r: &NoWorkReason) -> u8 {
    match r {
        NoWorkReason::Phase1Pending
        | NoWorkReason::QuotaWait { .. }
        | NoWorkReason::RateLimited { .. }
        | NoWorkReason::BudgetReserved
        | NoWorkReason::NothingReady { .. }
        | NoWorkReason::CutoffAdmission { .. }
        | NoWorkReason::NoCampaigns
        | NoWorkReason::StoreUnavailable { .. } => 0,
        NoWorkReason::NoMatchingArms
        | NoWorkReason::LaneExcluded
        | NoWorkReason::DriverRefused { .. } => 2,
        NoWorkReason::Stopped { .. } => 3,
        NoWorkReason::Done => 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_common::state::StopReason;

    #[test]
    fn the_most_telling_reason_wins_then_the_soonest_retry() {
        let stopped = NoWorkReason::Stopped {
            stop_reason: Some(StopReason::User),
        };
        let ready = NoWorkReason::NothingReady { next_ms: None };
        assert_eq!(
            most_telling(vec![
                (NoWorkReason::Done, 10),
                (stopped.clone(), 20),
                (NoWorkReason::NoMatchingArms, 30),
                (NoWorkReason::BudgetReserved, 900),
                (ready.clone(), 800),
            ]),
            (ready, 800)
        );
        assert_eq!(
            most_telling(vec![
                (NoWorkReason::Done, 10),
                (stopped.clone(), 20),
                (NoWorkReason::LaneExcluded, 30),
            ]),
            (NoWorkReason::LaneExcluded, 30)
        );
        assert_eq!(
            most_telling(vec![(NoWorkReason::Done, 10), (stopped.clone(), 20)]),
            (stopped, 20)
        );
        assert_eq!(
            most_telling(vec![(NoWorkReason::Done, 10)]),
            (NoWorkReason::Done, 10)
        );
        assert_eq!(
            most_telling(Vec::new()),
            (NoWorkReason::NoCampaigns, IDLE_RETRY_MS)
        );
    }
}
