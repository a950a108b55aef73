//! CampaignService: submit, get, list, watch, stop, rows, report, workers, export, delete,
//! retry, one-time dashboard login links, the task folders campaigns name, and attempts'
//! files in the artifact store.

use std::pin::Pin;

use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use lanes_common::ids::CampaignId;
use lanes_common::proto as pb;
use lanes_common::proto::campaign_service_server::CampaignService;
use lanes_common::spec::Campaign;
use lanes_common::state::StopMode;
use lanes_common::submit::SubmitAssembly;

use super::Shared;
use super::limits::StreamSlot;
use crate::auth::Caller;
use crate::grpc_status::{bad_field, from_convert, from_store, from_submit};
use crate::store::SubmitKind;
use crate::wire;

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// How long a submit stream may wait for its next chunk.
const STREAM_IDLE: std::time::Duration = std::time::Duration::from_secs(60);

/// Rows and events read per store call while streaming.
const BATCH: usize = 512;

pub(crate) struct CampaignSvc {
    pub(crate) shared: Shared,
}

impl CampaignSvc {
    /// Submits a validated campaign: the coordinator's limits, then the store.
    async fn store_campaign(&self, campaign: Campaign) -> Result<pb::SubmitResponse, Status> {
        let s = &self.shared;
        tracing::Span::current().record("campaign", campaign.spec.id.as_str());
        // Before the store lays out the schedule: the trial cap and the assignment size.
        s.limits.check_campaign(&campaign)?;
        super::bundles::check_campaign(s.store.as_ref(), &campaign).await?;
        let done = s.store.submit(campaign, s.now()).await;
        // Even a failed submit may have committed (a reply lost on the way).
        s.campaigns.forget();
        let done = done.map_err(from_store)?;
        Ok(pb::SubmitResponse {
            id: done.id.to_string(),
            trials: done.trials,
            spec_hash: done.spec_hash,
            resumed: done.kind != SubmitKind::Created,
            amended: done.kind == SubmitKind::Amended,
            conflicts: Vec::new(),
        })
    }
}

pub(super) fn campaign_id(field: &str, id: &str) -> Result<CampaignId, Status> {
    CampaignId::new(id).map_err(|e| bad_field(field, e))
}

