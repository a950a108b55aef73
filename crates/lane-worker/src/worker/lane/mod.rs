//! The Lane actor: one per VM slot. It runs one trial, or one run group back to back in slot
//! order, by feeding the lifecycle machine and executing its effects. Driver calls, the
//! attempt record and the outbox hand-off run in spawned tasks whose results come back as
//! messages, so the lane always answers cancel, ping and renewal news.
//!
//! - [`admit`]: the attempt record, the driver process and its identity pins;
//! - [`effects`]: what each effect of the machine does;
//! - [`outcome`]: the verdict turned into the outcome that is published (pure).

mod admit;
mod effects;
mod outcome;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::{Value, json};

use lanes_common::ids::{AttemptTag, CampaignId, LaneName, Token};
use lanes_common::proto as pb;
use lanes_common::row::{Phase, PhaseWalls};
use lanes_common::trace::TraceParent;
use lanes_common::utc::UtcTime;

use super::WorkerConfig;
use super::supervisor::SupMsg;
use crate::lifecycle::{Attempt, AttemptSpec, Effect, Event};
pub(crate) use admit::DriverSlot;

pub(crate) enum LaneMsg {
    Assign(pb::Assignment),
    /// News about the attempt with this tag: a driver call's result, a timer, the hand-off.
    Event {
        tag: AttemptTag,
        event: Event,
    },
    /// What a heartbeat said about one of this lane's leases.
    Renewal {
        tag: AttemptTag,
        news: LeaseNews,
    },
    Ping(RpcReplyPort<()>),
    /// Cancel whatever runs (worker shutdown past its grace).
    CancelAll,
    /// Start the next trial of the unit (or ask for work).
    Next,
    /// Boot or reset gave this attempt a guest health URL.
    HealthUrl {
        tag: AttemptTag,
        url: String,
    },
    /// Boot pinned this attempt's environment (its image, its task's digest).
    EnvPins {
        tag: AttemptTag,
        pins: std::collections::BTreeMap<String, String>,
    },
    /// The spare driver started (or could not): the lane asks for work now.
    Warmed(Option<Box<admit::Spare>>),
    /// Admission finished: the driver slot comes back with its result.
    Admitted {
        tag: AttemptTag,
        slot: Box<DriverSlot>,
        event: Event,
    },
    /// Test hook: the handler blocks this long, as a wedged lane would.
    #[cfg(test)]
    Wedge(std::time::Duration),
    /// Test hook: the handler fails, as a lane with a bug would.
    #[cfg(test)]
    Crash,
}

/// What the coordinator said about a lease, besides "renewed".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseNews {
    /// Reaped, superseded or revoked: stop work that has not been evaluated.
    Lost,
    /// A cancel stop: cancel the attempt and release it.
    Cancel,
}

pub(crate) struct LaneActor {
    pub(crate) name: LaneName,
    pub(crate) config: Arc<WorkerConfig>,
    pub(crate) http: crate::http::HttpClient,
    /// Every lease secret the worker holds: masked in what the driver says.
    pub(crate) leases: crate::secrets::HeldLeases,
    /// Where the lane finds task folders by digest.
    pub(crate) folders: Arc<crate::task_folders::TaskFolders>,
    pub(crate) supervisor: ActorRef<SupMsg>,
}

/// The unit being run.
struct Unit {
    campaign: CampaignId,
    driver: pb::DriverSpec,
    gate: bool,
    remaining: VecDeque<pb::AssignedTrial>,
    /// Later trials of the group whose lease the store took back or asked to cancel before
    /// they started: the lane never boots them.
    dropped: HashMap<AttemptTag, LeaseNews>,
}

/// The attempt being run.
struct Current {
    trial: pb::AssignedTrial,
    tag: AttemptTag,
    /// `None` only while an event is being applied.
    machine: Option<Attempt>,
    started_utc: UtcTime,
    phase_started: Instant,
    phase: Phase,
    walls: PhaseWalls,
    agent_timer: Option<tokio::task::JoinHandle<()>>,
    /// The guest's health URL from boot or reset, and the task watching it.
    health_url: Option<String>,
    /// What boot pinned of this attempt's environment, added to the driver's pins in its row.
    env_pins: std::collections::BTreeMap<String, String>,
    watchdog: Option<tokio::task::JoinHandle<()>>,
    /// Set when the agent runs behind a task API: flipping it cancels the API task.
    http_cancel: Option<tokio::sync::watch::Sender<bool>>,
    /// The `attempt` span (a child of the coordinator's `claim`), and the span of the current
    /// phase (its child).
    span: tracing::Span,
    phase_span: tracing::Span,
    /// The attempt span's traceparent, sent back with every message about the attempt (empty
    /// when spans are not exported).
    traceparent: String,
    /// The worker's leases this attempt masks in what its driver says: those held at any
    /// time since it began.
    leases: crate::secrets::LeaseWatch,
}

