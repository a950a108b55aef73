//! The artifact store's part of the campaign service: an attempt's manifest and files, read
//! back for clients (`lanes artifacts`), and a deleted campaign's objects.

use lanes_artifacts::{ArtifactStore, StoreError};
use lanes_common::ids::{AttemptTag, CampaignId, Token, TrialId};
use lanes_common::proto as pb;
use tokio_stream::StreamExt;
use tonic::Status;

use super::Shared;
use super::campaign::campaign_id;
use crate::grpc_status::{bad_field, from_store};

/// The largest chunk a ReadArtifact stream sends.
const CHUNK: usize = 1 << 20;
/// Rows read per store call while looking for a trial's attempts.
const ROWS_BATCH: usize = 4096;

/// The store, or why this coordinator cannot answer.
fn store(shared: &Shared) -> Result<&ArtifactStore, Status> {
    shared.artifact_store.as_ref().ok_or_else(|| {
        Status::failed_precondition("this coordinator has no artifact store (--artifact-store)")
    })
}

/// An artifact store error as a status.
pub(crate) fn status(e: StoreError) -> Status {
    match e {
        e @ StoreError::NotFound(_) => Status::not_found(e.to_string()),
        StoreError::Unavailable(m) => Status::unavailable(m),
        StoreError::Refused(m) => {
            Status::failed_precondition(format!("artifact store refused: {m}"))
        }
        StoreError::Local(m) => Status::internal(m),
    }
}

/// The attempt a request names: `attempt`, or for 0 the trial's counted attempt, or else its
/// latest with a row (read from the ledger). Ids are checked first, then that there is a
/// store at all.
async fn resolve<'a>(
    shared: &'a Shared,
    campaign: &str,
    trial: &str,
    attempt: u32,
) -> Result<(&'a ArtifactStore, AttemptTag), Status> {
    let id = campaign_id("campaign", campaign)?;
    let trial_id = TrialId::new(trial).map_err(|e| bad_field("trial_id", e))?;
    let store = store(shared)?;
    let attempt = match attempt {
        0 => chosen_attempt(shared, &id, &trial_id).await?,
        n => n,
    };
    Ok((store, AttemptTag::new(id, Token { trial_id, attempt })))
}

async fn chosen_attempt(shared: &Shared, id: &CampaignId, trial: &TrialId) -> Result<u32, Status> {
    let (mut counted, mut latest) = (None, None);
    let mut from = 0;
    loop {
        let rows = shared
            .store
            .rows(id, from, ROWS_BATCH)
            .await
            .map_err(from_store)?;
        let Some(last) = rows.last() else { break };
        from = last.seq + 1;
        for r in rows.iter().filter(|r| &r.trial_id == trial) {
            if r.counted {
                counted = Some(r.attempt);
            }
            latest = latest.max(Some(r.attempt));
        }
    }
    counted
        .or(latest)
        .ok_or_else(|| Status::not_found(format!("trial {trial} of campaign {id} has no row")))
}

/// The attempt's manifest; its absence said in the attempt's terms.
async fn manifest(
    store: &ArtifactStore,
    tag: &AttemptTag,
) -> Result<lanes_artifacts::Manifest, Status> {
    store.manifest(tag).await.map_err(|e| match e {
        StoreError::NotFound(_) => Status::not_found(format!(
            "attempt {} of trial {} of campaign {} is not in the artifact store (no manifest: it was never uploaded whole)",
            tag.token.attempt, tag.token.trial_id, tag.campaign
        )),
        e => status(e),
    })
}

pub(super) async fn artifacts(
    shared: &Shared,
    req: pb::ArtifactsRequest,
) -> Result<pb::ArtifactsResponse, Status> {
    let (store, tag) = resolve(shared, &req.campaign, &req.trial_id, req.attempt).await?;
    let manifest = manifest(store, &tag).await?;
    let at = store.location(&tag);
    Ok(pb::ArtifactsResponse {
        attempt: tag.token.attempt,
        manifest_uri: store.uri_of(&at, lanes_artifacts::MANIFEST),
        files: manifest
            .files
            .into_iter()
            .map(|f| pb::ArtifactFile {
                uri: store.uri_of(&at, &f.path),
                path: f.path,
                size: f.size,
                sha256: f.sha256,
            })
            .collect(),
    })
}

/// A file's chunks, once its manifest names it.
pub(super) async fn read(
    shared: &Shared,
    req: pb::ReadArtifactRequest,
) -> Result<
    impl tokio_stream::Stream<Item = Result<pb::ArtifactChunk, Status>> + Send + 'static,
    Status,
> {
    let (store, tag) = resolve(shared, &req.campaign, &req.trial_id, req.attempt).await?;
    let manifest = manifest(store, &tag).await?;
    if manifest.file(&req.path).is_none() {
        return Err(Status::not_found(format!(
            "attempt {} of {} lists no file {:?}",
            tag.token.attempt, tag.token.trial_id, req.path
        )));
    }
    let mut chunks = store.stream(&tag, &req.path).await.map_err(status)?;
    // Re-chunked to at most CHUNK, a few chunks ahead of the client at most.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        while let Some(c) = chunks.next().await {
            let pieces: Vec<Result<pb::ArtifactChunk, Status>> = match c {
                Ok(bytes) => bytes
                    .chunks(CHUNK)
                    .map(|p| Ok(pb::ArtifactChunk { data: p.to_vec() }))
                    .collect(),
                Err(e) => vec![Err(status(e))],
            };
            for p in pieces {
                if tx.send(p).await.is_err() {
                    return;
                }
            }
        }
    });
    Ok(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// Deletes a campaign's objects (none without a store).
pub(super) async fn delete(shared: &Shared, id: &CampaignId) -> Result<u64, Status> {
    match &shared.artifact_store {
        Some(store) => store.delete_campaign(id).await.map_err(status),
        None => Ok(0),
    }
}
