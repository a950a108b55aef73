//! The workers connected to this replica: who they are and what they last said about their
//! health (for example a broken outbox, while which the worker takes no work). Kept in memory
//! per replica: a worker is listed by the replica its session is on.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lanes_common::proto as pb;

#[derive(Debug, Default)]
pub(crate) struct Registry {
    next: AtomicU64,
    sessions: Mutex<BTreeMap<u64, pb::WorkerInfo>>,
}

/// A session's place in the registry; dropping the last clone removes it.
#[derive(Debug)]
pub(crate) struct Member {
    registry: Arc<Registry>,
    id: u64,
}

impl Registry {
    fn sessions(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, pb::WorkerInfo>> {
        // A panic while holding the lock leaves a map that is still whole: keep using it.
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lists a newly registered worker until its membership is dropped.
    pub(crate) fn join(self: &Arc<Self>, info: pb::WorkerInfo) -> Arc<Member> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.sessions().insert(id, info);
        Arc::new(Member {
            registry: self.clone(),
            id,
        })
    }

    /// Every connected worker, by worker id.
    pub(crate) fn list(&self) -> Vec<pb::WorkerInfo> {
        let mut all: Vec<pb::WorkerInfo> = self.sessions().values().cloned().collect();
        all.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        all
    }
}

impl Member {
    /// Records what the worker said about its health.
    pub(crate) fn update(&self, status: &pb::WorkerStatus) {
        if let Some(w) = self.registry.sessions().get_mut(&self.id) {
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
        let b = r.join(info("b"));
        let a = r.join(info("a"));
        b.update(&pb::WorkerStatus {
            outbox_broken: true,
            unpersisted: 2,
            detail: "No space left on device".into(),
        });
        let listed = r.list();
        assert_eq!(listed[0].worker_id, "a");
        assert!(listed[1].outbox_broken && listed[1].unpersisted == 2);
        drop(b);
        assert_eq!(r.list().len(), 1);
        drop(a);
        assert!(r.list().is_empty());
    }
}
