//! The attempt lifecycle as a pure state machine: events in, effects out, no I/O.
//!
//! `admit → boot → reset (verified) → [gate → reset] → agent → evaluate → publish → done`
//!
//! With a gate that answers infeasible: `… → gate → declare_infeasible → evaluate → …`.
//!
//! [`Attempt::next`] takes the attempt by value and gives back the next one with the effects
//! the Lane actor must execute (driver calls, the attempt record, the outbox); the actor feeds
//! their results back as events. Every decision is made here, the actor only executes.
//! Rules this machine keeps:
//! - nothing has an effect before the attempt record is written (`admit`);
//! - boot and reset retry within their budget; an unverifiable reset is `reset_unverified`;
//! - only an explicit `infeasible` from the gate skips the agent: the driver submits the
//!   benchmark's own infeasible action (`declare_infeasible`) and the evaluator scores it, so a
//!   correctly detected infeasible task can pass; anything else continues after a fresh
//!   verified reset. The gate's verdict, turns and cost are kept on every path;
//!   a gate whose cancel the driver does not confirm fails closed (`harness_error`);
//! - a lost lease before evaluate cancels the agent and abandons the attempt (the store's reap
//!   row already says what happened); after evaluate the outcome is always published;
//! - a driver crash is `driver_crash`, and the driver is restarted for the next attempt; an
//!   agent that ignores its cancel past the grace is treated as a crash (its driver is killed),
//!   unless it runs behind a task API, which keeps its own time;
//! - an outcome or release is handed to the outbox exactly once; the attempt ends with one
//!   `Finish` once the hand-off is done (`Published`);
//! - once done, every further event is ignored ("a cancel after the outcome is ignored").

use lanes_common::row::{
    Check, FailureKind, GateRecord, GateVerdict, InfeasibleSource, Phase, Status,
};

use crate::driver::protocol::{AgentResult, AgentStatus};

#[cfg(test)]
mod coverage;
#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;

/// Attempts of `boot` before the attempt is `boot_failed`.
pub const BOOT_TRIES: u32 = 3;
/// Attempts of a verified `reset` before the attempt is `reset_unverified`.
pub const RESET_TRIES: u32 = 3;

/// The reason an agent that ignored its cancel is killed for.
pub const CANCEL_IGNORED: &str = "the agent did not stop within the cancel grace; driver killed";
const GUEST_LOST: &str = "guest health endpoint unreachable past the grace window";

/// Where an attempt is.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    Admit,
    Boot {
        tries: u32,
    },
    /// `after_gate`: the fresh reset that follows a feasible gate.
    Reset {
        tries: u32,
        after_gate: bool,
    },
    Gate,
    /// The gate answered infeasible: the driver is submitting the official infeasible action.
    Declare,
    Agent(AgentPhase),
    Evaluate {
        agent: AgentSummary,
    },
    /// The outcome is being handed to the outbox.
    Publish,
    /// A `cancelled` or `blocked` release is being handed to the outbox.
    Release,
    Done,
}

/// What the agent phase is waiting for.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentPhase {
    Running,
    /// We asked the driver to cancel, for this reason; waiting for the agent to stop.
    Cancelling(CancelReason),
}

/// Why the lane cancels a running agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// The task's timeout passed: the attempt is still evaluated, as `timeout`.
    TaskTimeout,
    /// The guest's health endpoint stayed unreachable: infra `guest_lost`.
    GuestLost,
    /// The lease is gone: abandon, nothing to publish.
    LeaseLost,
    /// The campaign is being cancelled: release as `cancelled`.
    Stop,
}

/// How the run that is being evaluated ended, kept for the row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentSummary {
    pub status: Status,
    /// The gate declared the task infeasible and no agent ran.
    pub gate_infeasible: bool,
}

