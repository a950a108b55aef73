//! The schedule grid: every trial of the pre-registered schedule in order, task-major (one
//! row per task), run groups across with the arms in spec order inside each, one grid per
//! phase. A cell's fill says its outcome by colour and by pattern (see [`patterns`]), so it
//! reads without colour too. Past [`MAX_CELLS`] trials the grid becomes one bar per block.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

use lanes_common::schedule::SchedulePhase;

use super::api::Skeleton;
use super::html::{esc, url_part};
use super::ledger::{Cell, Ledger};

/// Above this many trials a per-trial grid would outgrow a light page (a cell, with its link
/// and its tooltip, is about 150 bytes).
pub(crate) const MAX_CELLS: u64 = 600;
const CELL: u32 = 12;
const STEP: u32 = 14;
const GROUP_GAP: u32 = 8;
const LABEL: u32 = 130;

/// The fills every grid and legend on a page refers to: one hidden SVG of patterns.
pub(crate) fn patterns() -> &'static str {
    "<svg class=\"defs\" aria-hidden=\"true\" width=\"0\" height=\"0\"><defs>\
     <pattern id=\"p-failed\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">\
     <rect width=\"4\" height=\"4\" fill=\"#c62828\"/><rect width=\"1.5\" height=\"4\" fill=\"#ffcdd2\"/></pattern>\
     <pattern id=\"p-excluded\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\">\
     <rect width=\"4\" height=\"4\" fill=\"#6d6d6d\"/><circle cx=\"2\" cy=\"2\" r=\"0.9\" fill=\"#eee\"/></pattern>\
     <pattern id=\"p-notstarted\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\">\
     <rect width=\"6\" height=\"6\" fill=\"#e0e0e0\"/><path d=\"M0 0L6 6M6 0L0 6\" stroke=\"#757575\" stroke-width=\"1\"/></pattern>\
     <pattern id=\"p-retrying\" width=\"4\" height=\"4\" patternUnits=\"userSpaceOnUse\">\
     <rect width=\"4\" height=\"4\" fill=\"#f9a825\"/><rect width=\"4\" height=\"1.2\" fill=\"#fff8e1\"/></pattern>\
     </defs></svg>"
}

/// The legend: each fill with its name and how many trials have it.
fn legend(counts: &BTreeMap<Cell, u64>) -> String {
    let mut out = String::from("<ul class=\"legend\" id=\"grid-legend\">");
    for c in Cell::ALL {
        let _ = write!(
            out,
            "<li><svg width=\"14\" height=\"14\" aria-hidden=\"true\"><rect class=\"{}\" x=\"1\" y=\"1\" \
             width=\"{CELL}\" height=\"{CELL}\"/></svg> {} <b data-count=\"{}\">{}</b></li>",
            c.class(),
            c.label(),
            c.class(),
            counts.get(&c).copied().unwrap_or(0)
        );
    }
    out.push_str("</ul>");
    out
}

