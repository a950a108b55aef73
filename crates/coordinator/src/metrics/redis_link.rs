//! The Redis store's link to its master, read when scraped: the master in use, failovers
//! followed, acknowledged writes whose `WAIT` saw too few replicas, and its commits: how many,
//! how long they took, and how long rounds waited on them.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::store::RedisStore;

/// The collector of a Redis store's link metrics.
#[derive(Debug)]
pub struct RedisLinkMetrics(RedisStore);

impl RedisLinkMetrics {
    /// Registers the link metrics of `store` (any clone of the store that serves).
    pub fn register(store: RedisStore, registry: &mut Registry) {
        registry.register_collector(Box::new(Self(store)));
    }
}

impl Collector for RedisLinkMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stats = self.0.stats();
        let master = ConstGauge::new(1i64);
        let mut metric = encoder.encode_descriptor(
            "lanes_store_redis_master",
            "The Redis master this replica writes to (host:port in the addr label)",
            None,
            master.metric_type(),
        )?;
        master.encode(metric.encode_family(&[("addr", self.0.master())])?)?;
        for (name, help, n) in [
            (
                "lanes_store_redis_failovers",
                "Times this replica followed the Redis master to another node",
                stats.failovers,
            ),
            (
                "lanes_store_redis_wait_timeouts",
                "Writes not acknowledged because fewer replicas than --redis-wait confirmed them in time",
                stats.wait_timeouts,
            ),
            (
                "lanes_store_redis_commits",
                "Commit scripts sent or attempted (a conflict's too)",
                stats.commits,
            ),
        ] {
            let counter = ConstCounter::new(n);
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
        for (name, help, us) in [
            (
                "lanes_store_redis_commit_seconds",
                "Commit scripts' time from send to reply (with --redis-wait, the replicas' confirmation included), summed: over lanes_store_redis_commits_total, a commit's mean latency",
                stats.commit_us,
            ),
            (
                "lanes_store_redis_round_wait_seconds",
                "Time campaigns' round drivers waited for commits in flight to end, summed",
                stats.round_wait_us,
            ),
        ] {
            let counter = ConstCounter::new(us as f64 / 1e6);
            let metric = encoder.encode_descriptor(name, help, None, counter.metric_type())?;
            counter.encode(metric)?;
        }
        Ok(())
    }
}
