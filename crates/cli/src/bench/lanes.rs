//! The simulated lanes: real `LaneService.Session` streams, with no driver behind them. A
//! session stands for one worker and carries up to `lanes_per_session` lanes, as a real
//! worker's does. Each lane loops: a work request (one credit), the assignment, a heartbeat
//! renewing its lease (with the lease secret), then a passing outcome per trial, until the
//! campaign has no more work or the bench stops it. With `--agent-s`, a lane holds each
//! assignment that long instead, and the session renews all its lanes' leases in one
//! heartbeat every second, as a worker's supervisor does.
//!
//! A session's answers are routed back to its lanes: assignments and "no work" name their
//! lane (the coordinator answers claims concurrently), while heartbeats and outcomes are
//! answered one at a time in the order they were sent, so a FIFO of waiters matches them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::metadata::MetadataValue;

use lanes_common::proto as pb;
use lanes_common::proto::coordinator_message::Msg as Out;
use lanes_common::proto::lane_service_client::LaneServiceClient;
use lanes_common::proto::worker_message::Msg as In;

use super::stats::Latencies;

/// How long a lane waits for any one answer before it gives up.
const ANSWER: Duration = Duration::from_secs(30);
/// Lanes holding their work start spread over the agent time, but over no more than this, so
/// a long `--agent-s` measures a fleet that holds its leases and only heartbeats.
const MAX_RAMP: Duration = Duration::from_secs(10);
/// How often a lane holding a lease renews it, as a worker's heartbeat does.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// The longest a lane honours a "no work, retry after" hint: the tail of a campaign must not
/// sit idle while the last attempts finish.
const MAX_RETRY_AFTER: Duration = Duration::from_millis(250);

/// What the lanes measured, shared by all of them (so a lane stopped mid-attempt loses
/// nothing it had recorded).
#[derive(Debug, Default)]
pub(crate) struct LaneStats {
    /// Work request sent → assignment received.
    pub(crate) claims: Latencies,
    /// Heartbeat sent → its ack received.
    pub(crate) renews: Latencies,
    /// Outcome sent → its ack received.
    pub(crate) acks: Latencies,
    /// Outcomes acknowledged.
    pub(crate) attempts: u64,
    /// Of those, the ones that counted.
    pub(crate) counted: u64,
    /// "No work" answers (the campaign's tail, or the end).
    pub(crate) no_work: u64,
    /// Renewals answered lost or cancelled.
    pub(crate) renew_lost: u64,
    /// Outcomes the coordinator did not take.
    pub(crate) outcome_errors: u64,
    /// Why lanes ended early, one line per distinct reason.
    pub(crate) errors: Vec<String>,
}

impl LaneStats {
    fn error(&mut self, e: String) {
        if !self.errors.contains(&e) {
            self.errors.push(e);
        }
    }
}

/// Where the lanes connect and what they run.
#[derive(Debug, Clone)]
pub(crate) struct LanePlan {
    pub(crate) url: String,
    pub(crate) lane_token: String,
    pub(crate) campaign: String,
    pub(crate) lanes: u32,
    pub(crate) lanes_per_session: u32,
    /// How long each lane holds an assignment before its outcome, renewing its lease every
    /// second meanwhile (an agent at work). Zero: one renewal, then the outcome at once.
    pub(crate) agent: Duration,
}

impl LanePlan {
    pub(crate) fn sessions(&self) -> u32 {
        self.lanes.div_ceil(self.lanes_per_session)
    }
}

/// Who is waiting for the next answer of a kind.
#[derive(Default)]
struct Pending {
    /// Claims in flight, by lane.
    work: HashMap<String, oneshot::Sender<Out>>,
    /// Heartbeats and outcomes, answered in the order sent.
    in_order: VecDeque<oneshot::Sender<Out>>,
    /// Set when the session ended: nobody waits any more.
    closed: Option<String>,
}

/// Which answer a request waits for.
enum Answer {
    Work(String),
    InOrder,
}

