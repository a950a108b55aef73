//! submit: a new campaign, or the resume or amendment of a recorded one.

use std::collections::BTreeMap;

use lanes_common::resume;
use lanes_common::schedule::{self, SchedulePhase, phase_of, position_key};
use lanes_common::spec::{Campaign, CampaignSpec, Pairing};
use lanes_common::spec_hash::spec_hash;
use lanes_common::state::{CampaignState, StopMode};
use lanes_common::utc::EpochMs;

use super::{blocks_total, emit, maybe_finish, resolve};
use crate::store::api::*;
use crate::store::model::*;
use crate::store::tx::{R, Tx};

/// Enqueues the fresh units of the trials `(task_pos, run)` in `runs` for tasks in `tasks`.
async fn enqueue_fresh(
    tx: &mut impl Tx,
    meta: &Meta,
    tasks: std::ops::Range<u32>,
    runs: std::ops::Range<u32>,
) -> R<()> {
    let n = meta.spec.arms.len() as u32;
    for tp in tasks {
        for run in runs.clone() {
            let phase = phase_of(&meta.spec, run);
            match meta.spec.pairing {
                Pairing::Group => {
                    tx.add_ready(&Queue::Groups, position_key(phase, tp, run, 0))
                        .await?
                }
                Pairing::None => {
                    for slot in 0..n {
                        let arm = &meta.spec.arms[schedule::arm_index(tp, run, slot, n) as usize];
                        tx.add_ready(
                            &Queue::provider(&arm.provider),
                            position_key(phase, tp, run, slot),
                        )
                        .await?;
                    }
                }
            }
        }
    }
    Ok(())
}

pub(crate) fn new_meta(campaign: &Campaign, hash: String, now: EpochMs) -> Meta {
    let spec = campaign.spec.clone();
    let n_tasks = campaign.tasks.len() as u64;
    Meta {
        trials_total: schedule::trial_count(&spec, campaign.tasks.len()),
        phase1_total: n_tasks * u64::from(spec.phase1_runs) * spec.arms.len() as u64,
        blocks_total: blocks_total(&spec, n_tasks),
        n_tasks: campaign.tasks.len() as u32,
        spec: Shared::new(spec),
        spec_hash: hash,
        amendments: Vec::new(),
        state: CampaignState::Running,
        stop_reason: None,
        stop_mode: None,
        next_seq: 0,
        next_event: 0,
        spend_usd: 0.0,
        reserved_usd: 0.0,
        leases_open: 0,
        finals: 0,
        phase1_finals: 0,
        counted: 0,
        excluded: 0,
        not_started: 0,
        blocks_complete: 0,
        rows_by_status: BTreeMap::new(),
        quotas: BTreeMap::new(),
        paused_until: BTreeMap::new(),
        arm_costs: Shared::default(),
        arm_walls: Shared::default(),
        finished_block_walls: Shared::default(),
        lanes_seen: Shared::default(),
        created_ms: now,
    }
}

