//! Values that belong to no campaign: the campaign index, the lease key, dashboard login
//! codes and task folders. Each is one or two plain commands, outside the campaigns' rounds.

use lanes_common::ids::CampaignId;
use lanes_common::lease::LeaseKey;
use lanes_common::utc::EpochMs;

use super::keys::{CAMPAIGNS, Keys, LEASE_KEY, bundle, login_code};
use super::{RedisStore, redis_err};
use crate::store::api::{LoginGrant, StoreError};
use crate::store::tx::R;

impl RedisStore {
    /// Lists a campaign id in the index, before its first commit: the index lives outside the
    /// campaign's slot, so it cannot join the commit script. A listed id whose submit never
    /// committed has no meta and [`Self::campaign_ids`] skips it; the other order could commit
    /// a campaign that no claim or reap ever sees, while telling the client its submit failed.
    pub(super) async fn list_campaign(&self, id: &CampaignId) -> R<()> {
        let mut conn = self.conn.clone();
        redis::cmd("SADD")
            .arg(CAMPAIGNS)
            .arg(id.as_str())
            .query_async::<()>(&mut conn)
            .await
            .map_err(redis_err)
    }

    /// Committed campaign ids, in id order.
    pub(super) async fn campaign_ids(&self) -> R<Vec<CampaignId>> {
        let mut conn = self.conn.clone();
        let mut ids: Vec<String> = redis::cmd("SMEMBERS")
            .arg(CAMPAIGNS)
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        ids.sort();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // Only committed campaigns: an id is listed just before its first commit.
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("EXISTS").arg(Keys::new(id).meta());
        }
        let exists: Vec<bool> = pipe.query_async(&mut conn).await.map_err(redis_err)?;
        ids.into_iter()
            .zip(exists)
            .filter(|(_, e)| *e)
            .map(|(id, _)| CampaignId::new(id).map_err(|e| StoreError::Corrupt(e.to_string())))
            .collect()
    }

    pub(super) async fn ping_server(&self) -> R<()> {
        let mut conn = self.conn.clone();
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map(|_| ())
            .map_err(redis_err)
    }

    /// The stored lease key, `fresh` if none was there.
    pub(super) async fn keep_lease_key(&self, fresh: LeaseKey) -> R<LeaseKey> {
        let mut conn = self.conn.clone();
        // SET NX: the first replica's key wins; every replica then reads the same one. The SET
        // is acknowledged like a commit: a key lost in a failover would void every lease.
        let _: Option<String> = conn
            .acked(
                redis::cmd("SET")
                    .arg(LEASE_KEY)
                    .arg(fresh.to_hex())
                    .arg("NX"),
            )
            .await
            .map_err(redis_err)?;
        let stored: Option<String> = redis::cmd("GET")
            .arg(LEASE_KEY)
            .query_async(&mut conn)
            .await
            .map_err(redis_err)?;
        stored
            .as_deref()
            .and_then(LeaseKey::from_hex)
            .ok_or_else(|| StoreError::Corrupt(format!("{LEASE_KEY} is not 32 bytes of hex")))
    }

    pub(super) async fn put_code(
        &self,
        digest: [u8; 32],
        grant: LoginGrant,
        now_ms: EpochMs,
    ) -> R<()> {
        let ttl = grant.expires_ms - now_ms;
        if ttl <= 0 {
            return Ok(());
        }
        let value =
            serde_json::to_string(&grant).map_err(|e| StoreError::Backend(e.to_string()))?;
        let mut conn = self.conn.clone();
        conn.acked::<()>(
            redis::cmd("SET")
                .arg(login_code(&digest))
                .arg(value)
                .arg("PX")
                .arg(ttl),
        )
        .await
        .map_err(redis_err)
    }

    pub(super) async fn take_code(
        &self,
        digest: [u8; 32],
        now_ms: EpochMs,
    ) -> R<Option<LoginGrant>> {
        let mut conn = self.conn.clone();
        // Acknowledged like a commit: a failover must not make a used code usable again.
        let taken: Option<String> = conn
            .acked(redis::cmd("GETDEL").arg(login_code(&digest)))
            .await
            .map_err(redis_err)?;
        let Some(text) = taken else { return Ok(None) };
        let grant: LoginGrant =
            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        // PX expires it on Redis's clock; ours decides too, so both stores agree.
        Ok((grant.expires_ms > now_ms).then_some(grant))
    }

    pub(super) async fn missing(&self, digests: Vec<String>) -> R<Vec<String>> {
        if digests.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        for d in &digests {
            pipe.cmd("EXISTS").arg(bundle(d));
        }
        let kept: Vec<bool> = pipe.query_async(&mut conn).await.map_err(redis_err)?;
        Ok(digests
            .into_iter()
            .zip(kept)
            .filter(|(_, k)| !k)
            .map(|(d, _)| d)
            .collect())
    }

    pub(super) async fn keep_bundle(&self, digest: String, encoded: Vec<u8>) -> R<bool> {
        let mut conn = self.conn.clone();
        // Acknowledged like a commit: the submit that names it must never outlive it.
        let set: Option<String> = conn
            .acked(
                redis::cmd("SET")
                    .arg(bundle(&digest))
                    .arg(encoded)
                    .arg("NX"),
            )
            .await
            .map_err(redis_err)?;
        Ok(set.is_some())
    }

    pub(super) async fn bundle_bytes(&self, digest: String) -> R<Option<Vec<u8>>> {
        let mut conn = self.conn.clone();
        redis::cmd("GET")
            .arg(bundle(&digest))
            .query_async(&mut conn)
            .await
            .map_err(redis_err)
    }
}
