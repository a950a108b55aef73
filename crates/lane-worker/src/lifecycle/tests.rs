//! Unit tests of the attempt lifecycle: one behaviour per test.

use super::*;

/// Applies `e` to `a` in place, for tests that walk one attempt through many events.
fn step(a: &mut Attempt, e: Event) -> Vec<Effect> {
    let (next, effects) = a.clone().next(e);
    *a = next;
    effects
}

const MAX_TURNS: u32 = 10;

fn new_attempt(gate: bool) -> Attempt {
    Attempt::start(AttemptSpec {
        gate,
        max_turns: MAX_TURNS,
        task_api: false,
    })
    .0
}

fn release(kind: ReleaseKind) -> Effect {
    Effect::Release {
        kind,
        reason: None,
        gate: None,
    }
}

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
    let (mut a, first) = Attempt::start(AttemptSpec {
        gate,
        max_turns: MAX_TURNS,
        task_api: false,
    });
    assert_eq!(
        first,
        vec![Effect::EnterPhase(Phase::Admit), Effect::WriteAttemptRecord]
    );
    assert!(step(&mut a, Event::Admitted).contains(&Effect::Boot));
    assert!(step(&mut a, Event::Booted).contains(&Effect::Reset));
    if gate {
        assert!(step(&mut a, Event::Reset { verified: true }).contains(&Effect::Gate));
        assert!(
            step(
                &mut a,
                Event::GateAnswered(gate_record(GateVerdict::Proceed, 2))
            )
            .contains(&Effect::Reset)
        );
    }
    let e = step(&mut a, Event::Reset { verified: true });
    // The gate's turns count toward the trial's budget.
    let max_turns = MAX_TURNS - if gate { 2 } else { 0 };
    assert!(
        e.contains(&Effect::StartAgent { max_turns }) && e.contains(&Effect::StartWatchdog),
        "{e:?}"
    );
    assert_eq!(a.phase(), Phase::Agent);
    a
}

fn evaluated(a: &mut Attempt) -> Vec<Effect> {
    step(
        a,
        Event::Evaluated {
            score: 1.0,
            passed: true,
            checks: vec![],
        },
    )
}

#[test]
fn happy_path_publishes_the_score() {
    let mut a = at_agent(false);
    let e = step(&mut a, Event::AgentFinished(agent(AgentStatus::Completed)));
    assert!(e.contains(&Effect::Evaluate) && e.contains(&Effect::StopWatchdog));
    let e = evaluated(&mut a);
    let v = publish(&e);
    assert_eq!(
        (v.status, v.score, v.passed),
        (Status::Completed, Some(1.0), Some(true))
    );
    assert!(!v.lease_lost);
    assert_eq!(
        step(&mut a, Event::Published),
        vec![Effect::Finish { published: true }]
    );
    assert!(a.is_done());
    assert!(
        step(&mut a, Event::CancelRequested).is_empty(),
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
        assert!(step(&mut a, Event::AgentFinished(agent(s))).contains(&Effect::Evaluate));
        assert_eq!(publish(&evaluated(&mut a)).status, want);
    }
}

#[test]
fn preflight_failure_is_blocked_and_nothing_runs() {
    let mut a = new_attempt(false);
    let e = step(
        &mut a,
        Event::PreflightFailed {
            kind: FailureKind::IdentityMismatch,
            reason: "pin".into(),
        },
    );
    assert_eq!(
        e,
        vec![Effect::Release {
            kind: ReleaseKind::Blocked(FailureKind::IdentityMismatch),
            reason: Some("pin".into()),
            gate: None,
        }]
    );
    assert_eq!(
        step(&mut a, Event::Published),
        vec![Effect::Finish { published: true }]
    );
    assert!(a.is_done());
    assert!(step(&mut a, Event::Booted).is_empty(), "ignored once done");
}

