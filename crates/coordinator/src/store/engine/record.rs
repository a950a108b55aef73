//! complete and release: a result becomes a row and a retry decision (`record`), which the
//! reaper's take-backs end in too.

use lanes_common::ids::{CampaignId, Token, TrialId};
use lanes_common::policy::admission::pause_until;
use lanes_common::policy::{ClaimGateInForce, Decision, NewResult, Placement, decide};
use lanes_common::row::{ExcludedReason, FailureKind, Outcome, Row, Status, StoreFields};
use lanes_common::schedule::{SchedulePhase, Trial};
use lanes_common::utc::{EpochMs, UtcTime};

use super::{
    block_total, emit, maybe_finish, meta_of, provider_of, resolve, set_stopping, trial_key,
    trial_queue,
};
use crate::store::api::*;
use crate::store::model::*;
use crate::store::tx::{R, Tx};

pub(super) async fn append_row(tx: &mut impl Tx, meta: &mut Meta, row: &Row) -> R<()> {
    tx.put_row(row).await?;
    meta.next_seq += 1;
    *meta.rows_by_status.entry(row.status).or_default() += 1;
    let mut block = tx.block(&row.block).await?;
    block.wall_s += row.wall_s;
    tx.put_block(&row.block, &block).await
}

pub(super) async fn mark_final(
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
        if trial.phase == SchedulePhase::First {
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
                meta.finished_block_walls.make_mut(),
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
pub(super) async fn dequeue(
    tx: &mut impl Tx,
    ts: &mut TrialState,
    trial: &Trial,
    meta: &Meta,
) -> R<()> {
    if let Some(q) = ts.queued.take() {
        match q.delayed_until {
            Some(at) => tx.del_delayed(at, &trial.trial_id).await?,
            None => {
                tx.del_ready(&trial_queue(meta, trial), trial_key(trial))
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
        tx.add_ready(&trial_queue(meta, trial), trial_key(trial))
            .await?;
        ts.queued = Some(Queued {
            delayed_until: None,
            placement,
            since_ms: now,
        });
    } else {
        tx.add_delayed(at, &trial.trial_id).await?;
        ts.queued = Some(Queued {
            delayed_until: Some(at),
            placement,
            since_ms: now,
        });
    }
    Ok(())
}

/// Turns a result into a row, applies the retry decision and answers.
pub(super) async fn record(
    tx: &mut impl Tx,
    meta: &mut Meta,
    trial: &Trial,
    outcome: Outcome,
    answer: bool,
    now: EpochMs,
) -> R<CompleteAck> {
    let tid = trial.trial_id.clone();
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

    if let Some(cost) = outcome.result.cost_usd {
        meta.spend_usd += cost;
    }
    if let Some(q) = &outcome.result.quota {
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
                    gate: ClaimGateInForce::rate_limit_pause(&provider, until),
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
        smoke: meta.spec.smoke.is_some(),
        retry_pass: ts.retry_pass,
        written_utc: UtcTime::from_ms(now),
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
        if let Some(c) = row.result.cost_usd {
            push_capped(
                meta.arm_costs
                    .make_mut()
                    .entry(trial.arm.clone())
                    .or_default(),
                c,
                ARM_STATS_CAP,
            );
        }
        push_capped(
            meta.arm_walls
                .make_mut()
                .entry(trial.arm.clone())
                .or_default(),
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
async fn winner_of(tx: &mut impl Tx, tid: &TrialId, attempts: u32) -> R<Option<u32>> {
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
    let trial = resolve(tx, meta, &token.trial_id)
        .await?
        .ok_or_else(|| StoreError::UnknownToken(token.clone()))?;
    let issued = tx
        .trial(&token.trial_id)
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
    outcome: &Outcome,
    now: EpochMs,
) -> R<CompleteAck> {
    let outcome = outcome.clone().validate()?;
    let mut meta = meta_of(tx, c).await?;
    let trial = check_token(tx, &meta, &outcome.token).await?;
    if let Some(ack) = tx
        .token(&trial.trial_id, outcome.token.attempt)
        .await?
        .and_then(|r| r.ack)
    {
        return Ok(ack);
    }
    let ack = record(tx, &mut meta, &trial, outcome, true, now).await?;
    tx.put_meta(meta).await?;
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
    let tid = &trial.trial_id;
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
    let mut outcome = Outcome::new(
        release.token.clone(),
        release.lane.clone(),
        release.host.clone(),
        status,
    );
    outcome.failure_kind = kind;
    outcome.record.error = release.detail.clone();
    let outcome = outcome.validate()?;
    let ack = record(tx, &mut meta, &trial, outcome, true, now).await?;
    tx.put_meta(meta).await?;
    Ok(ack)
}
