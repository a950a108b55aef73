//! Size limits on everything a client or a lane sends: the campaign (its tasks, arms and
//! driver), and the lane messages (`Register`, `Outcome`, `Release`). Each limit is a named
//! constant; `docs/COORDINATOR.md` lists them all. A campaign's limits are checked by
//! [`crate::spec`] validation (so a campaign file and a gRPC submit are refused alike); a lane
//! message's by one function per message kind in [`lane`], which the coordinator calls before it
//! reads anything else of the message.
//!
//! The limits are generous for real use: they exist so that one message can never make the
//! coordinator hold, store or log an unbounded amount of text.

mod assignment;
mod lane;

pub use assignment::{
    AssignmentTooLarge, assignment_budget, check_assignments, largest_assignment,
};
pub use lane::{check_outcome, check_register, check_release, fit_outcome};

// ---- campaign --------------------------------------------------------------------------------

/// At most this many tasks in one campaign.
pub const MAX_TASKS: usize = 1_000_000;
/// At most this many arms in one campaign.
pub const MAX_ARMS: usize = 64;
/// At most this many runs per task, over both phases.
pub const MAX_RUNS: u32 = 10_000;
/// A task's payload, in canonical JSON.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// A task's `group`.
pub const MAX_GROUP_BYTES: usize = 256;
/// A task's `tags`: how many, and each one.
pub const MAX_TAGS: usize = 64;
pub const MAX_TAG_BYTES: usize = 256;
/// An arm's `config`, in canonical JSON.
pub const MAX_ARM_CONFIG_BYTES: usize = 64 * 1024;
/// A provider name (an arm's `provider`, an outcome's quota reading).
pub const MAX_PROVIDER_BYTES: usize = 128;
/// `[driver] command`: how many arguments, and each one.
pub const MAX_COMMAND_ARGS: usize = 256;
pub const MAX_COMMAND_ARG_BYTES: usize = 4096;
/// `[driver] secret_payload_keys`: how many, and each one.
pub const MAX_SECRET_KEYS: usize = 64;
pub const MAX_SECRET_KEY_BYTES: usize = 256;
/// Identity pins (`[driver.expect]`, a driver's reported pins): how many, each key, each value.
pub const MAX_PINS: usize = 64;
pub const MAX_PIN_KEY_BYTES: usize = 256;
pub const MAX_PIN_VALUE_BYTES: usize = 1024;
/// `[driver] env`: how many variables, each name, each value (a literal or `$NAME`). Real
/// drivers need a few keys and switches; an env is copied into every assignment and every
/// driver process.
pub const MAX_DRIVER_ENV: usize = 256;
pub const MAX_DRIVER_ENV_NAME_BYTES: usize = 256;
pub const MAX_DRIVER_ENV_VALUE_BYTES: usize = 4096;

/// The coordinator's default cap on the trials of one campaign (`--max-trials`).
pub const DEFAULT_MAX_TRIALS: u64 = 10_000_000;

// ---- lane messages ---------------------------------------------------------------------------

/// A worker id, a host name, an outcome's lane name: 1 to this many bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// A worker's version string.
pub const MAX_VERSION_BYTES: usize = 256;
/// A worker's labels: how many, each key, each value.
pub const MAX_LABELS: usize = 64;
pub const MAX_LABEL_KEY_BYTES: usize = 256;
pub const MAX_LABEL_VALUE_BYTES: usize = 1024;
/// The arms a worker says it serves.
pub const MAX_WORKER_ARMS: usize = 1024;
/// An outcome's `error`, a release's `detail`, a gate's `reason`.
pub const MAX_ERROR_BYTES: usize = 16 * 1024;
/// An outcome's `final_text` (the row keeps its first 2000 characters).
pub const MAX_FINAL_TEXT_BYTES: usize = 64 * 1024;
/// An outcome's `runtime_outcome`.
pub const MAX_RUNTIME_OUTCOME_BYTES: usize = 256;
/// An outcome's checks: how many, each name, each detail.
pub const MAX_CHECKS: usize = 1024;
pub const MAX_CHECK_NAME_BYTES: usize = 256;
pub const MAX_CHECK_DETAIL_BYTES: usize = 4096;
/// An outcome's publication errors: how many, and each one.
pub const MAX_PUBLICATION_ERRORS: usize = 64;
pub const MAX_PUBLICATION_ERROR_BYTES: usize = 4096;
/// An outcome's artifacts (paths): how many, and each one.
pub const MAX_ARTIFACTS: usize = 1024;
pub const MAX_ARTIFACT_BYTES: usize = 1024;
/// A driver identity's name and version.
pub const MAX_DRIVER_NAME_BYTES: usize = 256;
/// A timestamp (`started_utc`, `ended_utc`).
pub const MAX_TIMESTAMP_BYTES: usize = 64;

