//! The random phase's operations: what a lane can do, their strategies, the proptest
//! configuration, and each operation applied to the store and checked against the model.

use super::*;

/// What a lane reports.
#[derive(Debug, Clone, Copy)]
pub(super) enum Res {
    /// A scored status, with score `q / 2`.
    Scored(Status, u8),
    Infra(FailureKind),
}

/// One step of the random phase. A lane is named by `k`: the `k`-th lane (mod their number)
/// of those the op applies to, so (almost) every op does something and a shrunk sequence stays
/// meaningful.
#[derive(Debug, Clone)]
pub(super) enum Op {
    /// An idle lane claims one unit.
    Claim(usize),
    /// A busy lane renews every token it holds, reporting this phase.
    Renew(usize, Phase),
    /// A busy lane completes its first held token.
    Complete(usize, Res),
    /// A busy lane gives its first held token back: cancelled, or blocked by preflight.
    Release(usize, bool),
    /// A token some lane was told it lost (reaped) is completed anyway, late.
    Late(usize, Res),
    /// An acknowledged completion or release is sent again, identically.
    Replay(usize),
    /// A busy lane forgets its tokens; it never renews or completes them again.
    Crash(usize),
    Reap {
        concurrent: bool,
    },
    Advance(u32),
}

fn res() -> impl Strategy<Value = Res> {
    prop_oneof![
        1 => (
            prop::sample::select(vec![
                Status::Completed,
                Status::Timeout,
                Status::MaxTurns,
                Status::AgentError,
                Status::Violation,
            ]),
            0u8..=2,
        )
            .prop_map(|(s, q)| Res::Scored(s, q)),
        1 => prop::sample::select(vec![
            FailureKind::BootFailed,
            FailureKind::DriverCrash,
            FailureKind::Overloaded,
            FailureKind::GuestLost,
            FailureKind::EvaluatorError,
        ])
        .prop_map(Res::Infra),
    ]
}

fn phase() -> impl Strategy<Value = Phase> {
    prop::sample::select(vec![
        Phase::Admit,
        Phase::Boot,
        Phase::Reset,
        Phase::Agent,
        Phase::Evaluate,
        Phase::Publish,
    ])
}

fn op() -> impl Strategy<Value = Op> {
    let lane = 0..LANES;
    prop_oneof![
        // Mostly small steps, so leases often survive a step; sometimes past every deadline.
        2 => (0u32..=8).prop_map(Op::Advance),
        1 => (0u32..=40).prop_map(Op::Advance),
        3 => lane.clone().prop_map(Op::Claim),
        4 => (lane.clone(), phase()).prop_map(|(l, p)| Op::Renew(l, p)),
        3 => (lane.clone(), res()).prop_map(|(l, r)| Op::Complete(l, r)),
        2 => any::<bool>().prop_map(|concurrent| Op::Reap { concurrent }),
        1 => (lane.clone(), any::<bool>()).prop_map(|(l, b)| Op::Release(l, b)),
        2 => (0usize..16, res()).prop_map(|(k, r)| Op::Late(k, r)),
        1 => (0usize..16).prop_map(Op::Replay),
        1 => lane.prop_map(Op::Crash),
    ]
}

pub(super) fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..MAX_OPS)
}

pub(super) fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES);
    ProptestConfig {
        cases,
        // Failures are reported with their minimal op sequence; nothing is written to disk.
        failure_persistence: None,
        max_shrink_iters: 2048,
        ..ProptestConfig::default()
    }
}

/// A runtime per case: proptest is synchronous, the store is not.
pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

async fn resend(h: &Harness, c: &CampaignId, sent: &Sent) -> Result<CompleteAck, StoreError> {
    match sent {
        Sent::Complete(o) => h.store.complete(c, (**o).clone(), h.now()).await,
        Sent::Release(r) => h.store.release(c, r.clone(), h.now()).await,
    }
}

