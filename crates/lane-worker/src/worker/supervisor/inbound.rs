//! What the supervisor does with each coordinator message: registration (re-announce,
//! replay, forfeit, then ask for work), assignments, no-work hints, renewals, acks and GoAway.

use std::time::Duration;

use ractor::ActorRef;

use lanes_common::convert::{lease_of, token_with_lease};
use lanes_common::ids::{AttemptTag, CampaignId, Token};
use lanes_common::proto as pb;
use lanes_common::proto::coordinator_message::Msg as Out;
use lanes_common::proto::worker_message::Msg as In;
use lanes_common::row::Phase;
use lanes_common::state::RenewState;

use super::InFlight;
use super::{SupMsg, SupState, Supervisor};
use crate::ack_log::AckLine;
use crate::worker::lane::{LaneMsg, LeaseNews};

impl Supervisor {
    pub(super) fn route_renewals(state: &SupState, renewals: Vec<pb::TokenRenewal>) {
        for r in renewals {
            let (Ok(campaign), Some(Ok(token))) =
                (CampaignId::new(r.campaign), r.token.map(Token::try_from))
            else {
                continue;
            };
            let t = AttemptTag::new(campaign, token);
            let news = match pb::RenewState::try_from(r.state)
                .map_err(|_| ())
                .and_then(|s| RenewState::try_from(s).map_err(|_| ()))
            {
                Ok(RenewState::Renewed) => continue,
                Ok(RenewState::Lost) => LeaseNews::Lost,
                Ok(RenewState::Cancel) => LeaseNews::Cancel,
                Err(()) => {
                    tracing::warn!(token = %t, state = r.state, "renewal with an unknown state ignored");
                    continue;
                }
            };
            if let Some(f) = state.in_flight.get(&t)
                && let Some(lane) = state.lanes.get(&f.lane)
            {
                let _ = lane.cast(LaneMsg::Renewal { tag: t, news });
            }
        }
    }

