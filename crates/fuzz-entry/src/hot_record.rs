//! `hot_record`: a trial state, lease, token record or block state as the Redis store reads it
//! back from whatever a hash field holds (`store::redis::hot_record`).
//!
//! - Decoding never panics, whatever the bytes.
//! - Bytes that decode are exactly what encoding the record gives back: the decoder is
//!   strict, so no two stored forms mean one record.
//! - A record shown as JSON (the layout fixtures' form) turns back into the same bytes, when
//!   JSON can hold it (not a NaN or infinite float).
//! - A record stored as JSON by an older layout, read and written in binary, reads back.

use lanes_coordinator::store::redis::hot_record as record;

pub fn fuzz_one(data: &[u8]) {
    if let Ok(again) = record::reencode(data) {
        assert_eq!(
            again, data,
            "a record decoded from bytes its encoding does not give"
        );
    }
    if let Ok((kind, json)) = record::to_json(data)
        && let Ok(bytes) = record::from_json(kind, &json)
    {
        assert_eq!(bytes, data, "a {kind} changed through its JSON");
    }
    for binary in record::from_older_json(data) {
        assert_eq!(
            record::reencode(&binary).as_ref(),
            Ok(&binary),
            "an older JSON record written in binary does not read back"
        );
    }
}
