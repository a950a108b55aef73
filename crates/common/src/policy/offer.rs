//! What a worker offers to run, and whether that covers a campaign's driver.
//!
//! A worker declares, when it registers, the named drivers it has (each with the env names a
//! campaign may forward to it), whether it runs campaigns' own commands (and the env names
//! those may receive), whether one `--driver` command replaces every campaign's driver on it,
//! and optionally the only campaigns it serves. The claim path refuses a campaign the offer
//! does not cover, so no lease is ever given to a worker that would have to refuse it: a
//! refusal loses no trial and spends no preflight budget. The sim driver is built in and runs
//! everywhere; it receives no campaign env.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::ids::{CampaignId, DriverName};
use crate::spec::env::{reserved, source_of};
use crate::spec::{CampaignSpec, DriverKind};

/// What one worker runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerOffer {
    /// The named drivers, each with the env names a campaign may set for it or read (`$NAME`).
    pub drivers: BTreeMap<DriverName, BTreeSet<String>>,
    /// Whether a campaign's own `[driver] command` may run here.
    pub campaign_commands: bool,
    /// The env names a campaign command (or the `--driver` override) may be given.
    pub command_env: BTreeSet<String>,
    /// A `--driver` command replaces every campaign's driver on this worker.
    pub driver_override: bool,
    /// Serve only these campaigns; `None` serves every campaign.
    pub campaigns: Option<BTreeSet<CampaignId>>,
    /// Started with `--container-runtime`: container campaigns run here.
    pub containers: bool,
}

/// Whose env allowlist a campaign's env was checked against.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Allowlist {
    /// A named driver's `env` in the worker's drivers file.
    Driver(DriverName),
    /// The worker's `--allow-env`, for campaign commands and the `--driver` override.
    Worker,
}

/// Why a worker does not serve a campaign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "refusal", rename_all = "snake_case")]
pub enum DriverRefusal {
    /// The campaign names a driver the worker does not have.
    MissingDriver { driver: DriverName },
    /// The campaign brings its own command and the worker does not run campaign commands.
    CampaignCommand,
    /// The campaign runs in containers and the worker has no container runtime.
    ContainerRuntime,
    /// The campaign sets or reads an env name the worker does not allow for its driver.
    EnvNotAllowed { name: String, allowlist: Allowlist },
    /// The campaign sets or reads a reserved env name (never allowed; validation refuses it
    /// too, so only a spec that bypassed validation gets here).
    EnvReserved { name: String },
}

impl fmt::Display for DriverRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverRefusal::MissingDriver { driver } => {
                write!(f, "driver `{driver}` is not in this worker's drivers file")
            }
            DriverRefusal::CampaignCommand => f.write_str(
                "the campaign's own driver command runs only on workers started with --allow-campaign-commands",
            ),
            DriverRefusal::ContainerRuntime => f.write_str(
                "container campaigns run only on workers started with --container-runtime podman|docker",
            ),
            DriverRefusal::EnvNotAllowed {
                name,
                allowlist: Allowlist::Driver(d),
            } => write!(f, "env `{name}` is not in the env allowlist of driver `{d}` on this worker"),
            DriverRefusal::EnvNotAllowed {
                name,
                allowlist: Allowlist::Worker,
            } => write!(f, "env `{name}` is not allowed on this worker (--allow-env)"),
            DriverRefusal::EnvReserved { name } => {
                write!(f, "env `{name}` can never be set or read by a campaign")
            }
        }
    }
}

impl WorkerOffer {
    /// Whether the campaign filter lets this campaign through.
    pub fn takes_campaign(&self, id: &CampaignId) -> bool {
        self.campaigns.as_ref().is_none_or(|c| c.contains(id))
    }

    /// Why this worker does not run the campaign's driver, or `None` when it does.
    pub fn refusal(&self, spec: &CampaignSpec) -> Option<DriverRefusal> {
        let driver = &spec.driver;
        let allow = if self.driver_override {
            (&self.command_env, Allowlist::Worker)
        } else {
            match &driver.kind {
                // The sim reads no env: none is forwarded to it, so none is checked.
                DriverKind::Sim(_) => return None,
                DriverKind::Command(_) if !self.campaign_commands => {
                    return Some(DriverRefusal::CampaignCommand);
                }
                DriverKind::Command(_) => (&self.command_env, Allowlist::Worker),
                DriverKind::Container(_) if !self.containers => {
                    return Some(DriverRefusal::ContainerRuntime);
                }
                // The container driver gets the env the worker allows (--allow-env).
                DriverKind::Container(_) => (&self.command_env, Allowlist::Worker),
                DriverKind::Named(name) => match self.drivers.get(name) {
                    Some(env) => (env, Allowlist::Driver(name.clone())),
                    None => {
                        return Some(DriverRefusal::MissingDriver {
                            driver: name.clone(),
                        });
                    }
                },
            }
        };
        env_refusal(&driver.env, allow.0, allow.1)
    }
}

/// The first env name (set, or read as `$NAME`) that is reserved or not on the allowlist.
pub fn env_refusal(
    env: &BTreeMap<String, String>,
    allowed: &BTreeSet<String>,
    allowlist: Allowlist,
) -> Option<DriverRefusal> {
    for (name, value) in env {
        for n in std::iter::once(name.as_str()).chain(source_of(value)) {
            if reserved(n).is_some() {
                return Some(DriverRefusal::EnvReserved { name: n.to_owned() });
            }
            if !allowed.contains(n) {
                return Some(DriverRefusal::EnvNotAllowed {
                    name: n.to_owned(),
                    allowlist,
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
