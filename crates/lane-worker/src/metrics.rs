//! The worker's Prometheus metrics: entries waiting in the outbox (read from its directory
//! at each scrape), drivers started again on the same lane, and how long each lifecycle
//! phase took. No trial ids, tokens or lane names in labels.

use std::fmt::Write as _;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use lanes_common::row::PhaseWalls;

use crate::outbox::Outbox;

/// A lifecycle phase, as `lanes_phase_duration_seconds` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PhaseLabel {
    Admit,
    Boot,
    Reset,
    Gate,
    Agent,
    Evaluate,
    Publish,
}

impl PhaseLabel {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Admit => "admit",
            Self::Boot => "boot",
            Self::Reset => "reset",
            Self::Gate => "gate",
            Self::Agent => "agent",
            Self::Evaluate => "evaluate",
            Self::Publish => "publish",
        }
    }
}

impl EncodeLabelValue for PhaseLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: PhaseLabel,
}

/// Phase durations: 10 ms to ~12 hours.
fn phase_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 4.0, 16))
}

/// Every metric the worker exposes. Each is a handle, so clones count into the same ones.
#[derive(Debug, Clone)]
pub struct WorkerMetrics {
    driver_restarts: Counter,
    phase_duration: Family<PhaseLabels, Histogram, fn() -> Histogram>,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        Self {
            driver_restarts: Counter::default(),
            phase_duration: Family::new_with_constructor(phase_histogram),
        }
    }
}

impl WorkerMetrics {
    /// Adds every metric to `registry`; the outbox gauge reads `outbox` at each scrape.
    pub fn register(&self, registry: &mut Registry, outbox: Outbox) {
        registry.register(
            "lanes_driver_restarts",
            "Drivers started again on a lane that had already started the same driver (after it died or was killed)",
            self.driver_restarts.clone(),
        );
        registry.register(
            "lanes_phase_duration_seconds",
            "Wall time of each lifecycle phase of an attempt, observed when the attempt ends",
            self.phase_duration.clone(),
        );
        registry.register_collector(Box::new(OutboxPending(outbox)));
    }

    pub fn driver_restarted(&self) {
        self.driver_restarts.inc();
    }

    /// One sample per phase the attempt spent time in.
    pub fn observe_walls(&self, walls: &PhaseWalls) {
        for (phase, s) in [
            (PhaseLabel::Admit, walls.admit_s),
            (PhaseLabel::Boot, walls.boot_s),
            (PhaseLabel::Reset, walls.reset_s),
            (PhaseLabel::Gate, walls.gate_s),
            (PhaseLabel::Agent, walls.agent_s),
            (PhaseLabel::Evaluate, walls.evaluate_s),
            (PhaseLabel::Publish, walls.publish_s),
        ] {
            if s > 0.0 {
                self.phase_duration
                    .get_or_create(&PhaseLabels { phase })
                    .observe(s);
            }
        }
    }
}

/// `lanes_outbox_pending`: the outbox's entries on disk, counted when scraped, so it is
/// exact whatever wrote or removed them (replay at start included).
#[derive(Debug)]
struct OutboxPending(Outbox);

impl Collector for OutboxPending {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        // An unreadable directory leaves the gauge out rather than reporting a wrong 0.
        let Ok(n) = self.0.pending_count() else {
            return Ok(());
        };
        let gauge = ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX));
        let metric = encoder.encode_descriptor(
            "lanes_outbox_pending",
            "Outcomes written to the outbox and not yet acknowledged by the coordinator",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn walls_become_one_sample_per_phase_entered_and_the_outbox_is_counted_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open(dir.path()).unwrap();
        let metrics = WorkerMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry, outbox.clone());
        metrics.observe_walls(&PhaseWalls {
            admit_s: 0.5,
            agent_s: 3.0,
            publish_s: 0.02,
            ..PhaseWalls::default()
        });
        metrics.driver_restarted();
        let text = scrape(&registry);
        assert!(text.contains("lanes_driver_restarts_total 1\n"), "{text}");
        for phase in ["admit", "agent", "publish"] {
            assert!(
                text.contains(&format!(
                    "lanes_phase_duration_seconds_count{{phase=\"{phase}\"}} 1\n"
                )),
                "{phase}: {text}"
            );
        }
        assert!(!text.contains("phase=\"boot\""), "{text}");
        assert!(text.contains("lanes_outbox_pending 0\n"), "{text}");
        // Two entries on disk, plus what is not one: a temp file and the refused directory.
        std::fs::write(dir.path().join("c__t__a1.json"), "{}").unwrap();
        std::fs::write(dir.path().join("c__t__a2.json"), "{}").unwrap();
        std::fs::write(dir.path().join("c__t__a3.tmp"), "{}").unwrap();
        std::fs::create_dir(dir.path().join("refused")).unwrap();
        let text = scrape(&registry);
        assert!(text.contains("lanes_outbox_pending 2\n"), "{text}");
    }
}