/// Something that happened.
// Events and effects are moved once, straight into `next`; boxing the large variants would buy
// nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The attempt record is on disk and preflight passed.
    Admitted,
    /// Preflight refused (e.g. identity pins): nothing ran.
    PreflightFailed {
        kind: FailureKind,
        reason: String,
    },
    Booted,
    BootFailed {
        reason: String,
    },
    Reset {
        verified: bool,
    },
    ResetFailed {
        reason: String,
    },
    /// The gate answered; `verdict` is `infeasible` or `proceed`.
    GateAnswered(GateRecord),
    GateFailed {
        reason: String,
    },
    /// The driver submitted the benchmark's infeasible action.
    Declared,
    DeclareFailed {
        reason: String,
    },
    /// The gate was cancelled and the driver did not confirm it stopped.
    GateCancelUnconfirmed,
    AgentFinished(AgentResult),
    TaskTimeout,
    GuestLost,
    Evaluated {
        score: f64,
        passed: bool,
        checks: Vec<Check>,
    },
    EvaluateFailed {
        reason: String,
    },
    /// The driver exited, hung past a deadline or broke the protocol.
    DriverCrashed {
        reason: String,
    },
    LeaseLost,
    CancelRequested,
    /// The cancel grace passed since `CancelAgent`.
    CancelOverdue,
    /// The outcome or release was handed to the outbox.
    Published,
}

/// What the lane must do.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    WriteAttemptRecord,
    Boot,
    Reset,
    Gate,
    /// Submit the benchmark's official infeasible action (`declare_infeasible`).
    DeclareInfeasible,
    /// Run the agent with what is left of the turn budget after the gate.
    StartAgent {
        max_turns: u32,
    },
    /// Ask the agent to stop; the actor reports `CancelOverdue` after the cancel grace.
    CancelAgent,
    /// Start polling the guest's health URL, if boot or reset gave one.
    StartWatchdog,
    StopWatchdog,
    Evaluate,
    /// Write the outcome to the outbox, then send it; answer with `Published`.
    Publish(Verdict),
    /// Give the trial back with a `cancelled` or `blocked` row; answer with `Published`.
    Release {
        kind: ReleaseKind,
        reason: Option<String>,
        gate: Option<GateRecord>,
    },
    /// Kill the driver (if any) so the next attempt starts a fresh one.
    RestartDriver,
    /// The attempt is over. `published: false` means it was abandoned (lease lost before
    /// evaluate): the store's reap row says what happened.
    Finish {
        published: bool,
    },
    /// Tell the actor which phase the attempt is in (for heartbeats and spans).
    EnterPhase(Phase),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseKind {
    Cancelled,
    Blocked(FailureKind),
}

/// How the attempt ended, for the outcome the lane publishes.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub status: Status,
    pub failure_kind: Option<FailureKind>,
    pub score: Option<f64>,
    pub passed: Option<bool>,
    pub checks: Vec<Check>,
    pub infeasible_source: Option<InfeasibleSource>,
    /// What the agent reported, when it ran.
    pub agent: Option<AgentResult>,
    pub lease_lost: bool,
    pub error: Option<String>,
    /// The gate's answer, when it ran; its turns and cost count on every path.
    pub gate: Option<GateRecord>,
}

/// What the attempt is started with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttemptSpec {
    /// Whether the campaign runs the feasibility gate.
    pub gate: bool,
    /// The trial's turn budget; the gate's turns count toward it.
    pub max_turns: u32,
    /// The arm's agent runs behind a task API: the lane cancels it there, and a cancel it
    /// does not confirm in time is not the driver's fault.
    pub task_api: bool,
}

/// One attempt's machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    state: State,
    facts: Facts,
}

/// What the attempt has learned so far, carried across states.
#[derive(Debug, Clone, PartialEq)]
struct Facts {
    spec: AttemptSpec,
    /// What the gate answered, once it has.
    gate_record: Option<GateRecord>,
    /// What the agent reported, once it has.
    agent: Option<AgentResult>,
    /// The lease was lost after evaluate began: published anyway, flagged.
    lease_lost: bool,
}

/// A transition's result before it is put back into an [`Attempt`].
type Step = (State, Vec<Effect>);

fn agent_status(s: AgentStatus) -> Option<Status> {
    Some(match s {
        AgentStatus::Completed => Status::Completed,
        AgentStatus::Timeout => Status::Timeout,
        AgentStatus::MaxTurns => Status::MaxTurns,
        AgentStatus::AgentError => Status::AgentError,
        AgentStatus::Violation => Status::Violation,
        AgentStatus::InfraError | AgentStatus::Cancelled => return None,
    })
}

