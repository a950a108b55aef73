//! The child's stderr: appended to the file the lane set last, with its tail kept in memory
//! for error messages.

use std::io;
use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStderr;

use super::state::{Shared, lock};

/// How much of the child's stderr is kept in memory for error messages.
pub const STDERR_TAIL_BYTES: usize = 4096;

/// The stderr copier task: runs until the child's stderr closes.
pub(super) async fn copy_stderr(shared: Arc<Shared>, mut stderr: ChildStderr) {
    let mut buf = vec![0u8; 8192];
    let mut generation = 0;
    let mut file: Option<tokio::fs::File> = None;
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(driver = %shared.program, "cannot read the driver's stderr: {e}");
                break;
            }
        };
        let chunk = &buf[..n];
        let switch_to = {
            let mut st = lock(&shared.stderr);
            st.tail.extend_from_slice(chunk);
            let excess = st.tail.len().saturating_sub(STDERR_TAIL_BYTES);
            st.tail.drain(..excess);
            (st.generation != generation).then(|| (st.generation, st.path.clone()))
        };
        if let Some((new_generation, path)) = switch_to {
            generation = new_generation;
            if let Some(mut old) = file.take() {
                let _ = old.flush().await;
            }
            if let Some(path) = path {
                file = open_append(&path)
                    .await
                    .inspect_err(|e| {
                        tracing::warn!(path = %path.display(), "cannot open the driver's stderr file: {e}");
                    })
                    .ok();
            }
        }
        if let Some(f) = file.as_mut() {
            let written = async {
                f.write_all(chunk).await?;
                f.flush().await
            };
            if let Err(e) = written.await {
                tracing::warn!(driver = %shared.program, "cannot write the driver's stderr file: {e}");
                file = None;
            }
        }
    }
}

async fn open_append(path: &Path) -> io::Result<tokio::fs::File> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        tokio::fs::create_dir_all(dir).await?;
    }
    tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .await
}
