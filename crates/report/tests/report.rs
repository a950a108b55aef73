//! The campaign report: the completeness
//! audit, per-arm rates with Wilson intervals, and paired comparisons by run seed.

use std::path::Path;

use lanes_common::row::{ExcludedReason, FailureKind, Phase2Refusal, Row, Status, StoreFields};
use lanes_common::schedule::{self, Trial};
use lanes_common::spec::{self, Campaign};
use lanes_common::stats::{Interval, Z95, mcnemar_exact_p, newcombe_paired_diff, wilson_interval};
use lanes_report::{self as report, Block, PAIRED_CI_METHOD, Report, ReportFormat, Sections};

fn campaign(arms: &[&str], tasks: usize, phase1: u32, phase2: u32) -> Campaign {
    let arms: String = arms
        .iter()
        .map(|a| format!("[[arms]]\nid = \"{a}\"\n"))
        .collect();
    let items: Vec<String> = (1..=tasks)
        .map(|i| format!("{{ id = \"t{i}\" }}"))
        .collect();
    let text = format!(
        "id = \"rep\"\nphase1_runs = {phase1}\nphase2_runs = {phase2}\nschedule_seed = 7\n\
         {arms}[tasks]\nitems = [{}]\n[driver]\nsim = {{}}\n",
        items.join(", ")
    );
    spec::load_str(&text, Path::new("x.toml"), Path::new(".")).unwrap()
}

/// Builds rows the way the store would, with increasing `seq`.
struct Ledger<'c> {
    campaign: &'c Campaign,
    trials: Vec<Trial>,
    rows: Vec<Row>,
}

impl<'c> Ledger<'c> {
    fn new(campaign: &'c Campaign) -> Self {
        Self {
            campaign,
            trials: schedule::trials(campaign).collect(),
            rows: Vec::new(),
        }
    }

    fn trial(&self, task: &str, run: u32, arm: &str) -> Trial {
        self.trials
            .iter()
            .find(|t| t.task.as_str() == task && t.run_index == run && t.arm.as_str() == arm)
            .unwrap_or_else(|| panic!("no trial {task}.r{run}.{arm}"))
            .clone()
    }

    fn push(
        &mut self,
        trial: &Trial,
        attempt: u32,
        status: Status,
        kind: Option<FailureKind>,
        store: StoreFields,
    ) -> &mut Row {
        let store = StoreFields {
            seq: self.rows.len() as u64,
            spec_hash: "h1".to_owned(),
            written_utc: "2026-01-01T00:00:00Z".parse().unwrap(),
            ..store
        };
        let row = Row::bare(&self.campaign.spec.id, trial, attempt, status, kind, store);
        self.rows.push(row);
        self.rows.last_mut().unwrap()
    }

    /// A counted, final, scored row.
    fn scored(&mut self, t: (&str, u32, &str), attempt: u32, status: Status, pass: bool) {
        let trial = self.trial(t.0, t.1, t.2);
        let row = self.push(
            &trial,
            attempt,
            status,
            None,
            StoreFields {
                is_final: true,
                counted: true,
                paired: true,
                ..StoreFields::default()
            },
        );
        row.result.score = Some(if pass { 1.0 } else { 0.0 });
        row.result.passed = Some(pass);
        row.result.cost_usd = Some(0.5);
        row.wall_s = 10.0;
    }

    fn pass(&mut self, t: (&str, u32, &str)) {
        self.scored(t, 1, Status::Completed, true);
    }

    fn fail(&mut self, t: (&str, u32, &str)) {
        self.scored(t, 1, Status::Completed, false);
    }

    /// An infra failure; final and excluded when `final_excluded`.
    fn infra(&mut self, t: (&str, u32, &str), attempt: u32, final_excluded: bool) {
        let trial = self.trial(t.0, t.1, t.2);
        let kind = FailureKind::BootFailed;
        self.push(
            &trial,
            attempt,
            Status::InfraError,
            Some(kind),
            StoreFields {
                is_final: final_excluded,
                excluded_reason: final_excluded.then_some(ExcludedReason::InfraFailure(kind)),
                ..StoreFields::default()
            },
        );
    }

