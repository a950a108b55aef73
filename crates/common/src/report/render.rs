//! The report as compact, plain-ASCII text: a header, the completeness audit, then the
//! per-arm rates and the paired comparisons. Callers pick the parts with [`Sections`] rather
//! than cutting the text.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{Report, StateCounts};
use crate::row::Status;
use crate::stats::Interval;

/// Which parts of the report [`Report::render`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sections {
    /// The header and the completeness audit, without any rate: what `lanes report` prints
    /// while some trials are not final. It ends with the blank line that precedes the rates in
    /// the full text, so it is always a prefix of [`Sections::Full`].
    Summary,
    /// The summary, then the per-arm table and the paired comparisons.
    Full,
}

impl Report {
    /// The report as text, limited to `sections`.
    pub fn render(&self, sections: Sections) -> String {
        let mut out = String::new();
        self.write_header(&mut out);
        self.write_audit(&mut out);
        // The blank line between the audit and the rates closes the summary too.
        out.push('\n');
        match sections {
            Sections::Summary => {}
            Sections::Full => {
                self.write_per_arm(&mut out);
                self.write_paired(&mut out);
            }
        }
        out
    }

    /// The whole report as text: `render(Sections::Full)`.
    pub fn to_text(&self) -> String {
        self.render(Sections::Full)
    }

    /// The campaign, its spec hashes, the row counts and the budget line.
    fn write_header(&self, out: &mut String) {
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
    }

    /// Every scheduled trial by final state, per arm and in total, then the warnings.
    fn write_audit(&self, out: &mut String) {
        let c = &self.completeness;
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
            out,
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
        table(out, &headers, &rows);

        reason_table(out, "excluded, by reason", &named, |s| {
            &s.excluded_by_reason
        });
        reason_table(
            out,
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
    }

    /// The rates of each arm, over the counted trials and over the denominator.
    fn write_per_arm(&self, out: &mut String) {
        out.push_str("PER ARM (rates over counted trials; itt = over the denominator)\n");
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
            out,
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
    }

    /// Each pair of arms, compared by run seed.
    fn write_paired(&self, out: &mut String) {
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
                out,
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
