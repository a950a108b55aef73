//! The Lane actor: one per VM slot. It runs one trial, or one run group back to back in slot
//! order, by feeding the lifecycle machine and executing its effects. Driver calls run in
//! spawned tasks whose results come back as messages, so the lane always answers cancel, ping
//! and renewal news.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::{Value, json};

use lanes_common::ids::{CampaignId, Token};
use lanes_common::proto as pb;
use lanes_common::row::{
    DriverIdentity, FailureKind, GateRecord, GateVerdict, Outcome, Phase, PhaseWalls, Status,
};
use lanes_common::utc::format_rfc3339;

use super::WorkerConfig;
use super::supervisor::SupMsg;
use crate::artifacts;
use crate::driver::process::{DriverCommand, DriverError, DriverProcess};
use crate::driver::protocol::{
    self as proto, AgentParams, AgentResult, AgentStatus, AttemptRef, EnvParams, EnvResult,
    EvaluateResult, GateResult, InitializeParams, TeardownParams, method,
};
use crate::lifecycle::{Attempt, Effect, Event, ReleaseKind, Verdict};
use crate::outbox::Entry;

/// Deadlines of driver calls besides the agent's own timeout.
const INIT_DEADLINE: Duration = Duration::from_secs(60);
const ENV_DEADLINE: Duration = Duration::from_secs(600);
const EVAL_DEADLINE: Duration = Duration::from_secs(300);

pub(crate) enum LaneMsg {
    Assign(pb::Assignment),
    /// A result of a spawned driver call, for the attempt with this tag.
    Event {
        tag: String,
        event: Event,
    },
    /// Renewal news from a heartbeat.
    Renewal {
        token: Token,
        state: i32,
    },
    Ping(RpcReplyPort<()>),
    /// Cancel whatever runs (worker shutdown past its grace).
    CancelAll,
    /// Start the next trial of the unit (or ask for work).
    Next,
    /// Boot or reset gave this attempt a guest health URL.
    HealthUrl {
        tag: String,
        url: String,
    },
    /// The agent of this attempt was cancelled a grace period ago.
    CancelOverdue {
        tag: String,
    },
    /// Admission finished: the driver slot comes back with its result.
    Admitted {
        tag: String,
        slot: Box<DriverSlot>,
        event: Event,
    },
}

pub(crate) struct LaneActor {
    pub(crate) name: String,
    pub(crate) config: Arc<WorkerConfig>,
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
    dropped: HashMap<Token, Dropped>,
}

/// Why a later trial of a group will not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dropped {
    /// Its lease is gone: nothing to send.
    Lost,
    /// A stop asked to cancel it: it is released as cancelled, unstarted.
    Cancel,
}

/// The attempt being run.
struct Current {
    trial: pb::AssignedTrial,
    token: Token,
    tag: String,
    machine: Attempt,
    started_utc: String,
    phase_started: Instant,
    phase: Phase,
    walls: PhaseWalls,
    agent: Option<AgentResult>,
    agent_timer: Option<tokio::task::JoinHandle<()>>,
    /// The guest's health URL from boot or reset, and the task watching it.
    health_url: Option<String>,
    watchdog: Option<tokio::task::JoinHandle<()>>,
    /// Set when the agent runs behind a task API: flipping it cancels the API task.
    http_cancel: Option<tokio::sync::watch::Sender<bool>>,
    /// The `attempt` root span, and the span of the current phase (its child).
    span: tracing::Span,
    phase_span: tracing::Span,
}

/// The span of one lifecycle phase, a child of the attempt's root.
fn phase_span(parent: &tracing::Span, p: Phase) -> tracing::Span {
    match p {
        Phase::Assigned | Phase::Admit => tracing::info_span!(parent: parent, "admit"),
        Phase::Boot => tracing::info_span!(parent: parent, "boot"),
        Phase::Reset => tracing::info_span!(parent: parent, "reset"),
        Phase::Gate => tracing::info_span!(parent: parent, "gate"),
        Phase::Agent => tracing::info_span!(parent: parent, "agent"),
        Phase::Evaluate => tracing::info_span!(parent: parent, "evaluate"),
        Phase::Publish => tracing::info_span!(parent: parent, "publish"),
    }
}

/// The lane's driver process, what it was started from, and its identity. Admission takes it
/// into a spawned task (starting a driver can be slow) and gives it back with the result.
#[derive(Default)]
pub(crate) struct DriverSlot {
    driver: Option<Arc<DriverProcess>>,
    key: Option<Vec<String>>,
    identity: Option<DriverIdentity>,
}

pub(crate) struct LaneState {
    slot: DriverSlot,
    unit: Option<Unit>,
    current: Option<Current>,
}

/// What admission needs, owned, so it can run in a task.
struct AdmitCtx {
    dir: std::io::Result<std::path::PathBuf>,
    record: Value,
    command: Vec<String>,
    key: Vec<String>,
    lane: String,
    host: String,
    spec: pb::DriverSpec,
}

