//! The coordinator's own types (store answers) on the wire. Domain ↔ proto conversions of the
//! shared model live in `lanes_common::convert`.

use lanes_common::ids::{CampaignId, Token};
use lanes_common::proto as pb;
use lanes_common::spec::DriverKind;
use lanes_common::trace::TraceParent;

use crate::store::{
    Assignment, CampaignStatus, Event, EventKind, InFlight, RenewState, Store, UnitDriver,
};

fn token(t: &Token) -> Option<pb::Token> {
    Some(pb::Token::from(t))
}

/// The store's link to its Redis master, for a Redis store.
pub(crate) fn redis_link(store: &dyn Store) -> Option<pb::RedisLink> {
    store.redis_link().map(|l| pb::RedisLink {
        master: l.master,
        failovers: l.failovers,
        wait_timeouts: l.wait_timeouts,
    })
}

/// A campaign's status; `now_ms` turns deadlines into durations.
pub(crate) fn status(s: CampaignStatus, now_ms: i64) -> pb::CampaignStatus {
    pb::CampaignStatus {
        id: s.id.to_string(),
        created_utc: lanes_common::utc::format_rfc3339(s.created_ms),
        state: pb::CampaignState::from(s.state) as i32,
        stop_reason: s.stop_reason.map_or(0, |r| pb::StopReason::from(r) as i32),
        stop_mode: s.stop_mode.map_or(0, |m| pb::StopMode::from(m) as i32),
        trials_total: s.trials_total,
        trials_final: s.trials_final,
        trials_counted: s.trials_counted,
        trials_excluded: s.trials_excluded,
        trials_not_started: s.trials_not_started,
        phase1_total: s.phase1_total,
        phase1_final: s.phase1_final,
        rows_total: s.rows_total,
        events_total: s.events_total,
        counts_by_status: s
            .rows_by_status
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        blocks_total: s.blocks_total,
        blocks_complete: s.blocks_complete,
        spend_usd: s.spend_usd,
        reserved_usd: s.reserved_usd,
        gates: s.gates.into_iter().map(pb::GateInForce::from).collect(),
        in_flight: s
            .in_flight
            .into_iter()
            .map(|f: InFlight| pb::InFlight {
                token: token(&f.token),
                lane: f.lane.into(),
                host: f.host.into(),
                phase: pb::Phase::from(f.phase) as i32,
                deadline_in_ms: f.deadline_ms - now_ms,
            })
            .collect(),
        spec_hash: s.spec_hash,
        // Filled by the Get handler from this replica's workers.
        refused_by: Vec::new(),
        redis_link: None,
    }
}

/// One Watch event.
pub(crate) fn event(e: Event) -> pb::WatchEvent {
    use pb::watch_event::Event as W;
    let ev = match e.kind {
        EventKind::AttemptStarted {
            token: t,
            lane,
            host,
        } => W::AttemptStarted(pb::AttemptStarted {
            token: token(&t),
            lane: lane.into(),
            host: host.into(),
        }),
        EventKind::AttemptPhase { token: t, phase } => W::AttemptPhase(pb::AttemptPhase {
            token: token(&t),
            phase: pb::Phase::from(phase) as i32,
        }),
        EventKind::AttemptFinished {
            token: t,
            status,
            failure_kind,
            counted,
            row_seq,
        } => W::AttemptFinished(pb::AttemptFinished {
            token: token(&t),
            status: pb::Status::from(status) as i32,
            failure_kind: failure_kind.map_or(0, |k| pb::FailureKind::from(k) as i32),
            counted,
            seq: row_seq,
        }),
        EventKind::TrialFinal {
            trial_id,
            counted,
            excluded_reason,
        } => W::TrialFinal(pb::TrialFinal {
            trial_id: trial_id.to_string(),
            counted,
            excluded: excluded_reason.is_some(),
            excluded_reason: excluded_reason.map(|r| r.to_string()).unwrap_or_default(),
        }),
        EventKind::GatePaused { gate: g } => W::GatePaused(pb::GatePaused {
            gate: Some(pb::GateInForce::from(g)),
        }),
        EventKind::CampaignStopping { reason } => W::CampaignEnded(pb::CampaignEnded {
            state: pb::CampaignState::Stopping as i32,
            stop_reason: pb::StopReason::from(reason) as i32,
        }),
        EventKind::CampaignStopped { reason } => W::CampaignEnded(pb::CampaignEnded {
            state: pb::CampaignState::Stopped as i32,
            stop_reason: reason.map_or(0, |r| pb::StopReason::from(r) as i32),
        }),
        EventKind::CampaignDone => W::CampaignEnded(pb::CampaignEnded {
            state: pb::CampaignState::Done as i32,
            stop_reason: 0,
        }),
        EventKind::CampaignResumed { .. } => W::CampaignEnded(pb::CampaignEnded {
            state: pb::CampaignState::Running as i32,
            stop_reason: 0,
        }),
    };
    pb::WatchEvent {
        cursor: e.seq.to_string(),
        event: Some(ev),
    }
}

