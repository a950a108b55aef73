//! Tasks and their payloads, from a JSONL file or inline items.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::{SpecError, SpecErrorKind};
use crate::canonical;
use crate::ids::TaskId;
use crate::limits::{MAX_PAYLOAD_BYTES, MAX_TASKS};
use crate::strict_json;

/// One task of a campaign.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: TaskId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    #[serde(default)]
    pub payload: Payload,
}

/// An opaque JSON payload, kept in canonical form with its sha256. Shared, not copied, when a
/// task is: a claim hands its task on, and a payload may be kilobytes of instructions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payload {
    canonical: std::sync::Arc<str>,
    sha256: std::sync::Arc<str>,
}

impl Payload {
    /// Canonicalizes `value`, refusing more than [`MAX_PAYLOAD_BYTES`].
    pub fn new(value: &serde_json::Value) -> Result<Self, SpecErrorKind> {
        let canonical = canonical::to_string(value);
        if canonical.len() > MAX_PAYLOAD_BYTES {
            return Err(SpecErrorKind::PayloadTooLarge {
                bytes: canonical.len(),
            });
        }
        let sha256 = canonical::sha256_hex(canonical.as_bytes()).into();
        Ok(Self {
            canonical: canonical.into(),
            sha256,
        })
    }

    /// A payload a client sent: it must be a JSON object (a driver reads its keys), of at most
    /// [`MAX_PAYLOAD_BYTES`]. (Stored payloads are read back with [`Payload::new`].)
    pub fn from_client(value: &serde_json::Value) -> Result<Self, SpecErrorKind> {
        if !value.is_object() {
            return Err(SpecErrorKind::PayloadNotObject(json_kind(value)));
        }
        Self::new(value)
    }

    /// The canonical JSON text.
    pub fn json(&self) -> &str {
        &self.canonical
    }

    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(&self.canonical).expect("canonical payload is valid json")
    }
}

impl Default for Payload {
    fn default() -> Self {
        Self::new(&serde_json::Value::Object(Default::default())).expect("empty payload fits")
    }
}

impl Serialize for Payload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        Payload::new(&value).map_err(serde::de::Error::custom)
    }
}

/// What a JSON value is, for an error message.
fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// A tasks file's payload, read strictly (a repeated key is refused, not the last one kept);
/// `null`, like a missing payload, is the empty one.
fn strict_payload<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<serde_json::Value>, D::Error> {
    let value = strict_json::deserialize_at("payload", d)?;
    Ok((!value.is_null()).then_some(value))
}

/// A line of a tasks file, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    id: String,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    timeout_s: Option<u32>,
    #[serde(default)]
    max_turns: Option<u32>,
    #[serde(default)]
    max_cost_usd: Option<f64>,
    #[serde(default, deserialize_with = "strict_payload")]
    payload: Option<serde_json::Value>,
}

/// Builds a task from its parts, naming the field whose type refuses its value (the id, the
/// payload). The campaign rules are `Task::validate`'s, run on the whole list.
pub(super) fn build_task(
    id: String,
    group: Option<String>,
    tags: Vec<String>,
    timeout_s: Option<u32>,
    max_turns: Option<u32>,
    max_cost_usd: Option<f64>,
    payload: Option<&serde_json::Value>,
) -> Result<Task, (&'static str, SpecErrorKind)> {
    let id = TaskId::new(id).map_err(|e| ("id", SpecErrorKind::InvalidId(e)))?;
    let payload = match payload {
        Some(v) => Payload::from_client(v).map_err(|e| ("payload", e))?,
        None => Payload::default(),
    };
    Ok(Task {
        id,
        group,
        tags,
        timeout_s,
        max_turns,
        max_cost_usd,
        payload,
    })
}

/// Parses a tasks file: one JSON object a line; blank lines are skipped. Errors name the file,
/// the 1-based line and the field.
pub fn parse_tasks_jsonl(path: &Path, text: &str) -> Result<Vec<(usize, Task)>, SpecError> {
    let mut tasks = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let lineno = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        // Stop reading at once: a huge file is refused without holding it all.
        if tasks.len() == MAX_TASKS {
            return Err(SpecError::at(
                path,
                lineno,
                "tasks",
                SpecErrorKind::TooMany {
                    what: "tasks",
                    limit: MAX_TASKS,
                },
            ));
        }
        let raw: RawTask = serde_json::from_str(line).map_err(|e| {
            let kind = match unknown_field(&e.to_string()) {
                Some(key) => SpecErrorKind::UnknownKey(key),
                None => SpecErrorKind::BadJson(e.to_string()),
            };
            SpecError::at(path, lineno, "tasks", kind)
        })?;
        let task = build_task(
            raw.id,
            raw.group,
            raw.tags,
            raw.timeout_s,
            raw.max_turns,
            raw.max_cost_usd,
            raw.payload.as_ref(),
        )
        .map_err(|(field, kind)| SpecError::at(path, lineno, field, kind))?;
        tasks.push((lineno, task));
    }
    Ok(tasks)
}

/// The key named by a serde "unknown field `x`" message.
pub(super) fn unknown_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_owned())
}
