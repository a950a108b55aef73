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
//! [`lanes_common::stats`]. [`Report::document`] lays it out once, and each format
//! ([`ReportFormat`]) typesets that document, so no two formats can disagree on a number.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use lanes_common::stats::Interval;
use lanes_common::utc::UtcTime;

mod builder;
mod document;
mod fold;
mod latex;
mod markdown;
#[cfg(test)]
mod tests;
mod text;

pub use builder::{ReportBuilder, build};
pub use document::{Block, Document, Section, Sections, Table};
pub use fold::row_passed;

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
    /// When the first of its rows was written.
    pub at_utc: UtcTime,
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
    pub smoke_of: Option<lanes_common::smoke::SmokeOrigin>,
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
