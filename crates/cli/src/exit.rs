//! Exit codes, documented in the README: scripts branch on them.

use std::process::ExitCode;

/// What a `lanes` command's exit status means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    /// Done: the command did what was asked.
    Ok = 0,
    /// An unexpected failure (I/O, a lost connection).
    Failure = 1,
    /// Bad input: a campaign file or an argument that does not validate.
    BadInput = 2,
}

impl From<Code> for ExitCode {
    fn from(c: Code) -> Self {
        ExitCode::from(c as u8)
    }
}