/// Borrows the campaign: a retry after a conflict runs again on the same one, and a copy of
/// a million tasks per attempt was a large part of a 1M-trial submit's memory.
pub(crate) async fn submit(tx: &mut impl Tx, campaign: &Campaign, now: EpochMs) -> R<Submitted> {
    let hash = spec_hash(&campaign.spec, &campaign.tasks);
    let id = campaign.spec.id.clone();
    let Some(mut meta) = tx.meta().await? else {
        let meta = new_meta(campaign, hash.clone(), now);
        for (pos, task) in campaign.tasks.iter().enumerate() {
            tx.put_task(pos as u32, task).await?;
        }
        enqueue_fresh(tx, &meta, 0..meta.n_tasks, 0..meta.spec.total_runs()).await?;
        let trials = meta.trials_total;
        tx.put_meta(meta).await?;
        return Ok(Submitted {
            id,
            trials,
            spec_hash: hash,
            kind: SubmitKind::Created,
            operational_changes: Vec::new(),
        });
    };

    // A resume: compare with what is recorded, refusing drift. Only the committed task count
    // is recorded, whatever a backend may hold beyond it.
    let mut old_tasks_recorded = tx.tasks().await?;
    old_tasks_recorded.truncate(meta.n_tasks as usize);
    let old = Campaign {
        spec: CampaignSpec::clone(&meta.spec),
        tasks: old_tasks_recorded,
    };
    let mut recorded = Vec::new();
    for tid in tx.trial_ids().await? {
        if tx.trial(&tid).await?.is_some_and(|s| s.rows > 0)
            && let Some(t) = resolve(tx, &meta, &tid).await?
        {
            recorded.push(t);
        }
    }
    let plan = resume::compare(&old, campaign, &recorded).map_err(StoreError::Refused)?;

    let old_tasks = meta.n_tasks;
    let old_p1 = meta.spec.phase1_runs;
    let old_runs = meta.spec.total_runs();
    for (pos, task) in campaign.tasks.iter().enumerate().skip(old_tasks as usize) {
        tx.put_task(pos as u32, task).await?;
    }
    meta.spec = Shared::new(campaign.spec.clone());
    meta.n_tasks = campaign.tasks.len() as u32;
    // Runs that moved from phase 2 to phase 1 have no rows (resume checked): re-key them.
    if meta.spec.phase1_runs != old_p1 {
        for queue in tx.queues().await? {
            for tp in 0..old_tasks {
                for run in old_p1..meta.spec.phase1_runs.min(old_runs) {
                    for slot in 0..meta.spec.arms.len() as u32 {
                        if tx
                            .del_ready(&queue, position_key(SchedulePhase::Second, tp, run, slot))
                            .await?
                        {
                            tx.add_ready(&queue, position_key(SchedulePhase::First, tp, run, slot))
                                .await?;
                        }
                    }
                }
            }
        }
    }
    enqueue_fresh(tx, &meta, 0..old_tasks, old_runs..meta.spec.total_runs()).await?;
    enqueue_fresh(
        tx,
        &meta,
        old_tasks..meta.n_tasks,
        0..meta.spec.total_runs(),
    )
    .await?;
    let n_tasks = u64::from(meta.n_tasks);
    meta.trials_total = schedule::trial_count(&meta.spec, meta.n_tasks as usize);
    meta.phase1_total = n_tasks * u64::from(meta.spec.phase1_runs) * meta.spec.arms.len() as u64;
    meta.blocks_total = blocks_total(&meta.spec, n_tasks);
    let kind = if plan.amended {
        meta.amendments.push(Amendment {
            at_ms: now,
            spec_hash: hash.clone(),
            added_tasks: plan.added_tasks as u64,
            added_trials: plan.added_trials,
            requeue: None,
        });
        meta.spec_hash = hash.clone();
        SubmitKind::Amended
    } else {
        SubmitKind::Resumed
    };
    let was = meta.state;
    if was != CampaignState::Done || plan.amended {
        meta.state = CampaignState::Running;
        meta.stop_reason = None;
        // A cancel stop flagged the leases it found; a resume takes the cancel back, or the
        // next heartbeat of those lanes would still cancel a running campaign's attempts.
        if meta.stop_mode.take() == Some(StopMode::Cancel) {
            for (tid, mut lease) in tx.leases().await? {
                if lease.cancel_requested {
                    lease.cancel_requested = false;
                    tx.put_lease(&tid, &lease).await?;
                }
            }
        }
    }
    if was != meta.state {
        let spec_hash = meta.spec_hash.clone();
        emit(tx, &mut meta, now, EventKind::CampaignResumed { spec_hash }).await?;
    }
    maybe_finish(tx, &mut meta, now).await?;
    let (trials, spec_hash) = (meta.trials_total, meta.spec_hash.clone());
    tx.put_meta(meta).await?;
    Ok(Submitted {
        id,
        trials,
        spec_hash,
        kind,
        operational_changes: plan.operational_changes,
    })
}
