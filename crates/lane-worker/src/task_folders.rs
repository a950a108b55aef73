//! Where a lane finds a task's folder (`[tasks] harbor`), by the digest in its payload: in
//! place on this host (`lanes run` reads its campaign's folders), or fetched from the
//! coordinator once per worker and cached under the worker's outbox. A folder is used only
//! once its digest has been recomputed and matches: a cached copy that changed on disk is
//! fetched again, and a fetched one that does not match is refused.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use lanes_common::spec::bundle::{self, Bundle};

use crate::worker::link::CoordinatorLink;

/// The folder under the outbox that caches fetched task folders.
pub const CACHE_DIR: &str = "task-folders";

/// Why a task folder is not there for an attempt (its boot fails, and is retried).
#[derive(Debug, thiserror::Error)]
pub enum FolderError {
    #[error("task folder {0}: not on this host, and this worker fetches no folders")]
    Unknown(String),
    #[error("task folder {digest}: cannot fetch it from the coordinator: {reason}")]
    Fetch { digest: String, reason: String },
    #[error("task folder {digest}: the coordinator sent a folder whose digest is {got}: refused")]
    Mismatch { digest: String, got: String },
    #[error("task folder {digest}: {reason}")]
    Local { digest: String, reason: String },
}

/// The task folders of one worker process.
pub struct TaskFolders {
    in_place: BTreeMap<String, PathBuf>,
    /// Where fetched folders are kept, and where they come from.
    fetched: Option<(PathBuf, Arc<dyn CoordinatorLink>)>,
    /// Folders checked against their digest by this process.
    checked: Mutex<HashSet<String>>,
    /// One fetch per digest at a time: lanes that need the same folder wait for it.
    fetching: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for TaskFolders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskFolders")
            .field("in_place", &self.in_place.len())
            .field("cache", &self.fetched.as_ref().map(|(d, _)| d))
            .finish()
    }
}

impl TaskFolders {
    /// Folders on this host only.
    pub fn in_place(in_place: BTreeMap<String, PathBuf>) -> Self {
        Self {
            in_place,
            fetched: None,
            checked: Mutex::default(),
            fetching: Mutex::default(),
        }
    }