fn tag_of(campaign: &CampaignId, token: &Token) -> String {
    format!("{campaign}/{token}")
}

fn now_utc() -> String {
    format_rfc3339(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
    )
}

/// Records the gate and adds its turns and cost to the attempt's totals, on every path.
fn add_gate(o: &mut Outcome, gate: Option<GateRecord>) {
    let Some(g) = gate else { return };
    if g.turns > 0 {
        o.turns = Some(o.turns.unwrap_or(0) + g.turns);
    }
    if let Some(c) = g.cost_usd {
        o.cost_usd = Some(o.cost_usd.unwrap_or(0.0) + c);
    }
    o.gate = Some(g);
}

/// Has the driver submit the benchmark's official infeasible action; its answer carries nothing.
async fn declare_infeasible(driver: &DriverProcess, params: &EnvParams) -> Result<(), DriverError> {
    driver
        .call::<_, Value>(method::DECLARE_INFEASIBLE, params, ENV_DEADLINE)
        .await
        .map(|_| ())
}

fn parse_json(s: &str) -> Value {
    if s.is_empty() {
        json!({})
    } else {
        serde_json::from_str(s).unwrap_or(json!({}))
    }
}

impl LaneActor {
    /// The command for a driver spec on this host.
    /// What identifies a driver process: a reused driver must have been started with the same
    /// command, env and sim settings, or the campaign's settings would never reach it.
    fn driver_key(&self, spec: &pb::DriverSpec) -> Vec<String> {
        let mut key = self.command(spec);
        key.push(format!("env={:?}", spec.env));
        key.push(format!("sim={}", spec.sim_json));
        key
    }

    fn command(&self, spec: &pb::DriverSpec) -> Vec<String> {
        if let Some(cmd) = &self.config.driver_override {
            return cmd.clone();
        }
        if spec.command.is_empty() {
            return self.config.sim_command.clone();
        }
        spec.command.clone()
    }

    fn attempt_ref(&self, unit: &Unit, cur: &Current) -> AttemptRef {
        AttemptRef {
            campaign: unit.campaign.to_string(),
            trial_id: cur.token.trial_id.to_string(),
            attempt: cur.token.attempt,
            tag: cur.tag.clone(),
        }
    }

    /// Starts the next trial of the unit, or reports the lane idle.
    async fn next_trial(&self, myself: &ActorRef<LaneMsg>, state: &mut LaneState) {
        let Some(unit) = state.unit.as_mut() else {
            let _ = self.supervisor.cast(SupMsg::WantWork(self.name.clone()));
            return;
        };
        let Some(trial) = unit.remaining.pop_front() else {
            state.unit = None;
            let _ = self.supervisor.cast(SupMsg::WantWork(self.name.clone()));
            return;
        };
        let Some(token) = trial.token.clone().and_then(|t| Token::try_from(t).ok()) else {
            tracing::error!("assignment without a valid token");
            let _ = myself.cast(LaneMsg::Next);
            return;
        };
        match unit.dropped.remove(&token) {
            Some(Dropped::Lost) => {
                tracing::info!(trial = %token.trial_id, "lease lost before the trial started: not running it");
                let _ = self.supervisor.cast(SupMsg::Finished {
                    token,
                    published: false,
                });
                let _ = myself.cast(LaneMsg::Next);
                return;
            }
            Some(Dropped::Cancel) => {
                tracing::info!(trial = %token.trial_id, "cancelled before the trial started: released unstarted");
                let _ = self.supervisor.cast(SupMsg::GiveBack(pb::Assignment {
                    campaign: unit.campaign.to_string(),
                    lane: self.name.clone(),
                    trials: vec![trial],
                    ..Default::default()
                }));
                let _ = myself.cast(LaneMsg::Next);
                return;
            }
            None => {}
        }
        let tag = tag_of(&unit.campaign, &token);
        let gate = unit.gate;
        let span = tracing::info_span!(
            "attempt",
            campaign = %unit.campaign,
            trial = %token.trial_id,
            arm = %trial.arm,
            attempt = token.attempt,
            lane = %self.name,
            host = %self.config.host,
            traceparent = %trial.traceparent,
        );
        let first_phase = phase_span(&span, Phase::Admit);
        let cur = Current {
            trial,
            token,
            tag,
            machine: Attempt::new(gate),
            started_utc: now_utc(),
            phase_started: Instant::now(),
            phase: Phase::Admit,
            walls: PhaseWalls::default(),
            agent: None,
            agent_timer: None,
            health_url: None,
            watchdog: None,
            http_cancel: None,
            span,
            phase_span: first_phase,
        };
        let effects = cur.machine.start();
        state.current = Some(cur);
        self.run_effects(myself, state, effects).await;
    }

    async fn run_effects(
        &self,
        myself: &ActorRef<LaneMsg>,
        state: &mut LaneState,
        effects: Vec<Effect>,
    ) {
        for effect in effects {
            self.run_effect(myself, state, effect).await;
        }
    }

