//! A model-based property test of the store.
//!
//! Eight simulated lanes on three hosts interleave claims, renewals (in any phase, `publish`
//! included), completions with random outcomes, releases, late completions of tokens that were
//! reaped, replays of acknowledged completions, crashes (a crashed lane forgets its tokens),
//! reaps (sometimes two at once) and clock jumps. The test keeps a small reference model: every
//! token the store issued, what each lease's deadline should be from the lanes' answers, and
//! every acknowledged completion. Then lanes stop crashing: a deterministic drain completes
//! every trial with a score until the campaign is done and nothing is in flight, and the ledger
//! is checked against the model and the retry policy: first scored attempt wins, no
//! acknowledged outcome is lost, every trial ends final, attempts have no gaps, budgets match
//! the policy, seq is contiguous, and the reaper never takes a lease that still holds.
//!
//! The case is generic over the backend: `model_backend!(name => make_harness)` instantiates
//! it in a module named after the backend, so every test name contains the backend's name.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use lanes_common::ids::{CampaignId, Token};
use lanes_common::policy::TrialHistory;
use lanes_common::policy::retry::uses_infra_budget;
use lanes_common::row::{ExcludedReason, FailureKind, Outcome, Phase, Row, Status};
use lanes_common::state::CampaignState;
use lanes_common::utc::parse_rfc3339;
use lanes_coordinator::store::{
    AssignedTrial, ClaimOutcome, CompleteAck, REAP_GRACE_MS, Release, ReleaseReason, RenewState,
    StoreError,
};

use support::{Harness, campaign, cid, infra, request, scored};

/// Simulated lanes of the random phase, `lane-0..7`, on `host-0..2`.
const LANES: usize = 8;
const HOSTS: usize = 3;
const LEASE_TTL_S: i64 = 10;
const PUBLISH_GRACE_S: i64 = 20;
const INFRA_RETRIES: u32 = 1;
const OVERLOADED_RETRIES: u32 = 2;
/// Drain iterations before the test gives up on the campaign ever being done.
const DRAIN_LIMIT: usize = 100;
/// Cases per test, unless `PROPTEST_CASES` says otherwise.
const DEFAULT_CASES: u32 = 24;
const MAX_OPS: usize = 120;

// ---------------------------------------------------------------------------------------------
// operations

/// What a lane reports.
#[derive(Debug, Clone, Copy)]
enum Res {
    /// A scored status, with score `q / 2`.
    Scored(Status, u8),
    Infra(FailureKind),
}

/// One step of the random phase. A lane is named by `k`: the `k`-th lane (mod their number)
/// of those the op applies to, so (almost) every op does something and a shrunk sequence stays
/// meaningful.
#[derive(Debug, Clone)]
enum Op {
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

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..MAX_OPS)
}

fn config() -> ProptestConfig {
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
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

// ---------------------------------------------------------------------------------------------
// the reference model

/// What was sent for an acknowledged token, to replay it identically.
#[derive(Debug, Clone)]
enum Sent {
    Complete(Box<Outcome>),
    Release(Release),
}

#[derive(Default)]
struct Model {
    /// Tokens each lane holds, in slot order.
    held: Vec<Vec<Token>>,
    /// Tokens a lane was told it lost, with that lane: candidates for late completions.
    lost: Vec<(Token, usize)>,
    /// Every token the store issued.
    issued: BTreeSet<Token>,
    /// Every acknowledged completion or release.
    acks: BTreeMap<Token, (Sent, CompleteAck)>,
    /// Acknowledged tokens in order, for replays.
    acked: Vec<Token>,
    /// What each token's lease should be, from its claim and its successful renewals.
    leases: BTreeMap<Token, LeaseView>,
}

/// A lease as the lanes' answers describe it.
#[derive(Debug, Clone, Copy)]
struct LeaseView {
    deadline_ms: i64,
    hard_deadline_ms: i64,
    /// The last phase renewed; `Assigned` if never renewed.
    phase: Phase,
}

fn lane_name(i: usize) -> String {
    format!("lane-{i}")
}

fn host_name(i: usize) -> String {
    format!("host-{}", i % HOSTS)
}

fn outcome(token: &Token, lane: &str, host: &str, r: Res) -> Outcome {
    match r {
        Res::Scored(status, q) => scored(token, lane, host, status, f64::from(q) / 2.0),
        Res::Infra(kind) => infra(token, lane, host, kind),
    }
}

fn fail(what: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(what.to_string())
}

fn store_err(what: &str) -> impl FnOnce(StoreError) -> TestCaseError + '_ {
    move |e| fail(format!("{what}: store error {e}"))
}

