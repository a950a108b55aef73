//! claim: the claim gates, then the queues in schedule order, then one lease per trial of each
//! unit.

use std::collections::BTreeSet;

use lanes_common::ids::{CampaignId, Token};
use lanes_common::policy::admission::{BudgetGate, budget_admits, cutoff_admits, wall_estimate_s};
use lanes_common::policy::lease::hard_deadlines_ms;
use lanes_common::policy::{
    AdmissionVerdict, NoWorkReason, Placement, ProviderGate, admission_verdict,
};
use lanes_common::row::Phase;
use lanes_common::schedule::{SchedulePhase, Trial, from_position_key, trial_at};
use lanes_common::spec::Pairing;
use lanes_common::state::{CampaignState, StopReason};
use lanes_common::stats::median;
use lanes_common::utc::EpochMs;

use super::phase2::phase2_allows;
use super::{
    admission_input, emit, maybe_finish, meta_of, put_meta_if_changed, resolve, set_stopping,
    trial_by_key, trial_key, trial_queue, ttl_ms,
};
use crate::store::api::*;
use crate::store::model::*;
use crate::store::tx::{R, Tx};

/// How many entries of each queue a claim reads at first, beyond the units it wants: most
/// claims take the first entry, and each entry read costs a copy.
const FIRST_SCAN: usize = 4;
/// How many entries of each queue one claim reads at most at once: a claim whose candidates
/// are all filtered out (placement, cutoff) reads twice as many each time, up to this.
const SCAN: usize = 64;

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
            tx.add_ready(&trial_queue(meta, &trial), trial_key(&trial))
                .await?;
            tx.put_trial(&tid, &ts).await?;
        }
    }
}

/// A candidate unit from one queue (borrowed from the claim's list of queues: a claim reads
/// more candidates than it leases).
struct Candidate<'q> {
    queue: &'q Queue,
    key: u64,
}

