//! The campaign report that `lanes report` prints, built
//! from the campaign (for the denominator: every scheduled trial) and the ledger rows. No I/O.
//!
//! The report is in three parts, in this order:
//! 1. **Completeness**: every trial of the schedule, classified by the final state its rows
//!    give it: `counted`, `excluded`, `not_started` (outside the denominator) or `pending`.
//!    `denominator = trials_total - not_started`, and `counted + excluded + pending =
//!    denominator`.
//! 2. **Per arm**: pass rates over the counted trials with a Wilson 95% score interval, and
//!    over the whole denominator ("intent-to-treat", excluded and pending trials counted as
//!    failures for the lower bound and as passes for the upper bound), with the arm's infra
//!    retries and exclusions (the retry-bias disclosure).
//! 3. **Paired comparisons**: every ordered pair of arms `(a, b)`, `a` before `b` in arm order,
//!    matched by run (task, run_index), i.e. by run seed, over the runs where both trials are
//!    counted. The difference in pass rate `a - b` has Newcombe's (1998) score interval for
//!    paired proportions (his method 10: Wilson intervals of both margins combined with the
//!    continuity-corrected correlation estimate), and the discordant pairs get the exact
//!    two-sided McNemar (binomial) test.
//!
//! How a trial's state is derived from its rows (in ledger order, duplicates ignored):
//! - any row with `counted = true` makes it **counted**, even after an exclusion (a late
//!   score is never thrown away); if several rows claim it, the first one wins and the report
//!   warns;
//! - otherwise the last row with `final = true` decides: status `not_started` makes it
//!   **not_started**, anything else **excluded** (with that row's `excluded_reason`);
//! - otherwise it is **pending**: never attempted (no rows) or in retry (rows, none final).
//!
//! A `requeued` row (an operator's retry pass over excluded trials) reopens its trial: the
//! exclusion before it no longer decides. The trials it reopened are also shown apart, per arm.
//!
//! A counted row passes when `passed == Some(true)`; when `passed` is `None`, when its score is
//! at least 1.0.
//!
//! This module holds the model and builds it from the rows; the numbers come from
//! [`crate::stats`]. [`Report::document`] lays it out once, and each format
//! ([`ReportFormat`]) typesets that document, so no two formats can disagree on a number.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::ids::{ArmId, TrialId};
use crate::row::{Row, Status};
use crate::schedule;
use crate::spec::Campaign;
use crate::stats::{
    self, Interval, Mean, Z95, mcnemar_exact_p, newcombe_paired_diff, ratio, wilson_interval,
};

mod document;
mod latex;
mod markdown;
#[cfg(test)]
mod tests;
mod text;

pub use document::{Block, Document, Section, Sections, Table};

/// How `lanes report` prints a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportFormat {
    /// Aligned plain-ASCII tables, for the terminal.
    Text,
    /// GitHub-flavoured Markdown tables.
    Markdown,
    /// A LaTeX fragment with `booktabs` tables.
    Latex,
    /// The report value itself, as JSON (schema [`REPORT_SCHEMA`]).
    Json,
}

impl Report {
    /// The report in `format`, limited to `sections`. JSON is always the whole value: its
    /// readers pick what they need.
    pub fn render_as(&self, format: ReportFormat, sections: Sections) -> String {
        match format {
            ReportFormat::Text => text::render(&self.document(sections)),
            ReportFormat::Markdown => markdown::render(&self.document(sections)),
            ReportFormat::Latex => latex::render(&self.document(sections)),
            ReportFormat::Json => {
                serde_json::to_string_pretty(self).expect("a report serializes") + "\n"
            }
        }
    }

    /// The report as text, limited to `sections`.
    pub fn render(&self, sections: Sections) -> String {
        self.render_as(ReportFormat::Text, sections)
    }

    /// The whole report as text.
    pub fn to_text(&self) -> String {
        self.render(Sections::Full)
    }
}

/// One operator retry pass, as its `requeued` rows record it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetryPass {
    pub pass: u32,
    /// When the first of its rows was written, RFC 3339.
    pub at_utc: String,
    pub selection: String,
    pub note: String,
    /// Trials it requeued.
    pub trials: u64,
}

