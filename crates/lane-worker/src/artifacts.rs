//! Attempt records: `<artifacts>/<campaign>/<trial>/a<n>/attempt.json`, written before an
//! attempt has any effect. Ids are validated types, and the joined path is checked to stay
//! under the root, so nothing can escape the artifacts directory.

use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use lanes_common::ids::AttemptTag;

use crate::secrets::MASK;

/// The attempt's directory, checked to stay under `root`.
pub fn attempt_dir(root: &Path, tag: &AttemptTag) -> io::Result<PathBuf> {
    let rel = Path::new(tag.campaign.as_str())
        .join(tag.token.trial_id.as_str())
        .join(format!("a{}", tag.token.attempt));
    if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "attempt path {} would leave the artifacts root",
                rel.display()
            ),
        ));
    }
    Ok(root.join(rel))
}

/// Masks the value of every secret key, at any depth of a payload (objects inside objects and
/// arrays), before it is written anywhere.
pub fn redact(payload: &Value, secret_keys: &[String]) -> Value {
    match payload {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    if secret_keys.iter().any(|s| s == k) {
                        (k.clone(), Value::String(MASK.into()))
                    } else {
                        (k.clone(), redact(v, secret_keys))
                    }
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| redact(v, secret_keys)).collect()),
        other => other.clone(),
    }
}

/// The values of the secret keys at any depth of a payload, as text to scrub: a string as it
/// is, a number as its JSON text, an object or array as its JSON text and each string and
/// number inside it (a driver may echo any part of it).
pub fn secret_values(payload: &Value, secret_keys: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    find_secrets(payload, secret_keys, &mut out);
    out
}

fn find_secrets(v: &Value, secret_keys: &[String], out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                if secret_keys.iter().any(|s| s == k) {
                    secret_text(v, out);
                } else {
                    find_secrets(v, secret_keys, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| find_secrets(v, secret_keys, out)),
        Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => {}
    }
}

fn secret_text(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        // `true` or `null` reveal nothing worth mangling every such word for.
        Value::Bool(_) | Value::Null => {}
        Value::Object(map) => {
            out.push(v.to_string());
            map.values().for_each(|v| secret_text(v, out));
        }
        Value::Array(items) => {
            out.push(v.to_string());
            items.iter().for_each(|v| secret_text(v, out));
        }
    }
}

/// Writes `attempt.json`, not fsynced: it is written before the attempt has any effect, but
/// it is a record for people, not state anything recovers from (the ledger and the outbox
/// are). A machine crash can lose the records of attempts in flight, whose leases then expire
/// and whose rows say so; an fsync per admission cost hundreds of lanes starting together
/// seconds of admission (they queued on the disk and the blocking pool).
pub fn write_record(dir: &Path, record: &Value) -> io::Result<()> {
    write(dir, "attempt.json", record)?;
    Ok(())
}

/// Writes a JSON file into an attempt's directory, not fsynced: like `attempt.json`, the
/// attempt's records are for people, and the outbox holds the outcome recovery reads. A
/// record cut short by a machine crash keeps its pending name (see
/// [`crate::outbox::Entry::seal_record_at_start`]).
pub fn write_file(dir: &Path, name: &str, value: &Value) -> io::Result<()> {
    write(dir, name, value).map(drop)
}

fn write(dir: &Path, name: &str, value: &Value) -> io::Result<std::fs::File> {
    crate::private_fs::create_dir(dir)?;
    let mut f = crate::private_fs::create_file(&dir.join(name))?;
    f.write_all(&serde_json::to_vec_pretty(value).map_err(io::Error::other)?)?;
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_common::ids::{Token, TrialId};

    #[test]
    fn paths_stay_under_the_root_and_secrets_are_redacted() {
        let t = Token {
            trial_id: TrialId::new("MB-01.r0.a").unwrap(),
            attempt: 2,
        };
        let tag = AttemptTag::new(lanes_common::ids::CampaignId::new("c").unwrap(), t);
        let d = attempt_dir(Path::new("/art"), &tag).unwrap();
        assert_eq!(d, Path::new("/art/c/MB-01.r0.a/a2"));
        let p = serde_json::json!({"vm_password": "hunter2", "x": 1});
        let r = redact(&p, &["vm_password".to_owned()]);
        assert_eq!(r["vm_password"], "***");
        assert_eq!(r["x"], 1);
    }

    #[test]
    fn secret_keys_are_found_at_any_depth_and_in_any_type() {
        let keys = ["pw".to_owned(), "pin".to_owned(), "creds".to_owned()];
        let p = serde_json::json!({
            "vm": {"pw": "deep-secret", "list": [{"pin": 987654}]},
            "creds": {"user": "alice-adm", "n": 31337, "ok": true},
            "x": "visible",
        });
        let r = redact(&p, &keys);
        assert_eq!(
            r,
            serde_json::json!({
                "vm": {"pw": "***", "list": [{"pin": "***"}]},
                "creds": "***",
                "x": "visible",
            })
        );
        let mut found = secret_values(&p, &keys);
        found.sort();
        let mut want = vec![
            "deep-secret".to_owned(),
            "987654".to_owned(),
            r#"{"n":31337,"ok":true,"user":"alice-adm"}"#.to_owned(),
            "alice-adm".to_owned(),
            "31337".to_owned(),
        ];
        want.sort();
        assert_eq!(found, want);
    }
}