    fn record_wall(cur: &mut Current) {
        let s = cur.phase_started.elapsed().as_secs_f64();
        let w = &mut cur.walls;
        match cur.phase {
            Phase::Assigned | Phase::Admit => w.admit_s += s,
            Phase::Boot => w.boot_s += s,
            Phase::Reset => w.reset_s += s,
            Phase::Gate => w.gate_s += s,
            Phase::Agent => w.agent_s += s,
            Phase::Evaluate => w.evaluate_s += s,
            Phase::Publish => w.publish_s += s,
        }
        cur.phase_started = Instant::now();
    }

    /// Spawns a driver call whose result comes back as an event.
    fn spawn_call<F>(&self, myself: &ActorRef<LaneMsg>, span: tracing::Span, tag: String, fut: F)
    where
        F: std::future::Future<Output = Event> + Send + 'static,
    {
        use tracing::Instrument;
        let me = myself.clone();
        tokio::spawn(
            async move {
                let event = fut.await;
                let _ = me.cast(LaneMsg::Event { tag, event });
            }
            .instrument(span),
        );
    }

    async fn run_effect(&self, myself: &ActorRef<LaneMsg>, state: &mut LaneState, effect: Effect) {
        let (Some(unit), Some(cur)) = (state.unit.as_ref(), state.current.as_ref()) else {
            return;
        };
        let tag = cur.tag.clone();
        let campaign = unit.campaign.clone();
        match effect {
            Effect::EnterPhase(p) => {
                if let Some(cur) = state.current.as_mut() {
                    Self::record_wall(cur);
                    cur.phase = p;
                    if p != Phase::Admit {
                        cur.phase_span = phase_span(&cur.span, p);
                    }
                    let _ = self.supervisor.cast(SupMsg::Phase {
                        campaign: campaign.clone(),
                        token: cur.token.clone(),
                        phase: p,
                    });
                }
            }
            Effect::WriteAttemptRecord => {
                let ctx = self.admit_ctx(unit, cur);
                let mut slot = std::mem::take(&mut state.slot);
                let me = myself.clone();
                let span = cur.phase_span.clone();
                use tracing::Instrument;
                tokio::spawn(
                    async move {
                        let event = admit(ctx, &mut slot).await;
                        let _ = me.cast(LaneMsg::Admitted {
                            tag,
                            slot: Box::new(slot),
                            event,
                        });
                    }
                    .instrument(span),
                );
            }
            Effect::Boot | Effect::Reset => {
                let Some(driver) = state.slot.driver.clone() else {
                    return;
                };
                let params = self.env_params(unit, cur);
                let is_boot = effect == Effect::Boot;
                let me = myself.clone();
                let url_tag = tag.clone();
                self.spawn_call(myself, cur.phase_span.clone(), tag, async move {
                    let m = if is_boot { method::BOOT } else { method::RESET };
                    let answer = driver.call::<_, EnvResult>(m, &params, ENV_DEADLINE).await;
                    if let Ok(EnvResult {
                        health_url: Some(url),
                        ..
                    }) = &answer
                    {
                        // Sent before the event, so the watchdog knows it when the agent starts.
                        let _ = me.cast(LaneMsg::HealthUrl {
                            tag: url_tag,
                            url: url.clone(),
                        });
                    }
                    match answer {
                        Ok(_) if is_boot => Event::Booted,
                        Ok(r) => Event::Reset {
                            verified: r.verified,
                        },
                        Err(e) if e.is_crash() => Event::DriverCrashed {
                            reason: e.to_string(),
                        },
                        Err(e) if is_boot => Event::BootFailed {
                            reason: e.to_string(),
                        },
                        Err(e) => Event::ResetFailed {
                            reason: e.to_string(),
                        },
                    }
                });
            }
            Effect::Gate => {
                let Some(driver) = state.slot.driver.clone() else {
                    return;
                };
                let params = self.env_params(unit, cur);
                self.spawn_call(myself, cur.phase_span.clone(), tag, async move {
                    match driver
                        .call::<_, GateResult>(method::GATE, &params, ENV_DEADLINE)
                        .await
                    {
                        Ok(r) => Event::GateAnswered(GateRecord {
                            verdict: if r.infeasible {
                                GateVerdict::Infeasible
                            } else {
                                GateVerdict::Proceed
                            },
                            reason: r.reason,
                            turns: r.turns,
                            cost_usd: r.cost_usd,
                        }),
                        Err(e) if e.is_crash() => Event::DriverCrashed {
                            reason: e.to_string(),
                        },
                        Err(e) => Event::GateFailed {
                            reason: e.to_string(),
                        },
                    }
                });
            }
            Effect::DeclareInfeasible => {
                let Some(driver) = state.slot.driver.clone() else {
                    return;
                };
                let params = self.env_params(unit, cur);
                self.spawn_call(myself, cur.phase_span.clone(), tag, async move {
                    match declare_infeasible(&driver, &params).await {
                        Ok(()) => Event::Declared,
                        Err(e) if e.is_crash() => Event::DriverCrashed {
                            reason: e.to_string(),
                        },
                        Err(e) => Event::DeclareFailed {
                            reason: e.to_string(),
                        },
                    }
                });
            }
            Effect::StartAgent => {
                let Some(driver) = state.slot.driver.clone() else {
                    return;
                };
                let t = &cur.trial;
                let timeout = Duration::from_secs(u64::from(t.timeout_s));
                let slack = self.config.cancel_grace;
                let params = AgentParams {
                    attempt: self.attempt_ref(unit, cur),
                    task: t.task.clone(),
                    arm: t.arm.clone(),
                    arm_config: parse_json(&t.arm_config_json),
                    payload: parse_json(&t.payload_json),
                    seed: t.seed,
                    timeout_s: t.timeout_s,
                    max_turns: t.max_turns.saturating_sub(cur.machine.gate_turns()),
                    max_cost_usd: t.max_cost_usd,
                };
                let http_agent = params
                    .arm_config
                    .get("http_agent")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if let Some(base) = http_agent {
                    // The arm's agent runs behind a task API; the lane drives it itself.
                    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
                    let poll = self.config.guest_poll;
                    let env = self.env_params(unit, cur);
                    self.spawn_call(myself, cur.phase_span.clone(), tag.clone(), async move {
                        let mut result =
                            crate::http_agent::run(&base, &params, cancel_rx, poll).await;
                        // The driver never saw this agent: when it declared the task
                        // infeasible, the lane has the driver submit the official action,
                        // so the evaluator can score the declaration.
                        let evaluated = !matches!(
                            result.status,
                            AgentStatus::InfraError | AgentStatus::Cancelled
                        );
                        if result.infeasible && evaluated {
                            match declare_infeasible(&driver, &env).await {
                                Ok(()) => {}
                                Err(e) if e.is_crash() => {
                                    return Event::DriverCrashed {
                                        reason: e.to_string(),
                                    };
                                }
                                Err(e) => {
                                    result.status = AgentStatus::InfraError;
                                    result.failure_kind = Some("harness_error".to_owned());
                                    result.error = Some(format!(
                                        "declare_infeasible failed after the agent declared the task infeasible: {e}"
                                    ));
                                }
                            }
                        }
                        Event::AgentFinished(result)
                    });
                    if let Some(cur) = state.current.as_mut() {
                        cur.http_cancel = Some(cancel_tx);
                    }
                } else {
                    self.spawn_call(myself, cur.phase_span.clone(), tag.clone(), async move {
                        match driver
                            .call::<_, AgentResult>(method::RUN_AGENT, &params, timeout + slack)
                            .await
                        {
                            Ok(r) => Event::AgentFinished(r),
                            // A JSON-RPC error answer: the driver is fine, the agent failed on
                            // infra, of the kind the driver named (default harness_error).
                            Err(e) if !e.is_crash() => Event::AgentFinished(AgentResult {
                                status: crate::driver::protocol::AgentStatus::InfraError,
                                failure_kind: Some(
                                    e.failure_kind().unwrap_or("harness_error").to_owned(),
                                ),
                                reset_epoch: None,
                                runtime_outcome: None,
                                infeasible: false,
                                final_text: None,
                                turns: None,
                                tokens: None,
                                cost_usd: None,
                                quota: None,
                                error: Some(e.to_string()),
                            }),
                            Err(e) => Event::DriverCrashed {
                                reason: e.to_string(),
                            },
                        }
                    });
                }
                let me = myself.clone();
                let timer = tokio::spawn(async move {
                    tokio::time::sleep(timeout).await;
                    let _ = me.cast(LaneMsg::Event {
                        tag,
                        event: Event::TaskTimeout,
                    });
                });
                if let Some(cur) = state.current.as_mut() {
                    cur.agent_timer = Some(timer);
                }
            }
            Effect::CancelAgent => {
                if let Some(c) = &cur.http_cancel {
                    let _ = c.send(true);
                } else if let Some(driver) = &state.slot.driver {
                    driver.notify(method::CANCEL, &proto::CancelParams { tag: tag.clone() });
                }
                // A driver that ignores the cancel is killed after the grace: no zombie agents.
                let me = myself.clone();
                let grace = self.config.cancel_grace;
                tokio::spawn(async move {
                    tokio::time::sleep(grace).await;
                    let _ = me.cast(LaneMsg::CancelOverdue { tag });
                });
            }
            // The guest-health watchdog runs only when boot or reset gave a health URL.
            Effect::StartWatchdog => {
                let Some(url) = cur.health_url.clone() else {
                    return;
                };
                match crate::watchdog::HealthUrl::parse(&url) {
                    Ok(url) => {
                        let me = myself.clone();
                        let (every, grace) = (self.config.guest_poll, self.config.guest_grace);
                        let watch = tokio::spawn(async move {
                            crate::watchdog::watch(url, every, grace).await;
                            let _ = me.cast(LaneMsg::Event {
                                tag,
                                event: Event::GuestLost,
                            });
                        });
                        if let Some(cur) = state.current.as_mut() {
                            cur.watchdog = Some(watch);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(lane = %self.name, error = %e, "guest health url ignored")
                    }
                }
            }
            Effect::StopWatchdog => {
                if let Some(w) = state.current.as_mut().and_then(|c| c.watchdog.take()) {
                    w.abort();
                }
            }
            Effect::Evaluate => {
                let Some(driver) = state.slot.driver.clone() else {
                    return;
                };
                let params = self.env_params(unit, cur);
                self.spawn_call(myself, cur.phase_span.clone(), tag, async move {
                    match driver
                        .call::<_, EvaluateResult>(method::EVALUATE, &params, EVAL_DEADLINE)
                        .await
                    {
                        Ok(r) => Event::Evaluated {
                            score: r.score,
                            passed: r.passed,
                            checks: r.checks,
                        },
                        Err(e) if e.is_crash() => Event::DriverCrashed {
                            reason: e.to_string(),
                        },
                        Err(e) => Event::EvaluateFailed {
                            reason: e.to_string(),
                        },
                    }
                });
            }
            Effect::Publish(verdict) => {
                let mut outcome = self.outcome(state, verdict);
                // Every destination is attempted on its own: the attempt record first (its
                // failure is disclosed in the row), then the outbox and the coordinator. The
                // record is written under a pending name; the supervisor gives it its final
                // name once the outbox entry is durable, so no crash leaves a score on disk
                // that nothing replays.
                let record =
                    artifacts::attempt_dir(&self.config.artifacts, &campaign, &outcome.token)
                        .and_then(|dir| {
                            let json =
                                serde_json::to_value(&outcome).map_err(std::io::Error::other)?;
                            let path = dir.join("outcome.json");
                            let pending = crate::outbox::pending_record(&path);
                            let name = pending.file_name().expect("a file name");
                            artifacts::write_file(&dir, &name.to_string_lossy(), &json)?;
                            Ok(path)
                        });
                let record = match record {
                    Ok(path) => {
                        outcome.artifacts.push(path.display().to_string());
                        Some(path)
                    }
                    Err(e) => {
                        outcome
                            .publication_errors
                            .push(format!("attempt record: {e}"));
                        None
                    }
                };
                if let Some(cur) = state.current.as_ref() {
                    cur.phase_span.in_scope(|| {
                        tracing::info!(status = %outcome.status, failure_kind = ?outcome.failure_kind, score = ?outcome.score, "attempt finished");
                    });
                }
                let entry = Box::new(Entry {
                    campaign,
                    outcome,
                    record,
                });
                let published = ractor::call!(self.supervisor, SupMsg::Publish, entry);
                if let Err(e) = published {
                    tracing::error!(error = %e, "could not hand the outcome to the supervisor");
                }
                self.finish(myself, state, true).await;
            }
            Effect::Release(kind) => {
                // A release travels as a `cancelled` or `blocked` outcome through the outbox,
                // so it is as durable as a score and lands once per token.
                let (status, failure_kind) = match kind {
                    ReleaseKind::Cancelled => (Status::Cancelled, None),
                    ReleaseKind::Blocked(k) => (Status::Blocked, Some(k)),
                };
                let mut o = Outcome::new(cur.token.clone(), &self.name, &self.config.host, status);
                o.worker = self.config.worker_id.clone();
                o.driver = state.slot.identity.clone();
                o.failure_kind = failure_kind;
                o.error = cur.machine.preflight_reason.clone();
                add_gate(&mut o, cur.machine.gate_record.clone());
                if failure_kind == Some(FailureKind::IdentityMismatch) {
                    // This lane is unusable for this campaign: it stops asking for its work.
                    tracing::warn!(lane = %self.name, campaign = %campaign, reason = ?o.error, "identity mismatch: this lane leaves the campaign");
                    let _ = self.supervisor.cast(SupMsg::Exclude {
                        lane: self.name.clone(),
                        campaign: campaign.clone(),
                    });
                }
                o.started_utc = Some(cur.started_utc.clone());
                o.ended_utc = Some(now_utc());
                let entry = Box::new(Entry {
                    campaign,
                    outcome: o,
                    record: None,
                });
                if let Err(e) = ractor::call!(self.supervisor, SupMsg::Publish, entry) {
                    tracing::error!(error = %e, "could not hand the release to the supervisor");
                }
                self.finish(myself, state, true).await;
            }
            Effect::Abandon => {
                tracing::warn!(lane = %self.name, trial = %cur.token, "lease lost before evaluate: attempt abandoned");
                self.finish(myself, state, false).await;
            }
            Effect::RestartDriver => {
                if let Some(d) = state.slot.driver.take() {
                    d.kill().await;
                }
                state.slot.key = None;
            }
        }
    }

    fn env_params(&self, unit: &Unit, cur: &Current) -> EnvParams {
        EnvParams {
            attempt: self.attempt_ref(unit, cur),
            task: cur.trial.task.clone(),
            arm: cur.trial.arm.clone(),
            seed: cur.trial.seed,
            payload: parse_json(&cur.trial.payload_json),
        }
    }

    /// The owned context of admission: the record to write, where, and the driver to use.
    fn admit_ctx(&self, unit: &Unit, cur: &Current) -> AdmitCtx {
        let spec = unit.driver.clone();
        let record = json!({
            "campaign": unit.campaign,
            "trial_id": cur.token.trial_id,
            "attempt": cur.token.attempt,
            "lane": self.name,
            "host": self.config.host,
            "worker": self.config.worker_id,
            "started_utc": cur.started_utc,
            "task": cur.trial.task,
            "arm": cur.trial.arm,
            "seed": cur.trial.seed,
            "traceparent": cur.trial.traceparent,
            "payload": artifacts::redact(&parse_json(&cur.trial.payload_json), &spec.secret_payload_keys),
        });
        AdmitCtx {
            dir: artifacts::attempt_dir(&self.config.artifacts, &unit.campaign, &cur.token),
            record,
            command: self.command(&spec),
            key: self.driver_key(&spec),
            lane: self.name.clone(),
            host: self.config.host.clone(),
            spec,
        }
    }

    fn outcome(&self, state: &mut LaneState, v: Verdict) -> Outcome {
        let secrets = secrets_of(state);
        let cur = state.current.as_mut().expect("an attempt is running");
        Self::record_wall(cur);
        let mut o = Outcome::new(cur.token.clone(), &self.name, &self.config.host, v.status);
        o.worker = self.config.worker_id.clone();
        o.driver = state.slot.identity.clone();
        o.failure_kind = v.failure_kind;
        o.score = v.score;
        o.passed = v.passed;
        o.checks = v.checks;
        o.infeasible_source = v.infeasible_source;
        o.lease_lost = v.lease_lost;
        o.error = v.error;
        o.walls = cur.walls;
        o.started_utc = Some(cur.started_utc.clone());
        o.ended_utc = Some(now_utc());
        if let Some(a) = v.agent.or_else(|| cur.agent.take()) {
            if o.error.is_none() {
                o.error = a.error;
            }
            o.reset_epoch = a.reset_epoch;
            o.runtime_outcome = a.runtime_outcome;
            o.final_text = a.final_text;
            o.turns = a.turns;
            o.tokens = a.tokens;
            o.cost_usd = a.cost_usd;
            o.quota = a.quota;
        }
        add_gate(&mut o, v.gate);
        if o.status != Status::InfraError {
            o.failure_kind = None;
        }
        // Defence in depth: a driver may echo a secret into an error or its final text.
        scrub_outcome(&mut o, &secrets);
        match o.clone().validate() {
            Ok(valid) => valid,
            Err(e) => {
                // Never publish what the store would refuse: record why, as a harness error.
                let mut bad = Outcome::new(o.token.clone(), &o.lane, &o.host, Status::InfraError);
                bad.failure_kind = Some(FailureKind::HarnessError);
                bad.error = Some(format!("driver reported an invalid outcome: {e}"));
                bad.worker = o.worker;
                bad.driver = o.driver;
                bad.walls = o.walls;
                bad.started_utc = o.started_utc;
                bad.ended_utc = o.ended_utc;
                bad
            }
        }
    }

    /// Ends the current attempt. A published one stays in flight (renewed, in phase publish)
    /// until the coordinator acknowledges it, so the store waits out `publish_grace_s` for it.
    async fn finish(&self, myself: &ActorRef<LaneMsg>, state: &mut LaneState, published: bool) {
        if let Some(cur) = state.current.take() {
            if let Some(t) = cur.agent_timer {
                t.abort();
            }
            if let Some(w) = cur.watchdog {
                w.abort();
            }
            let _ = self.supervisor.cast(SupMsg::Finished {
                token: cur.token,
                published,
            });
        }
        // A message, not a call: the next trial starts from a fresh handler.
        let _ = myself.cast(LaneMsg::Next);
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
            slot: DriverSlot::default(),
            unit: None,
            current: None,
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<LaneMsg>,
        state: &mut LaneState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(d) = state.slot.driver.take() {
            d.kill().await;
        }
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
            LaneMsg::Event { tag, event } => {
                let Some(cur) = state.current.as_mut() else {
                    return Ok(());
                };
                if cur.tag != tag {
                    // News about an attempt that already ended.
                    return Ok(());
                }
                if let Event::AgentFinished(r) = &event {
                    cur.agent = Some(r.clone());
                }
                let effects = cur.machine.next(event);
                self.run_effects(&myself, state, effects).await;
            }
            LaneMsg::Renewal { token, state: st } => {
                let Some(cur) = state.current.as_mut() else {
                    return Ok(());
                };
                if cur.token != token {
                    // A later trial of the group, not started yet: remember not to boot it.
                    if let Some(unit) = state.unit.as_mut() {
                        let waiting = unit.remaining.iter().any(|t| {
                            t.token
                                .clone()
                                .and_then(|t| Token::try_from(t).ok())
                                .as_ref()
                                == Some(&token)
                        });
                        let why = match st {
                            s if s == pb::RenewState::Lost as i32 => Some(Dropped::Lost),
                            s if s == pb::RenewState::Cancel as i32 => Some(Dropped::Cancel),
                            _ => None,
                        };
                        if let (true, Some(why)) = (waiting, why) {
                            unit.dropped.insert(token, why);
                        }
                    }
                    return Ok(());
                }
                let event = match st {
                    s if s == pb::RenewState::Lost as i32 => Event::LeaseLost,
                    s if s == pb::RenewState::Cancel as i32 => Event::CancelRequested,
                    _ => return Ok(()),
                };
                let effects = cur.machine.next(event);
                self.run_effects(&myself, state, effects).await;
            }
            LaneMsg::Next => self.next_trial(&myself, state).await,
            LaneMsg::HealthUrl { tag, url } => {
                if let Some(cur) = state.current.as_mut().filter(|c| c.tag == tag) {
                    cur.health_url = Some(url);
                }
            }
            LaneMsg::CancelOverdue { tag } => {
                let still_running = state.current.as_ref().is_some_and(|c| {
                    c.tag == tag && matches!(c.machine.state, crate::lifecycle::State::Agent(_))
                });
                let http = state
                    .current
                    .as_ref()
                    .is_some_and(|c| c.http_cancel.is_some());
                if still_running && http {
                    // The task API keeps its own time; the driver is not to blame.
                    tracing::warn!(lane = %self.name, "the task api did not confirm the cancel in time");
                } else if still_running && let Some(d) = state.slot.driver.take() {
                    tracing::warn!(lane = %self.name, "the agent ignored its cancel: killing the driver");
                    d.kill().await;
                    state.slot.key = None;
                    // Say why here; the failing run_agent call that follows is then stale.
                    if let Some(cur) = state.current.as_mut() {
                        let effects = cur.machine.next(Event::DriverCrashed {
                            reason: "the agent did not stop within the cancel grace; driver killed"
                                .into(),
                        });
                        self.run_effects(&myself, state, effects).await;
                    }
                }
            }
            LaneMsg::Admitted { tag, slot, event } => {
                state.slot = *slot;
                let Some(cur) = state.current.as_mut() else {
                    return Ok(());
                };
                if cur.tag == tag {
                    let effects = cur.machine.next(event);
                    self.run_effects(&myself, state, effects).await;
                }
            }
            LaneMsg::CancelAll => {
                if let Some(u) = state.unit.as_mut() {
                    // Trials of the group that never started are given back as cancelled.
                    let rest: Vec<pb::AssignedTrial> = u.remaining.drain(..).collect();
                    if !rest.is_empty() {
                        let _ = self.supervisor.cast(SupMsg::GiveBack(pb::Assignment {
                            campaign: u.campaign.to_string(),
                            lane: self.name.clone(),
                            trials: rest,
                            ..Default::default()
                        }));
                    }
                }
                if let Some(cur) = state.current.as_mut() {
                    let effects = cur.machine.next(Event::CancelRequested);
                    self.run_effects(&myself, state, effects).await;
                }
            }
        }
        Ok(())
    }
}

