//! The attempt lifecycle as a pure state machine: events in, effects out, no I/O.
//!
//! `admit → boot → reset (verified) → [gate → reset] → agent → evaluate → publish → done`
//!
//! With a gate that answers infeasible: `… → gate → declare_infeasible → evaluate → …`.
//!
//! The Lane actor executes the effects (driver calls, the attempt record, the outbox) and
//! feeds their results back as events. Rules this machine keeps:
//! - nothing has an effect before the attempt record is written (`admit`);
//! - boot and reset retry within their budget; an unverifiable reset is `reset_unverified`;
//! - only an explicit `infeasible` from the gate skips the agent: the driver submits the
//!   benchmark's own infeasible action (`declare_infeasible`) and the evaluator scores it, so a
//!   correctly detected infeasible task can pass; anything else continues after a fresh
//!   verified reset. The gate's verdict, turns and cost are kept on every path;
//!   a gate whose cancel the driver does not confirm fails closed (`harness_error`);
//! - a lost lease before evaluate cancels the agent and abandons the attempt (the store's reap
//!   row already says what happened); after evaluate the outcome is always published;
//! - a driver crash is `driver_crash`, and the driver is restarted for the next attempt;
//! - once done, every further event is ignored ("a cancel after the outcome is ignored").

use lanes_common::row::{
    Check, FailureKind, GateRecord, GateVerdict, InfeasibleSource, Phase, Status,
};

use crate::driver::protocol::{AgentResult, AgentStatus};

/// Attempts of `boot` before the attempt is `boot_failed`.
pub const BOOT_TRIES: u32 = 3;
/// Attempts of a verified `reset` before the attempt is `reset_unverified`.
pub const RESET_TRIES: u32 = 3;

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
        agent: Box<AgentSummary>,
    },
    Publish,
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

/// What the agent reported, kept for the row.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSummary {
    pub status: Status,
    pub result: Option<AgentResult>,
    /// The gate declared the task infeasible and no agent ran.
    pub gate_infeasible: bool,
}

impl AgentSummary {
    fn infeasible_source(&self) -> Option<InfeasibleSource> {
        if self.gate_infeasible {
            Some(InfeasibleSource::Gate)
        } else if self.result.as_ref().is_some_and(|r| r.infeasible) {
            Some(InfeasibleSource::Agent)
        } else {
            None
        }
    }
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
    StartAgent,
    CancelAgent,
    /// Start polling the guest's health URL, if boot or reset gave one.
    StartWatchdog,
    StopWatchdog,
    Evaluate,
    /// Write the outcome to the outbox, then send it.
    Publish(Verdict),
    /// Give the trial back with a `cancelled` or `blocked` row.
    Release(ReleaseKind),
    /// The lease is gone before evaluate: stop, publish nothing.
    Abandon,
    RestartDriver,
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
    pub agent: Option<AgentResult>,
    pub lease_lost: bool,
    pub error: Option<String>,
    /// The gate's answer, when it ran; its turns and cost count on every path.
    pub gate: Option<GateRecord>,
}

impl Verdict {
    fn infra(kind: FailureKind, error: String) -> Self {
        Self {
            status: Status::InfraError,
            failure_kind: Some(kind),
            score: None,
            passed: None,
            checks: Vec::new(),
            infeasible_source: None,
            agent: None,
            lease_lost: false,
            error: Some(error),
            gate: None,
        }
    }
}

