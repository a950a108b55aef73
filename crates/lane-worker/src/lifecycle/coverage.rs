//! Transition coverage: every (state, event) pair of the machine is decided on purpose.
//!
//! The table below lists each pair that acts and the state it leads to; every other pair must
//! leave the attempt exactly as it was, with no effect. A new state or event fails to compile
//! in `state_name`/`event_name` until it is added here, and a changed transition fails the
//! table until the table says so.

use super::*;

fn states() -> Vec<(&'static str, State)> {
    use AgentPhase::Cancelling;
    vec![
        ("admit", State::Admit),
        ("boot", State::Boot { tries: 1 }),
        ("boot_last", State::Boot { tries: BOOT_TRIES }),
        (
            "reset",
            State::Reset {
                tries: 1,
                after_gate: false,
            },
        ),
        (
            "reset_last",
            State::Reset {
                tries: RESET_TRIES,
                after_gate: false,
            },
        ),
        (
            "reset_after_gate",
            State::Reset {
                tries: 1,
                after_gate: true,
            },
        ),
        ("gate", State::Gate),
        ("declare", State::Declare),
        ("running", State::Agent(AgentPhase::Running)),
        (
            "cancel_timeout",
            State::Agent(Cancelling(CancelReason::TaskTimeout)),
        ),
        (
            "cancel_guest",
            State::Agent(Cancelling(CancelReason::GuestLost)),
        ),
        (
            "cancel_lease",
            State::Agent(Cancelling(CancelReason::LeaseLost)),
        ),
        ("cancel_stop", State::Agent(Cancelling(CancelReason::Stop))),
        (
            "evaluate",
            State::Evaluate {
                agent: AgentSummary {
                    status: Status::Completed,
                    gate_infeasible: false,
                },
            },
        ),
        ("publish", State::Publish),
        ("release", State::Release),
        ("done", State::Done),
    ]
}

/// The coarse name of a state, for the table's targets.
fn state_name(s: &State) -> &'static str {
    match s {
        State::Admit => "admit",
        State::Boot { .. } => "boot",
        State::Reset { .. } => "reset",
        State::Gate => "gate",
        State::Declare => "declare",
        State::Agent(AgentPhase::Running) => "running",
        State::Agent(AgentPhase::Cancelling(_)) => "cancelling",
        State::Evaluate { .. } => "evaluate",
        State::Publish => "publish",
        State::Release => "release",
        State::Done => "done",
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
        turns: Some(1),
        tokens: None,
        cost_usd: None,
        quota: None,
        error: None,
    }
}

fn gate(verdict: GateVerdict) -> GateRecord {
    GateRecord {
        verdict,
        reason: None,
        turns: 1,
        cost_usd: None,
    }
}

/// One sample of every event (two or three where the payload decides the transition).
fn events() -> Vec<Event> {
    let r = || "r".to_owned();
    vec![
        Event::Admitted,
        Event::PreflightFailed {
            kind: FailureKind::Preflight,
            reason: r(),
        },
        Event::Booted,
        Event::BootFailed { reason: r() },
        Event::Reset { verified: true },
        Event::Reset { verified: false },
        Event::ResetFailed { reason: r() },
        Event::GateAnswered(gate(GateVerdict::Infeasible)),
        Event::GateAnswered(gate(GateVerdict::Proceed)),
        Event::GateFailed { reason: r() },
        Event::Declared,
        Event::DeclareFailed { reason: r() },
        Event::GateCancelUnconfirmed,
        Event::AgentFinished(agent(AgentStatus::Completed)),
        Event::AgentFinished(agent(AgentStatus::Cancelled)),
        Event::AgentFinished(agent(AgentStatus::InfraError)),
        Event::TaskTimeout,
        Event::GuestLost,
        Event::Evaluated {
            score: 1.0,
            passed: true,
            checks: Vec::new(),
        },
        Event::EvaluateFailed { reason: r() },
        Event::DriverCrashed { reason: r() },
        Event::LeaseLost,
        Event::CancelRequested,
        Event::CancelOverdue,
        Event::Published,
    ]
}