#[test]
fn boot_retries_then_fails() {
    let mut a = new_attempt(false);
    step(&mut a, Event::Admitted);
    for _ in 1..BOOT_TRIES {
        assert_eq!(
            step(&mut a, Event::BootFailed { reason: "x".into() }),
            vec![Effect::Boot]
        );
    }
    let e = step(
        &mut a,
        Event::BootFailed {
            reason: "no vm".into(),
        },
    );
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
        let mut a = new_attempt(false);
        step(&mut a, Event::Admitted);
        step(&mut a, Event::Booted);
        for _ in 1..RESET_TRIES {
            assert_eq!(step(&mut a, failing.clone()), vec![Effect::Reset]);
        }
        let v = publish(&step(&mut a, failing)).clone();
        assert_eq!(v.failure_kind, Some(FailureKind::ResetUnverified));
    }
}

#[test]
fn driver_crash_in_any_phase_restarts_the_driver() {
    let setups: Vec<Box<dyn Fn() -> Attempt>> = vec![
        Box::new(|| {
            let mut a = new_attempt(false);
            step(&mut a, Event::Admitted);
            a
        }),
        Box::new(|| at_agent(false)),
        Box::new(|| {
            let mut a = at_agent(false);
            step(&mut a, Event::AgentFinished(agent(AgentStatus::Completed)));
            a
        }),
    ];
    for make in setups {
        let mut a = make();
        let e = step(
            &mut a,
            Event::DriverCrashed {
                reason: "exited 3".into(),
            },
        );
        assert_eq!(e[0], Effect::RestartDriver);
        assert_eq!(publish(&e).failure_kind, Some(FailureKind::DriverCrash));
    }
}

#[test]
fn evaluator_crash_is_evaluator_error() {
    let mut a = at_agent(false);
    step(&mut a, Event::AgentFinished(agent(AgentStatus::Completed)));
    let e = step(
        &mut a,
        Event::EvaluateFailed {
            reason: "boom".into(),
        },
    );
    assert_eq!(publish(&e).failure_kind, Some(FailureKind::EvaluatorError));
}

#[test]
fn task_timeout_cancels_then_evaluates_as_timeout() {
    let mut a = at_agent(false);
    assert_eq!(step(&mut a, Event::TaskTimeout), vec![Effect::CancelAgent]);
    // A second timeout tick while cancelling changes nothing.
    assert!(step(&mut a, Event::TaskTimeout).is_empty());
    let e = step(&mut a, Event::AgentFinished(agent(AgentStatus::Cancelled)));
    assert!(e.contains(&Effect::Evaluate));
    assert_eq!(publish(&evaluated(&mut a)).status, Status::Timeout);
}

#[test]
fn guest_lost_is_infra_never_a_score() {
    let mut a = at_agent(false);
    let e = step(&mut a, Event::GuestLost);
    assert!(e.contains(&Effect::CancelAgent));
    let e = step(&mut a, Event::AgentFinished(agent(AgentStatus::Cancelled)));
    let v = publish(&e);
    assert_eq!(
        (v.failure_kind, v.score),
        (Some(FailureKind::GuestLost), None)
    );
}

#[test]
fn cancel_requested_releases_as_cancelled() {
    let mut a = at_agent(false);
    assert!(step(&mut a, Event::CancelRequested).contains(&Effect::CancelAgent));
    assert_eq!(
        step(&mut a, Event::AgentFinished(agent(AgentStatus::Cancelled))),
        vec![release(ReleaseKind::Cancelled)]
    );
    assert!(!a.is_done(), "ends once the release is handed off");
    assert_eq!(
        step(&mut a, Event::Published),
        vec![Effect::Finish { published: true }]
    );
    assert!(a.is_done());
    let mut b = new_attempt(false);
    step(&mut b, Event::Admitted);
    assert_eq!(
        step(&mut b, Event::CancelRequested),
        vec![Effect::RestartDriver, release(ReleaseKind::Cancelled)]
    );
}

#[test]
fn lease_lost_before_evaluate_cancels_and_abandons() {
    let mut a = at_agent(false);
    assert!(step(&mut a, Event::LeaseLost).contains(&Effect::CancelAgent));
    assert_eq!(
        step(&mut a, Event::AgentFinished(agent(AgentStatus::Cancelled))),
        vec![Effect::Finish { published: false }]
    );
    let mut b = new_attempt(false);
    step(&mut b, Event::Admitted);
    step(&mut b, Event::Booted);
    assert_eq!(
        step(&mut b, Event::LeaseLost),
        vec![Effect::RestartDriver, Effect::Finish { published: false }]
    );
}

