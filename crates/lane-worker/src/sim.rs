//! The built-in sim driver (`lanes driver sim`): a JSON-RPC 2.0 server on stdin/stdout, one
//! object per line, that plays boot, reset, agent and evaluator with configurable durations,
//! pass rates and faults, so a campaign can be rehearsed end to end without a real harness.
//!
//! # Determinism
//! Every random draw of an attempt comes from one splitmix64 stream seeded from the call's
//! `(seed, arm, attempt)` and nothing else, so the same attempt gives the same outcome in any
//! process, and a retry (`attempt + 1`) draws afresh instead of repeating its fault. The seed is
//! (`attempt_seed`):
//!
//! ```text
//! s = mix(seed ^ 0x6c61_6e65_732d_7369)      // "lanes-si"
//! s = mix(s ^ fnv1a64(arm as UTF-8 bytes))
//! s = mix(s ^ attempt as u64)
//! ```
//!
//! where `mix` is the splitmix64 finalizer and `fnv1a64` is 64-bit FNV-1a. The stream is then
//! drawn in a fixed order (`Plan::draw`): fault, agent duration, turns, cost, pass. Which
//! calls the lane makes never changes what an attempt draws.
//!
//! # Faults
//! One uniform draw per attempt picks at most one fault, walking `faults` in its key order and
//! accumulating probabilities. The fault shows up in the call it belongs to: `boot_failed` in
//! `boot`, `reset_unverified` in `reset`, `evaluator_error` in `evaluate`, and everything else
//! during `run_agent`. Kinds the spec loader rejects (`preflight`, `identity_mismatch`,
//! `lease_expired`, non-scored statuses) are ignored here.

use std::collections::{HashMap, HashSet};
use std::io::{self, BufRead, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use lanes_common::row::{Check, DriverIdentity, FailureKind, Status, TokenUsage};
use lanes_common::spec::{SimConfig, SimFault, SimProcessFault};

use crate::driver::protocol::{
    AgentParams, AgentResult, AgentStatus, AttemptRef, CancelParams, EnvParams, EnvResult,
    ErrorData, EvaluateResult, GateResult, HealthResult, InitializeParams, MAX_LINE_BYTES,
    PROTOCOL, ProgressParams, TeardownParams, code, method,
};

/// The name the sim driver reports in `initialize`.
pub const DRIVER_NAME: &str = "lanes-sim";
/// The exit code of an injected `driver_crash` or `exit`.
pub const CRASH_EXIT_CODE: i32 = 3;
/// The line an injected `garbage` fault prints to stdout.
pub const GARBAGE_LINE: &str = "lanes-sim: injected garbage {not json-rpc";

/// How often a sleeping agent looks for a `cancel`.
const CANCEL_POLL: Duration = Duration::from_millis(10);
/// Tokens the sim reports per turn.
const INPUT_TOKENS_PER_TURN: u64 = 1000;
const OUTPUT_TOKENS_PER_TURN: u64 = 200;
/// Remembered plans and torn-down tags are forgotten past this many; a plan is a pure
/// function of its params, so forgetting only costs a recomputation.
const MEMORY_LIMIT: usize = 1024;

/// Serve the sim driver on this process's stdin/stdout until EOF or `shutdown`. An injected
/// `driver_crash` or `exit` ends the process with [`CRASH_EXIT_CODE`].
pub fn run_stdio() -> io::Result<()> {
    serve(io::stdin().lock(), io::stdout())
}

/// Serve the sim driver on `input`/`output` until EOF or `shutdown`. An injected
/// `driver_crash` or `exit` ends the process with [`CRASH_EXIT_CODE`].
pub fn serve(input: impl BufRead, output: impl Write + Send + 'static) -> io::Result<()> {
    serve_with(
        input,
        output,
        Arc::new(|code| {
            let _ = io::stdout().flush();
            std::process::exit(code)
        }),
    )
}

/// What an injected crash calls; the process exit in production, a recorder in tests.
pub(crate) type ExitFn = Arc<dyn Fn(i32) + Send + Sync>;

/// [`serve`] with the process exit injectable.
pub(crate) fn serve_with(
    mut input: impl BufRead,
    output: impl Write + Send + 'static,
    exit: ExitFn,
) -> io::Result<()> {
    let mut server = Server::new(Output(Arc::new(Mutex::new(Box::new(output)))), exit);
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

// ---------------------------------------------------------------------------------------------
// The PRNG and the per-attempt plan.

/// The splitmix64 finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// 64-bit FNV-1a.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The PRNG seed of one attempt; see the module docs. Stable across processes and releases.
pub(crate) fn attempt_seed(seed: u64, arm: &str, attempt: u32) -> u64 {
    let s = mix(seed ^ 0x6c61_6e65_732d_7369);
    let s = mix(s ^ fnv1a64(arm.as_bytes()));
    mix(s ^ u64::from(attempt))
}

/// splitmix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough for fault dice.
pub(crate) struct SplitMix64(u64);

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// Uniform in `[0, 1)`, from the top 53 bits.
    pub(crate) fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `[lo, hi]` (`lo` when the range is empty or reversed).
    fn range_f64(&mut self, [lo, hi]: [f64; 2]) -> f64 {
        let u = self.next_f64();
        if hi > lo { lo + (hi - lo) * u } else { lo }
    }

    /// Uniform over the integers `lo..=hi` (`lo` when the range is empty or reversed).
    fn range_u32(&mut self, [lo, hi]: [u32; 2]) -> u32 {
        let u = self.next_f64();
        if hi <= lo {
            return lo;
        }
        let span = u64::from(hi - lo);
        let k = ((u * (span + 1) as f64) as u64).min(span);
        lo + k as u32
    }
}

/// Everything one attempt draws, before the lane's limits (`max_turns`) are applied.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub(crate) fault: Option<SimFault>,
    pub(crate) agent_s: f64,
    pub(crate) turns: u32,
    pub(crate) cost_usd: f64,
    pub(crate) passed: bool,
}

