//! Whether the Redis server keeps what it acknowledged.
//!
//! An outcome is acknowledged only after the commit script returned, so only after Redis
//! applied it. That is durable only with `appendonly yes` and `appendfsync always`: with
//! `everysec`, a Redis crash can lose up to a second of acknowledged outcomes, and with
//! `appendonly no` everything since the last snapshot. At connect the store reads both
//! settings with `CONFIG GET` and refuses to run unless they are durable, or unless
//! `allow_lossy` (`--allow-lossy-store`) is set, in which case it logs what can be lost. A
//! managed Redis that forbids `CONFIG` also needs the flag, and the store says so.
//!
//! Replication does not change that: a master acknowledges before its replicas have the
//! write, and a failover to a replica that missed it loses it. With `--redis-wait N` every
//! acknowledged write waits for N replicas to confirm it ([`Conn::acked`]); then the store also
//! asks for `min-replicas-to-write >= N`, so a master cut off from its replicas refuses
//! writes instead of taking ones that a failover throws away. Behind Sentinels, a store without
//! `--redis-wait` is lossy. Each new master after a failover is checked again, and the master
//! in use once a second (a restart with another configuration, or a `CONFIG SET`, changes
//! them under a running store): one that stops passing is not written to until it passes.
//!
//! [`Conn::acked`]: super::link::Conn::acked

use redis::aio::ConnectionLike;

use super::{is_transient_code, redis_err};
use crate::store::api::StoreError;

/// What the store asks of a master before it writes to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Requirements {
    /// `--allow-lossy-store`: a master that fails a check is used anyway, with a warning.
    pub(crate) allow_lossy: bool,
    /// `--redis-wait N`: the master must refuse writes with fewer than N replicas.
    pub(crate) replicas: Option<u32>,
    /// The master is found through Sentinels, so a failover can happen.
    pub(crate) failover: bool,
}

/// What `CONFIG GET` said about durability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Durability {
    /// `appendonly yes` and `appendfsync always`, and enough `min-replicas-to-write`.
    Durable,
    /// Acknowledged writes can be lost; the text says which.
    Lossy(String),
    /// `CONFIG` is not allowed here (managed Redis), so durability is unknown.
    Unknown(String),
}

/// Refuses a master that can lose acknowledged writes ([`StoreError::NotDurable`], saying
/// what to change), unless `allow_lossy`, which logs what can be lost.
pub(crate) async fn check(
    conn: &mut impl ConnectionLike,
    requirements: Requirements,
) -> Result<(), StoreError> {
    if let Some(what) = judge(durability(conn, requirements).await?, requirements)? {
        tracing::warn!(what = %what, "redis store is not durable: acknowledged outcomes can be lost");
    }
    Ok(())
}

/// Whether the store may write to a master with this durability: refused
/// ([`StoreError::NotDurable`], saying what to change), accepted, or accepted only because of
/// `allow_lossy` (what can be lost, for the caller to log).
pub(crate) fn judge(
    durability: Durability,
    requirements: Requirements,
) -> Result<Option<String>, StoreError> {
    match durability {
        Durability::Durable => Ok(None),
        Durability::Lossy(what) | Durability::Unknown(what) if requirements.allow_lossy => {
            Ok(Some(what))
        }
        Durability::Lossy(what) => Err(StoreError::NotDurable(format!(
            "{what}; or pass --allow-lossy-store to accept the loss"
        ))),
        Durability::Unknown(what) => Err(StoreError::NotDurable(format!(
            "{what}; durability cannot be checked, so pass --allow-lossy-store if the server is configured as the store needs"
        ))),
    }
}

/// Reads `appendonly`, `appendfsync` and, with a `WAIT` policy, `min-replicas-to-write`.
pub(crate) async fn durability(
    conn: &mut impl ConnectionLike,
    requirements: Requirements,
) -> Result<Durability, StoreError> {
    if requirements.failover && requirements.replicas.is_none() {
        return Ok(Durability::Lossy(
            "redis replication is asynchronous: without --redis-wait, an outcome acknowledged just before a failover can be lost".into(),
        ));
    }
    let mut names = vec!["appendonly", "appendfsync"];
    if requirements.replicas.is_some() {
        names.push("min-replicas-to-write");
    }
    let mut values = Vec::new();
    for name in names {
        match redis::cmd("CONFIG")
            .arg("GET")
            .arg(name)
            .query_async::<Vec<String>>(conn)
            .await
        {
            Ok(v) => values.push(v.get(1).cloned().unwrap_or_default()),
            // An outage (a dropped connection, or `LOADING` while a restarted Redis reads its
            // AOF) says nothing about durability.
            Err(e)
                if e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_timeout()
                    || e.code().is_some_and(is_transient_code) =>
            {
                return Err(redis_err(e));
            }
            Err(e) => {
                return Ok(Durability::Unknown(format!(
                    "redis refused CONFIG GET {name} ({e})"
                )));
            }
        }
    }
    let (aof, fsync) = (values[0].as_str(), values[1].as_str());
    Ok(if aof != "yes" {
        Durability::Lossy(format!(
            "redis has appendonly {aof:?}: every write since the last snapshot can be lost; set `appendonly yes` and `appendfsync always`"
        ))
    } else if fsync != "always" {
        Durability::Lossy(format!(
            "redis has appendfsync {fsync:?}: up to a second of acknowledged writes can be lost; set `appendfsync always`"
        ))
    } else if let Some(n) = requirements.replicas {
        let min: u32 = values[2].parse().unwrap_or(0);
        match min >= n {
            true => Durability::Durable,
            false => Durability::Lossy(format!(
                "redis has min-replicas-to-write {min}, below --redis-wait {n}: a master cut off from its replicas keeps taking writes that a failover throws away; set `min-replicas-to-write {n}`"
            )),
        }
    } else {
        Durability::Durable
    })
}
