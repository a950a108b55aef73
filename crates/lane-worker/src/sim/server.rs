//! The sim driver's JSON-RPC server: the request loop on the driver's stdin, the decoding of
//! each line through the driver protocol codec, the params of each method, and the answers.
//! Every method but `run_agent` is answered in order on this thread; a `run_agent` answers
//! from its own thread (see [`super::agent`]).

use std::collections::{HashMap, HashSet};
use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use lanes_common::row::{Check, DriverIdentity, FailureKind};
use lanes_common::spec::{SimConfig, SimFault};

use super::agent::{Agent, AgentRun, now_epoch_s, sleep_s};
use super::plan::Plan;
use super::{DRIVER_NAME, GARBAGE_LINE};
use crate::driver::codec::{self, Request, RpcError};
use crate::driver::protocol::{
    AgentParams, AttemptRef, CancelParams, EnvParams, EnvResult, EvaluateResult, GateResult,
    HealthResult, InitializeParams, PROTOCOL, TeardownParams, code, method,
};

/// Remembered plans and torn-down tags are forgotten past this many; a plan is a pure
/// function of its params, so forgetting only costs a recomputation.
const MEMORY_LIMIT: usize = 1024;

/// What an injected crash calls; the process exit in production, a recorder in tests.
pub(super) type ExitFn = Arc<dyn Fn(i32) + Send + Sync>;

/// [`super::serve`] with the process exit injectable.
pub(super) fn serve_with(
    mut input: impl BufRead,
    output: impl Write + Send + 'static,
    exit: ExitFn,
) -> io::Result<()> {
    let mut server = Server::new(Output::new(output), exit);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = input.read_until(b'\n', &mut line);
        match read {
            Ok(0) => {
                server.stop();
                return Ok(());
            }
            Ok(_) => match server.handle_line(&line) {
                Ok(Flow::Continue) => {}
                Ok(Flow::Shutdown) => return Ok(()),
                Err(e) => {
                    server.stop();
                    return Err(e);
                }
            },
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                server.stop();
                return Err(e);
            }
        }
    }
}

/// The shared stdout: one whole line per lock, so answers never interleave. Every line but
/// the injected garbage is encoded by the driver protocol codec.
#[derive(Clone)]
pub(super) struct Output(Arc<Mutex<Box<dyn Write + Send>>>);

impl Output {
    fn new(output: impl Write + Send + 'static) -> Self {
        Self(Arc::new(Mutex::new(Box::new(output))))
    }

    /// Writes one newline-terminated line.
    fn line(&self, line: &str) -> io::Result<()> {
        // A poisoned lock only means another thread panicked mid-write; keep serving.
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        w.write_all(line.as_bytes())?;
        w.flush()
    }

    pub(super) fn result<R: Serialize + ?Sized>(&self, id: u64, result: &R) -> io::Result<()> {
        self.line(&codec::encode_response_ok(id, result))
    }

    /// An error answer; `None` when the request's id could not be read.
    fn error(&self, id: Option<u64>, e: &RpcError) -> io::Result<()> {
        self.line(&codec::encode_response_err(id, e))
    }

    pub(super) fn notify<P: Serialize + ?Sized>(&self, method: &str, params: &P) -> io::Result<()> {
        self.line(&codec::encode_notification(method, params))
    }

    /// The injected `garbage` fault: a line that is not JSON-RPC.
    pub(super) fn garbage(&self) -> io::Result<()> {
        self.line(&format!("{GARBAGE_LINE}\n"))
    }
}

fn invalid_params(message: impl std::fmt::Display) -> RpcError {
    RpcError::new(code::INVALID_PARAMS, format!("invalid params: {message}"))
}

/// A driver error that names an infra failure kind in `data.failure_kind`.
fn failure(kind: FailureKind, message: impl Into<String>) -> RpcError {
    RpcError::new(code::DRIVER_ERROR, message).with_failure_kind(kind.as_str())
}

/// A request's params, read field by field so every error names its field.
struct Params<'a>(&'a Map<String, Value>);

