//! What `lanes bench` prints: every figure as text, or as one JSON object (`--json`), and one
//! summary line to paste into issues.

use serde::Serialize;

use super::ceiling::Ceiling;
use super::cleanup::Cleanup;
use super::stats::Summary;
use super::walls::WallFigures;
use super::workers::WorkerFigures;

/// The store the coordinator ran on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum StoreKind {
    Embedded,
    Redis,
}

impl StoreKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Embedded => "embedded",
            Self::Redis => "redis",
        }
    }
}

/// Why the lanes stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Ending {
    /// Every trial was final.
    Done,
    /// `--duration` ran out first.
    Duration,
    /// Ctrl-C.
    Interrupted,
    /// Every lane ended on an error (see `lane_errors`).
    LanesFailed,
}

/// The coordinator process's own figures, over the lanes' run.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct CoordinatorFigures {
    pub(crate) pid: u32,
    /// `--coordinator-threads`: its runtime's threads, if not its default.
    pub(crate) threads: Option<u16>,
    /// CPU time (user + system) while the lanes ran.
    pub(crate) cpu_s: f64,
    /// That CPU time as a percentage of one core over the same wall time.
    pub(crate) cpu_percent: f64,
    /// VmRSS when the lanes stopped, in MB (10^6 bytes).
    pub(crate) rss_mb: f64,
    /// VmHWM: the most it ever held, in MB.
    pub(crate) peak_rss_mb: f64,
}

/// Every figure of one run.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) store: StoreKind,
    pub(crate) lanes: u32,
    pub(crate) sessions: u32,
    /// `--workers`: real worker processes ran the lanes (no latencies are measured then).
    pub(crate) workers: Option<WorkerFigures>,
    pub(crate) trials: u32,
    pub(crate) campaign: String,
    pub(crate) ending: Ending,
    /// Seconds from the first work request to the last lane stopping.
    pub(crate) elapsed_s: f64,
    pub(crate) submit_s: f64,
    pub(crate) trials_final: u64,
    pub(crate) trials_counted: u64,
    /// Outcomes acknowledged.
    pub(crate) attempts: u64,
    pub(crate) attempts_per_s: f64,
    pub(crate) no_work: u64,
    pub(crate) renew_lost: u64,
    pub(crate) outcome_errors: u64,
    pub(crate) lane_errors: Vec<String>,
    pub(crate) claim: Summary,
    pub(crate) renew: Summary,
    pub(crate) outcome_ack: Summary,
    /// Real workers only: the rows' admit walls and the campaign's ideal length.
    pub(crate) walls: Option<WallFigures>,
    pub(crate) coordinator: CoordinatorFigures,
    /// Redis only: (`used_memory` after the submit − before) / trials.
    pub(crate) redis_memory_per_trial_bytes: Option<f64>,
    /// Redis only: what became of the bench campaign.
    pub(crate) campaign_cleanup: Option<Cleanup>,
    /// Absent when the run was interrupted before it was measured.
    pub(crate) ceiling: Option<Ceiling>,
    /// attempts/s as a percentage of the ceiling's ops/s.
    pub(crate) ratio_to_ceiling_percent: Option<f64>,
    pub(crate) summary: String,
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

impl CoordinatorFigures {
    pub(crate) fn new(pid: u32, cpu_s: f64, wall_s: f64, rss: u64, peak_rss: u64) -> Self {
        Self {
            pid,
            threads: None,
            cpu_s,
            cpu_percent: if wall_s > 0.0 {
                100.0 * cpu_s / wall_s
            } else {
                0.0
            },
            rss_mb: mb(rss),
            peak_rss_mb: mb(peak_rss),
        }
    }
}

impl Report {
    /// Fills in the ratio and the summary line from the other figures.
    pub(crate) fn finish(mut self) -> Self {
        self.ratio_to_ceiling_percent = self
            .ceiling
            .filter(|c| c.ops_per_s > 0.0)
            .map(|c| 100.0 * self.attempts_per_s / c.ops_per_s);
        self.summary = self.summary_line();
        self
    }