/// Starts (or reuses) the driver for a command, initializes it, and tears down what an earlier
/// process of this lane left behind (no orphans).
async fn ensure_driver(
    slot: &mut DriverSlot,
    cmd: Vec<String>,
    want: Vec<String>,
    lane: &str,
    host: &str,
    spec: &pb::DriverSpec,
) -> Result<Arc<DriverProcess>, DriverError> {
    if let (Some(d), Some(key)) = (&slot.driver, &slot.key)
        && d.is_alive()
        && *key == want
    {
        return Ok(d.clone());
    }
    if let Some(old) = slot.driver.take() {
        old.kill().await;
    }
    let env: Vec<(String, String)> = spec
        .env
        .iter()
        .map(|(k, v)| {
            let value = match v.strip_prefix('$') {
                Some(name) => std::env::var(name).unwrap_or_default(),
                None => v.clone(),
            };
            (k.clone(), value)
        })
        .collect();
    let command = DriverCommand {
        program: cmd[0].clone(),
        args: cmd[1..].to_vec(),
        cwd: None,
        env,
    };
    let driver = Arc::new(DriverProcess::spawn(&command).await?);
    // Progress and log notifications are logged as they come, so they never pile up.
    if let Some(mut notes) = driver.take_notifications() {
        let lane = lane.to_owned();
        tokio::spawn(async move {
            while let Some(n) = notes.recv().await {
                match n {
                    crate::driver::process::Notification::Progress(p) => {
                        tracing::debug!(lane = %lane, tag = %p.tag, turns = ?p.turns, message = ?p.message, "driver progress");
                    }
                    crate::driver::process::Notification::Log(l) => {
                        tracing::debug!(lane = %lane, level = %l.level, message = %l.message, "driver log");
                    }
                }
            }
        });
    }
    let sim = (!spec.sim_json.is_empty()).then(|| parse_json(&spec.sim_json));
    let identity: DriverIdentity = driver
        .call(
            method::INITIALIZE,
            &InitializeParams {
                protocol: proto::PROTOCOL.into(),
                lane: lane.to_owned(),
                host: host.to_owned(),
                sim,
            },
            INIT_DEADLINE,
        )
        .await?;
    let _: Value = driver
        .call(
            method::TEARDOWN,
            &TeardownParams {
                lane: lane.to_owned(),
                tag: None,
            },
            ENV_DEADLINE,
        )
        .await
        .unwrap_or(Value::Null);
    slot.identity = Some(identity);
    slot.driver = Some(driver.clone());
    slot.key = Some(want);
    Ok(driver)
}

