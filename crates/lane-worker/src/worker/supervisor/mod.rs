//! The WorkerSupervisor actor: owns the coordinator session, the outbox and the lanes.
//!
//! - Each idle lane is one work credit; the coordinator answers each with one assignment or
//!   "no work, retry after".
//! - The lanes first ask for work together, once every spare driver is up ([`warmup`]).
//! - Heartbeats carry only the tokens of lanes that answered a liveness ping, so a wedged lane
//!   loses its leases instead of holding them forever.
//! - Every outcome goes to the outbox (fsynced) before it is sent, and leaves it only on
//!   OutcomeAck. The outbox is replayed on every (re)connect.
//! - Held leases are journaled beside the outbox. A restarted worker replays the outbox and
//!   forfeits the journaled leases it cannot publish, so they are retried at once.
//! - The worker tells the coordinator when its outbox breaks and mends (a `WorkerStatus`).
//! - A lane that crashes is restarted; its in-flight tokens are left to expire, and the store
//!   retries them.

mod health;
mod inbound;
mod outbox_io;
mod uploads;
mod warmup;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::mpsc;

use lanes_common::convert::{lease_of, token_with_lease};
use lanes_common::ids::{AttemptTag, CampaignId, LaneName, Token};
use lanes_common::lease::LeaseSecret;
use lanes_common::proto as pb;
use lanes_common::proto::worker_message::Msg as In;
use lanes_common::row::Phase;

use super::WorkerConfig;
use super::lane::{LaneActor, LaneMsg};
use crate::ack_log::AckLog;
use crate::lease_journal::LeaseJournal;
use crate::outbox::{Entry, Outbox};

/// How often in-flight tokens are renewed (the lease TTL is at least 3 s).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// How long a lane has to answer a liveness ping.
const PING_TIMEOUT: Duration = Duration::from_millis(500);

pub(crate) enum SupMsg {
    /// A session is up: where to send, and how to end it.
    Connected(mpsc::Sender<pb::WorkerMessage>, mpsc::Sender<String>),
    Disconnected,
    Inbound(pb::CoordinatorMessage),
    WantWork(String),
    Phase {
        tag: AttemptTag,
        phase: Phase,
        traceparent: String,
        span: tracing::Span,
    },
    /// Write to the outbox, then send; the reply comes after the fsync.
    Publish(Box<Entry>, RpcReplyPort<()>),
    /// The outbox write of an entry finished (it runs off the actor): send it now.
    Persisted {
        entry: Box<Entry>,
        written: Result<(), String>,
        reply: Option<RpcReplyPort<()>>,
    },
    /// Writing the outcomes held in memory again finished: these are on disk now, and the
    /// error says why the outbox is still not writable.
    Repersisted {
        written: Vec<AttemptTag>,
        error: Option<String>,
    },
    /// An attempt folder's upload to the artifact store ended.
    Uploaded {
        tag: AttemptTag,
        result: Result<lanes_artifacts::Uploaded, lanes_artifacts::StoreError>,
    },
    /// Free disk space under the artifacts directory, measured off the actor.
    Disk(Option<f64>),
    /// Trials a lane will not run: released as cancelled through the outbox.
    GiveBack(pb::Assignment),
    Finished {
        tag: AttemptTag,
        published: bool,
    },
    /// A retry timer for a lane's work request (only asks if the lane is still idle).
    Retry(String),
    /// This lane must not take this campaign's work again (identity mismatch).
    Exclude {
        lane: String,
        campaign: CampaignId,
    },
    Tick,
    /// Stop asking for work (shutdown).
    Drain,
    /// How many attempts are in flight and outcomes unacknowledged.
    Pending(RpcReplyPort<(usize, usize)>),
    CancelAll,
}

pub(crate) struct Supervisor {
    pub(crate) config: Arc<WorkerConfig>,
    /// Shared by the lanes, for task APIs and guest health URLs.
    pub(crate) http: crate::http::HttpClient,
    /// The lease secrets held, which the lanes mask in what their drivers say.
    pub(crate) leases: crate::secrets::HeldLeases,
    /// Where the lanes find task folders.
    pub(crate) folders: Arc<crate::task_folders::TaskFolders>,
}

