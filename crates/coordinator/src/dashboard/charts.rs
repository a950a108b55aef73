//! The charts, as inline SVG drawn on the server: per-arm pass rates with their 95 % Wilson
//! intervals, paired differences, throughput over time, and progress bars. Each mark carries
//! its numbers in `data-` attributes and a `<title>`, so it reads without colour and a test
//! can check it against the report.

use std::fmt::Write as _;

use lanes_common::utc::format_rfc3339;
use lanes_report::{ArmStats, PairedComparison};

use super::html::{esc, pct};

const W: f64 = 720.0;
/// Room for the arm names on the left and the numbers on the right.
const LEFT: f64 = 130.0;
const RIGHT: f64 = 210.0;
const ROW: f64 = 30.0;

fn x_of(v: f64, lo: f64, hi: f64) -> f64 {
    LEFT + (v - lo) / (hi - lo) * (W - LEFT - RIGHT)
}

fn axis(out: &mut String, lo: f64, hi: f64, ticks: &[f64], y_top: f64, y_bottom: f64) {
    for &t in ticks {
        let x = x_of(t, lo, hi);
        let _ = write!(
            out,
            "<line class=\"grid\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{y_top:.1}\" y2=\"{y_bottom:.1}\"/>\
             <text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            y_bottom + 14.0,
            if lo < 0.0 {
                format!("{:+.0}", t * 100.0)
            } else {
                format!("{:.0}%", t * 100.0)
            }
        );
    }
}

/// Per-arm pass rates of counted trials, each with its 95 % Wilson interval.
pub(crate) fn arm_intervals(arms: &[ArmStats]) -> String {
    let h = ROW * arms.len() as f64 + 34.0;
    let mut out = format!(
        "<svg class=\"chart\" id=\"arm-chart\" viewBox=\"0 0 {W} {h}\" role=\"img\" \
         aria-label=\"Pass rate per arm with 95% Wilson intervals\">"
    );
    axis(
        &mut out,
        0.0,
        1.0,
        &[0.0, 0.25, 0.5, 0.75, 1.0],
        4.0,
        h - 22.0,
    );
    for (i, a) in arms.iter().enumerate() {
        let y = 4.0 + ROW * i as f64 + ROW / 2.0;
        let _ = write!(
            out,
            "<text class=\"label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT - 8.0,
            y + 4.0,
            esc(&a.arm)
        );
        match (a.pass_rate_counted, a.pass_rate_counted_ci95) {
            (Some(rate), Some(ci)) => {
                let (x0, x1, xr) = (
                    x_of(ci.lo, 0.0, 1.0),
                    x_of(ci.hi, 0.0, 1.0),
                    x_of(rate, 0.0, 1.0),
                );
                let _ = write!(
                    out,
                    "<g class=\"interval\" data-arm=\"{arm}\" data-rate=\"{rate}\" data-lo=\"{lo}\" \
                     data-hi=\"{hi}\" data-passed=\"{passed}\" data-counted=\"{counted}\">\
                     <title>{arm}: {r} passed ({passed} of {counted} counted), 95% CI {l} to {u}</title>\
                     <line class=\"ci\" x1=\"{x0:.1}\" x2=\"{x1:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
                     <line class=\"ci\" x1=\"{x0:.1}\" x2=\"{x0:.1}\" y1=\"{a0:.1}\" y2=\"{a1:.1}\"/>\
                     <line class=\"ci\" x1=\"{x1:.1}\" x2=\"{x1:.1}\" y1=\"{a0:.1}\" y2=\"{a1:.1}\"/>\
                     <circle class=\"rate\" cx=\"{xr:.1}\" cy=\"{y:.1}\" r=\"5\"/>\
                     <text class=\"num\" x=\"{tx:.1}\" y=\"{ty:.1}\">{r} [{l}, {u}] n={counted}</text></g>",
                    arm = esc(&a.arm),
                    lo = ci.lo,
                    hi = ci.hi,
                    passed = a.passed,
                    counted = a.counted,
                    r = pct(rate),
                    l = pct(ci.lo),
                    u = pct(ci.hi),
                    a0 = y - 6.0,
                    a1 = y + 6.0,
                    tx = W - RIGHT + 8.0,
                    ty = y + 4.0,
                );
            }
            _ => {
                let _ = write!(
                    out,
                    "<text class=\"num\" x=\"{:.1}\" y=\"{:.1}\">no counted trials yet</text>",
                    LEFT,
                    y + 4.0
                );
            }
        }
    }
    out.push_str("</svg>");
    out
}