/// Writes the attempt record, then starts the driver and checks the identity pins.
async fn admit(ctx: AdmitCtx, slot: &mut DriverSlot) -> Event {
    let preflight = |reason: String| Event::PreflightFailed {
        kind: FailureKind::Preflight,
        reason,
    };
    let dir = match ctx.dir {
        Ok(d) => d,
        Err(e) => return preflight(e.to_string()),
    };
    if let Err(e) = artifacts::write_record(&dir, &ctx.record) {
        return preflight(format!("attempt record: {e}"));
    }
    let driver =
        match ensure_driver(slot, ctx.command, ctx.key, &ctx.lane, &ctx.host, &ctx.spec).await {
            Ok(d) => d,
            Err(e) => return preflight(format!("driver: {e}")),
        };
    driver.set_stderr_file(Some(dir.join("driver.stderr")));
    if let Some(id) = &slot.identity {
        // Every differing pin is named, so one refusal says everything that is wrong.
        let differing: Vec<String> = ctx
            .spec
            .expect
            .iter()
            .filter(|(k, want)| id.pins.get(*k) != Some(*want))
            .map(|(k, want)| {
                format!(
                    "{k}: expected {want}, driver has {}",
                    id.pins.get(k).map_or("none", |g| g.as_str())
                )
            })
            .collect();
        if !differing.is_empty() {
            return Event::PreflightFailed {
                kind: FailureKind::IdentityMismatch,
                reason: format!(
                    "driver identity differs from [driver.expect]: {}",
                    differing.join("; ")
                ),
            };
        }
    }
    Event::Admitted
}

