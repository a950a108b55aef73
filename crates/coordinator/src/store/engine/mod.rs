//! The store's transitions, written once against [`Tx`]. Each public function is one atomic
//! operation: the backend runs it inside one transaction and commits only if it returns `Ok`.
//! This module holds what the operations share; each operation lives in its own file.

mod claim;
mod delete;
mod lease;
mod phase2;
mod record;
mod requeue;
mod status;
mod submit;

use claim::claim;
pub(crate) use delete::deletable;
use lease::{forfeit, reap, renew};
use record::{complete, release};
use requeue::requeue;
use status::{campaign, spec, status, stop};
/// A new campaign's meta, for tests that need one.
#[cfg(test)]
pub(crate) use submit::new_meta;
use submit::submit;

use lanes_common::ids::{ArmId, CampaignId, TrialId};
use lanes_common::policy::AdmissionInput;
use lanes_common::schedule::{
    SchedulePhase, Trial, from_position_key, position_key, slot_of, trial_at,
};
use lanes_common::spec::CampaignSpec;
use lanes_common::state::{CampaignState, StopMode, StopReason};
use lanes_common::utc::EpochMs;

use super::api::*;
use super::model::*;
use super::op::{Answer, CampaignOp};
use super::tx::{R, Tx};

/// Runs one operation of a campaign in `tx`. The one entry point of the engine: a backend
/// runs this inside a transaction and commits only if it answers `Ok`.
pub(crate) async fn run(tx: &mut impl Tx, op: &CampaignOp) -> R<Answer> {
    Ok(match op {
        CampaignOp::Submit { campaign, now } => {
            Answer::Submitted(submit(tx, campaign, *now).await?)
        }
        CampaignOp::Claim { campaign, req, now } => {
            Answer::Claim(claim(tx, campaign, req, *now).await?)
        }
        CampaignOp::Renew {
            campaign,
            tokens,
            now,
        } => Answer::Renewed(renew(tx, campaign, tokens, *now).await?),
        CampaignOp::Forfeit {
            campaign,
            worker,
            tokens,
            now,
        } => Answer::Forfeited(forfeit(tx, campaign, worker, tokens, *now).await?),
        CampaignOp::Complete {
            campaign,
            outcome,
            now,
        } => Answer::Ack(complete(tx, campaign, outcome, *now).await?),
        CampaignOp::Release {
            campaign,
            release: r,
            now,
        } => Answer::Ack(release(tx, campaign, r, *now).await?),
        CampaignOp::Reap { campaign, now } => Answer::Reaped(reap(tx, campaign, *now).await?),
        CampaignOp::Stop {
            campaign,
            mode,
            now,
        } => Answer::State(stop(tx, campaign, *mode, *now).await?),
        CampaignOp::Status { campaign, now } => Answer::Status(status(tx, campaign, *now).await?),
        CampaignOp::Requeue { campaign, req, now } => {
            Answer::Requeued(requeue(tx, campaign, req, *now).await?)
        }
        CampaignOp::Spec { campaign } => Answer::Spec(Box::new(spec(tx, campaign).await?)),
        CampaignOp::Campaign { campaign: c } => {
            Answer::Campaign(Box::new(self::campaign(tx, c).await?))
        }
    })
}

async fn meta_of(tx: &mut impl Tx, c: &CampaignId) -> R<Meta> {
    tx.meta()
        .await?
        .ok_or_else(|| StoreError::UnknownCampaign(c.clone()))
}

/// Writes the meta back only if it changed from `before` (a copy taken when it was read): an
/// operation that changes nothing (a claim that answers wait or done, a reap that takes
/// nothing) then commits no write at all, so it never conflicts with, or slows, the
/// operations that do. Compared as values, not as serialized bytes: the meta carries the spec
/// and capped lists, and serializing it twice per operation was a hot-path cost.
async fn put_meta_if_changed(tx: &mut impl Tx, meta: Meta, before: &Meta) -> R<()> {
    if meta != *before {
        tx.put_meta(meta).await?;
    }
    Ok(())
}

async fn emit(tx: &mut impl Tx, meta: &mut Meta, now: EpochMs, kind: EventKind) -> R<()> {
    let event = Event {
        seq: meta.next_event,
        at_ms: now,
        kind,
    };
    meta.next_event += 1;
    tx.put_event(&event).await
}

fn ttl_ms(meta: &Meta) -> i64 {
    i64::from(meta.spec.ops.lease_ttl_s) * 1000
}

