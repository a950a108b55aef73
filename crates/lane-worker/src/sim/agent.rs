//! The simulated agent of one `run_agent`: it runs on its own thread so a `cancel` can reach
//! it, sleeps the plan's duration in real time, and answers with what the plan drew within
//! the lane's limits. Injected process faults (hang, garbage, crash) happen here.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lanes_common::row::{FailureKind, Status, TokenUsage};
use lanes_common::spec::{SimFault, SimProcessFault};

use super::CRASH_EXIT_CODE;
use super::plan::Plan;
use super::server::{ExitFn, Output};
use crate::driver::protocol::{AgentParams, AgentResult, AgentStatus, ProgressParams, method};

/// How often a hung agent looks whether serving ended.
const HANG_POLL: Duration = Duration::from_millis(10);
/// Tokens the sim reports per turn.
pub(super) const INPUT_TOKENS_PER_TURN: u64 = 1000;
pub(super) const OUTPUT_TOKENS_PER_TURN: u64 = 200;

/// A running `run_agent`.
pub(super) struct Agent {
    pub(super) tag: String,
    pub(super) cancel: Arc<CancelFlag>,
    pub(super) handle: JoinHandle<()>,
}

/// One `run_agent`, on its own thread so `cancel` can reach it.
pub(super) struct AgentRun {
    pub(super) out: Output,
    pub(super) exit: ExitFn,
    pub(super) id: u64,
    pub(super) rate_limit_reset_s: f64,
    pub(super) params: AgentParams,
    pub(super) plan: Plan,
    /// Set when serving ends; only a hung agent waits for it.
    pub(super) stopping: Arc<AtomicBool>,
}

impl AgentRun {
    /// Starts the run on its own thread.
    pub(super) fn spawn(self) -> io::Result<Agent> {
        let tag = self.params.attempt.tag.clone();
        let cancel = Arc::new(CancelFlag::default());
        let flag = cancel.clone();
        let handle = thread::Builder::new()
            .name(format!("sim-agent-{tag}"))
            .spawn(move || self.run(&flag))?;
        Ok(Agent {
            tag,
            cancel,
            handle,
        })
    }

    fn run(self, cancel: &CancelFlag) {
        // Write errors mean the lane is gone; there is nobody left to tell.
        let fault = self.plan.fault;
        match fault {
            Some(SimFault::Process(SimProcessFault::Hang)) => {
                // A true hang: deaf to cancel, never answers. Only the end of serving (in
                // production, the lane killing the process) releases the thread.
                while !self.stopping.load(Ordering::SeqCst) {
                    thread::sleep(HANG_POLL);
                }
                return;
            }
            Some(SimFault::Process(SimProcessFault::Garbage)) => {
                let _ = self.out.garbage();
            }
            _ => {}
        }
        let _ = self.out.notify(
            method::PROGRESS,
            &ProgressParams {
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
        let cancelled = sleep_cancellable(sleep_for, cancel);
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
        let _ = self.out.result(self.id, &result);
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
            failure_kind: kind,
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
    match k {
        FailureKind::RateLimit
        | FailureKind::Overloaded
        | FailureKind::Auth
        | FailureKind::GuestLost
        | FailureKind::HarnessError => true,
        // Injected by the phase they name, or never by a driver.
        FailureKind::BootFailed
        | FailureKind::ResetUnverified
        | FailureKind::DriverCrash
        | FailureKind::EvaluatorError
        | FailureKind::IdentityMismatch
        | FailureKind::Preflight
        | FailureKind::LeaseExpired => false,
    }
}

/// A real sleep: users rehearse campaigns with these durations.
pub(super) fn sleep_s(s: f64) {
    if let Ok(d) = Duration::try_from_secs_f64(s)
        && !d.is_zero()
    {
        thread::sleep(d);
    }
}

/// A `cancel` for one agent. The agent sleeps on it rather than polling, so a thousand
/// sleeping agents cost no CPU (polling them every 10 ms took both cores of a small host).
#[derive(Default)]
pub(super) struct CancelFlag {
    set: Mutex<bool>,
    changed: Condvar,
}

impl CancelFlag {
    pub(super) fn set(&self) {
        *self.set.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.changed.notify_all();
    }

    /// Sleeps until `deadline` or the cancel, whichever comes first; whether it was cancelled.
    fn wait_until(&self, deadline: Instant) -> bool {
        let mut set = self.set.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            // The time is up first: an agent that finished is not cancelled.
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            if *set {
                return true;
            }
            set = self
                .changed
                .wait_timeout(set, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// Sleep `s` seconds unless cancelled first; `Some(elapsed)` when cancelled.
fn sleep_cancellable(s: f64, cancel: &CancelFlag) -> Option<Duration> {
    let total = Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO);
    let start = Instant::now();
    cancel
        .wait_until(start + total)
        .then(|| start.elapsed().min(total))
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

pub(super) fn now_epoch_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
