//! `manifest.json`: what an attempt's upload holds, written after every file it names.

use serde::{Deserialize, Serialize};

/// The manifest's name in an attempt's folder of objects.
pub const MANIFEST: &str = "manifest.json";

/// Every file of an uploaded attempt, in path order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub files: Vec<ManifestFile>,
}

/// One uploaded file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    /// Relative to the attempt folder, `/`-separated (`driver.stderr`, `container/agent/x`).
    pub path: String,
    pub size: u64,
    /// Lowercase hex SHA-256 of the bytes uploaded.
    pub sha256: String,
}

impl Manifest {
    /// The file at `path`, if the manifest names it.
    pub fn file(&self, path: &str) -> Option<&ManifestFile> {
        self.files.iter().find(|f| f.path == path)
    }

    /// Whether `path` is a safe relative path: `/`-separated plain names, none empty, `.`
    /// or `..`, no control characters. A manifest read back from a store names only such
    /// paths before any of them becomes a local file name.
    pub fn is_safe_path(path: &str) -> bool {
        !path.is_empty()
            && path.len() <= 1024
            && path.split('/').all(|p| {
                !p.is_empty()
                    && p != "."
                    && p != ".."
                    && !p.contains('\\')
                    && !p.chars().any(char::is_control)
            })
    }
}

/// Lowercase hex of a digest.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_are_safe() {
        for ok in [
            "a",
            "driver.stderr",
            "container/agent/log.txt",
            "with space",
        ] {
            assert!(Manifest::is_safe_path(ok), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "a//b",
            "../x",
            "a/../../x",
            "./a",
            "a\\b",
            "a\nb",
            "a/",
        ] {
            assert!(!Manifest::is_safe_path(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_manifest_reads_back_as_written() {
        let m = Manifest {
            files: vec![ManifestFile {
                path: "a/b".into(),
                size: 3,
                sha256: hex(&[0xab, 0x01]),
            }],
        };
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(
            text,
            r#"{"files":[{"path":"a/b","size":3,"sha256":"ab01"}]}"#
        );
        assert_eq!(serde_json::from_str::<Manifest>(&text).unwrap(), m);
    }
}
