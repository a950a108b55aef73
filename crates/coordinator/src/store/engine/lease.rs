//! What happens to a lease besides its completion: renew, forfeit, and reap.

use lanes_common::ids::{CampaignId, Token, TrialId};
use lanes_common::row::{FailureKind, Outcome, Phase, Status};
use lanes_common::state::CampaignState;
use lanes_common::utc::EpochMs;

use super::record::record;
use super::{emit, meta_of, put_meta_if_changed, resolve, ttl_ms};
use crate::store::api::*;
use crate::store::model::*;
use crate::store::tx::{R, Tx};

/// Due leases one reap pass takes; the reaper runs another pass while a pass was full.
const REAP_BATCH: usize = 1024;

pub(crate) async fn renew(
    tx: &mut impl Tx,
    c: &CampaignId,
    tokens: &[(Token, Phase)],
    now: EpochMs,
) -> R<Vec<(Token, RenewState)>> {
    let mut meta = meta_of(tx, c).await?;
    let before = meta.clone();
    let ttl = ttl_ms(&meta);
    let mut out = Vec::with_capacity(tokens.len());
    for (token, phase) in tokens {
        let tid = &token.trial_id;
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
                // TTL precision is enough (as for claims): a renewal that only extends a lease
                // then leaves the campaign's meta alone.
                if meta
                    .lanes_seen
                    .get(lease.lane.as_str())
                    .is_none_or(|&t| now - t >= ttl / 2)
                {
                    meta.lanes_seen
                        .make_mut()
                        .insert(lease.lane.to_string(), now);
                }
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
    put_meta_if_changed(tx, meta, &before).await?;
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
        let tid = &token.trial_id;
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
    tx.put_meta(meta).await?;
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
    tid: &TrialId,
    lease: &Lease,
    take: TakeBack,
    now: EpochMs,
) -> R<()> {
    let token = Token {
        trial_id: tid.clone(),
        attempt: lease.attempt,
    };
    let (status, kind, why) = match take {
        TakeBack::Cancel(why) => (Status::Cancelled, None, why),
        TakeBack::Expire(why) => (Status::InfraError, Some(FailureKind::LeaseExpired), why),
    };
    let trial = resolve(tx, meta, tid)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("leased trial {tid} not in schedule")))?;
    let mut outcome = Outcome::new(token, lease.lane.clone(), lease.host.clone(), status);
    outcome.failure_kind = kind;
    outcome.worker = lease.worker.clone();
    outcome.record.error = Some(why.to_owned());
    outcome.record.lease_lost = true;
    record(tx, meta, &trial, outcome, false, now).await?;
    Ok(())
}

pub(crate) async fn reap(tx: &mut impl Tx, c: &CampaignId, now: EpochMs) -> R<ReapReport> {
    let mut meta = meta_of(tx, c).await?;
    let before = meta.clone();
    let grace = i64::from(meta.spec.ops.publish_grace_s) * 1000;
    let mut report = ReapReport::default();
    let due = tx
        .deadlines_due(now - crate::store::REAP_GRACE_MS - 1, REAP_BATCH)
        .await?;
    report.more = due.len() == REAP_BATCH;
    for (at, tid) in due {
        let Some(mut lease) = tx.lease(&tid).await? else {
            tx.del_deadline(at, &tid).await?;
            continue;
        };
        if lease.reap_at() != at {
            // A stale entry: the lease is indexed where it is due (a store keeps one entry per
            // trial, so this may have been the lease's only one).
            tx.del_deadline(at, &tid).await?;
            tx.add_deadline(lease.reap_at(), &tid).await?;
            continue;
        }
        let take = match unstarted(&lease, &meta) {
            Some(take) => take,
            None if lease.phase.is_after_evaluate() && now < lease.deadline_ms + grace => {
                // Its outcome is probably in an outbox: look again when the grace ends, and
                // out of the way of leases that are due now. Indexed so that it is due
                // exactly when the grace ends (a pass takes entries REAP_GRACE_MS past their
                // time).
                let until = lease.deadline_ms + grace - crate::store::REAP_GRACE_MS;
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
    report.leases_open = meta.leases_open;
    put_meta_if_changed(tx, meta, &before).await?;
    Ok(report)
}