/// Each paired comparison: the difference of pass rates (a − b) and its 95 % interval.
pub(crate) fn paired_differences(pairs: &[PairedComparison]) -> String {
    let h = ROW * pairs.len() as f64 + 34.0;
    let mut out = format!(
        "<svg class=\"chart\" id=\"paired-chart\" viewBox=\"0 0 {W} {h}\" role=\"img\" \
         aria-label=\"Paired differences of pass rates with 95% intervals\">"
    );
    axis(
        &mut out,
        -1.0,
        1.0,
        &[-1.0, -0.5, 0.0, 0.5, 1.0],
        4.0,
        h - 22.0,
    );
    for (i, p) in pairs.iter().enumerate() {
        let y = 4.0 + ROW * i as f64 + ROW / 2.0;
        let name = format!("{} − {}", p.arm_a, p.arm_b);
        let _ = write!(
            out,
            "<text class=\"label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LEFT - 8.0,
            y + 4.0,
            esc(&name)
        );
        match (p.pass_rate_diff, p.pass_rate_diff_ci95) {
            (Some(d), Some(ci)) => {
                let (x0, x1, xd) = (
                    x_of(ci.lo, -1.0, 1.0),
                    x_of(ci.hi, -1.0, 1.0),
                    x_of(d, -1.0, 1.0),
                );
                let signed = |v: f64| format!("{:+.1}", v * 100.0);
                let _ = write!(
                    out,
                    "<g class=\"interval\" data-a=\"{a}\" data-b=\"{b}\" data-diff=\"{d}\" \
                     data-lo=\"{lo}\" data-hi=\"{hi}\" data-pairs=\"{n}\"><title>{name}: {ds} \
                     points over {n} pairs, 95% CI {ls} to {hs}</title>\
                     <line class=\"ci\" x1=\"{x0:.1}\" x2=\"{x1:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\"/>\
                     <rect class=\"rate\" x=\"{rx:.1}\" y=\"{ry:.1}\" width=\"8\" height=\"8\"/>\
                     <text class=\"num\" x=\"{tx:.1}\" y=\"{ty:.1}\">{ds} [{ls}, {hs}] pts n={n}</text></g>",
                    a = esc(&p.arm_a),
                    b = esc(&p.arm_b),
                    lo = ci.lo,
                    hi = ci.hi,
                    n = p.n_pairs,
                    name = esc(&name),
                    ds = signed(d),
                    ls = signed(ci.lo),
                    hs = signed(ci.hi),
                    rx = xd - 4.0,
                    ry = y - 4.0,
                    tx = W - RIGHT + 8.0,
                    ty = y + 4.0,
                );
            }
            _ => {
                let _ = write!(
                    out,
                    "<text class=\"num\" x=\"{:.1}\" y=\"{:.1}\">no complete pairs yet</text>",
                    LEFT,
                    y + 4.0
                );
            }
        }
    }
    out.push_str("</svg>");
    out
}