#[tonic::async_trait]
impl CampaignService for CampaignSvc {
    #[tracing::instrument(skip_all, fields(campaign))]
    async fn submit(
        &self,
        request: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitResponse>, Status> {
        let s = &self.shared;
        let _running = s.limits.submit_permit()?;
        let campaign = Campaign::try_from(request.into_inner()).map_err(from_submit)?;
        self.store_campaign(campaign).await.map(Response::new)
    }

    /// A header with the spec, then chunks of tasks; the campaign is submitted (and visible)
    /// only once the client has closed the stream.
    #[tracing::instrument(skip_all, fields(campaign))]
    async fn submit_stream(
        &self,
        request: Request<Streaming<pb::SubmitChunk>>,
    ) -> Result<Response<pb::SubmitResponse>, Status> {
        let _running = self.shared.limits.submit_permit()?;
        let mut chunks = request.into_inner();
        let mut assembly = SubmitAssembly::new(self.shared.limits.max_client_message_bytes());
        // A stream holds one of the few submit permits: one that goes quiet gives it back.
        loop {
            let next = tokio::time::timeout(STREAM_IDLE, chunks.message())
                .await
                .map_err(|_| {
                    Status::deadline_exceeded(format!(
                        "no chunk for {}s: the submit stream was dropped, nothing stored",
                        STREAM_IDLE.as_secs()
                    ))
                })??;
            match next {
                Some(chunk) => assembly.push(chunk).map_err(from_submit)?,
                None => break,
            }
        }
        let campaign = assembly.finish().map_err(from_submit)?;
        self.store_campaign(campaign).await.map(Response::new)
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::CampaignStatus>, Status> {
        let id = campaign_id("id", &request.into_inner().id)?;
        let s = &self.shared;
        let now = s.now();
        let st = s.store.status(&id, now).await.map_err(from_store)?;
        let running = st.state == lanes_common::state::CampaignState::Running;
        let mut status = wire::status(st, now);
        status.redis_link = wire::redis_link(s.store.as_ref());
        if running {
            let spec = s.store.spec(&id).await.map_err(from_store)?;
            status.refused_by = s.workers.refusals(&spec);
        }
        Ok(Response::new(status))
    }

    async fn list(
        &self,
        _request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        let s = &self.shared;
        let mut campaigns = Vec::new();
        let link = wire::redis_link(s.store.as_ref());
        for id in s.store.list().await.map_err(from_store)? {
            let now = s.now();
            let mut status = wire::status(s.store.status(&id, now).await.map_err(from_store)?, now);
            status.redis_link = link.clone();
            campaigns.push(status);
        }
        Ok(Response::new(pb::ListResponse { campaigns }))
    }

    type WatchStream = Boxed<pb::WatchEvent>;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let slot = self.shared.limits.stream_slot(Caller::of(&request))?;
        let req = request.into_inner();
        let id = campaign_id("id", &req.id)?;
        let s = self.shared.clone();
        let now = s.now();
        let snapshot = s.store.status(&id, now).await.map_err(from_store)?;
        let cursor = if req.from.is_empty() {
            snapshot.events_total
        } else {
            req.from.parse::<u64>().map_err(|e| bad_field("from", e))?
        };
        let first = pb::WatchEvent {
            cursor: cursor.to_string(),
            event: Some(pb::watch_event::Event::Snapshot(wire::status(
                snapshot, now,
            ))),
        };
        let store = s.store.clone();
        let stream = follow(
            s,
            cursor,
            true,
            move |from| {
                let (store, id) = (store.clone(), id.clone());
                async move { store.events(&id, from, BATCH).await }
            },
            |e| e.seq,
            |e| Ok(wire::event(e)),
            Some(first),
            slot,
        );
        Ok(Response::new(Box::pin(stream)))
    }

    async fn stop(
        &self,
        request: Request<pb::StopRequest>,
    ) -> Result<Response<pb::StopResponse>, Status> {
        let req = request.into_inner();
        let id = campaign_id("id", &req.id)?;
        let mode = match pb::StopMode::try_from(req.mode) {
            Ok(pb::StopMode::Cancel) => StopMode::Cancel,
            // Drain is the safe default for an unset mode.
            Ok(pb::StopMode::Drain | pb::StopMode::Unspecified) => StopMode::Drain,
            Err(_) => return Err(bad_field("mode", format!("unknown stop mode {}", req.mode))),
        };
        let s = &self.shared;
        let state = s.store.stop(&id, mode, s.now()).await.map_err(from_store)?;
        Ok(Response::new(pb::StopResponse {
            state: pb::CampaignState::from(state) as i32,
        }))
    }

    type RowsStream = Boxed<pb::Row>;

    async fn rows(
        &self,
        request: Request<pb::RowsRequest>,
    ) -> Result<Response<Self::RowsStream>, Status> {
        let slot = self.shared.limits.stream_slot(Caller::of(&request))?;
        let req = request.into_inner();
        let id = campaign_id("id", &req.id)?;
        let s = self.shared.clone();
        // Fail fast on an unknown campaign rather than streaming nothing.
        s.store.status(&id, s.now()).await.map_err(from_store)?;
        let store = s.store.clone();
        let stream = follow(
            s,
            req.from_seq,
            req.follow,
            move |from| {
                let (store, id) = (store.clone(), id.clone());
                async move { store.rows(&id, from, BATCH).await }
            },
            |r| r.seq,
            |r| pb::Row::try_from(&r).map_err(from_convert),
            None,
            slot,
        );
        Ok(Response::new(Box::pin(stream)))
    }

    async fn workers(
        &self,
        _request: Request<pb::WorkersRequest>,
    ) -> Result<Response<pb::WorkersResponse>, Status> {
        let s = &self.shared;
        Ok(Response::new(pb::WorkersResponse {
            workers: s.workers.describe(s.store.as_ref(), s.now()).await,
        }))
    }

    type ExportStream = Boxed<pb::ExportChunk>;

    /// The header, then the tasks in chunks of [`BATCH`]: read whole from the store first, so
    /// a store failure is the call's error rather than a stream cut short.
    async fn export(
        &self,
        request: Request<pb::ExportRequest>,
    ) -> Result<Response<Self::ExportStream>, Status> {
        let slot = self.shared.limits.stream_slot(Caller::of(&request))?;
        let id = campaign_id("id", &request.into_inner().id)?;
        let s = &self.shared;
        let now = s.now();
        let status = s.store.status(&id, now).await.map_err(from_store)?;
        let campaign = s.store.campaign(&id).await.map_err(from_store)?;
        let internal = |e: serde_json::Error| Status::internal(e.to_string());
        let header = pb::ExportHeader {
            spec_json: serde_json::to_string(&campaign.spec).map_err(internal)?,
            amendments_json: serde_json::to_string(&status.amendments).map_err(internal)?,
            status: Some(wire::status(status, now)),
        };
        let mut chunks = vec![Ok(pb::ExportChunk {
            chunk: Some(pb::export_chunk::Chunk::Header(header)),
        })];
        for part in campaign.tasks.chunks(BATCH) {
            chunks.push(Ok(pb::ExportChunk {
                chunk: Some(pb::export_chunk::Chunk::Tasks(pb::TaskChunk {
                    tasks: part.iter().map(Into::into).collect(),
                })),
            }));
        }
        let stream = tokio_stream::StreamExt::map(tokio_stream::iter(chunks), move |c| {
            let _slot = &slot;
            c
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn retry(
        &self,
        request: Request<pb::RetryRequest>,
    ) -> Result<Response<pb::RetryResponse>, Status> {
        let (id, pass) = super::retry::pass_of(request.into_inner())?;
        let s = &self.shared;
        let done = s.store.requeue_excluded(&id, pass, s.now()).await;
        // A finished campaign has work again: claims must ask it.
        s.campaigns.forget();
        let done = done.map_err(from_store)?;
        tracing::info!(campaign = %id, pass = done.pass, requeued = done.trials, "retry pass");
        Ok(Response::new(pb::RetryResponse {
            pass: done.pass,
            requeued: done.trials,
            by_arm: done.by_arm.into_iter().collect(),
            state: pb::CampaignState::from(done.state) as i32,
        }))
    }

    async fn delete(
        &self,
        request: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let req = request.into_inner();
        let id = campaign_id("id", &req.id)?;
        let deleted = self.shared.store.delete(&id).await;
        self.shared.campaigns.forget();
        let deleted = match deleted {
            Ok(d) => d,
            // Deleted before, when its objects could not be: a second call deletes them.
            Err(e @ crate::store::StoreError::UnknownCampaign(_))
                if !req.keep_artifacts && self.shared.artifact_store.is_some() =>
            {
                let artifacts = super::artifacts::delete(&self.shared, &id).await?;
                if artifacts == 0 {
                    return Err(from_store(e));
                }
                tracing::info!(campaign = %id, artifacts, "a deleted campaign's objects deleted");
                return Ok(Response::new(pb::DeleteResponse {
                    rows: 0,
                    trials: 0,
                    artifacts,
                }));
            }
            Err(e) => return Err(from_store(e)),
        };
        // After the ledger, so a running campaign (refused above) keeps its objects.
        let artifacts = match req.keep_artifacts {
            true => 0,
            false => super::artifacts::delete(&self.shared, &id).await?,
        };
        tracing::info!(campaign = %id, rows = deleted.rows, artifacts, "campaign deleted");
        Ok(Response::new(pb::DeleteResponse {
            rows: deleted.rows,
            trials: deleted.trials,
            artifacts,
        }))
    }

    async fn artifacts(
        &self,
        request: Request<pb::ArtifactsRequest>,
    ) -> Result<Response<pb::ArtifactsResponse>, Status> {
        super::artifacts::artifacts(&self.shared, request.into_inner())
            .await
            .map(Response::new)
    }

    type ReadArtifactStream = Boxed<pb::ArtifactChunk>;

    async fn read_artifact(
        &self,
        request: Request<pb::ReadArtifactRequest>,
    ) -> Result<Response<Self::ReadArtifactStream>, Status> {
        let slot = self.shared.limits.stream_slot(Caller::of(&request))?;
        let chunks = super::artifacts::read(&self.shared, request.into_inner()).await?;
        let stream = tokio_stream::StreamExt::map(chunks, move |c| {
            let _slot = &slot;
            c
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn missing_bundles(
        &self,
        request: Request<pb::MissingBundlesRequest>,
    ) -> Result<Response<pb::MissingBundlesResponse>, Status> {
        super::bundles::missing(self.shared.store.as_ref(), request.into_inner())
            .await
            .map(Response::new)
    }

    async fn put_bundle(
        &self,
        request: Request<pb::PutBundleRequest>,
    ) -> Result<Response<pb::PutBundleResponse>, Status> {
        super::bundles::put(self.shared.store.as_ref(), request.into_inner())
            .await
            .map(Response::new)
    }

    async fn login_link(
        &self,
        request: Request<pb::LoginLinkRequest>,
    ) -> Result<Response<pb::LoginLinkResponse>, Status> {
        let token = Caller::of(&request).and_then(|c| c.token);
        let campaign = request.into_inner().campaign;
        super::login_link::issue(&self.shared, token, &campaign)
            .await
            .map(Response::new)
    }

    async fn report(
        &self,
        request: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportResponse>, Status> {
        let id = campaign_id("id", &request.into_inner().id)?;
        let s = &self.shared;
        let report = crate::report::build(s.store.as_ref(), &id)
            .await
            .map_err(from_store)?;
        let json = serde_json::to_string(&report).map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(pb::ReportResponse { json }))
    }
}

/// Streams store items in seq order from `from` (after `first`, if given): as many as there
/// are, then, while `keep_following`, whatever is appended, polling every `poll`. Reading the
/// store rather than a local channel is what makes Watch and Rows work across replicas. Ends
/// when the client goes away, the store fails (the error is the last item) or the coordinator
/// shuts down; then `slot`, the caller's place among its token's open streams, is freed.
#[allow(clippy::too_many_arguments)]
fn follow<T, M, F, Fut>(
    s: Shared,
    from: u64,
    keep_following: bool,
    fetch: F,
    seq: fn(&T) -> u64,
    to_msg: fn(T) -> Result<M, Status>,
    first: Option<M>,
    slot: StreamSlot,
) -> ReceiverStream<Result<M, Status>>
where
    T: Send + 'static,
    M: Send + 'static,
    F: Fn(u64) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<Vec<T>, crate::store::StoreError>> + Send,
{
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let _slot = slot;
        let mut next = from;
        let mut shutdown = s.shutdown.clone();
        if let Some(m) = first
            && tx.send(Ok(m)).await.is_err()
        {
            return;
        }
        loop {
            match fetch(next).await {
                Ok(items) if !items.is_empty() => {
                    for item in items {
                        next = seq(&item) + 1;
                        if tx.send(to_msg(item)).await.is_err() {
                            return;
                        }
                    }
                    continue;
                }
                Ok(_) if !keep_following => return,
                Ok(_) => {}
                Err(e) => {
                    let _ = tx.send(Err(from_store(e))).await;
                    return;
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(s.poll) => {}
                _ = shutdown.changed() => return,
                _ = tx.closed() => return,
            }
        }
    });
    ReceiverStream::new(rx)
}