impl Attempt {
    /// A new attempt and its first effects: the attempt record is written before anything else.
    pub fn start(spec: AttemptSpec) -> (Self, Vec<Effect>) {
        let attempt = Self {
            state: State::Admit,
            facts: Facts {
                spec,
                gate_record: None,
                agent: None,
                lease_lost: false,
            },
        };
        (
            attempt,
            vec![Effect::EnterPhase(Phase::Admit), Effect::WriteAttemptRecord],
        )
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The phase to report in heartbeats.
    pub fn phase(&self) -> Phase {
        match &self.state {
            State::Admit | State::Release => Phase::Admit,
            State::Boot { .. } => Phase::Boot,
            State::Reset { .. } => Phase::Reset,
            State::Gate | State::Declare => Phase::Gate,
            State::Agent(_) => Phase::Agent,
            State::Evaluate { .. } => Phase::Evaluate,
            State::Publish | State::Done => Phase::Publish,
        }
    }

    /// Applies one event. Every arm names the state it leaves the attempt in.
    pub fn next(self, event: Event) -> (Attempt, Vec<Effect>) {
        let Attempt { state, mut facts } = self;
        let (state, effects) = facts.step(state, event);
        (Attempt { state, facts }, effects)
    }
}

impl Facts {
    fn step(&mut self, state: State, event: Event) -> Step {
        use AgentPhase::{Cancelling, Running};
        use Event as E;
        use State as S;
        match (state, event) {
            // Once done, nothing changes.
            (S::Done, _) => (S::Done, Vec::new()),

            // Admission.
            (S::Admit, E::Admitted) => (
                S::Boot { tries: 1 },
                vec![Effect::EnterPhase(Phase::Boot), Effect::Boot],
            ),
            (S::Admit, E::PreflightFailed { kind, reason }) => {
                self.release(ReleaseKind::Blocked(kind), Some(reason), Vec::new())
            }

            // Boot.
            (S::Boot { .. }, E::Booted) => (
                S::Reset {
                    tries: 1,
                    after_gate: false,
                },
                vec![Effect::EnterPhase(Phase::Reset), Effect::Reset],
            ),
            (S::Boot { tries }, E::BootFailed { .. }) if tries < BOOT_TRIES => {
                (S::Boot { tries: tries + 1 }, vec![Effect::Boot])
            }
            (S::Boot { .. }, E::BootFailed { reason }) => {
                self.publish_infra(FailureKind::BootFailed, reason, false)
            }

            // Reset.
            (S::Reset { after_gate, .. }, E::Reset { verified: true }) => {
                if self.spec.gate && !after_gate {
                    (S::Gate, vec![Effect::EnterPhase(Phase::Gate), Effect::Gate])
                } else {
                    self.enter_agent()
                }
            }
            (
                S::Reset { tries, after_gate },
                E::Reset { verified: false } | E::ResetFailed { .. },
            ) if tries < RESET_TRIES => (
                S::Reset {
                    tries: tries + 1,
                    after_gate,
                },
                vec![Effect::Reset],
            ),
            (S::Reset { tries, .. }, E::Reset { verified: false }) => self.publish_infra(
                FailureKind::ResetUnverified,
                format!("reset not verified after {tries} tries"),
                false,
            ),
            (S::Reset { .. }, E::ResetFailed { reason }) => {
                self.publish_infra(FailureKind::ResetUnverified, reason, false)
            }

            // Gate: only an explicit infeasible skips the agent, and then the benchmark's own
            // infeasible action is submitted and evaluated like any other final state.
            (S::Gate, E::GateAnswered(record)) => {
                let infeasible = record.verdict == GateVerdict::Infeasible;
                self.gate_record = Some(record);
                if infeasible {
                    (S::Declare, vec![Effect::DeclareInfeasible])
                } else {
                    Self::reset_after_gate()
                }
            }
            (S::Gate, E::GateFailed { reason }) => {
                // An error is not an infeasibility: proceed after a fresh verified reset.
                self.gate_record = Some(GateRecord {
                    verdict: GateVerdict::Error,
                    reason: Some(reason),
                    turns: 0,
                    cost_usd: None,
                });
                Self::reset_after_gate()
            }
            (S::Gate, E::GateCancelUnconfirmed) => self.publish_infra(
                FailureKind::HarnessError,
                "gate cancel not confirmed by the driver".into(),
                true,
            ),
            (S::Declare, E::Declared) => (
                S::Evaluate {
                    agent: AgentSummary {
                        status: Status::Completed,
                        gate_infeasible: true,
                    },
                },
                vec![Effect::EnterPhase(Phase::Evaluate), Effect::Evaluate],
            ),
            // Without the official action the evaluator's score would mean nothing.
            (S::Declare, E::DeclareFailed { reason }) => self.publish_infra(
                FailureKind::HarnessError,
                format!("declare_infeasible failed after an infeasible gate: {reason}"),
                false,
            ),

            // Before the agent: a lost lease or a cancel stops the attempt at once, and the
            // driver is restarted so its pending boot or reset cannot overlap the next trial.
            (S::Admit | S::Boot { .. } | S::Reset { .. } | S::Gate | S::Declare, E::LeaseLost) => (
                S::Done,
                vec![Effect::RestartDriver, Effect::Finish { published: false }],
            ),
            (
                S::Admit | S::Boot { .. } | S::Reset { .. } | S::Gate | S::Declare,
                E::CancelRequested,
            ) => self.release(ReleaseKind::Cancelled, None, vec![Effect::RestartDriver]),

            // The agent runs.
            (S::Agent(Running), E::AgentFinished(result)) => self.agent_finished(result),
            (S::Agent(Running), E::TaskTimeout) => (
                S::Agent(Cancelling(CancelReason::TaskTimeout)),
                vec![Effect::CancelAgent],
            ),
            (S::Agent(Running), E::GuestLost) => Self::cancel(CancelReason::GuestLost),
            (S::Agent(Running), E::LeaseLost) => Self::cancel(CancelReason::LeaseLost),
            (S::Agent(Running), E::CancelRequested) => Self::cancel(CancelReason::Stop),

            // The agent is being cancelled: only its end (or the driver's) matters.
            (S::Agent(Cancelling(why)), E::AgentFinished(result)) => self.cancelled(why, result),
            (S::Agent(Cancelling(why)), E::DriverCrashed { reason }) => self.killed(why, reason),
            (S::Agent(Cancelling(why)), E::CancelOverdue) if !self.spec.task_api => {
                self.killed(why, CANCEL_IGNORED.into())
            }
            // A lease lost while cancelling for another reason: the agent is already being
            // stopped, and now nothing may be evaluated or published.
            (
                S::Agent(Cancelling(
                    CancelReason::TaskTimeout | CancelReason::GuestLost | CancelReason::Stop,
                )),
                E::LeaseLost,
            ) => (S::Agent(Cancelling(CancelReason::LeaseLost)), Vec::new()),

            // A crash before publication ends the attempt as `driver_crash`.
            (
                S::Admit
                | S::Boot { .. }
                | S::Reset { .. }
                | S::Gate
                | S::Declare
                | S::Agent(Running)
                | S::Evaluate { .. },
                E::DriverCrashed { reason },
            ) => self.publish_infra(FailureKind::DriverCrash, reason, true),

            // Evaluate: after this point the outcome is always published.
            (
                S::Evaluate { agent },
                E::Evaluated {
                    score,
                    passed,
                    checks,
                },
            ) => {
                let infeasible_source = if agent.gate_infeasible {
                    Some(InfeasibleSource::Gate)
                } else if self.agent.as_ref().is_some_and(|r| r.infeasible) {
                    Some(InfeasibleSource::Agent)
                } else {
                    None
                };
                let verdict = Verdict {
                    status: agent.status,
                    failure_kind: None,
                    score: Some(score),
                    passed: Some(passed),
                    checks,
                    infeasible_source,
                    agent: self.agent.clone(),
                    lease_lost: self.lease_lost,
                    error: None,
                    gate: self.gate_record.clone(),
                };
                (
                    S::Publish,
                    vec![Effect::EnterPhase(Phase::Publish), Effect::Publish(verdict)],
                )
            }
            (S::Evaluate { .. }, E::EvaluateFailed { reason }) => {
                self.publish_infra(FailureKind::EvaluatorError, reason, false)
            }
            (S::Evaluate { agent }, E::LeaseLost) => {
                self.lease_lost = true;
                (S::Evaluate { agent }, Vec::new())
            }

            // The hand-off: the attempt ends once the outbox has it.
            (S::Publish, E::LeaseLost) => {
                self.lease_lost = true;
                (S::Publish, Vec::new())
            }
            (S::Publish | S::Release, E::Published) => {
                (S::Done, vec![Effect::Finish { published: true }])
            }

            // Anything else is out of order or changes nothing: the state stays, no effect.
            // The transition-coverage test pins down every pair that lands here.
            (state, _) => (state, Vec::new()),
        }
    }

