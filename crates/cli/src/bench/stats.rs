//! Latency samples and their percentiles (nearest rank over the sorted samples: a bench run
//! holds at most a few hundred thousand, so keeping them all is cheap and exact).

use std::time::Duration;

use serde::Serialize;

/// Latencies of one kind of request, in microseconds.
#[derive(Debug, Default, Clone)]
pub(crate) struct Latencies {
    micros: Vec<u64>,
}

/// The figures of one kind of request, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Summary {
    pub(crate) count: u64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
}

impl Latencies {
    pub(crate) fn record(&mut self, d: Duration) {
        self.micros
            .push(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    /// p50, p99 and max; all zero when nothing was recorded.
    pub(crate) fn summary(&self) -> Summary {
        let mut v = self.micros.clone();
        v.sort_unstable();
        let ms = |us: u64| us as f64 / 1000.0;
        Summary {
            count: v.len() as u64,
            p50_ms: ms(nearest_rank(&v, 50)),
            p99_ms: ms(nearest_rank(&v, 99)),
            max_ms: ms(v.last().copied().unwrap_or(0)),
        }
    }
}

/// The smallest sample with at least `pct` percent of the samples at or below it.
fn nearest_rank(sorted: &[u64], pct: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (pct * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_and_ordered() {
        let mut l = Latencies::default();
        for us in (1..=100).rev() {
            l.record(Duration::from_micros(us * 1000));
        }
        let s = l.summary();
        assert_eq!(s.count, 100);
        assert_eq!(s.p50_ms, 50.0);
        assert_eq!(s.p99_ms, 99.0);
        assert_eq!(s.max_ms, 100.0);

        let mut one = Latencies::default();
        one.record(Duration::from_micros(1500));
        let s = one.summary();
        assert_eq!((s.p50_ms, s.p99_ms, s.max_ms), (1.5, 1.5, 1.5));

        assert_eq!(Latencies::default().summary(), Summary::default());
    }
}