impl Model {
    fn new() -> Self {
        Self {
            held: vec![Vec::new(); LANES],
            ..Self::default()
        }
    }

    /// The `k`-th (mod their number) lane that holds tokens (`busy`) or holds none.
    fn lane(&self, k: usize, busy: bool) -> Option<usize> {
        let lanes: Vec<usize> = (0..LANES)
            .filter(|&i| self.held[i].is_empty() != busy)
            .collect();
        (!lanes.is_empty()).then(|| lanes[k % lanes.len()])
    }

    /// A trial some acknowledged completion counted for.
    fn has_winner(&self, token: &Token) -> bool {
        self.acks
            .values()
            .any(|(_, a)| a.counted && a.token.trial_id == token.trial_id)
    }

    fn issue(&mut self, t: &AssignedTrial, now: i64) -> Result<(), TestCaseError> {
        let token = &t.token;
        self.leases.insert(
            token.clone(),
            LeaseView {
                deadline_ms: now + LEASE_TTL_S * 1000,
                hard_deadline_ms: now + t.hard_deadline_in_ms as i64,
                phase: Phase::Assigned,
            },
        );
        let prior = self
            .issued
            .iter()
            .filter(|t| t.trial_id == token.trial_id)
            .map(|t| t.attempt)
            .max()
            .unwrap_or(0);
        prop_assert_eq!(
            token.attempt,
            prior + 1,
            "token {} issued after attempt {}: attempts must be issued in order",
            token,
            prior
        );
        prop_assert!(
            self.issued.insert(token.clone()),
            "token {} issued twice",
            token
        );
        Ok(())
    }

    fn acked(&mut self, sent: Sent, token: &Token, ack: CompleteAck) -> Result<(), TestCaseError> {
        prop_assert_eq!(&ack.token, token, "ack for another token");
        if ack.counted {
            prop_assert_eq!(
                ack.winner_attempt,
                Some(token.attempt),
                "counted ack {:?}",
                ack
            );
            prop_assert!(!ack.duplicate, "counted and duplicate: {:?}", ack);
        }
        prop_assert!(
            !self.acks.contains_key(token),
            "token {} completed twice by the model",
            token
        );
        self.acks.insert(token.clone(), (sent, ack));
        self.acked.push(token.clone());
        Ok(())
    }
}

async fn complete(
    h: &Harness,
    c: &CampaignId,
    m: &mut Model,
    token: &Token,
    o: Outcome,
) -> Result<(), TestCaseError> {
    let ack = h
        .store
        .complete(c, o.clone(), h.now())
        .await
        .map_err(store_err("complete"))?;
    m.acked(Sent::Complete(Box::new(o)), token, ack)
}

