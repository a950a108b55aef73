//! Random event sequences fed to the lifecycle: whatever arrives, in whatever order, the
//! attempt keeps its promises.

use proptest::prelude::*;

use super::*;

fn agent_result() -> impl Strategy<Value = AgentResult> {
    (
        prop::sample::select(vec![
            AgentStatus::Completed,
            AgentStatus::Timeout,
            AgentStatus::MaxTurns,
            AgentStatus::AgentError,
            AgentStatus::Violation,
            AgentStatus::InfraError,
            AgentStatus::Cancelled,
        ]),
        any::<bool>(),
        prop::option::of(prop::sample::select(vec![
            FailureKind::RateLimit,
            FailureKind::LeaseExpired,
            FailureKind::Preflight,
        ])),
    )
        .prop_map(|(status, infeasible, kind)| AgentResult {
            status,
            failure_kind: kind,
            reset_epoch: None,
            runtime_outcome: None,
            infeasible,
            final_text: None,
            turns: Some(2),
            tokens: None,
            cost_usd: None,
            quota: None,
            error: None,
        })
}

fn event() -> impl Strategy<Value = Event> {
    let r = || Just("r".to_owned());
    prop_oneof![
        Just(Event::Admitted),
        r().prop_map(|reason| Event::PreflightFailed {
            kind: FailureKind::Preflight,
            reason
        }),
        Just(Event::Booted),
        r().prop_map(|reason| Event::BootFailed { reason }),
        any::<bool>().prop_map(|verified| Event::Reset { verified }),
        r().prop_map(|reason| Event::ResetFailed { reason }),
        (any::<bool>(), 0u32..5).prop_map(|(infeasible, turns)| Event::GateAnswered(GateRecord {
            verdict: if infeasible {
                GateVerdict::Infeasible
            } else {
                GateVerdict::Proceed
            },
            reason: None,
            turns,
            cost_usd: None,
        })),
        r().prop_map(|reason| Event::GateFailed { reason }),
        Just(Event::Declared),
        r().prop_map(|reason| Event::DeclareFailed { reason }),
        Just(Event::GateCancelUnconfirmed),
        agent_result().prop_map(Event::AgentFinished),
        Just(Event::TaskTimeout),
        Just(Event::GuestLost),
        Just(Event::Evaluated {
            score: 0.5,
            passed: false,
            checks: Vec::new()
        }),
        r().prop_map(|reason| Event::EvaluateFailed { reason }),
        r().prop_map(|reason| Event::DriverCrashed { reason }),
        Just(Event::LeaseLost),
        Just(Event::CancelRequested),
        Just(Event::CancelOverdue),
        Just(Event::Published),
    ]
}

/// The answer the state waits for, so random sequences get deep into the lifecycle.
fn natural(state: &State) -> Event {
    match state {
        State::Admit => Event::Admitted,
        State::Boot { .. } => Event::Booted,
        State::Reset { .. } => Event::Reset { verified: true },
        State::Gate => Event::GateAnswered(GateRecord {
            verdict: GateVerdict::Proceed,
            reason: None,
            turns: 1,
            cost_usd: None,
        }),
        State::Declare => Event::Declared,
        State::Agent(_) => Event::AgentFinished(AgentResult {
            status: AgentStatus::Completed,
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
        }),
        State::Evaluate { .. } => Event::Evaluated {
            score: 1.0,
            passed: true,
            checks: Vec::new(),
        },
        State::Publish | State::Release | State::Done => Event::Published,
    }
}

