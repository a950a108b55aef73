//! Files only the worker's own user may read. The outbox, the lease journal, the driver
//! records and the attempt records hold lease secrets and scores, and a driver may run as
//! another user on the same host (`user = "nobody"`): it must not read them.

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Directories: the owner only.
pub const DIR_MODE: u32 = 0o700;
/// Files: the owner reads and writes.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` and its missing parents at 0700, and tightens `dir` itself when it already
/// existed more open (as an older worker left its outbox, at 0755).
pub fn create_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    if fs::metadata(dir)?.permissions().mode() & 0o777 != DIR_MODE {
        fs::set_permissions(dir, Permissions::from_mode(DIR_MODE))?;
    }
    Ok(())
}

/// Creates or truncates a file at 0600; an existing file's mode is tightened too.
pub fn create_file(path: &Path) -> io::Result<File> {
    open(
        path,
        OpenOptions::new().write(true).create(true).truncate(true),
    )
}

/// Opens a file for writing in place, creating it at 0600 (its contents are kept); an
/// existing file's mode is tightened too.
pub fn open_in_place(path: &Path) -> io::Result<File> {
    open(path, OpenOptions::new().write(true).create(true))
}

/// Opens a file for appending, creating it at 0600; an existing file's mode is tightened.
pub fn append_file(path: &Path) -> io::Result<File> {
    open(path, OpenOptions::new().append(true).create(true))
}

fn open(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    let f = options.mode(FILE_MODE).open(path)?;
    if f.metadata()?.permissions().mode() & 0o777 != FILE_MODE {
        f.set_permissions(Permissions::from_mode(FILE_MODE))?;
    }
    Ok(f)
}

/// Writes `bytes` to a new private file (not fsynced).
pub fn write(path: &Path, bytes: &[u8]) -> io::Result<()> {
    io::Write::write_all(&mut create_file(path)?, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn new_and_existing_dirs_and_files_end_private() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        create_dir(&dir).unwrap();
        assert_eq!((mode(&root.path().join("a")), mode(&dir)), (0o700, 0o700));
        // An older worker's directory and file, world-readable.
        fs::set_permissions(&dir, Permissions::from_mode(0o755)).unwrap();
        let file = dir.join("f");
        fs::write(&file, b"old").unwrap();
        fs::set_permissions(&file, Permissions::from_mode(0o644)).unwrap();
        create_dir(&dir).unwrap();
        write(&file, b"new").unwrap();
        assert_eq!((mode(&dir), mode(&file)), (0o700, 0o600));
        let appended = dir.join("log");
        append_file(&appended).unwrap();
        assert_eq!(mode(&appended), 0o600);
    }
}
