//! Reading a campaign's streams (rows, events) in pages.
//!
//! Since layout 3 an entry holds every item one commit wrote to its stream (up to a
//! thousand), and its id is `0-<seq+1>` of its last item. Layout 4 packs them into one
//! compressed field (`packed.rs`); layout 3 stored each under its seq in decimal. Layout 2
//! wrote one entry per item, its body under the field `j` and its seq in the id. A store
//! migrated from an older layout keeps its entries, and they are read as they are.

use redis::streams::StreamId;

use super::keys::{self, ENTRY_ITEMS};
use super::packed;
use super::{RedisStore, redis_err};
use crate::store::api::StoreError;

/// Items a page reads at most (with the rest of the entry that holds its last).
const STREAM_PAGE: usize = 10_000;

/// The field of a layout 2 entry's body.
const V2_BODY: &str = "j";

/// An entry's items, in seq order: `(seq, body)`.
fn items(entry: StreamId) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("stream entry {}: {what}", entry.id));
    let mut out = Vec::with_capacity(entry.map.len());
    for (field, value) in &entry.map {
        if field == packed::FIELD {
            let block: Vec<u8> = redis::from_redis_value_ref(value)
                .map_err(|e| corrupt(&format!("its packed items: {e}")))?;
            out.extend(
                packed::unpack(&block).map_err(|e| corrupt(&format!("its packed items: {e}")))?,
            );
            continue;
        }
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
    out.sort_unstable_by_key(|(seq, _)| *seq);
    // What the reader's range bound relies on: at most ENTRY_ITEMS items, each once, the
    // last the one the id names.
    let Some(&(last, _)) = out.last() else {
        return Err(corrupt("it holds no item"));
    };
    if out.len() > ENTRY_ITEMS {
        return Err(corrupt(&format!("it holds more than {ENTRY_ITEMS} items")));
    }
    if let Some(w) = out.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(corrupt(&format!("it holds seq {} twice", w[0].0)));
    }
    if keys::seq_of(&entry.id) != Some(last) {
        return Err(corrupt(&format!(
            "its last item is seq {last}, not the one its id names"
        )));
    }
    Ok(out)
}

