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
//! A counted row passes when `passed == Some(true)`; when `passed` is `None`, when its score is
//! at least 1.0.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::ids::{ArmId, TrialId};
use crate::row::{Row, Status};
use crate::schedule;
use crate::spec::Campaign;

/// The schema tag of the report's JSON.
pub const REPORT_SCHEMA: &str = "lanes-report/1";
/// The normal quantile of every 95% interval in the report.
pub const Z95: f64 = 1.959964;
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

/// A closed interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
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

/// The Wilson score interval of `successes / n` with normal quantile `z`; `None` when `n` is 0
/// (or `successes > n`).
pub fn wilson_interval(successes: u64, n: u64, z: f64) -> Option<Interval> {
    if n == 0 || successes > n {
        return None;
    }
    let nf = n as f64;
    let p = successes as f64 / nf;
    let z2 = z * z;
    let denom = 1.0 + z2 / nf;
    let center = (p + z2 / (2.0 * nf)) / denom;
    let half = z / denom * (p * (1.0 - p) / nf + z2 / (4.0 * nf * nf)).sqrt();
    let lo = if successes == 0 {
        0.0
    } else {
        (center - half).max(0.0)
    };
    let hi = if successes == n {
        1.0
    } else {
        (center + half).min(1.0)
    };
    Some(Interval { lo, hi })
}

/// The exact two-sided McNemar p-value for `b` and `c` discordant pairs:
/// `min(1, 2 * P(X <= min(b, c)))` with `X ~ Bin(b + c, 1/2)`; 1.0 when `b + c = 0`.
pub fn mcnemar_exact_p(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    // ln P(X = k) = ln C(n, k) - n ln 2, then the lower tail relative to it, walking down: the
    // terms shrink from k to 0 (k <= n/2), so nothing overflows for a large n.
    let ln_choose: f64 = (1..=k).map(|i| ((n - k + i) as f64 / i as f64).ln()).sum();
    let ln_top = ln_choose - n as f64 * std::f64::consts::LN_2;
    let mut term = 1.0f64;
    let mut tail = 1.0f64;
    for i in (1..=k).rev() {
        // P(X = i - 1) / P(X = i) = i / (n - i + 1).
        term *= i as f64 / (n - i + 1) as f64;
        tail += term;
        if term < tail * 1e-17 {
            break;
        }
    }
    (2.0 * (ln_top.exp() * tail)).min(1.0)
}

/// Newcombe's (1998, method 10) score interval (normal quantile `z`) for the difference of paired
/// proportions `p_a - p_b`, from the 2x2 table of pairs (`both`, `a_only`, `b_only`,
/// `neither`): Wilson intervals of both margins, combined with the continuity-corrected
/// estimate of their correlation. `None` without pairs.
pub fn newcombe_paired_diff(
    both: u64,
    a_only: u64,
    b_only: u64,
    neither: u64,
    z: f64,
) -> Option<Interval> {
    let n = both + a_only + b_only + neither;
    let w1 = wilson_interval(both + a_only, n, z)?;
    let w2 = wilson_interval(both + b_only, n, z)?;
    let (a, b, c, d) = (both as f64, a_only as f64, b_only as f64, neither as f64);
    let nf = n as f64;
    let p1 = (a + b) / nf;
    let p2 = (a + c) / nf;
    let margins = (a + b) * (c + d) * (a + c) * (b + d);
    let phi = if margins == 0.0 {
        0.0
    } else {
        let cross = a * d - b * c;
        if cross > nf / 2.0 {
            (cross - nf / 2.0) / margins.sqrt()
        } else if cross >= 0.0 {
            0.0
        } else {
            cross / margins.sqrt()
        }
    };
    let (dl1, du1) = (p1 - w1.lo, w1.hi - p1);
    let (dl2, du2) = (p2 - w2.lo, w2.hi - p2);
    let diff = p1 - p2;
    let lo = diff
        - (dl1 * dl1 - 2.0 * phi * dl1 * du2 + du2 * du2)
            .max(0.0)
            .sqrt();
    let hi = diff
        + (dl2 * dl2 - 2.0 * phi * dl2 * du1 + du1 * du1)
            .max(0.0)
            .sqrt();
    Some(Interval {
        lo: lo.max(-1.0),
        hi: hi.min(1.0),
    })
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
}