// ---- driver figures --------------------------------------------------------------------------

/// The most one attempt may report spending, in USD: an outcome's `cost_usd` (its gate's cost
/// included) and its gate's `cost_usd`. Far above any real attempt; a driver reporting more is
/// broken, and one such figure would swamp the spend, the budget gate and the report.
pub const MAX_ATTEMPT_COST_USD: f64 = 10_000.0;
/// The most tokens one attempt may report, per count (`input`, `output`, `cache_read`,
/// `cache_write`): 10^10, so sums over a campaign's trials stay exact and never overflow.
pub const MAX_ATTEMPT_TOKENS: u64 = 10_000_000_000;

// ---- refusals --------------------------------------------------------------------------------

/// A refusal's list (a submit's field violations, a resume's conflicts): at most this many
/// items, in at most this many bytes of text; the rest are counted ("and K more"). The list
/// travels twice in the status's trailers (the message and the details), and gRPC clients
/// refuse trailers much over 8 KiB.
pub const MAX_REFUSAL_ITEMS: usize = 50;
pub const MAX_REFUSAL_BYTES: usize = 2048;
/// Each field path and value a refusal quotes (a JSON key, a recorded arm config may be
/// 64 KiB); longer is cut, marked `…`.
pub const MAX_REFUSAL_TEXT_BYTES: usize = 256;

/// What a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Items,
}

impl Unit {
    fn as_str(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Items => "items",
        }
    }
}

/// A field over its limit (or an empty field that must not be).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} is {actual} {}, {}", .unit.as_str(), self.rule())]
pub struct LimitError {
    /// The field, as a dotted path: `outcome.checks[3].detail`.
    pub field: String,
    pub actual: usize,
    pub limit: usize,
    pub unit: Unit,
}

impl LimitError {
    fn rule(&self) -> String {
        if self.actual == 0 {
            format!("must be 1 to {} {}", self.limit, self.unit.as_str())
        } else {
            format!("over the limit of {} {}", self.limit, self.unit.as_str())
        }
    }
}

/// Refuses `text` over `limit` bytes.
pub(crate) fn bytes(
    field: impl FnOnce() -> String,
    text: &str,
    limit: usize,
) -> Result<(), LimitError> {
    over(field, text.len(), limit, Unit::Bytes)
}

/// Refuses an empty `text`, or one over `limit` bytes.
pub(crate) fn name(
    field: impl FnOnce() -> String,
    text: &str,
    limit: usize,
) -> Result<(), LimitError> {
    if text.is_empty() {
        return Err(LimitError {
            field: field(),
            actual: 0,
            limit,
            unit: Unit::Bytes,
        });
    }
    bytes(field, text, limit)
}

/// Refuses more than `limit` items.
pub(crate) fn items(
    field: impl FnOnce() -> String,
    n: usize,
    limit: usize,
) -> Result<(), LimitError> {
    over(field, n, limit, Unit::Items)
}

fn over(
    field: impl FnOnce() -> String,
    actual: usize,
    limit: usize,
    unit: Unit,
) -> Result<(), LimitError> {
    if actual > limit {
        Err(LimitError {
            field: field(),
            actual,
            limit,
            unit,
        })
    } else {
        Ok(())
    }
}

