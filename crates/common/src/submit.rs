//! Reading a submission in the forms a client has: `spec_json` (the spec as JSON, with the
//! campaign file's defaults) or `campaign_toml` (a campaign file's text), with the tasks inline
//! or sent beside it, in one message or a stream of chunks. What is cheap to find is reported
//! at once, as a list of field violations.

use std::fmt;
use std::path::Path;
use std::sync::LazyLock;

use crate::convert::task_from_wire;
use crate::limits::{
    MAX_REFUSAL_BYTES, MAX_REFUSAL_ITEMS, MAX_REFUSAL_TEXT_BYTES, cut_quoted, status_bytes,
};
use crate::proto as pb;
use crate::spec::{Campaign, CampaignSpec, SpecErrorKind, Task, json_schema, shape_violations};
use crate::spec::{MAX_TASKS, load_sent_str, validate_tasks};
use crate::strict_json;

/// At most this many violations are kept, in at most this many bytes of text; the rest are
/// counted (they travel in the status's trailers: see the limits).
const MAX_VIOLATIONS: usize = MAX_REFUSAL_ITEMS;
const MAX_VIOLATION_BYTES: usize = MAX_REFUSAL_BYTES;

/// The spec's schema, built once: the shape check reads it on every `spec_json` submit.
static SCHEMA: LazyLock<serde_json::Value> = LazyLock::new(json_schema);

/// One problem: the request field (`spec_json.arms[1].id`, `tasks[3].payload_json`,
/// `campaign_toml.defaults.timeout_s`) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub field: String,
    pub description: String,
}

/// A submission that does not validate: every violation found, in request order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SubmitInvalid {
    pub violations: Vec<Violation>,
    /// Violations found beyond [`MAX_VIOLATIONS`].
    pub more: usize,
}

impl SubmitInvalid {
    fn one(field: impl Into<String>, description: impl Into<String>) -> Self {
        let mut v = Violations::default();
        v.push(field, description);
        v.into_error()
    }
}

impl fmt::Display for SubmitInvalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.violations.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{}: {}", v.field, v.description)?;
        }
        if self.more > 0 {
            write!(f, "; and {} more", self.more)?;
        }
        Ok(())
    }
}

#[derive(Default)]
struct Violations {
    list: Vec<Violation>,
    bytes: usize,
    more: usize,
}

impl Violations {
    fn push(&mut self, field: impl Into<String>, description: impl Into<String>) {
        let (mut field, description) = (field.into(), description.into());
        // A field may quote a client's JSON key.
        cut_quoted(&mut field, MAX_REFUSAL_TEXT_BYTES);
        let bytes = status_bytes(&field) + status_bytes(&description);
        // The first always fits (cut if need be), so a refusal never comes without a reason.
        if !self.list.is_empty()
            && (self.list.len() == MAX_VIOLATIONS || self.bytes + bytes > MAX_VIOLATION_BYTES)
        {
            self.more += 1;
            return;
        }
        self.bytes += bytes;
        let mut description = description;
        cut_quoted(&mut description, MAX_VIOLATION_BYTES);
        self.list.push(Violation { field, description });
    }

    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    fn into_error(self) -> SubmitInvalid {
        SubmitInvalid {
            violations: self.list,
            more: self.more,
        }
    }

    fn check(self) -> Result<(), SubmitInvalid> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(self.into_error())
        }
    }
}

impl TryFrom<pb::SubmitRequest> for Campaign {
    type Error = SubmitInvalid;

    /// Reads the spec in its form and the tasks, then checks the campaign rules a campaign
    /// file is held to (`CampaignSpec::validate`, `validate_tasks`): a submit is refused for
    /// exactly what the loader refuses.
    fn try_from(r: pb::SubmitRequest) -> Result<Self, SubmitInvalid> {
        let mut v = Violations::default();
        let sent = tasks(r.tasks, &mut v);
        let spec = match r.spec {
            Some(pb::submit_request::Spec::SpecJson(json)) => from_json(&json, &mut v),
            Some(pb::submit_request::Spec::CampaignToml(text)) => from_toml(&text, &mut v),
            None => {
                v.push("spec", "set spec_json or campaign_toml");
                None
            }
        };
        v.check()?;
        let (spec, inline) = spec.expect("no violations means a spec");
        let tasks = match (inline, sent) {
            (Some(_), Some(_)) => {
                return Err(SubmitInvalid::one(
                    "tasks",
                    "the campaign_toml has [[tasks.items]] and tasks were sent too: send them \
                     one way",
                ));
            }
            (Some(inline), None) => {
                return Ok(Campaign {
                    spec,
                    tasks: inline,
                });
            }
            (None, Some(sent)) => sent,
            (None, None) => Vec::new(),
        };
        validate_tasks(&tasks).map_err(|e| match e.index {
            Some(i) => SubmitInvalid::one(format!("tasks[{i}].{}", e.field), e.kind.to_string()),
            None => SubmitInvalid::one("tasks", e.kind.to_string()),
        })?;
        Ok(Campaign { spec, tasks })
    }
}

/// The sent tasks (`None` when none were sent), each converted; every bad one is listed.
fn tasks(sent: Vec<pb::TaskSpec>, v: &mut Violations) -> Option<Vec<Task>> {
    if sent.is_empty() {
        return None;
    }
    if sent.len() > MAX_TASKS {
        let kind = SpecErrorKind::TooMany {
            what: "tasks",
            limit: MAX_TASKS,
        };
        v.push("tasks", kind.to_string());
        return None;
    }
    let mut out = Vec::with_capacity(sent.len());
    for (i, t) in sent.into_iter().enumerate() {
        match task_from_wire(i, t) {
            Ok(t) => out.push(t),
            Err(e) => v.push(e.field, e.reason),
        }
    }
    Some(out)
}