    fn not_started(&mut self, t: (&str, u32, &str)) {
        let trial = self.trial(t.0, t.1, t.2);
        self.push(
            &trial,
            0,
            Status::NotStarted,
            None,
            StoreFields {
                is_final: true,
                excluded_reason: Some(ExcludedReason::Phase2Refused(Phase2Refusal::Cutoff)),
                ..StoreFields::default()
            },
        );
    }

    /// The report, built at once and folded page by page: both must agree.
    fn report(&self) -> Report {
        let whole = report::build(self.campaign, &self.rows);
        let mut sorted: Vec<&Row> = self.rows.iter().collect();
        sorted.sort_by_key(|r| r.seq);
        let mut folded = report::ReportBuilder::new();
        for page in sorted.chunks(3) {
            for row in page {
                folded.add(row);
            }
        }
        assert_eq!(folded.rows(), self.rows.len() as u64);
        assert_eq!(folded.finish(self.campaign), whole, "the fold differs");
        whole
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

fn assert_interval(i: Interval, lo: f64, hi: f64, tol: f64) {
    assert!(
        close(i.lo, lo, tol) && close(i.hi, hi, tol),
        "{i:?} is not [{lo}, {hi}]"
    );
}

#[test]
fn completeness_classifies_every_trial_by_final_state() {
    // 3 tasks x (1 + 1) runs x 2 arms = 12 trials.
    let c = campaign(&["a", "b"], 3, 1, 1);
    let mut l = Ledger::new(&c);
    // Counted, with different statuses.
    l.pass(("t1", 0, "a"));
    l.scored(("t1", 0, "b"), 1, Status::Timeout, false);
    l.scored(("t2", 0, "a"), 1, Status::Violation, false);
    // Excluded: two infra failures, the second final.
    l.infra(("t2", 0, "b"), 1, false);
    l.infra(("t2", 0, "b"), 2, true);
    // Excluded by the reaper, then the late score of the same token arrives: counted.
    let trial = l.trial("t3", 0, "a");
    l.push(
        &trial,
        1,
        Status::InfraError,
        Some(FailureKind::LeaseExpired),
        StoreFields {
            is_final: true,
            excluded_reason: Some(ExcludedReason::InfraFailure(FailureKind::LeaseExpired)),
            ..StoreFields::default()
        },
    );
    let row = l.push(
        &trial,
        1,
        Status::Completed,
        None,
        StoreFields {
            is_final: true,
            counted: true,
            late: true,
            ..StoreFields::default()
        },
    );
    row.result.score = Some(1.0);
    row.result.passed = Some(true);
    // In retry: one infra failure, not final.
    l.infra(("t3", 0, "b"), 1, false);
    // A duplicate evaluation of an already-counted trial: never counts.
    let trial = l.trial("t1", 0, "a");
    let row = l.push(
        &trial,
        2,
        Status::Completed,
        None,
        StoreFields {
            duplicate: true,
            ..StoreFields::default()
        },
    );
    row.result.score = Some(0.0);
    row.result.passed = Some(false);
    // Phase 2 of t3 refused; phase 2 of t1 and t2 never attempted.
    l.not_started(("t3", 1, "a"));
    l.not_started(("t3", 1, "b"));

    let r = l.report();
    let t = &r.completeness.total;
    assert_eq!(t.trials_total, 12);
    assert_eq!(t.not_started, 2);
    assert_eq!(t.denominator, 10);
    assert_eq!(t.counted, 4);
    assert_eq!(t.excluded, 1);
    assert_eq!(t.pending, 5);
    assert_eq!(t.pending_in_retry, 1);
    assert_eq!(t.pending_never_attempted, 4);
    assert_eq!(t.counted + t.excluded + t.pending, t.denominator);
    assert_eq!(t.counted_after_exclusion, 1);
    let s = t.counted_by_status;
    assert_eq!(
        (
            s.completed,
            s.timeout,
            s.max_turns,
            s.agent_error,
            s.violation,
            s.other
        ),
        (2, 1, 0, 0, 1, 0)
    );
    assert_eq!(t.excluded_by_reason.len(), 1);
    assert_eq!(t.excluded_by_reason["infra_failure:boot_failed"], 1);
    assert_eq!(t.not_started_by_reason["phase2_refused:cutoff"], 2);

    let per_arm = &r.completeness.per_arm;
    assert_eq!(per_arm.len(), 2);
    assert_eq!(per_arm[0].arm, "a");
    assert_eq!(per_arm[1].arm, "b");
    let (a, b) = (&per_arm[0].counts, &per_arm[1].counts);
    assert_eq!(
        (a.trials_total, a.counted, a.excluded, a.pending),
        (6, 3, 0, 2)
    );
    assert_eq!(
        (b.trials_total, b.counted, b.excluded, b.pending),
        (6, 1, 1, 3)
    );
    assert_eq!((a.not_started, b.not_started), (1, 1));
    assert_eq!(a.counted_after_exclusion, 1);

    assert_eq!(r.rows_total, l.rows.len() as u64);
    assert_eq!(r.duplicates, 1);
    assert_eq!(r.late, 1);
    assert_eq!(r.unscheduled_rows, 0);
    assert_eq!(r.rows_by_status["infra_error"], 4);
    assert_eq!(r.rows_by_status["not_started"], 2);
    assert_eq!(r.rows_by_status["completed"], 3);
    assert_eq!(r.rows_by_status.values().sum::<u64>(), r.rows_total);
    assert_eq!(r.spec_hashes, vec!["h1".to_owned()]);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);

    // Per arm: the duplicate fail does not touch t1.r0.a's pass.
    let (sa, sb) = (&r.arms[0], &r.arms[1]);
    assert_eq!((sa.counted, sa.passed, sa.denominator), (3, 2, 5));
    assert_eq!(sa.pass_rate_counted, Some(2.0 / 3.0));
    assert_eq!(sa.pass_rate_itt_lower, Some(2.0 / 5.0));
    assert_eq!(sa.pass_rate_itt_upper, Some(4.0 / 5.0));
    // Retry bias: lease_expired on a; two boot failures and one in retry on b.
    assert_eq!(sa.infra_retries, 1);
    assert_eq!(sb.infra_retries, 3);
    assert_eq!((sa.excluded, sb.excluded), (0, 1));
    assert_eq!((sb.counted, sb.passed), (1, 0));
    assert_eq!(sb.pass_rate_counted, Some(0.0));
}

#[test]
fn infra_retries_count_the_first_row_of_each_token_only() {
    let c = campaign(&["a"], 1, 1, 0);
    let mut l = Ledger::new(&c);
    l.infra(("t1", 0, "a"), 1, false);
    l.infra(("t1", 0, "a"), 1, false); // a second row of token 1
    let trial = l.trial("t1", 0, "a");
    l.push(
        &trial,
        2,
        Status::Blocked,
        Some(FailureKind::Preflight),
        StoreFields::default(),
    );
    l.push(&trial, 3, Status::Cancelled, None, StoreFields::default());
    let r = l.report();
    assert_eq!(r.arms[0].infra_retries, 2);
    assert_eq!(r.completeness.total.pending_in_retry, 1);
}

#[test]
fn pass_falls_back_to_score_when_passed_is_absent() {
    let c = campaign(&["a"], 3, 1, 0);
    let mut l = Ledger::new(&c);
    for (task, score) in [("t1", 1.0), ("t2", 0.99), ("t3", 1.0)] {
        l.scored((task, 0, "a"), 1, Status::Completed, true);
        let row = l.rows.last_mut().unwrap();
        row.result.passed = None;
        row.result.score = Some(score);
    }
    let r = l.report();
    assert_eq!(r.arms[0].passed, 2);
    let mean = r.arms[0].mean_score.unwrap();
    assert!(close(mean, 2.99 / 3.0, 1e-12));
    assert_eq!(r.arms[0].cost_usd_counted, 1.5);
    assert_eq!(r.arms[0].mean_wall_s, Some(10.0));
}

#[test]
fn wilson_interval_known_values() {
    assert_interval(wilson_interval(8, 10, Z95).unwrap(), 0.4902, 0.9433, 1e-4);
    let zero = wilson_interval(0, 10, Z95).unwrap();
    assert_eq!(zero.lo, 0.0);
    assert!(close(zero.hi, 0.2775, 1e-4), "{zero:?}");
    assert_interval(wilson_interval(5, 10, Z95).unwrap(), 0.2366, 0.7634, 1e-4);
    assert_eq!(wilson_interval(0, 0, Z95), None);

    // And in the report: 8 passes out of 10 counted.
    let c = campaign(&["a"], 10, 1, 0);
    let mut l = Ledger::new(&c);
    for i in 1..=10 {
        let task = format!("t{i}");
        if i <= 8 {
            l.pass((&task, 0, "a"));
        } else {
            l.fail((&task, 0, "a"));
        }
    }
    let r = l.report();
    assert_eq!(r.arms[0].pass_rate_counted, Some(0.8));
    assert_interval(
        r.arms[0].pass_rate_counted_ci95.unwrap(),
        0.4902,
        0.9433,
        1e-4,
    );
}

#[test]
fn mcnemar_exact_p_known_values() {
    assert!(close(mcnemar_exact_p(1, 6), 0.125, 1e-12));
    assert!(close(mcnemar_exact_p(6, 1), 0.125, 1e-12));
    assert_eq!(mcnemar_exact_p(0, 0), 1.0);
    assert_eq!(mcnemar_exact_p(3, 3), 1.0);
    assert!(close(mcnemar_exact_p(0, 5), 0.0625, 1e-12));
    // Fagerland, Lydersen & Laake (2017), the Cavo et al. data: b = 6, c = 16.
    assert!(close(mcnemar_exact_p(6, 16), 0.052479, 1e-6));
}

#[test]
fn newcombe_paired_interval_known_values() {
    // The Cavo et al. data (59 both, 6 a only, 16 b only, 80 neither): -0.0621, 95% CI
    // -0.1186 to -0.0046 (Fagerland, Lydersen & Laake, "Statistical Analysis of Contingency
    // Tables", ch. 8).
    let i = newcombe_paired_diff(59, 6, 16, 80, Z95).unwrap();
    assert_interval(i, -0.1186, -0.0046, 1e-4);
    assert_eq!(newcombe_paired_diff(0, 0, 0, 0, Z95), None);
    // No discordant pairs: the interval still straddles 0 and stays within [-1, 1].
    let i = newcombe_paired_diff(5, 0, 0, 5, Z95).unwrap();
    assert!(
        i.lo < 0.0 && i.hi > 0.0 && i.lo >= -1.0 && i.hi <= 1.0,
        "{i:?}"
    );
}

#[test]
fn pairs_match_by_task_and_run_and_skip_unmatched_runs() {
    // 4 tasks x 2 runs x 2 arms.
    let c = campaign(&["a", "b"], 4, 2, 0);
    let mut l = Ledger::new(&c);
    // Both counted: t1.r0 both pass, t1.r1 a only, t2.r0 a only, t2.r1 b only, t3.r0 neither.
    l.pass(("t1", 0, "a"));
    l.pass(("t1", 0, "b"));
    l.pass(("t1", 1, "a"));
    l.fail(("t1", 1, "b"));
    l.pass(("t2", 0, "a"));
    l.fail(("t2", 0, "b"));
    l.fail(("t2", 1, "a"));
    l.pass(("t2", 1, "b"));
    l.fail(("t3", 0, "a"));
    l.fail(("t3", 0, "b"));
    // Unmatched: a counted on t3.r1 but b excluded; b counted on t4.r0 but a pending.
    l.pass(("t3", 1, "a"));
    l.infra(("t3", 1, "b"), 1, true);
    l.pass(("t4", 0, "b"));
    // The same task on different runs does not pair: t4.r1 a against nothing.
    l.fail(("t4", 1, "a"));

    let r = l.report();
    assert_eq!(r.paired.len(), 1);
    let p = &r.paired[0];
    assert_eq!((p.arm_a.as_str(), p.arm_b.as_str()), ("a", "b"));
    assert_eq!(p.n_pairs, 5);
    assert_eq!((p.both_pass, p.a_only, p.b_only, p.neither), (1, 2, 1, 1));
    assert_eq!(p.unmatched, 3);
    assert_eq!(p.pass_rate_a, Some(3.0 / 5.0));
    assert_eq!(p.pass_rate_b, Some(2.0 / 5.0));
    assert!(close(p.pass_rate_diff.unwrap(), 0.2, 1e-12));
    let ci = p.pass_rate_diff_ci95.unwrap();
    assert!(
        ci.lo < 0.2 && 0.2 < ci.hi && ci.lo >= -1.0 && ci.hi <= 1.0,
        "{ci:?}"
    );
    assert_eq!(p.ci_method, PAIRED_CI_METHOD);
    // b = 2, c = 1: P(X <= 1), X ~ Bin(3, 1/2) = 4/8, doubled.
    assert_eq!(p.mcnemar_exact_p, 1.0);
}

#[test]
fn mcnemar_in_the_report_b1_c6() {
    let c = campaign(&["a", "b"], 7, 1, 0);
    let mut l = Ledger::new(&c);
    l.pass(("t1", 0, "a"));
    l.fail(("t1", 0, "b"));
    for i in 2..=7 {
        let task = format!("t{i}");
        l.fail((&task, 0, "a"));
        l.pass((&task, 0, "b"));
    }
    let p = &l.report().paired[0];
    assert_eq!((p.a_only, p.b_only, p.n_pairs), (1, 6, 7));
    assert!(close(p.mcnemar_exact_p, 0.125, 1e-12));
    assert!(close(p.pass_rate_diff.unwrap(), -5.0 / 7.0, 1e-12));
}

#[test]
fn every_ordered_pair_of_arms_in_arm_order() {
    let c = campaign(&["x", "y", "z"], 1, 1, 0);
    let l = Ledger::new(&c);
    let r = l.report();
    let pairs: Vec<(&str, &str)> = r
        .paired
        .iter()
        .map(|p| (p.arm_a.as_str(), p.arm_b.as_str()))
        .collect();
    assert_eq!(pairs, vec![("x", "y"), ("x", "z"), ("y", "z")]);
    for p in &r.paired {
        assert_eq!(p.n_pairs, 0);
        assert_eq!(p.pass_rate_diff, None);
        assert_eq!(p.pass_rate_diff_ci95, None);
        assert_eq!(p.mcnemar_exact_p, 1.0);
    }
    // Nothing ran: everything pending, no rates.
    assert_eq!(r.completeness.total.pending_never_attempted, 3);
    assert_eq!(r.arms[0].pass_rate_counted, None);
    assert_eq!(r.arms[0].pass_rate_itt_lower, Some(0.0));
    assert_eq!(r.arms[0].pass_rate_itt_upper, Some(1.0));
}

#[test]
fn unscheduled_rows_and_double_counts_are_warned_about() {
    let c = campaign(&["a"], 2, 1, 0);
    let other = campaign(&["a"], 3, 1, 0);
    let mut l = Ledger::new(&c);
    l.pass(("t1", 0, "a"));
    l.scored(("t1", 0, "a"), 2, Status::Completed, false);
    let mut o = Ledger::new(&other);
    o.pass(("t3", 0, "a"));
    let mut rows = l.rows.clone();
    let mut stray = o.rows[0].clone();
    stray.seq = 99;
    rows.push(stray);
    let r = report::build(&c, &rows);
    assert_eq!(r.unscheduled_rows, 1);
    assert_eq!(r.completeness.total.counted, 1);
    assert_eq!(r.arms[0].passed, 1, "the first counted row wins");
    assert_eq!(r.warnings.len(), 2, "{:?}", r.warnings);
}

#[test]
fn to_text_puts_the_audit_before_the_arm_table() {
    let c = campaign(&["a", "b"], 3, 1, 1);
    let mut l = Ledger::new(&c);
    l.pass(("t1", 0, "a"));
    l.fail(("t1", 0, "b"));
    l.infra(("t2", 0, "b"), 1, true);
    l.not_started(("t3", 1, "a"));
    let text = l.report().to_text();
    assert!(text.is_ascii());
    let audit = text.find("COMPLETENESS").unwrap();
    let arms = text.find("PER ARM").unwrap();
    let paired = text.find("PAIRED").unwrap();
    assert!(audit < arms && arms < paired, "{text}");
    for word in [
        "denominator = trials_total - not_started = 12 - 1 = 11",
        "completed",
        "timeout",
        "max_turns",
        "agent_error",
        "violation",
        "infra_failure:boot_failed",
        "phase2_refused:cutoff",
        "never_attempted",
        "in_retry",
        "infra_retries",
        "a vs b",
        "rows by status: completed 2, timeout 0",
    ] {
        assert!(text.contains(word), "missing {word:?} in\n{text}");
    }
    // Aligned: every line of the per-arm table has the same length up to its last cell.
    let lines: Vec<&str> = text[arms..paired].lines().skip(1).take(4).collect();
    assert!(lines[1].starts_with("  ---"), "{text}");
    assert_eq!(lines[0].len(), lines[1].len(), "{text}");
}

#[test]
fn report_round_trips_as_json() {
    let c = campaign(&["a", "b"], 2, 1, 0);
    let mut l = Ledger::new(&c);
    l.pass(("t1", 0, "a"));
    l.fail(("t1", 0, "b"));
    l.infra(("t2", 0, "a"), 1, true);
    let r = l.report();
    let json = serde_json::to_string(&r).unwrap();
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, r);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["completeness"]["total"]["denominator"], 4);
    assert_eq!(v["arms"][0]["arm"], "a");
    assert_eq!(v["paired"][0]["arm_b"], "b");
}

