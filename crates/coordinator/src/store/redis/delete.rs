//! Deleting a campaign from Redis: under its lock, check that it runs nothing, list its keys
//! (one hash tag, so one `SCAN` pattern), then remove them all in one script that first
//! checks the version is still the one read. Last, its id leaves the set of campaigns.

use lanes_common::ids::CampaignId;

use super::keys::{CAMPAIGNS, Keys};
use super::stats::Conn;
use super::{RedisStore, redis_err};
use crate::store::api::{Deleted, StoreError};
use crate::store::engine;
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
    let mut found = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{}*", keys.prefix()))
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .map_err(redis_err)?;
        found.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    found.sort();
    found.dedup();
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
