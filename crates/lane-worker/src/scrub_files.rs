//! What a driver left in an attempt's folder (the container driver's copy of `/logs`, an
//! agent's transcript), scrubbed of the attempt's secrets before its outcome is recorded: a
//! secret the agent printed into a log file must not reach the artifacts any more than a row.
//!
//! Only regular files are read: a symlink the agent planted is never followed (it is removed,
//! since it could point anywhere on the host). Each file is streamed through a
//! [`StreamScrubber`]; one that holds a secret is rewritten through a private temporary file
//! that replaces it. A file or folder whose name holds a secret is renamed with the secret
//! masked (`___`): names reach rows and object keys when the folder goes to an artifact
//! store.

use std::fs;
use std::io::{self, Read, Write};
use std::path::Path;

use crate::secrets::{Secrets, StreamScrubber};

/// The lane's own records in an attempt folder, written already redacted.
const LANE_FILES: [&str; 2] = ["attempt.json", "outcome.json"];

/// How many files a scrub read and how many it changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Scrubbed {
    pub files: usize,
    pub masked: usize,
}

/// Scrubs every file under `dir` but the lane's own records. A missing `dir` is nothing.
pub fn scrub_attempt_dir(dir: &Path, secrets: &Secrets) -> io::Result<Scrubbed> {
    let mut done = Scrubbed::default();
    if secrets.is_empty() {
        return Ok(done);
    }
    let top = match fs::read_dir(dir) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(done),
        Err(e) => return Err(e),
    };
    let mut stack = Vec::new();
    for e in top {
        let e = e?;
        let name = e.file_name();
        let lane_file = LANE_FILES
            .iter()
            .any(|f| name.to_string_lossy().starts_with(f));
        if !lane_file {
            stack.push(e.path());
        }
    }
    while let Some(path) = stack.pop() {
        let path = unnamed(path, secrets)?;
        let meta = fs::symlink_metadata(&path)?;
        if meta.is_dir() {
            for e in fs::read_dir(&path)? {
                stack.push(e?.path());
            }
        } else if meta.is_file() {
            done.files += 1;
            if scrub_file(&path, secrets)? {
                done.masked += 1;
            }
        } else {
            // A symlink, a fifo, a device: nothing a log is, and nothing to follow.
            fs::remove_file(&path)?;
        }
    }
    Ok(done)
}

/// `path` renamed with the secrets in its last part masked as `___` (a name needs no `*`,
/// which object stores escape), if it holds any; a name that is not UTF-8 is read lossily,
/// and then renamed to text. A name taken already gets a number.
fn unnamed(path: std::path::PathBuf, secrets: &Secrets) -> io::Result<std::path::PathBuf> {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Ok(path);
    };
    let clean = secrets.scrubbed(&name);
    if clean == name {
        return Ok(path);
    }
    let clean = clean.replace('*', "_");
    let mut to = path.with_file_name(&clean);
    let mut n = 1;
    while fs::symlink_metadata(&to).is_ok() {
        to = path.with_file_name(format!("{clean}.{n}"));
        n += 1;
    }
    fs::rename(&path, &to)?;
    Ok(to)
}

/// Scrubs one file in place; answers whether anything was masked. A first pass only looks
/// (most files hold no secret, and are then never written).
fn scrub_file(path: &Path, secrets: &Secrets) -> io::Result<bool> {
    if !stream(path, secrets, &mut io::sink())? {
        return Ok(false);
    }
    let tmp = path.with_file_name(format!(
        ".scrub-{}",
        path.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    ));
    let written = crate::private_fs::create_file(&tmp).and_then(|f| {
        let mut out = io::BufWriter::new(f);
        stream(path, secrets, &mut out)?;
        out.flush()
    });
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, path)?;
    Ok(true)
}

/// Streams `path`, scrubbed, into `out`; answers whether anything was masked (a mask is
/// shorter than any secret, so a masked stream is shorter).
fn stream(path: &Path, secrets: &Secrets, out: &mut impl Write) -> io::Result<bool> {
    let mut input = fs::File::open(path)?;
    let mut scrubber = StreamScrubber::default();
    let (mut read, mut written) = (0u64, 0u64);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            break;
        }
        read += n as u64;
        let piece = scrubber.feed(secrets, &buf[..n]);
        written += piece.len() as u64;
        out.write_all(&piece)?;
    }
    let rest = scrubber.finish(secrets);
    written += rest.len() as u64;
    out.write_all(&rest)?;
    Ok(written != read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_a_driver_left_are_scrubbed_and_symlinks_removed_unfollowed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let secret = "sk-live-0123456789";
        let secrets = Secrets::new([secret.to_owned()]);
        fs::create_dir_all(root.join("container/agent")).unwrap();
        fs::write(
            root.join("container/agent/out.txt"),
            format!("key={secret}\n").repeat(20_000),
        )
        .unwrap();
        fs::write(root.join("container/clean.txt"), "nothing here\n").unwrap();
        // The lane's own records are not touched.
        fs::write(root.join("attempt.json"), secret).unwrap();
        // A planted symlink to a host file: removed, and the target left alone.
        let elsewhere = tempfile::tempdir().unwrap();
        let host_file = elsewhere.path().join("host-file");
        fs::write(&host_file, secret).unwrap();
        std::os::unix::fs::symlink(&host_file, root.join("container/link")).unwrap();

        let done = scrub_attempt_dir(root, &secrets).unwrap();
        let out = fs::read_to_string(root.join("container/agent/out.txt")).unwrap();
        assert!(!out.contains(secret));
        assert_eq!(out, "key=***\n".repeat(20_000));
        assert_eq!(
            fs::read_to_string(root.join("container/clean.txt")).unwrap(),
            "nothing here\n"
        );
        assert_eq!(
            fs::read_to_string(root.join("attempt.json")).unwrap(),
            secret
        );
        assert!(fs::symlink_metadata(root.join("container/link")).is_err());
        assert_eq!(fs::read_to_string(&host_file).unwrap(), secret);
        assert_eq!(
            done,
            Scrubbed {
                files: 2,
                masked: 1
            }
        );
        // No temporary file is left.
        let names: Vec<_> = fs::read_dir(root.join("container"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with(".scrub-")), "{names:?}");
        assert!(scrub_attempt_dir(&root.join("missing"), &secrets).is_ok());
    }

    #[test]
    fn names_that_hold_a_secret_are_masked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let secret = "sk-live-0123456789";
        let secrets = Secrets::new([secret.to_owned()]);
        fs::create_dir_all(root.join(format!("in-{secret}"))).unwrap();
        fs::write(root.join(format!("in-{secret}/{secret}.txt")), "x").unwrap();
        fs::write(root.join(format!("key-{secret}")), "a").unwrap();
        // Taken already: the masked name gets a number.
        fs::write(root.join("key-___"), "b").unwrap();
        scrub_attempt_dir(root, &secrets).unwrap();
        assert_eq!(
            fs::read_to_string(root.join("in-___/___.txt")).unwrap(),
            "x"
        );
        assert_eq!(fs::read_to_string(root.join("key-___")).unwrap(), "b");
        assert_eq!(fs::read_to_string(root.join("key-___.1")).unwrap(), "a");
        let mut all = Vec::new();
        let mut stack = vec![root.to_owned()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                all.push(p.display().to_string());
                if p.is_dir() {
                    stack.push(p);
                }
            }
        }
        assert!(all.iter().all(|p| !p.contains(secret)), "{all:?}");
    }
}