#[test]
fn the_budget_line_shows_spend_against_the_cap_and_its_bound() {
    let with = |extra: &str| {
        let text = format!(
            "id = \"rep\"\nphase1_runs = 1\nschedule_seed = 7\nbudget_cap_usd = 0.3\n\
             [[arms]]\nid = \"a\"\n[tasks]\nitems = [{{ id = \"t1\" }}, {{ id = \"t2\" }}]\n\
             [driver]\nsim = {{}}\n{extra}"
        );
        spec::load_str(&text, Path::new("x.toml"), Path::new(".")).unwrap()
    };
    let unguarded = with("");
    let mut l = Ledger::new(&unguarded);
    l.pass(("t1", 0, "a"));
    l.pass(("t2", 0, "a"));
    let r = l.report();
    let b = r
        .budget
        .as_ref()
        .expect("a capped campaign has a budget line");
    assert!((b.spent_usd - 1.0).abs() < 1e-9 && b.cap_usd == 0.3 && !b.guarded);
    let text = r.to_text();
    assert!(
        text.contains("budget: spent $1.00 of cap $0.30")
            && text.contains("one attempt's overrun per lane in flight"),
        "{text}"
    );

    let guarded = with("[defaults]\nmax_cost_usd = 0.1\n");
    let r = Ledger::new(&guarded).report();
    assert!(r.budget.as_ref().unwrap().guarded);
    assert!(r.to_text().contains("spend stays within the cap"));

    let uncapped = campaign(&["a"], 1, 1, 0);
    assert!(Ledger::new(&uncapped).report().budget.is_none());
}

