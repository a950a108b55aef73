//! LaneService: one bidirectional session per worker process. Each credit (work request) gets
//! exactly one answer, an assignment or "no work, retry after", so the coordinator never pushes
//! more assignments than credits. Outcomes are acknowledged only after the store committed them.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use lanes_common::convert::{lease_of, no_work, token, wire_enum};
use lanes_common::ids::{ArmId, CampaignId, HostName, LaneName, Token};
use lanes_common::limits::{check_outcome, check_release};
use lanes_common::log_safe::LogSafe;
use lanes_common::policy::WorkerOffer;
use lanes_common::proto as pb;
use lanes_common::proto::coordinator_message::Msg as Out;
use lanes_common::proto::lane_service_server::LaneService;
use lanes_common::proto::worker_message::Msg as In;
use lanes_common::row::{FailureKind, Outcome};

use tracing::Instrument;

use lanes_telemetry as otel;

use super::Shared;
use super::leases::LeaseRefused;
use super::trace;
use super::workers::Member;
use crate::grpc_status::{bad_field, from_convert};
use crate::scheduler::{self, Scheduled, WorkRequest};
use crate::store::{CompleteAck, Release, ReleaseReason, StoreError};
use crate::wire;

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Retry-after hint for an outcome the store could not take.
const OUTCOME_RETRY_MS: u64 = 1_000;

#[derive(Clone)]
pub(crate) struct LaneSvc {
    pub(crate) shared: Shared,
    /// The worker id this session's client certificate names, under mutual TLS.
    pub(crate) identity: Option<String>,
}

/// What a worker said about itself.
#[derive(Debug, Clone)]
pub(super) struct Worker {
    pub(super) id: String,
    pub(super) host: HostName,
    pub(super) arms: Option<Vec<ArmId>>,
    /// What it runs: the claim path serves it only campaigns whose driver this covers.
    pub(super) offer: Arc<WorkerOffer>,
    /// Its listing in this replica's registry, for as long as the session lasts.
    pub(super) member: Arc<Member>,
}

fn msg(m: Out) -> Result<pb::CoordinatorMessage, Status> {
    Ok(pb::CoordinatorMessage { msg: Some(m) })
}

fn campaign_of(field: &str, id: &str) -> Result<CampaignId, Status> {
    CampaignId::new(id).map_err(|e| bad_field(field, e))
}

fn ack(campaign: &CampaignId, a: CompleteAck) -> pb::OutcomeAck {
    pb::OutcomeAck {
        token: Some(pb::Token::from(&a.token)),
        counted: a.counted,
        duplicate: a.duplicate,
        late: a.late,
        winner_attempt: a.winner_attempt.unwrap_or(0),
        seq: a.seq,
        campaign: campaign.to_string(),
    }
}

/// An outcome or release refused for good (malformed, or over a size limit): the lane must not
/// replay it, and the session goes on.
fn refused(campaign: &CampaignId, token: Option<pb::Token>, reason: String) -> pb::OutcomeError {
    pb::OutcomeError {
        token,
        retryable: false,
        reason,
        retry_after_ms: 0,
        campaign: campaign.to_string(),
    }
}

/// The store refused or could not take an outcome. Unless the request itself is bad, the
/// lane keeps it and sends it again: the store's health never refuses an outcome for good.
fn outcome_error(campaign: &str, t: &Token, e: &StoreError) -> pb::OutcomeError {
    pb::OutcomeError {
        token: Some(pb::Token::from(t)),
        retryable: !e.rejects_request(),
        reason: e.to_string(),
        retry_after_ms: OUTCOME_RETRY_MS,
        campaign: campaign.to_owned(),
    }
}

/// An outcome or release refused on the lease: for good when the secret is wrong, retryable
/// when the key could not be read.
fn lease_refused(campaign: &str, t: &Token, e: &LeaseRefused) -> pb::OutcomeError {
    match e {
        LeaseRefused::Denied { .. } => pb::OutcomeError {
            token: Some(pb::Token::from(t)),
            retryable: false,
            reason: e.to_string(),
            retry_after_ms: 0,
            campaign: campaign.to_owned(),
        },
        LeaseRefused::Store(e) => outcome_error(campaign, t, e),
    }
}