/// The driver part of an assignment. Env values are forwarded as written (`$NAME` references
/// are resolved by the worker), never logged.
pub(crate) fn driver(d: UnitDriver) -> pb::DriverSpec {
    let container = matches!(d.driver.kind, DriverKind::Container(_));
    let (command, name, sim_json) = match &d.driver.kind {
        DriverKind::Command(cmd) => (cmd.clone(), String::new(), String::new()),
        DriverKind::Named(name) => (Vec::new(), name.to_string(), String::new()),
        DriverKind::Sim(sim) => (
            Vec::new(),
            String::new(),
            serde_json::to_string(sim).unwrap_or_default(),
        ),
        DriverKind::Container(_) => (Vec::new(), String::new(), String::new()),
    };
    pb::DriverSpec {
        command,
        name,
        sim_json,
        container,
        secret_payload_keys: d.driver.secret_payload_keys,
        env: d.driver.env.into_iter().collect(),
        expect: d.expect.into_iter().collect(),
    }
}

/// An assignment for `lane`.
pub(crate) fn assignment(a: Assignment, lane: &str) -> pb::Assignment {
    let campaign = a.campaign.clone();
    pb::Assignment {
        campaign: a.campaign.to_string(),
        lane: lane.to_owned(),
        trials: a
            .trials
            .into_iter()
            .map(|t| pb::AssignedTrial {
                traceparent: TraceParent::of_attempt(
                    campaign.as_str(),
                    t.token.trial_id.as_str(),
                    t.token.attempt,
                )
                .to_string(),
                token: token(&t.token),
                task: t.trial.task.to_string(),
                arm: t.trial.arm.to_string(),
                run_index: t.trial.run_index,
                phase: u32::from(t.trial.phase.number()),
                block: t.trial.block.to_string(),
                order_index: t.trial.order_index,
                arm_slot: t.trial.arm_slot,
                seed: t.trial.seed,
                payload_json: t.payload_json,
                arm_config_json: t.arm_config.to_string(),
                timeout_s: t.trial.timeout_s,
                max_turns: t.trial.max_turns,
                max_cost_usd: t.trial.max_cost_usd,
                hard_deadline_in_ms: t.hard_deadline_in_ms,
                paired: a.paired,
            })
            .collect(),
        gate: a.driver.gate,
        driver: Some(driver(a.driver)),
        lease_ttl_ms: a.lease_ttl_ms,
    }
}

/// A renewal answer.
pub(crate) fn renewal(campaign: &CampaignId, t: &Token, state: RenewState) -> pb::TokenRenewal {
    pb::TokenRenewal {
        token: token(t),
        state: pb::RenewState::from(state) as i32,
        campaign: campaign.to_string(),
    }
}
