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
