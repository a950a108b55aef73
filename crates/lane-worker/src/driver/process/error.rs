//! Why a driver call (or spawn) failed, and what that means for the lane: a crash to
//! restart from, or an answer from a driver that is fine.

use std::io;
use std::time::Duration;

use lanes_common::row::FailureKind;

/// Why a driver call (or spawn) failed.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("cannot start driver `{program}`: {source}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("driver exited ({status}){}", tail_suffix(.stderr_tail))]
    Exited { status: String, stderr_tail: String },
    #[error("driver call `{method}` passed its deadline of {after:?}; the driver was killed")]
    Deadline { method: String, after: Duration },
    #[error("driver protocol error: {0}")]
    Protocol(String),
    /// A JSON-RPC error answer: the call failed, the driver is fine.
    #[error("driver call `{method}` failed ({code}): {message}")]
    Rpc {
        method: String,
        code: i64,
        message: String,
        failure_kind: Option<String>,
    },
    #[error("driver call `{method}` returned a bad result: {reason}")]
    BadResult { method: String, reason: String },
    /// The lane could not encode a call (nothing was sent; the driver is fine).
    #[error("cannot send driver call `{method}`: {reason}")]
    BadParams { method: String, reason: String },
}

fn tail_suffix(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!("; stderr tail: {tail}")
    }
}

impl DriverError {
    /// The driver is broken and must be restarted; the attempt is `driver_crash`.
    pub fn is_crash(&self) -> bool {
        matches!(
            self,
            Self::Exited { .. }
                | Self::Deadline { .. }
                | Self::Protocol(_)
                | Self::BadResult { .. }
        )
    }

    /// The failure kind of this error: the driver's `data.failure_kind` for a JSON-RPC error
    /// answer, `driver_crash` for a crash, `None` otherwise.
    /// A name this lane does not know is no kind.
    pub fn failure_kind(&self) -> Option<FailureKind> {
        match self {
            Self::Rpc { failure_kind, .. } => failure_kind.as_deref().and_then(|k| k.parse().ok()),
            e if e.is_crash() => Some(FailureKind::DriverCrash),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_classify() {
        let rpc = DriverError::Rpc {
            method: "boot".into(),
            code: -32000,
            message: "m".into(),
            failure_kind: None,
        };
        assert!(!rpc.is_crash());
        assert_eq!(rpc.failure_kind(), None);
        let bad = DriverError::BadParams {
            method: "boot".into(),
            reason: "r".into(),
        };
        assert!(!bad.is_crash());
        let exited = DriverError::Exited {
            status: "exit status: 1".into(),
            stderr_tail: String::new(),
        };
        assert_eq!(exited.to_string(), "driver exited (exit status: 1)");
        let exited = DriverError::Exited {
            status: "exit status: 1".into(),
            stderr_tail: "boom".into(),
        };
        assert_eq!(
            exited.to_string(),
            "driver exited (exit status: 1); stderr tail: boom"
        );
        let deadline = DriverError::Deadline {
            method: "reset".into(),
            after: Duration::from_secs(3),
        };
        assert!(deadline.is_crash());
        assert_eq!(deadline.failure_kind(), Some(FailureKind::DriverCrash));
        assert_eq!(
            deadline.to_string(),
            "driver call `reset` passed its deadline of 3s; the driver was killed"
        );
    }
}