/// One worker's session.
struct Session {
    tx: mpsc::UnboundedSender<pb::WorkerMessage>,
    pending: Mutex<Pending>,
    /// With `--agent-s`: the tokens each lane holds now, which the session's heartbeat renews.
    held: Mutex<HashMap<String, Vec<pb::Token>>>,
}

impl Session {
    /// Opens and registers a session for `lanes` lanes.
    async fn open(plan: &LanePlan, worker: &str, lanes: u32) -> anyhow::Result<Arc<Self>> {
        let channel = tonic::transport::Channel::from_shared(plan.url.clone())?
            .connect()
            .await?;
        let bearer: MetadataValue<_> = format!("Bearer {}", plan.lane_token).parse()?;
        let mut client =
            LaneServiceClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
                req.metadata_mut().insert("authorization", bearer.clone());
                Ok(req)
            });
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(pb::WorkerMessage {
            msg: Some(In::Register(pb::Register {
                worker_id: worker.to_owned(),
                host: "bench".into(),
                lanes,
                version: env!("CARGO_PKG_VERSION").into(),
                protocol: lanes_common::protocol::LANE_PROTOCOL,
                ..Default::default()
            })),
        })?;
        let mut inbound = client
            .session(UnboundedReceiverStream::new(rx))
            .await?
            .into_inner();
        match tokio::time::timeout(ANSWER, inbound.next()).await {
            Ok(Some(Ok(pb::CoordinatorMessage {
                msg: Some(Out::Registered(_)),
            }))) => {}
            Ok(Some(Err(s))) => anyhow::bail!("session refused: {}", s.message()),
            Ok(other) => anyhow::bail!("expected Registered, got {other:?}"),
            Err(_) => anyhow::bail!("no answer to Register within {ANSWER:?}"),
        }
        let session = Arc::new(Self {
            tx,
            pending: Mutex::default(),
            held: Mutex::default(),
        });
        tokio::spawn(session.clone().route(inbound));
        Ok(session)
    }

    /// Hands each answer to the lane waiting for it, until the session ends.
    async fn route(self: Arc<Self>, mut inbound: tonic::Streaming<pb::CoordinatorMessage>) {
        let why = loop {
            let m = match inbound.next().await {
                None => break "the coordinator ended the session".to_owned(),
                Some(Err(s)) => break format!("session ended: {}", s.message()),
                Some(Ok(pb::CoordinatorMessage { msg: None })) => {
                    break "an empty message".to_owned();
                }
                Some(Ok(pb::CoordinatorMessage { msg: Some(m) })) => m,
            };
            let mut p = self.pending.lock().expect("pending");
            let waiter = match &m {
                Out::Assignment(a) => p.work.remove(&a.lane),
                Out::NoWork(n) => p.work.remove(&n.lane),
                Out::HeartbeatAck(_) | Out::OutcomeAck(_) | Out::OutcomeError(_) => {
                    p.in_order.pop_front()
                }
                // A cancel precedes the heartbeat ack that reports it.
                Out::Cancel(_) => continue,
                Out::GoAway(g) => break format!("the coordinator said GoAway: {}", g.reason),
                Out::Registered(_) | Out::ReconnectAck(_) | Out::ForfeitAck(_) => {
                    break format!("an answer to nothing the bench sent: {m:?}");
                }
            };
            match waiter {
                Some(w) => {
                    let _ = w.send(m);
                }
                None => break format!("an answer nobody waits for: {m:?}"),
            }
        };
        let mut p = self.pending.lock().expect("pending");
        p.closed = Some(why);
        p.work.clear();
        p.in_order.clear();
    }

    /// Sends `m` and waits for its answer.
    async fn ask(&self, answer: Answer, m: In) -> Result<Out, String> {
        let (tx, rx) = oneshot::channel();
        {
            // Queued and sent under one lock, so the FIFO order is the wire order.
            let mut p = self.pending.lock().expect("pending");
            if let Some(why) = &p.closed {
                return Err(why.clone());
            }
            match answer {
                Answer::Work(lane) => {
                    p.work.insert(lane, tx);
                }
                Answer::InOrder => p.in_order.push_back(tx),
            }
            self.tx
                .send(pb::WorkerMessage { msg: Some(m) })
                .map_err(|_| "the session is closed".to_owned())?;
        }
        match tokio::time::timeout(ANSWER, rx).await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(_)) => Err(self
                .pending
                .lock()
                .expect("pending")
                .closed
                .clone()
                .unwrap_or_else(|| "the session ended".into())),
            Err(_) => Err(format!("no answer within {ANSWER:?}")),
        }
    }
}

