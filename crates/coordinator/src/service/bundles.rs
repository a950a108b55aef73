//! Task folders kept as content-addressed bundles: clients put them before they submit a
//! campaign that names them, the submit is refused while one is missing, and workers fetch
//! them by digest in chunks that fit a lane message.

use prost::Message as _;
use tonic::Status;

use lanes_common::proto as pb;
use lanes_common::spec::Campaign;
use lanes_common::spec::bundle::{self, Bundle};
use lanes_common::spec::harbor::{HarborTask, PAYLOAD_KEY};

use crate::grpc_status::from_store;
use crate::store::Store;

/// The most bytes of an encoded bundle in one fetched chunk.
pub(crate) const CHUNK_BYTES: usize = 1024 * 1024;

/// The most digests one MissingBundles call may ask about.
const MAX_ASKED: usize = 100_000;

fn checked_digest(field: &str, digest: &str) -> Result<(), Status> {
    bundle::check_digest(digest).map_err(|e| crate::grpc_status::bad_field(field, e))
}

/// Which of the digests the store does not keep.
pub(crate) async fn missing(
    store: &dyn Store,
    req: pb::MissingBundlesRequest,
) -> Result<pb::MissingBundlesResponse, Status> {
    if req.digests.len() > MAX_ASKED {
        return Err(Status::invalid_argument(format!(
            "digests: at most {MAX_ASKED} per call"
        )));
    }
    for (i, d) in req.digests.iter().enumerate() {
        checked_digest(&format!("digests[{i}]"), d)?;
    }
    let missing = store
        .missing_bundles(req.digests)
        .await
        .map_err(from_store)?;
    Ok(pb::MissingBundlesResponse { missing })
}

/// Checks a bundle against its digest and keeps it, re-encoded in path order.
pub(crate) async fn put(
    store: &dyn Store,
    req: pb::PutBundleRequest,
) -> Result<pb::PutBundleResponse, Status> {
    checked_digest("digest", &req.digest)?;
    let wire = req
        .bundle
        .ok_or_else(|| Status::invalid_argument("bundle: missing"))?;
    let b = Bundle::try_from(wire).map_err(|e| crate::grpc_status::bad_field("bundle.files", e))?;
    let digest = b.digest();
    if digest != req.digest {
        return Err(crate::grpc_status::bad_field(
            "digest",
            format!("the files' digest is {digest}, not {}", req.digest),
        ));
    }
    let encoded = pb::TaskBundle::from(b).encode_to_vec();
    let stored = store
        .put_bundle(req.digest, encoded)
        .await
        .map_err(from_store)?;
    Ok(pb::PutBundleResponse { stored })
}

/// A kept bundle, encoded, in chunks of at most [`CHUNK_BYTES`].
pub(crate) async fn fetch(store: &dyn Store, digest: String) -> Result<Vec<Vec<u8>>, Status> {
    checked_digest("digest", &digest)?;
    let Some(encoded) = store.bundle(digest.clone()).await.map_err(from_store)? else {
        return Err(Status::not_found(format!(
            "no task folder {digest} is kept here: submit its campaign with `lanes submit`, \
             which sends its folders"
        )));
    };
    Ok(encoded.chunks(CHUNK_BYTES).map(<[u8]>::to_vec).collect())
}

/// Refuses a campaign whose tasks name a task folder the store does not keep, naming them.
pub(crate) async fn check_campaign(store: &dyn Store, campaign: &Campaign) -> Result<(), Status> {
    let mut wanted: Vec<(String, String)> = Vec::new();
    let marker = format!("\"{PAYLOAD_KEY}\":");
    for t in &campaign.tasks {
        // Parsed only when it may be a Harbor task: most payloads are not.
        if !t.payload.json().contains(&marker) {
            continue;
        }
        let Some(Ok(h)) = HarborTask::from_payload(&t.payload.value()) else {
            continue;
        };
        checked_digest(&format!("tasks[{}].payload.harbor.digest", t.id), &h.digest)?;
        wanted.push((t.id.to_string(), h.digest));
    }
    if wanted.is_empty() {
        return Ok(());
    }
    let mut digests: Vec<String> = wanted.iter().map(|(_, d)| d.clone()).collect();
    digests.sort();
    digests.dedup();
    let missing = store.missing_bundles(digests).await.map_err(from_store)?;
    if missing.is_empty() {
        return Ok(());
    }
    let missing: std::collections::BTreeSet<String> = missing.into_iter().collect();
    let tasks: Vec<&str> = wanted
        .iter()
        .filter(|(_, d)| missing.contains(d))
        .map(|(t, _)| t.as_str())
        .collect();
    let shown = tasks
        .iter()
        .take(10)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    let more = tasks.len().saturating_sub(10);
    Err(Status::failed_precondition(format!(
        "the task folders of {} task(s) are not on the coordinator ({shown}{}): `lanes submit` \
         sends them; another client calls PutBundle first",
        tasks.len(),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    )))
}
