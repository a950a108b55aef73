//! The baselines measured in the same run, on the same machine and store, so a figure is
//! quoted as a ratio and survives a noisy machine:
//! - Redis: `connections` concurrent connections, each looping EVALSHA of a script that does
//!   `HSETNX` + `ZADD` on fresh keys (the smallest write a claim or an outcome makes), for a
//!   fixed time. Its keys share a random prefix and are deleted afterwards.
//! - Embedded: a raw redb loop of durable commits, one small insert per write transaction,
//!   in a temp file.
//!
//! Also `used_memory` from Redis `INFO memory`, for the memory a campaign's trials take.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

/// The Redis ceiling's script: the smallest write a claim or an outcome makes.
const SCRIPT: &str = "redis.call('HSETNX', KEYS[1], 'f', ARGV[1])\n\
                      redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])\n\
                      return 1";

/// Keys deleted per `UNLINK`.
const UNLINK_BATCH: u64 = 500;

/// Which baseline was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CeilingKind {
    /// EVALSHA of HSETNX + ZADD on fresh keys.
    RedisEvalshaHsetnxZadd,
    /// One small insert per durable redb write transaction.
    RedbDurableCommit,
}

impl CeilingKind {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Self::RedisEvalshaHsetnxZadd => "Redis EVALSHA (HSETNX + ZADD on fresh keys)",
            Self::RedbDurableCommit => "redb durable commits (one insert each)",
        }
    }
}

/// A baseline's figures.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Ceiling {
    pub(crate) kind: CeilingKind,
    /// Concurrent connections (Redis) or writers (redb: one, as redb has one writer).
    pub(crate) connections: u32,
    pub(crate) duration_s: f64,
    pub(crate) ops: u64,
    pub(crate) ops_per_s: f64,
}

async fn connect(url: &str) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(url).context("not a Redis URL")?;
    client
        .get_multiplexed_async_connection()
        .await
        .context("cannot connect to Redis")
}

/// `used_memory` of `INFO memory`, in bytes.
pub(crate) async fn redis_used_memory(url: &str) -> anyhow::Result<u64> {
    let mut c = connect(url).await?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut c)
        .await
        .context("INFO memory")?;
    used_memory(&info).context("INFO memory has no used_memory")
}

fn used_memory(info: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix("used_memory:")?.parse().ok())
}

/// The Redis ceiling: `connections` connections looping EVALSHA for `run`. Its keys are
/// deleted before this returns, also when a loop failed.
pub(crate) async fn redis(url: &str, connections: u32, run: Duration) -> anyhow::Result<Ceiling> {
    let prefix = format!("lanes-bench-ceiling:{{{}}}", random_hex()?);
    let mut conns = Vec::new();
    for _ in 0..connections {
        conns.push(connect(url).await?);
    }
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(SCRIPT)
        .query_async(&mut conns[0])
        .await
        .context("SCRIPT LOAD")?;
    let ops = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut loops = Vec::new();
    for (i, mut c) in conns.into_iter().enumerate() {
        let (sha, prefix, ops) = (sha.clone(), prefix.clone(), ops.clone());
        loops.push(tokio::spawn(async move {
            let mut n = 0u64;
            let mut failed = None;
            while start.elapsed() < run {
                let r: redis::RedisResult<i64> = redis::cmd("EVALSHA")
                    .arg(&sha)
                    .arg(2)
                    .arg(format!("{prefix}:h:{i}:{n}"))
                    .arg(format!("{prefix}:z:{i}:{n}"))
                    .arg(n)
                    .arg(n)
                    .query_async(&mut c)
                    .await;
                // Counted before the check: a key may exist even when the reply was lost.
                n += 1;
                if let Err(e) = r {
                    failed = Some(e);
                    break;
                }
                ops.fetch_add(1, Ordering::Relaxed);
            }
            (c, n, failed)
        }));
    }
    let mut written = Vec::new();
    let mut failure = None;
    for l in loops {
        let (c, n, failed) = l.await.context("a ceiling loop panicked")?;
        written.push((c, n));
        failure = failure.or(failed);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cleaned = delete_keys(&prefix, written).await;
    if let Some(e) = failure {
        return Err(e).context("EVALSHA failed during the ceiling run");
    }
    cleaned?;
    let ops = ops.load(Ordering::Relaxed);
    Ok(Ceiling {
        kind: CeilingKind::RedisEvalshaHsetnxZadd,
        connections,
        duration_s: elapsed,
        ops,
        ops_per_s: ops as f64 / elapsed,
    })
}

/// Deletes every key the loops may have written: `n` of each kind per connection.
async fn delete_keys(
    prefix: &str,
    written: Vec<(redis::aio::MultiplexedConnection, u64)>,
) -> anyhow::Result<()> {
    for (i, (mut c, n)) in written.into_iter().enumerate() {
        let mut from = 0;
        while from < n {
            let to = (from + UNLINK_BATCH).min(n);
            let mut cmd = redis::cmd("UNLINK");
            for k in from..to {
                cmd.arg(format!("{prefix}:h:{i}:{k}"))
                    .arg(format!("{prefix}:z:{i}:{k}"));
            }
            let _: u64 = cmd
                .query_async(&mut c)
                .await
                .context("cannot delete the ceiling's keys")?;
            from = to;
        }
    }
    Ok(())
}

/// The embedded ceiling: durable redb commits of one small insert each, for `run`.
pub(crate) async fn redb(run: Duration) -> anyhow::Result<Ceiling> {
    tokio::task::spawn_blocking(move || redb_loop(run))
        .await
        .context("the redb ceiling panicked")?
}

fn redb_loop(run: Duration) -> anyhow::Result<Ceiling> {
    const TABLE: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("ceiling");
    let dir = tempfile::Builder::new()
        .prefix("lanes-bench-redb-")
        .tempdir()
        .context("cannot create a temp directory")?;
    let db = redb::Database::create(dir.path().join("ceiling.redb"))
        .context("cannot create the redb file")?;
    let value = [7u8; 64];
    let start = Instant::now();
    let mut ops = 0u64;
    while start.elapsed() < run {
        let txn = db.begin_write()?;
        {
            let mut t = txn.open_table(TABLE)?;
            t.insert(ops, value.as_slice())?;
        }
        // The default durability: the commit is on disk when this returns.
        txn.commit()?;
        ops += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok(Ceiling {
        kind: CeilingKind::RedbDurableCommit,
        connections: 1,
        duration_s: elapsed,
        ops,
        ops_per_s: ops as f64 / elapsed,
    })
}

/// 8 random bytes as hex, for names nothing else uses.
pub(crate) fn random_hex() -> anyhow::Result<String> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_used_memory_and_not_its_human_form() {
        let info =
            "# Memory\r\nused_memory_human:1.02M\r\nused_memory:1069016\r\nused_memory_rss:1\r\n";
        assert_eq!(used_memory(info), Some(1_069_016));
        assert_eq!(used_memory("# Memory\r\n"), None);
    }

    #[tokio::test]
    async fn the_redb_ceiling_commits_durably_for_the_given_time() {
        let c = redb(Duration::from_millis(50)).await.unwrap();
        assert!(c.ops > 0);
        assert!(c.ops_per_s > 0.0);
        assert_eq!(c.kind, CeilingKind::RedbDurableCommit);
    }
}