fn provider_of<'a>(meta: &'a Meta, arm: &'a ArmId) -> &'a str {
    meta.spec
        .arm(arm)
        .map(|a| a.provider.as_str())
        .unwrap_or(arm.as_str())
}

/// The ready queue a single trial (fresh or a retry) waits in: its provider's.
fn trial_queue(meta: &Meta, trial: &Trial) -> Queue {
    Queue::provider(provider_of(meta, &trial.arm))
}

/// What the claim gates read of a campaign, for the claim and the status alike.
fn admission_input<'a>(
    meta: &'a Meta,
    providers: &'a [String],
    now: EpochMs,
) -> AdmissionInput<'a> {
    AdmissionInput {
        now_ms: now,
        state: meta.state,
        stop_reason: meta.stop_reason,
        cutoff_ms: meta.spec.ops.cutoff_utc,
        budget_cap_usd: meta.spec.ops.budget_cap_usd,
        spend_usd: meta.spend_usd,
        reserved_usd: meta.reserved_usd,
        quota_wait: meta.spec.ops.quota_wait,
        quota_stop: meta.spec.ops.quota_stop,
        quotas: &meta.quotas,
        paused_until: &meta.paused_until,
        providers,
        phase1_total: meta.phase1_total,
        phase1_final: meta.phase1_finals,
        has_phase2: meta.spec.phase2_runs > 0,
    }
}

fn trial_key(t: &Trial) -> u64 {
    position_key(t.phase, t.task_pos, t.run_index, t.arm_slot)
}

/// Resolves a trial id against the campaign, refusing ids outside its schedule.
async fn resolve(tx: &mut impl Tx, meta: &Meta, id: &TrialId) -> R<Option<Trial>> {
    let Ok((task, run, arm)) = TrialId::parse(id.as_str()) else {
        return Ok(None);
    };
    let Some(arm_pos) = meta.spec.arms.iter().position(|a| a.id == arm) else {
        return Ok(None);
    };
    if run >= meta.spec.total_runs() {
        return Ok(None);
    }
    let Some(tp) = tx.task_pos(&task).await? else {
        return Ok(None);
    };
    let n = meta.spec.arms.len() as u32;
    let task = tx.task(tp).await?;
    Ok(Some(trial_at(
        &meta.spec,
        meta.n_tasks as usize,
        tp,
        &task,
        run,
        slot_of(tp, run, arm_pos as u32, n),
    )))
}

async fn trial_by_key(tx: &mut impl Tx, meta: &Meta, key: u64) -> R<Trial> {
    let (_, tp, run, slot) = from_position_key(key);
    let task = tx.task(tp).await?;
    Ok(trial_at(
        &meta.spec,
        meta.n_tasks as usize,
        tp,
        &task,
        run,
        slot,
    ))
}

fn block_total(meta: &Meta, phase: SchedulePhase) -> u64 {
    let runs = if phase == SchedulePhase::First {
        meta.spec.phase1_runs
    } else {
        meta.spec.phase2_runs
    };
    u64::from(runs) * meta.spec.arms.len() as u64
}

fn blocks_total(spec: &CampaignSpec, n_tasks: u64) -> u64 {
    n_tasks * (1 + u64::from(spec.phase2_runs > 0))
}

async fn set_stopping(
    tx: &mut impl Tx,
    meta: &mut Meta,
    reason: StopReason,
    now: EpochMs,
) -> R<()> {
    if meta.state == CampaignState::Running {
        meta.state = CampaignState::Stopping;
        meta.stop_reason = Some(reason);
        meta.stop_mode.get_or_insert(StopMode::Drain);
        emit(tx, meta, now, EventKind::CampaignStopping { reason }).await?;
    }
    Ok(())
}

/// Moves a stopping campaign with nothing in flight to stopped, and a campaign whose trials are
/// all final to done.
async fn maybe_finish(tx: &mut impl Tx, meta: &mut Meta, now: EpochMs) -> R<()> {
    if meta.finals >= meta.trials_total && meta.state != CampaignState::Done {
        meta.state = CampaignState::Done;
        meta.stop_reason = None;
        emit(tx, meta, now, EventKind::CampaignDone).await?;
    } else if meta.state == CampaignState::Stopping && meta.leases_open == 0 {
        meta.state = CampaignState::Stopped;
        emit(
            tx,
            meta,
            now,
            EventKind::CampaignStopped {
                reason: meta.stop_reason,
            },
        )
        .await?;
    }
    Ok(())
}