/// A report with every part: exclusions, a phase-2 refusal, pending trials, warnings.
fn rich_report() -> Report {
    let c = campaign(&["a", "b"], 3, 1, 1);
    let mut l = Ledger::new(&c);
    l.pass(("t1", 0, "a"));
    l.fail(("t1", 0, "b"));
    l.pass(("t2", 0, "a"));
    l.pass(("t2", 0, "b"));
    l.infra(("t2", 1, "b"), 1, true);
    l.not_started(("t3", 1, "a"));
    l.scored(("t1", 0, "a"), 2, Status::Completed, false);
    l.report()
}

/// The text form, byte for byte (`tests/golden/report.txt`; write it anew with
/// `LANES_WRITE_GOLDEN=1`). It was made before the renderers shared one document, and holds
/// them to the text `lanes report` always printed.
#[test]
fn the_text_report_is_the_golden_text() {
    let text = rich_report().to_text();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/report.txt");
    if std::env::var_os("LANES_WRITE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
    }
    let golden = std::fs::read_to_string(&path).unwrap();
    assert!(text == golden, "the text report changed:\n{text}");
}

/// Markdown's escaping of a table cell, written out independently of the renderer.
fn md_cell(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\`*_[]<>#|".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// LaTeX's escaping of the characters a report cell can hold.
fn tex_cell(s: &str) -> String {
    s.replace('_', "\\_")
        .replace('$', "\\$")
        .replace('%', "\\%")
        .replace('&', "\\&")
        .replace('#', "\\#")
}

#[test]
fn markdown_and_latex_carry_every_cell_of_the_text_tables() {
    let r = rich_report();
    let doc = r.document(Sections::Full);
    let md = r.render_as(ReportFormat::Markdown, Sections::Full);
    let tex = r.render_as(ReportFormat::Latex, Sections::Full);
    let mut tables = 0;
    for section in &doc.sections {
        assert!(md.contains(&format!(
            "## {}",
            md_cell(&section.title).replace("\\|", "|")
        )));
        for block in &section.blocks {
            let Block::Table(t) = block else { continue };
            tables += 1;
            for row in std::iter::once(&t.headers).chain(&t.rows) {
                let line: Vec<String> = row.iter().map(|c| md_cell(c)).collect();
                let line = format!("| {} |", line.join(" | "));
                assert!(md.contains(&line), "{line:?} not in\n{md}");
                let line: Vec<String> = row.iter().map(|c| tex_cell(c)).collect();
                let line = format!("{} \\\\", line.join(" & "));
                assert!(tex.contains(&line), "{line:?} not in\n{tex}");
            }
            if !t.rows.is_empty() {
                let spec: String = std::iter::once('l')
                    .chain(std::iter::repeat_n('r', t.headers.len() - 1))
                    .collect();
                assert!(tex.contains(&format!("\\begin{{tabular}}{{{spec}}}")));
            }
        }
    }
    assert_eq!(tables, 6);
    assert_eq!(
        tex.matches("\\begin{").count(),
        tex.matches("\\end{").count()
    );
    // The numbers of the text form: the per-arm row of arm a, cell for cell.
    let text = r.to_text();
    assert!(text.contains("  a        5        2       2      1.000  [0.342, 1.000]"));
    assert!(
        md.contains("| a | 5 | 2 | 2 | 1.000 | \\[0.342, 1.000\\] |"),
        "{md}"
    );
    assert!(
        tex.contains("a & 5 & 2 & 2 & 1.000 & [0.342, 1.000] &"),
        "{tex}"
    );
    // JSON is the report value itself.
    let json: Report =
        serde_json::from_str(&r.render_as(ReportFormat::Json, Sections::Full)).unwrap();
    assert_eq!(json, r);
}

#[test]
fn a_summary_is_a_prefix_of_the_full_report_in_every_format() {
    let r = rich_report();
    for format in [
        ReportFormat::Text,
        ReportFormat::Markdown,
        ReportFormat::Latex,
    ] {
        let summary = r.render_as(format, Sections::Summary);
        let full = r.render_as(format, Sections::Full);
        assert!(full.starts_with(&summary), "{format:?}");
        assert!(summary.contains("COMPLETENESS") && !summary.contains("PER ARM"));
    }
}
