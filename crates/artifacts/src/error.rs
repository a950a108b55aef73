//! What went wrong with the store, sorted by what the caller should do about it.

use std::error::Error as _;

/// An artifact store failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached, timed out or failed on its side (5xx): try again later;
    /// nothing is lost by waiting.
    #[error("artifact store unavailable: {0}")]
    Unavailable(String),
    /// The store refused for good (no such bucket, no permission, a request it will never
    /// take), or a file is over the size limit: trying again gives the same answer.
    #[error("artifact store refused: {0}")]
    Refused(String),
    /// No such object (or no manifest: the attempt was never uploaded whole).
    #[error("not in the artifact store: {0}")]
    NotFound(String),
    /// The attempt's folder could not be read on this host.
    #[error("reading the attempt folder: {0}")]
    Local(String),
}

impl StoreError {
    /// Whether the same request may succeed later.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_))
    }

    /// Sorts an `object_store` error: a client error status (4xx but a timeout or a rate
    /// limit) is a refusal, anything else (5xx, a connection or a timeout) is transient. So
    /// are the refusals that pass by themselves: expired temporary credentials (refreshed by
    /// the client) and a clock skewed against the store's (set right by NTP).
    pub(crate) fn from_store(e: object_store::Error, missing_is_refusal: bool) -> Self {
        use object_store::Error as E;
        let text = one_line(&e);
        if PASSING.iter().any(|code| text.contains(code)) {
            return Self::Unavailable(text);
        }
        match &e {
            E::NotFound { .. } if missing_is_refusal => Self::Refused(text),
            E::NotFound { .. } => Self::NotFound(text),
            E::PermissionDenied { .. }
            | E::Unauthenticated { .. }
            | E::InvalidPath { .. }
            | E::NotSupported { .. }
            | E::NotImplemented { .. }
            | E::UnknownConfigurationKey { .. }
            | E::AlreadyExists { .. }
            | E::Precondition { .. } => Self::Refused(text),
            _ => match status(&e) {
                Some(s) if (400..500).contains(&s) && s != 408 && s != 429 => Self::Refused(text),
                _ => Self::Unavailable(text),
            },
        }
    }
}

/// Error codes of refusals that pass with time (S3's names; GCS and Azure answer these
/// cases with 401s that their clients retry with fresh tokens).
const PASSING: [&str; 4] = [
    "ExpiredToken",
    "TokenRefreshRequired",
    "RequestTimeTooSkewed",
    "RequestExpired",
];

/// The HTTP status somewhere in the error's chain, if a response came back. `object_store`
/// keeps its request error type private, so the status is read from its text
/// ("…non-2xx status code: 400 Bad Request…").
fn status(e: &object_store::Error) -> Option<u16> {
    let mut next: Option<&dyn std::error::Error> = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        if let Some((_, after)) = text.split_once("status code: ") {
            return after.get(..3).and_then(|s| s.parse().ok());
        }
        next = err.source();
    }
    None
}

/// The error and its causes on one line, bounded: a store's error bodies can be long.
fn one_line(e: &object_store::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(err) = next {
        let s = err.to_string();
        if !text.contains(&s) {
            text.push_str(": ");
            text.push_str(&s);
        }
        next = err.source();
    }
    let text = text.replace(['\n', '\r'], " ");
    match text.char_indices().nth(1000) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text,
    }
}