/// A figure a driver reported that no attempt can have.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FigureError {
    #[error("{field} must be a finite number from 0 to {max} USD, got {}", Figure(*.value))]
    Cost {
        field: &'static str,
        value: f64,
        max: f64,
    },
    #[error("{field} is {value}, over the maximum of {max} per attempt")]
    Tokens {
        field: &'static str,
        value: u64,
        max: u64,
    },
}

impl FigureError {
    /// The figure, as a dotted path in the outcome (`gate.cost_usd`, `tokens.input`).
    pub fn field(&self) -> &'static str {
        match self {
            FigureError::Cost { field, .. } | FigureError::Tokens { field, .. } => field,
        }
    }
}

/// A float as people read it: `1e308`, not 309 digits.
struct Figure(f64);

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_finite() && self.0.abs() >= 1e15 {
            write!(f, "{:e}", self.0)
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// Refuses a cost that is negative, not a finite number, or over [`MAX_ATTEMPT_COST_USD`].
pub fn check_cost_usd(field: &'static str, value: f64) -> Result<(), FigureError> {
    if (0.0..=MAX_ATTEMPT_COST_USD).contains(&value) {
        Ok(())
    } else {
        Err(FigureError::Cost {
            field,
            value,
            max: MAX_ATTEMPT_COST_USD,
        })
    }
}

/// Refuses a token count over [`MAX_ATTEMPT_TOKENS`].
pub fn check_tokens(t: &crate::row::TokenUsage) -> Result<(), FigureError> {
    for (field, value) in [
        ("tokens.input", t.input),
        ("tokens.output", t.output),
        ("tokens.cache_read", t.cache_read),
        ("tokens.cache_write", t.cache_write),
    ] {
        if value > MAX_ATTEMPT_TOKENS {
            return Err(FigureError::Tokens {
                field,
                value,
                max: MAX_ATTEMPT_TOKENS,
            });
        }
    }
    Ok(())
}

/// Cuts `text` to at most `limit` bytes, at a character boundary.
pub(crate) fn cut(text: &mut String, limit: usize) {
    if text.len() > limit {
        let mut end = limit;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
}

/// The bytes `text` takes as a gRPC status message, which is percent-encoded: a byte outside
/// printable ASCII (or `%`) takes three.
pub(crate) fn status_bytes(text: &str) -> usize {
    text.bytes()
        .map(|b| {
            if (0x20..0x7f).contains(&b) && b != b'%' {
                1
            } else {
                3
            }
        })
        .sum()
}

/// Cuts `text` to at most `limit` bytes and marks the cut with `…`, for text quoted back in
/// a refusal.
pub(crate) fn cut_quoted(text: &mut String, limit: usize) {
    if text.len() > limit {
        cut(text, limit);
        text.push('…');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_field_and_the_limit() {
        let e = bytes(|| "outcome.error".into(), &"x".repeat(11), 10).unwrap_err();
        assert_eq!(
            e.to_string(),
            "outcome.error is 11 bytes, over the limit of 10 bytes"
        );
        let e = name(|| "register.host".into(), "", 256).unwrap_err();
        assert_eq!(
            e.to_string(),
            "register.host is 0 bytes, must be 1 to 256 bytes"
        );
        let e = items(|| "outcome.checks".into(), 5, 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "outcome.checks is 5 items, over the limit of 4 items"
        );
        assert!(bytes(|| unreachable!(), "ok", 2).is_ok());
    }

    #[test]
    fn cut_keeps_whole_characters() {
        let mut s = "aé€".to_owned(); // 1 + 2 + 3 bytes
        cut(&mut s, 5);
        assert_eq!(s, "aé");
        cut(&mut s, 2);
        assert_eq!(s, "a");
        cut(&mut s, 10);
        assert_eq!(s, "a");
    }
}
