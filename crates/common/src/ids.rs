//! Newtype identifiers, validated on construction so an id can safely become a path or a key.
//!
//! An id holds its text as an `Arc<str>`: ids are copied into every lease, row, event and map
//! that names a trial (about fifty times per claim and completion in the store's hot path), and
//! a copy is then a reference count, not an allocation and a copy of the text.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// An id that does not match its pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} id {value:?} does not match {pattern}")]
pub struct IdError {
    pub kind: &'static str,
    pub value: String,
    pub pattern: &'static str,
}

fn check(
    kind: &'static str,
    pattern: &'static str,
    value: &str,
    max: usize,
    first: fn(u8) -> bool,
    rest: fn(u8) -> bool,
) -> Result<(), IdError> {
    let b = value.as_bytes();
    let ok = !b.is_empty() && b.len() <= max && first(b[0]) && b[1..].iter().all(|&c| rest(c));
    if ok {
        Ok(())
    } else {
        Err(IdError {
            kind,
            value: value.to_owned(),
            pattern,
        })
    }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $pattern:literal, $max:expr, $first:expr, $rest:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_str(Checked(|v: &str| Self::new(v)))
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl $name {
            pub const PATTERN: &'static str = $pattern;

            pub fn new(value: impl AsRef<str>) -> Result<Self, IdError> {
                let value = value.as_ref();
                check($kind, $pattern, value, $max, $first, $rest)?;
                Ok(Self(Arc::from(value)))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;
            fn from_str(value: &str) -> Result<Self, IdError> {
                Self::new(value)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(value: String) -> Result<Self, IdError> {
                Self::new(value)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                String::from(&*id.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

/// The JSON Schema of an id: a string matching its pattern (`docs/campaign.schema.json`).
macro_rules! id_schema {
    ($($name:ident),+) => {$(
        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({ "type": "string", "pattern": $name::PATTERN })
            }
        }
    )+};
}

fn lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}
fn alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}

id_type!(
    /// A campaign id: `^[a-z0-9][a-z0-9-]{0,62}$`.
    CampaignId, "campaign", "^[a-z0-9][a-z0-9-]{0,62}$", 63,
    lower_alnum, |c| lower_alnum(c) || c == b'-'
);
id_type!(
    /// A task id: `^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`.
    TaskId, "task", "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", 128,
    alnum, |c| alnum(c) || matches!(c, b'.' | b'_' | b':' | b'-')
);
id_type!(
    /// An arm id: `^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`. No dots, so a trial id splits cleanly.
    ArmId, "arm", "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", 64,
    alnum, |c| alnum(c) || matches!(c, b'_' | b'-')
);

id_type!(
    /// A driver name, as a campaign's `[driver] name` and a worker's drivers file spell it:
    /// `^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`.
    DriverName, "driver", "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", 64,
    alnum, |c| alnum(c) || matches!(c, b'_' | b'-')
);

id_schema!(CampaignId, TaskId, ArmId, DriverName);

id_type!(
    /// A lane's name, `<worker id>-<slot>`: printable ASCII without spaces or `/`, up to 256
    /// characters. It names the lane in work requests, leases, rows and logs.
    LaneName, "lane", "1 to 256 printable ASCII characters, no space or '/'", 256,
    lane_char, lane_char
);

id_type!(
    /// A host's name, as a worker registers it (`--host`, else the machine's hostname): 1 to
    /// 256 bytes of UTF-8 without control characters, not starting with a space. Lanes on one
    /// host share it: anti-affinity and the dashboard group by it. It never becomes a path.
    HostName, "host", "1 to 256 bytes without control characters, not starting with a space", 256,
    |c| c > b' ' && c != 0x7f, |c| c >= b' ' && c != 0x7f
);

fn lane_char(c: u8) -> bool {
    c.is_ascii_graphic() && c != b'/'
}

/// A trial id, `<task>.r<run_index>.<arm>`. Built from validated parts or parsed strictly, so it
/// never contains `/`, `..` as a component, or anything else that could escape a directory.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TrialId(Arc<str>);

impl<'de> Deserialize<'de> for TrialId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(Checked(|v: &str| Self::new(v)))
    }
}

