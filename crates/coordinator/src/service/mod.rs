//! The gRPC services: thin handlers that turn a request into a store operation, wait for the
//! answer and map errors in one place (`grpc_status`).

pub(crate) mod artifacts;
pub(crate) mod bundles;
pub(crate) mod campaign;
pub(crate) mod in_flight;
pub(crate) mod lane;
pub(crate) mod leases;
pub(crate) mod limits;
mod login_link;
mod register;
mod renew;
mod retry;
pub(crate) mod session;
pub(crate) mod trace;
pub(crate) mod workers;

use std::sync::Arc;
use std::time::Duration;

use crate::store::{Clock, Store};

/// What every handler needs: the store, the clock, how often streams poll the store, and the
/// request limits.
#[derive(Clone)]
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    /// How often Watch, Rows (follow) poll the store for news. Polling the store (not a local
    /// channel) is what makes them work across replicas.
    pub(crate) poll: Duration,
    /// Fired when the coordinator shuts down: streams end, lanes are told to reconnect.
    pub(crate) shutdown: tokio::sync::watch::Receiver<bool>,
    /// The workers with a session on this replica.
    pub(crate) workers: Arc<workers::Registry>,
    /// `true` while this replica reaches its store; lane sessions leave when it turns false.
    pub(crate) store_up: tokio::sync::watch::Receiver<bool>,
    /// Lane sessions must present a client certificate naming their worker id.
    pub(crate) mutual_tls: bool,
    /// Issues and checks the lease secrets that bind a lease to its worker.
    pub(crate) leases: Arc<leases::Leases>,
    /// The trial cap, the assignment size, concurrent Submits, streams per token.
    pub(crate) limits: Arc<limits::Limits>,
    /// Claim latency goes here when metrics are on.
    pub(crate) metrics: Option<Arc<crate::metrics::CoordinatorMetrics>>,
    /// Where this replica's dashboard is, for login links; `None` when it serves none.
    pub(crate) links: Option<Arc<crate::login::Links>>,
    /// The campaigns claims walk, read from the store at most every 100 ms.
    pub(crate) campaigns: Arc<crate::campaign_list::CampaignList>,
    /// Where workers upload attempts' files (`--artifact-store`), read back and deleted here.
    pub(crate) artifact_store: Option<lanes_artifacts::ArtifactStore>,
}

impl Shared {
    pub(crate) fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// A work request's claim, which began at `started`, is answered.
    pub(crate) fn claimed(&self, started: std::time::Instant) {
        if let Some(m) = &self.metrics {
            m.observe_claim(started.elapsed());
        }
    }
}