struct InFlight {
    /// The lease secret issued with the attempt, sent back with every message about it.
    lease: LeaseSecret,
    lane: String,
    phase: Phase,
    /// The lease's TTL: heartbeat acknowledgements must come well within it.
    ttl: Duration,
    /// The attempt's traceparent, sent back with its heartbeats and outcome.
    traceparent: String,
    /// The lane's `attempt` span, held open until the coordinator acknowledges the outcome,
    /// so the span records whether it counted.
    span: Option<tracing::Span>,
}

/// Bounds of how long a heartbeat may go unacknowledged before the session is given up.
const ACK_DEADLINE_MIN: Duration = Duration::from_secs(1);
const ACK_DEADLINE_MAX: Duration = Duration::from_secs(10);

pub(crate) struct SupState {
    tx: Option<mpsc::Sender<pb::WorkerMessage>>,
    /// Lanes with a work request the coordinator has not answered yet (one credit each).
    outstanding: BTreeSet<String>,
    /// The session is registered and the outbox replayed: only then is work asked for, so a
    /// replayed outcome always lands before its trial could be handed out again.
    registered: bool,
    /// When to send the outbox again after the coordinator could not commit an entry.
    replay_at: Option<tokio::time::Instant>,
    /// Campaigns each lane may not take (its driver failed their identity pins).
    excluded: BTreeMap<String, BTreeSet<String>>,
    outbox: Outbox,
    lanes: BTreeMap<String, ActorRef<LaneMsg>>,
    /// Lanes waiting for a work answer or ready to ask.
    idle: BTreeSet<String>,
    /// Until every lane's spare driver is up, no lane asks for work (the first wave).
    warmup: Option<warmup::Warmup>,
    /// Keyed by campaign and token: campaigns over one dataset share trial ids.
    in_flight: BTreeMap<AttemptTag, InFlight>,
    draining: bool,
    /// Outcomes the outbox could not take (a full or broken disk): kept here, sent and
    /// replayed from memory, and written again every tick. While any is here the worker takes
    /// no new work.
    unpersisted: BTreeMap<AttemptTag, Entry>,
    /// The last outbox write failed and none has succeeded since.
    outbox_broken: bool,
    /// Per lane, when the coordinator's last NoWork said to ask again (its retry-after hint).
    ask_after: BTreeMap<String, tokio::time::Instant>,
    /// What the outbox holds on disk and the coordinator has not acknowledged: a mirror in
    /// memory, so replays and the shutdown count never scan the directory.
    pending: BTreeMap<AttemptTag, Entry>,
    /// A rewrite of `unpersisted` is running.
    repersisting: bool,
    /// Outcomes durable in the outbox whose attempt folder is not in the artifact store yet:
    /// sent once it is.
    uploads: uploads::Uploads,
    /// Free space is below the disk floor (measured every tick, off the actor).
    disk_low: bool,
    /// The leases this worker holds, on disk for the next process.
    journal: LeaseJournal,
    /// Their secrets, shared with the lanes (which mask them in driver output).
    held: crate::secrets::HeldLeases,
    /// Leases a previous process held whose outcome is not in the outbox: forfeited on
    /// register until the coordinator acknowledges them.
    orphans: BTreeMap<AttemptTag, LeaseSecret>,
    /// The health last told to the coordinator: (outbox broken, outcomes held in memory).
    told: Option<(bool, usize)>,
    /// The optional audit trail of acknowledged outcomes.
    acks: AckLog,
    /// Ends the current session (the session task reconnects, to the next replica).
    end_session: Option<mpsc::Sender<String>>,
    /// When the oldest unacknowledged heartbeat (or reconnect) of this session was sent.
    unacked_since: Option<tokio::time::Instant>,
}

impl Supervisor {
    async fn send(state: &mut SupState, m: In) -> bool {
        match &state.tx {
            Some(tx) => tx.send(pb::WorkerMessage { msg: Some(m) }).await.is_ok(),
            None => false,
        }
    }

    /// Starts tracking a held lease (renewed by heartbeats, journaled for a restart).
    fn track(state: &mut SupState, tag: AttemptTag, f: InFlight) {
        if let Err(e) = state.journal.add(&tag, &f.lease) {
            tracing::warn!(error = %e, attempt = %tag, "cannot journal a held lease");
        }
        state.held.hold(f.lease.expose());
        if let Some(old) = state.in_flight.insert(tag, f) {
            state.held.release(old.lease.expose());
        }
    }