impl TrialFold {
    fn add(&mut self, row: &Row, warnings: &mut Vec<String>) {
        self.rows += 1;
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
    score_sum: f64,
    score_n: u64,
    cost_counted: f64,
    cost_all: f64,
    wall_sum: f64,
    walls: Vec<f64>,
    infra_retries: u64,
    /// (task_pos, run_index) of each counted trial → passed. The run identifies the seed.
    runs: HashMap<(u32, u32), bool>,
}

fn ratio(num: u64, den: u64) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
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
                    acc.score_sum += score;
                    acc.score_n += 1;
                }
                acc.cost_counted += row.cost_usd;
                acc.wall_sum += row.wall_s;
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

        Report {
            schema: REPORT_SCHEMA.to_owned(),
            campaign: campaign.spec.id.to_string(),
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
        mean_score: (acc.score_n > 0).then(|| acc.score_sum / acc.score_n as f64),
        cost_usd_counted: acc.cost_counted,
        cost_usd_all_rows: acc.cost_all,
        mean_wall_s: (s.counted > 0).then(|| acc.wall_sum / s.counted as f64),
        median_wall_s: crate::stats::median(&acc.walls),
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

// ---- Text rendering. ----

fn fmt_rate(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:.3}"))
}

fn fmt_signed(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |x| format!("{x:+.3}"))
}

fn fmt_interval(v: Option<Interval>, signed: bool) -> String {
    match v {
        None => "-".to_owned(),
        Some(i) if signed => format!("[{:+.3}, {:+.3}]", i.lo, i.hi),
        Some(i) => format!("[{:.3}, {:.3}]", i.lo, i.hi),
    }
}

fn fmt_p(p: f64) -> String {
    if p < 1e-4 {
        format!("{p:.1e}")
    } else {
        format!("{p:.4}")
    }
}

/// Keeps the text plain ASCII whatever a name holds.
fn ascii(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii() && !c.is_ascii_control() {
                c
            } else {
                '?'
            }
        })
        .collect()
}