pub(super) async fn apply(
    h: &Harness,
    c: &CampaignId,
    m: &mut Model,
    op: &Op,
) -> Result<(), TestCaseError> {
    match *op {
        Op::Advance(s) => h.advance_s(i64::from(s)),
        Op::Claim(k) => {
            let Some(i) = m.lane(k, false) else {
                return Ok(());
            };
            let got = h
                .store
                .claim(c, request(&lane_name(i), &host_name(i), 1), h.now())
                .await
                .map_err(store_err("claim"))?;
            if let ClaimOutcome::Assigned(units) = got {
                prop_assert_eq!(units.len(), 1, "asked for one unit");
                prop_assert!(!units[0].trials.is_empty(), "an empty unit: {:?}", units[0]);
                for t in &units[0].trials {
                    m.issue(t, h.now())?;
                    m.held[i].push(t.token.clone());
                }
            }
        }
        Op::Renew(k, phase) => {
            let Some(i) = m.lane(k, true) else {
                return Ok(());
            };
            let mut keep = Vec::new();
            for (token, state) in renew(h, c, m, m.held[i].clone(), phase).await? {
                match state {
                    RenewState::Renewed => keep.push(token),
                    _ => m.lost.push((token, i)),
                }
            }
            m.held[i] = keep;
        }
        Op::Complete(k, r) => {
            let Some(i) = m.lane(k, true) else {
                return Ok(());
            };
            let token = m.held[i].remove(0);
            let o = outcome(&token, &lane_name(i), &host_name(i), r);
            complete(h, c, m, &token, o).await?;
        }
        Op::Release(k, blocked) => {
            let Some(i) = m.lane(k, true) else {
                return Ok(());
            };
            let token = m.held[i].remove(0);
            let rel = Release {
                token: token.clone(),
                reason: if blocked {
                    ReleaseReason::Blocked(FailureKind::Preflight)
                } else {
                    ReleaseReason::Cancelled
                },
                lane: lanes_common::ids::LaneName::new(lane_name(i)).unwrap(),
                host: host_name(i).parse().unwrap(),
                detail: None,
            };
            match h.store.release(c, rel.clone(), h.now()).await {
                Ok(ack) => m.acked(Sent::Release(rel), &token, ack)?,
                // The lease was reaped: the lane learns it lost the token.
                Err(StoreError::StaleToken(t)) if t == token => m.lost.push((token, i)),
                Err(e) => return Err(fail(format!("release {token}: store error {e}"))),
            }
        }
        Op::Late(k, r) => {
            if m.lost.is_empty() {
                return Ok(());
            }
            let (token, i) = m.lost.remove(k % m.lost.len());
            let o = outcome(&token, &lane_name(i), &host_name(i), r);
            complete(h, c, m, &token, o).await?;
        }
        Op::Replay(k) => {
            if m.acked.is_empty() {
                return Ok(());
            }
            let token = m.acked[k % m.acked.len()].clone();
            let (sent, first) = m.acks[&token].clone();
            let before = h
                .store
                .status(c, h.now())
                .await
                .map_err(store_err("status"))?;
            let again = resend(h, c, &sent).await.map_err(store_err("replay"))?;
            let after = h
                .store
                .status(c, h.now())
                .await
                .map_err(store_err("status"))?;
            prop_assert_eq!(
                &again,
                &first,
                "a replay of {} must get the first answer",
                token
            );
            prop_assert_eq!(
                after.rows_total,
                before.rows_total,
                "a replay of {} wrote rows",
                token
            );
        }
        Op::Crash(k) => {
            if let Some(i) = m.lane(k, true) {
                m.held[i].clear();
            }
        }
        Op::Reap { concurrent } => {
            let now = h.now();
            if concurrent {
                let (a, b) = tokio::join!(h.store.reap(c, now), h.store.reap(c, now));
                a.map_err(store_err("reap"))?;
                b.map_err(store_err("concurrent reap"))?;
            } else {
                h.store.reap(c, now).await.map_err(store_err("reap"))?;
            }
        }
    }
    Ok(())
}