impl Current {
    /// Feeds one event to the machine and returns what it decided.
    fn apply(&mut self, event: Event) -> Vec<Effect> {
        let machine = self
            .machine
            .take()
            .expect("the machine is never left taken");
        let (machine, effects) = machine.next(event);
        self.machine = Some(machine);
        effects
    }

    /// Adds the time spent in the current phase to its wall.
    fn record_wall(&mut self) {
        let s = self.phase_started.elapsed().as_secs_f64();
        let w = &mut self.walls;
        match self.phase {
            Phase::Assigned | Phase::Admit => w.admit_s += s,
            Phase::Boot => w.boot_s += s,
            Phase::Reset => w.reset_s += s,
            Phase::Gate => w.gate_s += s,
            Phase::Agent => w.agent_s += s,
            Phase::Evaluate => w.evaluate_s += s,
            Phase::Publish => w.publish_s += s,
        }
        self.phase_started = Instant::now();
    }
}

/// The span of one lifecycle phase, a child of the attempt span.
fn phase_span(parent: &tracing::Span, p: Phase) -> tracing::Span {
    use lanes_telemetry::TARGET;
    match p {
        Phase::Assigned | Phase::Admit => {
            tracing::info_span!(target: TARGET, parent: parent, "admit")
        }
        Phase::Boot => tracing::info_span!(target: TARGET, parent: parent, "boot"),
        Phase::Reset => tracing::info_span!(target: TARGET, parent: parent, "reset"),
        Phase::Gate => tracing::info_span!(target: TARGET, parent: parent, "gate"),
        Phase::Agent => tracing::info_span!(target: TARGET, parent: parent, "agent"),
        Phase::Evaluate => tracing::info_span!(target: TARGET, parent: parent, "evaluate"),
        Phase::Publish => tracing::info_span!(target: TARGET, parent: parent, "publish"),
    }
}

/// The traceparent of `span` when this process exports spans (a span that is never exported
/// must not become anyone's parent).
pub(super) fn exported_traceparent(span: &tracing::Span) -> Option<String> {
    lanes_telemetry::exporting()
        .then(|| lanes_telemetry::traceparent_of(span))
        .flatten()
        .map(|tp| tp.to_string())
}

/// The `attempt` span: a child of the coordinator's `claim` span when the assignment names
/// one, with the attempt's identity; its outcome is recorded when it is published.
fn attempt_span(
    campaign: &CampaignId,
    t: &pb::AssignedTrial,
    token: &Token,
    lane: &str,
    host: &str,
) -> tracing::Span {
    let model = parse_json(&t.arm_config_json)
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let span = tracing::info_span!(
        target: lanes_telemetry::TARGET,
        "attempt",
        lanes.campaign = %campaign,
        lanes.trial_id = %token.trial_id,
        lanes.task = %t.task,
        lanes.arm = %t.arm,
        lanes.run_index = t.run_index,
        lanes.attempt = token.attempt,
        lanes.lane = %lane,
        lanes.host = %host,
        gen_ai.request.model = model,
        lanes.status = tracing::field::Empty,
        lanes.failure_kind = tracing::field::Empty,
        lanes.score = tracing::field::Empty,
        lanes.counted = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
    );
    match TraceParent::parse_opt(&t.traceparent) {
        Ok(Some(tp)) => lanes_telemetry::set_parent(&span, &tp),
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, trial = %token, "the assignment's traceparent is malformed: the attempt starts its own trace")
        }
    }
    span
}

pub(crate) struct LaneState {
    slot: DriverSlot,
    unit: Option<Unit>,
    current: Option<Current>,
}

fn now_utc() -> UtcTime {
    UtcTime::from_ms(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
    )
}

fn parse_json(s: &str) -> Value {
    if s.is_empty() {
        json!({})
    } else {
        serde_json::from_str(s).unwrap_or(json!({}))
    }
}