    /// Stops tracking a lease that left this worker.
    fn untrack(state: &mut SupState, tag: &AttemptTag) {
        if let Some(f) = state.in_flight.remove(tag) {
            state.held.release(f.lease.expose());
            if let Err(e) = state.journal.remove(tag) {
                tracing::warn!(error = %e, attempt = %tag, "cannot remove a lease journal entry");
            }
        }
    }

    /// Starts lane `name`, linked to the supervisor so that its crash reaches
    /// `handle_supervisor_evt`; `registered` is its name in ractor's registry.
    async fn spawn_lane(
        &self,
        myself: &ActorRef<SupMsg>,
        name: &LaneName,
        registered: Option<String>,
    ) -> Result<ActorRef<LaneMsg>, ractor::SpawnErr> {
        let lane = LaneActor {
            name: name.clone(),
            config: self.config.clone(),
            http: self.http.clone(),
            leases: self.leases.clone(),
            folders: self.folders.clone(),
            supervisor: myself.clone(),
        };
        let (lane, _) = Actor::spawn_linked(registered, lane, (), myself.get_cell()).await?;
        Ok(lane)
    }

    async fn ask_work(&self, state: &mut SupState, lane: String) {
        if !state.registered || state.warmup.is_some() {
            return;
        }
        if state.draining
            || state.tx.is_none()
            || state.outstanding.contains(&lane)
            || !state.idle.contains(&lane)
            || state.outbox_broken
            || state
                .ask_after
                .get(&lane)
                .is_some_and(|t| *t > tokio::time::Instant::now())
        {
            return;
        }
        if state.disk_low || state.uploads.full(self.config.lanes) {
            return;
        }
        state.outstanding.insert(lane.clone());
        let exclude_campaigns = state
            .excluded
            .get(&lane)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        Self::send(
            state,
            In::WorkRequest(pb::WorkRequest {
                lane,
                exclude_campaigns,
            }),
        )
        .await;
    }

    /// Releases trials this worker will not run, as `cancelled` outcomes through the outbox.
    fn give_back(&self, myself: &ActorRef<SupMsg>, state: &mut SupState, a: pb::Assignment) {
        let Ok(campaign) = CampaignId::new(&a.campaign) else {
            return;
        };
        // Set by one of this worker's lanes, or by the coordinator from one.
        let Ok(lane) = LaneName::new(&a.lane) else {
            tracing::error!(lane = %a.lane, "an assignment given back names no lane: its leases expire");
            return;
        };
        for t in a.trials {
            let lease = lease_of(t.token.as_ref());
            let traceparent = t.traceparent;
            let Some(token) = t.token.and_then(|t| Token::try_from(t).ok()) else {
                continue;
            };
            let tag = AttemptTag::new(campaign.clone(), token.clone());
            let o = lanes_common::row::Outcome::new(
                token,
                lane.clone(),
                self.config.host.clone(),
                lanes_common::row::Status::Cancelled,
            );
            // Renewed, in phase publish, until the coordinator acknowledges the release.
            if !state.in_flight.contains_key(&tag) {
                Self::track(
                    state,
                    tag,
                    InFlight {
                        lease: lease.clone(),
                        lane: a.lane.clone(),
                        phase: Phase::Publish,
                        ttl: Duration::from_millis(a.lease_ttl_ms),
                        // Never started: the coordinator's claim is the attempt's span.
                        traceparent,
                        span: None,
                    },
                );
            }
            let entry = Box::new(Entry {
                campaign: campaign.clone(),
                outcome: o,
                record: None,
                lease,
                upload: None,
            });
            self.publish(myself, state, entry, None);
        }
    }

    async fn heartbeat(&self, state: &mut SupState) {
        if state.in_flight.is_empty() {
            return;
        }
        // Ping every lane at once, so one slow lane costs one timeout, not one each.
        let mut pings = tokio::task::JoinSet::new();
        for (name, lane) in &state.lanes {
            let (name, lane) = (name.clone(), lane.clone());
            pings.spawn(async move {
                let ok =
                    ractor::call_t!(lane, LaneMsg::Ping, PING_TIMEOUT.as_millis() as u64).is_ok();
                (name, ok)
            });
        }
        let mut alive = BTreeSet::new();
        while let Some(Ok((name, ok))) = pings.join_next().await {
            if ok {
                alive.insert(name);
            }
        }
        let tokens: Vec<pb::TokenPhase> = state
            .in_flight
            .iter()
            .filter(|(_, f)| alive.contains(&f.lane))
            .map(|(t, f)| pb::TokenPhase {
                token: Some(token_with_lease(&t.token, &f.lease)),
                phase: pb::Phase::from(f.phase) as i32,
                campaign: t.campaign.to_string(),
                traceparent: f.traceparent.clone(),
            })
            .collect();
        if !tokens.is_empty() && Self::send(state, In::Heartbeat(pb::Heartbeat { tokens })).await {
            state
                .unacked_since
                .get_or_insert_with(tokio::time::Instant::now);
        }
    }
}

