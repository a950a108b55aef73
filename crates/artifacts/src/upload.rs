//! Uploading an attempt's folder: every regular file, then the manifest. Large files go up
//! in parts, read a chunk at a time, so no file is ever held whole in memory.

use std::path::{Path, PathBuf};

use object_store::path::Path as ObjPath;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use lanes_common::ids::AttemptTag;

use crate::manifest::{MANIFEST, Manifest, ManifestFile, hex};
use crate::{ArtifactStore, StoreError};

/// Files up to this size go up in one request; larger ones in parts of this size.
const PART: usize = 8 << 20;
/// Parts of one file in flight at once (so at most this many parts are in memory).
const PARTS_IN_FLIGHT: usize = 2;
/// How much of a file is read at a time.
const READ: usize = 1 << 20;

/// What an upload left in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    pub manifest: Manifest,
    /// The manifest's URI, then each file's, in path order.
    pub uris: Vec<String>,
    /// Files not uploaded, each with why (over the size limit, a name that is not text).
    pub skipped: Vec<String>,
}

impl ArtifactStore {
    /// Uploads the attempt folder `dir` for `tag`, then its manifest. Safe to repeat: an
    /// upload cut short (a crash, a store that went away) is done again whole, and the
    /// manifest, written last, is what says it is complete.
    pub async fn upload_attempt(
        &self,
        dir: &Path,
        tag: &AttemptTag,
    ) -> Result<Uploaded, StoreError> {
        let at = self.location(tag);
        let max = self.options.max_file_bytes;
        let root = dir.to_owned();
        let (files, mut skipped) = tokio::task::spawn_blocking(move || list_files(&root))
            .await
            .map_err(|e| StoreError::Local(e.to_string()))?
            .map_err(|e| StoreError::Local(e.to_string()))?;
        let mut manifest = Manifest::default();
        let mut uris = Vec::with_capacity(files.len() + 1);
        for (rel, path, size) in files {
            if size > max {
                skipped.push(format!(
                    "{rel}: {size} bytes is over the artifact store's limit of {max} bytes per file; not uploaded"
                ));
                continue;
            }
            let object = at.object(&rel);
            let (size, sha256) = match self.put_file(&path, &object, size).await {
                Ok(done) => done,
                // Gone since it was listed (a driver's temp file): nothing to keep.
                Err(StoreError::Local(e)) if !path.exists() => {
                    tracing::debug!(file = %rel, error = %e, "an artifact vanished before its upload");
                    continue;
                }
                Err(e) => return Err(e),
            };
            uris.push(self.uri(&object));
            manifest.files.push(ManifestFile {
                path: rel,
                size,
                sha256,
            });
        }
        let object = at.object(MANIFEST);
        let body =
            serde_json::to_vec_pretty(&manifest).map_err(|e| StoreError::Local(e.to_string()))?;
        self.store
            .put(&object, PutPayload::from(body))
            .await
            .map_err(|e| StoreError::from_store(e, true))?;
        uris.insert(0, self.uri(&object));
        Ok(Uploaded {
            manifest,
            uris,
            skipped,
        })
    }

    /// Uploads one file, hashing what it sends; answers its size and SHA-256.
    async fn put_file(
        &self,
        path: &Path,
        object: &ObjPath,
        listed: u64,
    ) -> Result<(u64, String), StoreError> {
        let local = |e: std::io::Error| StoreError::Local(format!("{}: {e}", path.display()));
        let remote = |e| StoreError::from_store(e, true);
        let mut file = tokio::fs::File::open(path).await.map_err(local)?;
        let mut hash = Sha256::new();
        if listed <= PART as u64 {
            let mut body = Vec::with_capacity(listed as usize);
            // Bounded: a file that grew past a part since it was listed goes up in parts.
            (&mut file)
                .take(PART as u64 + 1)
                .read_to_end(&mut body)
                .await
                .map_err(local)?;
            if body.len() <= PART {
                hash.update(&body);
                let size = body.len() as u64;
                self.store
                    .put(object, PutPayload::from(body))
                    .await
                    .map_err(remote)?;
                return Ok((size, hex(&hash.finalize())));
            }
            // Start over in parts.
            file = tokio::fs::File::open(path).await.map_err(local)?;
            hash = Sha256::new();
        }
        let upload = self.store.put_multipart(object).await.map_err(remote)?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
        let mut buf = vec![0u8; READ];
        let mut size = 0u64;
        let sent: Result<(), StoreError> = async {
            loop {
                let n = file.read(&mut buf).await.map_err(local)?;
                if n == 0 {
                    return Ok(());
                }
                hash.update(&buf[..n]);
                size += n as u64;
                if size > self.options.max_file_bytes {
                    return Err(StoreError::Refused(format!(
                        "{}: grew past the artifact store's limit of {} bytes per file while it was uploaded",
                        path.display(),
                        self.options.max_file_bytes
                    )));
                }
                writer.wait_for_capacity(PARTS_IN_FLIGHT).await.map_err(remote)?;
                writer.write(&buf[..n]);
            }
        }
        .await;
        match sent {
            Ok(()) => {
                writer.finish().await.map_err(remote)?;
                Ok((size, hex(&hash.finalize())))
            }
            Err(e) => {
                // Parts already sent are dropped by the store, not left to be billed.
                let _ = writer.abort().await;
                Err(e)
            }
        }
    }
}

/// A file to upload: its path relative to the attempt folder, its path, its size.
type Listed = (String, PathBuf, u64);

/// Every regular file under `root` as (relative path, path, size), in path order, and the
/// entries that cannot be uploaded, each with why. Symbolic links are never followed (the
/// worker removes them before this runs), and the worker's own temporary files are skipped.
fn list_files(root: &Path) -> std::io::Result<(Vec<Listed>, Vec<String>)> {
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    let mut stack = vec![(root.to_owned(), String::new())];
    while let Some((dir, rel_dir)) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir != root => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                skipped.push(format!(
                    "{rel_dir}{}: a file name that is not UTF-8; not uploaded",
                    entry.file_name().to_string_lossy()
                ));
                continue;
            };
            let rel = format!("{rel_dir}{name}");
            let kind = entry.file_type()?;
            if kind.is_dir() {
                stack.push((entry.path(), format!("{rel}/")));
            } else if kind.is_file() {
                if name.ends_with(".pending") || name.starts_with(".scrub-") {
                    continue;
                }
                if rel == MANIFEST {
                    skipped.push(format!(
                        "{MANIFEST}: the name of the store's own manifest; not uploaded"
                    ));
                    continue;
                }
                if !Manifest::is_safe_path(&rel) {
                    skipped.push(format!(
                        "{rel:?}: a file name with control characters; not uploaded"
                    ));
                    continue;
                }
                files.push((rel, entry.path(), entry.metadata()?.len()));
            }
        }
    }
    files.sort();
    Ok((files, skipped))
}
