//! What the campaign page keeps of the ledger between updates: each trial's latest outcome
//! (for the schedule grid), where its rows are (for its page), and when trials became final
//! (for throughput). It is folded from rows in seq order, so a refresh reads only the rows
//! written since the last one. The fold follows the report's: a duplicate changes nothing, a
//! row that is not final changes nothing once the trial is final (a late attempt's cancel or
//! error after another attempt won), and a requeued row reopens the trial.

use std::collections::{HashMap, HashSet};

use lanes_common::row::{Row, Status};

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

    /// Its index in [`Cell::ALL`].
    pub(crate) fn index(self) -> usize {
        Cell::ALL.iter().position(|c| *c == self).unwrap_or(0)
    }

    pub(crate) fn is_final(self) -> bool {
        matches!(
            self,
            Cell::Passed | Cell::Failed | Cell::Excluded | Cell::NotStarted
        )
    }
}

/// One trial as its rows leave it.
#[derive(Debug, Clone)]
pub(crate) struct TrialCell {
    pub(crate) cell: Cell,
    pub(crate) task: String,
    pub(crate) run: u32,
    /// The seqs of its rows, in order.
    pub(crate) seqs: Vec<u64>,
}

/// The ledger as the page needs it.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// The seq of the next row to read.
    pub(crate) next_seq: u64,
    /// Each trial with a row, by trial id.
    pub(crate) trials: HashMap<String, TrialCell>,
    /// When trials became final, ms since the epoch, in ledger order; a trial counts once
    /// (a requeued trial's second end is not more throughput).
    pub(crate) finals_ms: Vec<i64>,
    ended_once: HashSet<String>,
    /// When the last row was written.
    pub(crate) last_row_ms: Option<i64>,
}

impl Ledger {
    /// Folds in the next row (rows come in seq order).
    pub(crate) fn absorb(&mut self, row: &Row) {
        self.next_seq = row.seq + 1;
        let written = row.written_utc.epoch_ms();
        self.last_row_ms = Some(written);
        let id = row.trial_id.as_str();
        let trial = self
            .trials
            .entry(id.to_owned())
            .or_insert_with(|| TrialCell {
                cell: Cell::Pending,
                task: row.task.to_string(),
                run: row.run_index,
                seqs: Vec::new(),
            });
        trial.seqs.push(row.seq);
        if row.duplicate {
            return;
        }
        let cell = if row.status == Status::Requeued {
            Cell::Pending
        } else if !row.is_final {
            if trial.cell.is_final() {
                return;
            }
            Cell::Retrying
        } else if row.status == Status::NotStarted {
            Cell::NotStarted
        } else if row.counted {
            if row.result.passed == Some(true) {
                Cell::Passed
            } else {
                Cell::Failed
            }
        } else {
            Cell::Excluded
        };
        let was_final = trial.cell.is_final();
        trial.cell = cell;
        if cell.is_final() && !was_final && self.ended_once.insert(id.to_owned()) {
            self.finals_ms.push(written);
        }
    }

    /// A trial's cell, given whether a lane runs it now.
    pub(crate) fn cell(&self, trial: &str, running: bool) -> Cell {
        match self.trials.get(trial).map(|t| t.cell) {
            Some(c) if c.is_final() => c,
            _ if running => Cell::Running,
            Some(c) => c,
            None => Cell::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: u64, status: Status, is_final: bool, counted: bool, passed: bool) -> Row {
        let text = format!(
            r#"{{"schema": "lanes-row/1", "seq": {seq}, "campaign": "c", "spec_hash": "h",
            "trial_id": "t.r0.a", "task": "t", "arm": "a", "run_index": 0, "phase": 1,
            "block": "p1-t", "order_index": 0, "seed": 0, "attempt": {attempt},
            "lane": null, "host": null, "worker": null, "driver": null,
            "status": "{status}", "failure_kind": null, "reset_epoch": null,
            "final": {is_final}, "excluded": false, "excluded_reason": null,
            "counted": {counted}, "duplicate": false, "late": false, "paired": false,
            "score": null, "passed": {passed}, "checks": [], "runtime_outcome": null,
            "infeasible_source": null, "gate": null, "final_text": null, "turns": null,
            "tokens": null, "cost_usd": null, "quota": null,
            "walls": {{"admit_s": 0, "boot_s": 0, "reset_s": 0, "gate_s": 0, "agent_s": 0,
            "evaluate_s": 0, "publish_s": 0}}, "wall_s": 0, "lease_lost": false,
            "publication_errors": [], "artifacts": [], "started_utc": null,
            "ended_utc": null, "error": null, "written_utc": "2026-12-04T00:00:0{seq}Z"}}"#,
            attempt = seq + 1,
            status = status.as_str(),
        );
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn a_late_non_final_row_does_not_reopen_a_final_trial() {
        let mut l = Ledger::default();
        l.absorb(&row(0, Status::Completed, true, true, true));
        // A newer attempt, revoked by the late score, reports its cancel afterwards.
        l.absorb(&row(1, Status::Cancelled, false, false, false));
        assert_eq!(l.cell("t.r0.a", false), Cell::Passed);
        assert_eq!(l.finals_ms.len(), 1);
        assert_eq!(l.trials["t.r0.a"].seqs, vec![0, 1]);
    }

    #[test]
    fn a_requeue_reopens_a_trial_and_its_second_end_is_not_counted_again() {
        let mut l = Ledger::default();
        l.absorb(&row(0, Status::InfraError, true, false, false));
        assert_eq!(l.cell("t.r0.a", false), Cell::Excluded);
        l.absorb(&row(1, Status::Requeued, false, false, false));
        assert_eq!(l.cell("t.r0.a", false), Cell::Pending);
        assert_eq!(l.cell("t.r0.a", true), Cell::Running);
        l.absorb(&row(2, Status::Completed, true, true, false));
        assert_eq!(l.cell("t.r0.a", false), Cell::Failed);
        assert_eq!(l.finals_ms.len(), 1);
    }
}