/// One attempt's machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub state: State,
    /// Whether the campaign runs the feasibility gate.
    pub gate: bool,
    /// What the gate answered, once it has.
    pub gate_record: Option<GateRecord>,
    /// The lease was lost after evaluate began: published anyway, flagged.
    pub lease_lost: bool,
    /// Why preflight refused the attempt, for the `blocked` row.
    pub preflight_reason: Option<String>,
}

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
    pub fn new(gate: bool) -> Self {
        Self {
            state: State::Admit,
            gate,
            gate_record: None,
            lease_lost: false,
            preflight_reason: None,
        }
    }

    /// The first effects: write the attempt record before anything else.
    pub fn start(&self) -> Vec<Effect> {
        vec![Effect::EnterPhase(Phase::Admit), Effect::WriteAttemptRecord]
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Turns the gate spent, counted toward `max_turns`.
    pub fn gate_turns(&self) -> u32 {
        self.gate_record.as_ref().map_or(0, |g| g.turns)
    }

    /// The phase to report in heartbeats.
    pub fn phase(&self) -> Phase {
        match &self.state {
            State::Admit => Phase::Admit,
            State::Boot { .. } => Phase::Boot,
            State::Reset { .. } => Phase::Reset,
            State::Gate | State::Declare => Phase::Gate,
            State::Agent(_) => Phase::Agent,
            State::Evaluate { .. } => Phase::Evaluate,
            State::Publish | State::Done => Phase::Publish,
        }
    }

    fn finish_infra(&mut self, kind: FailureKind, error: String, restart: bool) -> Vec<Effect> {
        self.state = State::Publish;
        let mut v = Verdict::infra(kind, error);
        v.gate = self.gate_record.clone();
        let mut effects = vec![Effect::EnterPhase(Phase::Publish), Effect::Publish(v)];
        if restart {
            effects.insert(0, Effect::RestartDriver);
        }
        effects
    }

    fn enter_agent(&mut self) -> Vec<Effect> {
        self.state = State::Agent(AgentPhase::Running);
        vec![
            Effect::EnterPhase(Phase::Agent),
            Effect::StartAgent,
            Effect::StartWatchdog,
        ]
    }

    /// Applies one event.
    pub fn next(&mut self, event: Event) -> Vec<Effect> {
        use Event as E;
        // Crashes end any phase before publication the same way.
        // A driver killed because it did not stop after a cancel ends as the cancel meant.
        if let (E::DriverCrashed { .. }, State::Agent(AgentPhase::Cancelling(why))) =
            (&event, &self.state)
        {
            match why {
                CancelReason::LeaseLost => {
                    self.state = State::Done;
                    return vec![Effect::RestartDriver, Effect::Abandon];
                }
                CancelReason::Stop => {
                    self.state = State::Done;
                    return vec![
                        Effect::RestartDriver,
                        Effect::Release(ReleaseKind::Cancelled),
                    ];
                }
                CancelReason::GuestLost => {
                    return self.finish_infra(
                        FailureKind::GuestLost,
                        "guest health endpoint unreachable past the grace window".into(),
                        true,
                    );
                }
                CancelReason::TaskTimeout => {}
            }
        }
        if let E::DriverCrashed { reason } = &event
            && !matches!(self.state, State::Publish | State::Done)
        {
            let lost = self.lease_lost;
            let mut effects = self.finish_infra(FailureKind::DriverCrash, reason.clone(), true);
            if let Some(Effect::Publish(v)) = effects.last_mut() {
                v.lease_lost = lost;
            }
            return effects;
        }
        let state = std::mem::replace(&mut self.state, State::Done);
        match (state, event) {
            (State::Done, _) => {
                self.state = State::Done;
                Vec::new()
            }
            // Admission.
            (State::Admit, E::Admitted) => {
                self.state = State::Boot { tries: 1 };
                vec![Effect::EnterPhase(Phase::Boot), Effect::Boot]
            }
            (State::Admit, E::PreflightFailed { kind, reason }) => {
                self.preflight_reason = Some(reason);
                vec![Effect::Release(ReleaseKind::Blocked(kind))]
            }
            // Boot.
            (State::Boot { .. }, E::Booted) => {
                self.state = State::Reset {
                    tries: 1,
                    after_gate: false,
                };
                vec![Effect::EnterPhase(Phase::Reset), Effect::Reset]
            }
            (State::Boot { tries }, E::BootFailed { reason }) => {
                if tries < BOOT_TRIES {
                    self.state = State::Boot { tries: tries + 1 };
                    vec![Effect::Boot]
                } else {
                    self.finish_infra(FailureKind::BootFailed, reason, false)
                }
            }
            // Reset.
            (State::Reset { after_gate, .. }, E::Reset { verified: true }) => {
                if self.gate && !after_gate {
                    self.state = State::Gate;
                    vec![Effect::EnterPhase(Phase::Gate), Effect::Gate]
                } else {
                    self.enter_agent()
                }
            }
            (State::Reset { tries, after_gate }, E::Reset { verified: false }) => {
                if tries < RESET_TRIES {
                    self.state = State::Reset {
                        tries: tries + 1,
                        after_gate,
                    };
                    vec![Effect::Reset]
                } else {
                    self.finish_infra(
                        FailureKind::ResetUnverified,
                        format!("reset not verified after {tries} tries"),
                        false,
                    )
                }
            }
            (State::Reset { tries, after_gate }, E::ResetFailed { reason }) => {
                if tries < RESET_TRIES {
                    self.state = State::Reset {
                        tries: tries + 1,
                        after_gate,
                    };
                    vec![Effect::Reset]
                } else {
                    self.finish_infra(FailureKind::ResetUnverified, reason, false)
                }
            }
            // Gate: only an explicit infeasible skips the agent, and then the benchmark's own
            // infeasible action is submitted and evaluated like any other final state.
            (State::Gate, E::GateAnswered(record)) => {
                let infeasible = record.verdict == GateVerdict::Infeasible;
                self.gate_record = Some(record);
                if infeasible {
                    self.state = State::Declare;
                    vec![Effect::DeclareInfeasible]
                } else {
                    self.state = State::Reset {
                        tries: 1,
                        after_gate: true,
                    };
                    vec![Effect::EnterPhase(Phase::Reset), Effect::Reset]
                }
            }
            (State::Gate, E::GateFailed { reason }) => {
                // An error is not an infeasibility: proceed after a fresh verified reset.
                self.gate_record = Some(GateRecord {
                    verdict: GateVerdict::Error,
                    reason: Some(reason),
                    turns: 0,
                    cost_usd: None,
                });
                self.state = State::Reset {
                    tries: 1,
                    after_gate: true,
                };
                vec![Effect::EnterPhase(Phase::Reset), Effect::Reset]
            }
            (State::Declare, E::Declared) => {
                self.state = State::Evaluate {
                    agent: Box::new(AgentSummary {
                        status: Status::Completed,
                        result: None,
                        gate_infeasible: true,
                    }),
                };
                vec![Effect::EnterPhase(Phase::Evaluate), Effect::Evaluate]
            }
            // Without the official action the evaluator's score would mean nothing.
            (State::Declare, E::DeclareFailed { reason }) => self.finish_infra(
                FailureKind::HarnessError,
                format!("declare_infeasible failed after an infeasible gate: {reason}"),
                false,
            ),
            (State::Gate, E::GateCancelUnconfirmed) => self.finish_infra(
                FailureKind::HarnessError,
                "gate cancel not confirmed by the driver".into(),
                true,
            ),
            // Agent.
            (State::Agent(AgentPhase::Running), E::TaskTimeout) => {
                self.state = State::Agent(AgentPhase::Cancelling(CancelReason::TaskTimeout));
                vec![Effect::CancelAgent]
            }
            (State::Agent(AgentPhase::Running), E::GuestLost) => {
                self.state = State::Agent(AgentPhase::Cancelling(CancelReason::GuestLost));
                vec![Effect::StopWatchdog, Effect::CancelAgent]
            }
            (State::Agent(AgentPhase::Running), E::LeaseLost) => {
                self.state = State::Agent(AgentPhase::Cancelling(CancelReason::LeaseLost));
                vec![Effect::StopWatchdog, Effect::CancelAgent]
            }
            (State::Agent(AgentPhase::Running), E::CancelRequested) => {
                self.state = State::Agent(AgentPhase::Cancelling(CancelReason::Stop));
                vec![Effect::StopWatchdog, Effect::CancelAgent]
            }
            (State::Agent(AgentPhase::Cancelling(why)), E::AgentFinished(result)) => match why {
                CancelReason::TaskTimeout => {
                    // A timed-out agent is scored: evaluate what it left behind.
                    self.state = State::Evaluate {
                        agent: Box::new(AgentSummary {
                            status: Status::Timeout,
                            result: Some(result),
                            gate_infeasible: false,
                        }),
                    };
                    vec![
                        Effect::StopWatchdog,
                        Effect::EnterPhase(Phase::Evaluate),
                        Effect::Evaluate,
                    ]
                }
                CancelReason::GuestLost => self.finish_infra(
                    FailureKind::GuestLost,
                    "guest health endpoint unreachable past the grace window".into(),
                    false,
                ),
                CancelReason::LeaseLost => vec![Effect::Abandon],
                CancelReason::Stop => vec![Effect::Release(ReleaseKind::Cancelled)],
            },
            (State::Agent(AgentPhase::Cancelling(why)), _other) => {
                // Waiting for the agent to stop; other news changes nothing.
                self.state = State::Agent(AgentPhase::Cancelling(why));
                Vec::new()
            }
            (State::Agent(AgentPhase::Running), E::AgentFinished(result)) => {
                match agent_status(result.status) {
                    Some(status) => {
                        self.state = State::Evaluate {
                            agent: Box::new(AgentSummary {
                                status,
                                result: Some(result),
                                gate_infeasible: false,
                            }),
                        };
                        vec![
                            Effect::StopWatchdog,
                            Effect::EnterPhase(Phase::Evaluate),
                            Effect::Evaluate,
                        ]
                    }
                    None if result.status == AgentStatus::Cancelled => {
                        // Cancelled without our asking: the driver gave up on its own.
                        let mut effects = self.finish_infra(
                            FailureKind::HarnessError,
                            "agent cancelled by the driver".into(),
                            false,
                        );
                        effects.insert(0, Effect::StopWatchdog);
                        effects
                    }
                    None => {
                        let kind = result
                            .failure_kind
                            .as_deref()
                            .and_then(|k| k.parse::<FailureKind>().ok())
                            .filter(|k| {
                                !matches!(k, FailureKind::LeaseExpired | FailureKind::Preflight)
                            })
                            .unwrap_or(FailureKind::HarnessError);
                        self.state = State::Publish;
                        let mut v = Verdict::infra(
                            kind,
                            result
                                .error
                                .clone()
                                .unwrap_or_else(|| format!("agent reported {kind}")),
                        );
                        v.agent = Some(result);
                        v.gate = self.gate_record.clone();
                        vec![
                            Effect::StopWatchdog,
                            Effect::EnterPhase(Phase::Publish),
                            Effect::Publish(v),
                        ]
                    }
                }
            }
            // Evaluate: after this point the outcome is always published.
            (State::Evaluate { agent }, E::LeaseLost) => {
                self.lease_lost = true;
                self.state = State::Evaluate { agent };
                Vec::new()
            }
            (
                State::Evaluate { agent },
                E::Evaluated {
                    score,
                    passed,
                    checks,
                },
            ) => {
                self.state = State::Publish;
                let infeasible_source = agent.infeasible_source();
                vec![
                    Effect::EnterPhase(Phase::Publish),
                    Effect::Publish(Verdict {
                        status: agent.status,
                        failure_kind: None,
                        score: Some(score),
                        passed: Some(passed),
                        checks,
                        infeasible_source,
                        agent: agent.result,
                        lease_lost: self.lease_lost,
                        error: None,
                        gate: self.gate_record.clone(),
                    }),
                ]
            }
            (State::Evaluate { .. }, E::EvaluateFailed { reason }) => {
                let lost = self.lease_lost;
                let mut effects = self.finish_infra(FailureKind::EvaluatorError, reason, false);
                if let Some(Effect::Publish(v)) = effects.last_mut() {
                    v.lease_lost = lost;
                }
                effects
            }
            (State::Evaluate { agent }, _) => {
                self.state = State::Evaluate { agent };
                Vec::new()
            }
            // Publish: the outcome is in the outbox; the lane finishes once it is sent.
            (State::Publish, E::Published) => vec![],
            (State::Publish, E::LeaseLost) => {
                self.lease_lost = true;
                self.state = State::Publish;
                Vec::new()
            }
            (State::Publish, _) => {
                self.state = State::Publish;
                Vec::new()
            }
            // Before the agent: a lost lease or a cancel stops the attempt at once, and the
            // driver is restarted so its pending boot or reset cannot overlap the next trial.
            (
                State::Admit
                | State::Boot { .. }
                | State::Reset { .. }
                | State::Gate
                | State::Declare,
                E::LeaseLost,
            ) => vec![Effect::RestartDriver, Effect::Abandon],
            (
                State::Admit
                | State::Boot { .. }
                | State::Reset { .. }
                | State::Gate
                | State::Declare,
                E::CancelRequested,
            ) => vec![
                Effect::RestartDriver,
                Effect::Release(ReleaseKind::Cancelled),
            ],
            // Anything else is out of order: keep the state, do nothing.
            (state, _) => {
                self.state = state;
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(status: AgentStatus) -> AgentResult {
        AgentResult {
            status,
            failure_kind: None,
            reset_epoch: None,
            runtime_outcome: None,
            infeasible: false,
            final_text: None,
            turns: Some(3),
            tokens: None,
            cost_usd: Some(0.1),
            quota: None,
            error: None,
        }
    }

    fn publish(effects: &[Effect]) -> &Verdict {
        effects
            .iter()
            .find_map(|e| match e {
                Effect::Publish(v) => Some(v),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no publish in {effects:?}"))
    }

    fn gate_record(verdict: GateVerdict, turns: u32) -> GateRecord {
        GateRecord {
            verdict,
            reason: Some("why".into()),
            turns,
            cost_usd: Some(0.02),
        }
    }

    /// Drives an attempt to the agent phase.
    fn at_agent(gate: bool) -> Attempt {
        let mut a = Attempt::new(gate);
        assert_eq!(
            a.start(),
            vec![Effect::EnterPhase(Phase::Admit), Effect::WriteAttemptRecord]
        );
        assert!(a.next(Event::Admitted).contains(&Effect::Boot));
        assert!(a.next(Event::Booted).contains(&Effect::Reset));
        if gate {
            assert!(
                a.next(Event::Reset { verified: true })
                    .contains(&Effect::Gate)
            );
            assert!(
                a.next(Event::GateAnswered(gate_record(GateVerdict::Proceed, 2)))
                    .contains(&Effect::Reset)
            );
        }
        let e = a.next(Event::Reset { verified: true });
        assert!(
            e.contains(&Effect::StartAgent) && e.contains(&Effect::StartWatchdog),
            "{e:?}"
        );
        assert_eq!(a.phase(), Phase::Agent);
        a
    }

    fn evaluated(a: &mut Attempt) -> Vec<Effect> {
        a.next(Event::Evaluated {
            score: 1.0,
            passed: true,
            checks: vec![],
        })
    }

    #[test]
    fn happy_path_publishes_the_score() {
        let mut a = at_agent(false);
        let e = a.next(Event::AgentFinished(agent(AgentStatus::Completed)));
        assert!(e.contains(&Effect::Evaluate) && e.contains(&Effect::StopWatchdog));
        let e = evaluated(&mut a);
        let v = publish(&e);
        assert_eq!(
            (v.status, v.score, v.passed),
            (Status::Completed, Some(1.0), Some(true))
        );
        assert!(!v.lease_lost);
        assert!(a.next(Event::Published).is_empty());
        assert!(a.is_done());
        assert!(
            a.next(Event::CancelRequested).is_empty(),
            "a cancel after the outcome is ignored"
        );
    }

    #[test]
    fn every_scored_agent_status_is_evaluated() {
        for (s, want) in [
            (AgentStatus::Timeout, Status::Timeout),
            (AgentStatus::MaxTurns, Status::MaxTurns),
            (AgentStatus::AgentError, Status::AgentError),
            (AgentStatus::Violation, Status::Violation),
        ] {
            let mut a = at_agent(false);
            assert!(
                a.next(Event::AgentFinished(agent(s)))
                    .contains(&Effect::Evaluate)
            );
            assert_eq!(publish(&evaluated(&mut a)).status, want);
        }
    }

    #[test]
    fn preflight_failure_is_blocked_and_nothing_runs() {
        let mut a = Attempt::new(false);
        let e = a.next(Event::PreflightFailed {
            kind: FailureKind::IdentityMismatch,
            reason: "pin".into(),
        });
        assert_eq!(
            e,
            vec![Effect::Release(ReleaseKind::Blocked(
                FailureKind::IdentityMismatch
            ))]
        );
        assert!(a.is_done());
        assert!(a.next(Event::Booted).is_empty(), "ignored once done");
    }

    #[test]
    fn boot_retries_then_fails() {
        let mut a = Attempt::new(false);
        a.next(Event::Admitted);
        for _ in 1..BOOT_TRIES {
            assert_eq!(
                a.next(Event::BootFailed { reason: "x".into() }),
                vec![Effect::Boot]
            );
        }
        let e = a.next(Event::BootFailed {
            reason: "no vm".into(),
        });
        let v = publish(&e);
        assert_eq!(
            (v.status, v.failure_kind),
            (Status::InfraError, Some(FailureKind::BootFailed))
        );
        assert_eq!(v.error.as_deref(), Some("no vm"));
    }

    #[test]
    fn unverified_reset_retries_then_fails() {
        for failing in [
            Event::Reset { verified: false },
            Event::ResetFailed { reason: "r".into() },
        ] {
            let mut a = Attempt::new(false);
            a.next(Event::Admitted);
            a.next(Event::Booted);
            for _ in 1..RESET_TRIES {
                assert_eq!(a.next(failing.clone()), vec![Effect::Reset]);
            }
            let v = publish(&a.next(failing)).clone();
            assert_eq!(v.failure_kind, Some(FailureKind::ResetUnverified));
        }
    }

    #[test]
    fn driver_crash_in_any_phase_restarts_the_driver() {
        let setups: Vec<Box<dyn Fn() -> Attempt>> = vec![
            Box::new(|| {
                let mut a = Attempt::new(false);
                a.next(Event::Admitted);
                a
            }),
            Box::new(|| at_agent(false)),
            Box::new(|| {
                let mut a = at_agent(false);
                a.next(Event::AgentFinished(agent(AgentStatus::Completed)));
                a
            }),
        ];
        for make in setups {
            let mut a = make();
            let e = a.next(Event::DriverCrashed {
                reason: "exited 3".into(),
            });
            assert_eq!(e[0], Effect::RestartDriver);
            assert_eq!(publish(&e).failure_kind, Some(FailureKind::DriverCrash));
        }
    }

    #[test]
    fn evaluator_crash_is_evaluator_error() {
        let mut a = at_agent(false);
        a.next(Event::AgentFinished(agent(AgentStatus::Completed)));
        let e = a.next(Event::EvaluateFailed {
            reason: "boom".into(),
        });
        assert_eq!(publish(&e).failure_kind, Some(FailureKind::EvaluatorError));
    }

    #[test]
    fn task_timeout_cancels_then_evaluates_as_timeout() {
        let mut a = at_agent(false);
        assert_eq!(a.next(Event::TaskTimeout), vec![Effect::CancelAgent]);
        // A second timeout tick while cancelling changes nothing.
        assert!(a.next(Event::TaskTimeout).is_empty());
        let e = a.next(Event::AgentFinished(agent(AgentStatus::Cancelled)));
        assert!(e.contains(&Effect::Evaluate));
        assert_eq!(publish(&evaluated(&mut a)).status, Status::Timeout);
    }

    #[test]
    fn guest_lost_is_infra_never_a_score() {
        let mut a = at_agent(false);
        let e = a.next(Event::GuestLost);
        assert!(e.contains(&Effect::CancelAgent));
        let e = a.next(Event::AgentFinished(agent(AgentStatus::Cancelled)));
        let v = publish(&e);
        assert_eq!(
            (v.failure_kind, v.score),
            (Some(FailureKind::GuestLost), None)
        );
    }

    #[test]
    fn cancel_requested_releases_as_cancelled() {
        let mut a = at_agent(false);
        assert!(
            a.next(Event::CancelRequested)
                .contains(&Effect::CancelAgent)
        );
        assert_eq!(
            a.next(Event::AgentFinished(agent(AgentStatus::Cancelled))),
            vec![Effect::Release(ReleaseKind::Cancelled)]
        );
        assert!(a.is_done());
        let mut b = Attempt::new(false);
        b.next(Event::Admitted);
        assert_eq!(
            b.next(Event::CancelRequested),
            vec![
                Effect::RestartDriver,
                Effect::Release(ReleaseKind::Cancelled)
            ]
        );
    }

    #[test]
    fn lease_lost_before_evaluate_cancels_and_abandons() {
        let mut a = at_agent(false);
        assert!(a.next(Event::LeaseLost).contains(&Effect::CancelAgent));
        assert_eq!(
            a.next(Event::AgentFinished(agent(AgentStatus::Cancelled))),
            vec![Effect::Abandon]
        );
        let mut b = Attempt::new(false);
        b.next(Event::Admitted);
        b.next(Event::Booted);
        assert_eq!(
            b.next(Event::LeaseLost),
            vec![Effect::RestartDriver, Effect::Abandon]
        );
    }

    #[test]
    fn lease_lost_after_evaluate_still_publishes() {
        let mut a = at_agent(false);
        a.next(Event::AgentFinished(agent(AgentStatus::Completed)));
        assert!(a.next(Event::LeaseLost).is_empty());
        let v = publish(&evaluated(&mut a)).clone();
        assert!(v.lease_lost);
        assert_eq!(v.score, Some(1.0));
    }

    #[test]
    fn infra_agent_result_maps_its_kind() {
        for (kind, want) in [
            ("rate_limit", FailureKind::RateLimit),
            ("overloaded", FailureKind::Overloaded),
            ("auth", FailureKind::Auth),
            ("guest_lost", FailureKind::GuestLost),
            ("nonsense", FailureKind::HarnessError),
            ("lease_expired", FailureKind::HarnessError),
        ] {
            let mut a = at_agent(false);
            let mut r = agent(AgentStatus::InfraError);
            r.failure_kind = Some(kind.into());
            r.reset_epoch = Some(42);
            let v = publish(&a.next(Event::AgentFinished(r))).clone();
            assert_eq!(v.failure_kind, Some(want), "{kind}");
            assert_eq!(v.agent.unwrap().reset_epoch, Some(42));
        }
    }

    fn at_gate() -> Attempt {
        let mut a = Attempt::new(true);
        a.next(Event::Admitted);
        a.next(Event::Booted);
        assert!(
            a.next(Event::Reset { verified: true })
                .contains(&Effect::Gate)
        );
        a
    }

    #[test]
    fn gate_infeasible_declares_then_evaluates_instead_of_running_the_agent() {
        let mut a = at_gate();
        let e = a.next(Event::GateAnswered(gate_record(GateVerdict::Infeasible, 4)));
        assert_eq!(e, vec![Effect::DeclareInfeasible]);
        assert_eq!(a.phase(), Phase::Gate);
        let e = a.next(Event::Declared);
        assert_eq!(
            e,
            vec![Effect::EnterPhase(Phase::Evaluate), Effect::Evaluate]
        );
        // The official evaluator scores the declared infeasible action: it can pass.
        let v = publish(&a.next(Event::Evaluated {
            score: 1.0,
            passed: true,
            checks: Vec::new(),
        }))
        .clone();
        assert_eq!(v.infeasible_source, Some(InfeasibleSource::Gate));
        assert_eq!(
            (v.status, v.score, v.passed),
            (Status::Completed, Some(1.0), Some(true))
        );
        assert_eq!(v.gate, Some(gate_record(GateVerdict::Infeasible, 4)));
        assert!(v.agent.is_none());
    }

    #[test]
    fn a_failed_declare_is_a_harness_error_that_keeps_the_gate() {
        let mut a = at_gate();
        a.next(Event::GateAnswered(gate_record(GateVerdict::Infeasible, 3)));
        let v = publish(&a.next(Event::DeclareFailed {
            reason: "method not found".into(),
        }))
        .clone();
        assert_eq!(
            (v.status, v.failure_kind),
            (Status::InfraError, Some(FailureKind::HarnessError))
        );
        assert!(v.error.unwrap().contains("method not found"));
        assert_eq!(v.gate.unwrap().turns, 3);
    }

    #[test]
    fn a_lost_lease_or_cancel_while_declaring_stops_before_evaluate() {
        let mut a = at_gate();
        a.next(Event::GateAnswered(gate_record(GateVerdict::Infeasible, 1)));
        assert_eq!(
            a.next(Event::LeaseLost),
            vec![Effect::RestartDriver, Effect::Abandon]
        );
        let mut b = at_gate();
        b.next(Event::GateAnswered(gate_record(GateVerdict::Infeasible, 1)));
        assert_eq!(
            b.next(Event::CancelRequested),
            vec![
                Effect::RestartDriver,
                Effect::Release(ReleaseKind::Cancelled)
            ]
        );
    }

    #[test]
    fn gate_feasible_or_error_proceeds_after_a_fresh_reset() {
        let mut a = at_agent(true);
        assert_eq!(a.gate_turns(), 2);
        a.next(Event::AgentFinished(agent(AgentStatus::Completed)));
        let v = publish(&evaluated(&mut a)).clone();
        assert_eq!(v.gate, Some(gate_record(GateVerdict::Proceed, 2)));
        assert_eq!(v.infeasible_source, None);

        let mut b = at_gate();
        assert!(
            b.next(Event::GateFailed { reason: "x".into() })
                .contains(&Effect::Reset)
        );
        assert_eq!(
            b.gate_record.as_ref().map(|g| g.verdict),
            Some(GateVerdict::Error)
        );
        assert!(
            b.next(Event::Reset { verified: true })
                .contains(&Effect::StartAgent)
        );
        // The gate's record survives an infra ending too.
        let v = publish(&b.next(Event::DriverCrashed {
            reason: "gone".into(),
        }))
        .clone();
        assert_eq!(v.gate.map(|g| g.verdict), Some(GateVerdict::Error));
    }

    #[test]
    fn unconfirmed_gate_cancel_fails_closed() {
        let mut a = Attempt::new(true);
        a.next(Event::Admitted);
        a.next(Event::Booted);
        a.next(Event::Reset { verified: true });
        let e = a.next(Event::GateCancelUnconfirmed);
        assert_eq!(e[0], Effect::RestartDriver);
        assert_eq!(publish(&e).failure_kind, Some(FailureKind::HarnessError));
    }

    #[test]
    fn agent_infeasible_is_recorded_with_its_source() {
        let mut a = at_agent(false);
        let mut r = agent(AgentStatus::Completed);
        r.infeasible = true;
        a.next(Event::AgentFinished(r));
        let v = publish(&a.next(Event::Evaluated {
            score: 0.0,
            passed: false,
            checks: vec![],
        }))
        .clone();
        assert_eq!(v.infeasible_source, Some(InfeasibleSource::Agent));
    }

    #[test]
    fn a_driver_killed_after_an_ignored_cancel_ends_as_the_cancel_meant() {
        let mut a = at_agent(false);
        a.next(Event::LeaseLost);
        assert_eq!(
            a.next(Event::DriverCrashed {
                reason: "killed".into()
            }),
            vec![Effect::RestartDriver, Effect::Abandon]
        );
        let mut b = at_agent(false);
        b.next(Event::CancelRequested);
        assert_eq!(
            b.next(Event::DriverCrashed {
                reason: "killed".into()
            }),
            vec![
                Effect::RestartDriver,
                Effect::Release(ReleaseKind::Cancelled)
            ]
        );
        let mut c = at_agent(false);
        c.next(Event::GuestLost);
        let e = c.next(Event::DriverCrashed {
            reason: "killed".into(),
        });
        assert_eq!(publish(&e).failure_kind, Some(FailureKind::GuestLost));
        let mut d = at_agent(false);
        d.next(Event::TaskTimeout);
        let e = d.next(Event::DriverCrashed {
            reason: "hung".into(),
        });
        assert_eq!(publish(&e).failure_kind, Some(FailureKind::DriverCrash));
    }

    #[test]
    fn out_of_order_events_change_nothing() {
        let mut a = Attempt::new(false);
        assert!(
            a.next(Event::Evaluated {
                score: 1.0,
                passed: true,
                checks: vec![]
            })
            .is_empty()
        );
        assert_eq!(a.state, State::Admit);
        let mut b = at_agent(false);
        assert!(b.next(Event::Booted).is_empty());
        assert_eq!(b.state, State::Agent(AgentPhase::Running));
    }
}