/// Opens the sessions and starts every lane; each runs until the campaign has no more work
/// or `stop` turns true.
pub(crate) async fn start(
    plan: &LanePlan,
    stats: Arc<Mutex<LaneStats>>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<JoinSet<()>> {
    let mut lanes = JoinSet::new();
    let mut next_lane = 0;
    for s in 0..plan.sessions() {
        let n = plan.lanes_per_session.min(plan.lanes - next_lane);
        let session = Session::open(plan, &format!("bench-{s}"), n).await?;
        if !plan.agent.is_zero() {
            // Workers start at different times, so their heartbeats are spread over the
            // second rather than all sent in the same instant.
            let phase = HEARTBEAT_EVERY.mul_f64(f64::from(s) / f64::from(plan.sessions()));
            tokio::spawn(heartbeat(
                session.clone(),
                phase,
                plan.campaign.clone(),
                stats.clone(),
                stop.clone(),
            ));
        }
        for _ in 0..n {
            // Lanes that hold their work for a while start spread over that while, as a
            // fleet in its steady state is, rather than all claiming in the same instant.
            let delay = plan
                .agent
                .min(MAX_RAMP)
                .mul_f64(f64::from(next_lane) / f64::from(plan.lanes));
            let lane = format!("lane-{next_lane}");
            next_lane += 1;
            lanes.spawn(run_lane(
                session.clone(),
                lane,
                plan.campaign.clone(),
                (delay, plan.agent),
                stats.clone(),
                stop.clone(),
            ));
        }
    }
    Ok(lanes)
}

async fn run_lane(
    session: Arc<Session>,
    lane: String,
    campaign: String,
    (delay, agent): (Duration, Duration),
    stats: Arc<Mutex<LaneStats>>,
    mut stop: watch::Receiver<bool>,
) {
    tokio::select! {
        _ = tokio::time::sleep(delay) => {}
        _ = stop.changed() => return,
    }
    if let Err(e) = lane_loop(&session, &lane, &campaign, agent, &stats, &mut stop).await {
        stats.lock().expect("stats").error(e);
    }
}

async fn lane_loop(
    session: &Session,
    lane: &str,
    campaign: &str,
    agent: Duration,
    stats: &Mutex<LaneStats>,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), String> {
    while !*stop.borrow() {
        let t0 = Instant::now();
        let answer = session
            .ask(
                Answer::Work(lane.to_owned()),
                In::WorkRequest(pb::WorkRequest {
                    lane: lane.to_owned(),
                    exclude_campaigns: Vec::new(),
                }),
            )
            .await?;
        let a = match answer {
            Out::Assignment(a) => {
                stats.lock().expect("stats").claims.record(t0.elapsed());
                a
            }
            Out::NoWork(n) => {
                stats.lock().expect("stats").no_work += 1;
                match pb::NoWorkReason::try_from(n.reason) {
                    Ok(pb::NoWorkReason::Done | pb::NoWorkReason::Stopped) => return Ok(()),
                    _ => {
                        let wait = Duration::from_millis(n.retry_after_ms).min(MAX_RETRY_AFTER);
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            _ = stop.changed() => {}
                        }
                        continue;
                    }
                }
            }
            other => return Err(format!("expected an assignment, got {other:?}")),
        };
        attempt(session, lane, campaign, &a, agent, stats, stop).await?;
    }
    Ok(())
}

