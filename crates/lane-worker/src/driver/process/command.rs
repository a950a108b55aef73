//! How a driver is started: the command, its environment (whose values are secrets), and
//! where its program is found.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// How to start a driver.
///
/// `program` is resolved at spawn: an absolute path is used as is; a relative path with a
/// directory part (`./drv`, `bin/drv`) resolves against `cwd`, or the current directory when
/// `cwd` is `None`; a plain name (`python3`) is looked up in `PATH`.
///
/// The driver gets a clean environment: `env` plus the worker's `PATH`, `HOME`, `LANG` and
/// `TMPDIR` ([`super::env`]). `env` values are secrets: `Debug` prints only their names, they
/// are never logged, and they are masked in what the driver says.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DriverCommand {
    pub program: String,
    pub args: Vec<String>,
    pub cwd: Option<PathBuf>,
    /// The driver's variables besides the passed-through ones; worker credentials
    /// (`LANES_*TOKEN*`, by name or value) are dropped.
    pub env: Vec<(String, String)>,
    /// Where the running driver is recorded for [`super::sweep_orphans`] (the worker's
    /// `<outbox>/drivers`); `None` records nothing.
    pub record_dir: Option<PathBuf>,
    /// The account the driver runs as; `None` runs it as the worker's own.
    pub user: Option<RunAs>,
}

/// An account to run a driver as, resolved when the worker starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunAs {
    pub uid: u32,
    pub gid: u32,
}

impl fmt::Debug for DriverCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env_names: Vec<&str> = self.env.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("DriverCommand")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("env", &env_names)
            .field("user", &self.user)
            .field("record_dir", &self.record_dir)
            .finish()
    }
}

/// Resolves `program` (see [`DriverCommand`]) and makes `cwd` absolute.
pub(super) fn resolve(program: &str, cwd: Option<&Path>) -> io::Result<(PathBuf, Option<PathBuf>)> {
    if program.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty program"));
    }
    let path = Path::new(program);
    let has_dir = path.parent().is_some_and(|dir| !dir.as_os_str().is_empty());
    let needs_base = (cwd.is_some_and(Path::is_relative)) || (has_dir && path.is_relative());
    let base = if needs_base {
        Some(std::env::current_dir()?)
    } else {
        None
    };
    let cwd = cwd.map(|cwd| match &base {
        Some(base) => base.join(cwd),
        None => cwd.to_path_buf(),
    });
    let program = if path.is_absolute() || !has_dir {
        path.to_path_buf()
    } else {
        match (&cwd, &base) {
            (Some(cwd), _) => cwd.join(path),
            (None, Some(base)) => base.join(path),
            (None, None) => path.to_path_buf(),
        }
    };
    Ok((program, cwd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_programs() {
        let here = std::env::current_dir().unwrap();
        let abs = if cfg!(windows) { "C:\\drv" } else { "/opt/drv" };
        assert_eq!(resolve(abs, None).unwrap(), (PathBuf::from(abs), None));
        assert_eq!(
            resolve("python3", None).unwrap(),
            (PathBuf::from("python3"), None)
        );
        assert_eq!(resolve("./drv", None).unwrap(), (here.join("./drv"), None));
        assert_eq!(
            resolve("bin/drv", Some(Path::new("/srv/lane"))).unwrap(),
            (
                PathBuf::from("/srv/lane/bin/drv"),
                Some(PathBuf::from("/srv/lane"))
            )
        );
        assert_eq!(
            resolve("python3", Some(Path::new("work"))).unwrap(),
            (PathBuf::from("python3"), Some(here.join("work")))
        );
        assert_eq!(
            resolve("./drv", Some(Path::new("work"))).unwrap(),
            (here.join("work").join("./drv"), Some(here.join("work")))
        );
        assert!(resolve("", None).is_err());
    }
}