fn event_name(e: &Event) -> &'static str {
    match e {
        Event::Admitted => "admitted",
        Event::PreflightFailed { .. } => "preflight_failed",
        Event::Booted => "booted",
        Event::BootFailed { .. } => "boot_failed",
        Event::Reset { verified: true } => "verified",
        Event::Reset { verified: false } => "unverified",
        Event::ResetFailed { .. } => "reset_failed",
        Event::GateAnswered(g) if g.verdict == GateVerdict::Infeasible => "gate_infeasible",
        Event::GateAnswered(_) => "gate_proceed",
        Event::GateFailed { .. } => "gate_failed",
        Event::Declared => "declared",
        Event::DeclareFailed { .. } => "declare_failed",
        Event::GateCancelUnconfirmed => "gate_cancel_unconfirmed",
        Event::AgentFinished(r) => match r.status {
            AgentStatus::Cancelled => "agent_cancelled",
            AgentStatus::InfraError => "agent_infra",
            _ => "agent_done",
        },
        Event::TaskTimeout => "task_timeout",
        Event::GuestLost => "guest_lost",
        Event::Evaluated { .. } => "evaluated",
        Event::EvaluateFailed { .. } => "evaluate_failed",
        Event::DriverCrashed { .. } => "crashed",
        Event::LeaseLost => "lease_lost",
        Event::CancelRequested => "cancel",
        Event::CancelOverdue => "cancel_overdue",
        Event::Published => "published",
    }
}

/// Every pair that acts, and the state it leads to.
const TABLE: &[(&str, &str, &str)] = &[
    ("admit", "admitted", "boot"),
    ("admit", "preflight_failed", "release"),
    ("boot", "booted", "reset"),
    ("boot", "boot_failed", "boot"),
    ("boot_last", "booted", "reset"),
    ("boot_last", "boot_failed", "publish"),
    ("reset", "verified", "gate"),
    ("reset", "unverified", "reset"),
    ("reset", "reset_failed", "reset"),
    ("reset_last", "verified", "gate"),
    ("reset_last", "unverified", "publish"),
    ("reset_last", "reset_failed", "publish"),
    ("reset_after_gate", "verified", "running"),
    ("reset_after_gate", "unverified", "reset"),
    ("reset_after_gate", "reset_failed", "reset"),
    ("gate", "gate_infeasible", "declare"),
    ("gate", "gate_proceed", "reset"),
    ("gate", "gate_failed", "reset"),
    ("gate", "gate_cancel_unconfirmed", "publish"),
    ("declare", "declared", "evaluate"),
    ("declare", "declare_failed", "publish"),
    ("running", "agent_done", "evaluate"),
    ("running", "agent_cancelled", "publish"),
    ("running", "agent_infra", "publish"),
    ("running", "task_timeout", "cancelling"),
    ("running", "guest_lost", "cancelling"),
    ("running", "lease_lost", "cancelling"),
    ("running", "cancel", "cancelling"),
    ("running", "crashed", "publish"),
    ("cancel_timeout", "agent_done", "evaluate"),
    ("cancel_timeout", "agent_cancelled", "evaluate"),
    ("cancel_timeout", "agent_infra", "evaluate"),
    ("cancel_timeout", "crashed", "publish"),
    ("cancel_timeout", "cancel_overdue", "publish"),
    ("cancel_timeout", "lease_lost", "cancelling"),
    ("cancel_guest", "agent_done", "publish"),
    ("cancel_guest", "agent_cancelled", "publish"),
    ("cancel_guest", "agent_infra", "publish"),
    ("cancel_guest", "crashed", "publish"),
    ("cancel_guest", "cancel_overdue", "publish"),
    ("cancel_guest", "lease_lost", "cancelling"),
    ("cancel_lease", "agent_done", "done"),
    ("cancel_lease", "agent_cancelled", "done"),
    ("cancel_lease", "agent_infra", "done"),
    ("cancel_lease", "crashed", "done"),
    ("cancel_lease", "cancel_overdue", "done"),
    ("cancel_stop", "agent_done", "release"),
    ("cancel_stop", "agent_cancelled", "release"),
    ("cancel_stop", "agent_infra", "release"),
    ("cancel_stop", "crashed", "release"),
    ("cancel_stop", "cancel_overdue", "release"),
    ("cancel_stop", "lease_lost", "cancelling"),
    ("evaluate", "evaluated", "publish"),
    ("evaluate", "evaluate_failed", "publish"),
    ("evaluate", "crashed", "publish"),
    ("evaluate", "lease_lost", "evaluate"),
    ("publish", "lease_lost", "publish"),
    ("publish", "published", "done"),
    ("release", "published", "done"),
];