// By reference: `into = "String"` would copy the id each time a row or event is written.
impl Serialize for TrialId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl TrialId {
    pub fn from_parts(task: &TaskId, run_index: u32, arm: &ArmId) -> Self {
        // Built on the stack, not with `format!`: a claim builds several per trial, and the
        // text is copied once, into its `Arc`. Parts within their patterns' limits (128 + 2 +
        // 10 + 1 + 64 bytes) always fit.
        let mut run = itoa::Buffer::new();
        let parts = [
            task.as_str(),
            ".r",
            run.format(run_index),
            ".",
            arm.as_str(),
        ];
        let mut buf = [0u8; 256];
        let mut n = 0;
        for part in parts {
            buf[n..n + part.len()].copy_from_slice(part.as_bytes());
            n += part.len();
        }
        Self(Arc::from(
            std::str::from_utf8(&buf[..n]).expect("ids are ASCII"),
        ))
    }

    /// Parses and validates `<task>.r<run_index>.<arm>`, returning its parts.
    pub fn parse(value: &str) -> Result<(TaskId, u32, ArmId), IdError> {
        let err = || IdError {
            kind: "trial",
            value: value.to_owned(),
            pattern: "<task>.r<run_index>.<arm>",
        };
        let (rest, arm) = value.rsplit_once('.').ok_or_else(err)?;
        let (task, run) = rest.rsplit_once(".r").ok_or_else(err)?;
        let run_index: u32 = if run.is_empty()
            || !run.bytes().all(|c| c.is_ascii_digit())
            || (run.len() > 1 && run.starts_with('0'))
        {
            return Err(err());
        } else {
            run.parse().map_err(|_| err())?
        };
        let task = TaskId::new(task).map_err(|_| err())?;
        let arm = ArmId::new(arm).map_err(|_| err())?;
        Ok((task, run_index, arm))
    }

