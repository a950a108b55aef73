//! stop, status, and the campaign as recorded.

use std::collections::BTreeSet;

use lanes_common::ids::{CampaignId, Token};
use lanes_common::policy::gates_in_force;
use lanes_common::spec::{Campaign, CampaignSpec};
use lanes_common::state::{CampaignState, StopMode, StopReason};
use lanes_common::utc::EpochMs;

use super::{admission_input, emit, maybe_finish, meta_of};
use crate::store::api::*;
use crate::store::tx::{R, Tx};

pub(crate) async fn stop(
    tx: &mut impl Tx,
    c: &CampaignId,
    mode: StopMode,
    now: EpochMs,
) -> R<CampaignState> {
    let mut meta = meta_of(tx, c).await?;
    if matches!(meta.state, CampaignState::Running | CampaignState::Stopping) {
        if meta.state == CampaignState::Running {
            meta.state = CampaignState::Stopping;
            meta.stop_reason = Some(StopReason::User);
            emit(
                tx,
                &mut meta,
                now,
                EventKind::CampaignStopping {
                    reason: StopReason::User,
                },
            )
            .await?;
        }
        // A cancel may follow a drain, never the other way round.
        if mode == StopMode::Cancel || meta.stop_mode.is_none() {
            meta.stop_mode = Some(mode);
        }
        if meta.stop_mode == Some(StopMode::Cancel) {
            for (tid, mut lease) in tx.leases().await? {
                if !lease.cancel_requested {
                    lease.cancel_requested = true;
                    tx.put_lease(&tid, &lease).await?;
                }
            }
        }
        maybe_finish(tx, &mut meta, now).await?;
    }
    let state = meta.state;
    tx.put_meta(meta).await?;
    Ok(state)
}

pub(crate) async fn status(tx: &mut impl Tx, c: &CampaignId, now: EpochMs) -> R<CampaignStatus> {
    let meta = meta_of(tx, c).await?;
    let providers: Vec<String> = meta
        .spec
        .arms
        .iter()
        .map(|a| a.provider.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let gates = gates_in_force(&admission_input(&meta, &providers, now));
    let mut in_flight = Vec::new();
    for (tid, lease) in tx.leases().await? {
        in_flight.push(InFlight {
            token: Token {
                trial_id: tid,
                attempt: lease.attempt,
            },
            lane: lease.lane,
            host: lease.host,
            phase: lease.phase,
            deadline_ms: lease.deadline_ms,
            hard_deadline_ms: lease.hard_deadline_ms,
        });
    }
    Ok(CampaignStatus {
        id: meta.spec.id.clone(),
        state: meta.state,
        stop_reason: meta.stop_reason,
        stop_mode: meta.stop_mode,
        spec_hash: meta.spec_hash.clone(),
        created_ms: meta.created_ms,
        amendments: meta.amendments.clone(),
        trials_total: meta.trials_total,
        trials_final: meta.finals,
        trials_counted: meta.counted,
        trials_excluded: meta.excluded,
        trials_not_started: meta.not_started,
        phase1_total: meta.phase1_total,
        phase1_final: meta.phase1_finals,
        rows_total: meta.next_seq,
        events_total: meta.next_event,
        rows_by_status: meta.rows_by_status.clone(),
        blocks_total: meta.blocks_total,
        blocks_complete: meta.blocks_complete,
        spend_usd: meta.spend_usd,
        reserved_usd: meta.reserved_usd,
        gates,
        in_flight,
    })
}

/// The campaign as recorded: its current spec and its tasks.
pub(crate) async fn campaign(tx: &mut impl Tx, c: &CampaignId) -> R<Campaign> {
    let meta = meta_of(tx, c).await?;
    Ok(Campaign {
        spec: CampaignSpec::clone(&meta.spec),
        tasks: tx.tasks().await?,
    })
}

/// The campaign's current spec, without its tasks.
pub(crate) async fn spec(tx: &mut impl Tx, c: &CampaignId) -> R<CampaignSpec> {
    Ok(CampaignSpec::clone(&meta_of(tx, c).await?.spec))
}
