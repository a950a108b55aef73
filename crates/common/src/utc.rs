//! UTC instants as epoch milliseconds: the time type that crosses module boundaries, so
//! clocks stay injectable and nothing depends on a time zone. Records that people read (rows,
//! attempt records, archives) carry [`UtcTime`], the same instant as RFC 3339 text.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Milliseconds since the Unix epoch, UTC.
pub type EpochMs = i64;

/// An RFC 3339 time that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not an RFC 3339 UTC time such as 2026-12-31T00:00:00Z: {reason}")]
pub struct UtcError {
    pub value: String,
    pub reason: String,
}

/// Parses an RFC 3339 time (any offset) into epoch milliseconds.
pub fn parse_rfc3339(value: &str) -> Result<EpochMs, UtcError> {
    let t = OffsetDateTime::parse(value, &Rfc3339).map_err(|e| UtcError {
        value: value.to_owned(),
        reason: e.to_string(),
    })?;
    Ok((t.unix_timestamp_nanos() / 1_000_000) as EpochMs)
}

/// Formats epoch milliseconds as RFC 3339 UTC, to the millisecond.
pub fn format_rfc3339(ms: EpochMs) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}

/// An instant as rows and records spell it: RFC 3339 text, checked when it is made or read,
/// and kept as written so a ledger reads back byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(try_from = "String")]
pub struct UtcTime {
    text: String,
    ms: EpochMs,
}

// Its text, by reference (`into = "String"` would copy it for every row written).
impl Serialize for UtcTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl UtcTime {
    /// The instant `ms`, formatted as [`format_rfc3339`] does.
    pub fn from_ms(ms: EpochMs) -> Self {
        Self {
            text: format_rfc3339(ms),
            ms,
        }
    }

    /// Parses RFC 3339 text, keeping it as given.
    pub fn parse(text: impl Into<String>) -> Result<Self, UtcError> {
        let text = text.into();
        let ms = parse_rfc3339(&text)?;
        Ok(Self { text, ms })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn epoch_ms(&self) -> EpochMs {
        self.ms
    }
}

/// The Unix epoch: a placeholder for records built field by field, which set the real time.
impl Default for UtcTime {
    fn default() -> Self {
        Self::from_ms(0)
    }
}

impl std::str::FromStr for UtcTime {
    type Err = UtcError;
    fn from_str(text: &str) -> Result<Self, UtcError> {
        Self::parse(text)
    }
}

impl TryFrom<String> for UtcTime {
    type Error = UtcError;
    fn try_from(text: String) -> Result<Self, UtcError> {
        Self::parse(text)
    }
}

impl From<UtcTime> for String {
    fn from(t: UtcTime) -> String {
        t.text
    }
}

impl std::fmt::Display for UtcTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_serializes_as_the_text_it_was_read_from() {
        let t: UtcTime = serde_json::from_str(r#""2026-12-31T00:00:00.5+00:00""#).unwrap();
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            r#""2026-12-31T00:00:00.5+00:00""#
        );
    }

    #[test]
    fn round_trip() {
        let ms = parse_rfc3339("2026-12-31T00:00:00Z").unwrap();
        assert_eq!(ms, 1_798_675_200_000);
        assert_eq!(format_rfc3339(ms), "2026-12-31T00:00:00Z");
        assert_eq!(parse_rfc3339("2026-12-31T01:00:00+01:00").unwrap(), ms);
        assert!(parse_rfc3339("2026-13-01T00:00:00Z").is_err());
        assert!(parse_rfc3339("tomorrow").is_err());
    }

    #[test]
    fn a_utc_time_keeps_its_text_and_refuses_what_is_not_one() {
        let t = UtcTime::parse("2026-12-31T01:00:00.5+01:00").unwrap();
        assert_eq!(t.as_str(), "2026-12-31T01:00:00.5+01:00");
        assert_eq!(t.epoch_ms(), 1_798_675_200_500);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, "\"2026-12-31T01:00:00.5+01:00\"");
        assert_eq!(serde_json::from_str::<UtcTime>(&json).unwrap(), t);
        let err = serde_json::from_str::<UtcTime>("\"yesterday\"").unwrap_err();
        assert!(
            err.to_string().contains("not an RFC 3339 UTC time"),
            "{err}"
        );
        assert_eq!(
            UtcTime::from_ms(1_798_675_200_000).as_str(),
            "2026-12-31T00:00:00Z"
        );
    }
}
