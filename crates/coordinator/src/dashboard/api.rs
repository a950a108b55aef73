//! The dashboard's reads and writes, made through the same CampaignService calls a gRPC client
//! makes (in process, without the wire), so the dashboard has no second source of truth and
//! its streams count against the same per-caller limits.

use tokio_stream::StreamExt;
use tonic::{Code, Request, Status};

use lanes_common::proto as pb;
use lanes_common::proto::campaign_service_server::CampaignService;
use lanes_common::row::Row;
use lanes_common::spec::CampaignSpec;
use lanes_report::Report;

use crate::auth::{Caller, Role};
use crate::service::campaign::CampaignSvc;

/// A failed call, as the page that shows it needs it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct ApiError {
    pub(crate) code: Code,
    pub(crate) message: String,
}

impl From<Status> for ApiError {
    fn from(s: Status) -> Self {
        Self {
            code: s.code(),
            message: s.message().to_owned(),
        }
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError {
        code: Code::Internal,
        message: e.to_string(),
    }
}

pub(crate) type Result<T> = std::result::Result<T, ApiError>;

/// What a campaign page lays out: the spec and its tasks' ids, in schedule order.
#[derive(Debug)]
pub(crate) struct Skeleton {
    pub(crate) spec: CampaignSpec,
    pub(crate) tasks: Vec<String>,
    /// Each task's position in `tasks`.
    pub(crate) task_pos: std::collections::HashMap<String, usize>,
}

impl Skeleton {
    /// The task and run of a trial id (`<task>.r<run>.<arm>`), for an arm of this spec.
    pub(crate) fn split<'a>(&self, trial: &'a str) -> Option<(&'a str, u32)> {
        self.spec.arms.iter().find_map(|a| {
            let rest = trial.strip_suffix(a.id.as_str())?.strip_suffix('.')?;
            let (task, run) = rest.rsplit_once(".r")?;
            Some((task, run.parse().ok()?))
        })
    }
}

/// CampaignService, called in process for one viewer.
pub(crate) struct Api<'a> {
    pub(crate) svc: &'a CampaignSvc,
    /// The viewer's stream key: Watch and Rows count against it like a token's.
    pub(crate) stream_key: String,
}

impl Api<'_> {
    /// A request as the viewer's: its streams count against the viewer's key.
    fn request<T>(&self, message: T) -> Request<T> {
        let mut r = Request::new(message);
        r.extensions_mut().insert(Caller {
            role: Role::Client,
            token: Some(crate::auth::token_digest(&self.stream_key)),
        });
        r
    }

    pub(crate) async fn get(&self, id: &str) -> Result<pb::CampaignStatus> {
        let req = self.request(pb::GetRequest { id: id.into() });
        Ok(self.svc.get(req).await?.into_inner())
    }

    pub(crate) async fn list(&self) -> Result<Vec<pb::CampaignStatus>> {
        let req = self.request(pb::ListRequest {});
        Ok(self.svc.list(req).await?.into_inner().campaigns)
    }

    pub(crate) async fn report(&self, id: &str) -> Result<Report> {
        let req = self.request(pb::ReportRequest { id: id.into() });
        let json = self.svc.report(req).await?.into_inner().json;
        serde_json::from_str(&json).map_err(internal)
    }

    pub(crate) async fn stop(&self, id: &str, mode: pb::StopMode) -> Result<pb::CampaignState> {
        let req = self.request(pb::StopRequest {
            id: id.into(),
            mode: mode as i32,
        });
        let state = self.svc.stop(req).await?.into_inner().state;
        Ok(pb::CampaignState::try_from(state).unwrap_or(pb::CampaignState::Unspecified))
    }

    /// Rows from `from_seq`, handed to `each` until it returns `false` or the ledger ends.
    pub(crate) async fn rows(
        &self,
        id: &str,
        from_seq: u64,
        mut each: impl FnMut(Row) -> bool,
    ) -> Result<()> {
        let req = self.request(pb::RowsRequest {
            id: id.into(),
            from_seq,
            follow: false,
        });
        let mut stream = self.svc.rows(req).await?.into_inner();
        while let Some(row) = stream.next().await {
            let row: Row = serde_json::from_str(&row?.json).map_err(internal)?;
            if !each(row) {
                break;
            }
        }
        Ok(())
    }

    /// The spec and task ids (Export, without keeping the payloads).
    pub(crate) async fn skeleton(&self, id: &str) -> Result<Skeleton> {
        let req = self.request(pb::ExportRequest { id: id.into() });
        let mut stream = self.svc.export(req).await?.into_inner();
        let (mut spec, mut tasks) = (None, Vec::new());
        while let Some(chunk) = stream.next().await {
            match chunk?.chunk {
                Some(pb::export_chunk::Chunk::Header(h)) => {
                    spec = Some(serde_json::from_str(&h.spec_json).map_err(internal)?);
                }
                Some(pb::export_chunk::Chunk::Tasks(t)) => {
                    tasks.extend(t.tasks.into_iter().map(|t| t.id));
                }
                None => {}
            }
        }
        let spec = spec.ok_or_else(|| internal("the export had no header"))?;
        let task_pos = tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i))
            .collect();
        Ok(Skeleton {
            spec,
            tasks,
            task_pos,
        })
    }

    /// The campaign's Watch stream: its snapshot, then each event as it happens.
    pub(crate) async fn watch(
        &self,
        id: &str,
    ) -> Result<<CampaignSvc as CampaignService>::WatchStream> {
        let req = self.request(pb::WatchRequest {
            id: id.into(),
            from: String::new(),
        });
        Ok(self.svc.watch(req).await?.into_inner())
    }
}