/// One arm's requeued trials (see [`Report::operator_retries`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RetryStats {
    pub arm: String,
    /// Trials of the arm an operator requeued, in any pass.
    pub requeued: u64,
    /// Of those, counted now, and passed.
    pub counted: u64,
    pub passed: u64,
    /// Excluded again, or not final yet.
    pub excluded: u64,
    pub pending: u64,
    /// `passed / counted` over the requeued trials.
    pub pass_rate_requeued: Option<f64>,
    /// The pass rate over the arm's counted trials that were never requeued.
    pub pass_rate_not_requeued: Option<f64>,
}

/// The schema tag of the report's JSON.
pub const REPORT_SCHEMA: &str = "lanes-report/1";
/// The method of [`PairedComparison::pass_rate_diff_ci95`].
pub const PAIRED_CI_METHOD: &str = "newcombe_paired_score";
/// The reason recorded for a final, uncounted row that carries no `excluded_reason`.
pub const UNSPECIFIED_REASON: &str = "unspecified";
/// At most this many warnings are listed; the rest are summed up in one line.
const MAX_WARNINGS: usize = 20;

/// The campaign report. Its JSON is what `Report` answers on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`REPORT_SCHEMA`].
    pub schema: String,
    pub campaign: String,
    /// The spec hashes the rows carry, in order of first appearance (more than one after an
    /// amendment).
    pub spec_hashes: Vec<String>,
    /// Every row of the ledger.
    pub rows_total: u64,
    /// Rows with `duplicate = true` (evaluated after another attempt had scored; never counted).
    pub duplicates: u64,
    /// Rows with `late = true`.
    pub late: u64,
    /// Rows whose trial is not in the campaign's schedule (ignored everywhere else).
    pub unscheduled_rows: u64,
    /// Every row of the ledger by its status string (duplicates and unscheduled rows included;
    /// statuses without rows omitted).
    pub rows_by_status: BTreeMap<String, u64>,
    /// The audit, first.
    pub completeness: Completeness,
    /// One entry per arm, in the campaign's arm order.
    pub arms: Vec<ArmStats>,
    /// One entry per ordered pair of arms `(a, b)`, `a` before `b` in arm order.
    pub paired: Vec<PairedComparison>,
    /// Inconsistencies found in the ledger (e.g. a trial with two counted rows).
    pub warnings: Vec<String>,
    /// The spend against `budget_cap_usd`, when the campaign has a cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetLine>,
    /// The operator retry passes (`lanes retry`) the ledger records, in pass order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_passes: Vec<RetryPass>,
    /// Per arm, what became of the trials an operator requeued, beside the arm's other
    /// trials: the retry bias of the requeue, disclosed apart. Empty without retry passes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operator_retries: Vec<RetryStats>,
    /// Set for a smoke run: the campaign it was derived from. Its numbers check a setup;
    /// they are not the pre-registered campaign's results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub smoke_of: Option<crate::smoke::SmokeOrigin>,
}

/// The spend against the budget cap, and how far past the cap it could have gone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetLine {
    pub cap_usd: f64,
    /// The sum of `cost_usd` over every row of the ledger.
    pub spent_usd: f64,
    /// Every scheduled trial carries a `max_cost_usd` guard. Claims then reserve the guards,
    /// so spend stays within the cap while drivers honour them. Otherwise a claim reserves an
    /// estimate, and spend may pass the cap by at most one attempt's overrun per lane in
    /// flight.
    pub guarded: bool,
}

/// Every trial of the schedule by final state: the totals and per arm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completeness {
    pub total: StateCounts,
    /// In the campaign's arm order.
    pub per_arm: Vec<ArmStateCounts>,
}

/// The state counts of one arm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmStateCounts {
    pub arm: String,
    pub counts: StateCounts,
}

/// Trials by final state. `denominator = trials_total - not_started` and
/// `counted + excluded + pending = denominator`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StateCounts {
    /// Every trial of the schedule.
    pub trials_total: u64,
    /// Final with status `not_started`: outside the denominator.
    pub not_started: u64,
    /// `trials_total - not_started`.
    pub denominator: u64,
    /// Final with a counted row.
    pub counted: u64,
    /// Final, excluded, with no counted row.
    pub excluded: u64,
    /// No final row yet: `pending_never_attempted + pending_in_retry`.
    pub pending: u64,
    /// The status of each counted trial's counted row.
    pub counted_by_status: CountedByStatus,
    /// Counted trials that had been final as excluded before their (late) score arrived.
    pub counted_after_exclusion: u64,
    /// Excluded trials per `excluded_reason` string (`infra_failure:<kind>`, ...).
    pub excluded_by_reason: BTreeMap<String, u64>,
    /// Not-started trials per reason (`phase2_refused:<why>`).
    pub not_started_by_reason: BTreeMap<String, u64>,
    /// Pending trials with no row at all.
    pub pending_never_attempted: u64,
    /// Pending trials with rows, none final (waiting for a retry or in flight).
    pub pending_in_retry: u64,
}

