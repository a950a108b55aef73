//! A [`Store`] that times each operation into `lanes_store_op_duration_seconds`, by
//! operation kind and backend, and passes it through.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use super::api::{RedisLink, StoreError};
use super::{Answer, CommitObserver, Op, Store};
use crate::metrics::CoordinatorMetrics;

/// Which backend a store runs on: a label of the store metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreBackend {
    Embedded,
    Redis,
}

impl StoreBackend {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Embedded => "embedded",
            Self::Redis => "redis",
        }
    }
}

/// `inner`, timed.
pub struct MeteredStore {
    inner: Arc<dyn Store>,
    backend: StoreBackend,
    metrics: Arc<CoordinatorMetrics>,
}

impl MeteredStore {
    pub fn new(
        inner: Arc<dyn Store>,
        backend: StoreBackend,
        metrics: Arc<CoordinatorMetrics>,
    ) -> Self {
        Self {
            inner,
            backend,
            metrics,
        }
    }
}

#[async_trait]
impl Store for MeteredStore {
    async fn execute(&self, op: Op) -> Result<Answer, StoreError> {
        let (kind, started) = (op.kind(), Instant::now());
        let out = self.inner.execute(op).await;
        self.metrics
            .observe_store_op(kind, self.backend, started.elapsed());
        out
    }

    fn set_observer(&self, observer: Arc<dyn CommitObserver>) {
        self.inner.set_observer(observer);
    }

    fn redis_link(&self) -> Option<RedisLink> {
        self.inner.redis_link()
    }
}
