//! Opening a store from its URL, and where an attempt's objects go in it.

use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::path::{Path as ObjPath, PathPart};

use lanes_common::ids::{AttemptTag, CampaignId};

use crate::StoreError;

/// Bounds of a store's use.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// A file over this many bytes is not uploaded; the row says so.
    pub max_file_bytes: u64,
    /// How long one request may take before it is abandoned and retried (a part of a large
    /// file is one request).
    pub request_timeout: Duration,
    /// Settings by their environment variable names (`AWS_ENDPOINT_URL`, …), applied over
    /// the environment's: for a process that serves several stores, and for tests.
    pub settings: Vec<(String, String)>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            // S3's largest single object is 5 TiB; a benchmark attempt that leaves more than
            // 5 GiB in one file is almost surely a runaway log.
            max_file_bytes: 5 << 30,
            request_timeout: Duration::from_secs(60),
            settings: Vec::new(),
        }
    }
}

/// An object store and the prefix Lanes writes under.
#[derive(Clone)]
pub struct ArtifactStore {
    pub(crate) store: Arc<dyn ObjectStore>,
    /// What object paths are appended to, to name an object as a URI: `s3://bucket`, or
    /// `file:///srv/artifacts` for a local mount.
    root_uri: String,
    /// The prefix inside the bucket (empty for none).
    prefix: ObjPath,
    pub(crate) options: StoreOptions,
}

impl std::fmt::Debug for ArtifactStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactStore")
            .field("url", &self.url())
            .finish()
    }
}

/// Where one attempt's objects are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// `<prefix>/<campaign>/<trial_id>/a<attempt>`.
    pub(crate) dir: ObjPath,
}

impl ArtifactStore {
    /// Opens the store a URL names: `s3://bucket[/prefix]`, `gs://bucket[/prefix]`,
    /// `az://container[/prefix]` or `file:///path`. Credentials, regions and endpoints come
    /// from the cloud's standard environment variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
    /// Nothing is contacted yet.
    pub fn open(url: &str, options: StoreOptions) -> Result<Self, StoreError> {
        // The cloud clients' TLS is rustls without a built-in provider: ring, as everywhere
        // else in Lanes, unless the process installed one already.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let bad = |why: &str| StoreError::Refused(format!("artifact store URL {url:?}: {why}"));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("expected s3://, gs://, az:// or file://"))?;
        let timeout = format!("{}s", options.request_timeout.as_secs().max(1));
        let built = |e: object_store::Error| bad(&e.to_string());
        let (store, root_uri, prefix): (Arc<dyn ObjectStore>, String, &str) = match scheme {
            "file" => {
                let path = std::path::Path::new(rest);
                if !path.is_absolute() {
                    return Err(bad("a file:// URL needs an absolute path"));
                }
                std::fs::create_dir_all(path).map_err(|e| bad(&e.to_string()))?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(path)
                    .map_err(built)?
                    .with_automatic_cleanup(true);
                (
                    Arc::new(fs),
                    format!("file://{}", rest.trim_end_matches('/')),
                    "",
                )
            }
            "s3" | "gs" | "az" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(bad("no bucket"));
                }
                let store = cloud(scheme, bucket, &timeout, &options.settings).map_err(built)?;
                (store, format!("{scheme}://{bucket}"), prefix)
            }
            _ => return Err(bad("expected s3://, gs://, az:// or file://")),
        };
        let prefix = ObjPath::parse(prefix.trim_matches('/')).map_err(|e| bad(&e.to_string()))?;
        Ok(Self {
            store,
            root_uri,
            prefix,
            options,
        })
    }

    /// The store's URL, as a user would give it (no credentials are ever part of it).
    pub fn url(&self) -> String {
        match self.prefix.as_ref() {
            "" => self.root_uri.clone(),
            p => format!("{}/{p}", self.root_uri),
        }
    }

    /// Where an attempt's objects go. Ids are validated when they are made (no `/`, no
    /// `..`), so each is one path part.
    pub fn location(&self, tag: &AttemptTag) -> Location {
        let attempt = format!("a{}", tag.token.attempt);
        let parts = [
            PathPart::from(tag.campaign.as_str()),
            PathPart::from(tag.token.trial_id.as_str()),
            PathPart::from(attempt.as_str()),
        ];
        Location {
            dir: self.campaign_dir_parts(parts),
        }
    }

    /// Every object of a campaign is under this path.
    pub(crate) fn campaign_dir(&self, campaign: &CampaignId) -> ObjPath {
        self.campaign_dir_parts([PathPart::from(campaign.as_str())])
    }

    fn campaign_dir_parts<'a>(&'a self, parts: impl IntoIterator<Item = PathPart<'a>>) -> ObjPath {
        self.prefix.parts().chain(parts).collect()
    }

    /// The URI naming an object (`s3://bucket/prefix/…`), as rows list it.
    pub fn uri(&self, path: &ObjPath) -> String {
        format!("{}/{}", self.root_uri, path)
    }

    /// The URI of the file at `rel` (`/`-separated) of an attempt.
    pub fn uri_of(&self, at: &Location, rel: &str) -> String {
        self.uri(&at.object(rel))
    }
}

