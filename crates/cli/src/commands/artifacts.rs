//! `lanes artifacts ID TRIAL [--attempt N] --to DIR`: an attempt's files from the artifact
//! store, downloaded through the coordinator and each checked against the attempt's manifest
//! (size and SHA-256) before it gets its name under DIR.

use std::io::Write;
use std::path::{Path, PathBuf};

use lanes_artifacts::Manifest;
use lanes_common::proto as pb;
use sha2::{Digest, Sha256};

use super::Done;
use crate::client::Client;
use crate::exit::Code;

pub(super) async fn run(
    c: &mut Client,
    id: String,
    trial: String,
    attempt: Option<u32>,
    to: &Path,
) -> Done {
    let listed = c
        .artifacts(pb::ArtifactsRequest {
            campaign: id.clone(),
            trial_id: trial.clone(),
            attempt: attempt.unwrap_or(0),
        })
        .await?
        .into_inner();
    // Paths come from the store: each must stay under DIR before it becomes a file name.
    if let Some(bad) = listed
        .files
        .iter()
        .find(|f| !Manifest::is_safe_path(&f.path))
    {
        eprintln!(
            "lanes: the manifest names an unsafe path {:?}; nothing was written",
            bad.path
        );
        return Ok(Code::Refused);
    }
    let mut bad = 0;
    let mut bytes = 0u64;
    for f in &listed.files {
        let dest = to.join(&f.path);
        match download(c, &id, &trial, listed.attempt, f, &dest).await {
            Ok(()) => bytes += f.size,
            Err(Fetch::Status(s)) => return Err(s),
            Err(Fetch::Local(e)) => {
                eprintln!("lanes: {}: {e}", dest.display());
                return Ok(Code::Failure);
            }
            Err(Fetch::Mismatch(why)) => {
                eprintln!("lanes: {}: {why}; not kept", f.path);
                bad += 1;
            }
        }
    }
    if bad > 0 {
        eprintln!(
            "lanes: {bad} of {} files did not match the manifest",
            listed.files.len()
        );
        return Ok(Code::Failure);
    }
    println!(
        "{id}/{trial} attempt {}: {} files ({bytes} bytes) in {}, checked against {}",
        listed.attempt,
        listed.files.len(),
        to.display(),
        listed.manifest_uri
    );
    Ok(Code::Ok)
}

enum Fetch {
    Status(tonic::Status),
    Local(std::io::Error),
    Mismatch(String),
}

/// Streams one file to `<dest>.partial`, then renames it to `dest` once its size and digest
/// are the manifest's.
async fn download(
    c: &mut Client,
    id: &str,
    trial: &str,
    attempt: u32,
    f: &pb::ArtifactFile,
    dest: &Path,
) -> Result<(), Fetch> {
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir).map_err(Fetch::Local)?;
    }
    let partial = PathBuf::from(format!("{}.partial", dest.display()));
    let mut out = std::fs::File::create(&partial).map_err(Fetch::Local)?;
    let mut stream = c
        .read_artifact(pb::ReadArtifactRequest {
            campaign: id.to_owned(),
            trial_id: trial.to_owned(),
            attempt,
            path: f.path.clone(),
        })
        .await
        .map_err(Fetch::Status)?
        .into_inner();
    let (mut hash, mut size) = (Sha256::new(), 0u64);
    let got = async {
        while let Some(chunk) = stream.message().await.map_err(Fetch::Status)? {
            size += chunk.data.len() as u64;
            if size > f.size {
                return Err(Fetch::Mismatch(format!(
                    "more than the manifest's {} bytes",
                    f.size
                )));
            }
            hash.update(&chunk.data);
            out.write_all(&chunk.data).map_err(Fetch::Local)?;
        }
        out.sync_all().map_err(Fetch::Local)?;
        let digest: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        if size != f.size || digest != f.sha256 {
            return Err(Fetch::Mismatch(format!(
                "{size} bytes with SHA-256 {digest}, the manifest says {} bytes with {}",
                f.size, f.sha256
            )));
        }
        std::fs::rename(&partial, dest).map_err(Fetch::Local)
    }
    .await;
    if got.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    got
}
