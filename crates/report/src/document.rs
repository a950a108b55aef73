//! The report laid out once, as a document every format renders: a title, a few facts, then
//! sections of lines, tables, notes and warnings, every cell already formatted. The text,
//! Markdown and LaTeX renderers only typeset it, so they cannot disagree on a number.

use std::collections::BTreeMap;

use super::{Report, StateCounts};
use lanes_common::row::Status;
use lanes_common::stats::Interval;

/// Which parts of the report to lay out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sections {
    /// The header and the completeness audit, without any rate: what `lanes report` prints
    /// while some trials are not final. In every format it is a prefix of [`Sections::Full`].
    Summary,
    /// The summary, then the per-arm table and the paired comparisons.
    Full,
}

/// The report as a document.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub title: String,
    /// The report's schema tag, `lanes-report/1`.
    pub schema: String,
    /// `(label, value)` lines under the title.
    pub facts: Vec<(String, String)>,
    pub sections: Vec<Section>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    pub title: String,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A line of prose.
    Line(String),
    Table(Table),
    /// A footnote to the tables before it.
    Note(String),
    Warnings(Vec<String>),
}

/// A table: the first column names the row, the others are numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub title: Option<String>,
    pub headers: Vec<String>,
    /// May be empty: the table then says "none".
    pub rows: Vec<Vec<String>>,
}

impl Report {
    /// The report as a document, limited to `sections`.
    pub fn document(&self, sections: Sections) -> Document {
        let mut doc = Document {
            title: format!("Campaign {}", self.campaign),
            schema: self.schema.clone(),
            facts: self.facts(),
            sections: vec![self.audit()],
        };
        if sections == Sections::Full {
            doc.sections.push(self.per_arm());
            doc.sections.push(self.paired());
            if !self.operator_retries.is_empty() {
                doc.sections.push(self.operator_retries());
            }
        }
        doc
    }

    /// The spec hashes, the row counts and the budget line.
    fn facts(&self) -> Vec<(String, String)> {
        let hashes = if self.spec_hashes.is_empty() {
            "-".to_owned()
        } else {
            self.spec_hashes.join(", ")
        };
        let by_status: Vec<String> = Status::ALL
            .iter()
            .filter_map(|s| {
                let n = self.rows_by_status.get(s.as_str()).copied().unwrap_or(0);
                // Requeues are the operator's, not outcomes: named only when there are any.
                (*s != Status::Requeued || n > 0).then(|| format!("{s} {n}"))
            })
            .collect();
        let mut facts = Vec::new();
        if let Some(origin) = &self.smoke_of {
            facts.push((
                "SMOKE RUN".to_owned(),
                format!(
                    "derived from campaign {} (spec hash {}) to check the setup; these are \
                     not its pre-registered results",
                    origin.campaign, origin.spec_hash
                ),
            ));
        }
        facts.extend([
            ("spec hash(es)".to_owned(), hashes),
            (
                "rows".to_owned(),
                format!(
                    "{} (duplicates {}, late {}, unscheduled {})",
                    self.rows_total, self.duplicates, self.late, self.unscheduled_rows
                ),
            ),
            ("rows by status".to_owned(), by_status.join(", ")),
        ]);
        if let Some(b) = &self.budget {
            let bound = if b.guarded {
                "every trial has a max_cost_usd guard: spend stays within the cap while drivers honour it"
            } else {
                "not every trial has a max_cost_usd guard: spend may pass the cap by at most one attempt's overrun per lane in flight"
            };
            facts.push((
                "budget".to_owned(),
                format!(
                    "spent ${:.2} of cap ${:.2} ({bound})",
                    b.spent_usd, b.cap_usd
                ),
            ));
        }
        facts
    }

    /// Every scheduled trial by final state, per arm and in total, then the warnings.
    fn audit(&self) -> Section {
        let c = &self.completeness;
        let t = &c.total;
        let mut named: Vec<(String, &StateCounts)> = c
            .per_arm
            .iter()
            .map(|a| (a.arm.clone(), &a.counts))
            .collect();
        named.push(("total".to_owned(), t));
        let mut blocks = vec![Block::Line(format!(
            "denominator = trials_total - not_started = {} - {} = {}",
            t.trials_total, t.not_started, t.denominator
        ))];
        blocks.push(Block::Table(Table {
            title: None,
            headers: strings(&[
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
            rows: named
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
                .collect(),
        }));

        let other = t.counted_by_status.other > 0;
        let mut headers = strings(&[
            "arm",
            "completed",
            "timeout",
            "max_turns",
            "agent_error",
            "violation",
        ]);
        if other {
            headers.push("other".to_owned());
        }
        blocks.push(Block::Table(Table {
            title: Some("counted, by status".to_owned()),
            headers,
            rows: named
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
                    if other {
                        row.push(b.other.to_string());
                    }
                    row
                })
                .collect(),
        }));
        blocks.push(reason_table("excluded, by reason", &named, |s| {
            &s.excluded_by_reason
        }));
        blocks.push(reason_table(
            "not_started (outside the denominator), by reason",
            &named,
            |s| &s.not_started_by_reason,
        ));
        if !self.warnings.is_empty() {
            blocks.push(Block::Warnings(self.warnings.clone()));
        }
        Section {
            title: "COMPLETENESS (every scheduled trial by final state)".to_owned(),
            blocks,
        }
    }