/// The task API an arm's agent runs behind, if its config names one.
fn task_api(arm_config: &Value) -> Option<String> {
    arm_config
        .get("http_agent")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

impl LaneActor {
    /// Starts the next trial of the unit, or reports the lane idle.
    async fn next_trial(&self, myself: &ActorRef<LaneMsg>, state: &mut LaneState) {
        let Some(unit) = state.unit.as_mut() else {
            let _ = self
                .supervisor
                .cast(SupMsg::WantWork(self.name.to_string()));
            return;
        };
        let Some(trial) = unit.remaining.pop_front() else {
            state.unit = None;
            let _ = self
                .supervisor
                .cast(SupMsg::WantWork(self.name.to_string()));
            return;
        };
        let Some(token) = trial.token.clone().and_then(|t| Token::try_from(t).ok()) else {
            tracing::error!("assignment without a valid token");
            let _ = myself.cast(LaneMsg::Next);
            return;
        };
        let tag = AttemptTag::new(unit.campaign.clone(), token.clone());
        match unit.dropped.remove(&tag) {
            Some(LeaseNews::Lost) => {
                tracing::info!(attempt = %tag, "lease lost before the trial started: not running it");
                let _ = self.supervisor.cast(SupMsg::Finished {
                    tag,
                    published: false,
                });
                let _ = myself.cast(LaneMsg::Next);
                return;
            }
            Some(LeaseNews::Cancel) => {
                tracing::info!(attempt = %tag, "cancelled before the trial started: released unstarted");
                let _ = self.supervisor.cast(SupMsg::GiveBack(pb::Assignment {
                    campaign: unit.campaign.to_string(),
                    lane: self.name.to_string(),
                    trials: vec![trial],
                    ..Default::default()
                }));
                let _ = myself.cast(LaneMsg::Next);
                return;
            }
            None => {}
        }
        let span = attempt_span(
            &unit.campaign,
            &trial,
            &token,
            self.name.as_str(),
            self.config.host.as_str(),
        );
        // Without an exporter here the attempt span never reaches a collector: the claim's
        // context is what ties the coordinator's commit span (and the driver's spans) to the
        // attempt's trace.
        let traceparent = exported_traceparent(&span).unwrap_or_else(|| trial.traceparent.clone());
        let first_phase = phase_span(&span, Phase::Admit);
        let (machine, effects) = Attempt::start(AttemptSpec {
            gate: unit.gate,
            max_turns: trial.max_turns,
            task_api: task_api(&parse_json(&trial.arm_config_json)).is_some(),
        });
        state.current = Some(Current {
            trial,
            tag,
            machine: Some(machine),
            started_utc: now_utc(),
            phase_started: Instant::now(),
            phase: Phase::Admit,
            walls: PhaseWalls::default(),
            agent_timer: None,
            health_url: None,
            env_pins: Default::default(),
            watchdog: None,
            http_cancel: None,
            span,
            phase_span: first_phase,
            traceparent,
            leases: self.leases.watch(),
        });
        self.run_effects(myself, state, effects).await;
    }

    /// Feeds an event to the current attempt, if it is the one the event is about.
    async fn feed(
        &self,
        myself: &ActorRef<LaneMsg>,
        state: &mut LaneState,
        tag: Option<&AttemptTag>,
        event: Event,
    ) {
        let Some(cur) = state.current.as_mut() else {
            return;
        };
        if tag.is_some_and(|t| *t != cur.tag) {
            // News about an attempt that already ended.
            return;
        }
        let overdue = event == Event::CancelOverdue;
        let effects = cur.apply(event);
        if overdue {
            if effects.contains(&Effect::RestartDriver) {
                tracing::warn!(lane = %self.name, "the agent ignored its cancel: killing the driver");
            } else if cur.phase == Phase::Agent && cur.http_cancel.is_some() {
                tracing::warn!(lane = %self.name, "the task api did not confirm the cancel in time");
            }
        }
        self.run_effects(myself, state, effects).await;
    }

    /// A renewal about a lease of this lane: the running attempt's, or a later trial's.
    async fn renewal(
        &self,
        myself: &ActorRef<LaneMsg>,
        state: &mut LaneState,
        tag: AttemptTag,
        news: LeaseNews,
    ) {
        let Some(cur) = state.current.as_ref() else {
            return;
        };
        if cur.tag != tag {
            // A later trial of the group, not started yet: remember not to boot it.
            if let Some(unit) = state.unit.as_mut().filter(|u| u.campaign == tag.campaign) {
                let waiting = unit.remaining.iter().any(|t| {
                    t.token
                        .clone()
                        .and_then(|t| Token::try_from(t).ok())
                        .as_ref()
                        == Some(&tag.token)
                });
                if waiting {
                    unit.dropped.insert(tag, news);
                }
            }
            return;
        }
        let event = match news {
            LeaseNews::Lost => Event::LeaseLost,
            LeaseNews::Cancel => Event::CancelRequested,
        };
        self.feed(myself, state, None, event).await;
    }
}

impl Actor for LaneActor {
    type Msg = LaneMsg;
    type State = LaneState;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<LaneMsg>,
        _args: (),
    ) -> Result<LaneState, ActorProcessingErr> {
        Ok(LaneState {
            slot: DriverSlot {
                restarts: self.config.metrics.clone(),
                ..DriverSlot::default()
            },
            unit: None,
            current: None,
        })
    }

    /// Starts the lane's spare driver off the actor; the lane asks for work once it is up,
    /// so no lease waits for a process to start.
    async fn post_start(
        &self,
        myself: ActorRef<LaneMsg>,
        _state: &mut LaneState,
    ) -> Result<(), ActorProcessingErr> {
        let (config, lane) = (self.config.clone(), self.name.clone());
        tokio::spawn(async move {
            let spare = admit::start_spare(&config, lane.as_str())
                .await
                .map(Box::new);
            // The lane stopped meanwhile: its spare must not outlive it.
            if let Err(ractor::MessagingErr::SendErr(LaneMsg::Warmed(Some(s)))) =
                myself.cast(LaneMsg::Warmed(spare))
            {
                s.kill().await;
            }
        });
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<LaneMsg>,
        state: &mut LaneState,
    ) -> Result<(), ActorProcessingErr> {
        state.slot.stop().await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<LaneMsg>,
        msg: LaneMsg,
        state: &mut LaneState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            LaneMsg::Ping(reply) => {
                let _ = reply.send(());
            }
            LaneMsg::Assign(a) => {
                if state.unit.is_some() {
                    tracing::error!(lane = %self.name, "assignment while busy: giving it back");
                    let _ = self.supervisor.cast(SupMsg::GiveBack(a));
                    return Ok(());
                }
                let Ok(campaign) = CampaignId::new(a.campaign.clone()) else {
                    return Ok(());
                };
                state.unit = Some(Unit {
                    campaign,
                    driver: a.driver.unwrap_or_default(),
                    gate: a.gate,
                    remaining: a.trials.into(),
                    dropped: HashMap::new(),
                });
                self.next_trial(&myself, state).await;
            }
            LaneMsg::Event { tag, event } => self.feed(&myself, state, Some(&tag), event).await,
            LaneMsg::Renewal { tag, news } => self.renewal(&myself, state, tag, news).await,
            LaneMsg::Next => self.next_trial(&myself, state).await,
            LaneMsg::HealthUrl { tag, url } => {
                if let Some(cur) = state.current.as_mut().filter(|c| c.tag == tag) {
                    cur.health_url = Some(url);
                }
            }
            LaneMsg::EnvPins { tag, pins } => {
                if let Some(cur) = state.current.as_mut().filter(|c| c.tag == tag) {
                    cur.env_pins.extend(pins);
                }
            }
            LaneMsg::Warmed(spare) => {
                if state.unit.is_some() {
                    // Work came first (a work request of the lane this one replaced was
                    // answered): it started its own driver, and asks for work when done.
                    if let Some(s) = spare {
                        s.kill().await;
                    }
                } else {
                    state.slot.spare = spare.map(|s| *s);
                    let _ = self
                        .supervisor
                        .cast(SupMsg::WantWork(self.name.to_string()));
                }
            }
            LaneMsg::Admitted { tag, slot, event } => {
                state.slot = *slot;
                self.feed(&myself, state, Some(&tag), event).await;
            }
            LaneMsg::CancelAll => {
                if let Some(u) = state.unit.as_mut() {
                    // Trials of the group that never started are given back as cancelled.
                    let rest: Vec<pb::AssignedTrial> = u.remaining.drain(..).collect();
                    if !rest.is_empty() {
                        let _ = self.supervisor.cast(SupMsg::GiveBack(pb::Assignment {
                            campaign: u.campaign.to_string(),
                            lane: self.name.to_string(),
                            trials: rest,
                            ..Default::default()
                        }));
                    }
                }
                self.feed(&myself, state, None, Event::CancelRequested)
                    .await;
            }
            #[cfg(test)]
            LaneMsg::Wedge(d) => tokio::time::sleep(d).await,
            #[cfg(test)]
            LaneMsg::Crash => return Err("crash asked for by a test".into()),
        }
        Ok(())
    }
}
