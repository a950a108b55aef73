//! Reading an attempt back (its manifest and files) and deleting a campaign's objects.

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use object_store::ObjectStoreExt;

use lanes_common::ids::{AttemptTag, CampaignId};

use crate::manifest::{MANIFEST, Manifest};
use crate::{ArtifactStore, StoreError};

/// The largest manifest read back (about 100,000 files).
const MAX_MANIFEST_BYTES: u64 = 16 << 20;

impl ArtifactStore {
    /// The manifest of an uploaded attempt; [`StoreError::NotFound`] when the attempt was
    /// never uploaded whole. A manifest naming an unsafe path is refused, since its paths
    /// become local file names when downloaded.
    pub async fn manifest(&self, tag: &AttemptTag) -> Result<Manifest, StoreError> {
        let object = self.location(tag).object(MANIFEST);
        // Bounded: a driver decides how many files an attempt has.
        let bytes = self.read_object(&object, MAX_MANIFEST_BYTES).await?;
        let manifest: Manifest = serde_json::from_slice(&bytes).map_err(|e| {
            StoreError::Refused(format!("{}: not a manifest: {e}", self.uri(&object)))
        })?;
        if let Some(f) = manifest
            .files
            .iter()
            .find(|f| !Manifest::is_safe_path(&f.path))
        {
            return Err(StoreError::Refused(format!(
                "{}: names an unsafe path {:?}",
                self.uri(&object),
                f.path
            )));
        }
        Ok(manifest)
    }

    /// A file of an attempt (`rel` as its manifest names it), whole, if it is at most
    /// `max_bytes` long.
    pub async fn read(
        &self,
        tag: &AttemptTag,
        rel: &str,
        max_bytes: u64,
    ) -> Result<Vec<u8>, StoreError> {
        if !Manifest::is_safe_path(rel) {
            return Err(StoreError::Refused(format!(
                "{rel:?} is not a plain relative path"
            )));
        }
        self.read_object(&self.location(tag).object(rel), max_bytes)
            .await
    }

    /// An object whole, refused past `max_bytes` (read no further than that).
    async fn read_object(
        &self,
        object: &object_store::path::Path,
        max_bytes: u64,
    ) -> Result<Vec<u8>, StoreError> {
        let got = self
            .store
            .get(object)
            .await
            .map_err(|e| StoreError::from_store(e, false))?;
        let mut chunks = got.into_stream();
        let mut out = Vec::new();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| StoreError::from_store(e, false))?;
            if (out.len() + chunk.len()) as u64 > max_bytes {
                return Err(StoreError::Refused(format!(
                    "{}: larger than {max_bytes} bytes",
                    self.uri(object)
                )));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }

    /// A file of an attempt as a stream of chunks, never held whole.
    pub async fn stream(
        &self,
        tag: &AttemptTag,
        rel: &str,
    ) -> Result<BoxStream<'static, Result<bytes::Bytes, StoreError>>, StoreError> {
        if !Manifest::is_safe_path(rel) {
            return Err(StoreError::Refused(format!(
                "{rel:?} is not a plain relative path"
            )));
        }
        let object = self.location(tag).object(rel);
        let got = self
            .store
            .get(&object)
            .await
            .map_err(|e| StoreError::from_store(e, false))?;
        Ok(got
            .into_stream()
            .map(|c| c.map_err(|e| StoreError::from_store(e, false)))
            .boxed())
    }

    /// Deletes every object of a campaign; answers how many there were.
    pub async fn delete_campaign(&self, campaign: &CampaignId) -> Result<u64, StoreError> {
        let dir = self.campaign_dir(campaign);
        let listed = self
            .store
            .list(Some(&dir))
            .map(|m| m.map(|m| m.location))
            .boxed();
        let mut deleted = 0u64;
        let mut gone = self.store.delete_stream(listed);
        while let Some(d) = gone.next().await {
            match d {
                Ok(_) => deleted += 1,
                // Deleted meanwhile by another delete: the same end.
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(StoreError::from_store(e, false)),
            }
        }
        Ok(deleted)
    }
}
