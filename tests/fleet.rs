//! A fleet for the worker suites: a coordinator on its own durable redis-server, a scratch
//! directory for the workers a test starts against it, and the ledger read straight from the
//! store.

use std::collections::BTreeMap;
use std::sync::Arc;

use lanes_common::ids::CampaignId;
use lanes_common::row::Row;
use lanes_coordinator::store::{RedisOptions, RedisStore, Store, SystemClock};

use crate::coordinator::CoordinatorHandle;
use crate::redis_server::RedisServer;

/// What a worker test runs against; everything stops on drop.
pub struct Fleet {
    pub redis: RedisServer,
    pub store: Arc<dyn Store>,
    pub coord: CoordinatorHandle,
    pub dir: tempfile::TempDir,
}

impl Fleet {
    pub async fn start() -> Self {
        let redis = RedisServer::start();
        let store: Arc<dyn Store> = Arc::new(
            RedisStore::connect(&redis.url(), RedisOptions::default())
                .await
                .expect("connect to the test redis-server"),
        );
        let coord = CoordinatorHandle::start(store.clone(), Arc::new(SystemClock)).await;
        Self {
            redis,
            store,
            coord,
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }
}

/// Every row of campaign `id`, in ledger order.
pub async fn rows(store: &Arc<dyn Store>, id: &str) -> Vec<Row> {
    store
        .rows(&CampaignId::new(id).expect("a campaign id"), 0, usize::MAX)
        .await
        .expect("rows")
}

/// Rows grouped by trial, each trial's in ledger order.
pub fn by_trial(rows: &[Row]) -> BTreeMap<String, Vec<&Row>> {
    let mut m: BTreeMap<String, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        m.entry(r.trial_id.to_string()).or_default().push(r);
    }
    m
}
