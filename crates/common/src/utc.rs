//! UTC instants as epoch milliseconds: the only time type that crosses module boundaries, so
//! clocks stay injectable and nothing depends on a time zone.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let ms = parse_rfc3339("2026-12-31T00:00:00Z").unwrap();
        assert_eq!(ms, 1_798_675_200_000);
        assert_eq!(format_rfc3339(ms), "2026-12-31T00:00:00Z");
        assert_eq!(parse_rfc3339("2026-12-31T01:00:00+01:00").unwrap(), ms);
        assert!(parse_rfc3339("2026-13-01T00:00:00Z").is_err());
        assert!(parse_rfc3339("tomorrow").is_err());
    }
}