    fn reset_after_gate() -> Step {
        (
            State::Reset {
                tries: 1,
                after_gate: true,
            },
            vec![Effect::EnterPhase(Phase::Reset), Effect::Reset],
        )
    }

    fn enter_agent(&self) -> Step {
        let gate_turns = self.gate_record.as_ref().map_or(0, |g| g.turns);
        (
            State::Agent(AgentPhase::Running),
            vec![
                Effect::EnterPhase(Phase::Agent),
                Effect::StartAgent {
                    max_turns: self.spec.max_turns.saturating_sub(gate_turns),
                },
                Effect::StartWatchdog,
            ],
        )
    }

    fn cancel(why: CancelReason) -> Step {
        (
            State::Agent(AgentPhase::Cancelling(why)),
            vec![Effect::StopWatchdog, Effect::CancelAgent],
        )
    }

    fn release(&self, kind: ReleaseKind, reason: Option<String>, mut before: Vec<Effect>) -> Step {
        before.push(Effect::Release {
            kind,
            reason,
            gate: self.gate_record.clone(),
        });
        (State::Release, before)
    }

    /// Publishes an infra error; `restart` kills the driver first.
    fn publish_infra(&self, kind: FailureKind, error: String, restart: bool) -> Step {
        let verdict = Verdict {
            status: Status::InfraError,
            failure_kind: Some(kind),
            score: None,
            passed: None,
            checks: Vec::new(),
            infeasible_source: None,
            agent: self.agent.clone(),
            lease_lost: self.lease_lost,
            error: Some(error),
            gate: self.gate_record.clone(),
        };
        let mut effects = Vec::with_capacity(3);
        if restart {
            effects.push(Effect::RestartDriver);
        }
        effects.push(Effect::EnterPhase(Phase::Publish));
        effects.push(Effect::Publish(verdict));
        (State::Publish, effects)
    }

