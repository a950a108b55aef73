//! Reading a campaign's streams (rows, events) in pages.

use super::keys::{self, stream_id};
use super::{RedisStore, redis_err};
use crate::store::api::StoreError;

/// Stream entries per XRANGE call.
const STREAM_PAGE: usize = 10_000;

impl RedisStore {
    /// Reads up to `limit` entries from `from` on, in pages of [`STREAM_PAGE`]: a large
    /// `limit` is honoured in full, never silently capped.
    pub(super) async fn read_stream<T: serde::de::DeserializeOwned>(
        &self,
        key: String,
        from: u64,
        limit: usize,
    ) -> Result<Vec<T>, StoreError> {
        let mut conn = self.conn.clone();
        let mut out = Vec::new();
        let mut next = from;
        while out.len() < limit {
            let want = (limit - out.len()).min(STREAM_PAGE);
            let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                .arg(&key)
                .arg(stream_id(next))
                .arg("+")
                .arg("COUNT")
                .arg(want)
                .query_async(&mut conn)
                .await
                .map_err(redis_err)?;
            let got = reply.ids.len();
            for entry in reply.ids {
                let seq = keys::seq_of(&entry.id).ok_or_else(|| {
                    StoreError::Corrupt(format!("stream entry id {} is not a seq", entry.id))
                })?;
                let bytes: Vec<u8> = entry.get("j").ok_or_else(|| {
                    StoreError::Corrupt(format!("stream entry {} has no body", entry.id))
                })?;
                out.push(
                    serde_json::from_slice(&bytes)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                );
                next = seq + 1;
            }
            if got < want {
                break;
            }
        }
        Ok(out)
    }
}
