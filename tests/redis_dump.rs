//! A whole Redis server as JSON, and back: `dump` lists every key with its type and value
//! (`{ key: { "type": ..., "value": ... } }`), `load` writes such a dump into a server. The
//! Redis layout fixtures (`crates/coordinator/tests/fixtures/redis_layout_v<N>.json`) are
//! dumps; the migration tests load an old one and compare the result with the new one.
//!
//! Values are as Redis answers them: strings, hashes as field -> value, sets and lists as
//! arrays, sorted sets as `[member, score]` pairs with the score as Redis prints it, streams
//! as `[id, [[field, value], ...]]`, a packed field's value as the items it holds, a binary
//! record (a trial record, trial state, lease, token record or block state) as its kind and JSON. Expiry
//! times are not kept.

use std::collections::BTreeMap;

use lanes_coordinator::store::redis::{hot_record as record, packed};
use serde_json::{Value, json};

/// A stream entry as `XRANGE` answers it: its id and its fields' raw values.
type StreamEntry = (String, Vec<(String, Vec<u8>)>);

async fn connect(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("a redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("a connection")
}

/// Every key of the server, sorted, with its type and whole value.
pub async fn dump(url: &str) -> BTreeMap<String, Value> {
    let mut conn = connect(url).await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .expect("keys");
    keys.sort();
    let mut out = BTreeMap::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .expect("type");
        let value = match kind.as_str() {
            "string" => {
                let v: String = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .expect("get");
                json!(v)
            }
            "hash" => {
                let v: BTreeMap<String, Vec<u8>> = redis::cmd("HGETALL")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .expect("hgetall");
                let v: BTreeMap<String, Value> = v
                    .into_iter()
                    .map(|(f, v)| (f, hash_value(&key, &v)))
                    .collect();
                json!(v)
            }
            "set" => {
                let mut v: Vec<String> = redis::cmd("SMEMBERS")
                    .arg(&key)
                    .query_async(&mut conn)
                    .await
                    .expect("smembers");
                v.sort();
                json!(v)
            }
            "list" => {
                let v: Vec<String> = redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query_async(&mut conn)
                    .await
                    .expect("lrange");
                json!(v)
            }
            "zset" => {
                // Scores as Redis prints them, so the dump loads back exactly.
                let v: Vec<(String, String)> = redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query_async(&mut conn)
                    .await
                    .expect("zrange");
                json!(v)
            }
            "stream" => {
                let v: Vec<StreamEntry> = redis::cmd("XRANGE")
                    .arg(&key)
                    .arg("-")
                    .arg("+")
                    .query_async(&mut conn)
                    .await
                    .expect("xrange");
                let entries: Vec<Value> = v
                    .into_iter()
                    .map(|(id, fields)| {
                        let fields: Vec<Value> = fields
                            .into_iter()
                            .map(|(f, v)| json!([f, stream_value(&key, &f, &v)]))
                            .collect();
                        json!([id, fields])
                    })
                    .collect();
                json!(entries)
            }
            other => panic!("{key}: a {other} key the dump does not know"),
        };
        out.insert(key, json!({ "type": kind, "value": value }));
    }
    out
}

/// A stream field's value in a dump: packed items (layout 4) as `{ "packed": [[seq, body],
/// ...] }`, so a fixture shows the rows and events it holds; anything else as its text.
fn stream_value(key: &str, field: &str, value: &[u8]) -> Value {
    let utf8 = |b: &[u8]| {
        String::from_utf8(b.to_vec()).unwrap_or_else(|e| panic!("{key}: not UTF-8: {e}"))
    };
    if field != packed::FIELD {
        return json!(utf8(value));
    }
    let items = packed::unpack(value).unwrap_or_else(|e| panic!("{key}: packed items: {e}"));
    let items: Vec<Value> = items
        .into_iter()
        .map(|(seq, body)| json!([seq, utf8(&body)]))
        .collect();
    json!({ "packed": items })
}

/// A hash field's value in a dump: a binary record (layout 5) as `{ "record": kind, "json":
/// value }`, so a fixture shows what it holds; anything else as its text.
fn hash_value(key: &str, value: &[u8]) -> Value {
    if record::is_binary(value) {
        let (kind, json) = record::to_json(value).unwrap_or_else(|e| panic!("{key}: {e}"));
        return json!({ "record": kind, "json": json });
    }
    json!(String::from_utf8(value.to_vec()).unwrap_or_else(|e| panic!("{key}: not UTF-8: {e}")))
}

/// The bytes of a hash field's value in a dump (see [`hash_value`]).
fn hash_bytes(key: &str, v: &Value) -> Vec<u8> {
    let Some(kind) = v.get("record") else {
        return text(v, key).into_bytes();
    };
    record::from_json(&text(kind, key), &v["json"]).unwrap_or_else(|e| panic!("{key}: {e}"))
}

/// The bytes of a stream field's value in a dump (see [`stream_value`]).
fn stream_bytes(key: &str, v: &Value) -> Vec<u8> {
    let Some(packed) = v.get("packed") else {
        return text(v, key).into_bytes();
    };
    let items: Vec<(u64, String)> =
        serde_json::from_value(packed.clone()).unwrap_or_else(|e| panic!("{key}: {e}"));
    packed::pack(items.iter().map(|(seq, body)| (*seq, body.as_bytes())))
}

fn text(v: &Value, what: &str) -> String {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: not a string: {v}"))
        .to_owned()
}

fn items<'a>(v: &'a Value, what: &str) -> &'a Vec<Value> {
    v.as_array()
        .unwrap_or_else(|| panic!("{what}: not an array: {v}"))
}