impl LaneSvc {
    /// A work request: converted, scheduled, answered.
    #[tracing::instrument(skip_all, fields(worker = %LogSafe(&w.id), lane = %lane))]
    async fn work(
        &self,
        w: &Worker,
        lane: LaneName,
        exclude: BTreeSet<String>,
    ) -> Result<pb::CoordinatorMessage, Status> {
        let req = WorkRequest {
            lane,
            host: w.host.clone(),
            worker: w.id.clone(),
            arms: w.arms.clone(),
            exclude,
            offer: w.offer.clone(),
        };
        let s = &self.shared;
        let started = std::time::Instant::now();
        let started_at = std::time::SystemTime::now();
        let scheduled =
            scheduler::schedule(s.store.as_ref(), s.clock.as_ref(), &s.campaigns, &req).await;
        s.claimed(started);
        match scheduled {
            Scheduled::Assigned(a) => {
                let mut a = wire::assignment(*a, req.lane.as_str());
                trace::claims(&mut a, req.lane.as_str(), w.host.as_str(), started_at);
                if let Err(e) = s.leases.issue(s.store.as_ref(), &w.id, &mut a).await {
                    // The lease is held but cannot be handed out: it is reaped at its
                    // deadline, like an assignment lost on the way.
                    tracing::warn!(error = %e, "cannot issue lease secrets");
                    return msg(Out::NoWork(no_work(
                        req.lane.into(),
                        &lanes_common::policy::NoWorkReason::StoreUnavailable {
                            error: e.to_string(),
                        },
                        OUTCOME_RETRY_MS,
                    )));
                }
                msg(Out::Assignment(a))
            }
            Scheduled::NoWork {
                reason,
                retry_after_ms,
            } => msg(Out::NoWork(no_work(
                req.lane.into(),
                &reason,
                retry_after_ms,
            ))),
        }
    }

    /// Checks that `w` holds the lease of `t`: a refusal is logged with who asked.
    pub(super) async fn holds(
        &self,
        w: &Worker,
        campaign: &CampaignId,
        t: &Token,
        lease: &lanes_common::lease::LeaseSecret,
    ) -> Result<(), LeaseRefused> {
        let s = &self.shared;
        let r = s
            .leases
            .check(s.store.as_ref(), campaign, t, &w.id, lease)
            .await;
        if let Err(LeaseRefused::Denied { .. }) = &r {
            tracing::warn!(worker = %w.id, host = %w.host, campaign = %campaign, token = %t, "refused: the lease secret does not match the one issued to this worker");
        }
        r
    }

    /// An outcome, committed under a `complete` span in the attempt's trace.
    async fn outcome(&self, w: &Worker, o: pb::Outcome) -> Result<pb::CoordinatorMessage, Status> {
        let span = trace::commit_span(
            trace::Commit::Complete,
            &LogSafe(&o.campaign).to_string(),
            o.token.as_ref(),
            &o.traceparent,
        );
        self.commit_outcome(w, o, &span)
            .instrument(span.clone())
            .await
    }

    async fn commit_outcome(
        &self,
        w: &Worker,
        o: pb::Outcome,
        span: &tracing::Span,
    ) -> Result<pb::CoordinatorMessage, Status> {
        let campaign = campaign_of("outcome.campaign", &o.campaign)?;
        let lease = lease_of(o.token.as_ref());
        // Echoed in errors without the secret.
        let raw_token = o.token.clone().map(|t| pb::Token {
            lease: String::new(),
            ..t
        });
        let checked = check_outcome(&o).map_err(|e| e.to_string());
        let outcome = match checked.and_then(|()| Outcome::try_from(o).map_err(|e| e.to_string())) {
            Ok(o) => o,
            // The lane must not replay this forever: refuse it for good, naming the field.
            Err(reason) => return msg(Out::OutcomeError(refused(&campaign, raw_token, reason))),
        };
        trace::record_token(span, &outcome.token);
        let t = outcome.token.clone();
        if let Err(e) = self.holds(w, &campaign, &t, &lease).await {
            otel::record_error(span, "lease_refused", &e.to_string());
            return msg(Out::OutcomeError(lease_refused(campaign.as_str(), &t, &e)));
        }
        let s = &self.shared;
        match s.store.complete(&campaign, outcome, s.now()).await {
            Ok(a) => {
                trace::record_ack(span, &a);
                msg(Out::OutcomeAck(ack(&campaign, a)))
            }
            Err(e) => {
                tracing::warn!(error = %e, "outcome not committed");
                otel::record_error(span, "store", &e.to_string());
                msg(Out::OutcomeError(outcome_error(campaign.as_str(), &t, &e)))
            }
        }
    }