impl Actor for Supervisor {
    type Msg = SupMsg;
    type State = SupState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<SupMsg>,
        _args: (),
    ) -> Result<SupState, ActorProcessingErr> {
        let outbox = Outbox::open(&self.config.outbox)?;
        let journal = LeaseJournal::open(&self.config.outbox)?;
        // What a previous process of this worker held: the leases whose outcome the outbox
        // has are replayed; the others can never be published.
        let pending = outbox.pending()?;
        // A crash between an outbox write and its record's rename: finish the rename.
        for e in &pending {
            e.seal_record_at_start();
        }
        // Entries whose folder is not in the artifact store yet are uploaded before they are
        // sent (a worker started without a store sends them with their local paths).
        let (to_upload, pending): (Vec<Entry>, Vec<Entry>) = pending
            .into_iter()
            .partition(|e| e.upload.is_some() && self.config.artifact_store.is_some());
        let pending: BTreeMap<AttemptTag, Entry> =
            pending.into_iter().map(|e| (e.tag(), e)).collect();
        let uploads = uploads::Uploads::resumed(to_upload);
        let orphans: BTreeMap<AttemptTag, LeaseSecret> = journal
            .held()?
            .into_iter()
            .map(|h| (h.tag(), h.lease))
            .filter(|(tag, _)| !pending.contains_key(tag) && !uploads.contains(tag))
            .collect();
        // Each lane says it is idle (WantWork) once its spare driver is up.
        let mut lanes = BTreeMap::new();
        for i in 0..self.config.lanes {
            let name = LaneName::new(format!("{}-{i}", self.config.worker_id))?;
            let lane = self
                .spawn_lane(&myself, &name, Some(format!("lane:{name}")))
                .await?;
            lanes.insert(name.to_string(), lane);
        }
        let warmup = warmup::Warmup::new(lanes.keys().cloned(), tokio::time::Instant::now());
        self.measure_disk(&myself);
        let me = myself.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(HEARTBEAT_EVERY).await;
                if me.cast(SupMsg::Tick).is_err() {
                    return;
                }
            }
        });
        let mut state = SupState {
            tx: None,
            outstanding: BTreeSet::new(),
            registered: false,
            replay_at: None,
            excluded: BTreeMap::new(),
            outbox,
            lanes,
            idle: BTreeSet::new(),
            warmup: Some(warmup),
            in_flight: BTreeMap::new(),
            draining: false,
            unpersisted: BTreeMap::new(),
            outbox_broken: false,
            ask_after: BTreeMap::new(),
            journal,
            held: self.leases.clone(),
            pending,
            repersisting: false,
            uploads,
            // Unknown until the first measurement: no credit is sent before it.
            disk_low: self.config.disk_floor_gb.is_some(),
            orphans,
            told: None,
            end_session: None,
            unacked_since: None,
            acks: AckLog::from_env(),
        };
        uploads::track_resumed(&mut state);
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<SupMsg>,
        msg: SupMsg,
        state: &mut SupState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupMsg::Connected(tx, end) => {
                state.tx = Some(tx);
                state.end_session = Some(end);
                state.outstanding.clear();
                state.registered = false;
                state.unacked_since = None;
            }
            SupMsg::Disconnected => {
                state.tx = None;
                state.end_session = None;
                state.outstanding.clear();
                state.registered = false;
                state.unacked_since = None;
            }
            SupMsg::Inbound(m) => {
                if let Some(m) = m.msg {
                    self.inbound(&myself, state, m).await;
                }
            }
            SupMsg::WantWork(lane) => {
                state.idle.insert(lane.clone());
                let now = tokio::time::Instant::now();
                match state.warmup.as_mut().map(|w| w.warmed(&lane, now)) {
                    Some(false) => {}
                    Some(true) => {
                        state.warmup = None;
                        for lane in state.idle.clone() {
                            self.ask_work(state, lane).await;
                        }
                    }
                    None => self.ask_work(state, lane).await,
                }
            }
            SupMsg::Retry(lane) => self.ask_work(state, lane).await,
            SupMsg::Exclude { lane, campaign } => {
                state
                    .excluded
                    .entry(lane)
                    .or_default()
                    .insert(campaign.to_string());
            }
            SupMsg::Phase {
                tag,
                phase,
                traceparent,
                span,
            } => {
                if let Some(f) = state.in_flight.get_mut(&tag) {
                    f.phase = phase;
                    f.traceparent = traceparent;
                    f.span = Some(span);
                }
            }
            SupMsg::Publish(entry, reply) => self.publish(&myself, state, entry, Some(reply)),
            SupMsg::Persisted {
                entry,
                written,
                reply,
            } => self.persisted(&myself, state, entry, written, reply).await,
            SupMsg::Uploaded { tag, result } => {
                self.uploaded(state, tag, result).await;
                // A slot for new work may have opened.
                for lane in state.idle.clone() {
                    self.ask_work(state, lane).await;
                }
            }
            SupMsg::Repersisted { written, error } => {
                Self::repersisted(state, written, error);
                Self::tell_status(state, false).await;
            }
            SupMsg::Disk(free) => {
                self.note_disk(state, free);
                for lane in state.idle.clone() {
                    self.ask_work(state, lane).await;
                }
            }
            SupMsg::GiveBack(a) => self.give_back(&myself, state, a),
            SupMsg::Finished { tag, published } => {
                if !published {
                    Self::untrack(state, &tag);
                }
            }
            SupMsg::Tick => {
                Self::check_acks(state);
                Self::persist_again(&myself, state);
                self.start_uploads(&myself, state);
                self.measure_disk(&myself);
                Self::tell_status(state, false).await;
                self.heartbeat(state).await;
                if state
                    .replay_at
                    .is_some_and(|t| t <= tokio::time::Instant::now())
                {
                    state.replay_at = None;
                    self.replay(state).await;
                }
                if state
                    .warmup
                    .as_ref()
                    .is_some_and(|w| w.over(tokio::time::Instant::now()))
                {
                    state.warmup = None;
                }
                // Credits lost to a disk floor or a dropped session are asked for again.
                for lane in state.idle.clone() {
                    self.ask_work(state, lane).await;
                }
            }
            SupMsg::Drain => state.draining = true,
            SupMsg::Pending(reply) => {
                let unacked = state.pending.len() + state.unpersisted.len() + state.uploads.len();
                let _ = reply.send((state.in_flight.len(), unacked));
            }
            SupMsg::CancelAll => {
                for lane in state.lanes.values() {
                    let _ = lane.cast(LaneMsg::CancelAll);
                }
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<SupMsg>,
        _state: &mut SupState,
    ) -> Result<(), ActorProcessingErr> {
        // Lanes kill their drivers when they stop.
        myself.stop_children(None);
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupMsg>,
        evt: SupervisionEvent,
        state: &mut SupState,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, err) = &evt {
            let Some(name) = state
                .lanes
                .iter()
                .find(|(_, l)| l.get_id() == cell.get_id())
                .map(|(n, _)| n.clone())
            else {
                return Ok(());
            };
            tracing::error!(lane = %name, error = %err, "lane crashed; restarting it");
            // Its attempts are abandoned: their leases expire and the store retries them. Not
            // those whose outcome is durable (in the outbox, or waiting for its upload): those
            // stay renewed until acknowledged.
            let abandoned: Vec<AttemptTag> = state
                .in_flight
                .iter()
                .filter(|(t, f)| {
                    f.lane == name && !state.pending.contains_key(t) && !state.uploads.contains(t)
                })
                .map(|(t, _)| t.clone())
                .collect();
            for t in abandoned {
                Self::untrack(state, &t);
            }
            // Unnamed: the crashed actor's registry name may not be released yet.
            // It asks for work itself once its spare driver is up.
            // The name was a lane name when the lane was first spawned.
            let lane = self
                .spawn_lane(&myself, &LaneName::new(&name)?, None)
                .await?;
            state.idle.remove(&name);
            state.lanes.insert(name, lane);
        }
        Ok(())
    }
}