/// Events that end any attempt, whatever it waits for: a cancel, the agent stopping, a failed
/// evaluation and the hand-off.
fn closing() -> Vec<Event> {
    vec![
        Event::CancelRequested,
        Event::AgentFinished(AgentResult {
            status: AgentStatus::Cancelled,
            failure_kind: None,
            reset_epoch: None,
            runtime_outcome: None,
            infeasible: false,
            final_text: None,
            turns: None,
            tokens: None,
            cost_usd: None,
            quota: None,
            error: None,
        }),
        Event::EvaluateFailed {
            reason: "closing".into(),
        },
        Event::Published,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn an_attempt_keeps_its_promises_under_any_event_order(
        gate in any::<bool>(),
        task_api in any::<bool>(),
        max_turns in 0u32..20,
        // Each step either answers what the attempt waits for or brings random news.
        steps in prop::collection::vec((any::<bool>(), event()), 0..40),
    ) {
        let spec = AttemptSpec { gate, max_turns, task_api };
        let (mut a, first) = Attempt::start(spec);
        prop_assert_eq!(first, vec![Effect::EnterPhase(Phase::Admit), Effect::WriteAttemptRecord]);
        let mut admitted = false;
        let mut handoffs = 0;
        let mut finishes = Vec::new();
        let mut lost_before_evaluate = false;
        let mut evaluating = false;
        let mut evaluated = false;
        let mut declared_infeasible = false;
        let mut gate_turns = 0;
        let mut after_finish = Vec::new();
        let events: Vec<Option<Event>> = steps
            .into_iter()
            .map(|(answer, e)| if answer { None } else { Some(e) })
            .chain(closing().into_iter().map(Some))
            .collect();
        for event in events {
            let was = a.state().clone();
            let event = event.unwrap_or_else(|| natural(&was));
            match (&was, &event) {
                (State::Admit, Event::Admitted) => admitted = true,
                (State::Gate, Event::GateAnswered(g)) => gate_turns = g.turns,
                (State::Evaluate { .. }, Event::Evaluated { .. }) => evaluated = true,
                (s, Event::LeaseLost)
                    if !matches!(s, State::Evaluate { .. } | State::Publish | State::Release | State::Done) =>
                {
                    lost_before_evaluate = true
                }
                _ => {}
            }
            let (next, effects) = a.next(event);
            a = next;
            for e in effects {
                if !finishes.is_empty() {
                    after_finish.push(e.clone());
                }
                match e {
                    Effect::Boot | Effect::Reset | Effect::Gate | Effect::DeclareInfeasible
                    | Effect::StartAgent { .. } | Effect::Evaluate => {
                        prop_assert!(admitted, "{:?} before the attempt record", e);
                    }
                    _ => {}
                }
                match e {
                    Effect::Gate => prop_assert!(gate, "gate without a gated campaign"),
                    Effect::DeclareInfeasible => declared_infeasible = true,
                    Effect::StartAgent { max_turns: m } => {
                        prop_assert!(!declared_infeasible, "agent after an infeasible gate");
                        prop_assert_eq!(m, max_turns.saturating_sub(gate_turns));
                    }
                    Effect::Evaluate => {
                        prop_assert!(!lost_before_evaluate, "evaluated after a lost lease");
                        evaluating = true;
                    }
                    Effect::Publish(v) => {
                        handoffs += 1;
                        prop_assert_eq!(v.score.is_some(), evaluated, "a score only from the evaluator");
                        prop_assert_eq!(v.status.is_scored(), v.score.is_some());
                        if v.score.is_some() {
                            prop_assert!(evaluating);
                        }
                    }
                    Effect::Release { .. } => handoffs += 1,
                    Effect::Finish { published } => finishes.push(published),
                    _ => {}
                }
            }
        }
        prop_assert!(a.is_done(), "the attempt did not end: {:?}", a.state());
        prop_assert_eq!(finishes.len(), 1, "one finish");
        prop_assert!(after_finish.is_empty(), "effects after finish: {:?}", after_finish);
        prop_assert!(handoffs <= 1, "published {} times", handoffs);
        prop_assert_eq!(finishes[0], handoffs == 1);
        if lost_before_evaluate {
            prop_assert!(!evaluating, "a lost lease before evaluate never evaluates");
        }
    }
}