    pub(super) async fn inbound(&self, myself: &ActorRef<SupMsg>, state: &mut SupState, m: Out) {
        match m {
            Out::Registered(_) => {
                // Re-announce what is in flight, then replay, then ask for work.
                let in_flight: Vec<pb::TokenPhase> = state
                    .in_flight
                    .iter()
                    .map(|(t, f)| pb::TokenPhase {
                        token: Some(token_with_lease(&t.token, &f.lease)),
                        phase: pb::Phase::from(f.phase) as i32,
                        campaign: t.campaign.to_string(),
                        traceparent: f.traceparent.clone(),
                    })
                    .collect();
                if !in_flight.is_empty()
                    && Self::send(state, In::Reconnect(pb::Reconnect { in_flight })).await
                {
                    state
                        .unacked_since
                        .get_or_insert_with(tokio::time::Instant::now);
                }
                self.replay(state).await;
                if !state.orphans.is_empty() {
                    tracing::info!(
                        leases = state.orphans.len(),
                        "forfeiting the leases a previous process of this worker held and cannot publish"
                    );
                    let tokens = state
                        .orphans
                        .iter()
                        .map(|(t, lease)| pb::CampaignToken {
                            token: Some(token_with_lease(&t.token, lease)),
                            campaign: t.campaign.to_string(),
                        })
                        .collect();
                    Self::send(state, In::Forfeit(pb::Forfeit { tokens })).await;
                }
                state.registered = true;
                Self::tell_status(state, true).await;
                // A new session answers afresh.
                state.ask_after.clear();
                for lane in state.idle.clone() {
                    self.ask_work(state, lane).await;
                }
            }
            Out::Assignment(a) => {
                let Ok(campaign) = CampaignId::new(&a.campaign) else {
                    return;
                };
                state.outstanding.remove(&a.lane);
                if state.draining || !state.lanes.contains_key(&a.lane) {
                    self.give_back(myself, state, a);
                    return;
                }
                state.idle.remove(&a.lane);
                let mut a = a;
                for t in &mut a.trials {
                    let lease = lease_of(t.token.as_ref());
                    // The lane, its records and its driver never see the secret.
                    if let Some(wire) = t.token.as_mut() {
                        wire.lease.clear();
                    }
                    if let Some(tok) = t.token.clone().and_then(|t| Token::try_from(t).ok()) {
                        Self::track(
                            state,
                            AttemptTag::new(campaign.clone(), tok),
                            InFlight {
                                lease,
                                lane: a.lane.clone(),
                                phase: Phase::Assigned,
                                ttl: Duration::from_millis(a.lease_ttl_ms),
                                // The claim's, until the lane's attempt span starts.
                                traceparent: t.traceparent.clone(),
                                span: None,
                            },
                        );
                    }
                }
                if let Some(lane) = state.lanes.get(&a.lane) {
                    let _ = lane.cast(LaneMsg::Assign(a));
                }
            }
            Out::NoWork(w) => {
                state.outstanding.remove(&w.lane);
                let me = myself.clone();
                let after = Duration::from_millis(w.retry_after_ms.clamp(50, 30_000));
                tracing::debug!(lane = %w.lane, reason = %w.detail, "no work");
                // Honour the hint: the tick does not ask for this lane before it is due.
                state
                    .ask_after
                    .insert(w.lane.clone(), tokio::time::Instant::now() + after);
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    let _ = me.cast(SupMsg::Retry(w.lane));
                });
            }
            Out::HeartbeatAck(a) => {
                state.unacked_since = None;
                Self::route_renewals(state, a.tokens)
            }
            Out::ReconnectAck(a) => {
                state.unacked_since = None;
                Self::route_renewals(state, a.tokens)
            }
            Out::Cancel(c) => Self::route_renewals(
                state,
                vec![pb::TokenRenewal {
                    token: c.token,
                    state: pb::RenewState::from(RenewState::Cancel) as i32,
                    campaign: c.campaign,
                }],
            ),
            Out::OutcomeAck(a) => {
                if let (Ok(c), Some(Ok(t))) =
                    (CampaignId::new(&a.campaign), a.token.map(Token::try_from))
                {
                    let t = AttemptTag::new(c, t);
                    state.acks.record(&AckLine::new(&t, a.seq, a.counted));
                    // Acknowledged from memory: the store has it, so its record is final.
                    if let Some(e) = state.unpersisted.remove(&t) {
                        e.seal_record();
                    }
                    // Emptied here, as the journal entry below: cutting a slot file to one
                    // byte costs less than handing it to a blocking thread.
                    if state.pending.remove(&t).is_some()
                        && let Err(e) = state.outbox.remove(&t)
                    {
                        tracing::error!(error = %e, "cannot remove an acknowledged outcome");
                    }
                    if let Some(span) = state.in_flight.get(&t).and_then(|f| f.span.as_ref()) {
                        span.record("lanes.counted", a.counted);
                    }
                    // Published attempts stay in flight (renewed) until their ack.
                    Self::untrack(state, &t);
                    // A replay of a previous process's outcome: its journal entry goes too.
                    let _ = state.journal.remove(&t);
                }
            }
            Out::OutcomeError(e) => {
                tracing::warn!(reason = %e.reason, retryable = e.retryable, "outcome not committed; kept in the outbox");
                if !e.retryable {
                    // The store refuses it for good: keep it aside for a human, never drop it.
                    if let (Ok(c), Some(Ok(t))) =
                        (CampaignId::new(&e.campaign), e.token.map(Token::try_from))
                    {
                        let t = AttemptTag::new(c, t);
                        state.pending.remove(&t);
                        let (t2, reason) = (t.clone(), e.reason.clone());
                        Self::outbox_task(state, "set a refused outcome aside", move |o| {
                            o.set_aside(&t2, &reason)
                        });
                        Self::untrack(state, &t);
                        let _ = state.journal.remove(&t);
                    }
                    return;
                }
                // One replay of the whole outbox after the hint; the store dedupes per token.
                let at = tokio::time::Instant::now()
                    + Duration::from_millis(e.retry_after_ms.clamp(100, 30_000));
                state.replay_at = Some(state.replay_at.map_or(at, |r| r.min(at)));
            }
            Out::ForfeitAck(a) => {
                for ct in a.tokens {
                    if let (Ok(c), Some(Ok(t))) =
                        (CampaignId::new(ct.campaign), ct.token.map(Token::try_from))
                    {
                        let t = AttemptTag::new(c, t);
                        state.orphans.remove(&t);
                        if let Err(e) = state.journal.remove(&t) {
                            tracing::warn!(error = %e, "cannot remove a lease journal entry");
                        }
                    }
                }
            }
            Out::GoAway(g) => {
                tracing::info!(reason = %g.reason, "coordinator asked to reconnect");
                state.tx = None;
                state.end_session = None;
                state.unacked_since = None;
                state.outstanding.clear();
                state.registered = false;
            }
        }
    }
}
