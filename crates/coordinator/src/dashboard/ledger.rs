//! What the campaign page keeps of the ledger between updates: each trial's latest outcome
//! (for the schedule grid) and when trials became final (for throughput). It is folded from
//! rows in seq order, so a live page reads only the rows written since its last update.

use std::collections::HashMap;

use lanes_common::row::{Row, Status};
use lanes_common::utc::parse_rfc3339;

/// A trial's place in the grid: what its rows (and the leases in flight) say now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Cell {
    /// No row yet: waiting for a lane (or for phase 1, or a gate).
    Pending,
    /// A lane holds its lease now.
    Running,
    /// An attempt failed on the infrastructure and the trial waits for another.
    Retrying,
    /// Final and counted, and it passed.
    Passed,
    /// Final and counted, and it did not pass.
    Failed,
    /// Final and excluded from the results (retries spent, preflight limit).
    Excluded,
    /// A phase-2 trial the phase-2 rule refused to start.
    NotStarted,
}

impl Cell {
    pub(crate) const ALL: [Cell; 7] = [
        Cell::Passed,
        Cell::Failed,
        Cell::Excluded,
        Cell::NotStarted,
        Cell::Running,
        Cell::Retrying,
        Cell::Pending,
    ];

    /// The CSS class (colour and pattern) of the cell.
    pub(crate) fn class(self) -> &'static str {
        match self {
            Cell::Pending => "c-pending",
            Cell::Running => "c-running",
            Cell::Retrying => "c-retrying",
            Cell::Passed => "c-passed",
            Cell::Failed => "c-failed",
            Cell::Excluded => "c-excluded",
            Cell::NotStarted => "c-notstarted",
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            Cell::Pending => "pending",
            Cell::Running => "running",
            Cell::Retrying => "retrying",
            Cell::Passed => "passed",
            Cell::Failed => "failed",
            Cell::Excluded => "excluded",
            Cell::NotStarted => "not started",
        }
    }

    pub(crate) fn is_final(self) -> bool {
        matches!(
            self,
            Cell::Passed | Cell::Failed | Cell::Excluded | Cell::NotStarted
        )
    }
}

/// The ledger as the page needs it.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// The seq of the next row to read.
    pub(crate) next_seq: u64,
    /// Each trial with a row, by trial id.
    pub(crate) cells: HashMap<String, Cell>,
    /// When each trial became final, ms since the epoch, in ledger order.
    pub(crate) finals_ms: Vec<i64>,
    /// When the last row was written.
    pub(crate) last_row_ms: Option<i64>,
}

impl Ledger {
    /// Folds in the next row (rows come in seq order).
    pub(crate) fn absorb(&mut self, row: &Row) {
        self.next_seq = row.seq + 1;
        let written = parse_rfc3339(&row.written_utc).ok();
        if written.is_some() {
            self.last_row_ms = written;
        }
        // A duplicate changes nothing: the trial's first scored attempt already won.
        if row.duplicate {
            return;
        }
        let cell = if row.status == Status::Requeued {
            Cell::Pending
        } else if !row.is_final {
            Cell::Retrying
        } else if row.status == Status::NotStarted {
            Cell::NotStarted
        } else if row.counted {
            if row.passed == Some(true) {
                Cell::Passed
            } else {
                Cell::Failed
            }
        } else {
            Cell::Excluded
        };
        let was_final = self
            .cells
            .insert(row.trial_id.to_string(), cell)
            .is_some_and(Cell::is_final);
        if cell.is_final()
            && !was_final
            && let Some(ms) = written
        {
            self.finals_ms.push(ms);
        }
    }

    /// A trial's cell, given the trials in flight now.
    pub(crate) fn cell(&self, trial: &str, running: bool) -> Cell {
        match self.cells.get(trial).copied() {
            Some(c) if c.is_final() => c,
            _ if running => Cell::Running,
            Some(c) => c,
            None => Cell::Pending,
        }
    }
}
