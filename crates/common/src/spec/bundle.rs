//! A task folder as one content-addressed bundle: its plain files, each with its path inside
//! the folder and its executable bit. `lanes submit` sends a campaign's task folders to the
//! coordinator as bundles, and a worker that never saw a folder fetches it by digest; both
//! ends recompute the digest, so a folder is never run under another folder's name.
//!
//! Paths in a bundle come from the network: they are checked (relative, `/`-separated, no
//! `.` or `..`, no empty part) before any becomes a path on disk.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::proto as pb;

/// The largest task folder, all files together.
pub const MAX_BUNDLE_BYTES: u64 = 16 * 1024 * 1024;
/// The most files in one task folder (each is named, with its digest, in the task payload,
/// which has its own size limit).
pub const MAX_BUNDLE_FILES: usize = 500;
/// The longest path inside a bundle, in bytes.
pub const MAX_BUNDLE_PATH: usize = 1024;

/// One file of a task folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleFile {
    /// Its path inside the folder, `/`-separated.
    pub path: String,
    pub executable: bool,
    pub data: Vec<u8>,
}

/// A task folder's files, in path order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bundle {
    files: Vec<BundleFile>,
}

/// Why a folder or a received bundle is refused. `path` is empty when it concerns the whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{reason}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
pub struct BundleError {
    pub path: String,
    pub reason: String,
}

