//! The store's transitions, written once against [`Tx`]. Each public function is one atomic
//! operation: the backend runs it inside one transaction and commits only if it returns `Ok`.

use std::collections::{BTreeMap, BTreeSet};

use lanes_common::ids::{CampaignId, Token, TrialId};
use lanes_common::policy::admission::{cutoff_admits, pause_until, wall_estimate_s};
use lanes_common::policy::gates::{BudgetGate, GateVerdict, QuotaGate, budget_admits, quota_gate};
use lanes_common::policy::lease::hard_deadlines_ms;
use lanes_common::policy::{
    Decision, GateInput, NewResult, NoWorkReason, Phase2Input, Placement, ProviderGate, claim_gate,
    decide, phase2_block,
};
use lanes_common::resume;
use lanes_common::row::{
    ExcludedReason, FailureKind, Outcome, Phase, Phase2Refusal, Row, Status, StoreFields,
};
use lanes_common::schedule::{
    self, Trial, from_position_key, phase_of, position_key, slot_of, trial_at,
};
use lanes_common::spec::{Campaign, Pairing};
use lanes_common::spec_hash::spec_hash;
use lanes_common::state::{CampaignState, StopMode, StopReason};
use lanes_common::stats::median;
use lanes_common::utc::{EpochMs, format_rfc3339};

use super::api::*;
use super::model::*;
use super::tx::{R, Tx};

/// How many entries of each queue one claim looks at before giving up on placement filters.
const SCAN: usize = 64;
/// Due leases one reap pass takes; the reaper runs another pass while a pass was full.
const REAP_BATCH: usize = 1024;

async fn meta_of(tx: &mut impl Tx, c: &CampaignId) -> R<Meta> {
    tx.meta()
        .await?
        .ok_or_else(|| StoreError::UnknownCampaign(c.clone()))
}

/// The meta as last read, to write it back only if an operation changed it.
fn snapshot(meta: &Meta) -> R<Vec<u8>> {
    serde_json::to_vec(meta).map_err(|e| StoreError::Backend(e.to_string()))
}

/// Writes the meta back only if it changed: an operation that changes nothing (a claim that
/// answers wait or done, a reap that takes nothing) then commits no write at all, so it never
/// conflicts with, or slows, the operations that do.
async fn put_meta_if_changed(tx: &mut impl Tx, meta: &Meta, before: &[u8]) -> R<()> {
    if snapshot(meta)? != before {
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

fn provider_of<'a>(meta: &'a Meta, arm: &'a lanes_common::ids::ArmId) -> &'a str {
    meta.spec
        .arm(arm)
        .map(|a| a.provider.as_str())
        .unwrap_or(arm.as_str())
}

fn trial_key(t: &Trial) -> u64 {
    position_key(t.phase, t.task_pos, t.run_index, t.arm_slot)
}

/// Resolves a trial id against the campaign, refusing ids outside its schedule.
async fn resolve(tx: &mut impl Tx, meta: &Meta, id: &str) -> R<Option<Trial>> {
    let Ok((task, run, arm)) = TrialId::parse(id) else {
        return Ok(None);
    };
    let Some(arm_pos) = meta.spec.arms.iter().position(|a| a.id == arm) else {
        return Ok(None);
    };
    if run >= meta.spec.total_runs() {
        return Ok(None);
    }
    let Some(tp) = tx.task_pos(task.as_str()).await? else {
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

fn block_total(meta: &Meta, phase: u8) -> u64 {
    let runs = if phase == 1 {
        meta.spec.phase1_runs
    } else {
        meta.spec.phase2_runs
    };
    u64::from(runs) * meta.spec.arms.len() as u64
}

fn blocks_total(spec: &lanes_common::spec::CampaignSpec, n_tasks: u64) -> u64 {
    n_tasks * (1 + u64::from(spec.phase2_runs > 0))
}

// ---------------------------------------------------------------------------------------------
// submit

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
                    tx.add_ready(GROUP_QUEUE, position_key(phase, tp, run, 0), UNIT_GROUP)
                        .await?
                }
                Pairing::None => {
                    for slot in 0..n {
                        let arm = &meta.spec.arms[schedule::arm_index(tp, run, slot, n) as usize];
                        tx.add_ready(
                            &provider_queue(&arm.provider),
                            position_key(phase, tp, run, slot),
                            UNIT_TRIAL,
                        )
                        .await?;
                    }
                }
            }
        }
    }
    Ok(())
}

fn new_meta(campaign: &Campaign, hash: String, now: EpochMs) -> Meta {
    let spec = campaign.spec.clone();
    let n_tasks = campaign.tasks.len() as u64;
    Meta {
        trials_total: schedule::trial_count(&spec, campaign.tasks.len()),
        phase1_total: n_tasks * u64::from(spec.phase1_runs) * spec.arms.len() as u64,
        blocks_total: blocks_total(&spec, n_tasks),
        n_tasks: campaign.tasks.len() as u32,
        spec,
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
        arm_costs: BTreeMap::new(),
        arm_walls: BTreeMap::new(),
        finished_block_walls: Vec::new(),
        lanes_seen: BTreeMap::new(),
        created_ms: now,
    }
}

