//! An operator retry pass (`lanes retry --excluded`): excluded trials (optionally only those
//! whose exclusion reason matches a glob) go back to their provider's queue, pending again
//! with every retry budget fresh. Each gets a `requeued` row in the ledger that records the
//! pass, the selection and the note, and carries the pass on its later rows; the pass is
//! recorded as an amendment. A `not_started` trial is never requeued: phase 2's rule refused
//! it, and that is a pre-registered decision, not a failure.

use std::collections::BTreeMap;

use lanes_common::ids::CampaignId;
use lanes_common::policy::Placement;
use lanes_common::row::{ExcludedReason, RequeueNote, Row, Status, StoreFields};
use lanes_common::smoke::glob_match;
use lanes_common::state::CampaignState;
use lanes_common::utc::{EpochMs, UtcTime};

use super::record::append_row;
use super::{emit, meta_of, put_meta_if_changed, resolve, trial_key, trial_queue};
use crate::store::api::*;
use crate::store::model::*;
use crate::store::tx::{R, Tx};

pub(crate) async fn requeue(
    tx: &mut impl Tx,
    c: &CampaignId,
    req: &RequeueRequest,
    now: EpochMs,
) -> R<Requeued> {
    let mut meta = meta_of(tx, c).await?;
    let before = meta.clone();
    if matches!(meta.state, CampaignState::Stopping | CampaignState::Stopped) {
        return Err(StoreError::Active(
            c.clone(),
            "is stopped: submit it again to resume it, then retry".to_owned(),
        ));
    }
    let pass = 1 + meta
        .amendments
        .iter()
        .filter(|a| a.requeue.is_some())
        .count() as u32;
    let selection = match &req.reason {
        None => "excluded".to_owned(),
        Some(glob) => format!("excluded, reason {glob}"),
    };
    let mut ids = tx.trial_ids().await?;
    ids.sort();
    let mut by_arm: BTreeMap<String, u64> = BTreeMap::new();
    let mut trials = 0u64;
    for id in ids {
        let Some(mut ts) = tx.trial(&id).await? else {
            continue;
        };
        let Some(FinalMark {
            counted: false,
            excluded_reason: Some(reason),
        }) = &ts.final_mark
        else {
            continue;
        };
        if matches!(reason, ExcludedReason::Phase2Refused(_))
            || req
                .reason
                .as_deref()
                .is_some_and(|glob| !glob_match(glob, &reason.to_string()))
        {
            continue;
        }
        let Some(trial) = resolve(tx, &meta, &id).await? else {
            continue;
        };
        // No longer final: the counters and its block's count take it back. A block that was
        // complete stays complete: its wall time is already in the phase-2 estimate, and
        // completing it twice would count it twice.
        meta.finals = meta.finals.saturating_sub(1);
        if trial.phase == lanes_common::schedule::SchedulePhase::First {
            meta.phase1_finals = meta.phase1_finals.saturating_sub(1);
        }
        meta.excluded = meta.excluded.saturating_sub(1);
        let mut block = tx.block(&trial.block).await?;
        block.finals = block.finals.saturating_sub(1);
        tx.put_block(&trial.block, &block).await?;

        let mut row = Row::bare(
            &meta.spec.id,
            &trial,
            0,
            Status::Requeued,
            None,
            StoreFields {
                seq: meta.next_seq,
                spec_hash: meta.spec_hash.clone(),
                smoke: meta.spec.smoke.is_some(),
                retry_pass: Some(pass),
                written_utc: UtcTime::from_ms(now),
                ..StoreFields::default()
            },
        );
        row.requeue = Some(RequeueNote {
            pass,
            selection: selection.clone(),
            note: req.note.clone(),
        });
        append_row(tx, &mut meta, &row).await?;
        ts.history.add_row(&row, true);
        ts.rows += 1;
        ts.final_mark = None;
        ts.retry_pass = Some(pass);
        tx.add_ready(&trial_queue(&meta, &trial), trial_key(&trial))
            .await?;
        ts.queued = Some(Queued {
            delayed_until: None,
            placement: Placement::Any,
            since_ms: now,
        });
        tx.put_trial(&id, &ts).await?;
        *by_arm.entry(trial.arm.to_string()).or_default() += 1;
        trials += 1;
    }
    if trials == 0 {
        return Ok(Requeued {
            pass: 0,
            trials,
            by_arm,
            state: meta.state,
        });
    }
    meta.amendments.push(Amendment {
        at_ms: now,
        spec_hash: meta.spec_hash.clone(),
        added_tasks: 0,
        added_trials: 0,
        requeue: Some(RequeueAmendment {
            pass,
            selection,
            note: req.note.clone(),
            trials,
        }),
    });
    if meta.state == CampaignState::Done {
        meta.state = CampaignState::Running;
        meta.stop_reason = None;
        let spec_hash = meta.spec_hash.clone();
        emit(tx, &mut meta, now, EventKind::CampaignResumed { spec_hash }).await?;
    }
    let state = meta.state;
    put_meta_if_changed(tx, meta, &before).await?;
    Ok(Requeued {
        pass,
        trials,
        by_arm,
        state,
    })
}