/// Writes every key of `keys` (a dump) into the server, replacing keys of the same name.
pub async fn load(url: &str, keys: &BTreeMap<String, Value>) {
    let mut conn = connect(url).await;
    for (key, entry) in keys {
        let kind = entry["type"].as_str().expect("a type");
        let value = &entry["value"];
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("DEL").arg(key).ignore();
        match kind {
            "string" => {
                pipe.cmd("SET").arg(key).arg(text(value, key)).ignore();
            }
            "hash" => {
                let fields = value.as_object().expect("a hash is an object");
                let cmd = pipe.cmd("HSET").arg(key);
                for (f, v) in fields {
                    cmd.arg(f).arg(hash_bytes(key, v));
                }
                cmd.ignore();
            }
            "set" | "list" => {
                let cmd = pipe
                    .cmd(if kind == "set" { "SADD" } else { "RPUSH" })
                    .arg(key);
                for v in items(value, key) {
                    cmd.arg(text(v, key));
                }
                cmd.ignore();
            }
            "zset" => {
                let cmd = pipe.cmd("ZADD").arg(key);
                for pair in items(value, key) {
                    let pair = items(pair, key);
                    cmd.arg(text(&pair[1], key)).arg(text(&pair[0], key));
                }
                cmd.ignore();
            }
            "stream" => {
                for entry in items(value, key) {
                    let entry = items(entry, key);
                    let cmd = pipe.cmd("XADD").arg(key).arg(text(&entry[0], key));
                    for field in items(&entry[1], key) {
                        let field = items(field, key);
                        cmd.arg(text(&field[0], key))
                            .arg(stream_bytes(key, &field[1]));
                    }
                    cmd.ignore();
                }
            }
            other => panic!("{key}: a {other} key the loader does not know"),
        }
        pipe.query_async::<()>(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("load {key}: {e}"));
    }
}

/// The keys of a layout fixture file (`{ "layout": N, "keys": { ... } }`).
pub fn fixture_keys(path: &std::path::Path) -> BTreeMap<String, Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let fixture: Value = serde_json::from_str(&text).expect("the fixture is JSON");
    serde_json::from_value(fixture["keys"].clone()).expect("the fixture has keys")
}

/// `crates/coordinator/tests/fixtures/redis_layout_v<layout>.json`.
pub fn layout_fixture(layout: u32) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/coordinator/tests/fixtures")
        .join(format!("redis_layout_v{layout}.json"))
}

/// What the layout 1 fixture migrated to layout 2 holds: the layout 2 fixture, except for
/// two things the migration legitimately keeps from the layout 1 data, and nothing else:
/// - each campaign version (`lanes:{c:<id>}:ver`) is one higher: the migration bumps it so
///   that a commit an old coordinator prepared against layout 1 conflicts;
/// - each `seen` hash holds the layout 1 meta's `lanes_seen` times. Since the layout 1 fixture
///   was written, a renewal within half a TTL of a lane's last-seen time no longer refreshes
///   it (a change of behaviour, not of layout), so the scenario played now leaves the claim
///   times, where the layout 1 data holds the renewal times. The lanes must be the same.
pub fn migrated_v2_fixture() -> BTreeMap<String, Value> {
    let v1 = fixture_keys(&layout_fixture(1));
    let mut keys = fixture_keys(&layout_fixture(2));
    for (key, entry) in keys.iter_mut() {
        if !key.starts_with("lanes:{c:") {
            continue;
        }
        if key.ends_with("}:ver") {
            // The count of `<count>:<token>` (layout 2 writes a token after it).
            let v = text(&entry["value"], key);
            let n: u64 = v
                .split(':')
                .next()
                .unwrap_or(&v)
                .parse()
                .expect("a version");
            entry["value"] = json!((n + 1).to_string());
        } else if let Some(prefix) = key.strip_suffix(":seen") {
            let meta = &v1[&format!("{prefix}:meta")]["value"];
            let meta: Value = serde_json::from_str(&text(meta, key)).expect("a layout 1 meta");
            let seen: BTreeMap<String, Value> = meta["lanes_seen"]
                .as_object()
                .expect("lanes_seen")
                .iter()
                .map(|(lane, at)| (lane.clone(), json!(at.to_string())))
                .collect();
            let lanes = |m: &serde_json::Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
            assert_eq!(
                seen.keys().cloned().collect::<Vec<_>>(),
                lanes(entry["value"].as_object().expect("a hash")),
                "{key}: the same lanes in both fixtures"
            );
            entry["value"] = json!(seen);
        }
        // Rows written before rows had a trace id have none: the migration leaves ledger
        // rows as they were written.
        without_trace_ids(entry);
    }
    keys
}

/// `keys` with the layout record `lanes:layout` set to `layout`.
pub fn with_layout(mut keys: BTreeMap<String, Value>, layout: u32) -> BTreeMap<String, Value> {
    keys.insert(
        "lanes:layout".to_owned(),
        json!({ "type": "string", "value": layout.to_string() }),
    );
    keys
}

/// `v` with every row's `"trace_id":"<32 hex>",` taken out of the JSON strings it holds.
fn without_trace_ids(v: &mut Value) {
    const FIELD: &str = "\"trace_id\":\"";
    match v {
        Value::String(s) => {
            while let Some(i) = s.find(FIELD) {
                // The field, its 32 hex digits, the closing quote and the comma.
                s.replace_range(i..i + FIELD.len() + 32 + 2, "");
            }
        }
        Value::Array(items) => items.iter_mut().for_each(without_trace_ids),
        Value::Object(map) => map.values_mut().for_each(without_trace_ids),
        _ => {}
    }
}