impl RedisStore {
    /// Reads up to `limit` items with a seq of `from` or more, in seq order, a page of at most
    /// [`STREAM_PAGE`] items (and the rest of an entry) per `XRANGE`: a large `limit` is
    /// honoured in full, never silently capped.
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
            // No item has the seq u64::MAX: its id would be past the last one.
            let Some(first) = next.checked_add(1) else {
                break;
            };
            // Seqs have no gaps, and an entry holds at most ENTRY_ITEMS consecutive ones under
            // the id of its last: the entries that hold seqs `next ..= next + want - 1` have
            // ids from `next`'s to that of `next + want - 1 + ENTRY_ITEMS - 1`. Bounding the
            // range there, not at `+`, keeps a page within `want + ENTRY_ITEMS` items however
            // many items the entries hold.
            let want = (limit - out.len()).min(STREAM_PAGE);
            let last = next
                .saturating_add(want as u64 - 1)
                .saturating_add(ENTRY_ITEMS as u64 - 1)
                .saturating_add(1);
            let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                .arg(&key)
                .arg(format!("0-{first}"))
                .arg(format!("0-{last}"))
                .arg("COUNT")
                .arg(want)
                .query_async(&mut conn)
                .await
                .map_err(redis_err)?;
            if reply.ids.is_empty() {
                // Nothing holds `next`: the stream ends before it.
                break;
            }
            let (taken, from_id) = (out.len(), reply.ids[0].id.clone());
            'entries: for entry in reply.ids {
                for (seq, body) in items(entry)? {
                    if seq < next {
                        continue;
                    }
                    out.push(
                        serde_json::from_slice(&body)
                            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                    );
                    // No item has the seq u64::MAX (its entry's id would be past the last).
                    next = seq + 1;
                    if out.len() == limit {
                        break 'entries;
                    }
                }
            }
            if out.len() == taken {
                // An entry's id is that of its last item: one at or past `next`'s id holds
                // an item to take. Stop rather than ask for the same page again.
                return Err(StoreError::Corrupt(format!(
                    "{key}: the entries from {from_id} hold no item from seq {next} on"
                )));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use lanes_common::ids::CampaignId;
    use lanes_tests::redis_server::RedisServer;

    use crate::store::api::{Event, EventKind};
    use crate::store::{RedisOptions, RedisStore, Store, StoreError};

    const KEY: &str = "lanes:{c:s}:events";

    fn body(seq: u64) -> String {
        let event = Event {
            seq,
            at_ms: 0,
            kind: EventKind::CampaignDone,
        };
        serde_json::to_string(&event).expect("an event serializes")
    }

    /// Writes an entry holding `seqs` under the id `0-<id>`.
    fn xadd(server: &RedisServer, id: u64, seqs: impl Iterator<Item = u64>) {
        let fields: Vec<(String, String)> = seqs.map(|s| (s.to_string(), body(s))).collect();
        let mut args = vec!["XADD".to_owned(), KEY.to_owned(), format!("0-{id}")];
        for (f, v) in fields {
            args.extend([f, v]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let reply = server.command(&args);
        assert!(!reply.starts_with('-'), "XADD {id}: {reply}");
    }

    /// Writes an entry holding `seqs` packed (layout 4) under the id `0-<id>`.
    async fn xadd_packed(server: &RedisServer, id: u64, seqs: impl Iterator<Item = u64>) {
        let bodies: Vec<(u64, String)> = seqs.map(|s| (s, body(s))).collect();
        let block = super::packed::pack(bodies.iter().map(|(s, b)| (*s, b.as_bytes())));
        let mut conn = redis::Client::open(server.url())
            .expect("a client")
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        let _: String = redis::cmd("XADD")
            .arg(KEY)
            .arg(format!("0-{id}"))
            .arg(super::packed::FIELD)
            .arg(block)
            .query_async(&mut conn)
            .await
            .expect("XADD");
    }

    async fn seqs(store: &RedisStore, from: u64, limit: usize) -> Result<Vec<u64>, StoreError> {
        let c = CampaignId::new("s").expect("an id");
        Ok(store
            .events(&c, from, limit)
            .await?
            .into_iter()
            .map(|e| e.seq)
            .collect())
    }

    /// Entries of a thousand items are read from any seq, a page at a time, and a read from
    /// the largest seq (whose id would be past the last one) reads nothing instead of
    /// wrapping around to the start.
    #[tokio::test]
    async fn full_entries_read_from_any_seq_and_the_largest_seq_reads_nothing() {
        let server = RedisServer::start();
        for e in 0..3u64 {
            xadd(&server, (e + 1) * 1000, e * 1000..(e + 1) * 1000);
        }
        let store = RedisStore::connect(&server.url(), RedisOptions::default())
            .await
            .expect("connect");
        assert_eq!(
            seqs(&store, 0, usize::MAX).await.expect("all"),
            (0..3000).collect::<Vec<_>>()
        );
        assert_eq!(
            seqs(&store, 1500, 10).await.expect("ten"),
            (1500..1510).collect::<Vec<_>>()
        );
        assert_eq!(
            seqs(&store, 999, 2).await.expect("across entries"),
            [999, 1000]
        );
        let none: [u64; 0] = [];
        assert_eq!(seqs(&store, 3000, 10).await.expect("past the end"), none);
        assert_eq!(seqs(&store, u64::MAX, 10).await.expect("the largest"), none);
        assert_eq!(
            seqs(&store, u64::MAX - 1, 10).await.expect("next to it"),
            none
        );
    }

    /// Packed entries (layout 4) read like any other, from any seq, beside entries of the
    /// layouts before (a migrated store keeps those), and one that does not unpack is
    /// corrupt, named by its id.
    #[tokio::test]
    async fn packed_entries_read_from_any_seq_beside_older_ones() {
        let server = RedisServer::start();
        xadd(&server, 1000, 0..1000);
        xadd_packed(&server, 2000, 1000..2000).await;
        xadd_packed(&server, 2003, 2000..2003).await;
        let store = RedisStore::connect(&server.url(), RedisOptions::default())
            .await
            .expect("connect");
        assert_eq!(
            seqs(&store, 0, usize::MAX).await.expect("all"),
            (0..2003).collect::<Vec<_>>()
        );
        assert_eq!(
            seqs(&store, 998, 4).await.expect("across layouts"),
            [998, 999, 1000, 1001]
        );
        assert_eq!(seqs(&store, 2002, 10).await.expect("the last"), [2002]);
        server.command(&["XADD", KEY, "0-2004", super::packed::FIELD, "not lz4"]);
        let err = seqs(&store, 2003, 1).await.expect_err("corrupt");
        assert!(
            matches!(&err, StoreError::Corrupt(m) if m.contains("stream entry 0-2004: its packed items")),
            "{err:?}"
        );
    }

    /// An entry the reader's range bound cannot rely on is corrupt, and the read says which:
    /// one whose last item is not the seq its id names (the reader would skip seqs or ask
    /// for the same page again), one holding a seq twice, one of more than ENTRY_ITEMS.
    #[tokio::test]
    async fn an_entry_without_the_seqs_its_id_names_is_corrupt() {
        let server = RedisServer::start();
        let store = RedisStore::connect(&server.url(), RedisOptions::default())
            .await
            .expect("connect");
        let corrupt = async |what: &str| {
            let err = seqs(&store, 0, 10).await.expect_err("corrupt");
            assert!(
                matches!(&err, StoreError::Corrupt(m) if m.contains(what)),
                "{err:?}"
            );
            server.command(&["DEL", KEY]);
        };
        xadd(&server, 10, [3].into_iter());
        corrupt("stream entry 0-10: its last item is seq 3, not the one its id names").await;
        xadd_packed(&server, 6, [4, 4, 5].into_iter()).await;
        corrupt("stream entry 0-6: it holds seq 4 twice").await;
        xadd(&server, 1002, 0..1002);
        corrupt("stream entry 0-1002: it holds more than 1000 items").await;
    }
}