fn err(path: &str, reason: impl Into<String>) -> BundleError {
    BundleError {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

impl Bundle {
    /// A bundle of these files, checked: valid paths, none twice, none both a file and a
    /// folder, within the limits.
    pub fn new(mut files: Vec<BundleFile>) -> Result<Self, BundleError> {
        if files.len() > MAX_BUNDLE_FILES {
            return Err(err(
                "",
                format!("more than {MAX_BUNDLE_FILES} files in the task folder"),
            ));
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let mut total = 0u64;
        let mut seen = BTreeSet::new();
        for f in &files {
            check_path(&f.path)?;
            if !seen.insert(f.path.as_str()) {
                return Err(err(&f.path, "listed twice"));
            }
            total += f.data.len() as u64;
            if total > MAX_BUNDLE_BYTES {
                return Err(err(
                    &f.path,
                    format!("the task folder is larger than {MAX_BUNDLE_BYTES} bytes"),
                ));
            }
        }
        for f in &files {
            let mut parent = f.path.as_str();
            while let Some((p, _)) = parent.rsplit_once('/') {
                if seen.contains(p) {
                    return Err(err(p, format!("is a file, and {} is inside it", f.path)));
                }
                parent = p;
            }
        }
        Ok(Self { files })
    }

    /// Reads a folder: its plain files, in path order. Symlinks, devices and the like are
    /// refused (a bundle is plain files), and so is a folder past the limits.
    pub fn read_dir(dir: &Path) -> Result<Self, BundleError> {
        let mut stack = vec![(dir.to_owned(), String::new())];
        let mut found = Vec::new();
        while let Some((abs, rel)) = stack.pop() {
            let entries = std::fs::read_dir(&abs).map_err(|e| err(&rel, e.to_string()))?;
            for e in entries {
                let e = e.map_err(|e| err(&rel, e.to_string()))?;
                let name = e
                    .file_name()
                    .into_string()
                    .map_err(|n| err(&rel, format!("file name {n:?} is not UTF-8")))?;
                let child = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                let kind = e.file_type().map_err(|e| err(&child, e.to_string()))?;
                if kind.is_dir() {
                    stack.push((e.path(), child));
                } else if kind.is_file() {
                    found.push((child, e.path()));
                } else {
                    return Err(err(
                        &child,
                        "not a regular file or folder (symlinks are refused)",
                    ));
                }
                if found.len() > MAX_BUNDLE_FILES {
                    return Err(err(
                        "",
                        format!("more than {MAX_BUNDLE_FILES} files in the task folder"),
                    ));
                }
            }
        }
        found.sort();
        let mut files = Vec::with_capacity(found.len());
        let mut total = 0u64;
        for (rel, abs) in found {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(&abs).map_err(|e| err(&rel, e.to_string()))?;
            // Checked before reading, so a huge file is never read whole.
            total += meta.len();
            if total > MAX_BUNDLE_BYTES {
                return Err(err(
                    &rel,
                    format!("the task folder is larger than {MAX_BUNDLE_BYTES} bytes"),
                ));
            }
            let data = std::fs::read(&abs).map_err(|e| err(&rel, e.to_string()))?;
            files.push(BundleFile {
                path: rel,
                executable: meta.permissions().mode() & 0o111 != 0,
                data,
            });
        }
        Self::new(files)
    }

    pub fn files(&self) -> &[BundleFile] {
        &self.files
    }

    /// All files' bytes together.
    pub fn size(&self) -> u64 {
        self.files.iter().map(|f| f.data.len() as u64).sum()
    }

    /// `sha256:<hex>` of the whole (over each file's path, executable bit, length and
    /// contents, in path order), and each file's `sha256:<hex>` by path.
    pub fn digests(&self) -> (String, BTreeMap<String, String>) {
        let mut whole = Sha256::new();
        let mut files = BTreeMap::new();
        for f in &self.files {
            // Each part delimited: no two folders share a digest.
            whole.update(f.path.as_bytes());
            whole.update([0, u8::from(f.executable)]);
            whole.update((f.data.len() as u64).to_be_bytes());
            whole.update(&f.data);
            files.insert(
                f.path.clone(),
                format!("sha256:{}", hex(&Sha256::digest(&f.data))),
            );
        }
        (format!("sha256:{}", hex(&whole.finalize())), files)
    }

    /// The digest of the whole.
    pub fn digest(&self) -> String {
        self.digests().0
    }

    /// Writes the files under `dir` (which must not exist yet; its parent must), private to
    /// this account, executable files 0700 and the rest 0600.
    pub fn write_new_dir(&self, dir: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        let mut mkdir = std::fs::DirBuilder::new();
        mkdir.mode(0o700);
        mkdir.create(dir)?;
        mkdir.recursive(true);
        for f in &self.files {
            // Checked again: a bundle is only built through `new`, but this is where a path
            // from the network meets the disk.
            check_path(&f.path).map_err(|e| std::io::Error::other(e.to_string()))?;
            let path = dir.join(&f.path);
            if let Some(parent) = path.parent() {
                mkdir.create(parent)?;
            }
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(if f.executable { 0o700 } else { 0o600 })
                .open(&path)?;
            std::io::Write::write_all(&mut out, &f.data)?;
        }
        Ok(())
    }
}

/// Checks a folder digest from the network: `sha256:` and 64 lowercase hex digits.
pub fn check_digest(digest: &str) -> Result<(), BundleError> {
    let ok = digest.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if ok {
        Ok(())
    } else {
        Err(err(
            "",
            format!("{digest:?} is not a task folder digest (sha256:<64 hex>)"),
        ))
    }
}

/// A path inside a bundle: relative, `/`-separated, no empty, `.` or `..` part, no NUL or
/// backslash, at most [`MAX_BUNDLE_PATH`] bytes.
fn check_path(path: &str) -> Result<(), BundleError> {
    let bad = |why: &str| err(path, format!("not a path inside a task folder: {why}"));
    if path.is_empty() {
        return Err(bad("empty"));
    }
    if path.len() > MAX_BUNDLE_PATH {
        return Err(bad(&format!("longer than {MAX_BUNDLE_PATH} bytes")));
    }
    if path.contains(['\0', '\\']) {
        return Err(bad("it holds a NUL or a backslash"));
    }
    if path
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(bad("an absolute path, or an empty, `.` or `..` part"));
    }
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl From<Bundle> for pb::TaskBundle {
    fn from(b: Bundle) -> Self {
        pb::TaskBundle {
            files: b
                .files
                .into_iter()
                .map(|f| pb::BundleFile {
                    path: f.path,
                    executable: f.executable,
                    data: f.data,
                })
                .collect(),
        }
    }
}

impl TryFrom<pb::TaskBundle> for Bundle {
    type Error = BundleError;

    fn try_from(b: pb::TaskBundle) -> Result<Self, BundleError> {
        Bundle::new(
            b.files
                .into_iter()
                .map(|f| BundleFile {
                    path: f.path,
                    executable: f.executable,
                    data: f.data,
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, data: &[u8]) -> BundleFile {
        BundleFile {
            path: path.to_owned(),
            executable: false,
            data: data.to_vec(),
        }
    }

    #[test]
    fn paths_from_the_network_are_checked_before_they_become_paths() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a//b",
            "./a",
            "a/",
            "a\\b",
            "a\0b",
        ] {
            let e = Bundle::new(vec![file(bad, b"x")]).unwrap_err();
            assert_eq!(e.path, bad);
            assert!(e.reason.contains("not a path inside a task folder"), "{e}");
        }
        let long = "a".repeat(MAX_BUNDLE_PATH + 1);
        assert!(Bundle::new(vec![file(&long, b"")]).is_err());
        let e = Bundle::new(vec![file("a", b"1"), file("a", b"2")]).unwrap_err();
        assert_eq!(e.to_string(), "a: listed twice");
        let e = Bundle::new(vec![file("a", b"1"), file("a/b", b"2")]).unwrap_err();
        assert_eq!(e.to_string(), "a: is a file, and a/b is inside it");
        let e =
            Bundle::new(vec![file("big", &vec![0; MAX_BUNDLE_BYTES as usize + 1])]).unwrap_err();
        assert!(e.reason.contains("larger than"), "{e}");
    }

    #[test]
    fn a_bundle_written_out_reads_back_with_the_same_digest() {
        let dir = tempfile::tempdir().unwrap();
        let mut run = file("tests/test.sh", b"#!/bin/sh\necho 1\n");
        run.executable = true;
        let b = Bundle::new(vec![file("task.toml", b"[agent]\n"), run]).unwrap();
        let out = dir.path().join("copy");
        b.write_new_dir(&out).unwrap();
        let back = Bundle::read_dir(&out).unwrap();
        assert_eq!(back, b);
        assert_eq!(back.digest(), b.digest());
        // Written once: a second write into the same folder is refused.
        assert!(b.write_new_dir(&out).is_err());
        // Through the wire type and back.
        let wire = pb::TaskBundle::from(b.clone());
        assert_eq!(Bundle::try_from(wire).unwrap(), b);
    }
}
