//! The child's stderr: scrubbed of the driver's secrets, appended to the file the lane set
//! last (rotated to `<file>.1` at [`STDERR_FILE_MAX_BYTES`]), with its tail kept in memory for
//! error messages.

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::ChildStderr;
use tokio::sync::{mpsc, oneshot};

use super::state::{Shared, lock};
use crate::secrets::{Secrets, StreamScrubber};

/// How much of the child's stderr is kept in memory for error messages.
pub const STDERR_TAIL_BYTES: usize = 4096;

/// A stderr file that reaches this size is moved to `<file>.1` (replacing the one before) and
/// a new file is started, so a driver keeps at most twice this on disk per file.
pub const STDERR_FILE_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// The file stderr is appended to, and how much it holds.
#[derive(Default)]
struct Sink {
    path: Option<PathBuf>,
    file: Option<tokio::fs::File>,
    written: u64,
}

impl Sink {
    async fn switch(&mut self, path: Option<PathBuf>) {
        if let Some(mut old) = self.file.take() {
            let _ = old.flush().await;
        }
        self.path = path;
        self.written = 0;
        if let Some(path) = &self.path {
            match open_append(path).await {
                Ok((file, len)) => {
                    self.file = Some(file);
                    self.written = len;
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), "cannot open the driver's stderr file: {e}")
                }
            }
        }
    }

    /// Appends `bytes`, rotating so that no file passes `max`: lines stay whole where they fit
    /// in a file (one read of the pipe may hold many lines), and a line longer than a whole
    /// file is cut.
    async fn write(&mut self, program: &str, mut bytes: &[u8], max: u64) {
        while !bytes.is_empty() && self.file.is_some() {
            let room = usize::try_from(max.saturating_sub(self.written)).unwrap_or(usize::MAX);
            let take = if bytes.len() <= room {
                bytes.len()
            } else if let Some(nl) = bytes[..room].iter().rposition(|b| *b == b'\n') {
                nl + 1
            } else if self.written > 0 {
                self.rotate().await;
                continue;
            } else {
                room.max(1)
            };
            let (now, rest) = bytes.split_at(take);
            bytes = rest;
            let Some(f) = self.file.as_mut() else { return };
            let written = async {
                f.write_all(now).await?;
                f.flush().await
            };
            match written.await {
                Ok(()) => self.written += now.len() as u64,
                Err(e) => {
                    tracing::warn!(driver = %program, "cannot write the driver's stderr file: {e}");
                    self.file = None;
                }
            }
        }
    }

    /// Moves the full file to `<file>.1` and starts a new one.
    async fn rotate(&mut self) {
        let Some(path) = self.path.clone() else {
            return;
        };
        self.file = None;
        let mut old = path.clone().into_os_string();
        old.push(".1");
        if let Err(e) = tokio::fs::rename(&path, &old).await {
            tracing::warn!(path = %path.display(), "cannot rotate the driver's stderr file: {e}");
        }
        self.switch(Some(path)).await;
    }
}

/// A request to copy what the child's stderr pipe holds now; answered once it is in the file.
pub(super) type Flush = oneshot::Sender<()>;

/// The stderr copier task: runs until the child's stderr closes. A [`Flush`] makes it copy
/// whatever the pipe holds at that moment before answering, so the bytes the child wrote
/// before its last answer are in the file when the lane collects the attempt's folder (the
/// pipe's readiness alone may lag the answer on stdout).
pub(super) async fn copy_stderr(
    shared: Arc<Shared>,
    mut stderr: ChildStderr,
    mut flushes: mpsc::UnboundedReceiver<Flush>,
) {
    let mut buf = vec![0u8; 8192];
    let mut copier = Copier::new(shared);
    loop {
        tokio::select! {
            read = stderr.read(&mut buf) => match read {
                Ok(0) => break,
                Ok(n) => copier.take(&buf[..n]).await,
                Err(e) => {
                    tracing::debug!(driver = %copier.shared.program, "cannot read the driver's stderr: {e}");
                    break;
                }
            },
            Some(done) = flushes.recv() => {
                let closed = drain(&stderr, &mut buf, &mut copier).await;
                let _ = done.send(());
                if closed {
                    break;
                }
            }
        }
    }
    copier.finish().await;
    // Flushes that arrived after the last read are answered when `flushes` drops: nothing
    // more will come.
}

