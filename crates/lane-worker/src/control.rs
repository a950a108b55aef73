//! The worker's control socket: a Unix socket, readable and writable by the worker's own
//! user only, through which `lanes worker drain` (a Kubernetes preStop, or an operator before
//! maintenance) tells the running worker to take no new work and waits until every attempt
//! in flight has finished and the coordinator has acknowledged its outcome.
//!
//! The protocol is one request line and answer lines of JSON:
//! - `drain\n` → `{"in_flight":N,"unacknowledged":M}` whenever the counts change, then
//!   `{"drained":true}` once both are zero, and the connection closes. The worker stays up
//!   and idle until it is stopped.

use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ractor::ActorRef;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::worker::supervisor::SupMsg;

/// The socket's file name under the artifacts directory when `--control-socket` is not given.
pub const DEFAULT_NAME: &str = ".control.sock";

/// How often a drain re-reads the counts.
const POLL: Duration = Duration::from_millis(100);
/// Longest request line.
const MAX_REQUEST: usize = 64;

/// Where the worker listens.
#[derive(Debug, Clone)]
pub struct ControlSocket {
    pub path: PathBuf,
    /// Given explicitly (`--control-socket`): a socket that cannot be bound stops the worker.
    /// The default path only warns (a path too long for a Unix socket, a filesystem without
    /// sockets), and the worker runs without one.
    pub required: bool,
}

/// One answer line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Answer {
    Progress {
        in_flight: usize,
        unacknowledged: usize,
    },
    Drained {
        drained: bool,
    },
    Refused {
        error: String,
    },
}

/// Why the control socket failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("control socket {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("control socket {0}: another running worker answers on it")]
    InUse(PathBuf),
    #[error("control socket {0}: a file that is not a socket is in the way")]
    NotASocket(PathBuf),
    #[error("control socket {path}: the worker answered what this client cannot read: {line}")]
    BadAnswer { path: PathBuf, line: String },
    #[error("control socket {path}: the worker refused: {error}")]
    Refused { path: PathBuf, error: String },
    #[error("control socket {0}: the worker closed the connection before it was drained")]
    Closed(PathBuf),
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> ControlError + '_ {
    move |source| ControlError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Binds the socket at `path` with mode 0600. A socket left by a worker that died (nothing
/// accepts on it) is replaced; one that a live worker answers on, or that this user may not
/// connect to, is not.
pub(crate) async fn bind(path: &Path) -> Result<UnixListener, ControlError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => match UnixStream::connect(path).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                std::fs::remove_file(path).map_err(io(path))?;
            }
            Ok(_) => return Err(ControlError::InUse(path.to_owned())),
            Err(e) => return Err(io(path)(e)),
        },
        Ok(_) => return Err(ControlError::NotASocket(path.to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(path)(e)),
    }
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d.to_owned(),
        None => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(io(path))?;
    // Bound inside a private directory, made 0600, then renamed into place: nobody else can
    // connect in between, whatever the umask.
    let private = dir.join(format!(".control-{}.tmp", std::process::id()));
    let _ = std::fs::remove_dir_all(&private);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .map_err(io(path))?;
    let staged = private.join("sock");
    let bound = UnixListener::bind(&staged).and_then(|listener| {
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&staged, path)?;
        Ok(listener)
    });
    let _ = std::fs::remove_dir_all(&private);
    bound.map_err(io(path))
}

