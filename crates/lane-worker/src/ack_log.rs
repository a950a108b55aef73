//! An optional audit trail of acknowledged outcomes: with `LANES_ACK_LOG=<file>` set, the
//! worker appends one JSON line per `OutcomeAck` (campaign, token, seq, counted). The fault
//! suite's history checker uses it to prove that every outcome a worker saw acknowledged is
//! in the ledger at the seq it was told; an operator can use it the same way.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The environment variable naming the file.
pub const ACK_LOG_ENV: &str = "LANES_ACK_LOG";

/// One acknowledged outcome, as logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckLine {
    pub campaign: String,
    pub trial_id: String,
    pub attempt: u32,
    pub seq: u64,
    pub counted: bool,
}

impl AckLine {
    /// The line for one acknowledged attempt.
    pub fn new(tag: &lanes_common::ids::AttemptTag, seq: u64, counted: bool) -> Self {
        Self {
            campaign: tag.campaign.to_string(),
            trial_id: tag.token.trial_id.to_string(),
            attempt: tag.token.attempt,
            seq,
            counted,
        }
    }
}

#[derive(Debug)]
pub struct AckLog {
    file: Option<File>,
}

impl AckLog {
    /// The log named by `LANES_ACK_LOG`, or none.
    pub fn from_env() -> Self {
        let file = std::env::var_os(ACK_LOG_ENV).map(PathBuf::from).and_then(|p| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&p)
                .map_err(|e| tracing::error!(path = %p.display(), error = %e, "cannot open the ack log"))
                .ok()
        });
        Self { file }
    }

    /// Appends one line (one write, so lines from one process never interleave).
    pub fn record(&mut self, line: &AckLine) {
        let Some(f) = self.file.as_mut() else { return };
        let mut text = serde_json::to_string(line).expect("an ack line serializes");
        text.push('\n');
        if let Err(e) = f.write_all(text.as_bytes()) {
            tracing::error!(error = %e, "cannot append to the ack log");
        }
    }
}