/// The grid (or the block bars) of a campaign, with its legend. Cells link to `trials/<id>`,
/// relative to the campaign page's base.
pub(crate) fn render(skeleton: &Skeleton, ledger: &Ledger, running: &HashSet<String>) -> String {
    let spec = &skeleton.spec;
    let arms: Vec<&str> = spec.arms.iter().map(|a| a.id.as_str()).collect();
    let total_runs = spec.total_runs();
    let trials = skeleton.tasks.len() as u64 * u64::from(total_runs) * arms.len() as u64;
    let cell_of = |task: &str, run: u32, arm: &str| {
        let id = format!("{task}.r{run}.{arm}");
        let c = ledger.cell(&id, running.contains(&id));
        (id, c)
    };
    let mut counts: BTreeMap<Cell, u64> = BTreeMap::new();
    let mut body = String::new();
    let phases = [
        (SchedulePhase::First, 0..spec.phase1_runs),
        (SchedulePhase::Second, spec.phase1_runs..total_runs),
    ];
    for (phase, runs) in phases {
        if runs.is_empty() {
            continue;
        }
        let n_runs = runs.len() as u32;
        let _ = write!(
            body,
            "<h3>Phase {phase} <small>runs {}–{} · each group: {}</small></h3>",
            runs.start,
            runs.end - 1,
            esc(&arms.join(", "))
        );
        if trials > MAX_CELLS {
            body.push_str(&blocks(
                phase,
                skeleton,
                runs.clone(),
                ledger,
                running,
                &mut counts,
            ));
            continue;
        }
        let group_w = STEP * arms.len() as u32 + GROUP_GAP;
        let width = LABEL + group_w * n_runs;
        let height = 16 + STEP * skeleton.tasks.len() as u32;
        let _ = write!(
            body,
            "<div class=\"scroll\"><svg class=\"grid-svg\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" \
             height=\"{height}\" role=\"img\" aria-label=\"Schedule grid, phase {phase}\">"
        );
        for (g, run) in runs.clone().enumerate() {
            let _ = write!(
                body,
                "<text class=\"tick\" x=\"{}\" y=\"11\">r{run}</text>",
                LABEL + group_w * g as u32
            );
        }
        for (t, task) in skeleton.tasks.iter().enumerate() {
            let y = 16 + STEP * t as u32;
            let _ = write!(
                body,
                "<g transform=\"translate(0 {y})\"><text class=\"label\" x=\"{}\" y=\"10\" text-anchor=\"end\">{}</text>",
                LABEL - 6,
                esc(&short(task, 18))
            );
            for (g, run) in runs.clone().enumerate() {
                for (a, arm) in arms.iter().enumerate() {
                    let (id, c) = cell_of(task, run, arm);
                    *counts.entry(c).or_default() += 1;
                    // Relative to the page's base (`/campaigns/<id>/`): a big grid stays light.
                    let _ = write!(
                        body,
                        "<a href=\"trials/{}\"><rect class=\"{}\" x=\"{}\" width=\"{CELL}\" \
                         height=\"{CELL}\"><title>{}: {}</title></rect></a>",
                        url_part(&id),
                        c.class(),
                        LABEL + group_w * g as u32 + STEP * a as u32,
                        esc(&id),
                        c.label()
                    );
                }
            }
            body.push_str("</g>");
        }
        body.push_str("</svg></div>");
    }
    format!("{}{body}", legend(&counts))
}

/// Bars drawn per phase at most; past that, each bar is a run of consecutive tasks.
const MAX_BARS: usize = 150;

/// One stacked bar per block (task) of a phase, or per run of tasks when there are many: how
/// many of its trials have each outcome. One pass over the trials with rows; the rest are
/// pending.
fn blocks(
    phase: SchedulePhase,
    skeleton: &Skeleton,
    runs: std::ops::Range<u32>,
    ledger: &Ledger,
    running: &HashSet<String>,
    counts: &mut BTreeMap<Cell, u64>,
) -> String {
    let n_tasks = skeleton.tasks.len();
    let per = n_tasks.div_ceil(MAX_BARS).max(1);
    let n_bars = n_tasks.div_ceil(per);
    let per_trial_group = runs.len() as u64 * skeleton.spec.arms.len() as u64;
    let mut bars = vec![[0u64; 7]; n_bars];
    let mut add = |task: &str, run: u32, cell: Cell| {
        if runs.contains(&run)
            && let Some(&pos) = skeleton.task_pos.get(task)
        {
            bars[pos / per][cell.index()] += 1;
        }
    };
    for (id, t) in &ledger.trials {
        add(&t.task, t.run, ledger.cell(id, running.contains(id)));
    }
    for id in running.iter().filter(|id| !ledger.trials.contains_key(*id)) {
        if let Some((task, run)) = skeleton.split(id) {
            add(task, run, Cell::Running);
        }
    }
    let width = 640u32;
    let height = 4 + 10 * n_bars as u32;
    let mut out = format!(
        "<div class=\"scroll tall\"><svg class=\"grid-svg\" viewBox=\"0 0 {width} {height}\" role=\"img\" \
         aria-label=\"Blocks of phase {phase}\">"
    );
    for (b, bar) in bars.iter_mut().enumerate() {
        let first = b * per;
        let last = ((b + 1) * per).min(n_tasks) - 1;
        let total = (last - first + 1) as u64 * per_trial_group;
        let known: u64 = bar.iter().sum();
        bar[Cell::Pending.index()] += total.saturating_sub(known);
        let name = if first == last {
            skeleton.tasks[first].clone()
        } else {
            format!("{} … {}", skeleton.tasks[first], skeleton.tasks[last])
        };
        let y = 2 + 10 * b as u32;
        let _ = write!(
            out,
            "<text class=\"label small\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            LABEL - 6,
            y + 8,
            esc(&short(&name, 18))
        );
        let mut x = f64::from(LABEL);
        for c in Cell::ALL {
            let n = bar[c.index()];
            if n == 0 {
                continue;
            }
            *counts.entry(c).or_default() += n;
            let w = f64::from(width - LABEL) * n as f64 / total.max(1) as f64;
            let _ = write!(
                out,
                "<rect class=\"{}\" x=\"{x:.1}\" y=\"{y}\" width=\"{w:.1}\" height=\"8\"><title>{}: {n} {}</title></rect>",
                c.class(),
                esc(&name),
                c.label()
            );
            x += w;
        }
    }
    out.push_str("</svg></div>");
    out
}