/// The statuses of counted rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CountedByStatus {
    pub completed: u64,
    pub timeout: u64,
    pub max_turns: u64,
    pub agent_error: u64,
    pub violation: u64,
    /// A counted row with an unscored status: a ledger inconsistency, also warned about.
    pub other: u64,
}

/// The results of one arm. Rates are `None` when their denominator is 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmStats {
    pub arm: String,
    /// Trials in the denominator (all but `not_started`).
    pub denominator: u64,
    pub counted: u64,
    /// Counted trials that passed.
    pub passed: u64,
    /// Trials final as excluded.
    pub excluded: u64,
    /// Trials with no final row yet.
    pub pending: u64,
    /// `passed / counted`.
    pub pass_rate_counted: Option<f64>,
    /// Wilson 95% score interval of `pass_rate_counted`.
    pub pass_rate_counted_ci95: Option<Interval>,
    /// `passed / denominator`: excluded and pending trials counted as failures (the
    /// intent-to-treat lower bound).
    pub pass_rate_itt_lower: Option<f64>,
    /// Wilson 95% score interval of `pass_rate_itt_lower`.
    pub pass_rate_itt_lower_ci95: Option<Interval>,
    /// `(passed + excluded + pending) / denominator`: excluded and pending trials counted as
    /// passes (the intent-to-treat upper bound).
    pub pass_rate_itt_upper: Option<f64>,
    /// The mean score of the counted rows that carry a score.
    pub mean_score: Option<f64>,
    /// The sum of `cost_usd` over counted rows.
    pub cost_usd_counted: f64,
    /// The sum of `cost_usd` over every row of the arm (the real spend, retries included).
    pub cost_usd_all_rows: f64,
    /// The mean `wall_s` of the counted rows.
    pub mean_wall_s: Option<f64>,
    /// The median `wall_s` of the counted rows.
    pub median_wall_s: Option<f64>,
    /// Every row's cost (the real spend, retries included) per passed trial.
    pub cost_per_pass_usd: Option<f64>,
    /// Rows with status `infra_error` or `blocked`, counting only the first row of each token
    /// (trial, attempt).
    pub infra_retries: u64,
}

/// Arm `a` against arm `b`, paired by run (task, run_index), i.e. by run seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairedComparison {
    pub arm_a: String,
    pub arm_b: String,
    /// Runs where both trials are counted: `both_pass + a_only + b_only + neither`.
    pub n_pairs: u64,
    pub both_pass: u64,
    /// `a` passed, `b` failed.
    pub a_only: u64,
    /// `b` passed, `a` failed.
    pub b_only: u64,
    pub neither: u64,
    /// Runs where exactly one of the two trials is counted: left out of the comparison.
    pub unmatched: u64,
    /// `a`'s pass rate over the pairs.
    pub pass_rate_a: Option<f64>,
    /// `b`'s pass rate over the pairs.
    pub pass_rate_b: Option<f64>,
    /// `pass_rate_a - pass_rate_b`.
    pub pass_rate_diff: Option<f64>,
    /// The 95% interval of `pass_rate_diff`, by [`PAIRED_CI_METHOD`].
    pub pass_rate_diff_ci95: Option<Interval>,
    /// [`PAIRED_CI_METHOD`]: Newcombe (1998) method 10, the score interval for a difference of
    /// paired proportions.
    pub ci_method: String,
    /// The exact two-sided McNemar p-value on `a_only` vs `b_only`; 1.0 without discordant
    /// pairs.
    pub mcnemar_exact_p: f64,
}

/// Whether a counted row passed: `passed`, or when it is absent, `score >= 1.0`.
pub fn row_passed(row: &Row) -> bool {
    row.passed
        .unwrap_or_else(|| row.score.is_some_and(|s| s >= 1.0))
}