/// A session's heartbeat (with `--agent-s`): every second, one message renewing every lease
/// its lanes hold, as a worker's does, until the bench stops.
async fn heartbeat(
    session: Arc<Session>,
    phase: Duration,
    campaign: String,
    stats: Arc<Mutex<LaneStats>>,
    mut stop: watch::Receiver<bool>,
) {
    tokio::select! {
        _ = tokio::time::sleep(phase) => {}
        _ = stop.changed() => return,
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(HEARTBEAT_EVERY) => {}
            _ = stop.changed() => return,
        }
        let tokens: Vec<pb::Token> = session
            .held
            .lock()
            .expect("held")
            .values()
            .flatten()
            .cloned()
            .collect();
        if tokens.is_empty() {
            continue;
        }
        if let Err(e) = renew(&session, &campaign, &tokens, &stats).await {
            stats.lock().expect("stats").error(e);
            return;
        }
    }
}

/// One heartbeat renewing `tokens`.
async fn renew(
    session: &Session,
    campaign: &str,
    tokens: &[pb::Token],
    stats: &Mutex<LaneStats>,
) -> Result<(), String> {
    let t1 = Instant::now();
    let heartbeat = pb::Heartbeat {
        tokens: tokens
            .iter()
            .map(|t| pb::TokenPhase {
                token: Some(t.clone()),
                phase: pb::Phase::Agent as i32,
                campaign: campaign.to_owned(),
                traceparent: String::new(),
            })
            .collect(),
    };
    match session
        .ask(Answer::InOrder, In::Heartbeat(heartbeat))
        .await?
    {
        Out::HeartbeatAck(ack) => {
            let mut s = stats.lock().expect("stats");
            s.renews.record(t1.elapsed());
            s.renew_lost += ack
                .tokens
                .iter()
                .filter(|r| r.state != pb::RenewState::Renewed as i32)
                .count() as u64;
        }
        other => return Err(format!("expected a heartbeat ack, got {other:?}")),
    }
    Ok(())
}

/// One assignment: with no agent time, one renewal of its leases; otherwise `agent` of work
/// (or until the bench stops) while the session's heartbeat renews them. Then a passing
/// outcome for each trial.
async fn attempt(
    session: &Session,
    lane: &str,
    campaign: &str,
    a: &pb::Assignment,
    agent: Duration,
    stats: &Mutex<LaneStats>,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), String> {
    let tokens: Vec<pb::Token> = a.trials.iter().filter_map(|t| t.token.clone()).collect();
    if agent.is_zero() {
        renew(session, campaign, &tokens, stats).await?;
    } else {
        // At work: the session's heartbeat renews these meanwhile.
        session
            .held
            .lock()
            .expect("held")
            .insert(lane.to_owned(), tokens.clone());
        tokio::select! {
            _ = tokio::time::sleep(agent) => {}
            _ = stop.changed() => {}
        }
        session.held.lock().expect("held").remove(lane);
    }
    for token in tokens {
        let outcome = pb::Outcome {
            token: Some(token),
            lane: lane.to_owned(),
            host: "bench".into(),
            status: pb::Status::Completed as i32,
            score: Some(1.0),
            passed: Some(true),
            campaign: campaign.to_owned(),
            ..Default::default()
        };
        let t2 = Instant::now();
        match session.ask(Answer::InOrder, In::Outcome(outcome)).await? {
            Out::OutcomeAck(ack) => {
                let mut s = stats.lock().expect("stats");
                s.acks.record(t2.elapsed());
                s.attempts += 1;
                s.counted += u64::from(ack.counted);
            }
            Out::OutcomeError(e) => {
                let mut s = stats.lock().expect("stats");
                s.outcome_errors += 1;
                s.error(format!("outcome refused: {}", e.reason));
            }
            other => return Err(format!("expected an outcome ack, got {other:?}")),
        }
    }
    Ok(())
}