    fn summary_line(&self) -> String {
        let ceiling = match (self.ratio_to_ceiling_percent, self.ceiling) {
            // Small ratios keep a decimal: "0%" would say nothing.
            (Some(r), Some(c)) if r < 10.0 => {
                format!(" ({r:.1}% of ceiling {:.0}/s)", c.ops_per_s)
            }
            (Some(r), Some(c)) => format!(" ({r:.0}% of ceiling {:.0}/s)", c.ops_per_s),
            _ => String::new(),
        };
        let ending = match self.ending {
            Ending::Done => String::new(),
            Ending::Duration => format!(
                ", stopped at {}/{} trials final",
                self.trials_final, self.trials
            ),
            Ending::Interrupted => format!(
                ", interrupted at {}/{} trials final",
                self.trials_final, self.trials
            ),
            Ending::LanesFailed => format!(
                ", lanes failed at {}/{} trials final",
                self.trials_final, self.trials
            ),
        };
        let (lanes, claim) = match &self.workers {
            Some(w) => (
                format!("{} lanes in {} workers", self.lanes, w.count),
                String::new(),
            ),
            None => (
                format!("{} lanes", self.lanes),
                format!(", claim p99 {:.1} ms", self.claim.p99_ms),
            ),
        };
        let threads = match self.coordinator.threads {
            Some(1) => " (1 thread)".to_owned(),
            Some(n) => format!(" ({n} threads)"),
            None => String::new(),
        };
        format!(
            "lanes bench: {}, {lanes}, {} trials: {:.0} attempts/s{ceiling}{claim}, coordinator{threads} {:.0}% CPU, {:.0} MB RSS{ending}",
            self.store.as_str(),
            self.trials,
            self.attempts_per_s,
            self.coordinator.cpu_percent,
            self.coordinator.peak_rss_mb,
        )
    }

    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serializes")
    }

    pub(crate) fn to_text(&self) -> String {
        let lat = |s: &Summary, with_max: bool| {
            let max = if with_max {
                format!(", max {:.2} ms", s.max_ms)
            } else {
                String::new()
            };
            format!(
                "p50 {:.2} ms, p99 {:.2} ms{max} ({} samples)",
                s.p50_ms, s.p99_ms, s.count
            )
        };
        let c = &self.coordinator;
        let mut t = format!(
            "lanes bench: {} store, {} lanes in {} {}, {} trials (campaign {}, submitted in {:.2} s)\n",
            self.store.as_str(),
            self.lanes,
            self.sessions,
            match &self.workers {
                Some(_) => "lanes worker processes (sim driver)",
                None => "simulated sessions",
            },
            self.trials,
            self.campaign,
            self.submit_s
        );
        t += &format!(
            "  trials final      {}/{} ({} counted) in {:.2} s, {}\n",
            self.trials_final,
            self.trials,
            self.trials_counted,
            self.elapsed_s,
            match self.ending {
                Ending::Done => "all done",
                Ending::Duration => "stopped by --duration",
                Ending::Interrupted => "interrupted",
                Ending::LanesFailed => "every lane failed",
            }
        );
        t += &format!(
            "  attempts          {} ({:.1}/s); no-work answers {}, renewals lost {}, outcome errors {}\n",
            self.attempts, self.attempts_per_s, self.no_work, self.renew_lost, self.outcome_errors
        );
        match &self.workers {
            None => {
                t += &format!("  claim latency     {}\n", lat(&self.claim, true));
                t += &format!("  renew latency     {}\n", lat(&self.renew, false));
                t += &format!("  outcome ack       {}\n", lat(&self.outcome_ack, false));
            }
            Some(w) => {
                t += &format!(
                    "  workers           {} processes, {:.1}% of one core together ({:.2} s CPU, their driver children aside), largest peak RSS {:.1} MB\n",
                    w.count, w.cpu_percent, w.cpu_s, w.peak_rss_mb
                );
                if let Some(walls) = &self.walls {
                    t += &format!("  admit wall        {}\n", lat(&walls.admit, true));
                    t += &format!("    first attempts  {}\n", lat(&walls.admit_first, true));
                    t += &format!("    later attempts  {}\n", lat(&walls.admit_later, true));
                    t += &format!(
                        "  campaign          {:.2} s against an ideal {:.2} s (the rows' other walls over {} lanes): {:.2}×\n",
                        self.elapsed_s,
                        walls.ideal_s,
                        self.lanes,
                        self.elapsed_s / walls.ideal_s.max(f64::MIN_POSITIVE)
                    );
                }
            }
        }
        t += &format!(
            "  coordinator       {:.1}% of one core ({:.2} s CPU), peak RSS {:.1} MB (at the end {:.1} MB), pid {}{}\n",
            c.cpu_percent,
            c.cpu_s,
            c.peak_rss_mb,
            c.rss_mb,
            c.pid,
            match c.threads {
                Some(n) => format!(", {n} runtime thread(s)"),
                None => String::new(),
            }
        );
        if let Some(m) = self.redis_memory_per_trial_bytes {
            t += &format!(
                "  redis memory      {m:.0} bytes per trial (used_memory over the submit)\n"
            );
        }
        if let Some(c) = &self.campaign_cleanup {
            t += &format!("  bench campaign    {}\n", c.describe(&self.campaign));
        }
        if let Some(ceil) = &self.ceiling {
            t += &format!(
                "  ceiling           {}, {} connection(s), {:.1} s: {:.0} ops/s; ours is {:.1}% of it\n",
                ceil.kind.describe(),
                ceil.connections,
                ceil.duration_s,
                ceil.ops_per_s,
                self.ratio_to_ceiling_percent.unwrap_or(0.0)
            );
        }
        for e in &self.lane_errors {
            t += &format!("  lane error        {e}\n");
        }
        t += &self.summary;
        t.push('\n');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::ceiling::CeilingKind;

    fn report() -> Report {
        Report {
            store: StoreKind::Embedded,
            lanes: 64,
            sessions: 4,
            workers: None,
            trials: 20000,
            campaign: "bench-x".into(),
            ending: Ending::Done,
            elapsed_s: 24.6,
            submit_s: 0.5,
            trials_final: 20000,
            trials_counted: 20000,
            attempts: 20000,
            attempts_per_s: 812.0,
            no_work: 0,
            renew_lost: 0,
            outcome_errors: 0,
            lane_errors: Vec::new(),
            claim: Summary {
                count: 20000,
                p50_ms: 3.0,
                p99_ms: 12.3,
                max_ms: 40.0,
            },
            renew: Summary::default(),
            outcome_ack: Summary::default(),
            walls: None,
            coordinator: CoordinatorFigures::new(1, 9.5, 25.0, 58_000_000, 61_000_000),
            redis_memory_per_trial_bytes: None,
            campaign_cleanup: None,
            ceiling: Some(Ceiling {
                kind: CeilingKind::RedbDurableCommit,
                connections: 1,
                duration_s: 2.0,
                ops: 3960,
                ops_per_s: 1980.0,
            }),
            ratio_to_ceiling_percent: None,
            summary: String::new(),
        }
        .finish()
    }

    #[test]
    fn the_summary_line_carries_the_headline_figures() {
        assert_eq!(
            report().summary,
            "lanes bench: embedded, 64 lanes, 20000 trials: 812 attempts/s (41% of ceiling \
             1980/s), claim p99 12.3 ms, coordinator 38% CPU, 61 MB RSS"
        );
    }

    #[test]
    fn a_run_of_real_workers_says_so_and_claims_no_latency() {
        let mut r = report();
        r.claim = Summary::default();
        r.sessions = 2;
        r.workers = Some(WorkerFigures {
            count: 2,
            pids: vec![10, 11],
            cpu_s: 12.0,
            cpu_percent: 48.8,
            peak_rss_mb: 21.0,
        });
        let r = r.finish();
        assert_eq!(
            r.summary,
            "lanes bench: embedded, 64 lanes in 2 workers, 20000 trials: 812 attempts/s (41% of \
             ceiling 1980/s), coordinator 38% CPU, 61 MB RSS"
        );
        let text = r.to_text();
        assert!(
            text.contains("64 lanes in 2 lanes worker processes (sim driver)"),
            "{text}"
        );
        assert!(
            text.contains("  workers           2 processes, 48.8% of one core"),
            "{text}"
        );
        assert!(!text.contains("claim latency"), "{text}");
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["workers"]["count"], 2);
    }

    #[test]
    fn a_coordinator_on_given_threads_says_how_many() {
        let mut r = report();
        r.coordinator.threads = Some(1);
        let r = r.finish();
        assert!(
            r.summary.contains(", coordinator (1 thread) 38% CPU,"),
            "{}",
            r.summary
        );
        assert!(r.to_text().contains(", 1 runtime thread(s)\n"));
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["coordinator"]["threads"], 1);
        // Its default: said nowhere but as null in the JSON.
        let r = report().finish();
        assert!(!r.summary.contains("thread"), "{}", r.summary);
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert!(v["coordinator"]["threads"].is_null());
    }

    #[test]
    fn a_small_ratio_keeps_a_decimal() {
        let mut r = report();
        r.attempts_per_s = 57.0;
        let r = r.finish();
        assert!(
            r.summary
                .contains(": 57 attempts/s (2.9% of ceiling 1980/s)"),
            "{}",
            r.summary
        );
    }

    #[test]
    fn an_unfinished_run_says_so_and_json_has_every_figure() {
        let mut r = report();
        r.ending = Ending::Duration;
        r.trials_final = 8123;
        let r = r.finish();
        assert!(r.summary.ends_with(", stopped at 8123/20000 trials final"));
        let v: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["ending"], "duration");
        assert_eq!(v["store"], "embedded");
        assert_eq!(v["ceiling"]["kind"], "redb_durable_commit");
        assert_eq!(v["claim"]["p99_ms"], 12.3);
        assert!(v["ratio_to_ceiling_percent"].as_f64().unwrap() > 40.0);
        assert!(v["redis_memory_per_trial_bytes"].is_null());
        assert!(
            r.to_text()
                .contains("claim latency     p50 3.00 ms, p99 12.30 ms")
        );
    }
}
