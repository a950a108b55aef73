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
    /// Refused: a resume whose campaign file drifted from what was recorded, or a store of
    /// a layout this version does not use.
    Refused = 3,
    /// Stopped by a gate (cutoff, budget, quota, auth) before the campaign was done.
    Gate = 4,
    /// Stopped by the user (Ctrl-C or `lanes stop`) before the campaign was done.
    Stopped = 5,
    /// `lanes report` without `--partial` while some trials are not final.
    Incomplete = 6,
}

impl From<Code> for ExitCode {
    fn from(c: Code) -> Self {
        ExitCode::from(c as u8)
    }
}