    /// Takes back a restarted worker's leases that it can never publish, grouped by campaign.
    /// Tokens of a campaign the store could not reach are not acknowledged: the worker sends
    /// them again on its next session.
    async fn forfeit(&self, w: &Worker, f: pb::Forfeit) -> Result<pb::ForfeitAck, Status> {
        let mut by_campaign: BTreeMap<String, Vec<(Token, pb::CampaignToken)>> = BTreeMap::new();
        for (i, mut ct) in f.tokens.into_iter().enumerate() {
            let lease = lease_of(ct.token.as_ref());
            let t = token(&format!("forfeit.tokens[{i}].token"), ct.token.clone())
                .map_err(from_convert)?;
            let c = campaign_of(&format!("forfeit.tokens[{i}].campaign"), &ct.campaign)?;
            match self.holds(w, &c, &t, &lease).await {
                Ok(()) => {}
                Err(e @ LeaseRefused::Denied { .. }) => {
                    return Err(Status::permission_denied(e.to_string()));
                }
                // Not acknowledged: the worker forfeits again on its next session.
                Err(LeaseRefused::Store(e)) => {
                    tracing::warn!(error = %e, "forfeit failed");
                    return Ok(pb::ForfeitAck::default());
                }
            }
            // The acknowledgement echoes the token without its secret.
            ct.token = Some(pb::Token::from(&t));
            by_campaign
                .entry(ct.campaign.clone())
                .or_default()
                .push((t, ct));
        }
        let s = &self.shared;
        let mut done = Vec::new();
        for (c, items) in by_campaign {
            let c = CampaignId::new(c).expect("validated above");
            let tokens = items.iter().map(|(t, _)| t.clone()).collect();
            match s.store.forfeit(&c, &w.id, tokens, s.now()).await {
                Ok(taken) => {
                    if !taken.is_empty() {
                        tracing::info!(campaign = %c, worker = %LogSafe(&w.id), taken = taken.len(), "leases forfeited by a restarted worker taken back");
                    }
                    done.extend(items.into_iter().map(|(_, ct)| ct));
                }
                Err(StoreError::UnknownCampaign(_)) => {
                    done.extend(items.into_iter().map(|(_, ct)| ct));
                }
                Err(e) => tracing::warn!(campaign = %c, error = %e, "forfeit failed"),
            }
        }
        Ok(pb::ForfeitAck { tokens: done })
    }

    /// A release, committed under a `release` span in the attempt's trace.
    async fn release(&self, w: &Worker, r: pb::Release) -> Result<pb::CoordinatorMessage, Status> {
        let span = trace::commit_span(
            trace::Commit::Release,
            &LogSafe(&r.campaign).to_string(),
            r.token.as_ref(),
            &r.traceparent,
        );
        self.commit_release(w, r, &span)
            .instrument(span.clone())
            .await
    }