/// Renews `tokens` and checks each answer against the model: renewed while the lease holds
/// (even past its deadline) unless the trial already counted; lost only once reaped,
/// superseded, revoked or past the hard deadline.
async fn renew(
    h: &Harness,
    c: &CampaignId,
    m: &mut Model,
    tokens: Vec<Token>,
    phase: Phase,
) -> Result<Vec<(Token, RenewState)>, TestCaseError> {
    let now = h.now();
    let ask: Vec<(Token, Phase)> = tokens.into_iter().map(|t| (t, phase)).collect();
    let answers = h
        .store
        .renew(c, ask.clone(), now)
        .await
        .map_err(store_err("renew"))?;
    prop_assert_eq!(answers.len(), ask.len(), "one answer per token");
    for ((asked, _), (token, state)) in ask.iter().zip(&answers) {
        prop_assert_eq!(asked, token, "answers in request order");
        let won = m.has_winner(token);
        let view = m.leases.get_mut(token).expect("renewed tokens were issued");
        match state {
            RenewState::Renewed => {
                prop_assert!(!won, "{} renewed after its trial counted", token);
                prop_assert!(
                    now <= view.hard_deadline_ms,
                    "{} renewed past its hard deadline",
                    token
                );
                view.deadline_ms = (now + LEASE_TTL_S * 1000).min(view.hard_deadline_ms);
                view.phase = phase;
            }
            RenewState::Lost => {
                let past_hard = now > view.hard_deadline_ms;
                let rows = h.rows(c).await;
                let has_row = rows
                    .iter()
                    .any(|r| r.trial_id == token.trial_id && r.attempt == token.attempt);
                let counted = rows
                    .iter()
                    .any(|r| r.trial_id == token.trial_id && r.counted);
                prop_assert!(
                    has_row || counted || past_hard,
                    "{} answered lost while its lease holds ({:?}, now {})",
                    token,
                    view,
                    now
                );
            }
            RenewState::Cancel => return Err(fail(format!("{token}: cancel without a stop"))),
        }
    }
    Ok(answers)
}

async fn resend(h: &Harness, c: &CampaignId, sent: &Sent) -> Result<CompleteAck, StoreError> {
    match sent {
        Sent::Complete(o) => h.store.complete(c, (**o).clone(), h.now()).await,
        Sent::Release(r) => h.store.release(c, r.clone(), h.now()).await,
    }
}

