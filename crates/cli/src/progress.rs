//! The live progress view of `lanes run` on a terminal: overall and block bars, the counts
//! that matter (final, in flight, counted, excluded), spend and ETA, and one line per lane
//! with its trial and phase.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use lanes_coordinator::store::CampaignStatus;

pub(crate) struct View {
    multi: MultiProgress,
    trials: ProgressBar,
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
            blocks,
            lanes,
        }
    }

    pub(crate) fn update(&mut self, st: &CampaignStatus) {
        self.trials.set_length(st.trials_total);
        self.trials.set_position(st.trials_final);
        self.trials.set_message(format!(
            "{} counted, {} excluded, {} in flight, spend ${:.2}",
            st.trials_counted,
            st.trials_excluded,
            st.in_flight.len(),
            st.spend_usd
        ));
        self.blocks.set_length(st.blocks_total);
        self.blocks.set_position(st.blocks_complete);
        let mut by_lane: Vec<_> = st.in_flight.iter().collect();
        by_lane.sort_by(|a, b| a.lane.cmp(&b.lane).then(a.token.cmp(&b.token)));
        by_lane.dedup_by(|a, b| a.lane == b.lane);
        for (i, bar) in self.lanes.iter().enumerate() {
            match by_lane.get(i) {
                Some(f) => bar.set_message(format!(
                    "{:<10} {:<40} {}",
                    f.lane,
                    f.token.to_string(),
                    f.phase
                )),
                None => bar.set_message("idle".to_owned()),
            }
        }
    }

    pub(crate) fn finish(self) {
        for b in &self.lanes {
            b.finish_and_clear();
        }
        self.blocks.finish();
        self.trials.finish();
        let _ = self.multi.clear();
    }
}
