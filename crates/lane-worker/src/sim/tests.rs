//! Tests of the sim driver: whole sessions over in-memory stdio, and the plan's draws.

use std::collections::{BTreeMap, HashSet};
use std::io::{self, BufReader, Cursor, Write};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use lanes_common::row::{DriverIdentity, FailureKind, Status};
use lanes_common::spec::{SimConfig, SimFault};

use super::agent::{INPUT_TOKENS_PER_TURN, OUTPUT_TOKENS_PER_TURN, now_epoch_s};
use super::plan::{Plan, SplitMix64, attempt_seed, fnv1a64, mix};
use super::server::{ExitFn, serve_with};
use super::{CRASH_EXIT_CODE, GARBAGE_LINE};
use crate::driver::protocol::{
    AgentResult, AgentStatus, EnvResult, EvaluateResult, MAX_LINE_BYTES, PROTOCOL, code,
};

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
        assert_eq!(r.failure_kind.map(|k| k.as_str()), Some(kind));
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
        serde_json::from_value(live.reply(2, Duration::from_secs(2))["result"].clone()).unwrap();
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

#[test]
fn line_limits_and_unreadable_ids() {
    // A health request padded to exactly the limit (the newline does not count), and one over.
    let padded = |len: usize| {
        let bare = req(1, "health", json!({"pad": ""}));
        req(1, "health", json!({"pad": "x".repeat(len - bare.len())}))
    };
    let at_limit = padded(MAX_LINE_BYTES);
    assert_eq!(at_limit.len(), MAX_LINE_BYTES);
    let over = padded(MAX_LINE_BYTES + 1).replace("\"id\":1", "\"id\":2");
    let s = session(&[
        at_limit,
        over,
        json!({"jsonrpc": "2.0", "id": "three", "method": "health"}).to_string(),
        json!({"jsonrpc": "2.0", "id": 4, "method": "health", "params": "x"}).to_string(),
    ]);
    // Decoded and answered (before `initialize`, which does not matter here).
    assert_eq!(s.error(1)["message"], "not initialized");
    assert!(s.reply(2).is_none(), "an oversized line's id is not read");
    assert_eq!(s.error(4)["code"], code::INVALID_REQUEST);
    let null_id: Vec<Value> = s
        .messages()
        .into_iter()
        .filter(|m| m["id"].is_null())
        .map(|m| m["error"]["code"].clone())
        .collect();
    assert_eq!(
        null_id,
        vec![json!(code::INVALID_REQUEST), json!(code::INVALID_REQUEST)]
    );
}
