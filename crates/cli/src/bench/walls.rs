//! What real workers' rows say about their attempts (`--workers`): how long admission took
//! (the `admit` wall: attempt record, driver start or reuse, identity check), and the
//! campaign's ideal length, the phases' work spread over every lane.

use std::time::Duration;

use serde::Serialize;
use tokio_stream::StreamExt;

use lanes_common::proto as pb;
use lanes_common::row::{PhaseWalls, Row};

use super::stats::{Latencies, Summary};

/// The figures read from a campaign's rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct WallFigures {
    /// The admit wall of every row that has one.
    pub(crate) admit: Summary,
    /// Every row's walls but admit, summed and divided by the lanes: how long the campaign
    /// would take if admission cost nothing and every lane were always busy.
    pub(crate) ideal_s: f64,
}

impl WallFigures {
    /// Folds rows' walls; `lanes` is at least 1.
    pub(crate) fn of<'a>(walls: impl IntoIterator<Item = &'a PhaseWalls>, lanes: u32) -> Self {
        let mut admit = Latencies::default();
        let mut work = 0.0;
        for w in walls {
            if w.admit_s.is_finite() && w.admit_s >= 0.0 {
                admit.record(Duration::from_secs_f64(w.admit_s));
            }
            work += w.boot_s + w.reset_s + w.gate_s + w.agent_s + w.evaluate_s + w.publish_s;
        }
        Self {
            admit: admit.summary(),
            ideal_s: work / f64::from(lanes.max(1)),
        }
    }
}

/// Reads every row of `campaign` and folds their walls.
pub(crate) async fn read(
    client: &mut crate::client::Client,
    campaign: &str,
    lanes: u32,
) -> anyhow::Result<WallFigures> {
    let mut stream = client
        .rows(pb::RowsRequest {
            id: campaign.to_owned(),
            from_seq: 0,
            follow: false,
        })
        .await?
        .into_inner();
    let mut walls = Vec::new();
    while let Some(row) = stream.next().await.transpose()? {
        let row = Row::try_from(row).map_err(|e| anyhow::anyhow!("a ledger row: {e}"))?;
        walls.push(row.walls);
    }
    Ok(WallFigures::of(&walls, lanes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admit_walls_are_summarized_and_the_rest_spread_over_the_lanes() {
        let walls: Vec<PhaseWalls> = (1..=100)
            .map(|i| PhaseWalls {
                admit_s: f64::from(i) / 1000.0,
                boot_s: 0.2,
                agent_s: 3.0,
                evaluate_s: 0.1,
                publish_s: 0.1,
                ..Default::default()
            })
            .collect();
        let f = WallFigures::of(&walls, 50);
        assert_eq!(f.admit.count, 100);
        assert_eq!((f.admit.p50_ms, f.admit.p99_ms), (50.0, 99.0));
        assert!(
            (f.ideal_s - 100.0 * 3.4 / 50.0).abs() < 1e-9,
            "{}",
            f.ideal_s
        );
    }
}
