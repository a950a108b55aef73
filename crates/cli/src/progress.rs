//! The live progress view of `lanes run` on a terminal: overall and block bars, the counts
//! that matter (final, in flight, counted, excluded), spend and ETA, and one line per lane
//! with its trial and phase.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use lanes_common::proto as pb;
use lanes_coordinator::store::CampaignStatus;

/// What the view shows, from the store's status (`lanes run`) or the API's (`lanes watch`).
pub(crate) struct Numbers {
    total: u64,
    done: u64,
    counted: u64,
    excluded: u64,
    spend: f64,
    phase1_total: u64,
    phase1_final: u64,
    blocks_total: u64,
    blocks_complete: u64,
    /// (lane, token, phase) of each attempt in flight.
    lanes: Vec<(String, String, String)>,
}

impl From<&CampaignStatus> for Numbers {
    fn from(st: &CampaignStatus) -> Self {
        Self {
            total: st.trials_total,
            done: st.trials_final,
            counted: st.trials_counted,
            excluded: st.trials_excluded,
            spend: st.spend_usd,
            phase1_total: st.phase1_total,
            phase1_final: st.phase1_final,
            blocks_total: st.blocks_total,
            blocks_complete: st.blocks_complete,
            lanes: st
                .in_flight
                .iter()
                .map(|f| (f.lane.to_string(), f.token.to_string(), f.phase.to_string()))
                .collect(),
        }
    }
}

impl From<&pb::CampaignStatus> for Numbers {
    fn from(st: &pb::CampaignStatus) -> Self {
        Self {
            total: st.trials_total,
            done: st.trials_final,
            counted: st.trials_counted,
            excluded: st.trials_excluded,
            spend: st.spend_usd,
            phase1_total: st.phase1_total,
            phase1_final: st.phase1_final,
            blocks_total: st.blocks_total,
            blocks_complete: st.blocks_complete,
            lanes: st
                .in_flight
                .iter()
                .map(|f| {
                    let t = f
                        .token
                        .as_ref()
                        .map(|t| format!("{}#a{}", t.trial_id, t.attempt))
                        .unwrap_or_default();
                    let phase = pb::Phase::try_from(f.phase)
                        .map(|p| p.as_str_name().trim_start_matches("PHASE_").to_lowercase())
                        .unwrap_or_default();
                    (f.lane.clone(), t, phase)
                })
                .collect(),
        }
    }
}

/// The phase-2 line: a bar once phase 2 has trials, words while it has none.
fn phase2_template(total: u64) -> &'static str {
    if total == 0 {
        "phase 2 (no trials scheduled)"
    } else {
        "phase 2 [{bar:39}] {pos}/{len}"
    }
}

pub(crate) struct View {
    multi: MultiProgress,
    trials: ProgressBar,
    phase1: ProgressBar,
    phase2: ProgressBar,
    blocks: ProgressBar,
    lanes: Vec<ProgressBar>,
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}

impl View {
    pub(crate) fn new(lanes: u32) -> Self {
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
        let trials = multi.add(ProgressBar::new(0));
        trials.set_style(style("trials [{bar:40}] {pos}/{len} eta {eta}  {msg}"));
        let phase1 = multi.add(ProgressBar::new(0));
        phase1.set_style(style("phase 1 [{bar:39}] {pos}/{len}"));
        let phase2 = multi.add(ProgressBar::new(0));
        phase2.set_style(style(phase2_template(0)));
        let blocks = multi.add(ProgressBar::new(0));
        blocks.set_style(style("blocks [{bar:40}] {pos}/{len}"));
        let lanes = (0..lanes)
            .map(|_| {
                let b = multi.add(ProgressBar::new_spinner());
                b.set_style(
                    ProgressStyle::with_template("  {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                b
            })
            .collect();
        Self {
            multi,
            trials,
            phase1,
            phase2,
            blocks,
            lanes,
        }
    }

    pub(crate) fn update(&mut self, n: impl Into<Numbers>) {
        let n: Numbers = n.into();
        self.trials.set_length(n.total);
        self.trials.set_position(n.done);
        self.trials.set_message(format!(
            "{} counted, {} excluded, {} in flight, spend ${:.2}",
            n.counted,
            n.excluded,
            n.lanes.len(),
            n.spend
        ));
        self.phase1.set_length(n.phase1_total);
        self.phase1.set_position(n.phase1_final);
        let phase2_total = n.total.saturating_sub(n.phase1_total);
        // An empty bar of 0/0 would draw full, as if phase 2 were done.
        self.phase2.set_style(style(phase2_template(phase2_total)));
        self.phase2.set_length(phase2_total);
        self.phase2
            .set_position(n.done.saturating_sub(n.phase1_final));
        self.blocks.set_length(n.blocks_total);
        self.blocks.set_position(n.blocks_complete);
        let mut by_lane = n.lanes;
        by_lane.sort();
        by_lane.dedup_by(|a, b| a.0 == b.0);
        for (i, bar) in self.lanes.iter().enumerate() {
            match by_lane.get(i) {
                Some((lane, token, phase)) => {
                    bar.set_message(format!("{lane:<12} {token:<40} {phase}"))
                }
                None => bar.set_message("idle".to_owned()),
            }
        }
    }

    pub(crate) fn finish(self) {
        for b in &self.lanes {
            b.finish_and_clear();
        }
        self.blocks.finish();
        self.phase2.finish();
        self.phase1.finish();
        self.trials.finish();
        let _ = self.multi.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_2_without_trials_draws_no_bar() {
        assert!(!phase2_template(0).contains("{bar"));
        assert!(phase2_template(3).contains("{bar"));
    }
}
