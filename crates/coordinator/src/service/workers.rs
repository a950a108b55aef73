//! The workers connected to this replica: who they are, what they run (their offer), and what
//! they last said about their health (for example a broken outbox, while which the worker
//! takes no work). Kept in memory per replica: a worker is listed by the replica its session
//! is on.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lanes_common::policy::WorkerOffer;
use lanes_common::proto as pb;
use lanes_common::spec::CampaignSpec;
use lanes_common::state::CampaignState;
use lanes_common::utc::EpochMs;

use crate::store::Store;

#[derive(Debug, Default)]
pub(crate) struct Registry {
    next: AtomicU64,
    sessions: Mutex<BTreeMap<u64, Listed>>,
}

/// One session's listing.
#[derive(Debug)]
struct Listed {
    info: pb::WorkerInfo,
    offer: Arc<WorkerOffer>,
}

/// A session's place in the registry; dropping the last clone removes it.
#[derive(Debug)]
pub(crate) struct Member {
    registry: Arc<Registry>,
    id: u64,
}

impl Registry {
    fn sessions(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Listed>> {
        // A panic while holding the lock leaves a map that is still whole: keep using it.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lists a newly registered worker until its membership is dropped.
    pub(crate) fn join(
        self: &Arc<Self>,
        info: pb::WorkerInfo,
        offer: Arc<WorkerOffer>,
    ) -> Arc<Member> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.sessions().insert(id, Listed { info, offer });
        Arc::new(Member {
            registry: self.clone(),
            id,
        })
    }

    /// Every connected worker, by worker id, with what it runs.
    pub(crate) fn list(&self) -> Vec<(pb::WorkerInfo, Arc<WorkerOffer>)> {
        let mut all: Vec<(pb::WorkerInfo, Arc<WorkerOffer>)> = self
            .sessions()
            .values()
            .map(|l| (l.info.clone(), l.offer.clone()))
            .collect();
        all.sort_by(|a, b| a.0.worker_id.cmp(&b.0.worker_id));
        all
    }
}

impl Registry {
    /// The workers of this replica that do not run `spec`'s driver, and why. A worker limited
    /// to other campaigns (`lanes run`) is not listed: it never asks for this one.
    pub(crate) fn refusals(&self, spec: &CampaignSpec) -> Vec<pb::WorkerRefusal> {
        self.list()
            .into_iter()
            .filter(|(_, offer)| offer.takes_campaign(&spec.id))
            .filter_map(|(info, offer)| {
                offer.refusal(spec).map(|r| pb::WorkerRefusal {
                    worker_id: info.worker_id,
                    reason: r.to_string(),
                })
            })
            .collect()
    }

    /// Every connected worker, with the running campaigns it does not serve and why.
    pub(crate) async fn describe(&self, store: &dyn Store, now: EpochMs) -> Vec<pb::WorkerInfo> {
        let mut running = Vec::new();
        for id in store.list().await.unwrap_or_default() {
            let is_running = store
                .status(&id, now)
                .await
                .is_ok_and(|st| st.state == CampaignState::Running);
            if is_running && let Ok(spec) = store.spec(&id).await {
                running.push(spec);
            }
        }
        self.list()
            .into_iter()
            .map(|(mut info, offer)| {
                info.refused = running
                    .iter()
                    .filter(|spec| offer.takes_campaign(&spec.id))
                    .filter_map(|spec| {
                        offer.refusal(spec).map(|r| pb::CampaignRefusal {
                            campaign: spec.id.to_string(),
                            reason: r.to_string(),
                        })
                    })
                    .collect();
                info
            })
            .collect()
    }
}

/// What a worker runs, as `lanes workers` shows it.
pub(crate) fn describe_offer(info: &mut pb::WorkerInfo, offer: &WorkerOffer) {
    info.drivers = offer.drivers.keys().map(ToString::to_string).collect();
    info.campaign_commands = offer.campaign_commands;
    info.driver_override = offer.driver_override;
    info.containers = offer.containers;
    info.campaigns = offer
        .campaigns
        .iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
}

impl Member {
    /// Records what the worker said about its health.
    pub(crate) fn update(&self, status: &pb::WorkerStatus) {
        if let Some(Listed { info: w, .. }) = self.registry.sessions().get_mut(&self.id) {
            w.outbox_broken = status.outbox_broken;
            w.unpersisted = status.unpersisted;
            w.detail = status.detail.chars().take(1024).collect();
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.registry.sessions().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: &str) -> pb::WorkerInfo {
        pb::WorkerInfo {
            worker_id: id.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_member_is_listed_until_its_session_drops_it() {
        let r = Arc::new(Registry::default());
        let b = r.join(info("b"), Arc::default());
        let a = r.join(info("a"), Arc::default());
        b.update(&pb::WorkerStatus {
            outbox_broken: true,
            unpersisted: 2,
            detail: "No space left on device".into(),
        });
        let listed = r.list();
        assert_eq!(listed[0].0.worker_id, "a");
        assert!(listed[1].0.outbox_broken && listed[1].0.unpersisted == 2);
        drop(b);
        assert_eq!(r.list().len(), 1);
        drop(a);
        assert!(r.list().is_empty());
    }
}