pub(crate) async fn claim(
    tx: &mut impl Tx,
    c: &CampaignId,
    req: &ClaimRequest,
    now: EpochMs,
) -> R<ClaimOutcome> {
    let mut meta = meta_of(tx, c).await?;
    let before = meta.clone();
    let ttl = ttl_ms(&meta);
    // Last-seen times only need TTL precision: refreshing them at every claim would make
    // every idle claim a write.
    if meta
        .lanes_seen
        .get(req.lane.as_str())
        .is_none_or(|&t| now - t >= ttl / 2)
    {
        meta.lanes_seen.make_mut().insert(req.lane.to_string(), now);
    }
    // Checked first: the lanes seen are shared with the backend's copy until they change.
    if meta.lanes_seen.values().any(|t| now - *t > 10 * ttl) {
        meta.lanes_seen
            .make_mut()
            .retain(|_, t| now - *t <= 10 * ttl);
    }
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
        put_meta_if_changed(tx, meta, &before).await?;
        return Ok(no_work(NoWorkReason::NoMatchingArms));
    }
    // A worker that does not run this driver gets no lease it would have to refuse. Only a
    // running campaign says so: a stopped or done one answers that instead.
    if meta.state == CampaignState::Running
        && let Some(refusal) = req.offer.refusal(&meta.spec)
    {
        put_meta_if_changed(tx, meta, &before).await?;
        return Ok(no_work(NoWorkReason::DriverRefused { refusal }));
    }
    let all_arms = arms.len() == meta.spec.arms.len();
    let providers: Vec<String> = arms
        .iter()
        .map(|a| a.provider.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();

    promote_delayed(tx, &meta, now).await?;
    let verdict = admission_verdict(&admission_input(&meta, &providers, now));
    let gates = match verdict {
        AdmissionVerdict::Stop(reason) => {
            set_stopping(tx, &mut meta, reason, now).await?;
            maybe_finish(tx, &mut meta, now).await?;
            put_meta_if_changed(tx, meta, &before).await?;
            return Ok(no_work(NoWorkReason::Stopped {
                stop_reason: Some(reason),
            }));
        }
        AdmissionVerdict::Wait(reason) => {
            put_meta_if_changed(tx, meta, &before).await?;
            return Ok(no_work(reason));
        }
        AdmissionVerdict::Open(gates) => gates,
    };

    let go = |p: &str| gates.get(p) == Some(&ProviderGate::Go);
    let mut queues: Vec<Queue> = providers
        .iter()
        .filter(|p| go(p))
        .map(|p| Queue::provider(p))
        .collect();
    let group_ok = meta.spec.pairing == Pairing::Group
        && all_arms
        && meta.spec.arms.iter().all(|a| go(&a.provider));
    if group_ok {
        queues.push(Queue::Groups);
    }

    let mut assignments = Vec::new();
    let mut wait: Option<NoWorkReason> = None;
    let mut next_ms: Option<EpochMs> = tx.delayed_next().await?;
    // Candidates are read once per batch, merged across queues in key order. `horizon` is the
    // last key up to which the merge is complete: past it, a truncated queue may hold lower
    // keys than the buffer's, so the batch is read again.
    let mut buffer: std::collections::VecDeque<Candidate> = Default::default();
    let mut horizon = u64::MAX;
    let mut skipped: BTreeSet<(Queue, u64)> = BTreeSet::new();
    let mut scan = FIRST_SCAN;
    'units: while assignments.len() < req.max_units as usize {
        if buffer.front().is_none_or(|c| c.key > horizon) {
            buffer.clear();
            horizon = u64::MAX;
            let want = scan + (req.max_units as usize - assignments.len()) + skipped.len();
            scan = (scan * 2).min(SCAN);
            let mut batch = Vec::new();
            for q in &queues {
                let keys = tx.ready_first(q, want).await?;
                if keys.len() == want
                    && let Some(last) = keys.last()
                {
                    horizon = horizon.min(*last);
                }
                for key in keys {
                    if skipped.is_empty() || !skipped.contains(&(q.clone(), key)) {
                        batch.push(Candidate { queue: q, key });
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
        if phase == SchedulePhase::Second {
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
        // A single trial is built once: to check its placement, then to lease it.
        let mut known = None;
        if cand.queue.unit() == Unit::Trial {
            let trial = trial_by_key(tx, &meta, cand.key).await?;
            let tid = trial.trial_id.clone();
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
            known = Some(trial);
        }
        match lease_unit(tx, &mut meta, &cand, known, req, now).await? {
            Leased::Unit(a) => assignments.push(*a),
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
    let done = meta.state == CampaignState::Done;
    put_meta_if_changed(tx, meta, &before).await?;
    if !assignments.is_empty() {
        return Ok(ClaimOutcome::Assigned(assignments));
    }
    if done {
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
    Unit(Box<Assignment>),
    /// The budget cannot take it while reservations are open.
    Budget,
    /// The budget can never take it: what is left is below its guard and nothing is reserved.
    BudgetSpent,
    /// It would not end before the cutoff.
    Cutoff {
        estimate_s: f64,
    },
}

/// Leases one unit, unless the budget or the cutoff refuses it. `known`: the unit's trial,
/// if the caller built it already (a single trial).
async fn lease_unit(
    tx: &mut impl Tx,
    meta: &mut Meta,
    cand: &Candidate<'_>,
    known: Option<Trial>,
    req: &ClaimRequest,
    now: EpochMs,
) -> R<Leased> {
    let n = meta.spec.arms.len() as u32;
    let mut trials = Vec::new();
    match cand.queue.unit() {
        Unit::Group => {
            let (_, tp, run, _) = from_position_key(cand.key);
            let task = tx.task(tp).await?;
            for slot in 0..n {
                let t = trial_at(&meta.spec, meta.n_tasks as usize, tp, &task, run, slot);
                let done = tx
                    .trial(&t.trial_id)
                    .await?
                    .is_some_and(|s| s.final_mark.is_some())
                    || tx.lease(&t.trial_id).await?.is_some();
                if !done {
                    trials.push(t);
                }
            }
        }
        Unit::Trial => trials.push(match known {
            Some(t) => t,
            None => trial_by_key(tx, meta, cand.key).await?,
        }),
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
    tx.del_ready(cand.queue, cand.key).await?;
    let paired = cand.queue.unit() == Unit::Group;
    let ttl = ttl_ms(meta);
    let timeouts: Vec<u32> = trials.iter().map(|t| t.timeout_s).collect();
    let hard = hard_deadlines_ms(now, &timeouts);
    let mut assigned = Vec::new();
    for ((trial, hard), reserved) in trials.into_iter().zip(hard).zip(reserve) {
        let tid = trial.trial_id.clone();
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
    Ok(Leased::Unit(Box::new(Assignment {
        campaign: meta.spec.id.clone(),
        paired,
        trials: assigned,
        lease_ttl_ms: u64::try_from(ttl).unwrap_or(0),
        driver: UnitDriver::of(&meta.spec),
    })))
}