    async fn commit_release(
        &self,
        w: &Worker,
        r: pb::Release,
        span: &tracing::Span,
    ) -> Result<pb::CoordinatorMessage, Status> {
        let campaign = campaign_of("release.campaign", &r.campaign)?;
        let lease = lease_of(r.token.as_ref());
        if let Err(e) = check_release(&r) {
            let echoed = r.token.clone().map(|t| pb::Token {
                lease: String::new(),
                ..t
            });
            return msg(Out::OutcomeError(refused(&campaign, echoed, e.to_string())));
        }
        let t = token("release.token", r.token.clone()).map_err(from_convert)?;
        trace::record_token(span, &t);
        if let Err(e) = self.holds(w, &campaign, &t, &lease).await {
            otel::record_error(span, "lease_refused", &e.to_string());
            return msg(Out::OutcomeError(lease_refused(campaign.as_str(), &t, &e)));
        }
        let reason = match pb::ReleaseReason::try_from(r.reason) {
            Ok(pb::ReleaseReason::Cancelled) => ReleaseReason::Cancelled,
            Ok(pb::ReleaseReason::Blocked) => {
                let kind: FailureKind =
                    wire_enum::<pb::FailureKind, _>("release.failure_kind", r.failure_kind)
                        .unwrap_or(FailureKind::Preflight);
                ReleaseReason::Blocked(kind)
            }
            _ => return Err(bad_field("release.reason", "must be cancelled or blocked")),
        };
        let s = &self.shared;
        let release = Release {
            token: t.clone(),
            reason,
            lane: LaneName::new(r.lane).map_err(|e| bad_field("release.lane", e))?,
            host: w.host.clone(),
            detail: (!r.detail.is_empty()).then_some(r.detail),
        };
        match s.store.release(&campaign, release, s.now()).await {
            Ok(a) => {
                trace::record_ack(span, &a);
                msg(Out::OutcomeAck(ack(&campaign, a)))
            }
            Err(e) => {
                otel::record_error(span, "store", &e.to_string());
                msg(Out::OutcomeError(outcome_error(campaign.as_str(), &t, &e)))
            }
        }
    }

    /// Handles one message. Registration, claims and status reports are dealt with here (a
    /// claim answers by itself, beside the session); every message about leases comes back as
    /// `Handled::Later`, whose answer the session sends in the order the messages came.
    pub(super) async fn handle(
        &self,
        worker: &mut Option<Worker>,
        m: In,
        out: &mpsc::Sender<Result<pb::CoordinatorMessage, Status>>,
    ) -> Result<Handled, Status> {
        if let In::Register(r) = m {
            let (joined, registered) = self.register(r)?;
            *worker = Some(joined);
            let _ = out.send(msg(Out::Registered(registered))).await;
            return Ok(Handled::Done);
        }
        let Some(w) = worker.clone() else {
            return Err(Status::failed_precondition("register first"));
        };
        let svc = self.clone();
        let later = match m {
            In::Register(_) => unreachable!("handled above"),
            In::WorkRequest(r) => {
                let lane = LaneName::new(r.lane).map_err(|e| bad_field("work_request.lane", e))?;
                // A claim runs beside the session: one that walks every campaign (or waits on
                // a busy one) must not hold back the heartbeats behind it, or healthy leases
                // would expire under load. Each credit still gets exactly one answer.
                let out = out.clone();
                tokio::spawn(async move {
                    // A session that has already gone (its worker left a paused replica, which
                    // is only now reading what was sent) gets no lease it could never run.
                    if out.is_closed() {
                        return;
                    }
                    let reply = svc
                        .work(&w, lane, r.exclude_campaigns.into_iter().collect())
                        .await;
                    let _ = out.send(reply).await;
                });
                return Ok(Handled::Done);
            }
            In::Status(st) => {
                if st.outbox_broken {
                    tracing::warn!(worker = %LogSafe(&w.id), unpersisted = st.unpersisted, detail = %LogSafe(&st.detail), "worker outbox not writable: it takes no work");
                } else {
                    tracing::info!(worker = %LogSafe(&w.id), "worker healthy");
                }
                w.member.update(&st);
                return Ok(Handled::Done);
            }
            In::Heartbeat(h) => Later {
                leases: Leases::Of(
                    h.tokens
                        .iter()
                        .map(|tp| lease_key(&tp.campaign, tp.token.as_ref()))
                        .collect(),
                ),
                answer: Box::pin(async move {
                    let renewals = svc.renew(&w, h.tokens).await?;
                    // A cancel precedes the ack that reports it.
                    let mut answers: Vec<pb::CoordinatorMessage> = renewals
                        .iter()
                        .filter(|r| r.state == pb::RenewState::Cancel as i32)
                        .map(|r| pb::CoordinatorMessage {
                            msg: Some(Out::Cancel(pb::Cancel {
                                token: r.token.clone(),
                                reason: "campaign cancelled".into(),
                                campaign: r.campaign.clone(),
                            })),
                        })
                        .collect();
                    answers.push(msg(Out::HeartbeatAck(pb::HeartbeatAck {
                        tokens: renewals,
                    }))?);
                    Ok(answers)
                }),
            },
            In::Outcome(o) => Later {
                leases: Leases::Of(vec![lease_key(&o.campaign, o.token.as_ref())]),
                answer: Box::pin(async move { Ok(vec![svc.outcome(&w, o).await?]) }),
            },
            In::Release(r) => Later {
                leases: Leases::Of(vec![lease_key(&r.campaign, r.token.as_ref())]),
                answer: Box::pin(async move { Ok(vec![svc.release(&w, r).await?]) }),
            },
            In::Forfeit(f) => Later {
                leases: Leases::All,
                answer: Box::pin(async move {
                    Ok(vec![msg(Out::ForfeitAck(svc.forfeit(&w, f).await?))?])
                }),
            },
            In::Reconnect(r) => Later {
                leases: Leases::All,
                answer: Box::pin(async move {
                    let renewals = svc.renew(&w, r.in_flight).await?;
                    Ok(vec![msg(Out::ReconnectAck(pb::ReconnectAck {
                        tokens: renewals,
                    }))?])
                }),
            },
        };
        Ok(Handled::Later(later))
    }
}

