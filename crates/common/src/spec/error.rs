//! Campaign validation errors: each names the file, the line (when known) and the field.

use std::fmt;
use std::path::{Path, PathBuf};

use super::env::EnvRefused;
use crate::ids::IdError;
use crate::utc::UtcError;

/// A campaign file or tasks file that does not validate.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct SpecError {
    pub file: PathBuf,
    /// 1-based.
    pub line: Option<usize>,
    /// The key, as a dotted path: `arms[1].id`, `tasks`, `cutoff_utc`.
    pub field: String,
    pub kind: Box<SpecErrorKind>,
}

impl SpecError {
    pub fn at(file: &Path, line: usize, field: impl Into<String>, kind: SpecErrorKind) -> Self {
        Self {
            file: file.to_owned(),
            line: Some(line),
            field: field.into(),
            kind: Box::new(kind),
        }
    }

    pub fn in_file(file: &Path, field: impl Into<String>, kind: SpecErrorKind) -> Self {
        Self {
            file: file.to_owned(),
            line: None,
            field: field.into(),
            kind: Box::new(kind),
        }
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if self.field.is_empty() {
            write!(f, ": {}", self.kind)
        } else {
            write!(f, ": {}: {}", self.field, self.kind)
        }
    }
}

/// What is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecErrorKind {
    /// The campaign file could not be read.
    #[error("cannot read the campaign file: {0}")]
    Io(String),
    /// Not valid TOML, or a value of the wrong type.
    #[error("{0}")]
    Syntax(String),
    /// A key that is not part of the format: a typo must never silently change a campaign.
    #[error("unknown key `{0}`")]
    UnknownKey(String),
    #[error("{0}")]
    InvalidId(IdError),
    #[error("duplicate {what} id {id:?}{}", .first_line.map(|l| format!(" (first defined on line {l})")).unwrap_or_default())]
    Duplicate {
        what: &'static str,
        id: String,
        first_line: Option<usize>,
    },
    #[error("a campaign needs at least one arm")]
    NoArms,
    #[error("a campaign needs at least one task")]
    NoTasks,
    #[error("phase1_runs must be at least 1")]
    ZeroPhase1Runs,
    #[error("payload is {bytes} bytes, over the limit of 65536 (64 KiB)")]
    PayloadTooLarge { bytes: usize },
    /// A task payload that is an array, a string, a number, a boolean or null.
    #[error("a task payload must be a JSON object, not {0}")]
    PayloadNotObject(&'static str),
    /// A TOML `nan` or `inf` where JSON is stored (a payload, an arm's config): JSON has
    /// neither, and it would be stored as null.
    #[error("must be a finite number, not {0} (JSON has no NaN or infinity)")]
    NotFinite(&'static str),
    #[error("tasks file {path} cannot be read: {reason}")]
    TasksFileMissing { path: PathBuf, reason: String },
    #[error("bad JSON: {0}")]
    BadJson(String),
    #[error("{0}")]
    BadCutoff(UtcError),
    /// A `[driver] env` name (set or read) that is not a variable name or is reserved.
    #[error("{0}")]
    Env(EnvRefused),
    #[error("more than {limit} {what}")]
    TooMany { what: &'static str, limit: usize },
    /// Free text over its size limit (`lanes_common::limits`).
    #[error("is {bytes} bytes, over the limit of {limit} bytes")]
    TooLong { bytes: usize, limit: usize },
    /// A value out of its range, or options that contradict each other.
    #[error("{0}")]
    Invalid(String),
}

impl SpecErrorKind {
    pub fn invalid(message: impl Into<String>) -> Self {
        SpecErrorKind::Invalid(message.into())
    }
}
