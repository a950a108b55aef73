//! The loopback API of a running `lanes run`: `<data-dir>/lanes.addr` holds its URL and the
//! random tokens it made for this run. The file is created 0600 in a 0700 data directory, so
//! only its user can reach the API; `lanes status --data-dir` and friends read it.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::Context;

/// What `lanes.addr` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LocalApi {
    pub(crate) url: String,
    pub(crate) client_token: String,
    pub(crate) lane_token: String,
}

/// The file a running `lanes run` writes its API address and tokens to.
pub(crate) fn addr_file(data_dir: &Path) -> PathBuf {
    data_dir.join("lanes.addr")
}

/// Makes the data directory private (0700), creating it if needed.
pub(crate) fn private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make {} private", dir.display()))
}

impl LocalApi {
    /// Writes the file, readable by its owner only. An older file is replaced, never
    /// reused, so its permissions cannot be looser than 0600.
    pub(crate) fn write(&self, data_dir: &Path) -> anyhow::Result<()> {
        let path = addr_file(data_dir);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("cannot replace {}", path.display()));
            }
            _ => {}
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        write!(
            f,
            "{}\nclient_token={}\nlane_token={}\n",
            self.url, self.client_token, self.lane_token
        )
        .with_context(|| format!("cannot write {}", path.display()))
    }

    /// Reads the file of a running `lanes run`; `None` when there is none (or it is not one).
    pub(crate) fn read(data_dir: &Path) -> Option<Self> {
        let text = std::fs::read_to_string(addr_file(data_dir)).ok()?;
        let mut lines = text.lines();
        let url = lines.next()?.trim().to_owned();
        let (mut client_token, mut lane_token) = (None, None);
        for l in lines {
            if let Some(t) = l.strip_prefix("client_token=") {
                client_token = Some(t.trim().to_owned());
            } else if let Some(t) = l.strip_prefix("lane_token=") {
                lane_token = Some(t.trim().to_owned());
            }
        }
        Some(Self {
            url,
            client_token: client_token?,
            lane_token: lane_token?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_private_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        private_dir(&data).unwrap();
        let api = LocalApi {
            url: "http://127.0.0.1:4000".into(),
            client_token: "c".repeat(64),
            lane_token: "l".repeat(64),
        };
        api.write(&data).unwrap();
        api.write(&data).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&addr_file(&data)), 0o600);
        assert_eq!(mode(&data), 0o700);
        assert_eq!(LocalApi::read(&data).unwrap(), api);
        std::fs::write(addr_file(&data), "http://127.0.0.1:4000\n").unwrap();
        assert!(LocalApi::read(&data).is_none());
    }
}