async fn apply(h: &Harness, c: &CampaignId, m: &mut Model, op: &Op) -> Result<(), TestCaseError> {
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
                host: host_name(i),
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

// ---------------------------------------------------------------------------------------------
// the case

/// Runs `ops` on a fresh campaign, drains it, and checks the ledger.
async fn model_case(h: &mut Harness, pairing: &str, ops: &[Op]) -> Result<(), TestCaseError> {
    let c = cid("model");
    let head = format!(
        "phase1_runs = 2\npairing = \"{pairing}\"\nlease_ttl_s = {LEASE_TTL_S}\n\
         publish_grace_s = {PUBLISH_GRACE_S}\n"
    );
    let retry = format!(
        "[retry]\ninfra_retries = {INFRA_RETRIES}\ninfra_backoff_s = 0\n\
         overloaded_retries = {OVERLOADED_RETRIES}\noverloaded_backoff_s = 5\n"
    );
    h.submit(campaign(
        "model",
        &[("A", "prov-a"), ("B", "prov-b")],
        3,
        &head,
        &retry,
    ))
    .await;

    let mut m = Model::new();
    for (n, op) in ops.iter().enumerate() {
        apply(h, &c, &mut m, op)
            .await
            .map_err(|e| fail(format!("op #{n} {op:?}: {e}")))?;
    }
    check_in_flight(h, &c, &m).await?;
    drain(h, &c, &mut m).await?;
    check_ledger(h, &c, &m, pairing == "group").await
}

/// Every lease the store holds belongs to the newest token issued for its trial.
async fn check_in_flight(h: &Harness, c: &CampaignId, m: &Model) -> Result<(), TestCaseError> {
    let st = h
        .store
        .status(c, h.now())
        .await
        .map_err(store_err("status"))?;
    for f in &st.in_flight {
        let newest = m
            .issued
            .iter()
            .filter(|t| t.trial_id == f.token.trial_id)
            .map(|t| t.attempt)
            .max();
        prop_assert_eq!(
            newest,
            Some(f.token.attempt),
            "in-flight {} is not the newest token of its trial",
            f.token
        );
    }
    Ok(())
}

/// Lanes stop crashing: the live lanes publish what they hold, then fresh lanes claim, renew
/// and score everything until the campaign is done and nothing is in flight.
async fn drain(h: &Harness, c: &CampaignId, m: &mut Model) -> Result<(), TestCaseError> {
    for i in 0..LANES {
        for token in std::mem::take(&mut m.held[i]) {
            let o = scored(&token, &lane_name(i), &host_name(i), Status::Completed, 1.0);
            complete(h, c, m, &token, o).await?;
        }
    }
    for iter in 0..DRAIN_LIMIT {
        let st = h
            .store
            .status(c, h.now())
            .await
            .map_err(store_err("status"))?;
        if st.state == CampaignState::Done && st.in_flight.is_empty() {
            return Ok(());
        }
        prop_assert!(
            matches!(st.state, CampaignState::Running | CampaignState::Done),
            "drain {}: campaign {:?} ({:?})",
            iter,
            st.state,
            st.stop_reason
        );
        // Claim from every host until a whole round of hosts gets no work.
        let (mut idle, mut k) = (0, 0);
        while idle < HOSTS && k < 1000 {
            let (lane, host) = (format!("drain-{iter}-{k}"), host_name(k));
            k += 1;
            let got = h
                .store
                .claim(c, request(&lane, &host, 1), h.now())
                .await
                .map_err(store_err("drain claim"))?;
            let ClaimOutcome::Assigned(units) = got else {
                idle += 1;
                continue;
            };
            idle = 0;
            for unit in units {
                for t in unit.trials {
                    m.issue(&t, h.now())?;
                    let renewed = renew(h, c, m, vec![t.token.clone()], Phase::Agent).await?;
                    prop_assert_eq!(
                        renewed[0].1,
                        RenewState::Renewed,
                        "drain renew of {}",
                        t.token
                    );
                    let o = scored(&t.token, &lane, &host, Status::Completed, 1.0);
                    complete(h, c, m, &t.token, o).await?;
                }
            }
        }
        // Past every lease deadline, the publish grace and any retry backoff.
        h.advance_s(25);
        h.store
            .reap(c, h.now())
            .await
            .map_err(store_err("drain reap"))?;
    }
    let st = h
        .store
        .status(c, h.now())
        .await
        .map_err(store_err("status"))?;
    Err(fail(format!(
        "the campaign is not done after {DRAIN_LIMIT} drain rounds: state {:?}, {} of {} trials \
         final, in flight {:?}, gates {:?}",
        st.state, st.trials_final, st.trials_total, st.in_flight, st.gates
    )))
}

async fn check_ledger(
    h: &Harness,
    c: &CampaignId,
    m: &Model,
    group: bool,
) -> Result<(), TestCaseError> {
    let rows: Vec<Row> = h
        .store
        .rows(c, 0, usize::MAX)
        .await
        .map_err(store_err("rows"))?;
    let st = h
        .store
        .status(c, h.now())
        .await
        .map_err(store_err("status"))?;

    // seq values are 0..n, contiguous.
    for (i, row) in rows.iter().enumerate() {
        prop_assert_eq!(row.seq, i as u64, "row {} has seq {}", i, row.seq);
    }
    prop_assert_eq!(st.rows_total, rows.len() as u64, "status rows_total");

    // Every acknowledged completion is in the ledger, as acknowledged.
    for (token, (_, ack)) in &m.acks {
        let row = rows.get(ack.seq as usize);
        prop_assert!(row.is_some(), "ack {:?}: no row with seq {}", ack, ack.seq);
        let row = row.unwrap();
        prop_assert!(
            row.trial_id == token.trial_id && row.attempt == token.attempt,
            "ack {:?}: row {} is {}#a{}",
            ack,
            ack.seq,
            row.trial_id,
            row.attempt
        );
        prop_assert!(
            (row.counted, row.duplicate, row.late) == (ack.counted, ack.duplicate, ack.late),
            "ack {:?} but row {} says counted {} duplicate {} late {}",
            ack,
            row.seq,
            row.counted,
            row.duplicate,
            row.late
        );
        // The winner named is the trial's counted attempt, if it had counted by then.
        let winner = rows
            .iter()
            .find(|r| r.trial_id == token.trial_id && r.counted && r.seq <= ack.seq)
            .map(|r| r.attempt);
        prop_assert_eq!(ack.winner_attempt, winner, "winner in ack {:?}", ack);
    }
    // The reaper takes only leases past their deadline by more than the grace, waits
    // `publish_grace_s` for one past evaluate, and never expires an undelivered assignment.
    for row in rows.iter().filter(|r| r.lease_lost) {
        let token = row.token();
        let view = m.leases.get(&token);
        prop_assert!(
            view.is_some(),
            "reaper row {} for a token never issued",
            row.seq
        );
        let view = view.unwrap();
        let at = parse_rfc3339(&row.written_utc).map_err(fail)?;
        prop_assert!(
            at > view.deadline_ms + REAP_GRACE_MS,
            "reaper row {} for {} at {} but the lease ran until {}",
            row.seq,
            token,
            at,
            view.deadline_ms
        );
        if view.phase == Phase::Assigned {
            prop_assert_eq!(
                row.status,
                Status::Cancelled,
                "undelivered {} reaped",
                token
            );
        }
        if view.phase == Phase::Publish && row.failure_kind == Some(FailureKind::LeaseExpired) {
            prop_assert!(
                at >= view.deadline_ms + PUBLISH_GRACE_S * 1000,
                "{} expired at {} inside the publish grace (deadline {})",
                token,
                at,
                view.deadline_ms
            );
        }
    }
    let by_status: u64 = st.rows_by_status.values().sum();
    prop_assert_eq!(by_status, rows.len() as u64, "status rows_by_status");

    // The campaign is done: every trial is final.
    prop_assert_eq!(st.state, CampaignState::Done, "campaign state");
    prop_assert_eq!(st.trials_final, st.trials_total, "trials final");
    prop_assert!(
        st.in_flight.is_empty(),
        "in flight after done: {:?}",
        st.in_flight
    );

    let mut by_trial: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for row in &rows {
        by_trial.entry(row.trial_id.as_str()).or_default().push(row);
    }
    prop_assert_eq!(by_trial.len() as u64, st.trials_total, "trials with rows");

    let (mut counted_trials, mut excluded_trials) = (0u64, 0u64);
    for (tid, trows) in &by_trial {
        let counted: Vec<&&Row> = trows.iter().filter(|r| r.counted).collect();
        let excluded: Vec<&&Row> = trows.iter().filter(|r| r.excluded).collect();
        prop_assert!(
            counted.len() <= 1,
            "{}: {} counted rows",
            tid,
            counted.len()
        );
        prop_assert!(
            excluded.len() <= 1,
            "{}: {} excluded rows",
            tid,
            excluded.len()
        );
        let is_counted = counted.len() == 1;
        let is_excluded = !is_counted && excluded.len() == 1;
        prop_assert!(
            is_counted || is_excluded,
            "{}: neither counted nor excluded",
            tid
        );
        counted_trials += u64::from(is_counted);
        excluded_trials += u64::from(is_excluded);

        // First scored attempt wins: the first scored row counts, later ones are duplicates.
        let mut scored_rows = trows.iter().filter(|r| r.status.is_scored());
        if let Some(first) = scored_rows.next() {
            prop_assert!(
                first.counted,
                "{}: first scored row {} not counted",
                tid,
                first.seq
            );
            prop_assert!(
                first.is_final,
                "{}: counted row {} not final",
                tid,
                first.seq
            );
            for later in scored_rows {
                prop_assert!(
                    later.duplicate && !later.counted,
                    "{}: later scored row {} not a duplicate",
                    tid,
                    later.seq
                );
            }
        } else {
            prop_assert!(!is_counted, "{}: counted without a score", tid);
        }

        // A token's first row is never late; a late row follows one of its token.
        let mut seen = BTreeSet::new();
        for r in trows {
            let first = seen.insert(r.attempt);
            prop_assert!(
                first != r.late || r.attempt == 0,
                "{}: row {} of attempt {} has late = {}, first row of its token = {}",
                tid,
                r.seq,
                r.attempt,
                r.late,
                first
            );
        }

        // Only a run group's first lease is paired: its token's first row says so, and
        // nothing else does (retries are single trials, late rows are not paired).
        let mut seen = BTreeSet::new();
        for r in trows {
            let first = seen.insert(r.attempt);
            let want = group && r.attempt == 1 && first;
            prop_assert_eq!(r.paired, want, "{}: row {} paired", tid, r.seq);
        }

        // Attempts without gaps, and exactly the issued ones.
        let attempts: BTreeSet<u32> = trows.iter().map(|r| r.attempt).filter(|&a| a > 0).collect();
        let max = attempts.iter().max().copied().unwrap_or(0);
        prop_assert_eq!(
            attempts.clone(),
            (1..=max).collect::<BTreeSet<u32>>(),
            "{}: attempt numbers with gaps",
            tid
        );
        let issued: BTreeSet<u32> = m
            .issued
            .iter()
            .filter(|t| t.trial_id.as_str() == *tid)
            .map(|t| t.attempt)
            .collect();
        prop_assert_eq!(
            attempts,
            issued,
            "{}: attempts in rows vs tokens issued",
            tid
        );

        // Budgets match the policy.
        let hist = TrialHistory::from_rows(trows.iter().copied());
        prop_assert!(
            hist.infra_used <= INFRA_RETRIES + 1,
            "{}: infra budget {} used",
            tid,
            hist.infra_used
        );
        prop_assert!(
            hist.overloaded_used <= OVERLOADED_RETRIES + 1,
            "{}: {} overloaded first rows",
            tid,
            hist.overloaded_used
        );
        prop_assert!(hist.is_final, "{}: history not final", tid);
        prop_assert_eq!(
            hist.winner,
            counted.first().map(|r| r.attempt),
            "{}: winner",
            tid
        );
        if is_excluded {
            match &excluded[0].excluded_reason {
                Some(ExcludedReason::InfraFailure(FailureKind::Overloaded)) => prop_assert_eq!(
                    hist.overloaded_used,
                    OVERLOADED_RETRIES + 1,
                    "{}: excluded for overload",
                    tid
                ),
                Some(ExcludedReason::InfraFailure(k)) => {
                    prop_assert!(uses_infra_budget(*k), "{}: excluded for {}", tid, k);
                    prop_assert_eq!(
                        hist.infra_used,
                        INFRA_RETRIES + 1,
                        "{}: excluded for infra_failure:{}",
                        tid,
                        k
                    );
                }
                Some(ExcludedReason::PreflightLimit) => {}
                other => return Err(fail(format!("{tid}: excluded for {other:?}"))),
            }
        }
    }
    if std::env::var_os("LANES_MODEL_STATS").is_some() {
        let count = |f: &dyn Fn(&Row) -> bool| rows.iter().filter(|r| f(r)).count();
        eprintln!(
            "model stats: rows {} acks {} counted {} excluded {} late {} late-counted {} \
             duplicate {} lease_expired {} cancelled {} blocked {} overloaded {}",
            rows.len(),
            m.acks.len(),
            counted_trials,
            excluded_trials,
            count(&|r| r.late),
            count(&|r| r.late && r.counted),
            count(&|r| r.duplicate),
            count(&|r| r.failure_kind == Some(FailureKind::LeaseExpired)),
            count(&|r| r.status == Status::Cancelled),
            count(&|r| r.status == Status::Blocked),
            count(&|r| r.failure_kind == Some(FailureKind::Overloaded)),
        );
    }
    prop_assert_eq!(st.trials_counted, counted_trials, "status trials_counted");
    prop_assert_eq!(
        st.trials_excluded,
        excluded_trials,
        "status trials_excluded"
    );
    Ok(())
}

/// Instantiates the model test for one backend, in a module named after it. `$make` builds a
/// fresh harness (it may `.await`); each proptest case gets its own.
macro_rules! model_backend {
    ($backend:ident => $make:expr) => {
        mod $backend {
            #[allow(unused_imports)]
            use super::support::*;
            use proptest::prelude::*;

            proptest! {
                #![proptest_config(super::config())]

                #[test]
                fn model_pairing_none(ops in super::ops()) {
                    super::runtime().block_on(async {
                        #[allow(unused_mut)]
                        let mut h = $make;
                        super::model_case(&mut h, "none", &ops).await
                    })?;
                }

                #[test]
                fn model_pairing_group(ops in super::ops()) {
                    super::runtime().block_on(async {
                        #[allow(unused_mut)]
                        let mut h = $make;
                        super::model_case(&mut h, "group", &ops).await
                    })?;
                }
            }
        }
    };
}

model_backend!(embedded => Harness::embedded());
model_backend!(redis => Harness::redis().await);
model_backend!(redis_replicas => Harness::redis_replicas().await);