/// A lease a message is about, as the worker named it: (campaign, trial id, attempt).
pub(super) type LeaseKey = (String, String, u32);

fn lease_key(campaign: &str, t: Option<&pb::Token>) -> LeaseKey {
    let (trial, attempt) = t.map_or((String::new(), 0), |t| (t.trial_id.clone(), t.attempt));
    (campaign.to_owned(), trial, attempt)
}

/// The leases a message touches: it must not overtake an earlier message about any of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Leases {
    Of(Vec<LeaseKey>),
    /// All of the worker's (a reconnect, a forfeit): it waits for everything before it.
    All,
}

impl Leases {
    pub(super) fn overlaps(&self, other: &Leases) -> bool {
        match (self, other) {
            (Leases::All, _) | (_, Leases::All) => true,
            (Leases::Of(a), Leases::Of(b)) => a.iter().any(|k| b.contains(k)),
        }
    }
}

/// The answers to one message, once its store work is done.
pub(super) type Answer =
    Pin<Box<dyn Future<Output = Result<Vec<pb::CoordinatorMessage>, Status>> + Send>>;

/// A message about leases, to be answered in order.
pub(super) struct Later {
    pub(super) leases: Leases,
    pub(super) answer: Answer,
}

/// What became of one message.
pub(super) enum Handled {
    /// Nothing more to do: answered, or nothing to answer.
    Done,
    /// Its answers come later, in order.
    Later(Later),
}

#[tonic::async_trait]
#[tonic::async_trait]
impl LaneService for LaneSvc {
    type SessionStream = Boxed<pb::CoordinatorMessage>;

    async fn session(
        &self,
        request: Request<Streaming<pb::WorkerMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let identity = crate::tls::lane_identity(&request, self.shared.mutual_tls)?;
        let rx = super::session::serve_session(self.shared.clone(), request.into_inner(), identity);
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type FetchBundleStream = Boxed<pb::BundleChunk>;

    async fn fetch_bundle(
        &self,
        request: Request<pb::FetchBundleRequest>,
    ) -> Result<Response<Self::FetchBundleStream>, Status> {
        // Under mutual TLS, only a worker with a certificate.
        crate::tls::lane_identity(&request, self.shared.mutual_tls)?;
        let digest = request.into_inner().digest;
        let chunks = super::bundles::fetch(self.shared.store.as_ref(), digest).await?;
        Ok(Response::new(Box::pin(tokio_stream::iter(
            chunks.into_iter().map(|data| Ok(pb::BundleChunk { data })),
        ))))
    }
}