/// Pairs every state before the agent shares.
const BEFORE_AGENT: &[(&str, &str)] = &[
    ("lease_lost", "done"),
    ("cancel", "release"),
    ("crashed", "publish"),
];

fn expected(state: &str, event: &str) -> Option<&'static str> {
    let before_agent = [
        "admit",
        "boot",
        "boot_last",
        "reset",
        "reset_last",
        "reset_after_gate",
        "gate",
        "declare",
    ];
    if before_agent.contains(&state)
        && let Some((_, to)) = BEFORE_AGENT.iter().find(|(e, _)| *e == event)
    {
        return Some(to);
    }
    TABLE
        .iter()
        .find(|(s, e, _)| *s == state && *e == event)
        .map(|(_, _, to)| *to)
}

fn attempt_in(state: State, task_api: bool) -> Attempt {
    Attempt {
        state,
        facts: Facts {
            spec: AttemptSpec {
                gate: true,
                max_turns: 10,
                task_api,
            },
            gate_record: None,
            agent: None,
            lease_lost: false,
        },
    }
}

#[test]
fn every_state_event_pair_is_decided_by_the_table() {
    let mut acted = 0;
    for (sname, state) in states() {
        for event in events() {
            let ename = event_name(&event);
            let before = attempt_in(state.clone(), false);
            let (after, effects) = before.clone().next(event);
            let ignored = after == before && effects.is_empty();
            match expected(sname, ename) {
                Some(to) => {
                    acted += 1;
                    assert!(!ignored, "({sname}, {ename}) should act, was ignored");
                    assert_eq!(state_name(after.state()), to, "({sname}, {ename})");
                }
                None => assert!(
                    ignored,
                    "({sname}, {ename}) should be ignored, gave {:?} with {effects:?}",
                    after.state()
                ),
            }
            // What an effect says matches where the attempt is.
            let hands_off = effects
                .iter()
                .any(|e| matches!(e, Effect::Publish(_) | Effect::Release { .. }));
            let finishes = effects.iter().any(|e| matches!(e, Effect::Finish { .. }));
            assert_eq!(
                hands_off,
                matches!(after.state(), State::Publish | State::Release)
                    && !matches!(state, State::Publish | State::Release),
                "({sname}, {ename}): {effects:?}"
            );
            assert_eq!(
                finishes,
                after.is_done() && state != State::Done,
                "({sname}, {ename}): {effects:?}"
            );
        }
    }
    // Every row of the table (and the shared before-agent rows) was reached.
    assert_eq!(acted, TABLE.len() + 8 * BEFORE_AGENT.len());
}

#[test]
fn a_task_api_agent_is_not_killed_for_an_overdue_cancel() {
    for (sname, state) in states() {
        let before = attempt_in(state, true);
        let (after, effects) = before.clone().next(Event::CancelOverdue);
        assert!(
            after == before && effects.is_empty(),
            "{sname}: {effects:?}"
        );
    }
}
