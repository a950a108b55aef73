//! What this worker runs: the drivers file (`lanes worker --drivers FILE`), whether campaigns'
//! own commands may run (`--allow-campaign-commands`), the env names those may receive
//! (`--allow-env`), and the campaigns it is limited to (`lanes run`). Read and checked once at
//! start; [`Drivers::offer`] is what the worker declares when it registers, and the
//! coordinator serves it only campaigns that offer covers.
//!
//! The drivers file has one table per driver name:
//!
//! ```toml
//! [osworld]
//! command = ["python3", "driver.py"]   # relative paths resolve against `cwd`
//! env = ["OPENAI_API_KEY"]             # what a campaign may set for it, or read as $NAME
//! cwd = "/opt/osworld"                 # default: the drivers file's folder
//! user = "lanes-driver"                # default: the worker's own account
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use lanes_common::ids::{CampaignId, DriverName};
use lanes_common::policy::WorkerOffer;
use lanes_common::spec::env::check_name;

use crate::driver::process::RunAs;

/// What this worker runs. The default runs only the built-in sim driver.
#[derive(Debug, Clone, Default)]
pub struct Drivers {
    /// The drivers of the drivers file, by name.
    pub named: BTreeMap<DriverName, LocalDriver>,
    /// Campaigns' own `[driver] command` may run here.
    pub campaign_commands: bool,
    /// The env names a campaign command (or the `--driver` override) may set or read.
    pub allow_env: BTreeSet<String>,
    /// Serve only these campaigns; empty serves every campaign.
    pub campaigns: BTreeSet<CampaignId>,
    /// `--container-runtime`: container campaigns run here, on this runtime.
    pub container: Option<ContainerRuntime>,
}

/// The container runtime a worker runs container campaigns on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRuntime {
    /// `podman` or `docker`, on the worker's PATH.
    pub program: String,
    /// Image builds at once on this host (`--max-builds`).
    pub max_builds: usize,
}

/// The runtime's own settings, passed from the worker's environment to the container driver:
/// they are the operator's, never a campaign's (a campaign cannot set these names).
pub const RUNTIME_ENV: [&str; 7] = [
    "CONTAINER_HOST",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF",
    "XDG_RUNTIME_DIR",
];

/// A driver of the drivers file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalDriver {
    pub command: Vec<String>,
    /// The env names a campaign may set for this driver, or read as `$NAME`.
    pub env: BTreeSet<String>,
    pub cwd: Option<PathBuf>,
    /// The account it runs as, when not the worker's own.
    pub user: Option<RunAs>,
}

/// A drivers file or worker option that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DriversError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{path}: driver `{driver}`: {message}")]
    Driver {
        path: PathBuf,
        driver: String,
        message: String,
    },
    #[error("--allow-env: {0}")]
    AllowEnv(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDriver {
    command: Vec<String>,
    #[serde(default)]
    env: Vec<String>,
    cwd: Option<PathBuf>,
    user: Option<String>,
}

impl Drivers {
    /// What the worker declares when it registers; `driver_override` is `--driver`.
    pub fn offer(&self, driver_override: bool) -> WorkerOffer {
        WorkerOffer {
            drivers: self
                .named
                .iter()
                .map(|(name, d)| (name.clone(), d.env.clone()))
                .collect(),
            campaign_commands: self.campaign_commands,
            command_env: self.allow_env.clone(),
            driver_override,
            campaigns: (!self.campaigns.is_empty()).then(|| self.campaigns.clone()),
            containers: self.container.is_some(),
        }
    }

    /// Checks `--allow-env` names: variable names a campaign may use (reserved ones never).
    pub fn allow_env(names: &[String]) -> Result<BTreeSet<String>, DriversError> {
        names
            .iter()
            .map(|n| {
                check_name(n)
                    .map(|()| n.clone())
                    .map_err(|e| DriversError::AllowEnv(e.to_string()))
            })
            .collect()
    }
}

/// Reads and checks a drivers file, resolving each `user` to its uid and gid.
pub fn load_drivers_file(path: &Path) -> Result<BTreeMap<DriverName, LocalDriver>, DriversError> {
    let file_err = |message: String| DriversError::File {
        path: path.to_owned(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| file_err(e.to_string()))?;
    let raw: BTreeMap<String, RawDriver> =
        toml::from_str(&text).map_err(|e| file_err(e.message().trim().to_owned()))?;
    let base = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let me = current_account();
    let mut out = BTreeMap::new();
    for (name, d) in raw {
        let err = |message: String| DriversError::Driver {
            path: path.to_owned(),
            driver: name.clone(),
            message,
        };
        let driver = DriverName::new(&name).map_err(|e| err(e.to_string()))?;
        if d.command.first().is_none_or(String::is_empty) {
            return Err(err("command must name a program".into()));
        }
        let env = d
            .env
            .iter()
            .map(|n| check_name(n).map(|()| n.clone()))
            .collect::<Result<BTreeSet<_>, _>>()
            .map_err(|e| err(format!("env: {e}")))?;
        let cwd = Some(base.join(d.cwd.unwrap_or_default()));
        let user = match d.user {
            Some(u) => run_as(&u, me).map_err(err)?,
            None => None,
        };
        out.insert(
            driver,
            LocalDriver {
                command: d.command,
                env,
                cwd,
                user,
            },
        );
    }
    Ok(out)
}

/// The worker's effective uid and gid.
fn current_account() -> RunAs {
    RunAs {
        uid: nix::unistd::geteuid().as_raw(),
        gid: nix::unistd::getegid().as_raw(),
    }
}

/// The account `name` runs as; `None` when that is the worker's own. Only a root worker can
/// start a driver as another account: anything else is refused now, not at the first trial.
fn run_as(name: &str, me: RunAs) -> Result<Option<RunAs>, String> {
    let user = nix::unistd::User::from_name(name)
        .map_err(|e| format!("user {name:?}: {e}"))?
        .ok_or_else(|| format!("user {name:?} does not exist on this host"))?;
    let want = RunAs {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
    };
    if want == me {
        return Ok(None);
    }
    if me.uid != 0 {
        return Err(format!(
            "running it as user {name:?} (uid {}) needs a worker running as root; this one runs as uid {}",
            want.uid, me.uid
        ));
    }
    Ok(Some(want))
}

#[cfg(test)]
mod tests;