/// Trials that became final per interval, from `start_ms` to `end_ms`, in up to 40 bars.
pub(crate) fn throughput(finals_ms: &[i64], start_ms: i64, end_ms: i64) -> String {
    const H: f64 = 140.0;
    const BARS: usize = 40;
    let span = (end_ms - start_ms).max(1);
    // Whole seconds or minutes per bar, so the axis reads plainly.
    let raw = (span as f64 / BARS as f64).ceil() as i64;
    let step = if raw <= 60_000 {
        ((raw + 999) / 1000).max(1) * 1000
    } else {
        ((raw + 59_999) / 60_000) * 60_000
    };
    let n = ((span + step - 1) / step).max(1) as usize;
    let mut counts = vec![0u64; n];
    for &ms in finals_ms {
        if ms >= start_ms {
            let i = (((ms - start_ms) / step) as usize).min(n - 1);
            counts[i] += 1;
        }
    }
    let max = counts.iter().copied().max().unwrap_or(0).max(1);
    let unit = if step >= 60_000 {
        format!("{} min", step / 60_000)
    } else {
        format!("{} s", step / 1000)
    };
    let (left, bottom) = (40.0, H - 20.0);
    let bw = (W - left) / n as f64;
    let mut out = format!(
        "<svg class=\"chart\" id=\"throughput-chart\" viewBox=\"0 0 {W} {H}\" role=\"img\" \
         aria-label=\"Trials final per {unit}\" data-total=\"{}\" data-step-ms=\"{step}\">\
         <text class=\"tick\" x=\"{:.1}\" y=\"12\" text-anchor=\"end\">{max}</text>\
         <text class=\"tick\" x=\"{:.1}\" y=\"{bottom:.1}\" text-anchor=\"end\">0</text>\
         <line class=\"grid\" x1=\"{left}\" x2=\"{W}\" y1=\"{bottom:.1}\" y2=\"{bottom:.1}\"/>",
        finals_ms.len(),
        left - 4.0,
        left - 4.0,
    );
    for (i, c) in counts.iter().enumerate() {
        if *c == 0 {
            continue;
        }
        let bh = (bottom - 8.0) * *c as f64 / max as f64;
        let at = start_ms + step * i as i64;
        let _ = write!(
            out,
            "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\">\
             <title>{c} final from {}</title></rect>",
            left + bw * i as f64 + 1.0,
            bottom - bh,
            (bw - 2.0).max(1.0),
            format_rfc3339(at)
        );
    }
    let _ = write!(
        out,
        "<text class=\"tick\" x=\"{left}\" y=\"{:.1}\">{}</text>\
         <text class=\"tick\" x=\"{W}\" y=\"{:.1}\" text-anchor=\"end\">{} · bars of {unit}</text></svg>",
        H - 4.0,
        esc(&clock(start_ms)),
        H - 4.0,
        esc(&clock(end_ms)),
    );
    out
}

/// `HH:MM:SS` of a time (UTC).
fn clock(ms: i64) -> String {
    let t = format_rfc3339(ms);
    t.get(11..19).unwrap_or(&t).to_owned()
}

/// A progress bar, with `done/total label` beside it unless `label` is empty.
pub(crate) fn progress(done: u64, total: u64, label: &str) -> String {
    let f = if total == 0 {
        0.0
    } else {
        done as f64 / total as f64
    };
    let text = if label.is_empty() {
        String::new()
    } else {
        format!(" <span>{done}/{total} {}</span>", esc(label))
    };
    format!(
        "<span class=\"progress\"><svg viewBox=\"0 0 100 8\" class=\"bar-svg\" role=\"img\" \
         aria-label=\"{done} of {total}\"><rect class=\"track\" width=\"100\" height=\"8\"/>\
         <rect class=\"fill\" width=\"{:.2}\" height=\"8\"/></svg>{text}</span>",
        f * 100.0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_counts_every_final_once() {
        let finals = [0, 500, 1_500, 59_000, 61_000];
        let svg = throughput(&finals, 0, 120_000);
        assert!(svg.contains("data-total=\"5\""));
        let bars: u64 = svg
            .split("<title>")
            .skip(1)
            .map(|t| t.split(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(bars, 5);
    }
}
