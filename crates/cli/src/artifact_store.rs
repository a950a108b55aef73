//! `--artifact-store`: the flags that name an object store for attempts' files, shared by
//! `lanes worker` and `lanes run` (`lanes coordinator` takes the URL alone: it reads back and
//! deletes, and uploads nothing).

use anyhow::Context;
use lanes_artifacts::{ArtifactStore, StoreOptions};

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ArtifactStoreArgs {
    /// Upload each published attempt's folder here before its outcome is sent:
    /// s3://bucket/prefix, gs://bucket/prefix, az://container/prefix or file:///path. The
    /// row then lists the objects. Credentials and endpoints come from the cloud's standard
    /// environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
    /// AWS_ENDPOINT_URL, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_ACCOUNT_NAME, ...),
    /// which no driver ever sees.
    #[arg(long, env = "LANES_ARTIFACT_STORE")]
    pub(crate) artifact_store: Option<String>,
    /// A file over this many MiB is not uploaded; the attempt's row says so.
    #[arg(long, env = "LANES_ARTIFACT_MAX_FILE_MB", default_value_t = 5120)]
    pub(crate) artifact_max_file_mb: u64,
}

impl ArtifactStoreArgs {
    /// The store, if one is named; a malformed URL is an error that says what is expected.
    pub(crate) fn open(&self) -> anyhow::Result<Option<ArtifactStore>> {
        open(self.artifact_store.as_deref(), self.artifact_max_file_mb)
    }
}

/// The store `url` names, if any; a malformed URL is an error that says what is expected.
pub(crate) fn open(url: Option<&str>, max_file_mb: u64) -> anyhow::Result<Option<ArtifactStore>> {
    let Some(url) = url.map(str::trim).filter(|u| !u.is_empty()) else {
        return Ok(None);
    };
    let options = StoreOptions {
        max_file_bytes: max_file_mb.saturating_mul(1 << 20),
        ..StoreOptions::default()
    };
    let store = ArtifactStore::open(url, options).context("--artifact-store")?;
    Ok(Some(store))
}