    pub fn new(value: impl AsRef<str>) -> Result<Self, IdError> {
        let value = value.as_ref();
        Self::parse(value)?;
        Ok(Self(Arc::from(value)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TrialId {
    type Error = IdError;
    fn try_from(value: String) -> Result<Self, IdError> {
        Self::new(value)
    }
}

impl From<TrialId> for String {
    fn from(id: TrialId) -> String {
        String::from(&*id.0)
    }
}

/// Reads an id from a string, borrowed when the input allows (no copy before the id's own),
/// and checks it with the id's constructor.
struct Checked<F>(F);

impl<'de, T, F: FnOnce(&str) -> Result<T, IdError>> serde::de::Visitor<'de> for Checked<F> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<T, E> {
        (self.0)(v).map_err(E::custom)
    }

    // As serde's `String` reads UTF-8 bytes, for formats that hand strings over as bytes.
    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<T, E> {
        match std::str::from_utf8(v) {
            Ok(s) => self.visit_str(s),
            Err(_) => Err(E::invalid_value(serde::de::Unexpected::Bytes(v), &self)),
        }
    }
}

impl fmt::Display for TrialId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The fencing token of one attempt: `(trial_id, attempt)`, attempt issued by the store from 1.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Token {
    pub trial_id: TrialId,
    pub attempt: u32,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#a{}", self.trial_id, self.attempt)
    }
}

/// Names one attempt of one campaign, shown as `campaign/trial#aN`.
///
/// A [`Token`] alone is not unique on a worker: campaigns over the same dataset share task,
/// arm and so trial ids, and each store issues attempt 1 of each. Every map, file name and
/// message that names an attempt therefore uses this pair. The lane also stamps it on every
/// driver call, so news about an attempt that already ended is recognised and dropped.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttemptTag {
    pub campaign: CampaignId,
    pub token: Token,
}

impl AttemptTag {
    pub fn new(campaign: CampaignId, token: Token) -> Self {
        Self { campaign, token }
    }
}

impl fmt::Display for AttemptTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.campaign, self.token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_serialize_as_their_text_and_read_back_checked() {
        let task = TaskId::new("t-1").unwrap();
        let arm = ArmId::new("a").unwrap();
        let trial = TrialId::from_parts(&task, 3, &arm);
        assert_eq!(serde_json::to_string(&task).unwrap(), r#""t-1""#);
        assert_eq!(serde_json::to_string(&trial).unwrap(), r#""t-1.r3.a""#);
        assert_eq!(
            serde_json::from_str::<TrialId>(r#""t-1.r3.a""#).unwrap(),
            trial
        );
        assert!(serde_json::from_str::<TaskId>(r#""../x""#).is_err());
    }

    #[test]
    fn ids_read_from_any_string_form_and_copy_by_reference() {
        // Borrowed from the input, unescaped into a scratch buffer, or owned (a JSON value).
        let direct: TaskId = serde_json::from_str(r#""t:1""#).unwrap();
        let escaped: TaskId = serde_json::from_str(r#""t\u003a1""#).unwrap();
        let owned: TaskId = serde_json::from_value(serde_json::json!("t:1")).unwrap();
        assert_eq!(direct, escaped);
        assert_eq!(direct, owned);
        // Each form is checked, with the id's own message.
        let err = serde_json::from_value::<ArmId>(serde_json::json!("a.b")).unwrap_err();
        assert!(
            err.to_string().contains("arm id \"a.b\" does not match"),
            "{err}"
        );
        let err = serde_json::from_str::<TrialId>(r#""t\u002e../x""#).unwrap_err();
        assert!(err.to_string().contains("trial id"), "{err}");
        let err = serde_json::from_str::<LaneName>("7").unwrap_err();
        assert!(err.to_string().contains("expected a string"), "{err}");
        // Formats that hand strings over as bytes.
        use serde::de::IntoDeserializer;
        let bytes: serde::de::value::BytesDeserializer<serde::de::value::Error> =
            b"t:1".as_slice().into_deserializer();
        assert_eq!(TaskId::deserialize(bytes).unwrap(), direct);
        let bad: serde::de::value::BytesDeserializer<serde::de::value::Error> =
            b"\xff".as_slice().into_deserializer();
        assert!(TaskId::deserialize(bad).is_err());
        // A copy shares the text.
        let copy = direct.clone();
        assert!(std::ptr::eq(copy.as_str(), direct.as_str()));
        // The longest parts of a trial id still fit its stack buffer.
        let task = TaskId::new("t".repeat(128)).unwrap();
        let arm = ArmId::new("a".repeat(64)).unwrap();
        let trial = TrialId::from_parts(&task, u32::MAX, &arm);
        assert_eq!(
            TrialId::parse(trial.as_str()).unwrap(),
            (task, u32::MAX, arm)
        );
    }

    #[test]
    fn an_attempt_tag_names_campaign_trial_and_attempt() {
        let tag = AttemptTag::new(
            CampaignId::new("c1").unwrap(),
            Token {
                trial_id: TrialId::new("t.r0.a").unwrap(),
                attempt: 2,
            },
        );
        assert_eq!(tag.to_string(), "c1/t.r0.a#a2");
    }

    #[test]
    fn lane_names() {
        assert!(LaneName::new("gpu-box-7-0").is_ok());
        assert!(LaneName::new("w@host:1").is_ok());
        assert!(LaneName::new("").is_err());
        assert!(LaneName::new("a b").is_err());
        assert!(LaneName::new("a/b").is_err());
        assert!(LaneName::new("x".repeat(257)).is_err());
    }

    #[test]
    fn campaign_ids() {
        assert!(CampaignId::new("osworld-v2-sonnet").is_ok());
        assert!(CampaignId::new("a").is_ok());
        assert!(CampaignId::new("-a").is_err());
        assert!(CampaignId::new("A").is_err());
        assert!(CampaignId::new("").is_err());
        assert!(CampaignId::new("a".repeat(63)).is_ok());
        assert!(CampaignId::new("a".repeat(64)).is_err());
    }

    #[test]
    fn task_and_arm_ids() {
        assert!(TaskId::new("MB-01:x.y_z").is_ok());
        assert!(TaskId::new(".hidden").is_err());
        assert!(TaskId::new("a/b").is_err());
        assert!(TaskId::new("a".repeat(129)).is_err());
        assert!(ArmId::new("cc-cua_driver").is_ok());
        assert!(ArmId::new("a.b").is_err());
    }

    #[test]
    fn trial_ids_round_trip_and_reject_paths() {
        let t = TrialId::from_parts(
            &TaskId::new("t.r1").unwrap(),
            12,
            &ArmId::new("arm").unwrap(),
        );
        assert_eq!(t.as_str(), "t.r1.r12.arm");
        let (task, run, arm) = TrialId::parse(t.as_str()).unwrap();
        assert_eq!((task.as_str(), run, arm.as_str()), ("t.r1", 12, "arm"));
        for bad in [
            "../x.r0.a",
            "x.r0.a/b",
            "x.r.a",
            "x.r01.a",
            "x.r0.",
            "x.r0.a.b",
            "x",
        ] {
            assert!(TrialId::new(bad).is_err(), "{bad}");
        }
    }
}
