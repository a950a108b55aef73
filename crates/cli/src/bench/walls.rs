//! What real workers' rows say about their attempts (`--workers`): how long admission took
//! (the `admit` wall: attempt record, driver start or reuse, identity check), split by each
//! lane's first attempt (its driver made ready) and its later ones (the driver reused), and
//! the campaign's ideal length, the phases' work spread over every lane.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;
use tokio_stream::StreamExt;

use lanes_common::proto as pb;
use lanes_common::row::{PhaseWalls, Row};
use lanes_common::utc::UtcTime;

use super::stats::{Latencies, Summary};

/// The figures read from a campaign's rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct WallFigures {
    /// The admit wall of every row that has one.
    pub(crate) admit: Summary,
    /// The same, of each lane's first attempt only, and of its later ones.
    pub(crate) admit_first: Summary,
    pub(crate) admit_later: Summary,
    /// Every row's walls but admit, summed and divided by the lanes: how long the campaign
    /// would take if admission cost nothing and every lane were always busy.
    pub(crate) ideal_s: f64,
}

/// What one row contributes: where and when its attempt ran, and its walls.
#[derive(Debug, Clone)]
pub(crate) struct AttemptWalls {
    /// The worker and the lane (lane names repeat across workers).
    pub(crate) lane: (String, String),
    pub(crate) started_utc: Option<UtcTime>,
    pub(crate) walls: PhaseWalls,
}

impl WallFigures {
    /// Folds rows' walls; `lanes` is at least 1.
    pub(crate) fn of(rows: &[AttemptWalls], lanes: u32) -> Self {
        let (mut admit, mut first, mut later) = (
            Latencies::default(),
            Latencies::default(),
            Latencies::default(),
        );
        let mut work = 0.0;
        let mut by_lane: BTreeMap<&(String, String), Vec<&AttemptWalls>> = BTreeMap::new();
        for r in rows {
            by_lane.entry(&r.lane).or_default().push(r);
        }
        for attempts in by_lane.values_mut() {
            attempts.sort_by_key(|a| a.started_utc.as_ref().map(UtcTime::epoch_ms));
            for (i, r) in attempts.iter().enumerate() {
                let w = &r.walls;
                if w.admit_s.is_finite() && w.admit_s >= 0.0 {
                    let d = Duration::from_secs_f64(w.admit_s);
                    admit.record(d);
                    if i == 0 {
                        first.record(d);
                    } else {
                        later.record(d);
                    }
                }
                work += w.boot_s + w.reset_s + w.gate_s + w.agent_s + w.evaluate_s + w.publish_s;
            }
        }
        Self {
            admit: admit.summary(),
            admit_first: first.summary(),
            admit_later: later.summary(),
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
    let mut rows = Vec::new();
    while let Some(row) = stream.next().await.transpose()? {
        let row = Row::try_from(row).map_err(|e| anyhow::anyhow!("a ledger row: {e}"))?;
        rows.push(AttemptWalls {
            lane: (
                row.worker.unwrap_or_default(),
                row.lane.map(String::from).unwrap_or_default(),
            ),
            started_utc: row.record.started_utc,
            walls: row.result.walls,
        });
    }
    Ok(WallFigures::of(&rows, lanes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admit_walls_are_summarized_split_by_first_attempt_and_the_rest_spread() {
        // 50 lanes with two attempts each: the first at 2x ms, the second at 1 ms.
        let rows: Vec<AttemptWalls> = (1..=50)
            .flat_map(|i: u32| {
                let walls = |admit_ms: u32| PhaseWalls {
                    admit_s: f64::from(admit_ms) / 1000.0,
                    boot_s: 0.2,
                    agent_s: 3.0,
                    evaluate_s: 0.1,
                    publish_s: 0.1,
                    ..Default::default()
                };
                let lane = (format!("w{}", i % 2), format!("l{i}"));
                // Listed later-first: the split goes by start time, not by order.
                [
                    AttemptWalls {
                        lane: lane.clone(),
                        started_utc: "2026-12-04T10:00:05.000Z".parse().ok(),
                        walls: walls(1),
                    },
                    AttemptWalls {
                        lane,
                        started_utc: "2026-12-04T10:00:00.000Z".parse().ok(),
                        walls: walls(2 * i),
                    },
                ]
            })
            .collect();
        let f = WallFigures::of(&rows, 50);
        assert_eq!(f.admit.count, 100);
        assert_eq!((f.admit_first.count, f.admit_later.count), (50, 50));
        assert_eq!((f.admit_first.p50_ms, f.admit_first.max_ms), (50.0, 100.0));
        assert_eq!((f.admit_later.p50_ms, f.admit_later.max_ms), (1.0, 1.0));
        assert!(
            (f.ideal_s - 100.0 * 3.4 / 50.0).abs() < 1e-9,
            "{}",
            f.ideal_s
        );
    }
}
