//! Reading a campaign's streams (rows, events) in pages.
//!
//! Since layout 3 an entry holds every item one commit wrote to its stream, each under its
//! seq in decimal, and its id is `0-<seq+1>` of its last item. Layout 2 wrote one entry per
//! item, its body under the field `j` and its seq in the id; a store migrated from layout 2
//! keeps those entries, and they are read as they are.

use redis::streams::StreamId;

use super::keys::{self, stream_id};
use super::{RedisStore, redis_err};
use crate::store::api::StoreError;

/// Stream entries per XRANGE call.
const STREAM_PAGE: usize = 10_000;

/// The field of a layout 2 entry's body.
const V2_BODY: &str = "j";

/// An entry's items, in seq order: `(seq, body)`.
fn items(entry: StreamId) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("stream entry {}: {what}", entry.id));
    let mut out = Vec::with_capacity(entry.map.len());
    for (field, value) in &entry.map {
        let seq = if field == V2_BODY {
            keys::seq_of(&entry.id).ok_or_else(|| corrupt("its id is not a seq"))?
        } else {
            field
                .parse::<u64>()
                .map_err(|_| corrupt(&format!("field {field:?} is not a seq")))?
        };
        let body: Vec<u8> =
            redis::from_redis_value_ref(value).map_err(|e| corrupt(&format!("item {seq}: {e}")))?;
        out.push((seq, body));
    }
    if out.is_empty() {
        return Err(corrupt("it holds no item"));
    }
    out.sort_unstable_by_key(|(seq, _)| *seq);
    Ok(out)
}

impl RedisStore {
    /// Reads up to `limit` items with a seq of `from` or more, in seq order, in pages of
    /// [`STREAM_PAGE`] entries at most: a large `limit` is honoured in full, never silently capped.
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
            // The entry holding `next` has an id of `next`'s or above (its last item's), and
            // every entry from there holds at least one item to take: `want` entries suffice.
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
                for (seq, body) in items(entry)? {
                    if seq < next || out.len() == limit {
                        continue;
                    }
                    out.push(
                        serde_json::from_slice(&body)
                            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                    );
                    next = seq + 1;
                }
            }
            if got < want {
                break;
            }
        }
        Ok(out)
    }
}