impl Location {
    /// The object of a file at `rel` (a `/`-separated path relative to the attempt folder).
    pub(crate) fn object(&self, rel: &str) -> ObjPath {
        let mut parts: Vec<PathPart<'_>> = self.dir.parts().collect();
        parts.extend(rel.split('/').map(PathPart::from));
        parts.into_iter().collect()
    }
}

/// A cloud store for `bucket`, configured from the environment, with bounded requests and
/// few retries of its own: the caller keeps the work and tries again later, durably.
fn cloud(
    scheme: &str,
    bucket: &str,
    timeout: &str,
    settings: &[(String, String)],
) -> Result<Arc<dyn ObjectStore>, object_store::Error> {
    use object_store::ClientConfigKey as K;
    let retry = object_store::RetryConfig {
        max_retries: 2,
        retry_timeout: Duration::from_secs(20),
        ..Default::default()
    };
    // The environment's own settings (and the given ones) win over these defaults.
    let env_has =
        |name: &str| std::env::var_os(name).is_some() || settings.iter().any(|(k, _)| k == name);
    // The given settings, for keys the builder knows by that name (as `from_env` reads them).
    let given = |prefix: &str| {
        settings
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect::<Vec<_>>()
    };
    Ok(match scheme {
        "s3" => {
            use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey as C};
            let mut b = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_retry(retry);
            if !env_has("AWS_TIMEOUT") {
                b = b.with_config(C::Client(K::Timeout), timeout);
            }
            if !env_has("AWS_CONNECT_TIMEOUT") {
                b = b.with_config(C::Client(K::ConnectTimeout), "5s");
            }
            for (k, v) in given("AWS_") {
                b = b.with_config(k.parse()?, v);
            }
            Arc::new(b.build()?)
        }
        "gs" => {
            use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey as C};
            let mut b = GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(bucket)
                .with_retry(retry);
            if !env_has("GOOGLE_TIMEOUT") {
                b = b.with_config(C::Client(K::Timeout), timeout);
            }
            for (k, v) in given("GOOGLE_") {
                b = b.with_config(k.parse()?, v);
            }
            Arc::new(b.build()?)
        }
        _ => {
            use object_store::azure::{AzureConfigKey as C, MicrosoftAzureBuilder};
            let mut b = MicrosoftAzureBuilder::from_env()
                .with_container_name(bucket)
                .with_retry(retry);
            if !env_has("AZURE_TIMEOUT") {
                b = b.with_config(C::Client(K::Timeout), timeout);
            }
            for (k, v) in given("AZURE_") {
                b = b.with_config(k.parse()?, v);
            }
            Arc::new(b.build()?)
        }
    })
}
