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
//! Replica failover can lose writes the primary acknowledged but had not replicated.
//! `wait_replicas = Some(n)` issues `WAIT n <timeout>` after each commit and logs when fewer
//! replicas confirmed; it narrows that window but cannot close it.

use super::{RedisStore, redis_err};
use crate::store::api::StoreError;

/// What `CONFIG GET` said about durability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Durability {
    /// `appendonly yes` and `appendfsync always`.
    Durable,
    /// Acknowledged writes can be lost; the text says which.
    Lossy(String),
    /// `CONFIG` is not allowed here (managed Redis), so durability is unknown.
    Unknown(String),
}

impl RedisStore {
    /// Refuses a server that can lose acknowledged writes, unless `allow_lossy`.
    pub(super) async fn check_durability(&self) -> Result<(), StoreError> {
        match self.durability().await? {
            Durability::Durable => {}
            Durability::Lossy(what) | Durability::Unknown(what) if self.opts.allow_lossy => {
                tracing::warn!(what = %what, "redis store is not durable: acknowledged outcomes can be lost on a redis crash");
            }
            Durability::Lossy(what) => {
                return Err(StoreError::NotDurable(format!(
                    "{what}; set `appendonly yes` and `appendfsync always`, or pass --allow-lossy-store to accept the loss"
                )));
            }
            Durability::Unknown(what) => {
                return Err(StoreError::NotDurable(format!(
                    "{what}; durability cannot be checked, so pass --allow-lossy-store if the server is configured with appendfsync always"
                )));
            }
        }
        Ok(())
    }

    /// Reads `appendonly` and `appendfsync`.
    pub async fn durability(&self) -> Result<Durability, StoreError> {
        let get = |name: &'static str| {
            let mut conn = self.conn.clone();
            async move {
                redis::cmd("CONFIG")
                    .arg("GET")
                    .arg(name)
                    .query_async::<Vec<String>>(&mut conn)
                    .await
            }
        };
        let aof = get("appendonly").await;
        let fsync = get("appendfsync").await;
        match (aof, fsync) {
            (Ok(a), Ok(f)) => {
                let aof = a.get(1).map(String::as_str).unwrap_or("");
                let fsync = f.get(1).map(String::as_str).unwrap_or("");
                Ok(if aof != "yes" {
                    Durability::Lossy(format!(
                        "redis has appendonly {aof:?}: every write since the last snapshot can be lost"
                    ))
                } else if fsync != "always" {
                    Durability::Lossy(format!(
                        "redis has appendfsync {fsync:?}: up to a second of acknowledged writes can be lost"
                    ))
                } else {
                    Durability::Durable
                })
            }
            (Err(e), _) | (_, Err(e)) if e.is_io_error() || e.is_connection_dropped() => {
                Err(redis_err(e))
            }
            (Err(e), _) | (_, Err(e)) => Ok(Durability::Unknown(format!(
                "redis refused CONFIG GET ({e})"
            ))),
        }
    }
}
