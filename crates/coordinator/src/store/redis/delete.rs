//! Deleting a campaign from Redis: under its lock, check that it runs nothing, name its keys
//! (the fixed ones, one per ready queue it ever had, two per arm), then remove them all in one
//! script that first checks the version is still the one read. No `SCAN`: on a large shared
//! Redis it would walk every key while the lock runs out. (A large submit's staging keys,
//! left only by a crash mid-submit, expire by themselves.) Last, its id leaves the set of
//! campaigns, unless a submit has already reused it.

use lanes_common::ids::CampaignId;

use super::conn::Conn;
use super::keys::{CAMPAIGNS, Keys};
use super::{RedisStore, redis_err};
use crate::store::api::{Deleted, StoreError};
use crate::store::engine;
use crate::store::model::{Queue, UnknownQueue};
use crate::store::tx::R;

/// Attempts before giving up when the version keeps moving under the delete.
const ATTEMPTS: u32 = 5;

impl RedisStore {
    pub(super) async fn delete_campaign(&self, campaign: &CampaignId) -> R<Deleted> {
        let keys = Keys::new(campaign.as_str());
        for _ in 0..ATTEMPTS {
            let token = self.lock(&keys, campaign.as_str()).await?;
            let mut conn = self.conn.clone();
            match delete_locked(&mut conn, campaign, &keys, &token).await {
                Ok(Some(deleted)) => {
                    let _: i64 = redis::cmd("SREM")
                        .arg(CAMPAIGNS)
                        .arg(campaign.as_str())
                        .query_async(&mut conn)
                        .await
                        .map_err(redis_err)?;
                    // A submit of the same id between the script and the SREM: keep it listed.
                    let back: bool = redis::cmd("EXISTS")
                        .arg(keys.meta())
                        .query_async(&mut conn)
                        .await
                        .map_err(redis_err)?;
                    if back {
                        let _: i64 = redis::cmd("SADD")
                            .arg(CAMPAIGNS)
                            .arg(campaign.as_str())
                            .query_async(&mut conn)
                            .await
                            .map_err(redis_err)?;
                    }
                    // Answered only once on the replicas: a failover must not bring it back.
                    conn.replicated().await.map_err(redis_err)?;
                    return Ok(deleted);
                }
                Ok(None) => super::unlock(&mut conn, &keys, &token).await,
                Err(e) => {
                    super::unlock(&mut conn, &keys, &token).await;
                    return Err(e);
                }
            }
        }
        Err(StoreError::Unavailable(format!(
            "campaign {campaign} kept changing during its delete"
        )))
    }
}

/// `None` when the version moved between the reads and the script.
async fn delete_locked(
    conn: &mut Conn,
    campaign: &CampaignId,
    keys: &Keys,
    token: &str,
) -> R<Option<Deleted>> {
    let version: Option<String> = redis::cmd("GET")
        .arg(keys.version())
        .query_async(conn)
        .await
        .map_err(redis_err)?;
    let meta = super::meta::read(conn, keys)
        .await?
        .ok_or_else(|| StoreError::UnknownCampaign(campaign.clone()))?;
    let deleted = engine::deletable(&meta, campaign)?;
    let queues: Vec<String> = redis::cmd("SMEMBERS")
        .arg(keys.queues())
        .query_async(conn)
        .await
        .map_err(redis_err)?;
    let mut found = vec![
        keys.meta(),
        keys.spec(),
        keys.seen(),
        keys.block_walls(),
        keys.tasks(),
        keys.task_pos(),
        keys.trials(),
        keys.leases(),
        keys.deadlines(),
        keys.queues(),
        keys.delayed(),
        keys.tokens(),
        keys.scored(),
        keys.results().to_string(),
        keys.events().to_string(),
        keys.blocks(),
    ];
    for arm in &meta.spec.arms {
        found.push(keys.arm_costs(&arm.id));
        found.push(keys.arm_walls(&arm.id));
    }
    for name in &queues {
        let queue: Queue = name
            .parse()
            .map_err(|e: UnknownQueue| StoreError::Corrupt(e.to_string()))?;
        found.push(keys.ready(&queue));
    }
    let (version_key, lock_key) = (keys.version(), keys.lock());
    let script = redis::Script::new(include_str!("delete.lua"));
    let mut call = script.prepare_invoke();
    call.key(&version_key).key(&lock_key);
    for k in found
        .iter()
        .filter(|k| **k != version_key && **k != lock_key)
    {
        call.key(k);
    }
    call.arg(version.unwrap_or_else(|| "0".into())).arg(token);
    let done: i64 = call.invoke_async(conn).await.map_err(redis_err)?;
    Ok((done >= 0).then_some(deleted))
}