#[test]
fn lease_lost_after_evaluate_still_publishes() {
    let mut a = at_agent(false);
    step(&mut a, Event::AgentFinished(agent(AgentStatus::Completed)));
    assert!(step(&mut a, Event::LeaseLost).is_empty());
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
        r.failure_kind = kind.parse().ok();
        r.reset_epoch = Some(42);
        let v = publish(&step(&mut a, Event::AgentFinished(r))).clone();
        assert_eq!(v.failure_kind, Some(want), "{kind}");
        assert_eq!(v.agent.unwrap().reset_epoch, Some(42));
    }
}

fn at_gate() -> Attempt {
    let mut a = new_attempt(true);
    step(&mut a, Event::Admitted);
    step(&mut a, Event::Booted);
    assert!(step(&mut a, Event::Reset { verified: true }).contains(&Effect::Gate));
    a
}

#[test]
fn gate_infeasible_declares_then_evaluates_instead_of_running_the_agent() {
    let mut a = at_gate();
    let e = step(
        &mut a,
        Event::GateAnswered(gate_record(GateVerdict::Infeasible, 4)),
    );
    assert_eq!(e, vec![Effect::DeclareInfeasible]);
    assert_eq!(a.phase(), Phase::Gate);
    let e = step(&mut a, Event::Declared);
    assert_eq!(
        e,
        vec![Effect::EnterPhase(Phase::Evaluate), Effect::Evaluate]
    );
    // The official evaluator scores the declared infeasible action: it can pass.
    let v = publish(&step(
        &mut a,
        Event::Evaluated {
            score: 1.0,
            passed: true,
            checks: Vec::new(),
        },
    ))
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
    step(
        &mut a,
        Event::GateAnswered(gate_record(GateVerdict::Infeasible, 3)),
    );
    let v = publish(&step(
        &mut a,
        Event::DeclareFailed {
            reason: "method not found".into(),
        },
    ))
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
    step(
        &mut a,
        Event::GateAnswered(gate_record(GateVerdict::Infeasible, 1)),
    );
    assert_eq!(
        step(&mut a, Event::LeaseLost),
        vec![Effect::RestartDriver, Effect::Finish { published: false }]
    );
    let mut b = at_gate();
    step(
        &mut b,
        Event::GateAnswered(gate_record(GateVerdict::Infeasible, 1)),
    );
    assert_eq!(
        step(&mut b, Event::CancelRequested),
        vec![
            Effect::RestartDriver,
            Effect::Release {
                kind: ReleaseKind::Cancelled,
                reason: None,
                gate: Some(gate_record(GateVerdict::Infeasible, 1)),
            }
        ]
    );
}

#[test]
fn gate_feasible_or_error_proceeds_after_a_fresh_reset() {
    let mut a = at_agent(true);
    step(&mut a, Event::AgentFinished(agent(AgentStatus::Completed)));
    let v = publish(&evaluated(&mut a)).clone();
    assert_eq!(v.gate, Some(gate_record(GateVerdict::Proceed, 2)));
    assert_eq!(v.infeasible_source, None);

    let mut b = at_gate();
    assert!(step(&mut b, Event::GateFailed { reason: "x".into() }).contains(&Effect::Reset));
    // An errored gate spent no turns: the agent gets the whole budget.
    assert!(
        step(&mut b, Event::Reset { verified: true }).contains(&Effect::StartAgent {
            max_turns: MAX_TURNS
        })
    );
    // The gate's record survives an infra ending too.
    let v = publish(&step(
        &mut b,
        Event::DriverCrashed {
            reason: "gone".into(),
        },
    ))
    .clone();
    assert_eq!(v.gate.map(|g| g.verdict), Some(GateVerdict::Error));
}

#[test]
fn unconfirmed_gate_cancel_fails_closed() {
    let mut a = new_attempt(true);
    step(&mut a, Event::Admitted);
    step(&mut a, Event::Booted);
    step(&mut a, Event::Reset { verified: true });
    let e = step(&mut a, Event::GateCancelUnconfirmed);
    assert_eq!(e[0], Effect::RestartDriver);
    assert_eq!(publish(&e).failure_kind, Some(FailureKind::HarnessError));
}

