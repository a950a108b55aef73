//! Attempt records: `<artifacts>/<campaign>/<trial>/a<n>/attempt.json`, written before an
//! attempt has any effect. Ids are validated types, and the joined path is checked to stay
//! under the root, so nothing can escape the artifacts directory.

use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};

use serde_json::Value;

use lanes_common::ids::{CampaignId, Token};

/// The attempt's directory, checked to stay under `root`.
pub fn attempt_dir(root: &Path, campaign: &CampaignId, token: &Token) -> io::Result<PathBuf> {
    let rel = Path::new(campaign.as_str())
        .join(token.trial_id.as_str())
        .join(format!("a{}", token.attempt));
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

/// Removes secret keys from a payload (top level) before it is written anywhere.
pub fn redact(payload: &Value, secret_keys: &[String]) -> Value {
    match payload {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    if secret_keys.iter().any(|s| s == k) {
                        (k.clone(), Value::String("***".into()))
                    } else {
                        (k.clone(), v.clone())
                    }
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Writes `attempt.json` (fsynced).
pub fn write_record(dir: &Path, record: &Value) -> io::Result<()> {
    write_file(dir, "attempt.json", record)
}

/// Writes a JSON file into an attempt's directory, fsynced.
pub fn write_file(dir: &Path, name: &str, value: &Value) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut f = std::fs::File::create(dir.join(name))?;
    f.write_all(&serde_json::to_vec_pretty(value).map_err(io::Error::other)?)?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_common::ids::TrialId;

    #[test]
    fn paths_stay_under_the_root_and_secrets_are_redacted() {
        let t = Token {
            trial_id: TrialId::new("MB-01.r0.a").unwrap(),
            attempt: 2,
        };
        let d = attempt_dir(Path::new("/art"), &CampaignId::new("c").unwrap(), &t).unwrap();
        assert_eq!(d, Path::new("/art/c/MB-01.r0.a/a2"));
        let p = serde_json::json!({"vm_password": "hunter2", "x": 1});
        let r = redact(&p, &["vm_password".to_owned()]);
        assert_eq!(r["vm_password"], "***");
        assert_eq!(r["x"], 1);
    }
}