/// Renders an aligned table: the first column left-aligned, the others right-aligned, two
/// spaces between columns.
fn table(out: &mut String, headers: &[String], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(String::len).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let line = |out: &mut String, cells: &[String]| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                let _ = write!(text, "  {cell:<w$}");
            } else {
                let _ = write!(text, "  {cell:>w$}");
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(out, headers);
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    line(out, &rule);
    for row in rows {
        line(out, row);
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

impl Report {
    /// A compact, plain-ASCII rendering: the completeness audit first, then the per-arm table,
    /// then the paired differences.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let c = &self.completeness;
        let _ = writeln!(out, "Campaign {}  ({})", ascii(&self.campaign), self.schema);
        let hashes = if self.spec_hashes.is_empty() {
            "-".to_owned()
        } else {
            self.spec_hashes
                .iter()
                .map(|h| ascii(h))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(out, "spec hash(es): {hashes}");
        let _ = writeln!(
            out,
            "rows: {} (duplicates {}, late {}, unscheduled {})",
            self.rows_total, self.duplicates, self.late, self.unscheduled_rows
        );

        let by_status: Vec<String> = Status::ALL
            .iter()
            .map(|s| {
                let n = self.rows_by_status.get(s.as_str()).copied().unwrap_or(0);
                format!("{s} {n}")
            })
            .collect();
        let _ = writeln!(out, "rows by status: {}", by_status.join(", "));
        if let Some(b) = &self.budget {
            let bound = if b.guarded {
                "every trial has a max_cost_usd guard: spend stays within the cap while drivers honour it"
            } else {
                "not every trial has a max_cost_usd guard: spend may pass the cap by at most one attempt's overrun per lane in flight"
            };
            let _ = writeln!(
                out,
                "budget: spent ${:.2} of cap ${:.2} ({bound})",
                b.spent_usd, b.cap_usd
            );
        }

        // 1. The audit.
        out.push_str("\nCOMPLETENESS (every scheduled trial by final state)\n");
        let t = &c.total;
        let _ = writeln!(
            out,
            "  denominator = trials_total - not_started = {} - {} = {}",
            t.trials_total, t.not_started, t.denominator
        );
        let mut named: Vec<(String, &StateCounts)> = c
            .per_arm
            .iter()
            .map(|a| (ascii(&a.arm), &a.counts))
            .collect();
        named.push(("total".to_owned(), t));
        let rows: Vec<Vec<String>> = named
            .iter()
            .map(|(name, s)| {
                vec![
                    name.clone(),
                    s.trials_total.to_string(),
                    s.not_started.to_string(),
                    s.denominator.to_string(),
                    s.counted.to_string(),
                    s.excluded.to_string(),
                    s.pending.to_string(),
                    s.pending_never_attempted.to_string(),
                    s.pending_in_retry.to_string(),
                    s.counted_after_exclusion.to_string(),
                ]
            })
            .collect();
        table(
            &mut out,
            &strings(&[
                "arm",
                "trials",
                "not_started",
                "denominator",
                "counted",
                "excluded",
                "pending",
                "never_attempted",
                "in_retry",
                "counted_after_exclusion",
            ]),
            &rows,
        );

        out.push_str("\n  counted, by status:\n");
        let rows: Vec<Vec<String>> = named
            .iter()
            .map(|(name, s)| {
                let b = &s.counted_by_status;
                let mut row = vec![
                    name.clone(),
                    b.completed.to_string(),
                    b.timeout.to_string(),
                    b.max_turns.to_string(),
                    b.agent_error.to_string(),
                    b.violation.to_string(),
                ];
                if t.counted_by_status.other > 0 {
                    row.push(b.other.to_string());
                }
                row
            })
            .collect();
        let mut headers = strings(&[
            "arm",
            "completed",
            "timeout",
            "max_turns",
            "agent_error",
            "violation",
        ]);
        if t.counted_by_status.other > 0 {
            headers.push("other".to_owned());
        }
        table(&mut out, &headers, &rows);

        reason_table(&mut out, "excluded, by reason", &named, |s| {
            &s.excluded_by_reason
        });
        reason_table(
            &mut out,
            "not_started (outside the denominator), by reason",
            &named,
            |s| &s.not_started_by_reason,
        );

        if !self.warnings.is_empty() {
            out.push_str("\n  WARNINGS:\n");
            for w in &self.warnings {
                let _ = writeln!(out, "  ! {}", ascii(w));
            }
        }

        // 2. Per arm.
        out.push_str("\nPER ARM (rates over counted trials; itt = over the denominator)\n");
        let rows: Vec<Vec<String>> = self
            .arms
            .iter()
            .map(|a| {
                vec![
                    ascii(&a.arm),
                    a.denominator.to_string(),
                    a.counted.to_string(),
                    a.passed.to_string(),
                    fmt_rate(a.pass_rate_counted),
                    fmt_interval(a.pass_rate_counted_ci95, false),
                    fmt_rate(a.pass_rate_itt_lower),
                    fmt_rate(a.pass_rate_itt_upper),
                    fmt_rate(a.mean_score),
                    format!("{:.2}", a.cost_usd_counted),
                    format!("{:.2}", a.cost_usd_all_rows),
                    a.cost_per_pass_usd
                        .map_or_else(|| "-".to_owned(), |c| format!("{c:.3}")),
                    a.median_wall_s
                        .map_or_else(|| "-".to_owned(), |w| format!("{w:.1}")),
                    a.infra_retries.to_string(),
                    a.excluded.to_string(),
                    a.pending.to_string(),
                ]
            })
            .collect();
        table(
            &mut out,
            &strings(&[
                "arm",
                "denom",
                "counted",
                "passed",
                "pass_rate",
                "wilson95",
                "itt_lower",
                "itt_upper",
                "mean_score",
                "cost_usd",
                "cost_all_usd",
                "cost_per_pass",
                "median_wall_s",
                "infra_retries",
                "excluded",
                "pending",
            ]),
            &rows,
        );
        out.push_str(
            "  itt_lower counts excluded and pending trials as failures, itt_upper as passes;\n  \
             infra_retries = infra_error/blocked rows (first row per token): retry-bias disclosure\n",
        );

        // 3. Paired.
        out.push_str("\nPAIRED (by run seed = (task, run_index); both trials counted)\n");
        if self.paired.is_empty() {
            out.push_str("  (fewer than two arms)\n");
        } else {
            let rows: Vec<Vec<String>> = self
                .paired
                .iter()
                .map(|p| {
                    vec![
                        format!("{} vs {}", ascii(&p.arm_a), ascii(&p.arm_b)),
                        p.n_pairs.to_string(),
                        p.both_pass.to_string(),
                        p.a_only.to_string(),
                        p.b_only.to_string(),
                        p.neither.to_string(),
                        p.unmatched.to_string(),
                        fmt_rate(p.pass_rate_a),
                        fmt_rate(p.pass_rate_b),
                        fmt_signed(p.pass_rate_diff),
                        fmt_interval(p.pass_rate_diff_ci95, true),
                        fmt_p(p.mcnemar_exact_p),
                    ]
                })
                .collect();
            table(
                &mut out,
                &strings(&[
                    "a vs b",
                    "pairs",
                    "both",
                    "a_only",
                    "b_only",
                    "neither",
                    "unmatched",
                    "rate_a",
                    "rate_b",
                    "diff(a-b)",
                    "ci95",
                    "mcnemar_p",
                ]),
                &rows,
            );
            out.push_str(
                "  ci95: Newcombe (1998) paired score interval; mcnemar_p: exact two-sided \
                 binomial test on a_only vs b_only\n",
            );
        }
        out
    }
}

/// A table of reasons (rows) by arm (columns), with a total; nothing when there is no reason.
fn reason_table(
    out: &mut String,
    title: &str,
    named: &[(String, &StateCounts)],
    pick: impl Fn(&StateCounts) -> &BTreeMap<String, u64>,
) {
    let Some((_, total)) = named.last() else {
        return;
    };
    let reasons = pick(total);
    if reasons.is_empty() {
        let _ = writeln!(out, "\n  {title}: none");
        return;
    }
    let _ = writeln!(out, "\n  {title}:");
    let mut headers = vec!["reason".to_owned()];
    headers.extend(named.iter().map(|(name, _)| name.clone()));
    let rows: Vec<Vec<String>> = reasons
        .keys()
        .map(|reason| {
            let mut row = vec![ascii(reason)];
            row.extend(
                named
                    .iter()
                    .map(|(_, s)| pick(s).get(reason).copied().unwrap_or(0).to_string()),
            );
            row
        })
        .collect();
    table(out, &headers, &rows);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_edges() {
        assert_eq!(wilson_interval(0, 0, Z95), None);
        assert_eq!(wilson_interval(3, 2, Z95), None);
        let i = wilson_interval(10, 10, Z95).unwrap();
        assert_eq!(i.hi, 1.0);
        assert!((i.lo - 0.7225).abs() < 1e-4);
    }

    #[test]
    fn mcnemar_large_n_does_not_underflow() {
        // Bin(3000, 1/2): P(X <= 1500) is a bit over 1/2, so p is 1.
        assert_eq!(mcnemar_exact_p(1500, 1500), 1.0);
        let p = mcnemar_exact_p(1400, 1600);
        assert!(p > 0.0 && p < 0.001, "{p}");
        assert_eq!(mcnemar_exact_p(1400, 1600), mcnemar_exact_p(1600, 1400));
    }
}
