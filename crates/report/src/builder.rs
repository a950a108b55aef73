//! The report as a fold over the ledger ([`ReportBuilder`]), finished by walking the
//! schedule: every scheduled trial is in the denominator, whether it has rows or not.

use std::collections::{BTreeMap, HashMap, HashSet};

use lanes_common::ids::{ArmId, TrialId};
use lanes_common::row::Row;
use lanes_common::schedule;
use lanes_common::spec::Campaign;
use lanes_common::stats::{
    self, Mean, Z95, mcnemar_exact_p, newcombe_paired_diff, ratio, wilson_interval,
};

use super::fold::{TrialFold, TrialState};
use super::*;

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
        self.spent_usd += row.result.cost_usd.unwrap_or(0.0);
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
