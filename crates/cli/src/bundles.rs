//! `lanes submit` sends a campaign's task folders (`[tasks] harbor`) before the campaign:
//! only those the coordinator does not keep yet, each read again and checked against the
//! digest the campaign names, so the folder a worker fetches is the one the spec hash covers.

use std::collections::BTreeMap;
use std::path::Path;

use lanes_common::proto as pb;
use lanes_common::spec::Campaign;
use lanes_common::spec::bundle::Bundle;
use lanes_common::spec::harbor::{self, HarborTask};

use crate::client::Client;

/// Sends the folders the campaign's tasks name and the coordinator lacks. The outer error is
/// the coordinator's; the inner one is the user's (a folder that changed or cannot be read).
pub(crate) async fn send(
    c: &mut Client,
    file: &Path,
    campaign: &Campaign,
) -> Result<Result<(), String>, tonic::Status> {
    let mut named = Vec::new();
    for t in &campaign.tasks {
        if let Some(Ok(h)) = HarborTask::from_payload(&t.payload.value()) {
            named.push(h.digest);
        }
    }
    if named.is_empty() {
        return Ok(Ok(()));
    }
    named.sort();
    named.dedup();
    let folders: BTreeMap<String, std::path::PathBuf> = match harbor::folders_of_campaign(file) {
        Ok(f) => f,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let missing = c
        .missing_bundles(pb::MissingBundlesRequest { digests: named })
        .await?
        .into_inner()
        .missing;
    let (mut sent, mut bytes) = (0usize, 0u64);
    for digest in missing {
        let Some(dir) = folders.get(&digest) else {
            return Ok(Err(format!(
                "a task folder changed while it was read (no folder has digest {digest}): \
                 submit again"
            )));
        };
        let bundle = match Bundle::read_dir(dir) {
            Ok(b) => b,
            Err(e) => return Ok(Err(format!("{}: {e}", dir.display()))),
        };
        if bundle.digest() != digest {
            return Ok(Err(format!(
                "{}: the task folder changed while it was read: submit again",
                dir.display()
            )));
        }
        bytes += bundle.size();
        c.put_bundle(pb::PutBundleRequest {
            digest,
            bundle: Some(bundle.into()),
        })
        .await?;
        sent += 1;
    }
    if sent > 0 {
        eprintln!(
            "sent {sent} task folder(s), {:.1} MiB",
            bytes as f64 / (1024.0 * 1024.0)
        );
    }
    Ok(Ok(()))
}