fn short(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::*;
    use crate::dashboard::ledger::TrialCell;

    fn skeleton(tasks: usize, phase1: u32, phase2: u32) -> Skeleton {
        let mut text = format!(
            "id = \"c\"\nphase1_runs = {phase1}\nschedule_seed = 1\npairing = \"none\"\n\
             [defaults]\ntimeout_s = 10\nmax_turns = 10\n\
             [[arms]]\nid = \"arm-a\"\nprovider = \"pa\"\n[[arms]]\nid = \"arm-b\"\nprovider = \"pb\"\n\
             [driver]\nsim = {{ boot_s = 0.001, reset_s = 0.001, agent_s = [0.001, 0.001], \
             evaluate_s = 0.001, pass_rate = {{ arm-a = 0.5, arm-b = 0.5 }} }}\n[tasks]\nitems = [\n"
        );
        for i in 0..tasks {
            text.push_str(&format!("{{ id = \"TASK-{i:06}\" }},\n"));
        }
        text.push_str("]\n");
        let c = lanes_common::spec::load_str(&text, Path::new("c.toml"), Path::new(".")).unwrap();
        let mut spec = c.spec;
        spec.phase2_runs = phase2;
        let tasks: Vec<String> = c.tasks.iter().map(|t| t.id.to_string()).collect();
        let task_pos: HashMap<String, usize> = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i))
            .collect();
        Skeleton {
            spec,
            tasks,
            task_pos,
        }
    }

    /// Every trial of the schedule final, with a failed one now and then.
    fn all_final(s: &Skeleton) -> Ledger {
        let mut ledger = Ledger::default();
        for (i, task) in s.tasks.iter().enumerate() {
            for run in 0..s.spec.total_runs() {
                for arm in &s.spec.arms {
                    ledger.trials.insert(
                        format!("{task}.r{run}.{}", arm.id),
                        TrialCell {
                            cell: if i % 3 == 0 {
                                Cell::Failed
                            } else {
                                Cell::Passed
                            },
                            task: task.clone(),
                            run,
                            seqs: vec![0],
                        },
                    );
                }
            }
        }
        ledger
    }

    #[test]
    fn the_grid_stays_light_at_its_limits() {
        // The largest per-trial grid: 300 tasks x 1 run x 2 arms.
        let cells = skeleton(300, 1, 0);
        let html = render(&cells, &all_final(&cells), &HashSet::new());
        assert_eq!(html.matches("<rect class=\"c-").count(), 600 + 7);
        assert!(html.len() < 130_000, "{} bytes", html.len());
        // Bars past that: 6,000 tasks over two phases, 150 bars each.
        let bars = skeleton(6_000, 2, 1);
        let html = render(&bars, &all_final(&bars), &HashSet::new());
        assert_eq!(html.matches("<text class=\"label small\"").count(), 300);
        assert!(html.len() < 130_000, "{} bytes", html.len());
        // Every trial is counted once in the legend.
        let legend: u64 = html
            .split("data-count=")
            .skip(1)
            .map(|p| {
                p.split('>')
                    .nth(1)
                    .unwrap()
                    .split('<')
                    .next()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum();
        assert_eq!(legend, 6_000 * 3 * 2);
    }

    #[test]
    fn a_trial_id_splits_into_its_task_and_run() {
        let s = skeleton(2, 1, 0);
        assert_eq!(s.split("TASK-000001.r7.arm-b"), Some(("TASK-000001", 7)));
        assert_eq!(s.split("TASK-000001.r7.arm-c"), None);
        assert_eq!(s.split("TASK-000001.rx.arm-a"), None);
    }
}