/// The counted row of a trial: what the report needs of it.
#[derive(Debug, Clone)]
struct CountedRow {
    seq: u64,
    status: Status,
    passed: bool,
    score: Option<f64>,
    cost_usd: f64,
    wall_s: f64,
}

/// A trial's final state, derived from its rows.
enum TrialState<'a> {
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
struct TrialFold {
    rows: u64,
    /// The first counted row (a duplicate is never counted).
    counted: Option<CountedRow>,
    /// Whether a final, excluded row came before the counted one.
    after_exclusion: bool,
    excluded_seen: bool,
    /// The last final, uncounted, non-duplicate row: its status and reason.
    last_final: Option<(Status, String)>,
    /// Every row's cost (retries included).
    cost_all: f64,
    /// Attempt numbers seen so far: only the first row of each token counts as a retry.
    attempts_seen: Vec<u32>,
    infra_retries: u64,
    /// An operator requeued the trial (`lanes retry`) after it was excluded.
    requeued: bool,
}

impl TrialFold {
    fn add(&mut self, row: &Row, warnings: &mut Vec<String>) {
        self.rows += 1;
        if row.status == Status::Requeued {
            // The exclusion before it no longer decides: the trial is pending again.
            self.requeued = true;
            self.last_final = None;
            // A score after it is the retry's, not a late score after an exclusion.
            self.excluded_seen = false;
            return;
        }
        self.cost_all += row.cost_usd.unwrap_or(0.0);
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
                        score: row.score,
                        cost_usd: row.cost_usd.unwrap_or(0.0),
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
    fn state(&self) -> TrialState<'_> {
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
    fn add(&mut self, state: &TrialState<'_>) {
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

/// What is summed per arm while the schedule is walked.
#[derive(Default)]
struct ArmAcc {
    states: StateCounts,
    passed: u64,
    score: Mean,
    cost_counted: f64,
    cost_all: f64,
    wall: Mean,
    walls: Vec<f64>,
    infra_retries: u64,
    /// (task_pos, run_index) of each counted trial → passed. The run identifies the seed.
    runs: HashMap<(u32, u32), bool>,
    retried: RetryStats,
    /// Counted and passed among the trials never requeued.
    others_counted: u64,
    others_passed: u64,
}

/// Builds the report of `campaign` from its ledger `rows` (in any order; `seq` orders them).
/// For a ledger too large to hold at once, feed a [`ReportBuilder`] page by page instead.
pub fn build(campaign: &Campaign, rows: &[Row]) -> Report {
    let mut sorted: Vec<&Row> = rows.iter().collect();
    sorted.sort_by_key(|r| r.seq);
    let mut builder = ReportBuilder::new();
    for row in sorted {
        builder.add(row);
    }
    builder.finish(campaign)
}

/// The report as a fold over the ledger: [`add`](Self::add) every row in `seq` order (page
/// by page, as the store hands them out), then [`finish`](Self::finish) with the campaign.
/// It keeps a few fields per trial and per arm, never the rows.
#[derive(Debug, Default)]
pub struct ReportBuilder {
    retry_passes: Vec<RetryPass>,
    spec_hashes: Vec<String>,
    seen_hashes: HashSet<String>,
    rows_total: u64,
    duplicates: u64,
    late: u64,
    rows_by_status: BTreeMap<String, u64>,
    spent_usd: f64,
    trials: HashMap<TrialId, TrialFold>,
    warnings: Vec<String>,
}

impl ReportBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds in the next row of the ledger (rows must come in `seq` order).
    pub fn add(&mut self, row: &Row) {
        self.rows_total += 1;
        self.spent_usd += row.cost_usd.unwrap_or(0.0);
        self.duplicates += u64::from(row.duplicate);
        self.late += u64::from(row.late);
        *self
            .rows_by_status
            .entry(row.status.as_str().to_owned())
            .or_default() += 1;
        if !row.spec_hash.is_empty() && !self.seen_hashes.contains(&row.spec_hash) {
            self.seen_hashes.insert(row.spec_hash.clone());
            self.spec_hashes.push(row.spec_hash.clone());
        }
        if let Some(note) = &row.requeue {
            match self.retry_passes.iter_mut().find(|p| p.pass == note.pass) {
                Some(p) => p.trials += 1,
                None => self.retry_passes.push(RetryPass {
                    pass: note.pass,
                    at_utc: row.written_utc.clone(),
                    selection: note.selection.clone(),
                    note: note.note.clone(),
                    trials: 1,
                }),
            }
        }
        let warnings = &mut self.warnings;
        match self.trials.get_mut(&row.trial_id) {
            Some(fold) => fold.add(row, warnings),
            None => {
                let mut fold = TrialFold::default();
                fold.add(row, warnings);
                self.trials.insert(row.trial_id.clone(), fold);
            }
        }
    }

    /// Rows folded in so far.
    pub fn rows(&self) -> u64 {
        self.rows_total
    }

    /// Walks the schedule of `campaign` (every trial, for the denominator) and ends the report.
    pub fn finish(mut self, campaign: &Campaign) -> Report {
        let arm_pos: HashMap<&ArmId, usize> = campaign
            .spec
            .arms
            .iter()
            .enumerate()
            .map(|(i, a)| (&a.id, i))
            .collect();
        let mut accs: Vec<ArmAcc> = campaign
            .spec
            .arms
            .iter()
            .map(|_| ArmAcc::default())
            .collect();
        let mut total = StateCounts::default();
        let mut warnings = std::mem::take(&mut self.warnings);
        let never = TrialFold::default();
        let mut guarded = true;

        for trial in schedule::trials(campaign) {
            guarded &= trial.max_cost_usd.is_some();
            let fold = self.trials.remove(&trial.trial_id);
            let fold = fold.as_ref().unwrap_or(&never);
            let Some(&pos) = arm_pos.get(&trial.arm) else {
                continue;
            };
            let acc = &mut accs[pos];
            let state = fold.state();
            total.add(&state);
            acc.states.add(&state);
            let passed = match &state {
                TrialState::Counted { row, .. } => Some(row.passed),
                _ => None,
            };
            if fold.requeued {
                let r = &mut acc.retried;
                r.requeued += 1;
                match (&state, passed) {
                    (_, Some(p)) => {
                        r.counted += 1;
                        r.passed += u64::from(p);
                    }
                    (TrialState::Excluded(_), _) => r.excluded += 1,
                    _ => r.pending += 1,
                }
            } else if let Some(p) = passed {
                acc.others_counted += 1;
                acc.others_passed += u64::from(p);
            }
            acc.cost_all += fold.cost_all;
            acc.infra_retries += fold.infra_retries;

            if let TrialState::Counted { row, .. } = state {
                if !row.status.is_scored() {
                    warnings.push(format!(
                        "trial {} is counted by a row with unscored status {} (seq {})",
                        trial.trial_id, row.status, row.seq
                    ));
                }
                acc.passed += u64::from(row.passed);
                if let Some(score) = row.score {
                    acc.score.add(score);
                }
                acc.cost_counted += row.cost_usd;
                acc.wall.add(row.wall_s);
                acc.walls.push(row.wall_s);
                acc.runs
                    .insert((trial.task_pos, trial.run_index), row.passed);
            }
        }

        let unscheduled_rows: u64 = self.trials.values().map(|f| f.rows).sum();
        if unscheduled_rows > 0 {
            let mut ids: Vec<&str> = self.trials.keys().map(|t| t.as_str()).collect();
            ids.sort_unstable();
            warnings.push(format!(
                "{unscheduled_rows} row(s) belong to {} trial(s) not in the schedule, e.g. {}",
                ids.len(),
                ids[0]
            ));
        }
        if warnings.len() > MAX_WARNINGS {
            let more = warnings.len() - MAX_WARNINGS;
            warnings.truncate(MAX_WARNINGS);
            warnings.push(format!("... and {more} more warning(s)"));
        }

        let arms: Vec<ArmStats> = campaign
            .spec
            .arms
            .iter()
            .zip(&accs)
            .map(|(arm, acc)| arm_stats(arm.id.as_str(), acc))
            .collect();

        let mut paired = Vec::new();
        for (i, a) in campaign.spec.arms.iter().enumerate() {
            for (j, b) in campaign.spec.arms.iter().enumerate().skip(i + 1) {
                paired.push(compare(
                    a.id.as_str(),
                    &accs[i].runs,
                    b.id.as_str(),
                    &accs[j].runs,
                ));
            }
        }

        let operator_retries = if accs.iter().any(|a| a.retried.requeued > 0) {
            campaign
                .spec
                .arms
                .iter()
                .zip(&accs)
                .map(|(arm, acc)| RetryStats {
                    arm: arm.id.to_string(),
                    pass_rate_requeued: ratio(acc.retried.passed, acc.retried.counted),
                    pass_rate_not_requeued: ratio(acc.others_passed, acc.others_counted),
                    ..acc.retried.clone()
                })
                .collect()
        } else {
            Vec::new()
        };
        Report {
            schema: REPORT_SCHEMA.to_owned(),
            campaign: campaign.spec.id.to_string(),
            smoke_of: campaign.spec.smoke.clone(),
            retry_passes: self.retry_passes,
            operator_retries,
            spec_hashes: self.spec_hashes,
            rows_total: self.rows_total,
            duplicates: self.duplicates,
            late: self.late,
            unscheduled_rows,
            rows_by_status: self.rows_by_status,
            completeness: Completeness {
                total,
                per_arm: campaign
                    .spec
                    .arms
                    .iter()
                    .zip(&accs)
                    .map(|(arm, acc)| ArmStateCounts {
                        arm: arm.id.to_string(),
                        counts: acc.states.clone(),
                    })
                    .collect(),
            },
            arms,
            paired,
            warnings,
            budget: campaign.spec.ops.budget_cap_usd.map(|cap_usd| BudgetLine {
                cap_usd,
                spent_usd: self.spent_usd,
                guarded,
            }),
        }
    }
}

fn arm_stats(arm: &str, acc: &ArmAcc) -> ArmStats {
    let s = &acc.states;
    let missing = s.excluded + s.pending;
    ArmStats {
        arm: arm.to_owned(),
        denominator: s.denominator,
        counted: s.counted,
        passed: acc.passed,
        excluded: s.excluded,
        pending: s.pending,
        pass_rate_counted: ratio(acc.passed, s.counted),
        pass_rate_counted_ci95: wilson_interval(acc.passed, s.counted, Z95),
        pass_rate_itt_lower: ratio(acc.passed, s.denominator),
        pass_rate_itt_lower_ci95: wilson_interval(acc.passed, s.denominator, Z95),
        pass_rate_itt_upper: ratio(acc.passed + missing, s.denominator),
        mean_score: acc.score.get(),
        cost_usd_counted: acc.cost_counted,
        cost_usd_all_rows: acc.cost_all,
        mean_wall_s: acc.wall.get(),
        median_wall_s: stats::median(&acc.walls),
        cost_per_pass_usd: (acc.passed > 0).then(|| acc.cost_all / acc.passed as f64),
        infra_retries: acc.infra_retries,
    }
}

fn compare(
    arm_a: &str,
    a: &HashMap<(u32, u32), bool>,
    arm_b: &str,
    b: &HashMap<(u32, u32), bool>,
) -> PairedComparison {
    let (mut both_pass, mut a_only, mut b_only, mut neither, mut unmatched) = (0, 0, 0, 0, 0);
    for (run, &pa) in a {
        match b.get(run) {
            Some(&pb) => match (pa, pb) {
                (true, true) => both_pass += 1,
                (true, false) => a_only += 1,
                (false, true) => b_only += 1,
                (false, false) => neither += 1,
            },
            None => unmatched += 1,
        }
    }
    unmatched += b.keys().filter(|run| !a.contains_key(run)).count() as u64;
    let n_pairs = both_pass + a_only + b_only + neither;
    let rate_a = ratio(both_pass + a_only, n_pairs);
    let rate_b = ratio(both_pass + b_only, n_pairs);
    PairedComparison {
        arm_a: arm_a.to_owned(),
        arm_b: arm_b.to_owned(),
        n_pairs,
        both_pass,
        a_only,
        b_only,
        neither,
        unmatched,
        pass_rate_a: rate_a,
        pass_rate_b: rate_b,
        pass_rate_diff: rate_a.zip(rate_b).map(|(x, y)| x - y),
        pass_rate_diff_ci95: newcombe_paired_diff(both_pass, a_only, b_only, neither, Z95),
        ci_method: PAIRED_CI_METHOD.to_owned(),
        mcnemar_exact_p: mcnemar_exact_p(a_only, b_only),
    }
}