impl Plan {
    /// Draw an attempt's plan, in the fixed order fault, agent duration, turns, cost, pass.
    pub(crate) fn draw(cfg: &SimConfig, seed: u64, arm: &str, attempt: u32) -> Self {
        let mut rng = SplitMix64::new(attempt_seed(seed, arm, attempt));
        let u = rng.next_f64();
        let mut acc = 0.0;
        let mut fault = None;
        for (f, p) in &cfg.faults {
            acc += p;
            if u < acc {
                fault = Some(*f);
                break;
            }
        }
        let agent_s = rng.range_f64(cfg.agent_s);
        let turns = rng.range_u32(cfg.turns);
        let cost_usd = rng.range_f64(cfg.cost_usd);
        let pass_rate = cfg
            .pass_rate
            .get(arm)
            .copied()
            .unwrap_or(cfg.default_pass_rate);
        let passed = rng.next_f64() < pass_rate;
        Self {
            fault,
            agent_s,
            turns,
            cost_usd,
            passed,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// JSON-RPC plumbing.

/// The shared stdout: one whole line per lock, so answers never interleave.
#[derive(Clone)]
struct Output(Arc<Mutex<Box<dyn Write + Send>>>);

impl Output {
    fn raw_line(&self, line: &str) -> io::Result<()> {
        // A poisoned lock only means another thread panicked mid-write; keep serving.
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        w.write_all(line.as_bytes())?;
        w.write_all(b"\n")?;
        w.flush()
    }

    fn json_line(&self, v: &Value) -> io::Result<()> {
        self.raw_line(&v.to_string())
    }

    fn result(&self, id: &Value, result: impl Serialize) -> io::Result<()> {
        let result = serde_json::to_value(result).map_err(io::Error::other)?;
        self.json_line(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }

    fn error(&self, id: &Value, e: &RpcError) -> io::Result<()> {
        let mut error = json!({"code": e.code, "message": e.message});
        if let Some(data) = &e.data {
            error["data"] = data.clone();
        }
        self.json_line(&json!({"jsonrpc": "2.0", "id": id, "error": error}))
    }

    fn notify(&self, method: &str, params: impl Serialize) -> io::Result<()> {
        let params = serde_json::to_value(params).map_err(io::Error::other)?;
        self.json_line(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
struct RpcError {
    code: i64,
    message: String,
    data: Option<Value>,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    fn invalid_params(message: impl std::fmt::Display) -> Self {
        Self::new(code::INVALID_PARAMS, format!("invalid params: {message}"))
    }

    /// A driver error that names an infra failure kind in `data.failure_kind`.
    fn failure(kind: FailureKind, message: impl Into<String>) -> Self {
        let data = ErrorData {
            failure_kind: Some(kind.as_str().to_owned()),
            extra: Default::default(),
        };
        Self {
            code: code::DRIVER_ERROR,
            message: message.into(),
            data: serde_json::to_value(data).ok(),
        }
    }
}

/// A request's params, read field by field so every error names its field.
struct Params<'a>(&'a Map<String, Value>);

impl Params<'_> {
    /// A field; an absent one reads as `null`, so `Option` and `Value` fields may be left out.
    fn field<T: DeserializeOwned>(&self, name: &str) -> Result<T, RpcError> {
        match self.0.get(name) {
            Some(v) => {
                T::deserialize(v).map_err(|e| RpcError::invalid_params(format!("{name}: {e}")))
            }
            None => T::deserialize(&Value::Null)
                .map_err(|_| RpcError::invalid_params(format!("missing field `{name}`"))),
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

// ---------------------------------------------------------------------------------------------
// The server.

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

/// A running `run_agent`.
struct Agent {
    tag: String,
    cancel: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

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
        if line.len() > MAX_LINE_BYTES {
            let e = RpcError::new(
                code::INVALID_REQUEST,
                format!("line longer than {MAX_LINE_BYTES} bytes"),
            );
            self.out.error(&Value::Null, &e)?;
            return Ok(Flow::Continue);
        }
        if line.trim_ascii().is_empty() {
            return Ok(Flow::Continue);
        }
        let msg: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => {
                let e = RpcError::new(code::PARSE_ERROR, format!("parse error: {e}"));
                self.out.error(&Value::Null, &e)?;
                return Ok(Flow::Continue);
            }
        };
        let Some(obj) = msg.as_object() else {
            let e = RpcError::new(code::INVALID_REQUEST, "a request must be a JSON object");
            self.out.error(&Value::Null, &e)?;
            return Ok(Flow::Continue);
        };
        let id = obj.get("id").cloned();
        let invalid = |message: &str| RpcError::new(code::INVALID_REQUEST, message);
        let checked = if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            Err(invalid("`jsonrpc` must be \"2.0\""))
        } else if let Some(m) = obj.get("method").and_then(Value::as_str) {
            Ok(m)
        } else {
            Err(invalid("`method` must be a string"))
        };
        let method = match checked {
            Ok(m) => m,
            Err(e) => {
                self.out.error(id.as_ref().unwrap_or(&Value::Null), &e)?;
                return Ok(Flow::Continue);
            }
        };
        let empty = Map::new();
        let params = match obj.get("params") {
            None | Some(Value::Null) => Ok(Params(&empty)),
            Some(Value::Object(m)) => Ok(Params(m)),
            Some(_) => Err(RpcError::invalid_params("`params` must be an object")),
        };
        let Some(id) = id else {
            // A notification: never answered. Only `cancel` means anything to us.
            if method == method::CANCEL
                && let Ok(p) = params.and_then(|p| p.cancel())
            {
                self.cancel(|tag| tag == p.tag);
            }
            return Ok(Flow::Continue);
        };
        let reply = match params {
            Ok(p) => self.dispatch(&id, method, &p),
            Err(e) => Reply::Error(e),
        };
        match reply {
            Reply::Result(v) => self.out.result(&id, v)?,
            Reply::Error(e) => self.out.error(&id, &e)?,
            Reply::Deferred => {}
            Reply::Shutdown => {
                self.stop();
                self.out.result(&id, json!({}))?;
                return Ok(Flow::Shutdown);
            }
        }
        Ok(Flow::Continue)
    }

    fn dispatch(&mut self, id: &Value, name: &str, p: &Params<'_>) -> Reply {
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
            Some(v) => SimConfig::deserialize(v)
                .map_err(|e| RpcError::invalid_params(format!("sim: {e}")))?,
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
            return Err(RpcError::failure(
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
            return Err(RpcError::failure(
                FailureKind::BootFailed,
                "sim injected boot_failed",
            ));
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
            health_url: None,
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

    fn run_agent(&mut self, cfg: &SimConfig, id: &Value, p: &Params<'_>) -> Result<(), RpcError> {
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
        let cancel = Arc::new(AtomicBool::new(false));
        let run = AgentRun {
            out: self.out.clone(),
            exit: self.exit.clone(),
            id: id.clone(),
            rate_limit_reset_s: cfg.rate_limit_reset_s,
            params,
            plan,
            cancel: cancel.clone(),
            stopping: self.stopping.clone(),
        };
        let tag = run.params.attempt.tag.clone();
        let handle = thread::Builder::new()
            .name(format!("sim-agent-{tag}"))
            .spawn(move || run.run())
            .map_err(|e| RpcError::new(code::DRIVER_ERROR, format!("cannot start agent: {e}")))?;
        self.agents.push(Agent {
            tag,
            cancel,
            handle,
        });
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
            return Err(RpcError::failure(
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
            a.cancel.store(true, Ordering::SeqCst);
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

/// A real sleep: users rehearse campaigns with these durations.
fn sleep_s(s: f64) {
    if let Ok(d) = Duration::try_from_secs_f64(s)
        && !d.is_zero()
    {
        thread::sleep(d);
    }
}

/// Sleep `s` seconds unless cancelled first; `Some(elapsed)` when cancelled.
fn sleep_cancellable(s: f64, cancel: &AtomicBool) -> Option<Duration> {
    let total = Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO);
    let start = Instant::now();
    loop {
        let elapsed = start.elapsed();
        if elapsed >= total {
            return None;
        }
        if cancel.load(Ordering::SeqCst) {
            return Some(elapsed);
        }
        thread::sleep(CANCEL_POLL.min(total - elapsed));
    }
}

fn status_name(s: AgentStatus) -> &'static str {
    match s {
        AgentStatus::Completed => "completed",
        AgentStatus::Timeout => "timeout",
        AgentStatus::MaxTurns => "max_turns",
        AgentStatus::AgentError => "agent_error",
        AgentStatus::Violation => "violation",
        AgentStatus::InfraError => "infra_error",
        AgentStatus::Cancelled => "cancelled",
    }
}

fn now_epoch_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// One `run_agent`, on its own thread so `cancel` can reach it.
struct AgentRun {
    out: Output,
    exit: ExitFn,
    id: Value,
    rate_limit_reset_s: f64,
    params: AgentParams,
    plan: Plan,
    cancel: Arc<AtomicBool>,
    stopping: Arc<AtomicBool>,
}

impl AgentRun {
    fn run(self) {
        // Write errors mean the lane is gone; there is nobody left to tell.
        let fault = self.plan.fault;
        match fault {
            Some(SimFault::Process(SimProcessFault::Hang)) => {
                // A true hang: deaf to cancel, never answers. Only the end of serving (in
                // production, the lane killing the process) releases the thread.
                while !self.stopping.load(Ordering::SeqCst) {
                    thread::sleep(CANCEL_POLL);
                }
                return;
            }
            Some(SimFault::Process(SimProcessFault::Garbage)) => {
                let _ = self.out.raw_line(GARBAGE_LINE);
            }
            _ => {}
        }
        let _ = self.out.notify(
            method::PROGRESS,
            ProgressParams {
                tag: self.params.attempt.tag.clone(),
                turns: Some(0),
                message: Some("sim agent started".to_owned()),
            },
        );
        let crash = matches!(
            fault,
            Some(
                SimFault::Kind(FailureKind::DriverCrash) | SimFault::Process(SimProcessFault::Exit)
            )
        );
        // A crash comes halfway through the agent's time.
        let sleep_for = if crash {
            self.plan.agent_s / 2.0
        } else {
            self.plan.agent_s
        };
        let cancelled = sleep_cancellable(sleep_for, &self.cancel);
        if crash && cancelled.is_none() {
            let name = fault.map(SimFault::name).unwrap_or("exit");
            eprintln!(
                "lanes-sim: injected {name} during run_agent of {}, exiting with code {CRASH_EXIT_CODE}",
                self.params.attempt.tag
            );
            (self.exit)(CRASH_EXIT_CODE);
            return;
        }
        let result = self.result(cancelled);
        let _ = self.out.result(&self.id, result);
    }

    /// The agent's answer: what the plan drew, within the lane's limits.
    fn result(&self, cancelled: Option<Duration>) -> AgentResult {
        let plan = &self.plan;
        let max_turns = self.params.max_turns;
        let turns = plan.turns.min(max_turns);
        let (status, kind, turns, cost) = match (cancelled, plan.fault) {
            (Some(elapsed), _) => {
                // Cancelled part-way: the turns and cost done so far.
                let frac = if plan.agent_s > 0.0 {
                    (elapsed.as_secs_f64() / plan.agent_s).clamp(0.0, 1.0)
                } else {
                    0.0
                };
                let done = (f64::from(turns) * frac).floor() as u32;
                (AgentStatus::Cancelled, None, done, plan.cost_usd * frac)
            }
            (None, Some(SimFault::Kind(k))) if agent_infra_kind(k) => {
                (AgentStatus::InfraError, Some(k), turns, plan.cost_usd)
            }
            (None, Some(SimFault::Status(Status::Timeout))) => (
                AgentStatus::Timeout,
                None,
                turns.min(max_turns.saturating_sub(1)),
                plan.cost_usd,
            ),
            (None, Some(SimFault::Status(Status::MaxTurns))) => {
                (AgentStatus::MaxTurns, None, max_turns, plan.cost_usd)
            }
            (None, Some(SimFault::Status(Status::AgentError))) => {
                (AgentStatus::AgentError, None, turns, plan.cost_usd)
            }
            (None, Some(SimFault::Status(Status::Violation))) => {
                (AgentStatus::Violation, None, turns, plan.cost_usd)
            }
            _ => (AgentStatus::Completed, None, turns, plan.cost_usd),
        };
        let name = status_name(status);
        let error = match (status, kind) {
            (_, Some(k)) => Some(format!("sim injected {k}")),
            (AgentStatus::AgentError | AgentStatus::Violation, _) => {
                Some(format!("sim injected {name}"))
            }
            _ => None,
        };
        let reset_epoch = (kind == Some(FailureKind::RateLimit)).then(|| {
            let reset = self.rate_limit_reset_s.max(0.0).ceil();
            now_epoch_s().saturating_add(reset.min(i64::MAX as f64) as i64)
        });
        AgentResult {
            status,
            failure_kind: kind.map(|k| k.as_str().to_owned()),
            reset_epoch,
            runtime_outcome: Some(name.to_owned()),
            infeasible: false,
            final_text: Some(format!(
                "sim agent finished: {name} after {turns} turns (arm {}, attempt {})",
                self.params.arm, self.params.attempt.attempt
            )),
            turns: Some(turns),
            tokens: Some(TokenUsage {
                input: u64::from(turns) * INPUT_TOKENS_PER_TURN,
                output: u64::from(turns) * OUTPUT_TOKENS_PER_TURN,
                cache_read: 0,
                cache_write: 0,
            }),
            cost_usd: Some(cost),
            quota: None,
            error,
        }
    }
}

/// The infra kinds `run_agent` reports as `infra_error`.
fn agent_infra_kind(k: FailureKind) -> bool {
    matches!(
        k,
        FailureKind::RateLimit
            | FailureKind::Overloaded
            | FailureKind::Auth
            | FailureKind::GuestLost
            | FailureKind::HarnessError
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::{BufReader, Cursor};

    use super::*;

    /// An output the test can read while (and after) the server writes to it.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Buf {
        fn lines(&self) -> Vec<String> {
            let bytes = self.0.lock().unwrap().clone();
            String::from_utf8(bytes)
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect()
        }
    }

    /// What a session wrote, and the exit codes an injected crash asked for.
    struct Session {
        lines: Vec<String>,
        exits: Vec<i32>,
    }

    impl Session {
        fn messages(&self) -> Vec<Value> {
            self.lines
                .iter()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        }

        fn reply(&self, id: u64) -> Option<Value> {
            self.messages().into_iter().find(|m| m["id"] == json!(id))
        }

        fn result(&self, id: u64) -> Value {
            let r = self
                .reply(id)
                .unwrap_or_else(|| panic!("no reply to {id}: {:#?}", self.lines));
            assert!(r.get("error").is_none(), "reply to {id} is an error: {r}");
            r["result"].clone()
        }

        fn error(&self, id: u64) -> Value {
            let r = self
                .reply(id)
                .unwrap_or_else(|| panic!("no reply to {id}: {:#?}", self.lines));
            assert!(r.get("result").is_none(), "reply to {id} is a result: {r}");
            r["error"].clone()
        }
    }

    fn recorder() -> (ExitFn, Arc<Mutex<Vec<i32>>>) {
        let exits = Arc::new(Mutex::new(Vec::new()));
        let e = exits.clone();
        (Arc::new(move |code| e.lock().unwrap().push(code)), exits)
    }

    fn session(lines: &[String]) -> Session {
        let input = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
        let out = Buf::default();
        let (exit, exits) = recorder();
        serve_with(Cursor::new(input.into_bytes()), out.clone(), exit).unwrap();
        let exits = exits.lock().unwrap().clone();
        Session {
            lines: out.lines(),
            exits,
        }
    }

    fn req(id: u64, method: &str, params: Value) -> String {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
    }

    fn note(method: &str, params: Value) -> String {
        json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
    }

    fn init(id: u64, sim: Value) -> String {
        req(
            id,
            "initialize",
            json!({"protocol": PROTOCOL, "lane": "l1", "host": "h1", "sim": sim}),
        )
    }

    fn attempt_ref(n: u32) -> Value {
        json!({"campaign": "c", "trial_id": "t1", "attempt": n, "tag": format!("tok-{n}")})
    }

    fn env(seed: u64, arm: &str, n: u32) -> Value {
        json!({"attempt": attempt_ref(n), "task": "task-1", "arm": arm, "seed": seed,
               "payload": {}})
    }

    fn agent(seed: u64, arm: &str, n: u32, max_turns: u32) -> Value {
        json!({"attempt": attempt_ref(n), "task": "task-1", "arm": arm, "arm_config": {},
               "payload": {}, "seed": seed, "timeout_s": 60, "max_turns": max_turns})
    }

    /// initialize(1), boot(2), reset(3), run_agent(4), evaluate(5), shutdown(6).
    fn attempt_session(sim: Value, seed: u64, arm: &str, n: u32, max_turns: u32) -> Session {
        session(&[
            init(1, sim),
            req(2, "boot", env(seed, arm, n)),
            req(3, "reset", env(seed, arm, n)),
            req(4, "run_agent", agent(seed, arm, n, max_turns)),
            req(5, "evaluate", env(seed, arm, n)),
            req(6, "shutdown", json!({})),
        ])
    }

    #[test]
    fn a_full_attempt_without_faults() {
        let sim = json!({"turns": [3, 8], "cost_usd": [0.5, 1.5], "default_pass_rate": 1.0});
        let s = attempt_session(sim, 7, "arm-a", 1, 30);
        assert!(s.exits.is_empty());

        let id: DriverIdentity = serde_json::from_value(s.result(1)).unwrap();
        assert_eq!(id.name, "lanes-sim");
        assert_eq!(id.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(id.pins.get("protocol").map(String::as_str), Some(PROTOCOL));

        let boot: EnvResult = serde_json::from_value(s.result(2)).unwrap();
        assert_eq!(boot, EnvResult::default());
        let reset: EnvResult = serde_json::from_value(s.result(3)).unwrap();
        assert!(reset.verified);

        let r: AgentResult = serde_json::from_value(s.result(4)).unwrap();
        assert_eq!(r.status, AgentStatus::Completed);
        assert_eq!(r.failure_kind, None);
        assert_eq!(r.runtime_outcome.as_deref(), Some("completed"));
        let turns = r.turns.unwrap();
        assert!((3..=8).contains(&turns), "{turns}");
        let cost = r.cost_usd.unwrap();
        assert!((0.5..=1.5).contains(&cost), "{cost}");
        let tokens = r.tokens.unwrap();
        assert_eq!(tokens.input, u64::from(turns) * INPUT_TOKENS_PER_TURN);
        assert_eq!(tokens.output, u64::from(turns) * OUTPUT_TOKENS_PER_TURN);
        assert!(r.final_text.unwrap().starts_with("sim agent finished"));

        let e: EvaluateResult = serde_json::from_value(s.result(5)).unwrap();
        assert!(e.passed);
        assert_eq!(e.score, 1.0);
        assert_eq!(e.checks.len(), 1);
        assert_eq!(e.checks[0].name, "sim");
        assert_eq!(e.checks[0].score, Some(1.0));

        assert_eq!(s.result(6), json!({}));
        // The agent announced itself once.
        let progress: Vec<Value> = s
            .messages()
            .into_iter()
            .filter(|m| m["method"] == "progress")
            .collect();
        assert_eq!(progress.len(), 1);
        assert_eq!(progress[0]["params"]["tag"], "tok-1");
    }

    #[test]
    fn the_small_calls() {
        let s = session(&[
            init(1, Value::Null),
            req(2, "gate", env(1, "a", 1)),
            req(3, "health", json!({})),
            req(4, "teardown", json!({"lane": "l1", "tag": "tok-1"})),
            req(5, "evaluate", env(1, "a", 1)),
            req(6, "teardown", json!({"lane": "l1"})),
            req(7, "boot", env(1, "a", 1)),
            req(8, "evaluate", env(1, "a", 1)),
            req(9, "shutdown", Value::Null),
            req(10, "health", json!({})),
        ]);
        assert_eq!(s.result(2), json!({"infeasible": false, "turns": 0}));
        assert_eq!(s.result(3), json!({"ok": true}));
        assert_eq!(s.result(4), json!({}));
        // A torn-down environment cannot be evaluated until it is booted again.
        assert_eq!(s.error(5)["code"], code::DRIVER_ERROR);
        assert_eq!(s.result(6), json!({}));
        s.result(7);
        s.result(8);
        assert_eq!(s.result(9), json!({}));
        assert!(s.reply(10).is_none(), "nothing is read after shutdown");
    }

    #[test]
    fn the_gate_declares_listed_tasks_infeasible_and_evaluate_scores_the_declaration() {
        let listed = json!({"infeasible_tasks": ["task-1"], "gate_turns": 2,
                            "gate_cost_usd": 0.05, "default_pass_rate": 0.0});
        let s = session(&[
            init(1, listed.clone()),
            req(2, "boot", env(1, "a", 1)),
            req(3, "gate", env(1, "a", 1)),
            req(4, "declare_infeasible", env(1, "a", 1)),
            req(5, "evaluate", env(1, "a", 1)),
        ]);
        let gate = s.result(3);
        assert_eq!(
            (&gate["infeasible"], &gate["turns"], &gate["cost_usd"]),
            (&json!(true), &json!(2), &json!(0.05))
        );
        assert!(gate["reason"].as_str().unwrap().contains("task-1"));
        assert_eq!(s.result(4), json!({}));
        // A pass rate of 0 would fail any agent; the declaration on an infeasible task passes.
        let e = s.result(5);
        assert_eq!((&e["score"], &e["passed"]), (&json!(1.0), &json!(true)));
        assert_eq!(e["checks"][0]["name"], "sim_infeasible");

        // A feasible task: the gate proceeds, and a wrong declaration scores 0.
        let s = session(&[
            init(
                1,
                json!({"infeasible_tasks": ["other"], "default_pass_rate": 1.0}),
            ),
            req(2, "boot", env(1, "a", 1)),
            req(3, "gate", env(1, "a", 1)),
            req(4, "declare_infeasible", env(1, "a", 1)),
            req(5, "evaluate", env(1, "a", 1)),
        ]);
        assert_eq!(s.result(3), json!({"infeasible": false, "turns": 0}));
        assert_eq!(s.result(5)["score"], json!(0.0));
    }

    #[test]
    fn the_seed_mixing_is_pinned() {
        // Changing these changes every sim outcome of every recorded campaign.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(mix(0), 0);
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(attempt_seed(42, "arm-a", 1), PINNED_ATTEMPT_SEED);
        assert_ne!(attempt_seed(42, "arm-a", 1), attempt_seed(42, "arm-a", 2));
        assert_ne!(attempt_seed(42, "arm-a", 1), attempt_seed(42, "arm-b", 1));
        assert_ne!(attempt_seed(42, "arm-a", 1), attempt_seed(43, "arm-a", 1));
    }

    const PINNED_ATTEMPT_SEED: u64 = 0x6b10_fe55_ea1d_5566;

    #[test]
    fn the_same_attempt_gives_the_same_outcome() {
        let sim = json!({"turns": [1, 40], "cost_usd": [0.0, 3.0],
                         "faults": {"overloaded": 0.2, "timeout": 0.2, "reset_unverified": 0.1}});
        let outcome = |n: u32| {
            let s = attempt_session(sim.clone(), 99, "arm-a", n, 50);
            (s.result(3), s.result(4), s.result(5))
        };
        let mut seen = HashSet::new();
        for n in 1..=12 {
            let first = outcome(n);
            assert_eq!(first, outcome(n), "attempt {n} differs between processes");
            seen.insert(first.1.to_string());
        }
        assert!(seen.len() > 6, "attempts barely differ: {seen:#?}");
    }

    #[test]
    fn a_retry_draws_its_fault_afresh() {
        let cfg = SimConfig {
            faults: [(SimFault::Kind(FailureKind::Overloaded), 0.5)].into(),
            ..SimConfig::default()
        };
        let faults: Vec<bool> = (1..=40)
            .map(|n| Plan::draw(&cfg, 5, "a", n).fault.is_some())
            .collect();
        let hits = faults.iter().filter(|f| **f).count();
        assert!((10..=30).contains(&hits), "{hits} of 40");
        assert!(faults.windows(2).any(|w| w[0] && !w[1]));
    }

    #[test]
    fn fault_selection_walks_the_map_in_order() {
        let cfg = SimConfig {
            faults: [
                (SimFault::Kind(FailureKind::RateLimit), 0.25),
                (SimFault::Status(Status::Timeout), 0.25),
            ]
            .into(),
            ..SimConfig::default()
        };
        let mut counts: BTreeMap<Option<&str>, u32> = BTreeMap::new();
        for n in 0..2000 {
            let plan = Plan::draw(&cfg, 1, "a", n);
            *counts.entry(plan.fault.map(SimFault::name)).or_default() += 1;
        }
        for (name, lo, hi) in [
            (Some("rate_limit"), 400, 600),
            (Some("timeout"), 400, 600),
            (None, 900, 1100),
        ] {
            let c = counts.get(&name).copied().unwrap_or(0);
            assert!((lo..=hi).contains(&c), "{name:?}: {c} of 2000");
        }
    }

    #[test]
    fn pass_rates_are_sane() {
        let cfg = SimConfig {
            pass_rate: [("strong".to_owned(), 0.7), ("never".to_owned(), 0.0)].into(),
            default_pass_rate: 0.5,
            ..SimConfig::default()
        };
        let rate = |arm: &str, seed: u64| {
            let passes = (1..=400)
                .filter(|n| Plan::draw(&cfg, seed, arm, *n).passed)
                .count();
            passes as f64 / 400.0
        };
        for seed in [1, 2, 3] {
            let strong = rate("strong", seed);
            assert!((0.6..=0.8).contains(&strong), "strong: {strong}");
            let other = rate("other", seed);
            assert!((0.4..=0.6).contains(&other), "default: {other}");
            assert_eq!(rate("never", seed), 0.0);
        }
        // And through the wire: evaluate agrees with the per-attempt draw.
        let sim = serde_json::to_value(&cfg).unwrap();
        for n in 1..=5 {
            let s = attempt_session(sim.clone(), 1, "strong", n, 10);
            let e: EvaluateResult = serde_json::from_value(s.result(5)).unwrap();
            assert_eq!(e.passed, Plan::draw(&cfg, 1, "strong", n).passed);
            assert_eq!(e.score, if e.passed { 1.0 } else { 0.0 });
        }
    }

    #[test]
    fn evaluate_remembers_the_attempt_by_tag() {
        let sim = json!({"default_pass_rate": 0.5});
        let cfg: SimConfig = serde_json::from_value(sim.clone()).unwrap();
        // An attempt that passes, and one that fails.
        let pass = (1..).find(|n| Plan::draw(&cfg, 3, "a", *n).passed).unwrap();
        let fail = (1..)
            .find(|n| !Plan::draw(&cfg, 3, "a", *n).passed)
            .unwrap();
        for (n, passed) in [(pass, true), (fail, false)] {
            let s = session(&[
                init(1, sim.clone()),
                req(2, "run_agent", agent(3, "a", n, 10)),
                // Only the attempt: the plan comes from what run_agent drew.
                req(3, "evaluate", json!({"attempt": attempt_ref(n)})),
                req(4, "evaluate", json!({"attempt": attempt_ref(n + 100)})),
            ]);
            assert_eq!(s.result(3)["passed"], passed);
            let e = s.error(4);
            assert_eq!(e["code"], code::INVALID_PARAMS);
            assert!(e["message"].as_str().unwrap().contains("arm"), "{e}");
        }
    }

    fn fault_session(fault: &str) -> Session {
        let sim = json!({"faults": {fault: 1.0}, "turns": [10, 10], "rate_limit_reset_s": 30.0});
        attempt_session(sim, 11, "a", 1, 10)
    }

    fn agent_result(s: &Session) -> AgentResult {
        serde_json::from_value(s.result(4)).unwrap()
    }

    #[test]
    fn boot_reset_and_evaluate_faults() {
        let s = fault_session("boot_failed");
        let e = s.error(2);
        assert_eq!(e["code"], code::DRIVER_ERROR);
        assert_eq!(e["data"]["failure_kind"], "boot_failed");

        let s = fault_session("reset_unverified");
        assert_eq!(s.result(3)["verified"], false);
        assert_eq!(agent_result(&s).status, AgentStatus::Completed);

        let s = fault_session("evaluator_error");
        s.result(2);
        assert_eq!(s.result(3)["verified"], true);
        assert_eq!(agent_result(&s).status, AgentStatus::Completed);
        let e = s.error(5);
        assert_eq!(e["code"], code::DRIVER_ERROR);
        assert_eq!(e["data"]["failure_kind"], "evaluator_error");
    }

    #[test]
    fn infra_faults_in_run_agent() {
        for kind in [
            "rate_limit",
            "overloaded",
            "auth",
            "guest_lost",
            "harness_error",
        ] {
            let s = fault_session(kind);
            s.result(2);
            assert_eq!(s.result(3)["verified"], true);
            let r = agent_result(&s);
            assert_eq!(r.status, AgentStatus::InfraError, "{kind}");
            assert_eq!(r.failure_kind.as_deref(), Some(kind));
            if kind == "rate_limit" {
                let at = r.reset_epoch.expect("a rate limit says when it resets");
                let now = now_epoch_s();
                assert!((now + 28..=now + 31).contains(&at), "{at} vs {now}");
            } else {
                assert_eq!(r.reset_epoch, None, "{kind}");
            }
            s.result(5);
        }
    }

    #[test]
    fn agent_status_faults() {
        let r = agent_result(&fault_session("timeout"));
        assert_eq!(r.status, AgentStatus::Timeout);
        assert_eq!(r.turns, Some(9), "a timeout stops short of max_turns");
        assert_eq!(r.runtime_outcome.as_deref(), Some("timeout"));

        let sim = json!({"faults": {"max_turns": 1.0}, "turns": [1, 3]});
        let r = agent_result(&attempt_session(sim, 11, "a", 1, 7));
        assert_eq!(r.status, AgentStatus::MaxTurns);
        assert_eq!(r.turns, Some(7));

        for (fault, status) in [
            ("agent_error", AgentStatus::AgentError),
            ("violation", AgentStatus::Violation),
        ] {
            let r = agent_result(&fault_session(fault));
            assert_eq!(r.status, status);
            assert_eq!(r.failure_kind, None);
            assert!(r.error.is_some());
        }
    }

    #[test]
    fn a_crash_exits_with_code_3_without_answering() {
        for fault in ["driver_crash", "exit"] {
            let s = fault_session(fault);
            s.result(3);
            assert!(s.reply(4).is_none(), "{fault}: run_agent answered");
            assert_eq!(s.exits, vec![CRASH_EXIT_CODE], "{fault}");
        }
    }

    #[test]
    fn garbage_is_a_non_json_line_then_a_normal_answer() {
        let s = fault_session("garbage");
        let garbage: Vec<&String> = s
            .lines
            .iter()
            .filter(|l| serde_json::from_str::<Value>(l).is_err())
            .collect();
        assert_eq!(garbage, vec![GARBAGE_LINE]);
        assert_eq!(agent_result(&s).status, AgentStatus::Completed);
        s.result(5);
    }

    #[test]
    fn a_hang_never_answers_not_even_a_cancel() {
        let sim = json!({"faults": {"hang": 1.0}});
        let s = session(&[
            init(1, sim),
            req(2, "run_agent", agent(1, "a", 1, 10)),
            note("cancel", json!({"tag": "tok-1"})),
            req(3, "health", json!({})),
            req(4, "shutdown", json!({})),
        ]);
        assert!(s.reply(2).is_none());
        assert_eq!(s.result(3), json!({"ok": true}));
        assert_eq!(s.result(4), json!({}));
        assert!(s.exits.is_empty());
        assert!(s.lines.iter().all(|l| !l.contains("progress")));
    }

    /// A server on a pipe, so the test can talk to it while it runs.
    struct Live {
        input: io::PipeWriter,
        out: Buf,
        server: JoinHandle<io::Result<()>>,
    }

    impl Live {
        fn start() -> Self {
            let (reader, input) = io::pipe().unwrap();
            let out = Buf::default();
            let (exit, _) = recorder();
            let o = out.clone();
            let server = thread::spawn(move || serve_with(BufReader::new(reader), o, exit));
            Self { input, out, server }
        }

        fn send(&mut self, line: &str) {
            writeln!(self.input, "{line}").unwrap();
        }

        /// Wait (bounded) for the reply to `id`.
        fn reply(&self, id: u64, within: Duration) -> Value {
            let deadline = Instant::now() + within;
            loop {
                let found = self
                    .out
                    .lines()
                    .iter()
                    .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                    .find(|m| m["id"] == json!(id));
                if let Some(m) = found {
                    return m;
                }
                assert!(
                    Instant::now() < deadline,
                    "no reply to {id} within {within:?}: {:#?}",
                    self.out.lines()
                );
                thread::sleep(Duration::from_millis(5));
            }
        }

        fn close(self) {
            drop(self.input);
            self.server.join().unwrap().unwrap();
        }
    }

    #[test]
    fn cancel_stops_a_long_agent() {
        let mut live = Live::start();
        live.send(&init(
            1,
            json!({"agent_s": [30.0, 30.0], "turns": [10, 10]}),
        ));
        live.reply(1, Duration::from_secs(2));
        let started = Instant::now();
        live.send(&req(2, "run_agent", agent(1, "a", 1, 10)));
        // The agent runs; other calls are still answered meanwhile.
        live.send(&req(3, "health", json!({})));
        live.reply(3, Duration::from_secs(2));
        live.send(&note("cancel", json!({"tag": "tok-1"})));
        let r: AgentResult =
            serde_json::from_value(live.reply(2, Duration::from_secs(2))["result"].clone())
                .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(r.status, AgentStatus::Cancelled);
        assert_eq!(r.runtime_outcome.as_deref(), Some("cancelled"));
        assert!(r.turns.unwrap() < 10);
        live.close();
    }

    #[test]
    fn shutdown_cancels_a_running_agent_first() {
        let s = session(&[
            init(1, json!({"agent_s": [30.0, 30.0]})),
            req(2, "run_agent", agent(1, "a", 1, 10)),
            req(3, "shutdown", json!({})),
        ]);
        assert_eq!(s.result(2)["status"], "cancelled");
        assert_eq!(s.result(3), json!({}));
        let order: Vec<Value> = s.messages().iter().map(|m| m["id"].clone()).collect();
        assert_eq!(order.last(), Some(&json!(3)), "shutdown answers last");
    }

    #[test]
    fn protocol_errors() {
        let s = session(&[
            req(1, "boot", env(1, "a", 1)),
            req(2, "frobnicate", json!({})),
            "{not json".to_owned(),
            "[1, 2]".to_owned(),
            json!({"id": 3, "method": "health"}).to_string(),
            json!({"jsonrpc": "2.0", "id": 4}).to_string(),
            req(
                5,
                "initialize",
                json!({"protocol": "lanes-driver/0", "lane": "l", "host": "h"}),
            ),
            req(6, "initialize", json!({"protocol": PROTOCOL, "lane": "l"})),
            req(
                7,
                "initialize",
                json!({"protocol": PROTOCOL, "lane": "l", "host": "h",
                                        "sim": {"bogus": 1}}),
            ),
            init(8, Value::Null),
            req(
                9,
                "boot",
                json!({"task": "t", "arm": "a", "seed": 1, "payload": {}}),
            ),
            req(10, "boot", {
                let mut p = env(1, "a", 1);
                p["seed"] = json!("not a number");
                p
            }),
            req(11, "run_agent", {
                let mut p = agent(1, "a", 1, 10);
                p["attempt"] = json!({"campaign": "c"});
                p
            }),
            req(12, "boot", json!([1, 2])),
            note("boot", env(1, "a", 1)),
            note("frobnicate", json!({})),
            String::new(),
            req(13, "shutdown", json!({})),
        ]);
        let err = |id: u64| s.error(id);
        let message = |id: u64| err(id)["message"].as_str().unwrap().to_owned();

        assert_eq!(err(1)["code"], code::DRIVER_ERROR);
        assert_eq!(message(1), "not initialized");
        assert_eq!(err(2)["code"], code::METHOD_NOT_FOUND);
        assert_eq!(message(2), "method not found: frobnicate");

        let null_id: Vec<Value> = s
            .messages()
            .into_iter()
            .filter(|m| m["id"].is_null())
            .collect();
        assert_eq!(null_id.len(), 2, "{null_id:#?}");
        assert_eq!(null_id[0]["error"]["code"], code::PARSE_ERROR);
        assert_eq!(null_id[1]["error"]["code"], code::INVALID_REQUEST);

        assert_eq!(err(3)["code"], code::INVALID_REQUEST);
        assert_eq!(err(4)["code"], code::INVALID_REQUEST);
        assert_eq!(err(5)["code"], code::DRIVER_ERROR);
        for (id, field) in [
            (6, "host"),
            (7, "bogus"),
            (9, "attempt"),
            (10, "seed"),
            (11, "attempt"),
            (12, "params"),
        ] {
            assert_eq!(err(id)["code"], code::INVALID_PARAMS, "{id}");
            assert!(message(id).contains(field), "{id}: {}", message(id));
        }
        s.result(8);
        s.result(13);
        // 13 answers and 2 with a null id: notifications are never answered.
        assert_eq!(s.lines.len(), 15, "{:#?}", s.lines);
    }
}
