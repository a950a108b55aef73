//! What each effect of the lifecycle does. Driver calls, the attempt record and the outbox
//! hand-off run in spawned tasks and answer with an event for the attempt's tag; timers do
//! the same. Nothing here decides how the attempt goes on: the machine does.

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tracing::Instrument;

use lanes_common::ids::AttemptTag;
use lanes_common::row::{FailureKind, GateRecord, GateVerdict, Phase};

use super::admit::{self, AdmitCtx};
use super::outcome::{self, OutcomeCtx};
use super::{Current, LaneActor, LaneMsg, LaneState, Unit, now_utc, parse_json, phase_span};
use crate::artifacts;
use crate::driver::process::{DriverError, DriverProcess};
use crate::driver::protocol::{
    self as proto, AgentParams, AgentResult, AgentStatus, AttemptRef, EnvParams, EnvResult,
    EvaluateResult, GateResult, method,
};
use crate::lifecycle::{Effect, Event, ReleaseKind};
use crate::outbox::Entry;
use crate::secrets::Secrets;
use crate::worker::supervisor::SupMsg;

/// Deadlines of driver calls besides the agent's own timeout.
const ENV_DEADLINE: Duration = Duration::from_secs(600);
const EVAL_DEADLINE: Duration = Duration::from_secs(300);
/// Beyond a task folder's own build and verifier timeouts: fetching the folder, creating the
/// container, copying logs out. The driver enforces the task's timeouts itself.
const FOLDER_MARGIN: Duration = Duration::from_secs(300);

/// The digest of a task that is a folder (`[tasks] harbor`), from its payload.
fn task_digest(payload: &Value) -> Option<&str> {
    payload
        .get(lanes_common::spec::harbor::PAYLOAD_KEY)?
        .get("digest")?
        .as_str()
}

/// How long boot and reset, and evaluate, may take: a task folder's build and verifier
/// timeouts raise them (a verifier may run longer than the usual evaluate deadline).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Deadlines {
    env: Duration,
    evaluate: Duration,
}

impl Deadlines {
    fn of(payload: &Value) -> Self {
        let task =
            lanes_common::spec::harbor::HarborTask::from_payload(payload).and_then(Result::ok);
        let secs = |s: f64| Duration::from_secs_f64(s.clamp(0.0, 7.0 * 86_400.0));
        match task {
            Some(t) => Self {
                env: ENV_DEADLINE.max(secs(t.build_timeout_s) + FOLDER_MARGIN),
                evaluate: EVAL_DEADLINE.max(secs(t.verifier_timeout_s) + FOLDER_MARGIN),
            },
            None => Self {
                env: ENV_DEADLINE,
                evaluate: EVAL_DEADLINE,
            },
        }
    }
}

/// Calls the driver and turns the answer into an event: a crash (exit, hang, broken protocol)
/// is always `DriverCrashed`; an error answer is what `failed` makes of it.
async fn call<P, R>(
    driver: &DriverProcess,
    method: &str,
    params: &P,
    deadline: Duration,
    ok: impl FnOnce(R) -> Event,
    failed: impl FnOnce(DriverError) -> Event,
) -> Event
where
    P: Serialize + ?Sized,
    R: DeserializeOwned,
{
    match driver.call::<_, R>(method, params, deadline).await {
        Ok(r) => ok(r),
        Err(e) if e.is_crash() => Event::DriverCrashed {
            reason: e.to_string(),
        },
        Err(e) => failed(e),
    }
}

/// The infra result of an agent whose driver answered `run_agent` with an error: the driver is
/// fine, the agent failed on infra, of the kind the driver named (default harness_error).
fn agent_error(e: DriverError) -> Event {
    Event::AgentFinished(AgentResult {
        status: AgentStatus::InfraError,
        failure_kind: Some(e.failure_kind().unwrap_or(FailureKind::HarnessError)),
        reset_epoch: None,
        runtime_outcome: None,
        infeasible: false,
        final_text: None,
        turns: None,
        tokens: None,
        cost_usd: None,
        quota: None,
        error: Some(e.to_string()),
    })
}

/// Has the driver submit the benchmark's official infeasible action; its answer carries nothing.
async fn declare_infeasible(driver: &DriverProcess, params: &EnvParams) -> Result<(), DriverError> {
    driver
        .call::<_, Value>(method::DECLARE_INFEASIBLE, params, ENV_DEADLINE)
        .await
        .map(|_| ())
}