/// The secret values of the current attempt: its payload's `secret_payload_keys` and the
/// driver env values. Very short values are skipped (they would mangle ordinary text).
fn secrets_of(state: &LaneState) -> Vec<String> {
    let (Some(unit), Some(cur)) = (&state.unit, &state.current) else {
        return Vec::new();
    };
    let payload = parse_json(&cur.trial.payload_json);
    let mut out: Vec<String> = unit
        .driver
        .secret_payload_keys
        .iter()
        .filter_map(|k| payload.get(k))
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    for v in unit.driver.env.values() {
        out.push(match v.strip_prefix('$') {
            Some(name) => std::env::var(name).unwrap_or_default(),
            None => v.clone(),
        });
    }
    out.retain(|s| s.len() >= 4);
    out
}

fn scrub(text: &mut String, secrets: &[String]) {
    for s in secrets {
        if text.contains(s.as_str()) {
            *text = text.replace(s.as_str(), "***");
        }
    }
}

/// Replaces secret values in every free-text field of an outcome.
fn scrub_outcome(o: &mut Outcome, secrets: &[String]) {
    if secrets.is_empty() {
        return;
    }
    for field in [&mut o.error, &mut o.final_text, &mut o.runtime_outcome]
        .into_iter()
        .flatten()
    {
        scrub(field, secrets);
    }
    for e in &mut o.publication_errors {
        scrub(e, secrets);
    }
    for c in &mut o.checks {
        scrub(&mut c.detail, secrets);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_common::ids::TrialId;

    #[test]
    fn secrets_are_scrubbed_from_free_text() {
        let token = Token {
            trial_id: TrialId::new("T.r0.a").unwrap(),
            attempt: 1,
        };
        let mut o = Outcome::new(token, "l", "h", Status::InfraError);
        o.error = Some("login failed for hunter22 at vm".into());
        o.final_text = Some("the password is hunter22".into());
        o.checks.push(lanes_common::row::Check {
            name: "c".into(),
            passed: false,
            score: None,
            detail: "saw hunter22".into(),
        });
        scrub_outcome(&mut o, &["hunter22".to_owned()]);
        assert_eq!(o.error.as_deref(), Some("login failed for *** at vm"));
        assert_eq!(o.final_text.as_deref(), Some("the password is ***"));
        assert_eq!(o.checks[0].detail, "saw ***");
    }
}