#[test]
fn agent_infeasible_is_recorded_with_its_source() {
    let mut a = at_agent(false);
    let mut r = agent(AgentStatus::Completed);
    r.infeasible = true;
    step(&mut a, Event::AgentFinished(r));
    let v = publish(&step(
        &mut a,
        Event::Evaluated {
            score: 0.0,
            passed: false,
            checks: vec![],
        },
    ))
    .clone();
    assert_eq!(v.infeasible_source, Some(InfeasibleSource::Agent));
}

#[test]
fn a_driver_killed_after_an_ignored_cancel_ends_as_the_cancel_meant() {
    let mut a = at_agent(false);
    step(&mut a, Event::LeaseLost);
    assert_eq!(
        step(
            &mut a,
            Event::DriverCrashed {
                reason: "killed".into()
            }
        ),
        vec![Effect::RestartDriver, Effect::Finish { published: false }]
    );
    let mut b = at_agent(false);
    step(&mut b, Event::CancelRequested);
    assert_eq!(
        step(
            &mut b,
            Event::DriverCrashed {
                reason: "killed".into()
            }
        ),
        vec![Effect::RestartDriver, release(ReleaseKind::Cancelled)]
    );
    let mut c = at_agent(false);
    step(&mut c, Event::GuestLost);
    let e = step(
        &mut c,
        Event::DriverCrashed {
            reason: "killed".into(),
        },
    );
    assert_eq!(publish(&e).failure_kind, Some(FailureKind::GuestLost));
    let mut d = at_agent(false);
    step(&mut d, Event::TaskTimeout);
    let e = step(
        &mut d,
        Event::DriverCrashed {
            reason: "hung".into(),
        },
    );
    assert_eq!(publish(&e).failure_kind, Some(FailureKind::DriverCrash));
}

#[test]
fn out_of_order_events_change_nothing() {
    let mut a = new_attempt(false);
    assert!(
        step(
            &mut a,
            Event::Evaluated {
                score: 1.0,
                passed: true,
                checks: vec![]
            }
        )
        .is_empty()
    );
    assert_eq!(*a.state(), State::Admit);
    let mut b = at_agent(false);
    assert!(step(&mut b, Event::Booted).is_empty());
    assert_eq!(*b.state(), State::Agent(AgentPhase::Running));
}

#[test]
fn an_ignored_cancel_past_the_grace_kills_the_driver_unless_a_task_api_runs_the_agent() {
    let mut a = at_agent(false);
    step(&mut a, Event::TaskTimeout);
    let e = step(&mut a, Event::CancelOverdue);
    assert_eq!(e[0], Effect::RestartDriver);
    let v = publish(&e);
    assert_eq!(v.failure_kind, Some(FailureKind::DriverCrash));
    assert_eq!(v.error.as_deref(), Some(CANCEL_IGNORED));

    let (mut b, _) = Attempt::start(AttemptSpec {
        gate: false,
        max_turns: MAX_TURNS,
        task_api: true,
    });
    for e in [
        Event::Admitted,
        Event::Booted,
        Event::Reset { verified: true },
        Event::CancelRequested,
    ] {
        step(&mut b, e);
    }
    assert!(
        step(&mut b, Event::CancelOverdue).is_empty(),
        "the task api keeps its own time"
    );
    assert_eq!(
        step(&mut b, Event::AgentFinished(agent(AgentStatus::Cancelled))),
        vec![release(ReleaseKind::Cancelled)]
    );
}

#[test]
fn a_cancel_overdue_after_the_agent_stopped_changes_nothing() {
    let mut a = at_agent(false);
    step(&mut a, Event::TaskTimeout);
    step(&mut a, Event::AgentFinished(agent(AgentStatus::Cancelled)));
    assert!(step(&mut a, Event::CancelOverdue).is_empty());
    assert_eq!(publish(&evaluated(&mut a)).status, Status::Timeout);
}

#[test]
fn the_agent_result_reaches_the_verdict_on_infra_endings_after_it_ran() {
    let mut a = at_agent(false);
    step(&mut a, Event::AgentFinished(agent(AgentStatus::Completed)));
    let e = step(&mut a, Event::EvaluateFailed { reason: "x".into() });
    assert_eq!(publish(&e).agent.as_ref().and_then(|r| r.turns), Some(3));
}