    /// The rates of each arm, over the counted trials and over the denominator.
    fn per_arm(&self) -> Section {
        let rows = self
            .arms
            .iter()
            .map(|a| {
                vec![
                    a.arm.clone(),
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
        let table = Table {
            title: None,
            headers: strings(&[
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
            rows,
        };
        Section {
            title: "PER ARM (rates over counted trials; itt = over the denominator)".to_owned(),
            blocks: vec![
                Block::Table(table),
                Block::Note(
                    "itt_lower counts excluded and pending trials as failures, itt_upper as passes;"
                        .to_owned(),
                ),
                Block::Note(
                    "infra_retries = infra_error/blocked rows (first row per token): retry-bias disclosure"
                        .to_owned(),
                ),
            ],
        }
    }

    /// Each pair of arms, compared by run seed.
    fn paired(&self) -> Section {
        let title = "PAIRED (by run seed = (task, run_index); both trials counted)".to_owned();
        if self.paired.is_empty() {
            return Section {
                title,
                blocks: vec![Block::Line("(fewer than two arms)".to_owned())],
            };
        }
        let rows = self
            .paired
            .iter()
            .map(|p| {
                vec![
                    format!("{} vs {}", p.arm_a, p.arm_b),
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
        let table = Table {
            title: None,
            headers: strings(&[
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
            rows,
        };
        Section {
            title,
            blocks: vec![
                Block::Table(table),
                Block::Note(
                    "ci95: Newcombe (1998) paired score interval; mcnemar_p: exact two-sided \
                     binomial test on a_only vs b_only"
                        .to_owned(),
                ),
            ],
        }
    }
}

impl Report {
    /// The trials an operator requeued, per arm, beside the arm's other trials.
    fn operator_retries(&self) -> Section {
        let mut blocks: Vec<Block> = self
            .retry_passes
            .iter()
            .map(|p| {
                Block::Line(format!(
                    "pass {} at {}: {} trials requeued ({}): {}",
                    p.pass, p.at_utc, p.trials, p.selection, p.note
                ))
            })
            .collect();
        blocks.push(Block::Table(Table {
            title: None,
            headers: strings(&[
                "arm",
                "requeued",
                "counted",
                "passed",
                "pass_rate",
                "not_requeued_rate",
                "excluded_again",
                "pending",
            ]),
            rows: self
                .operator_retries
                .iter()
                .map(|r| {
                    vec![
                        r.arm.clone(),
                        r.requeued.to_string(),
                        r.counted.to_string(),
                        r.passed.to_string(),
                        fmt_rate(r.pass_rate_requeued),
                        fmt_rate(r.pass_rate_not_requeued),
                        r.excluded.to_string(),
                        r.pending.to_string(),
                    ]
                })
                .collect(),
        }));
        blocks.push(Block::Note(
            "requeued trials are counted in the rates above; pass_rate is theirs alone, \
             not_requeued_rate the arm's other counted trials': a gap is the retry bias"
                .to_owned(),
        ));
        Section {
            title: "OPERATOR RETRIES (excluded trials requeued with lanes retry)".to_owned(),
            blocks,
        }
    }
}

/// A table of reasons (rows) by arm (columns), with a total; no rows when there is no reason.
fn reason_table(
    title: &str,
    named: &[(String, &StateCounts)],
    pick: impl Fn(&StateCounts) -> &BTreeMap<String, u64>,
) -> Block {
    let reasons = named.last().map(|(_, total)| pick(total));
    let mut headers = vec!["reason".to_owned()];
    headers.extend(named.iter().map(|(name, _)| name.clone()));
    let rows = reasons
        .into_iter()
        .flat_map(|r| r.keys())
        .map(|reason| {
            let mut row = vec![reason.clone()];
            row.extend(
                named
                    .iter()
                    .map(|(_, s)| pick(s).get(reason).copied().unwrap_or(0).to_string()),
            );
            row
        })
        .collect();
    Block::Table(Table {
        title: Some(title.to_owned()),
        headers,
        rows,
    })
}

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

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}