type Parsed = (CampaignSpec, Option<Vec<Task>>);

/// `spec_json`: every missing or unknown key first, then serde's types, then the rules.
fn from_json(json: &str, v: &mut Violations) -> Option<Parsed> {
    let field = |f: &str| format!("spec_json.{f}");
    let mut value = match strict_json::from_str(json) {
        Ok(value @ serde_json::Value::Object(_)) => value,
        Ok(_) => {
            v.push("spec_json", "must be a JSON object");
            return None;
        }
        Err(e) => {
            match e.path() {
                Some(path) => v.push(field(&path), e.to_string()),
                None => v.push("spec_json", format!("bad JSON: {e}")),
            }
            return None;
        }
    };
    let shape = shape_violations(&SCHEMA, &mut value);
    if !shape.is_empty() {
        for (f, d) in shape {
            v.push(field(&f), d);
        }
        return None;
    }
    let spec: CampaignSpec = match serde_json::from_value(value) {
        Ok(spec) => spec,
        Err(e) => {
            v.push("spec_json", e.to_string());
            return None;
        }
    };
    if let Err(e) = spec.validate() {
        v.push(field(&json_field(&e.field)), e.kind.to_string());
        return None;
    }
    Some((spec, None))
}

/// A campaign rule names its field as the campaign file does; `spec_json` keeps some of them
/// elsewhere: the operational options under `ops`, the driver's kind under `driver.kind`,
/// the identity pins at the top level.
fn json_field(file_field: &str) -> String {
    let head = file_field.split(['.', '[']).next().unwrap_or_default();
    // The operational keys are the properties of `ops` in the schema.
    let operational = SCHEMA
        .pointer("/$defs/Operational/properties")
        .and_then(serde_json::Value::as_object)
        .is_some_and(|props| props.contains_key(head));
    if operational {
        return format!("ops.{file_field}");
    }
    for (file, json) in [
        ("driver.sim", "driver.kind.sim"),
        ("driver.command", "driver.kind.command"),
        ("driver.name", "driver.kind.named"),
        ("driver.expect", "expect"),
    ] {
        if let Some(rest) = file_field.strip_prefix(file) {
            return format!("{json}{rest}");
        }
    }
    file_field.to_owned()
}

/// `campaign_toml`: the campaign-file loader, with its line numbers.
fn from_toml(text: &str, v: &mut Violations) -> Option<Parsed> {
    match load_sent_str(text, Path::new("campaign_toml")) {
        Ok(parsed) => Some(parsed),
        Err(e) => {
            let field = if e.field.is_empty() {
                "campaign_toml".to_owned()
            } else {
                format!("campaign_toml.{}", e.field)
            };
            let description = match e.line {
                Some(line) => format!("line {line}: {}", e.kind),
                None => e.kind.to_string(),
            };
            v.push(field, description);
            None
        }
    }
}

/// Builds a submission from a `SubmitStream`: one header, then task chunks. Bounded by the
/// number of tasks and by the bytes received, so a stream holds no more than a submit could.
pub struct SubmitAssembly {
    request: Option<pb::SubmitRequest>,
    bytes: usize,
    max_bytes: usize,
}

impl SubmitAssembly {
    /// An assembly that refuses more than `max_bytes` of encoded chunks in all.
    pub fn new(max_bytes: usize) -> Self {
        Self {
            request: None,
            bytes: 0,
            max_bytes,
        }
    }

    /// Takes the next chunk of the stream.
    pub fn push(&mut self, chunk: pb::SubmitChunk) -> Result<(), SubmitInvalid> {
        self.bytes = self
            .bytes
            .saturating_add(prost::Message::encoded_len(&chunk));
        if self.bytes > self.max_bytes {
            return Err(SubmitInvalid::one(
                "tasks",
                format!(
                    "the stream is over this coordinator's limit of {} bytes \
                     (--max-client-message-bytes)",
                    self.max_bytes
                ),
            ));
        }
        match (chunk.chunk, &mut self.request) {
            (Some(pb::submit_chunk::Chunk::Header(h)), None) => {
                self.request = Some(h);
                Ok(())
            }
            (Some(pb::submit_chunk::Chunk::Header(_)), Some(_)) => Err(SubmitInvalid::one(
                "header",
                "a stream has one header, its first message",
            )),
            (Some(pb::submit_chunk::Chunk::Tasks(c)), Some(r)) => {
                if r.tasks.len().saturating_add(c.tasks.len()) > MAX_TASKS {
                    let kind = SpecErrorKind::TooMany {
                        what: "tasks",
                        limit: MAX_TASKS,
                    };
                    return Err(SubmitInvalid::one("tasks", kind.to_string()));
                }
                r.tasks.extend(c.tasks);
                Ok(())
            }
            (Some(pb::submit_chunk::Chunk::Tasks(_)), None) => Err(SubmitInvalid::one(
                "header",
                "the first message of a stream must be its header",
            )),
            (None, _) => Err(SubmitInvalid::one(
                "chunk",
                "an empty chunk: set header or tasks",
            )),
        }
    }

    /// The whole submission, once the client has closed the stream.
    pub fn finish(self) -> Result<Campaign, SubmitInvalid> {
        match self.request {
            Some(r) => Campaign::try_from(r),
            None => Err(SubmitInvalid::one(
                "header",
                "the stream ended before its header",
            )),
        }
    }
}