impl LaneActor {
    pub(super) async fn run_effects(
        &self,
        myself: &ActorRef<LaneMsg>,
        state: &mut LaneState,
        effects: Vec<Effect>,
    ) {
        for effect in effects {
            self.run_effect(myself, state, effect).await;
        }
    }

    /// Spawns work whose result comes back as an event for `tag`.
    fn spawn_event<F>(
        &self,
        myself: &ActorRef<LaneMsg>,
        span: tracing::Span,
        tag: AttemptTag,
        fut: F,
    ) where
        F: std::future::Future<Output = Event> + Send + 'static,
    {
        let me = myself.clone();
        tokio::spawn(
            async move {
                let event = fut.await;
                let _ = me.cast(LaneMsg::Event { tag, event });
            }
            .instrument(span),
        );
    }

    /// Sends `event` for `tag` after `after`, unless the handle is aborted first.
    fn timer(
        myself: &ActorRef<LaneMsg>,
        tag: AttemptTag,
        after: Duration,
        event: Event,
    ) -> tokio::task::JoinHandle<()> {
        let me = myself.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = me.cast(LaneMsg::Event { tag, event });
        })
    }

    async fn run_effect(&self, myself: &ActorRef<LaneMsg>, state: &mut LaneState, effect: Effect) {
        let (Some(unit), Some(cur)) = (state.unit.as_ref(), state.current.as_ref()) else {
            return;
        };
        let tag = cur.tag.clone();
        let span = cur.phase_span.clone();
        let attempt_span = cur.span.clone();
        let driver = state.slot.driver.clone();
        match effect {
            Effect::EnterPhase(p) => {
                let cur = state.current.as_mut().expect("checked above");
                cur.record_wall();
                cur.phase = p;
                if p != Phase::Admit {
                    cur.phase_span = phase_span(&cur.span, p);
                }
                let _ = self.supervisor.cast(SupMsg::Phase {
                    tag,
                    phase: p,
                    traceparent: cur.traceparent.clone(),
                    span: cur.span.clone(),
                });
            }
            Effect::WriteAttemptRecord => {
                let ctx = self.admit_ctx(unit, cur);
                let mut slot = std::mem::take(&mut state.slot);
                let me = myself.clone();
                tokio::spawn(
                    async move {
                        let event = admit::admit(ctx, &mut slot).await;
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
                let Some(driver) = driver else { return };
                let mut params = self.env_params(unit, cur);
                let is_boot = effect == Effect::Boot;
                let deadline = Deadlines::of(&params.payload).env;
                // A task folder this worker has not got yet is fetched before boot.
                let fetch = match (&params.task_dir, task_digest(&params.payload)) {
                    (None, Some(d)) if is_boot => Some((self.folders.clone(), d.to_owned())),
                    _ => None,
                };
                let (me, url_tag) = (myself.clone(), tag.clone());
                self.spawn_event(myself, span, tag, async move {
                    let m = if is_boot { method::BOOT } else { method::RESET };
                    let ok = move |r: EnvResult| {
                        if !r.pins.is_empty() {
                            let _ = me.cast(LaneMsg::EnvPins {
                                tag: url_tag.clone(),
                                pins: r.pins,
                            });
                        }
                        if let Some(url) = r.health_url {
                            // Sent before the event, so the watchdog knows it when the agent
                            // starts.
                            let _ = me.cast(LaneMsg::HealthUrl { tag: url_tag, url });
                        }
                        if is_boot {
                            Event::Booted
                        } else {
                            Event::Reset {
                                verified: r.verified,
                            }
                        }
                    };
                    let failed = move |e: DriverError| {
                        let reason = e.to_string();
                        if is_boot {
                            Event::BootFailed { reason }
                        } else {
                            Event::ResetFailed { reason }
                        }
                    };
                    if let Some((folders, digest)) = fetch {
                        match folders.folder(&digest).await {
                            Ok(dir) => params.task_dir = Some(dir.display().to_string()),
                            Err(e) => {
                                return Event::BootFailed {
                                    reason: e.to_string(),
                                };
                            }
                        }
                    }
                    call(&driver, m, &params, deadline, ok, failed).await
                });
            }
            Effect::Gate => {
                let Some(driver) = driver else { return };
                let params = self.env_params(unit, cur);
                self.spawn_event(myself, span, tag, async move {
                    let ok = |r: GateResult| {
                        Event::GateAnswered(GateRecord {
                            verdict: if r.infeasible {
                                GateVerdict::Infeasible
                            } else {
                                GateVerdict::Proceed
                            },
                            reason: r.reason,
                            turns: r.turns,
                            cost_usd: r.cost_usd,
                        })
                    };
                    let failed = |e: DriverError| Event::GateFailed {
                        reason: e.to_string(),
                    };
                    call(&driver, method::GATE, &params, ENV_DEADLINE, ok, failed).await
                });
            }
            Effect::DeclareInfeasible => {
                let Some(driver) = driver else { return };
                let params = self.env_params(unit, cur);
                self.spawn_event(myself, span, tag, async move {
                    let ok = |_: Value| Event::Declared;
                    let failed = |e: DriverError| Event::DeclareFailed {
                        reason: e.to_string(),
                    };
                    call(
                        &driver,
                        method::DECLARE_INFEASIBLE,
                        &params,
                        ENV_DEADLINE,
                        ok,
                        failed,
                    )
                    .await
                });
            }
            Effect::StartAgent { max_turns } => {
                let Some(driver) = driver else { return };
                self.start_agent(myself, state, driver, max_turns);
            }
            Effect::CancelAgent => {
                if let Some(c) = &cur.http_cancel {
                    let _ = c.send(true);
                } else if let Some(driver) = &driver {
                    driver.notify(
                        method::CANCEL,
                        &proto::CancelParams {
                            tag: tag.to_string(),
                        },
                    );
                }
                // The machine decides what an agent that ignores its cancel costs.
                Self::timer(myself, tag, self.config.cancel_grace, Event::CancelOverdue);
            }
            // The guest-health watchdog runs only when boot or reset gave a health URL.
            Effect::StartWatchdog => {
                let Some(url) = cur.health_url.clone() else {
                    return;
                };
                match crate::watchdog::health_url(&url) {
                    Ok(url) => {
                        let me = myself.clone();
                        let (every, grace) = (self.config.guest_poll, self.config.guest_grace);
                        let http = self.http.clone();
                        let watch = tokio::spawn(async move {
                            crate::watchdog::watch(http, url, every, grace).await;
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
                let Some(driver) = driver else { return };
                let params = self.env_params(unit, cur);
                let deadline = Deadlines::of(&params.payload).evaluate;
                self.spawn_event(myself, span, tag, async move {
                    let ok = |r: EvaluateResult| Event::Evaluated {
                        score: r.score,
                        passed: r.passed,
                        checks: r.checks,
                    };
                    let failed = |e: DriverError| Event::EvaluateFailed {
                        reason: e.to_string(),
                    };
                    call(&driver, method::EVALUATE, &params, deadline, ok, failed).await
                });
            }
            Effect::Publish(verdict) => {
                let secrets = self.secrets(unit, cur);
                let ctx = self.outcome_ctx(state);
                let o = outcome::published(&ctx, verdict, &secrets);
                span.in_scope(|| {
                    tracing::info!(status = %o.status, failure_kind = o.failure_kind.map(|k| k.as_str()), score = o.result.score, "attempt finished");
                });
                record_outcome(&attempt_span, &o);
                self.hand_off(
                    myself,
                    span,
                    tag,
                    Ended {
                        outcome: o,
                        with_record: true,
                        secrets,
                        driver,
                    },
                );
            }
            Effect::Release { kind, reason, gate } => {
                let secrets = self.secrets(unit, cur);
                if kind == ReleaseKind::Blocked(FailureKind::IdentityMismatch) {
                    // This lane is unusable for this campaign: it stops asking for its work.
                    // The reason quotes the driver's pins, which it may have filled with secrets.
                    let logged = reason.as_deref().map(|r| secrets.scrubbed(r));
                    tracing::warn!(lane = %self.name, campaign = %tag.campaign, reason = ?logged, "identity mismatch: this lane leaves the campaign");
                    let _ = self.supervisor.cast(SupMsg::Exclude {
                        lane: self.name.to_string(),
                        campaign: tag.campaign.clone(),
                    });
                }
                let mut ctx = self.outcome_ctx(state);
                // A release carries no phase walls: nothing it did is measured.
                ctx.walls = Default::default();
                let o = outcome::released(&ctx, kind, reason, gate, &secrets);
                record_outcome(&attempt_span, &o);
                self.hand_off(
                    myself,
                    span,
                    tag,
                    Ended {
                        outcome: o,
                        with_record: false,
                        secrets,
                        driver,
                    },
                );
            }
            Effect::RestartDriver => state.slot.restart().await,
            Effect::Finish { published } => self.finish(myself, state, published),
        }
    }

    /// Starts the agent (through the driver, or the arm's task API) and its timeout.
    fn start_agent(
        &self,
        myself: &ActorRef<LaneMsg>,
        state: &mut LaneState,
        driver: Arc<DriverProcess>,
        max_turns: u32,
    ) {
        let (Some(unit), Some(cur)) = (state.unit.as_ref(), state.current.as_ref()) else {
            return;
        };
        let tag = cur.tag.clone();
        let span = cur.phase_span.clone();
        let t = &cur.trial;
        let timeout = Duration::from_secs(u64::from(t.timeout_s));
        let params = AgentParams {
            attempt: self.attempt_ref(cur),
            task: t.task.clone(),
            arm: t.arm.clone(),
            arm_config: parse_json(&t.arm_config_json),
            payload: parse_json(&t.payload_json),
            seed: t.seed,
            timeout_s: t.timeout_s,
            max_turns,
            max_cost_usd: t.max_cost_usd,
        };
        let mut http_cancel = None;
        if let Some(base) = super::task_api(&params.arm_config) {
            // The arm's agent runs behind a task API; the lane drives it itself.
            let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
            http_cancel = Some(cancel_tx);
            let poll = self.config.guest_poll;
            let env = self.env_params(unit, cur);
            let (http, secrets) = (self.http.clone(), self.secrets(unit, cur));
            self.spawn_event(myself, span, tag.clone(), async move {
                let mut result =
                    crate::http_agent::run(&http, &base, &params, cancel_rx, poll, &secrets).await;
                // The driver never saw this agent: when it declared the task infeasible, the
                // lane has the driver submit the official action, so the evaluator can score
                // the declaration.
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
                            result.failure_kind = Some(FailureKind::HarnessError);
                            result.error = Some(format!(
                                "declare_infeasible failed after the agent declared the task infeasible: {e}"
                            ));
                        }
                    }
                }
                Event::AgentFinished(result)
            });
        } else {
            let deadline = timeout + self.config.cancel_grace;
            self.spawn_event(myself, span, tag.clone(), async move {
                call(
                    &driver,
                    method::RUN_AGENT,
                    &params,
                    deadline,
                    Event::AgentFinished,
                    agent_error,
                )
                .await
            });
        }
        let timer = Self::timer(myself, tag, timeout, Event::TaskTimeout);
        if let Some(cur) = state.current.as_mut() {
            cur.agent_timer = Some(timer);
            cur.http_cancel = http_cancel;
        }
    }

    /// Hands an outcome to the supervisor (outbox, then coordinator) from a task: the attempt
    /// record is written first under a pending name, and the supervisor gives it its final
    /// name once the outbox entry is durable, so no crash leaves a score on disk that nothing
    /// replays. The attempt hears `Published` when the outbox has it.
    ///
    /// The driver's stderr is flushed into the folder first: its last lines may still be in
    /// the pipe when its answer arrives.
    fn hand_off(
        &self,
        myself: &ActorRef<LaneMsg>,
        span: tracing::Span,
        tag: AttemptTag,
        ended: Ended,
    ) {
        let Ended {
            outcome: mut o,
            with_record,
            secrets,
            driver,
        } = ended;
        let artifacts_root = self.config.artifacts.clone();
        let supervisor = self.supervisor.clone();
        let dir = artifacts::attempt_dir(&artifacts_root, &tag);
        let upload = match (&self.config.artifact_store, &dir) {
            (Some(_), Ok(d)) => Some(d.clone()),
            _ => None,
        };
        let campaign = tag.campaign.clone();
        self.spawn_event(myself, span, tag, async move {
            if let Some(driver) = driver {
                driver.flush_stderr().await;
            }
            // One blocking task for the folder's scrub and the record, in that order. The
            // outcome goes in and comes back: a panic there is caught, so it is never lost.
            let (o, record) = tokio::task::spawn_blocking(move || {
                let written = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    write_scrubbed(dir, &mut o, &secrets, with_record)
                }));
                let record = written.unwrap_or_else(|_| {
                    o.record
                        .publication_errors
                        .push("scrubbing the attempt folder or writing its record panicked".into());
                    None
                });
                (o, record)
            })
            .await
            .expect("the blocking task catches its panics");
            // With an artifact store, the supervisor uploads the (scrubbed) folder once the
            // entry is durable, and sends the outcome after.
            let upload = upload.filter(|_| with_record);
            let entry = Box::new(Entry {
                campaign,
                outcome: o,
                record,
                // Filled in by the supervisor, which alone holds the lease secret.
                lease: Default::default(),
                upload,
            });
            if let Err(e) = ractor::call!(supervisor, SupMsg::Publish, entry) {
                tracing::error!(error = %e, "could not hand the outcome to the supervisor");
            }
            Event::Published
        });
    }

    /// Ends the current attempt. A published one stays in flight (renewed, in phase publish)
    /// until the coordinator acknowledges it, so the store waits out `publish_grace_s` for it.
    fn finish(&self, myself: &ActorRef<LaneMsg>, state: &mut LaneState, published: bool) {
        if let Some(mut cur) = state.current.take() {
            if let Some(m) = &self.config.metrics {
                cur.record_wall();
                m.observe_walls(&cur.walls);
            }
            if !published {
                tracing::warn!(lane = %self.name, trial = %cur.tag.token, "lease lost before evaluate: attempt abandoned");
            }
            if let Some(t) = cur.agent_timer {
                t.abort();
            }
            if let Some(w) = cur.watchdog {
                w.abort();
            }
            let _ = self.supervisor.cast(SupMsg::Finished {
                tag: cur.tag,
                published,
            });
        }
        // A message, not a call: the next trial starts from a fresh handler.
        let _ = myself.cast(LaneMsg::Next);
    }

    fn attempt_ref(&self, cur: &Current) -> AttemptRef {
        AttemptRef {
            campaign: cur.tag.campaign.to_string(),
            trial_id: cur.tag.token.trial_id.to_string(),
            attempt: cur.tag.token.attempt,
            tag: cur.tag.to_string(),
            // The phase span's, or (not exported here) the attempt's claim.
            traceparent: super::exported_traceparent(&cur.phase_span)
                .unwrap_or_else(|| cur.trial.traceparent.clone()),
        }
    }

    fn env_params(&self, _unit: &Unit, cur: &Current) -> EnvParams {
        let payload = parse_json(&cur.trial.payload_json);
        // A task that is a folder: the one with the submitted digest, on this host (boot
        // fetches it when it is not).
        let task_dir = task_digest(&payload)
            .and_then(|d| self.folders.known(d))
            .map(|p| p.display().to_string());
        EnvParams {
            attempt: self.attempt_ref(cur),
            task: cur.trial.task.clone(),
            arm: cur.trial.arm.clone(),
            seed: cur.trial.seed,
            payload,
            task_dir,
            attempt_dir: artifacts::attempt_dir(&self.config.artifacts, &cur.tag)
                .ok()
                .map(|p| p.display().to_string()),
        }
    }

    /// The secret payload values, and the env values this worker hands the driver (only names
    /// it allows are ever read).
    fn secrets(&self, unit: &Unit, cur: &Current) -> Secrets {
        let env = admit::launch(&unit.driver, &self.config, |name| std::env::var(name).ok())
            .map(|l| l.env)
            .unwrap_or_default();
        outcome::secrets_of(&unit.driver, &parse_json(&cur.trial.payload_json), &env)
            .union(&cur.leases.secrets())
    }

    /// Where and when the current attempt ran, with its walls up to now.
    fn outcome_ctx(&self, state: &mut LaneState) -> OutcomeCtx {
        let cur = state.current.as_mut().expect("an attempt is running");
        cur.record_wall();
        OutcomeCtx {
            token: cur.tag.token.clone(),
            lane: self.name.clone(),
            host: self.config.host.clone(),
            worker: self.config.worker_id.clone(),
            // The driver's pins, and what boot pinned of this attempt's environment.
            driver: state.slot.identity.clone().map(|mut id| {
                id.pins
                    .extend(cur.env_pins.iter().map(|(k, v)| (k.clone(), v.clone())));
                id
            }),
            walls: cur.walls,
            started_utc: cur.started_utc.clone(),
            ended_utc: now_utc(),
        }
    }

    /// The owned context of admission: the record to write, where, and the driver to use.
    fn admit_ctx(&self, unit: &Unit, cur: &Current) -> AdmitCtx {
        let spec = unit.driver.clone();
        let record = json!({
            "campaign": unit.campaign,
            "trial_id": cur.tag.token.trial_id,
            "attempt": cur.tag.token.attempt,
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
        let launch = admit::launch(&spec, &self.config, |name| std::env::var(name).ok());
        AdmitCtx {
            dir: artifacts::attempt_dir(&self.config.artifacts, &cur.tag),
            record,
            key: admit::driver_key(&launch, &spec),
            launch,
            lane: self.name.to_string(),
            host: self.config.host.to_string(),
            secrets: self.secrets(unit, cur),
            driver_records: self.config.outbox.join(crate::driver::process::RECORDS_DIR),
            spec,
        }
    }
}

/// An ended attempt, as the lane hands it to the supervisor.
struct Ended {
    outcome: lanes_common::row::Outcome,
    /// Published, so its record is written and its folder kept; not a release.
    with_record: bool,
    /// Scrubbed from its folder.
    secrets: Secrets,
    /// Whose stderr is flushed into the folder first.
    driver: Option<Arc<DriverProcess>>,
}

/// Scrubs what the driver left in the attempt's folder before the outcome is recorded, then
/// (`with_record`) writes the outcome's record under its pending name and returns its final
/// path. Every destination is attempted on its own: a failed scrub or record is disclosed in
/// the row, and the outbox and the coordinator still get the outcome.
fn write_scrubbed(
    dir: std::io::Result<std::path::PathBuf>,
    o: &mut lanes_common::row::Outcome,
    secrets: &Secrets,
    with_record: bool,
) -> Option<std::path::PathBuf> {
    if let Ok(d) = &dir
        && let Err(e) = crate::scrub_files::scrub_attempt_dir(d, secrets)
    {
        let e = secrets.scrubbed(&e.to_string());
        tracing::warn!(error = %e, "could not scrub the driver's files in the attempt folder");
        o.record
            .publication_errors
            .push(format!("scrubbing the attempt folder: {e}"));
    }
    if !with_record {
        return None;
    }
    let json = serde_json::to_value(&*o).map_err(std::io::Error::other);
    match write_pending_record(dir, json) {
        Ok(path) => {
            o.record.artifacts.push(path.display().to_string());
            Some(path)
        }
        Err(e) => {
            o.record
                .publication_errors
                .push(format!("attempt record: {e}"));
            None
        }
    }
}

/// Writes `outcome.json` under its pending name and returns the final path.
fn write_pending_record(
    dir: std::io::Result<std::path::PathBuf>,
    json: std::io::Result<Value>,
) -> std::io::Result<std::path::PathBuf> {
    let (dir, json) = (dir?, json?);
    let path = dir.join("outcome.json");
    let pending = crate::outbox::pending_record(&path);
    let name = pending.file_name().expect("a file name");
    artifacts::write_file(&dir, &name.to_string_lossy(), &json)?;
    Ok(path)
}

/// Records an attempt's outcome on its span: status, failure kind, score and token usage,
/// and an error status with an `exception` event for an attempt that did not score. The
/// outcome's texts were scrubbed of secret values when it was built.
fn record_outcome(span: &tracing::Span, o: &lanes_common::row::Outcome) {
    span.record("lanes.status", o.status.as_str());
    if let Some(k) = o.failure_kind {
        span.record("lanes.failure_kind", k.as_str());
    }
    if let Some(score) = o.result.score {
        span.record("lanes.score", score);
    }
    if let Some(t) = &o.result.tokens {
        span.record("gen_ai.usage.input_tokens", t.input);
        span.record("gen_ai.usage.output_tokens", t.output);
    }
    if let Some(k) = o.failure_kind {
        let message = o.record.error.as_deref().unwrap_or(k.as_str());
        lanes_telemetry::record_error(span, k.as_str(), message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task folder's verifier may run ten minutes by default: the lane must not kill the
    /// driver at its usual five-minute evaluate deadline.
    #[test]
    fn a_task_folders_timeouts_raise_the_call_deadlines() {
        let plain = Deadlines::of(&json!({"prompt": "x"}));
        assert_eq!(plain.env, ENV_DEADLINE);
        assert_eq!(plain.evaluate, EVAL_DEADLINE);
        let task = json!({"harbor": {
            "digest": "sha256:00", "files": {}, "verifier_timeout_s": 900.0,
            "build_timeout_s": 1200.0, "allow_internet": true,
        }});
        let d = Deadlines::of(&task);
        assert_eq!(d.evaluate, Duration::from_secs(900) + FOLDER_MARGIN);
        assert_eq!(d.env, Duration::from_secs(1200) + FOLDER_MARGIN);
        assert_eq!(task_digest(&task), Some("sha256:00"));
        assert_eq!(task_digest(&plain_payload()), None);
    }

    fn plain_payload() -> Value {
        json!({"harbor_like": {"digest": "x"}})
    }
}
