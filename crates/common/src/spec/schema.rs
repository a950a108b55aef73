//! The JSON Schema of a spec as JSON (`SubmitRequest.spec_json`), generated from the types, and
//! the shape check that lists every missing and unknown key of a submitted spec at once (serde
//! stops at the first).

use serde_json::{Map, Value};

use super::CampaignSpec;

/// The schema `docs/campaign.schema.json` holds: JSON Schema 2020-12, defaults included.
pub fn json_schema() -> Value {
    schemars::schema_for!(CampaignSpec).to_value()
}

/// Checks `spec` against the schema's object shapes: a required key left out, or a key the
/// schema does not know, at any depth (not inside opaque values such as an arm's `config`).
/// A `null` for an optional key means "leave it out" and is removed, so the default applies.
/// Returns `(field, description)` pairs, fields named as in `arms[1].id`. Types are left to
/// serde, which reads the spec after this.
pub(crate) fn shape_violations(schema: &Value, spec: &mut Value) -> Vec<(String, String)> {
    let empty = Map::new();
    let defs = schema
        .get("$defs")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut out = Vec::new();
    walk(schema, defs, spec, "", &mut out);
    out
}

/// Follows `$ref`s into `$defs`.
fn resolve<'a>(mut schema: &'a Value, defs: &'a Map<String, Value>) -> &'a Value {
    for _ in 0..8 {
        let Some(name) = schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
        else {
            break;
        };
        match defs.get(name) {
            Some(s) => schema = s,
            None => break,
        }
    }
    schema
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn walk(
    schema: &Value,
    defs: &Map<String, Value>,
    value: &mut Value,
    path: &str,
    out: &mut Vec<(String, String)>,
) {
    let schema = resolve(schema, defs);
    match value {
        Value::Object(map) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            map.retain(|k, v| !(v.is_null() && props.contains_key(k) && !required.contains(&&**k)));
            for key in &required {
                match map.get(*key) {
                    None => out.push((join(path, key), "is required".into())),
                    Some(Value::Null) => {
                        out.push((join(path, key), "is required and must not be null".into()))
                    }
                    Some(_) => {}
                }
            }
            let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
            for (key, v) in map.iter_mut() {
                match props.get(key) {
                    Some(sub) => walk(sub, defs, v, &join(path, key), out),
                    None if closed => out.push((
                        join(path, key),
                        format!("unknown key (known: {})", known(props)),
                    )),
                    None => {}
                }
            }
        }
        Value::Array(items) => {
            let Some(item) = schema.get("items").filter(|i| i.is_object()) else {
                return;
            };
            for (i, v) in items.iter_mut().enumerate() {
                walk(item, defs, v, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The known keys, at most a dozen of them: the list travels in every violation.
fn known(props: &Map<String, Value>) -> String {
    const SHOWN: usize = 12;
    let mut names: Vec<&str> = props.keys().map(String::as_str).take(SHOWN).collect();
    if props.len() > SHOWN {
        names.push("…");
    }
    names.join(", ")
}
