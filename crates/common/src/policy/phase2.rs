//! The phase-2 rule: once phase 1 is final, each phase-2
//! block starts only if every provider it needs is "go" on quota and the block fits before the
//! cutoff. A refused block's trials get `not_started` rows.

use crate::row::Phase2Refusal;
use crate::stats::median;
use crate::utc::EpochMs;

use super::admission::QuotaGate;

/// What the rule reads for one block.
#[derive(Debug, Clone)]
pub struct Phase2Input<'a> {
    pub now_ms: EpochMs,
    pub cutoff_ms: Option<EpochMs>,
    /// For each finished block, the sum of its rows' `wall_s`.
    pub finished_block_walls: &'a [f64],
    pub active_lanes: u32,
    /// The quota gate of each provider the block needs.
    pub quotas: &'a [(String, QuotaGate)],
}

/// The block's estimate in seconds: the median of finished blocks' summed wall time.
pub fn block_estimate_s(finished_block_walls: &[f64]) -> Option<f64> {
    median(finished_block_walls)
}

/// Decides whether a phase-2 block may start.
pub fn phase2_block(input: &Phase2Input<'_>) -> Result<(), Phase2Refusal> {
    if let Some((p, _)) = input.quotas.iter().find(|(_, g)| *g != QuotaGate::Go) {
        return Err(Phase2Refusal::Quota(p.clone()));
    }
    if let (Some(cutoff), Some(estimate)) = (
        input.cutoff_ms,
        block_estimate_s(input.finished_block_walls),
    ) {
        let lanes = f64::from(input.active_lanes.max(1));
        let end = input.now_ms as f64 + estimate * 1000.0 / lanes;
        if end > cutoff as f64 {
            return Err(Phase2Refusal::Cutoff);
        }
    } else if input.cutoff_ms.is_some_and(|c| input.now_ms > c) {
        return Err(Phase2Refusal::Cutoff);
    }
    Ok(())
}
