//! One trial's rows, folded in ledger order into the few fields the report needs, and the
//! state they give it (counted, excluded, not started or pending).

use lanes_common::row::{Row, Status};

use super::{StateCounts, UNSPECIFIED_REASON};

/// Whether a counted row passed: `passed`, or when it is absent, `score >= 1.0`.
pub fn row_passed(row: &Row) -> bool {
    row.result
        .passed
        .unwrap_or_else(|| row.result.score.is_some_and(|s| s >= 1.0))
}

/// The counted row of a trial: what the report needs of it.
#[derive(Debug, Clone)]
pub(crate) struct CountedRow {
    pub(crate) seq: u64,
    pub(crate) status: Status,
    pub(crate) passed: bool,
    pub(crate) score: Option<f64>,
    pub(crate) cost_usd: f64,
    pub(crate) wall_s: f64,
}

/// A trial's final state, derived from its rows.
pub(crate) enum TrialState<'a> {
    Counted {
        row: &'a CountedRow,
        after_exclusion: bool,
    },
    Excluded(String),
    NotStarted(String),
    Pending {
        attempted: bool,
    },
}

/// What the report keeps of one trial's rows, folded in ledger order: a few fields instead
/// of the rows themselves, so a campaign of any size is reported in bounded memory per trial.
#[derive(Debug, Clone, Default)]
pub(crate) struct TrialFold {
    pub(crate) rows: u64,
    /// The first counted row (a duplicate is never counted).
    pub(crate) counted: Option<CountedRow>,
    /// Whether a final, excluded row came before the counted one.
    pub(crate) after_exclusion: bool,
    pub(crate) excluded_seen: bool,
    /// The last final, uncounted, non-duplicate row: its status and reason.
    pub(crate) last_final: Option<(Status, String)>,
    /// Every row's cost (retries included).
    pub(crate) cost_all: f64,
    /// Attempt numbers seen so far: only the first row of each token counts as a retry.
    pub(crate) attempts_seen: Vec<u32>,
    pub(crate) infra_retries: u64,
    /// An operator requeued the trial (`lanes retry`) after it was excluded.
    pub(crate) requeued: bool,
}

impl TrialFold {
    pub(crate) fn add(&mut self, row: &Row, warnings: &mut Vec<String>) {
        self.rows += 1;
        if row.status == Status::Requeued {
            // The exclusion before it no longer decides: the trial is pending again.
            self.requeued = true;
            self.last_final = None;
            // A score after it is the retry's, not a late score after an exclusion.
            self.excluded_seen = false;
            return;
        }
        self.cost_all += row.result.cost_usd.unwrap_or(0.0);
        if !self.attempts_seen.contains(&row.attempt) {
            self.attempts_seen.push(row.attempt);
            if matches!(row.status, Status::InfraError | Status::Blocked) {
                self.infra_retries += 1;
            }
        }
        if row.duplicate {
            return;
        }
        if row.counted {
            match &self.counted {
                None => {
                    self.counted = Some(CountedRow {
                        seq: row.seq,
                        status: row.status,
                        passed: row_passed(row),
                        score: row.result.score,
                        cost_usd: row.result.cost_usd.unwrap_or(0.0),
                        wall_s: row.wall_s,
                    });
                    self.after_exclusion = self.excluded_seen;
                }
                Some(first) => warnings.push(format!(
                    "trial {} has more than one counted row (seq {} and {}); the first counts",
                    row.trial_id, first.seq, row.seq
                )),
            }
        } else if row.is_final {
            let reason = row
                .excluded_reason
                .as_ref()
                .map_or_else(|| UNSPECIFIED_REASON.to_owned(), ToString::to_string);
            self.last_final = Some((row.status, reason));
            if row.status != Status::NotStarted {
                self.excluded_seen = true;
            }
        }
    }

    /// Classifies the trial: a counted row wins, even after an exclusion; otherwise the last
    /// final row decides; otherwise it is pending.
    pub(crate) fn state(&self) -> TrialState<'_> {
        if let Some(row) = &self.counted {
            return TrialState::Counted {
                row,
                after_exclusion: self.after_exclusion,
            };
        }
        match &self.last_final {
            Some((Status::NotStarted, reason)) => TrialState::NotStarted(reason.clone()),
            Some((_, reason)) => TrialState::Excluded(reason.clone()),
            None => TrialState::Pending {
                attempted: self.rows > 0,
            },
        }
    }
}

impl StateCounts {
    pub(crate) fn add(&mut self, state: &TrialState<'_>) {
        self.trials_total += 1;
        match state {
            TrialState::Counted {
                row,
                after_exclusion,
            } => {
                self.counted += 1;
                self.counted_after_exclusion += u64::from(*after_exclusion);
                let s = &mut self.counted_by_status;
                match row.status {
                    Status::Completed => s.completed += 1,
                    Status::Timeout => s.timeout += 1,
                    Status::MaxTurns => s.max_turns += 1,
                    Status::AgentError => s.agent_error += 1,
                    Status::Violation => s.violation += 1,
                    _ => s.other += 1,
                }
            }
            TrialState::Excluded(reason) => {
                self.excluded += 1;
                *self.excluded_by_reason.entry(reason.clone()).or_default() += 1;
            }
            TrialState::NotStarted(reason) => {
                self.not_started += 1;
                *self
                    .not_started_by_reason
                    .entry(reason.clone())
                    .or_default() += 1;
            }
            TrialState::Pending { attempted } => {
                self.pending += 1;
                if *attempted {
                    self.pending_in_retry += 1;
                } else {
                    self.pending_never_attempted += 1;
                }
            }
        }
        self.denominator = self.trials_total - self.not_started;
    }
}