    /// Folders on this host, and the rest fetched through `link` into `cache`. Half-written
    /// folders an earlier process left (it was killed mid-write) are removed.
    pub fn fetching(
        in_place: BTreeMap<String, PathBuf>,
        cache: PathBuf,
        link: Arc<dyn CoordinatorLink>,
    ) -> Self {
        if let Ok(entries) = std::fs::read_dir(&cache) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(".partial-") {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        Self {
            fetched: Some((cache, link)),
            ..Self::in_place(in_place)
        }
    }

    /// The folder with this digest, fetched first if need be.
    pub async fn folder(&self, digest: &str) -> Result<PathBuf, FolderError> {
        let local = |reason: String| FolderError::Local {
            digest: digest.to_owned(),
            reason,
        };
        if let Some(p) = self.in_place.get(digest) {
            return Ok(p.clone());
        }
        let Some((cache, link)) = &self.fetched else {
            return Err(FolderError::Unknown(digest.to_owned()));
        };
        // The digest comes from a payload: checked before it becomes a path.
        bundle::check_digest(digest).map_err(|e| local(e.to_string()))?;
        let hex = digest.trim_start_matches("sha256:");
        let dir = cache.join(hex);
        let gate = {
            let mut m = self.fetching.lock().unwrap_or_else(PoisonError::into_inner);
            m.entry(digest.to_owned()).or_default().clone()
        };
        let _one = gate.lock().await;
        if self.is_checked(digest) {
            return Ok(dir);
        }
        if dir.exists() {
            let (d, want) = (dir.clone(), digest.to_owned());
            let same = tokio::task::spawn_blocking(move || {
                Bundle::read_dir(&d).is_ok_and(|b| b.digest() == want)
            })
            .await
            .unwrap_or(false);
            if same {
                self.mark_checked(digest);
                return Ok(dir);
            }
            tracing::warn!(%digest, "a cached task folder changed on disk: fetching it again");
            let d = dir.clone();
            tokio::task::spawn_blocking(move || std::fs::remove_dir_all(d))
                .await
                .map_err(|e| local(e.to_string()))?
                .map_err(|e| local(format!("cannot remove the changed copy: {e}")))?;
        }
        let encoded = link
            .fetch_bundle(digest)
            .await
            .map_err(|reason| FolderError::Fetch {
                digest: digest.to_owned(),
                reason,
            })?;
        let (cache, want) = (cache.clone(), digest.to_owned());
        let written = tokio::task::spawn_blocking(move || write_checked(&cache, &want, &encoded))
            .await
            .map_err(|e| local(e.to_string()))??;
        self.mark_checked(digest);
        tracing::info!(%digest, folder = %written.display(), "task folder fetched from the coordinator");
        Ok(written)
    }

    /// The folder with this digest if it is here and checked already (no fetch, no read).
    pub fn known(&self, digest: &str) -> Option<PathBuf> {
        if let Some(p) = self.in_place.get(digest) {
            return Some(p.clone());
        }
        let (cache, _) = self.fetched.as_ref()?;
        self.is_checked(digest)
            .then(|| cache.join(digest.trim_start_matches("sha256:")))
    }

    fn is_checked(&self, digest: &str) -> bool {
        let c = self.checked.lock().unwrap_or_else(PoisonError::into_inner);
        c.contains(digest)
    }

    fn mark_checked(&self, digest: &str) {
        let mut c = self.checked.lock().unwrap_or_else(PoisonError::into_inner);
        c.insert(digest.to_owned());
    }
}

/// Decodes a fetched bundle, checks its digest, and writes it under `cache` (half-written
/// under a `.partial-` name, then renamed, so a kill leaves no folder that looks whole).
fn write_checked(cache: &Path, digest: &str, encoded: &[u8]) -> Result<PathBuf, FolderError> {
    use prost::Message as _;
    let local = |reason: String| FolderError::Local {
        digest: digest.to_owned(),
        reason,
    };
    let wire = lanes_common::proto::TaskBundle::decode(encoded)
        .map_err(|e| local(format!("the coordinator sent a malformed folder: {e}")))?;
    let b = Bundle::try_from(wire)
        .map_err(|e| local(format!("the coordinator sent a folder Lanes refuses: {e}")))?;
    let got = b.digest();
    if got != digest {
        return Err(FolderError::Mismatch {
            digest: digest.to_owned(),
            got,
        });
    }
    crate::private_fs::create_dir(cache).map_err(|e| local(e.to_string()))?;
    let hex = digest.trim_start_matches("sha256:");
    let partial = cache.join(format!(".partial-{hex}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    b.write_new_dir(&partial)
        .map_err(|e| local(format!("cannot write it: {e}")))?;
    let dir = cache.join(hex);
    std::fs::rename(&partial, &dir).map_err(|e| local(format!("cannot keep it: {e}")))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::link::{LinkFuture, LinkSession};
    use lanes_common::proto as pb;
    use lanes_common::spec::bundle::BundleFile;
    use prost::Message as _;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A coordinator that answers every fetch with the same folder, counting the fetches.
    struct Serves(Vec<u8>, AtomicUsize);

    impl CoordinatorLink for Serves {
        fn replicas(&self) -> Vec<String> {
            vec!["serves".to_owned()]
        }
        fn open(&self, _: usize, _: pb::Register) -> LinkFuture<'_, Result<LinkSession, String>> {
            Box::pin(async { Err("no sessions here".to_owned()) })
        }
        fn fetch_bundle<'a>(&'a self, _: &'a str) -> LinkFuture<'a, Result<Vec<u8>, String>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(self.0.clone()) })
        }
    }

    fn bundle(text: &str) -> Bundle {
        Bundle::new(vec![BundleFile {
            path: "tests/test.sh".to_owned(),
            executable: true,
            data: text.as_bytes().to_vec(),
        }])
        .unwrap()
    }

    #[tokio::test]
    async fn a_folder_is_fetched_once_checked_and_fetched_again_when_changed_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let b = bundle("echo 1 > /logs/verifier/reward.txt\n");
        let digest = b.digest();
        let link = Arc::new(Serves(
            pb::TaskBundle::from(b.clone()).encode_to_vec(),
            AtomicUsize::new(0),
        ));
        let cache = dir.path().join("cache");
        let folders = TaskFolders::fetching(BTreeMap::new(), cache.clone(), link.clone());
        assert!(folders.known(&digest).is_none());
        let got = folders.folder(&digest).await.unwrap();
        assert_eq!(Bundle::read_dir(&got).unwrap(), b);
        assert_eq!(folders.known(&digest), Some(got.clone()));
        folders.folder(&digest).await.unwrap();
        assert_eq!(link.1.load(Ordering::SeqCst), 1, "fetched once");

        // A later worker process finds it cached; a copy changed on disk is fetched again.
        std::fs::write(got.join("tests/test.sh"), "echo 1\n").unwrap();
        let later = TaskFolders::fetching(BTreeMap::new(), cache, link.clone());
        let again = later.folder(&digest).await.unwrap();
        assert_eq!(Bundle::read_dir(&again).unwrap(), b);
        assert_eq!(link.1.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_fetched_folder_that_is_not_the_one_named_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let wanted = bundle("echo 1\n").digest();
        let sent = bundle("echo 0\n");
        let link = Arc::new(Serves(
            pb::TaskBundle::from(sent.clone()).encode_to_vec(),
            AtomicUsize::new(0),
        ));
        let cache = dir.path().join("cache");
        let folders = TaskFolders::fetching(BTreeMap::new(), cache.clone(), link);
        let e = folders.folder(&wanted).await.unwrap_err();
        assert!(
            matches!(e, FolderError::Mismatch { ref got, .. } if *got == sent.digest()),
            "{e}"
        );
        assert!(!cache.join(wanted.trim_start_matches("sha256:")).exists());
        // A digest that would be a path elsewhere never becomes one.
        let e = folders.folder("sha256:../../etc").await.unwrap_err();
        assert!(matches!(e, FolderError::Local { .. }), "{e}");
        // Without a coordinator, only folders on this host.
        let here = TaskFolders::in_place(BTreeMap::new());
        assert!(matches!(
            here.folder(&wanted).await,
            Err(FolderError::Unknown(_))
        ));
    }
}