/// Answers connections until the task is aborted.
pub(crate) async fn serve(listener: UnixListener, sup: ActorRef<SupMsg>) {
    loop {
        match listener.accept().await {
            Ok((conn, _)) => {
                tokio::spawn(answer(conn, sup.clone()));
            }
            Err(e) => {
                tracing::warn!(error = %e, "control socket: accept failed");
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

async fn answer(conn: UnixStream, sup: ActorRef<SupMsg>) {
    let (read, mut write) = conn.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_REQUEST as u64));
    if reader.read_line(&mut line).await.is_err() {
        return;
    }
    let send = |a: &Answer| {
        let mut text = serde_json::to_string(a).expect("answers serialize");
        text.push('\n');
        text
    };
    if line.trim() != "drain" {
        let refused = Answer::Refused {
            error: format!(
                "unknown request {:?}; the one request is `drain`",
                line.trim()
            ),
        };
        let _ = write.write_all(send(&refused).as_bytes()).await;
        return;
    }
    tracing::info!("draining (asked through the control socket): no new work");
    let _ = sup.cast(SupMsg::Drain);
    let mut last = None;
    let mut byte = [0u8; 1];
    loop {
        match ractor::call_t!(sup, SupMsg::Pending, 2_000) {
            Ok((0, 0)) => {
                tracing::info!("drained: nothing in flight, every outcome acknowledged");
                let _ = write
                    .write_all(send(&Answer::Drained { drained: true }).as_bytes())
                    .await;
                return;
            }
            Ok(counts) if last != Some(counts) => {
                last = Some(counts);
                let progress = Answer::Progress {
                    in_flight: counts.0,
                    unacknowledged: counts.1,
                };
                if write.write_all(send(&progress).as_bytes()).await.is_err() {
                    return;
                }
            }
            Ok(_) => {}
            // A supervisor busy sending (a slow or reconnecting coordinator) answers late:
            // ask again.
            Err(ractor::RactorErr::Timeout) => {}
            // The supervisor is gone: the worker is stopping, and the client sees the close.
            Err(_) => return,
        }
        // Poll again shortly, unless the client has gone (EOF or an error on its side).
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            read = tokio::io::AsyncReadExt::read(reader.get_mut(), &mut byte) => {
                if !matches!(read, Ok(n) if n > 0) {
                    return;
                }
            }
        }
    }
}

/// Asks the worker behind `path` to drain and waits until it is drained, calling `progress`
/// with each change of the counts.
pub async fn drain(
    path: &Path,
    mut progress: impl FnMut(usize, usize),
) -> Result<(), ControlError> {
    let conn = UnixStream::connect(path).await.map_err(io(path))?;
    let (read, mut write) = conn.into_split();
    write.write_all(b"drain\n").await.map_err(io(path))?;
    let mut lines = BufReader::new(read).lines();
    while let Some(line) = lines.next_line().await.map_err(io(path))? {
        match serde_json::from_str::<Answer>(&line) {
            Ok(Answer::Progress {
                in_flight,
                unacknowledged,
            }) => progress(in_flight, unacknowledged),
            Ok(Answer::Drained { drained: true }) => return Ok(()),
            Ok(Answer::Refused { error }) => {
                return Err(ControlError::Refused {
                    path: path.to_owned(),
                    error,
                });
            }
            Ok(Answer::Drained { drained: false }) | Err(_) => {
                return Err(ControlError::BadAnswer {
                    path: path.to_owned(),
                    line,
                });
            }
        }
    }
    Err(ControlError::Closed(path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_socket_is_private_and_a_dead_workers_socket_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/worker.sock");
        let first = bind(&path).await.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // No staging directory is left beside it.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("worker.sock")]);
        // The worker died: its socket file stays, and nothing accepts on it.
        drop(first);
        assert!(path.exists());
        let _second = bind(&path).await.unwrap();
        assert!(UnixStream::connect(&path).await.is_ok());
    }

    #[tokio::test]
    async fn a_socket_a_live_worker_answers_on_is_not_taken() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker.sock");
        let _live = bind(&path).await.unwrap();
        let err = bind(&path).await.unwrap_err();
        assert!(matches!(err, ControlError::InUse(_)), "{err}");
        assert!(
            UnixStream::connect(&path).await.is_ok(),
            "the live one still answers"
        );
    }

    #[tokio::test]
    async fn a_file_in_the_way_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker.sock");
        std::fs::write(&path, b"not a socket").unwrap();
        let err = bind(&path).await.unwrap_err();
        assert!(matches!(err, ControlError::NotASocket(_)), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"not a socket");
    }
}