pub(crate) async fn submit(tx: &mut impl Tx, campaign: Campaign, now: EpochMs) -> R<Submitted> {
    let hash = spec_hash(&campaign.spec, &campaign.tasks);
    let id = campaign.spec.id.clone();
    let Some(mut meta) = tx.meta().await? else {
        let meta = new_meta(&campaign, hash.clone(), now);
        for (pos, task) in campaign.tasks.iter().enumerate() {
            tx.put_task(pos as u32, task).await?;
        }
        enqueue_fresh(tx, &meta, 0..meta.n_tasks, 0..meta.spec.total_runs()).await?;
        tx.put_meta(&meta).await?;
        return Ok(Submitted {
            id,
            trials: meta.trials_total,
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
        spec: meta.spec.clone(),
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
    let plan = resume::compare(&old, &campaign, &recorded).map_err(StoreError::Refused)?;

    let old_tasks = meta.n_tasks;
    let old_p1 = meta.spec.phase1_runs;
    let old_runs = meta.spec.total_runs();
    for (pos, task) in campaign.tasks.iter().enumerate().skip(old_tasks as usize) {
        tx.put_task(pos as u32, task).await?;
    }
    meta.spec = campaign.spec.clone();
    meta.n_tasks = campaign.tasks.len() as u32;
    // Runs that moved from phase 2 to phase 1 have no rows (resume checked): re-key them.
    if meta.spec.phase1_runs != old_p1 {
        for queue in tx.queues().await? {
            for tp in 0..old_tasks {
                for run in old_p1..meta.spec.phase1_runs.min(old_runs) {
                    for slot in 0..meta.spec.arms.len() as u32 {
                        if tx.del_ready(&queue, position_key(2, tp, run, slot)).await? {
                            let unit = if queue == GROUP_QUEUE {
                                UNIT_GROUP
                            } else {
                                UNIT_TRIAL
                            };
                            tx.add_ready(&queue, position_key(1, tp, run, slot), unit)
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
    tx.put_meta(&meta).await?;
    Ok(Submitted {
        id,
        trials: meta.trials_total,
        spec_hash: meta.spec_hash.clone(),
        kind,
        operational_changes: plan.operational_changes,
    })
}

// ---------------------------------------------------------------------------------------------
// claim

/// The reservation a claim makes for a trial: its `max_cost_usd` guard when it has one (the
/// most the driver lets it spend), else the median cost of its arm's counted rows, or the
/// arm's `expected_cost_usd` before it has any.
fn reservation(meta: &Meta, trial: &Trial) -> f64 {
    trial
        .max_cost_usd
        .or_else(|| meta.arm_costs.get(&trial.arm).and_then(|c| median(c)))
        .or_else(|| meta.spec.arm(&trial.arm).and_then(|a| a.expected_cost_usd))
        .unwrap_or(0.0)
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

async fn promote_delayed(tx: &mut impl Tx, meta: &Meta, now: EpochMs) -> R<()> {
    loop {
        let due = tx.delayed_due(now, 256).await?;
        if due.is_empty() {
            return Ok(());
        }
        for (at, tid) in due {
            tx.del_delayed(at, &tid).await?;
            let Some(mut ts) = tx.trial(&tid).await? else {
                continue;
            };
            let Some(q) = ts.queued.as_mut() else {
                continue;
            };
            if q.delayed_until != Some(at) {
                continue;
            }
            q.delayed_until = None;
            let trial = resolve(tx, meta, &tid).await?.ok_or_else(|| {
                StoreError::Corrupt(format!("delayed trial {tid} not in schedule"))
            })?;
            tx.add_ready(
                &provider_queue(provider_of(meta, &trial.arm)),
                trial_key(&trial),
                UNIT_TRIAL,
            )
            .await?;
            tx.put_trial(&tid, &ts).await?;
        }
    }
}

/// A candidate unit from one queue.
struct Candidate {
    queue: String,
    key: u64,
    unit: u8,
}

/// Applies the phase-2 rule to a block the first time a claim reaches it. Returns whether the
/// block may start; a refused block gets its `not_started` rows here.
async fn phase2_allows(tx: &mut impl Tx, meta: &mut Meta, task_pos: u32, now: EpochMs) -> R<bool> {
    let task = tx.task(task_pos).await?;
    let block = schedule::block_name(2, &task.id);
    let mut state = tx.block(&block).await?;
    match &state.phase2 {
        Some(None) => return Ok(true),
        Some(Some(refused)) => {
            // Refused before: trials an amendment added since get their rows now, once (the
            // rest are final already), so that no claim meets their entries again.
            let why = match refused.parse::<ExcludedReason>() {
                Ok(ExcludedReason::Phase2Refused(why)) => why,
                _ => {
                    return Err(StoreError::Corrupt(format!(
                        "block {block} has refusal {refused:?}"
                    )));
                }
            };
            refuse_block(tx, meta, task_pos, why, now).await?;
            return Ok(false);
        }
        None => {}
    }
    let providers: BTreeSet<&str> = meta.spec.arms.iter().map(|a| a.provider.as_str()).collect();
    let quotas: Vec<(String, QuotaGate)> = providers
        .into_iter()
        .map(|p| {
            (
                p.to_owned(),
                quota_gate(
                    meta.quotas.get(p),
                    meta.spec.ops.quota_wait,
                    meta.spec.ops.quota_stop,
                    now,
                ),
            )
        })
        .collect();
    let active = meta
        .lanes_seen
        .values()
        .filter(|&&t| now - t <= 3 * ttl_ms(meta))
        .count()
        .max(1) as u32;
    let verdict = phase2_block(&Phase2Input {
        now_ms: now,
        cutoff_ms: meta.spec.ops.cutoff_utc,
        finished_block_walls: &meta.finished_block_walls,
        active_lanes: active,
        quotas: &quotas,
    });
    match verdict {
        Ok(()) => {
            state.phase2 = Some(None);
            tx.put_block(&block, &state).await?;
            Ok(true)
        }
        Err(why) => {
            state.phase2 = Some(Some(ExcludedReason::Phase2Refused(why.clone()).to_string()));
            tx.put_block(&block, &state).await?;
            refuse_block(tx, meta, task_pos, why, now).await?;
            Ok(false)
        }
    }
}

async fn refuse_block(
    tx: &mut impl Tx,
    meta: &mut Meta,
    task_pos: u32,
    why: Phase2Refusal,
    now: EpochMs,
) -> R<()> {
    let n = meta.spec.arms.len() as u32;
    let task = tx.task(task_pos).await?;
    for run in meta.spec.phase1_runs..meta.spec.total_runs() {
        tx.del_ready(GROUP_QUEUE, position_key(2, task_pos, run, 0))
            .await?;
        for slot in 0..n {
            let trial = trial_at(
                &meta.spec,
                meta.n_tasks as usize,
                task_pos,
                &task,
                run,
                slot,
            );
            let tid = trial.trial_id.to_string();
            // The entry goes whatever the trial's state, so a claim never meets it again.
            tx.del_ready(
                &provider_queue(provider_of(meta, &trial.arm)),
                trial_key(&trial),
            )
            .await?;
            let mut ts = tx.trial(&tid).await?.unwrap_or_default();
            if ts.final_mark.is_some() || tx.lease(&tid).await?.is_some() {
                continue;
            }
            dequeue(tx, &mut ts, &trial, meta).await?;
            let reason = ExcludedReason::Phase2Refused(why.clone());
            let row = Row::bare(
                &meta.spec.id,
                &trial,
                0,
                Status::NotStarted,
                None,
                StoreFields {
                    seq: meta.next_seq,
                    spec_hash: meta.spec_hash.clone(),
                    is_final: true,
                    excluded_reason: Some(reason.clone()),
                    written_utc: format_rfc3339(now),
                    ..StoreFields::default()
                },
            );
            append_row(tx, meta, &row).await?;
            ts.history.add_row(&row, true);
            ts.rows += 1;
            meta.not_started += 1;
            mark_final(
                tx,
                meta,
                &trial,
                &mut ts,
                FinalMark {
                    counted: false,
                    excluded_reason: Some(reason),
                },
                now,
            )
            .await?;
            tx.put_trial(&tid, &ts).await?;
        }
    }
    Ok(())
}

pub(crate) async fn claim(
    tx: &mut impl Tx,
    c: &CampaignId,
    req: &ClaimRequest,
    now: EpochMs,
) -> R<ClaimOutcome> {
    let mut meta = meta_of(tx, c).await?;
    let before = snapshot(&meta)?;
    let ttl = ttl_ms(&meta);
    // Last-seen times only need TTL precision: refreshing them at every claim would make
    // every idle claim a write.
    if meta
        .lanes_seen
        .get(&req.lane)
        .is_none_or(|&t| now - t >= ttl / 2)
    {
        meta.lanes_seen.insert(req.lane.clone(), now);
    }
    meta.lanes_seen.retain(|_, t| now - *t <= 10 * ttl);
    let default_retry = u64::try_from(ttl / 3).unwrap_or(1000).max(1000);
    let no_work = |reason: NoWorkReason| ClaimOutcome::NoWork {
        retry_after_ms: reason.retry_after_ms(now, default_retry),
        reason,
    };

    let arms: Vec<&lanes_common::spec::Arm> = meta
        .spec
        .arms
        .iter()
        .filter(|a| req.arms.as_ref().is_none_or(|want| want.contains(&a.id)))
        .collect();
    if arms.is_empty() {
        put_meta_if_changed(tx, &meta, &before).await?;
        return Ok(no_work(NoWorkReason::NoMatchingArms));
    }
    let all_arms = arms.len() == meta.spec.arms.len();
    let providers: Vec<String> = arms
        .iter()
        .map(|a| a.provider.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();

    promote_delayed(tx, &meta, now).await?;
    let verdict = claim_gate(&GateInput {
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
        providers: &providers,
    });
    let gates = match verdict {
        GateVerdict::Stop(reason) => {
            set_stopping(tx, &mut meta, reason, now).await?;
            maybe_finish(tx, &mut meta, now).await?;
            put_meta_if_changed(tx, &meta, &before).await?;
            return Ok(no_work(NoWorkReason::Stopped {
                stop_reason: Some(reason),
            }));
        }
        GateVerdict::Wait(reason) => {
            put_meta_if_changed(tx, &meta, &before).await?;
            return Ok(no_work(reason));
        }
        GateVerdict::Open(gates) => gates,
    };

    let go = |p: &str| gates.get(p) == Some(&ProviderGate::Go);
    let mut queues: Vec<String> = providers
        .iter()
        .filter(|p| go(p))
        .map(|p| provider_queue(p))
        .collect();
    let group_ok = meta.spec.pairing == Pairing::Group
        && all_arms
        && meta.spec.arms.iter().all(|a| go(&a.provider));
    if group_ok {
        queues.push(GROUP_QUEUE.to_owned());
    }

    let mut assignments = Vec::new();
    let mut wait: Option<NoWorkReason> = None;
    let mut next_ms: Option<EpochMs> = tx.delayed_next().await?;
    // Candidates are read once per batch, merged across queues in key order. `horizon` is the
    // last key up to which the merge is complete: past it, a truncated queue may hold lower
    // keys than the buffer's, so the batch is read again.
    let mut buffer: std::collections::VecDeque<Candidate> = Default::default();
    let mut horizon = u64::MAX;
    let mut skipped: BTreeSet<(String, u64)> = BTreeSet::new();
    'units: while assignments.len() < req.max_units as usize {
        if buffer.front().is_none_or(|c| c.key > horizon) {
            buffer.clear();
            horizon = u64::MAX;
            let want = SCAN.max(req.max_units as usize - assignments.len()) + skipped.len();
            let mut batch = Vec::new();
            for q in &queues {
                let entries = tx.ready_first(q, want).await?;
                if entries.len() == want
                    && let Some((last, _)) = entries.last()
                {
                    horizon = horizon.min(*last);
                }
                for (key, unit) in entries {
                    if !skipped.contains(&(q.clone(), key)) {
                        batch.push(Candidate {
                            queue: q.clone(),
                            key,
                            unit,
                        });
                    }
                }
            }
            batch.sort_by_key(|c| c.key);
            buffer.extend(batch);
            if buffer.is_empty() {
                break;
            }
        }
        let Some(cand) = buffer.pop_front() else {
            break;
        };
        let (phase, tp, _, _) = from_position_key(cand.key);
        if phase == 2 {
            if meta.phase1_finals < meta.phase1_total {
                // Only phase-2 work is left here, and phase 1 is not final.
                wait = Some(NoWorkReason::Phase1Pending);
                break;
            }
            if !phase2_allows(tx, &mut meta, tp, now).await? {
                // The block got its not_started rows: read the queues again.
                buffer.clear();
                continue 'units;
            }
        }
        if cand.unit == UNIT_TRIAL {
            let trial = trial_by_key(tx, &meta, cand.key).await?;
            let tid = trial.trial_id.to_string();
            let ts = tx.trial(&tid).await?.unwrap_or_default();
            let placement = ts.queued.as_ref().map(|q| (&q.placement, q.since_ms));
            let blocked = match placement {
                Some((Placement::OtherLane(l), since)) => {
                    (l == &req.lane && now - since < ttl).then_some(since + ttl)
                }
                Some((Placement::OtherHost(h), since)) => {
                    (h == &req.host && now - since < ttl).then_some(since + ttl)
                }
                _ => None,
            };
            if let Some(at) = blocked {
                next_ms = Some(next_ms.map_or(at, |n| n.min(at)));
                skipped.insert((cand.queue.clone(), cand.key));
                continue;
            }
        }
        match lease_unit(tx, &mut meta, &cand, req, now).await? {
            Leased::Unit(a) => assignments.push(a),
            Leased::Budget => {
                wait = Some(NoWorkReason::BudgetReserved);
                break;
            }
            Leased::BudgetSpent => {
                set_stopping(tx, &mut meta, StopReason::Budget, now).await?;
                maybe_finish(tx, &mut meta, now).await?;
                wait = Some(NoWorkReason::Stopped {
                    stop_reason: Some(StopReason::Budget),
                });
                break;
            }
            Leased::Cutoff { estimate_s } => {
                // Later units may be shorter (another arm): keep looking past this one.
                wait = Some(NoWorkReason::CutoffAdmission { estimate_s });
                skipped.insert((cand.queue.clone(), cand.key));
            }
        }
    }
    if meta.finals >= meta.trials_total {
        maybe_finish(tx, &mut meta, now).await?;
    }
    put_meta_if_changed(tx, &meta, &before).await?;
    if !assignments.is_empty() {
        return Ok(ClaimOutcome::Assigned(assignments));
    }
    if meta.state == CampaignState::Done {
        return Ok(no_work(NoWorkReason::Done));
    }
    // A provider that waits explains an empty claim better than "nothing ready".
    let waiting = gates.into_values().find_map(|g| match g {
        ProviderGate::Wait(r) => Some(r),
        ProviderGate::Go => None,
    });
    Ok(no_work(
        wait.or(waiting)
            .unwrap_or(NoWorkReason::NothingReady { next_ms }),
    ))
}

/// What leasing one unit did.
enum Leased {
    Unit(Assignment),
    /// The budget cannot take it while reservations are open.
    Budget,
    /// The budget can never take it: what is left is below its guard and nothing is reserved.
    BudgetSpent,
    /// It would not end before the cutoff.
    Cutoff {
        estimate_s: f64,
    },
}

/// Leases one unit, unless the budget or the cutoff refuses it.
async fn lease_unit(
    tx: &mut impl Tx,
    meta: &mut Meta,
    cand: &Candidate,
    req: &ClaimRequest,
    now: EpochMs,
) -> R<Leased> {
    let n = meta.spec.arms.len() as u32;
    let mut trials = Vec::new();
    if cand.unit == UNIT_GROUP {
        let (_, tp, run, _) = from_position_key(cand.key);
        let task = tx.task(tp).await?;
        for slot in 0..n {
            let t = trial_at(&meta.spec, meta.n_tasks as usize, tp, &task, run, slot);
            let done = tx
                .trial(t.trial_id.as_str())
                .await?
                .is_some_and(|s| s.final_mark.is_some())
                || tx.lease(t.trial_id.as_str()).await?.is_some();
            if !done {
                trials.push(t);
            }
        }
    } else {
        trials.push(trial_by_key(tx, meta, cand.key).await?);
    }
    // Cutoff-aware admission: the unit (a whole run group runs back to back) must be expected
    // to end by the cutoff, from each arm's p95 wall time so far.
    if meta.spec.ops.cutoff_utc.is_some() {
        let estimate_s: f64 = trials
            .iter()
            .map(|t| {
                let walls = meta.arm_walls.get(&t.arm).map(Vec::as_slice).unwrap_or(&[]);
                wall_estimate_s(walls, t.timeout_s)
            })
            .sum();
        if !cutoff_admits(now, meta.spec.ops.cutoff_utc, estimate_s) {
            return Ok(Leased::Cutoff { estimate_s });
        }
    }
    let reserve: Vec<f64> = trials.iter().map(|t| reservation(meta, t)).collect();
    // Each unit of a multi-unit claim passes the budget gate on its own.
    match budget_admits(
        meta.spec.ops.budget_cap_usd,
        meta.spend_usd,
        meta.reserved_usd,
        reserve.iter().sum(),
        trials.iter().all(|t| t.max_cost_usd.is_some()),
    ) {
        BudgetGate::Go => {}
        BudgetGate::Wait => return Ok(Leased::Budget),
        BudgetGate::Stop => return Ok(Leased::BudgetSpent),
    }
    tx.del_ready(&cand.queue, cand.key).await?;
    let paired = cand.unit == UNIT_GROUP;
    let ttl = ttl_ms(meta);
    let timeouts: Vec<u32> = trials.iter().map(|t| t.timeout_s).collect();
    let hard = hard_deadlines_ms(now, &timeouts);
    let mut assigned = Vec::new();
    for ((trial, hard), reserved) in trials.into_iter().zip(hard).zip(reserve) {
        let tid = trial.trial_id.to_string();
        let mut ts = tx.trial(&tid).await?.unwrap_or_default();
        ts.attempts += 1;
        ts.queued = None;
        let token = Token {
            trial_id: trial.trial_id.clone(),
            attempt: ts.attempts,
        };
        let deadline = now + ttl;
        tx.put_lease(
            &tid,
            &Lease {
                attempt: ts.attempts,
                lane: req.lane.clone(),
                host: req.host.clone(),
                worker: req.worker.clone(),
                phase: Phase::Assigned,
                deadline_ms: deadline,
                hard_deadline_ms: hard,
                heartbeat_seen: false,
                claimed_ms: now,
                reserved_usd: reserved,
                paired,
                cancel_requested: false,
                revoked: false,
                grace_until_ms: None,
            },
        )
        .await?;
        tx.add_deadline(deadline, &tid).await?;
        tx.put_token(&tid, ts.attempts, &TokenRecord::default())
            .await?;
        tx.put_trial(&tid, &ts).await?;
        meta.reserved_usd += reserved;
        meta.leases_open += 1;
        emit(
            tx,
            meta,
            now,
            EventKind::AttemptStarted {
                token: token.clone(),
                lane: req.lane.clone(),
                host: req.host.clone(),
            },
        )
        .await?;
        let (_, tp, _, _) = from_position_key(trial_key(&trial));
        let task = tx.task(tp).await?;
        let arm_config = meta
            .spec
            .arm(&trial.arm)
            .map(|a| a.config.clone())
            .unwrap_or_default();
        assigned.push(AssignedTrial {
            hard_deadline_in_ms: u64::try_from(hard - now).unwrap_or(0),
            trial,
            token,
            payload_json: task.payload.json().to_owned(),
            arm_config,
        });
    }
    Ok(Leased::Unit(Assignment {
        campaign: meta.spec.id.clone(),
        paired,
        trials: assigned,
        lease_ttl_ms: u64::try_from(ttl).unwrap_or(0),
    }))
}

// ---------------------------------------------------------------------------------------------
// renew

pub(crate) async fn renew(
    tx: &mut impl Tx,
    c: &CampaignId,
    tokens: &[(Token, Phase)],
    now: EpochMs,
) -> R<Vec<(Token, RenewState)>> {
    let mut meta = meta_of(tx, c).await?;
    let ttl = ttl_ms(&meta);
    let mut out = Vec::with_capacity(tokens.len());
    for (token, phase) in tokens {
        let tid = token.trial_id.as_str();
        let state = match tx.lease(tid).await? {
            Some(mut lease)
                if lease.attempt == token.attempt
                    && !lease.revoked
                    && now <= lease.hard_deadline_ms =>
            {
                let deadline = (now + ttl).min(lease.hard_deadline_ms);
                tx.del_deadline(lease.reap_at(), tid).await?;
                tx.add_deadline(deadline, tid).await?;
                lease.deadline_ms = deadline;
                lease.grace_until_ms = None;
                lease.heartbeat_seen = true;
                meta.lanes_seen.insert(lease.lane.clone(), now);
                if lease.phase != *phase {
                    lease.phase = *phase;
                    emit(
                        tx,
                        &mut meta,
                        now,
                        EventKind::AttemptPhase {
                            token: token.clone(),
                            phase: *phase,
                        },
                    )
                    .await?;
                }
                let cancel = lease.cancel_requested;
                tx.put_lease(tid, &lease).await?;
                if cancel {
                    RenewState::Cancel
                } else {
                    RenewState::Renewed
                }
            }
            _ => RenewState::Lost,
        };
        out.push((token.clone(), state));
    }
    tx.put_meta(&meta).await?;
    Ok(out)
}

/// A restarted worker's leases it cannot publish (its outbox does not hold their outcome):
/// each still held by `worker` at that attempt is taken back at once, as the reaper would take
/// it after its deadline and publish grace. Answers the tokens taken back; a token no longer
/// leased to `worker` is left alone.
pub(crate) async fn forfeit(
    tx: &mut impl Tx,
    c: &CampaignId,
    worker: &str,
    tokens: &[Token],
    now: EpochMs,
) -> R<Vec<Token>> {
    let mut meta = meta_of(tx, c).await?;
    let mut out = Vec::new();
    for token in tokens {
        let tid = token.trial_id.as_str();
        let Some(lease) = tx.lease(tid).await? else {
            continue;
        };
        if lease.attempt != token.attempt || lease.worker != worker {
            continue;
        }
        let take = unstarted(&lease, &meta)
            .unwrap_or(TakeBack::Expire("its worker restarted without the outcome"));
        take_back(tx, &mut meta, tid, &lease, take, now).await?;
        out.push(token.clone());
    }
    tx.put_meta(&meta).await?;
    Ok(out)
}

/// How a lease is taken back.
#[derive(Debug, Clone, Copy)]
enum TakeBack {
    /// `cancelled`: nothing ran (or the campaign is stopping); no budget spent.
    Cancel(&'static str),
    /// `infra_error` / `lease_expired`.
    Expire(&'static str),
}

/// The leases taken back as `cancelled` whatever their deadline says.
fn unstarted(lease: &Lease, meta: &Meta) -> Option<TakeBack> {
    if !lease.heartbeat_seen {
        Some(TakeBack::Cancel("assignment never reached a lane"))
    } else if lease.phase == Phase::Assigned {
        // A later trial of a run group that its lane renewed but never started: nothing
        // ran, so it costs no budget.
        Some(TakeBack::Cancel("assigned but never started"))
    } else if meta.state != CampaignState::Running || lease.revoked {
        Some(TakeBack::Cancel("reaped while the campaign is stopping"))
    } else {
        None
    }
}

/// Writes the row of a lease taken back (its deadline entry is already gone).
async fn take_back(
    tx: &mut impl Tx,
    meta: &mut Meta,
    tid: &str,
    lease: &Lease,
    take: TakeBack,
    now: EpochMs,
) -> R<()> {
    let token = Token {
        trial_id: TrialId::new(tid.to_owned()).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        attempt: lease.attempt,
    };
    let (status, kind, why) = match take {
        TakeBack::Cancel(why) => (Status::Cancelled, None, why),
        TakeBack::Expire(why) => (Status::InfraError, Some(FailureKind::LeaseExpired), why),
    };
    let trial = resolve(tx, meta, tid)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("leased trial {tid} not in schedule")))?;
    let mut outcome = Outcome::new(token, &lease.lane, &lease.host, status);
    outcome.failure_kind = kind;
    outcome.worker = lease.worker.clone();
    outcome.error = Some(why.to_owned());
    outcome.lease_lost = true;
    record(tx, meta, &trial, outcome, false, now).await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// complete, release, reap: all end in `record`

async fn append_row(tx: &mut impl Tx, meta: &mut Meta, row: &Row) -> R<()> {
    tx.put_row(row).await?;
    meta.next_seq += 1;
    *meta.rows_by_status.entry(row.status).or_default() += 1;
    let mut block = tx.block(&row.block).await?;
    block.wall_s += row.wall_s;
    tx.put_block(&row.block, &block).await
}

async fn mark_final(
    tx: &mut impl Tx,
    meta: &mut Meta,
    trial: &Trial,
    ts: &mut TrialState,
    mark: FinalMark,
    now: EpochMs,
) -> R<()> {
    if let Some(prev) = &ts.final_mark {
        // A late score turning an excluded trial into a counted one.
        if !prev.counted && mark.counted {
            meta.excluded -= 1;
            meta.counted += 1;
        }
    } else {
        meta.finals += 1;
        if trial.phase == 1 {
            meta.phase1_finals += 1;
        }
        if mark.counted {
            meta.counted += 1;
        } else if mark.excluded_reason.is_some()
            && !matches!(mark.excluded_reason, Some(ExcludedReason::Phase2Refused(_)))
        {
            meta.excluded += 1;
        }
        let mut block = tx.block(&trial.block).await?;
        block.finals += 1;
        if !block.complete && block.finals >= block_total(meta, trial.phase) {
            block.complete = true;
            meta.blocks_complete += 1;
            push_capped(
                &mut meta.finished_block_walls,
                block.wall_s,
                BLOCK_STATS_CAP,
            );
        }
        tx.put_block(&trial.block, &block).await?;
    }
    emit(
        tx,
        meta,
        now,
        EventKind::TrialFinal {
            trial_id: trial.trial_id.clone(),
            counted: mark.counted,
            excluded_reason: mark.excluded_reason.clone(),
        },
    )
    .await?;
    ts.final_mark = Some(mark);
    Ok(())
}

/// Takes a trial out of wherever it waits for a retry.
async fn dequeue(tx: &mut impl Tx, ts: &mut TrialState, trial: &Trial, meta: &Meta) -> R<()> {
    if let Some(q) = ts.queued.take() {
        match q.delayed_until {
            Some(at) => tx.del_delayed(at, trial.trial_id.as_str()).await?,
            None => {
                tx.del_ready(
                    &provider_queue(provider_of(meta, &trial.arm)),
                    trial_key(trial),
                )
                .await?;
            }
        }
    }
    Ok(())
}

async fn enqueue_retry(
    tx: &mut impl Tx,
    meta: &Meta,
    trial: &Trial,
    ts: &mut TrialState,
    at: EpochMs,
    placement: Placement,
    now: EpochMs,
) -> R<()> {
    dequeue(tx, ts, trial, meta).await?;
    if at <= now {
        tx.add_ready(
            &provider_queue(provider_of(meta, &trial.arm)),
            trial_key(trial),
            UNIT_TRIAL,
        )
        .await?;
        ts.queued = Some(Queued {
            delayed_until: None,
            placement,
            since_ms: now,
        });
    } else {
        tx.add_delayed(at, trial.trial_id.as_str()).await?;
        ts.queued = Some(Queued {
            delayed_until: Some(at),
            placement,
            since_ms: now,
        });
    }
    Ok(())
}

/// Turns a result into a row, applies the retry decision and answers.
async fn record(
    tx: &mut impl Tx,
    meta: &mut Meta,
    trial: &Trial,
    outcome: Outcome,
    answer: bool,
    now: EpochMs,
) -> R<CompleteAck> {
    let tid = trial.trial_id.to_string();
    let attempt = outcome.token.attempt;
    let mut ts = tx.trial(&tid).await?.unwrap_or_default();
    let mut token_rec = tx.token(&tid, attempt).await?.unwrap_or_default();
    let late = token_rec.rows > 0;
    let decision = decide(
        &ts.history,
        &NewResult {
            attempt,
            status: outcome.status,
            failure_kind: outcome.failure_kind,
            reset_epoch: outcome.reset_epoch,
            late,
            lane: &outcome.lane,
            host: &outcome.host,
        },
        &meta.spec.retry,
        now,
        meta.spec.ops.cutoff_utc,
    );

    // The lease goes if this token still holds it; its reservation is settled.
    let mut paired = false;
    if let Some(lease) = tx.lease(&tid).await? {
        if lease.attempt == attempt {
            paired = lease.paired;
            tx.del_lease(&tid).await?;
            tx.del_deadline(lease.reap_at(), &tid).await?;
            meta.reserved_usd = (meta.reserved_usd - lease.reserved_usd).max(0.0);
            // Float residue of settled reservations is not money.
            if meta.reserved_usd < 1e-9 {
                meta.reserved_usd = 0.0;
            }
            meta.leases_open = meta.leases_open.saturating_sub(1);
        } else if lease.attempt > attempt
            && matches!(decision, Decision::Counted { revoke_newer: true })
        {
            let mut newer = lease;
            newer.revoked = true;
            tx.put_lease(&tid, &newer).await?;
        }
    }

    if let Some(cost) = outcome.cost_usd {
        meta.spend_usd += cost;
    }
    if let Some(q) = &outcome.quota {
        meta.quotas.insert(q.provider.clone(), q.clone());
    }
    // A rate limit pauses every arm of its provider until the reset, not just this trial.
    if outcome.failure_kind == Some(FailureKind::RateLimit)
        && meta.spec.ops.rate_limit_pause
        && !late
    {
        let provider = provider_of(meta, &trial.arm).to_owned();
        let until = pause_until(
            outcome.reset_epoch,
            now,
            meta.spec.retry.rate_limit_backoff_s,
        );
        let current = meta.paused_until.get(&provider).copied().unwrap_or(0);
        if until > current {
            meta.paused_until.insert(provider.clone(), until);
            emit(
                tx,
                meta,
                now,
                EventKind::GatePaused {
                    gate: GateInForce {
                        gate: "rate_limit_pause".into(),
                        detail: provider,
                        until_ms: Some(until),
                    },
                },
            )
            .await?;
        }
    }

    let counted = matches!(decision, Decision::Counted { .. });
    let mut fields = StoreFields {
        seq: meta.next_seq,
        spec_hash: meta.spec_hash.clone(),
        counted,
        duplicate: matches!(decision, Decision::Duplicate) && (outcome.status.is_scored() || late),
        late,
        paired: paired && !late,
        written_utc: format_rfc3339(now),
        ..StoreFields::default()
    };
    match &decision {
        Decision::Counted { .. } => fields.is_final = true,
        Decision::Excluded(reason) => {
            fields.is_final = true;
            fields.excluded_reason = Some(reason.clone());
        }
        _ => {}
    }
    let status = outcome.status;
    let kind = outcome.failure_kind;
    let row = Row::from_outcome(&meta.spec.id, trial, outcome, fields);
    if counted {
        if let Some(c) = row.cost_usd {
            push_capped(
                meta.arm_costs.entry(trial.arm.clone()).or_default(),
                c,
                ARM_STATS_CAP,
            );
        }
        push_capped(
            meta.arm_walls.entry(trial.arm.clone()).or_default(),
            row.wall_s,
            ARM_STATS_CAP,
        );
    }
    append_row(tx, meta, &row).await?;
    ts.history.add_row(&row, !late);
    ts.rows += 1;
    token_rec.rows += 1;

    match decision {
        Decision::Counted { .. } => {
            dequeue(tx, &mut ts, trial, meta).await?;
            mark_final(
                tx,
                meta,
                trial,
                &mut ts,
                FinalMark {
                    counted: true,
                    excluded_reason: None,
                },
                now,
            )
            .await?;
        }
        Decision::Duplicate => {}
        Decision::Retry {
            at_ms, placement, ..
        } => {
            enqueue_retry(tx, meta, trial, &mut ts, at_ms, placement, now).await?;
        }
        Decision::Excluded(reason) => {
            dequeue(tx, &mut ts, trial, meta).await?;
            mark_final(
                tx,
                meta,
                trial,
                &mut ts,
                FinalMark {
                    counted: false,
                    excluded_reason: Some(reason),
                },
                now,
            )
            .await?;
        }
        Decision::Stop {
            reason,
            retry_at_ms,
        } => {
            enqueue_retry(tx, meta, trial, &mut ts, retry_at_ms, Placement::Any, now).await?;
            set_stopping(tx, meta, reason, now).await?;
        }
    }
    let token = row.token();
    emit(
        tx,
        meta,
        now,
        EventKind::AttemptFinished {
            token: token.clone(),
            status,
            failure_kind: kind,
            counted,
            row_seq: row.seq,
        },
    )
    .await?;
    let winner_attempt = if counted {
        Some(attempt)
    } else {
        winner_of(tx, &tid, ts.attempts).await?
    };
    let ack = CompleteAck {
        token,
        counted,
        duplicate: row.duplicate,
        late,
        winner_attempt,
        seq: row.seq,
    };
    // The reaper's row is not the lane's answer: a later completion of the token is still
    // taken, as a late outcome. A lane's completion or release is answered once, for good.
    if answer {
        token_rec.ack = Some(ack.clone());
    }
    tx.put_token(&tid, attempt, &token_rec).await?;
    tx.put_trial(&tid, &ts).await?;
    maybe_finish(tx, meta, now).await?;
    Ok(ack)
}

/// The attempt whose completion counted, from its token records.
async fn winner_of(tx: &mut impl Tx, tid: &str, attempts: u32) -> R<Option<u32>> {
    for a in 1..=attempts {
        if let Some(rec) = tx.token(tid, a).await?
            && rec.ack.as_ref().is_some_and(|k| k.counted)
        {
            return Ok(Some(a));
        }
    }
    Ok(None)
}

async fn check_token(tx: &mut impl Tx, meta: &Meta, token: &Token) -> R<Trial> {
    let trial = resolve(tx, meta, token.trial_id.as_str())
        .await?
        .ok_or_else(|| StoreError::UnknownToken(token.clone()))?;
    let issued = tx
        .trial(token.trial_id.as_str())
        .await?
        .is_some_and(|s| token.attempt >= 1 && token.attempt <= s.attempts);
    if !issued {
        return Err(StoreError::UnknownToken(token.clone()));
    }
    Ok(trial)
}

pub(crate) async fn complete(
    tx: &mut impl Tx,
    c: &CampaignId,
    outcome: Outcome,
    now: EpochMs,
) -> R<CompleteAck> {
    let outcome = outcome.validate()?;
    let mut meta = meta_of(tx, c).await?;
    let trial = check_token(tx, &meta, &outcome.token).await?;
    if let Some(ack) = tx
        .token(trial.trial_id.as_str(), outcome.token.attempt)
        .await?
        .and_then(|r| r.ack)
    {
        return Ok(ack);
    }
    let ack = record(tx, &mut meta, &trial, outcome, true, now).await?;
    tx.put_meta(&meta).await?;
    Ok(ack)
}

pub(crate) async fn release(
    tx: &mut impl Tx,
    c: &CampaignId,
    release: &Release,
    now: EpochMs,
) -> R<CompleteAck> {
    let mut meta = meta_of(tx, c).await?;
    let trial = check_token(tx, &meta, &release.token).await?;
    let tid = trial.trial_id.as_str();
    if let Some(ack) = tx
        .token(tid, release.token.attempt)
        .await?
        .and_then(|r| r.ack)
    {
        return Ok(ack);
    }
    if tx
        .lease(tid)
        .await?
        .is_none_or(|l| l.attempt != release.token.attempt)
    {
        return Err(StoreError::StaleToken(release.token.clone()));
    }
    let (status, kind) = match release.reason {
        ReleaseReason::Cancelled => (Status::Cancelled, None),
        ReleaseReason::Blocked(k) => (Status::Blocked, Some(k)),
    };
    let mut outcome = Outcome::new(release.token.clone(), &release.lane, &release.host, status);
    outcome.failure_kind = kind;
    outcome.error = release.detail.clone();
    let outcome = outcome.validate()?;
    let ack = record(tx, &mut meta, &trial, outcome, true, now).await?;
    tx.put_meta(&meta).await?;
    Ok(ack)
}

pub(crate) async fn reap(tx: &mut impl Tx, c: &CampaignId, now: EpochMs) -> R<ReapReport> {
    let mut meta = meta_of(tx, c).await?;
    let before = snapshot(&meta)?;
    let grace = i64::from(meta.spec.ops.publish_grace_s) * 1000;
    let mut report = ReapReport::default();
    let due = tx
        .deadlines_due(now - super::REAP_GRACE_MS - 1, REAP_BATCH)
        .await?;
    report.more = due.len() == REAP_BATCH;
    for (at, tid) in due {
        let Some(mut lease) = tx.lease(&tid).await? else {
            tx.del_deadline(at, &tid).await?;
            continue;
        };
        if lease.reap_at() != at {
            tx.del_deadline(at, &tid).await?;
            continue;
        }
        let take = match unstarted(&lease, &meta) {
            Some(take) => take,
            None if lease.phase.is_after_evaluate() && now < lease.deadline_ms + grace => {
                // Its outcome is probably in an outbox: look again when the grace ends, and
                // out of the way of leases that are due now. Indexed so that it is due
                // exactly when the grace ends (a pass takes entries REAP_GRACE_MS past their
                // time).
                let until = lease.deadline_ms + grace - super::REAP_GRACE_MS;
                tx.del_deadline(at, &tid).await?;
                tx.add_deadline(until, &tid).await?;
                lease.grace_until_ms = Some(until);
                tx.put_lease(&tid, &lease).await?;
                report.deferred += 1;
                continue;
            }
            None => TakeBack::Expire("lease expired"),
        };
        take_back(tx, &mut meta, &tid, &lease, take, now).await?;
        match take {
            TakeBack::Cancel(_) => report.cancelled += 1,
            TakeBack::Expire(_) => report.expired += 1,
        }
    }
    put_meta_if_changed(tx, &meta, &before).await?;
    Ok(report)
}

// ---------------------------------------------------------------------------------------------
// stop, status

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
    tx.put_meta(&meta).await?;
    Ok(meta.state)
}

pub(crate) async fn status(tx: &mut impl Tx, c: &CampaignId, now: EpochMs) -> R<CampaignStatus> {
    let meta = meta_of(tx, c).await?;
    let mut gates = Vec::new();
    let providers: BTreeSet<&str> = meta.spec.arms.iter().map(|a| a.provider.as_str()).collect();
    for p in providers {
        match quota_gate(
            meta.quotas.get(p),
            meta.spec.ops.quota_wait,
            meta.spec.ops.quota_stop,
            now,
        ) {
            QuotaGate::Go => {}
            QuotaGate::Wait { until_ms } => gates.push(GateInForce {
                gate: "quota_wait".into(),
                detail: p.to_owned(),
                until_ms: Some(until_ms),
            }),
            QuotaGate::Stop => gates.push(GateInForce {
                gate: "quota_stop".into(),
                detail: p.to_owned(),
                until_ms: None,
            }),
        }
        if let Some(&until) = meta.paused_until.get(p)
            && until > now
        {
            gates.push(GateInForce {
                gate: "rate_limit_pause".into(),
                detail: p.to_owned(),
                until_ms: Some(until),
            });
        }
    }
    if let Some(cap) = meta.spec.ops.budget_cap_usd
        && meta.spend_usd + meta.reserved_usd >= cap
    {
        gates.push(GateInForce {
            gate: "budget".into(),
            detail: format!(
                "spend {:.2} + reserved {:.2} of cap {cap:.2}",
                meta.spend_usd, meta.reserved_usd
            ),
            until_ms: None,
        });
    }
    if meta.phase1_finals < meta.phase1_total && meta.spec.phase2_runs > 0 {
        gates.push(GateInForce {
            gate: "phase1_pending".into(),
            detail: format!(
                "{} of {} phase-1 trials final",
                meta.phase1_finals, meta.phase1_total
            ),
            until_ms: None,
        });
    }
    let mut in_flight = Vec::new();
    for (tid, lease) in tx.leases().await? {
        in_flight.push(InFlight {
            token: Token {
                trial_id: TrialId::new(tid).map_err(|e| StoreError::Corrupt(e.to_string()))?,
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
        spec: meta.spec,
        tasks: tx.tasks().await?,
    })
}

/// The campaign's current spec, without its tasks.
pub(crate) async fn spec(tx: &mut impl Tx, c: &CampaignId) -> R<lanes_common::spec::CampaignSpec> {
    Ok(meta_of(tx, c).await?.spec)
}
