//! The phase-2 rule at claim time: a block starts, or its trials get `not_started` rows.

use std::collections::BTreeSet;

use lanes_common::policy::admission::{QuotaGate, quota_gate};
use lanes_common::policy::{Phase2Input, phase2_block};
use lanes_common::row::{ExcludedReason, Phase2Refusal, Row, Status, StoreFields};
use lanes_common::schedule::{self, SchedulePhase, position_key, trial_at};
use lanes_common::utc::{EpochMs, UtcTime};

use super::record::{append_row, dequeue, mark_final};
use super::{trial_key, trial_queue, ttl_ms};
use crate::store::model::*;
use crate::store::tx::{R, Tx};

/// Applies the phase-2 rule to a block the first time a claim reaches it. Returns whether the
/// block may start; a refused block gets its `not_started` rows here.
pub(super) async fn phase2_allows(
    tx: &mut impl Tx,
    meta: &mut Meta,
    task_pos: u32,
    now: EpochMs,
) -> R<bool> {
    let task = tx.task(task_pos).await?;
    let block = schedule::block_name(SchedulePhase::Second, &task.id);
    let mut state = tx.block(&block).await?;
    match &state.phase2 {
        Some(Phase2Verdict::Started) => return Ok(true),
        Some(Phase2Verdict::Refused(why)) => {
            // Refused before: trials an amendment added since get their rows now, once (the
            // rest are final already), so that no claim meets their entries again.
            let why = why.clone();
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
            state.phase2 = Some(Phase2Verdict::Started);
            tx.put_block(&block, &state).await?;
            Ok(true)
        }
        Err(why) => {
            state.phase2 = Some(Phase2Verdict::Refused(why.clone()));
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
        tx.del_ready(
            &Queue::Groups,
            position_key(SchedulePhase::Second, task_pos, run, 0),
        )
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
            let tid = trial.trial_id.clone();
            // The entry goes whatever the trial's state, so a claim never meets it again.
            tx.del_ready(&trial_queue(meta, &trial), trial_key(&trial))
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
                    smoke: meta.spec.smoke.is_some(),
                    written_utc: UtcTime::from_ms(now),
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
