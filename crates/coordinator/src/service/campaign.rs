//! CampaignService: submit, get, list, watch, stop, rows, report.

use std::pin::Pin;

use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use lanes_common::ids::CampaignId;
use lanes_common::proto as pb;
use lanes_common::proto::campaign_service_server::CampaignService;
use lanes_common::spec::Campaign;
use lanes_common::state::StopMode;

use super::Shared;
use crate::grpc_status::{bad_field, from_convert, from_store};
use crate::store::SubmitKind;
use crate::wire;

type Boxed<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// Rows and events read per store call while streaming.
const BATCH: usize = 512;

pub(crate) struct CampaignSvc {
    pub(crate) shared: Shared,
}

fn campaign_id(field: &str, id: &str) -> Result<CampaignId, Status> {
    CampaignId::new(id).map_err(|e| bad_field(field, e))
}

#[tonic::async_trait]
impl CampaignService for CampaignSvc {
    #[tracing::instrument(skip_all, fields(campaign))]
    async fn submit(
        &self,
        request: Request<pb::SubmitRequest>,
    ) -> Result<Response<pb::SubmitResponse>, Status> {
        let campaign = Campaign::try_from(request.into_inner()).map_err(from_convert)?;
        tracing::Span::current().record("campaign", campaign.spec.id.as_str());
        let s = &self.shared;
        let done = s
            .store
            .submit(campaign, s.now())
            .await
            .map_err(from_store)?;
        Ok(Response::new(pb::SubmitResponse {
            id: done.id.to_string(),
            trials: done.trials,
            spec_hash: done.spec_hash,
            resumed: done.kind != SubmitKind::Created,
            amended: done.kind == SubmitKind::Amended,
            conflicts: Vec::new(),
        }))
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::CampaignStatus>, Status> {
        let id = campaign_id("id", &request.into_inner().id)?;
        let s = &self.shared;
        let now = s.now();
        let st = s.store.status(&id, now).await.map_err(from_store)?;
        Ok(Response::new(wire::status(st, now)))
    }

    async fn list(
        &self,
        _request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        let s = &self.shared;
        let mut campaigns = Vec::new();
        for id in s.store.list().await.map_err(from_store)? {
            let now = s.now();
            campaigns.push(wire::status(
                s.store.status(&id, now).await.map_err(from_store)?,
                now,
            ));
        }
        Ok(Response::new(pb::ListResponse { campaigns }))
    }

    type WatchStream = Boxed<pb::WatchEvent>;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let req = request.into_inner();
        let id = campaign_id("id", &req.id)?;
        let s = self.shared.clone();
        let now = s.now();
        let snapshot = s.store.status(&id, now).await.map_err(from_store)?;
        let mut cursor = if req.from.is_empty() {
            snapshot.events_total
        } else {
            req.from.parse::<u64>().map_err(|e| bad_field("from", e))?
        };
        let (tx, rx) = mpsc::channel(64);
        tx.send(Ok(pb::WatchEvent {
            cursor: cursor.to_string(),
            event: Some(pb::watch_event::Event::Snapshot(wire::status(
                snapshot, now,
            ))),
        }))
        .await
        .ok();
        tokio::spawn(async move {
            let mut shutdown = s.shutdown.clone();
            loop {
                match s.store.events(&id, cursor, BATCH).await {
                    Ok(events) if !events.is_empty() => {
                        for e in events {
                            cursor = e.seq + 1;
                            if tx.send(Ok(wire::event(e))).await.is_err() {
                                return;
                            }
                        }
                        continue;
                    }
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
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
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
        let req = request.into_inner();
        let id = campaign_id("id", &req.id)?;
        let s = self.shared.clone();
        // Fail fast on an unknown campaign rather than streaming nothing.
        s.store.status(&id, s.now()).await.map_err(from_store)?;
        let (tx, rx) = mpsc::channel(256);
        let mut next = req.from_seq;
        tokio::spawn(async move {
            let mut shutdown = s.shutdown.clone();
            loop {
                match s.store.rows(&id, next, BATCH).await {
                    Ok(rows) if !rows.is_empty() => {
                        for r in rows {
                            next = r.seq + 1;
                            let msg = pb::Row::try_from(&r).map_err(from_convert);
                            if tx.send(msg).await.is_err() {
                                return;
                            }
                        }
                        continue;
                    }
                    Ok(_) if !req.follow => return,
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
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn report(
        &self,
        request: Request<pb::ReportRequest>,
    ) -> Result<Response<pb::ReportResponse>, Status> {
        let id = campaign_id("id", &request.into_inner().id)?;
        let s = &self.shared;
        let campaign = s.store.campaign(&id).await.map_err(from_store)?;
        let rows = s.store.rows(&id, 0, usize::MAX).await.map_err(from_store)?;
        let report = lanes_common::report::build(&campaign, &rows);
        let json = serde_json::to_string(&report).map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(pb::ReportResponse { json }))
    }
}