    /// The agent ended on its own.
    fn agent_finished(&mut self, result: AgentResult) -> Step {
        let status = agent_status(result.status);
        let cancelled = result.status == AgentStatus::Cancelled;
        let kind = result
            .failure_kind
            .filter(|k| k.driver_reportable())
            .unwrap_or(FailureKind::HarnessError);
        let error = result.error.clone();
        self.agent = Some(result);
        let (state, mut effects) = match status {
            Some(status) => (
                State::Evaluate {
                    agent: AgentSummary {
                        status,
                        gate_infeasible: false,
                    },
                },
                vec![Effect::EnterPhase(Phase::Evaluate), Effect::Evaluate],
            ),
            // Cancelled without our asking: the driver gave up on its own.
            None if cancelled => self.publish_infra(
                FailureKind::HarnessError,
                "agent cancelled by the driver".into(),
                false,
            ),
            None => self.publish_infra(
                kind,
                error.unwrap_or_else(|| format!("agent reported {kind}")),
                false,
            ),
        };
        effects.insert(0, Effect::StopWatchdog);
        (state, effects)
    }

    /// The agent stopped after we cancelled it.
    fn cancelled(&mut self, why: CancelReason, result: AgentResult) -> Step {
        match why {
            CancelReason::TaskTimeout => {
                // A timed-out agent is scored: evaluate what it left behind.
                self.agent = Some(result);
                (
                    State::Evaluate {
                        agent: AgentSummary {
                            status: Status::Timeout,
                            gate_infeasible: false,
                        },
                    },
                    vec![
                        Effect::StopWatchdog,
                        Effect::EnterPhase(Phase::Evaluate),
                        Effect::Evaluate,
                    ],
                )
            }
            CancelReason::GuestLost => {
                self.agent = Some(result);
                self.publish_infra(FailureKind::GuestLost, GUEST_LOST.into(), false)
            }
            CancelReason::LeaseLost => (State::Done, vec![Effect::Finish { published: false }]),
            CancelReason::Stop => self.release(ReleaseKind::Cancelled, None, Vec::new()),
        }
    }

    /// The driver died (or was killed) while the agent was being cancelled: the attempt ends
    /// as the cancel meant.
    fn killed(&self, why: CancelReason, reason: String) -> Step {
        match why {
            CancelReason::LeaseLost => (
                State::Done,
                vec![Effect::RestartDriver, Effect::Finish { published: false }],
            ),
            CancelReason::Stop => {
                self.release(ReleaseKind::Cancelled, None, vec![Effect::RestartDriver])
            }
            CancelReason::GuestLost => {
                self.publish_infra(FailureKind::GuestLost, GUEST_LOST.into(), true)
            }
            CancelReason::TaskTimeout => self.publish_infra(FailureKind::DriverCrash, reason, true),
        }
    }
}
