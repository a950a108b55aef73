//! Ledgers written straight into a Redis store's results stream, in the store's own row
//! format: how the suites get past 100k rows without 100k store operations (which take minutes
//! in a debug build).

use lanes_common::row::{Row, Status, StoreFields};
use lanes_common::spec::Campaign;
use lanes_coordinator::store::redis::packed;

/// Appends `attempts` rows per trial of `campaign`, attempt by attempt, with seqs from 0: every
/// row `cancelled`, except that with `last_counted` each trial's last attempt is a counted,
/// final `completed` row scoring 1. Answers the number of rows written.
pub async fn append(
    redis_url: &str,
    campaign: &Campaign,
    spec_hash: &str,
    attempts: u32,
    last_counted: bool,
) -> u64 {
    let trials: Vec<_> = lanes_common::schedule::trials(campaign).collect();
    let key = format!("lanes:{{c:{}}}:results", campaign.spec.id);
    let client = redis::Client::open(redis_url).expect("a redis url");
    // A pipeline of a thousand appends, each synced with `appendfsync always`, can take more
    // than the client's default 500 ms to answer on a loaded machine (the suites run beside
    // each other): this helper is setup, not a measure of latency.
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_secs(120)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("a redis connection");
    let mut seq = 0u64;
    for attempt in 1..=attempts {
        let counted = last_counted && attempt == attempts;
        let mut pipe = redis::pipe();
        // As a commit writes them (layout 4): an entry holds up to a thousand rows, packed
        // into one field, and its id is its last row's.
        for chunk in trials.chunks(1000) {
            let mut fields = Vec::with_capacity(chunk.len());
            for t in chunk {
                let status = if counted {
                    Status::Completed
                } else {
                    Status::Cancelled
                };
                let mut row = Row::bare(
                    &campaign.spec.id,
                    t,
                    attempt,
                    status,
                    None,
                    StoreFields {
                        seq,
                        spec_hash: spec_hash.to_owned(),
                        is_final: counted,
                        counted,
                        ..StoreFields::default()
                    },
                );
                if counted {
                    row.result.score = Some(1.0);
                    row.result.passed = Some(true);
                }
                fields.push((seq, serde_json::to_vec(&row).expect("a row serializes")));
                seq += 1;
            }
            let block = packed::pack(fields.iter().map(|(seq, body)| (*seq, body.as_slice())));
            pipe.cmd("XADD")
                .arg(&key)
                .arg(format!("0-{seq}"))
                .arg(packed::FIELD)
                .arg(block)
                .ignore();
        }
        pipe.query_async::<()>(&mut conn)
            .await
            .expect("rows appended");
    }
    seq
}