impl Params<'_> {
    /// A field; an absent one reads as `null`, so `Option` and `Value` fields may be left out.
    fn field<T: DeserializeOwned>(&self, name: &str) -> Result<T, RpcError> {
        match self.0.get(name) {
            Some(v) => T::deserialize(v).map_err(|e| invalid_params(format!("{name}: {e}"))),
            None => T::deserialize(&Value::Null)
                .map_err(|_| invalid_params(format!("missing field `{name}`"))),
        }
    }

    fn init(&self) -> Result<InitializeParams, RpcError> {
        Ok(InitializeParams {
            protocol: self.field("protocol")?,
            lane: self.field("lane")?,
            host: self.field("host")?,
            sim: self.field("sim")?,
        })
    }

    fn env(&self) -> Result<EnvParams, RpcError> {
        Ok(EnvParams {
            attempt: self.field("attempt")?,
            task: self.field("task")?,
            arm: self.field("arm")?,
            seed: self.field("seed")?,
            payload: self.field("payload")?,
            task_dir: self.field("task_dir")?,
            attempt_dir: self.field("attempt_dir")?,
        })
    }

    fn agent(&self) -> Result<AgentParams, RpcError> {
        Ok(AgentParams {
            attempt: self.field("attempt")?,
            task: self.field("task")?,
            arm: self.field("arm")?,
            arm_config: self.field("arm_config")?,
            payload: self.field("payload")?,
            seed: self.field("seed")?,
            timeout_s: self.field("timeout_s")?,
            max_turns: self.field("max_turns")?,
            max_cost_usd: self.field("max_cost_usd")?,
        })
    }

    fn teardown(&self) -> Result<TeardownParams, RpcError> {
        Ok(TeardownParams {
            lane: self.field("lane")?,
            tag: self.field("tag")?,
        })
    }

    fn cancel(&self) -> Result<CancelParams, RpcError> {
        Ok(CancelParams {
            tag: self.field("tag")?,
        })
    }
}

/// Whether to keep serving after a line.
enum Flow {
    Continue,
    Shutdown,
}

/// What a request handler decided.
enum Reply {
    Result(Value),
    Error(RpcError),
    /// An agent thread will answer.
    Deferred,
    /// Answer, then stop serving.
    Shutdown,
}

/// The state of one serving: the campaign's config, what each attempt drew, and the agents.
struct Server {
    out: Output,
    exit: ExitFn,
    cfg: Option<Arc<SimConfig>>,
    /// What each attempt (by tag) drew, so `evaluate` agrees with `run_agent`.
    plans: HashMap<String, Plan>,
    torn_down: HashSet<String>,
    /// Attempts (by tag) whose infeasible action was submitted: evaluate scores that action.
    declared: HashSet<String>,
    agents: Vec<Agent>,
    /// Set when serving ends; only a hung agent waits for it.
    stopping: Arc<AtomicBool>,
    /// A provider's rate-limit window, per arm, until epoch seconds: like a real provider,
    /// every request inside the window is refused again.
    rate_windows: HashMap<String, i64>,
}

impl Server {
    fn new(out: Output, exit: ExitFn) -> Self {
        Self {
            out,
            exit,
            cfg: None,
            plans: HashMap::new(),
            torn_down: HashSet::new(),
            declared: HashSet::new(),
            agents: Vec::new(),
            stopping: Arc::new(AtomicBool::new(false)),
            rate_windows: HashMap::new(),
        }
    }

