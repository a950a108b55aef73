//! A task's image: its `docker_image`, or `environment/` built once per host and cached by
//! the folder's digest. Every lane runs its own driver process, so builds are coordinated
//! through lock files in the worker's state folder: one build per digest at a time, at most
//! `--max-builds` builds at once, and a failed build is remembered per digest so later
//! attempts fail at once instead of building again.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use lanes_common::spec::harbor::HarborTask;

use super::runtime::Runtime;

/// The repository of images built from task folders.
pub const BUILT_REPO: &str = "localhost/lanes-env";

#[derive(Debug, Clone)]
pub struct Images {
    runtime: Runtime,
    state_dir: PathBuf,
    max_builds: usize,
}

/// The digest of a task's `environment/` folder, from the task's file manifest.
pub fn environment_digest(task: &HarborTask) -> String {
    let mut h = Sha256::new();
    for (path, digest) in task.files.range("environment/".to_owned()..) {
        if !path.starts_with("environment/") {
            break;
        }
        h.update(path.as_bytes());
        h.update([0]);
        h.update(digest.as_bytes());
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

impl Images {
    pub fn new(runtime: Runtime, state_dir: PathBuf, max_builds: usize) -> Self {
        Self {
            runtime,
            state_dir,
            max_builds: max_builds.max(1),
        }
    }

    /// The image to run for `task`: pulled or built if it is not here yet.
    pub async fn image_for(&self, task: &HarborTask, task_dir: &Path) -> Result<String, String> {
        if let Some(image) = &task.docker_image {
            if !self.runtime.image_exists(image).await {
                let limit = Duration::from_secs_f64(task.build_timeout_s);
                let pull = tokio::process::Command::new(self.runtime.program())
                    .current_dir(&self.state_dir)
                    .args(["pull", "-q", image])
                    .kill_on_drop(true)
                    .output();
                match tokio::time::timeout(limit, pull).await {
                    Ok(Ok(o)) if o.status.success() => {}
                    Ok(Ok(o)) => {
                        return Err(format!(
                            "image {image} is not here and could not be pulled: {}",
                            super::runtime::tail(&String::from_utf8_lossy(&o.stderr), 2000)
                        ));
                    }
                    Ok(Err(e)) => {
                        return Err(format!("cannot run {}: {e}", self.runtime.program()));
                    }
                    Err(_) => {
                        return Err(format!(
                            "pulling {image} took longer than build_timeout_sec ({}s)",
                            task.build_timeout_s
                        ));
                    }
                }
            }
            return Ok(image.clone());
        }
        let digest = environment_digest(task);
        let tag = format!("{BUILT_REPO}:{}", &digest[..32]);
        let failed = self.state_dir.join(format!("failed-{digest}"));
        if let Ok(reason) = std::fs::read_to_string(&failed) {
            return Err(format!(
                "an earlier build of this environment failed: {reason}"
            ));
        }
        if self.runtime.image_exists(&tag).await {
            return Ok(tag);
        }
        std::fs::create_dir_all(&self.state_dir).map_err(|e| e.to_string())?;
        // One build of this digest at a time: a lane that waited finds the image built.
        let _same = self.lock(&format!("build-{digest}.lock")).await?;
        if let Ok(reason) = std::fs::read_to_string(&failed) {
            return Err(format!(
                "an earlier build of this environment failed: {reason}"
            ));
        }
        if self.runtime.image_exists(&tag).await {
            return Ok(tag);
        }
        let _slot = self.slot().await?;
        let limit = Duration::from_secs_f64(task.build_timeout_s);
        match self
            .runtime
            .build(&task_dir.join("environment"), &tag, limit)
            .await
        {
            Ok(()) => Ok(tag),
            Err(e) => {
                let reason = e.to_string();
                let _ = std::fs::write(&failed, &reason);
                Err(format!("building the task's environment failed: {reason}"))
            }
        }
    }

    /// An exclusive lock on a file of the state folder, held until the file is dropped.
    async fn lock(&self, name: &str) -> Result<File, String> {
        let path = self.state_dir.join(name);
        tokio::task::spawn_blocking(move || {
            let f = open_lock_file(&path)?;
            f.lock().map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(f)
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// One of the host's build slots: a free one, or else the first to come free.
    async fn slot(&self) -> Result<File, String> {
        for i in 0..self.max_builds {
            let f = open_lock_file(&self.state_dir.join(format!("build-slot-{i}.lock")))?;
            if f.try_lock().is_ok() {
                return Ok(f);
            }
        }
        let pick = std::process::id() as usize % self.max_builds;
        self.lock(&format!("build-slot-{pick}.lock")).await
    }
}

/// A lock file of the state folder, created when missing and never truncated.
fn open_lock_file(path: &Path) -> Result<File, String> {
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))
}