/// Copies what the pipe holds now, reading around tokio's readiness (the pipe is
/// non-blocking, so an empty one answers `EAGAIN`). Answers whether the pipe has closed.
async fn drain(stderr: &ChildStderr, buf: &mut [u8], copier: &mut Copier) -> bool {
    loop {
        match nix::unistd::read(stderr.as_fd(), buf) {
            Ok(0) => return true,
            Ok(n) => copier.take(&buf[..n]).await,
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => return false,
            Err(e) => {
                tracing::debug!(driver = %copier.shared.program, "cannot read the driver's stderr: {e}");
                return true;
            }
        }
    }
}

/// What the copier keeps between reads: the file, the secrets and the bytes held back.
struct Copier {
    shared: Arc<Shared>,
    generation: u64,
    sink: Sink,
    scrubber: StreamScrubber,
    secrets: Secrets,
}

impl Copier {
    fn new(shared: Arc<Shared>) -> Self {
        let secrets = shared.secrets();
        Self {
            shared,
            generation: 0,
            sink: Sink::default(),
            scrubber: StreamScrubber::default(),
            secrets,
        }
    }

    /// Scrubs `bytes` and appends them to the file set last.
    async fn take(&mut self, bytes: &[u8]) {
        let (switch_to, max) = {
            let st = lock(&self.shared.stderr);
            let switch =
                (st.generation != self.generation).then(|| (st.generation, st.path.clone()));
            (switch, st.max_file_bytes)
        };
        if let Some((new_generation, path)) = switch_to {
            self.generation = new_generation;
            self.sink.switch(path).await;
        }
        // Bytes held back under the previous attempt's secrets are checked against both.
        let now = self.shared.secrets();
        let scrub_with = if now == self.secrets {
            now
        } else {
            std::mem::replace(&mut self.secrets, now).union(&self.secrets)
        };
        let out = self.scrubber.feed(&scrub_with, bytes);
        emit(&self.shared, &mut self.sink, &out, max).await;
    }

    /// Writes the bytes held back once the pipe has closed.
    async fn finish(mut self) {
        let out = self.scrubber.finish(&self.secrets);
        let max = lock(&self.shared.stderr).max_file_bytes;
        emit(&self.shared, &mut self.sink, &out, max).await;
    }
}

/// Keeps the tail and writes the file.
async fn emit(shared: &Shared, sink: &mut Sink, out: &[u8], max: u64) {
    {
        let mut st = lock(&shared.stderr);
        st.tail.extend_from_slice(out);
        let excess = st.tail.len().saturating_sub(STDERR_TAIL_BYTES);
        st.tail.drain(..excess);
    }
    sink.write(&shared.program, out, max).await;
}

/// Opens `path` for appending (creating it and its parents); answers it and its length.
async fn open_append(path: &Path) -> io::Result<(tokio::fs::File, u64)> {
    let path = path.to_owned();
    let file = tokio::task::spawn_blocking(move || {
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            crate::private_fs::create_dir(dir)?;
        }
        crate::private_fs::append_file(&path)
    })
    .await
    .map_err(io::Error::other)??;
    let file = tokio::fs::File::from_std(file);
    let len = file.metadata().await?.len();
    Ok((file, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_read_of_many_lines_never_grows_a_file_past_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("driver.stderr");
        let mut sink = Sink::default();
        sink.switch(Some(path.clone())).await;
        // 22 lines of 100 bytes in one chunk, as one read of a busy pipe brings them.
        let chunk: String = (0..22)
            .map(|i| format!("line {i:02} {}\n", "x".repeat(91)))
            .collect();
        sink.write("d", chunk.as_bytes(), 1000).await;
        let now = std::fs::read_to_string(&path).unwrap();
        let before = std::fs::read_to_string(dir.path().join("driver.stderr.1")).unwrap();
        assert!(
            now.len() <= 1000 && before.len() <= 1000,
            "{} {}",
            now.len(),
            before.len()
        );
        // Whole lines in each file, the newest in the current one.
        assert!(
            before.starts_with("line 10 ") && before.ends_with("x\n"),
            "{before}"
        );
        assert!(
            now.starts_with("line 20 ") && now.contains("line 21 ") && now.len() == 200,
            "{now}"
        );

        // A line longer than a whole file is cut, and still no file passes the cap.
        sink.write("d", "y".repeat(2500).as_bytes(), 1000).await;
        let now = std::fs::read_to_string(&path).unwrap();
        let before = std::fs::read_to_string(dir.path().join("driver.stderr.1")).unwrap();
        assert_eq!((before.len(), now.len()), (1000, 500));
    }
}