    fn handle_line(&mut self, line: &[u8]) -> io::Result<Flow> {
        // Blank lines carry nothing; tolerate them.
        if line.trim_ascii().is_empty() {
            return Ok(Flow::Continue);
        }
        let Request {
            id,
            method: name,
            params,
        } = match codec::decode_request(line) {
            Ok(request) => request,
            Err(bad) => {
                self.out.error(bad.id, &bad.rpc_error())?;
                return Ok(Flow::Continue);
            }
        };
        let empty = Map::new();
        let params = match &params {
            Value::Object(m) => Ok(Params(m)),
            Value::Null => Ok(Params(&empty)),
            Value::Array(_) | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
                Err(invalid_params("`params` must be an object"))
            }
        };
        let Some(id) = id else {
            // A notification: never answered. Only `cancel` means anything to us.
            if name == method::CANCEL
                && let Ok(p) = params.and_then(|p| p.cancel())
            {
                self.cancel(|tag| tag == p.tag);
            }
            return Ok(Flow::Continue);
        };
        let reply = match params {
            Ok(p) => self.dispatch(id, &name, &p),
            Err(e) => Reply::Error(e),
        };
        match reply {
            Reply::Result(v) => self.out.result(id, &v)?,
            Reply::Error(e) => self.out.error(Some(id), &e)?,
            Reply::Deferred => {}
            Reply::Shutdown => {
                self.stop();
                self.out.result(id, &json!({}))?;
                return Ok(Flow::Shutdown);
            }
        }
        Ok(Flow::Continue)
    }

    fn dispatch(&mut self, id: u64, name: &str, p: &Params<'_>) -> Reply {
        let known = [
            method::INITIALIZE,
            method::BOOT,
            method::RESET,
            method::GATE,
            method::DECLARE_INFEASIBLE,
            method::RUN_AGENT,
            method::EVALUATE,
            method::HEALTH,
            method::TEARDOWN,
            method::SHUTDOWN,
            method::CANCEL,
        ];
        if !known.contains(&name) {
            return Reply::Error(RpcError::new(
                code::METHOD_NOT_FOUND,
                format!("method not found: {name}"),
            ));
        }
        if name == method::SHUTDOWN {
            return Reply::Shutdown;
        }
        if name == method::INITIALIZE {
            return to_reply(self.initialize(p));
        }
        let Some(cfg) = self.cfg.clone() else {
            return Reply::Error(RpcError::new(code::DRIVER_ERROR, "not initialized"));
        };
        match name {
            method::BOOT => to_reply(self.boot(&cfg, p)),
            method::RESET => to_reply(self.reset(&cfg, p)),
            method::GATE => to_reply(self.gate(&cfg, p)),
            method::DECLARE_INFEASIBLE => to_reply(self.declare_infeasible(p)),
            method::RUN_AGENT => match self.run_agent(&cfg, id, p) {
                Ok(()) => Reply::Deferred,
                Err(e) => Reply::Error(e),
            },
            method::EVALUATE => to_reply(self.evaluate(&cfg, p)),
            method::HEALTH => to_reply(Ok(HealthResult { ok: true })),
            method::TEARDOWN => to_reply(self.teardown(p)),
            method::CANCEL => to_reply(p.cancel().map(|c| {
                self.cancel(|tag| tag == c.tag);
                json!({})
            })),
            _ => unreachable!("every known method is matched"),
        }
    }

    fn initialize(&mut self, p: &Params<'_>) -> Result<DriverIdentity, RpcError> {
        let init = p.init()?;
        if init.protocol != PROTOCOL {
            return Err(RpcError::new(
                code::DRIVER_ERROR,
                format!(
                    "unsupported protocol {:?}, expected {PROTOCOL:?}",
                    init.protocol
                ),
            ));
        }
        let cfg = match init.sim {
            None | Some(Value::Null) => SimConfig::default(),
            Some(v) => {
                SimConfig::deserialize(v).map_err(|e| invalid_params(format!("sim: {e}")))?
            }
        };
        self.cfg = Some(Arc::new(cfg));
        self.plans.clear();
        Ok(DriverIdentity {
            name: DRIVER_NAME.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            pins: [("protocol".to_owned(), PROTOCOL.to_owned())].into(),
        })
    }

    /// The plan of an attempt: remembered by tag, or drawn (and remembered).
    fn plan(&mut self, cfg: &SimConfig, attempt: &AttemptRef, arm: &str, seed: u64) -> Plan {
        if let Some(plan) = self.plans.get(&attempt.tag) {
            return plan.clone();
        }
        if self.plans.len() >= MEMORY_LIMIT {
            self.plans.clear();
        }
        let plan = Plan::draw(cfg, seed, arm, attempt.attempt);
        self.plans.insert(attempt.tag.clone(), plan.clone());
        plan
    }

    fn check_live(&self, attempt: &AttemptRef) -> Result<(), RpcError> {
        if self.torn_down.contains(&attempt.tag) {
            return Err(failure(
                FailureKind::HarnessError,
                format!("attempt {} was torn down", attempt.tag),
            ));
        }
        Ok(())
    }

    fn boot(&mut self, cfg: &SimConfig, p: &Params<'_>) -> Result<EnvResult, RpcError> {
        let env = p.env()?;
        // A boot (re)creates the environment: a torn-down tag is live again, and the attempt
        // is drawn afresh from its params.
        self.torn_down.remove(&env.attempt.tag);
        self.plans.remove(&env.attempt.tag);
        self.declared.remove(&env.attempt.tag);
        let plan = self.plan(cfg, &env.attempt, &env.arm, env.seed);
        sleep_s(cfg.boot_s);
        if plan.fault == Some(SimFault::Kind(FailureKind::BootFailed)) {
            return Err(failure(FailureKind::BootFailed, "sim injected boot_failed"));
        }
        Ok(EnvResult::default())
    }

    fn reset(&mut self, cfg: &SimConfig, p: &Params<'_>) -> Result<EnvResult, RpcError> {
        let env = p.env()?;
        self.check_live(&env.attempt)?;
        let plan = self.plan(cfg, &env.attempt, &env.arm, env.seed);
        sleep_s(cfg.reset_s);
        Ok(EnvResult {
            verified: plan.fault != Some(SimFault::Kind(FailureKind::ResetUnverified)),
            ..Default::default()
        })
    }

    /// Read-only: infeasible exactly for the configured infeasible tasks.
    fn gate(&mut self, cfg: &SimConfig, p: &Params<'_>) -> Result<GateResult, RpcError> {
        let env = p.env()?;
        self.check_live(&env.attempt)?;
        let infeasible = cfg.infeasible_tasks.contains(&env.task);
        Ok(GateResult {
            infeasible,
            turns: cfg.gate_turns,
            reason: infeasible.then(|| format!("sim: task {} is listed infeasible", env.task)),
            cost_usd: (cfg.gate_cost_usd > 0.0).then_some(cfg.gate_cost_usd),
        })
    }

    fn declare_infeasible(&mut self, p: &Params<'_>) -> Result<Value, RpcError> {
        let env = p.env()?;
        self.check_live(&env.attempt)?;
        if self.declared.len() >= MEMORY_LIMIT {
            self.declared.clear();
        }
        self.declared.insert(env.attempt.tag);
        Ok(json!({}))
    }

    fn run_agent(&mut self, cfg: &SimConfig, id: u64, p: &Params<'_>) -> Result<(), RpcError> {
        let params = p.agent()?;
        self.check_live(&params.attempt)?;
        let mut plan = self.plan(cfg, &params.attempt, &params.arm, params.seed);
        let now = now_epoch_s();
        if self
            .rate_windows
            .get(&params.arm)
            .is_some_and(|&until| until > now)
        {
            plan.fault = Some(SimFault::Kind(FailureKind::RateLimit));
        } else if plan.fault == Some(SimFault::Kind(FailureKind::RateLimit)) {
            let reset = cfg.rate_limit_reset_s.max(0.0).ceil() as i64;
            self.rate_windows.insert(params.arm.clone(), now + reset);
        }
        self.agents.retain(|a| !a.handle.is_finished());
        let run = AgentRun {
            out: self.out.clone(),
            exit: self.exit.clone(),
            id,
            rate_limit_reset_s: cfg.rate_limit_reset_s,
            params,
            plan,
            stopping: self.stopping.clone(),
        };
        let agent = run
            .spawn()
            .map_err(|e| RpcError::new(code::DRIVER_ERROR, format!("cannot start agent: {e}")))?;
        self.agents.push(agent);
        Ok(())
    }

    fn evaluate(&mut self, cfg: &SimConfig, p: &Params<'_>) -> Result<EvaluateResult, RpcError> {
        // The protocol's evaluate carries the attempt; `arm` and `seed` are only needed when
        // this process has not seen the attempt (then it is drawn from them).
        let attempt: AttemptRef = p.field("attempt")?;
        self.check_live(&attempt)?;
        let plan = match self.plans.get(&attempt.tag) {
            Some(plan) => plan.clone(),
            None => {
                let arm: String = p.field("arm")?;
                let seed: u64 = p.field("seed")?;
                self.plan(cfg, &attempt, &arm, seed)
            }
        };
        sleep_s(cfg.evaluate_s);
        if plan.fault == Some(SimFault::Kind(FailureKind::EvaluatorError)) {
            return Err(failure(
                FailureKind::EvaluatorError,
                "sim injected evaluator_error",
            ));
        }
        // A declared infeasible is scored like the benchmark's infeasible action: it passes
        // exactly when the task is infeasible.
        let (name, passed) = if self.declared.contains(&attempt.tag) {
            let task: String = p.field("task")?;
            ("sim_infeasible", cfg.infeasible_tasks.contains(&task))
        } else {
            ("sim", plan.passed)
        };
        let score = if passed { 1.0 } else { 0.0 };
        Ok(EvaluateResult {
            score,
            passed,
            checks: vec![Check {
                name: name.to_owned(),
                passed,
                score: Some(score),
                detail: String::new(),
            }],
        })
    }

    fn teardown(&mut self, p: &Params<'_>) -> Result<Value, RpcError> {
        let params = p.teardown()?;
        match params.tag {
            Some(tag) => {
                self.cancel(|t| t == tag);
                self.plans.remove(&tag);
                self.declared.remove(&tag);
                if self.torn_down.len() >= MEMORY_LIMIT {
                    self.torn_down.clear();
                }
                self.torn_down.insert(tag);
            }
            // Everything an earlier process of this lane left behind: the sim keeps nothing
            // across processes, so there is only this process's state to drop.
            None => {
                self.cancel(|_| true);
                self.plans.clear();
                self.declared.clear();
            }
        }
        Ok(json!({}))
    }

    fn cancel(&self, which: impl Fn(&str) -> bool) {
        for a in self.agents.iter().filter(|a| which(&a.tag)) {
            a.cancel.set();
        }
    }

    /// Stop serving: cancel every agent (each answers `cancelled`), release hung ones, and
    /// wait for them all, so nothing is written after this returns.
    fn stop(&mut self) {
        self.cancel(|_| true);
        self.stopping.store(true, Ordering::SeqCst);
        for a in self.agents.drain(..) {
            let _ = a.handle.join();
        }
    }
}

fn to_reply<T: Serialize>(r: Result<T, RpcError>) -> Reply {
    match r.and_then(|v| {
        serde_json::to_value(v).map_err(|e| RpcError::new(code::DRIVER_ERROR, e.to_string()))
    }) {
        Ok(v) => Reply::Result(v),
        Err(e) => Reply::Error(e),
    }
}
