//! Admission of an attempt: write the attempt record, start (or reuse) the lane's driver,
//! and check the driver's identity against the campaign's pins. Runs in a spawned task,
//! because starting a driver can be slow; the driver slot travels with it and comes back.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use lanes_common::ids::DriverName;
use lanes_common::policy::offer::env_refusal;
use lanes_common::policy::{Allowlist, DriverRefusal};
use lanes_common::proto as pb;
use lanes_common::row::{DriverIdentity, FailureKind};
use lanes_common::spec::env::source_of;

use super::parse_json;
use crate::artifacts;
use crate::driver::process::{DriverCommand, DriverError, DriverProcess, Notification, RunAs};
use crate::driver::protocol::{self as proto, InitializeParams, TeardownParams, method};
use crate::lifecycle::Event;
use crate::secrets::Secrets;
use crate::worker::WorkerConfig;

const INIT_DEADLINE: Duration = Duration::from_secs(60);
const TEARDOWN_DEADLINE: Duration = Duration::from_secs(600);

/// The lane's driver process, what it was started from, and its identity.
#[derive(Default)]
pub(crate) struct DriverSlot {
    pub(super) driver: Option<Arc<DriverProcess>>,
    pub(super) key: Option<Vec<String>>,
    pub(super) identity: Option<DriverIdentity>,
    /// The command of the last driver this lane started: starting it again is a restart.
    pub(super) started: Option<Vec<String>>,
    /// Counts restarts, when metrics are on.
    pub(super) restarts: Option<crate::metrics::WorkerMetrics>,
    /// A driver process started before the lane asked for work, not initialized yet.
    pub(super) spare: Option<Spare>,
}

/// A driver process started, initialized and torn down ahead of any assignment, so that the
/// first attempt's admission does not wait for a process to start or for two calls: with
/// hundreds of lanes starting at once, their driver starts and calls queue for the CPU and
/// took seconds. Only a process that does not depend on the campaign is started ahead (the
/// sim, or `--driver` without env). A campaign with sim settings re-initializes the built-in
/// sim with them (one call; the sim takes a second `initialize`); any other driver gets
/// `initialize` once, so a `--driver` spare serves only campaigns without sim settings.
pub(crate) struct Spare {
    key: Vec<String>,
    driver: Arc<DriverProcess>,
    identity: DriverIdentity,
    /// The built-in sim: it may be initialized again with a campaign's sim settings.
    is_sim: bool,
}

impl DriverSlot {
    /// Kills the driver so the next attempt starts a fresh one.
    pub(super) async fn restart(&mut self) {
        if let Some(d) = self.driver.take() {
            d.kill().await;
        }
        self.key = None;
    }

    /// Kills the driver and the spare (the lane stops).
    pub(super) async fn stop(&mut self) {
        self.restart().await;
        if let Some(s) = self.spare.take() {
            s.driver.kill().await;
        }
    }
}

impl Spare {
    /// Kills the process (a lane that stopped before it took it).
    pub(super) async fn kill(self) {
        self.driver.kill().await;
    }
}

/// What a driver process is started from: two launches with the same key start the same
/// process (in memory only: env values are secrets).
fn process_key(l: &Launch) -> Vec<String> {
    let mut k = l.command.clone();
    k.push(format!("cwd={:?} user={:?}", l.cwd, l.user));
    k.extend(l.env.iter().map(|(n, v)| format!("{n}={v}")));
    k
}

/// The driver this worker's lanes start ahead: the `--driver` override (with no env), or
/// else the built-in sim.
fn spare_launch(config: &WorkerConfig) -> Launch {
    Launch {
        command: config
            .driver_override
            .clone()
            .unwrap_or_else(|| config.sim_command.clone()),
        cwd: None,
        user: None,
        env: Vec::new(),
    }
}

/// Starts the spare driver of a lane, initializes it without sim settings and tears down what
/// an earlier process of the lane left behind; `None` when any step fails (the first attempt
/// then starts its driver itself, and says why if it cannot either).
pub(super) async fn start_spare(config: &WorkerConfig, lane: &str) -> Option<Spare> {
    let launch = spare_launch(config);
    let key = process_key(&launch);
    let is_sim = launch.command == config.sim_command;
    let records = config.outbox.join(crate::driver::process::RECORDS_DIR);
    let started = async {
        let driver = spawn(launch, &records).await?;
        drain_notifications(&driver, lane);
        let identity = initialize(&driver, lane, config.host.as_str(), None).await?;
        teardown_leftovers(&driver, lane).await;
        Ok::<_, DriverError>(Spare {
            key,
            identity,
            is_sim,
            driver,
        })
    };
    match started.await {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::debug!(lane, error = %e, "no spare driver started");
            None
        }
    }
}

/// Starts a driver process.
async fn spawn(
    launch: Launch,
    records: &std::path::Path,
) -> Result<Arc<DriverProcess>, DriverError> {
    let Some((program, args)) = launch.command.split_first() else {
        return Err(DriverError::Spawn {
            program: String::new(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command"),
        });
    };
    let command = DriverCommand {
        program: program.clone(),
        args: args.to_vec(),
        cwd: launch.cwd,
        env: launch.env,
        user: launch.user,
        record_dir: Some(records.to_path_buf()),
    };
    Ok(Arc::new(DriverProcess::spawn(&command).await?))
}

/// Logs the driver's progress and log notifications as they come, so they never pile up.
fn drain_notifications(driver: &DriverProcess, lane: &str) {
    let Some(mut notes) = driver.take_notifications() else {
        return;
    };
    let lane = lane.to_owned();
    tokio::spawn(async move {
        while let Some(n) = notes.recv().await {
            match n {
                Notification::Progress(p) => {
                    tracing::debug!(lane = %lane, tag = %p.tag, turns = ?p.turns, message = ?p.message, "driver progress");
                }
                Notification::Log(l) => {
                    tracing::debug!(lane = %lane, level = %l.level, message = %l.message, "driver log");
                }
            }
        }
    });
}

async fn initialize(
    driver: &DriverProcess,
    lane: &str,
    host: &str,
    sim: Option<Value>,
) -> Result<DriverIdentity, DriverError> {
    driver
        .call(
            method::INITIALIZE,
            &InitializeParams {
                protocol: proto::PROTOCOL.into(),
                lane: lane.to_owned(),
                host: host.to_owned(),
                sim,
            },
            INIT_DEADLINE,
        )
        .await
}

/// `teardown` without a tag: whatever an earlier process of the lane left behind. Its answer
/// is ignored, as the protocol says.
async fn teardown_leftovers(driver: &DriverProcess, lane: &str) {
    let _: Result<Value, _> = driver
        .call(
            method::TEARDOWN,
            &TeardownParams {
                lane: lane.to_owned(),
                tag: None,
            },
            TEARDOWN_DEADLINE,
        )
        .await;
}

/// What admission needs, owned, so it can run in a task.
pub(super) struct AdmitCtx {
    pub dir: std::io::Result<PathBuf>,
    pub record: Value,
    /// How to start the driver, or why this worker refuses to.
    pub launch: Result<Launch, String>,
    pub key: Vec<String>,
    pub lane: String,
    pub host: String,
    pub spec: pb::DriverSpec,
    /// The attempt's secrets, masked in the driver's stderr and notifications.
    pub secrets: Secrets,
    /// Where running drivers are recorded, for the orphan sweep of the next worker start.
    pub driver_records: PathBuf,
}

/// How this worker starts a unit's driver: the command, where, as whom, and with what env.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Launch {
    pub command: Vec<String>,
    pub cwd: Option<PathBuf>,
    pub user: Option<RunAs>,
    /// Names and values; the values are secrets.
    pub env: Vec<(String, String)>,
}

/// Resolves a unit's driver on this host: `--driver` wins over everything; a named driver
/// comes from the drivers file; a campaign command runs only with `--allow-campaign-commands`;
/// no driver at all means the built-in sim, which gets no env. The campaign's env is checked
/// against the allowlist that applies (reserved names never pass), and `lookup` (the worker's
/// environment) is asked only for allowed `$NAME`s. The coordinator serves a worker only
/// campaigns its offer covers, so a refusal here is a second line of defence.
pub(super) fn launch(
    spec: &pb::DriverSpec,
    config: &WorkerConfig,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Launch, String> {
    let d = &config.drivers;
    let (command, cwd, user, allowed, allowlist) = if let Some(cmd) = &config.driver_override {
        (cmd.clone(), None, None, &d.allow_env, Allowlist::Worker)
    } else if !spec.name.is_empty() {
        let name = DriverName::new(spec.name.clone()).map_err(|e| e.to_string())?;
        let Some(local) = d.named.get(&name) else {
            return Err(DriverRefusal::MissingDriver { driver: name }.to_string());
        };
        let cmd = local.command.clone();
        (
            cmd,
            local.cwd.clone(),
            local.user,
            &local.env,
            Allowlist::Driver(name),
        )
    } else if spec.container {
        let Some(rt) = &d.container else {
            return Err(DriverRefusal::ContainerRuntime.to_string());
        };
        let exe = config
            .sim_command
            .first()
            .cloned()
            .unwrap_or_else(|| "lanes".to_owned());
        let command = vec![
            exe,
            "driver".to_owned(),
            "container".to_owned(),
            "--runtime".to_owned(),
            rt.program.clone(),
            "--max-builds".to_owned(),
            rt.max_builds.to_string(),
            "--state-dir".to_owned(),
            config.outbox.join("container").display().to_string(),
        ];
        (command, None, None, &d.allow_env, Allowlist::Worker)
    } else if !spec.command.is_empty() {
        if !d.campaign_commands {
            return Err(DriverRefusal::CampaignCommand.to_string());
        }
        (
            spec.command.clone(),
            None,
            None,
            &d.allow_env,
            Allowlist::Worker,
        )
    } else {
        return Ok(Launch {
            command: config.sim_command.clone(),
            cwd: None,
            user: None,
            env: Vec::new(),
        });
    };
    let wanted: BTreeMap<String, String> = spec.env.clone().into_iter().collect();
    if let Some(refusal) = env_refusal(&wanted, allowed, allowlist) {
        return Err(refusal.to_string());
    }
    let mut env: Vec<(String, String)> = wanted
        .into_iter()
        .map(|(name, v)| {
            let value = match source_of(&v) {
                Some(source) => lookup(source).unwrap_or_default(),
                None => v,
            };
            (name, value)
        })
        .collect();
    if spec.container && config.driver_override.is_none() {
        // The container driver: which of its variables a command agent gets (the campaign's
        // own), and the runtime's own settings, from the worker's environment.
        let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        let names = names.join(",");
        env.push((crate::container::AGENT_ENV.to_owned(), names));
        env.extend(
            crate::drivers::RUNTIME_ENV
                .iter()
                .filter_map(|n| lookup(n).map(|v| ((*n).to_owned(), v))),
        );
    }
    Ok(Launch {
        command,
        cwd,
        user,
        env,
    })
}

/// What identifies a driver process: a reused driver must have been started the same way
/// (command, place, account, env as the campaign wrote it, sim settings), or the campaign's
/// settings would never reach it.
pub(super) fn driver_key(launch: &Result<Launch, String>, spec: &pb::DriverSpec) -> Vec<String> {
    let mut key = match launch {
        Ok(l) => {
            let mut k = l.command.clone();
            k.push(format!("cwd={:?} user={:?}", l.cwd, l.user));
            k
        }
        Err(reason) => vec![format!("refused={reason}")],
    };
    let env: BTreeMap<&String, &String> = spec.env.iter().collect();
    key.push(format!("env={env:?}"));
    key.push(format!("sim={}", spec.sim_json));
    key
}

/// Writes the attempt record, then starts the driver and checks the identity pins.
pub(super) async fn admit(mut ctx: AdmitCtx, slot: &mut DriverSlot) -> Event {
    let preflight = |reason: String| Event::PreflightFailed {
        kind: FailureKind::Preflight,
        reason,
    };
    let dir = match &ctx.dir {
        Ok(d) => d.clone(),
        Err(e) => return preflight(e.to_string()),
    };
    // The record and the driver are made ready together: neither waits for the other (with
    // hundreds of lanes admitting at once, each waits its turn on the disk or the CPU), and
    // neither touches the attempt's VM.
    let record_dir = dir.clone();
    let record = std::mem::take(&mut ctx.record);
    let written =
        tokio::task::spawn_blocking(move || artifacts::write_record(&record_dir, &record));
    let started = async {
        match ctx.launch {
            Ok(launch) => ensure_driver(
                slot,
                launch,
                ctx.key,
                (&ctx.lane, &ctx.host),
                &ctx.spec,
                &ctx.driver_records,
            )
            .await
            .map_err(|e| format!("driver: {e}")),
            Err(reason) => Err(format!("driver refused on this worker: {reason}")),
        }
    };
    let (written, started) = tokio::join!(written, started);
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return preflight(format!("attempt record: {e}")),
        Err(e) => return preflight(format!("attempt record: {e}")),
    }
    let driver = match started {
        Ok(d) => d,
        Err(reason) => return preflight(reason),
    };
    driver.set_stderr_file(Some(dir.join("driver.stderr")), &ctx.secrets);
    if let Some(id) = &slot.identity {
        let differing = pin_mismatches(&ctx.spec.expect, &id.pins);
        if !differing.is_empty() {
            return Event::PreflightFailed {
                kind: FailureKind::IdentityMismatch,
                reason: format!(
                    "driver identity differs from [driver.expect]: {}",
                    differing.join("; ")
                ),
            };
        }
    }
    Event::Admitted
}

/// Every differing pin, named, so one refusal says everything that is wrong.
fn pin_mismatches(
    expect: &HashMap<String, String>,
    pins: &std::collections::BTreeMap<String, String>,
) -> Vec<String> {
    let mut differing: Vec<String> = expect
        .iter()
        .filter(|(k, want)| pins.get(*k) != Some(*want))
        .map(|(k, want)| {
            format!(
                "{k}: expected {want}, driver has {}",
                pins.get(k).map_or("none", |g| g.as_str())
            )
        })
        .collect();
    differing.sort();
    differing
}

/// Starts (or reuses) the driver for a command, initializes it, and tears down what an earlier
/// process of this lane left behind (no orphans).
async fn ensure_driver(
    slot: &mut DriverSlot,
    launch: Launch,
    want: Vec<String>,
    (lane, host): (&str, &str),
    spec: &pb::DriverSpec,
    records: &std::path::Path,
) -> Result<Arc<DriverProcess>, DriverError> {
    if let (Some(d), Some(key)) = (&slot.driver, &slot.key)
        && d.is_alive()
        && *key == want
    {
        return Ok(d.clone());
    }
    if let Some(old) = slot.driver.take() {
        old.kill().await;
    }
    let sim = (!spec.sim_json.is_empty()).then(|| parse_json(&spec.sim_json));
    let (driver, identity) = match slot.spare.take() {
        Some(s)
            if s.key == process_key(&launch)
                && s.driver.is_alive()
                && (sim.is_none() || s.is_sim) =>
        {
            // Initialized and torn down before the lane asked for work.
            let identity = match sim {
                None => s.identity,
                Some(sim) => initialize(&s.driver, lane, host, Some(sim)).await?,
            };
            (s.driver, identity)
        }
        spare => {
            if let Some(s) = spare {
                s.driver.kill().await;
            }
            let driver = spawn(launch, records).await?;
            drain_notifications(&driver, lane);
            let identity = initialize(&driver, lane, host, sim).await?;
            teardown_leftovers(&driver, lane).await;
            (driver, identity)
        }
    };
    if slot.started.as_ref() == Some(&want)
        && let Some(m) = &slot.restarts
    {
        m.driver_restarted();
    }
    slot.started = Some(want.clone());
    slot.identity = Some(identity);
    slot.driver = Some(driver.clone());
    slot.key = Some(want);
    Ok(driver)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::drivers::{Drivers, LocalDriver};

    #[test]
    fn every_differing_pin_is_named() {
        let expect: HashMap<String, String> = [("os", "ubuntu-22"), ("image", "v3"), ("ok", "1")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let pins = [("image", "v2"), ("ok", "1")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        assert_eq!(
            pin_mismatches(&expect, &pins),
            vec![
                "image: expected v3, driver has v2".to_owned(),
                "os: expected ubuntu-22, driver has none".to_owned()
            ]
        );
    }

    fn config() -> WorkerConfig {
        WorkerConfig {
            coordinators: Vec::new(),
            token: None,
            worker_id: "w".into(),
            host: "h".parse().unwrap(),
            lanes: 1,
            artifacts: PathBuf::from("art"),
            outbox: PathBuf::from("outbox"),
            driver_override: None,
            drivers: Drivers::default(),
            sim_command: vec!["lanes".into(), "driver".into(), "sim".into()],
            disk_floor_gb: None,
            arms: Vec::new(),
            shutdown_grace: Duration::from_secs(1),
            control_socket: None,
            cancel_grace: Duration::from_secs(1),
            guest_poll: Duration::from_secs(1),
            guest_grace: Duration::from_secs(1),
            task_folders: Default::default(),
            tls: Default::default(),
            http: Default::default(),
            metrics: None,
            artifact_store: None,
        }
    }

    fn osworld() -> DriverName {
        DriverName::new("osworld").unwrap()
    }

    fn with_osworld(env: &[&str]) -> WorkerConfig {
        let mut c = config();
        c.drivers.named.insert(
            osworld(),
            LocalDriver {
                command: vec!["/opt/osworld/driver".into()],
                env: env.iter().map(|s| (*s).to_owned()).collect(),
                cwd: Some(PathBuf::from("/opt/osworld")),
                user: None,
            },
        );
        c
    }

    fn spec(name: &str, command: &[&str], env: &[(&str, &str)]) -> pb::DriverSpec {
        pb::DriverSpec {
            name: name.into(),
            command: command.iter().map(|s| (*s).to_owned()).collect(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        }
    }

    /// The worker's environment, recording every name it is asked for.
    fn env_of<'a>(
        vars: &'a [(&'a str, &'a str)],
        asked: &'a std::sync::Mutex<Vec<String>>,
    ) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            asked.lock().unwrap().push(name.to_owned());
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_override_wins_and_no_driver_is_the_sim() {
        let asked = std::sync::Mutex::new(Vec::new());
        let none = |_: &str| None;
        let c = config();
        let sim = launch(&spec("", &[], &[]), &c, none).unwrap();
        assert_eq!(sim.command, c.sim_command);
        // The sim gets no campaign env.
        let sim = launch(
            &spec("", &[], &[("K", "$K")]),
            &c,
            env_of(&[("K", "v")], &asked),
        );
        assert!(sim.unwrap().env.is_empty());
        assert!(asked.lock().unwrap().is_empty());
        let mut over = config();
        over.driver_override = Some(vec!["mine".into()]);
        for s in [
            spec("", &["python3", "d.py"], &[]),
            spec("osworld", &[], &[]),
        ] {
            assert_eq!(
                launch(&s, &over, none).unwrap().command,
                vec!["mine".to_owned()]
            );
        }
    }

    #[test]
    fn a_named_driver_runs_from_the_drivers_file() {
        let c = with_osworld(&["API_KEY"]);
        let asked = std::sync::Mutex::new(Vec::new());
        let l = launch(
            &spec("osworld", &[], &[("API_KEY", "$API_KEY")]),
            &c,
            env_of(&[("API_KEY", "sk-1")], &asked),
        )
        .unwrap();
        assert_eq!(l.command, vec!["/opt/osworld/driver".to_owned()]);
        assert_eq!(l.cwd, Some(PathBuf::from("/opt/osworld")));
        assert_eq!(l.env, vec![("API_KEY".to_owned(), "sk-1".to_owned())]);
        let missing = launch(&spec("other", &[], &[]), &c, |_| None).unwrap_err();
        assert!(missing.contains("`other`"), "{missing}");
    }

    #[test]
    fn a_container_campaign_runs_the_container_driver_with_the_runtime_settings() {
        let mut c = config();
        let mut s = spec("", &[], &[("MODE", "fast")]);
        s.container = true;
        let refused = launch(&s, &c, |_| None).unwrap_err();
        assert!(refused.contains("--container-runtime"), "{refused}");
        c.drivers.container = Some(crate::drivers::ContainerRuntime {
            program: "podman".into(),
            max_builds: 3,
        });
        c.drivers.allow_env.insert("MODE".to_owned());
        let conf = |n: &str| (n == "CONTAINERS_CONF").then(|| "/etc/c.conf".to_owned());
        let l = launch(&s, &c, conf).unwrap();
        assert_eq!(
            l.command[..5],
            ["lanes", "driver", "container", "--runtime", "podman"]
        );
        assert!(l.command.windows(2).any(|w| w == ["--max-builds", "3"]));
        // The campaign's env, the names a command agent gets, the runtime's settings.
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(
            l.env,
            vec![
                pair("MODE", "fast"),
                pair(crate::container::AGENT_ENV, "MODE"),
                pair("CONTAINERS_CONF", "/etc/c.conf"),
            ]
        );
        // The --driver override replaces it, and gets no runtime settings.
        c.driver_override = Some(vec!["mine".into()]);
        let l = launch(&s, &c, conf).unwrap();
        assert_eq!(
            (l.command, l.env),
            (vec!["mine".to_owned()], vec![pair("MODE", "fast")])
        );
    }

    #[test]
    fn a_campaign_command_needs_allow_campaign_commands() {
        let mut c = config();
        let s = spec("", &["python3", "d.py"], &[]);
        let refused = launch(&s, &c, |_| None).unwrap_err();
        assert!(refused.contains("--allow-campaign-commands"), "{refused}");
        c.drivers.campaign_commands = true;
        assert_eq!(launch(&s, &c, |_| None).unwrap().command, s.command);
    }

    /// A `$NAME` the worker does not allow is never read from its environment, even when the
    /// name it sets is allowed, and a reserved name is refused whatever the allowlist says.
    #[test]
    fn only_allowed_sources_are_read() {
        let c = with_osworld(&["API_KEY"]);
        let asked = std::sync::Mutex::new(Vec::new());
        let vars = [("API_KEY", "sk-1"), ("AWS_SECRET_ACCESS_KEY", "aws-secret")];
        let refused = launch(
            &spec("osworld", &[], &[("API_KEY", "$AWS_SECRET_ACCESS_KEY")]),
            &c,
            env_of(&vars, &asked),
        )
        .unwrap_err();
        assert!(refused.contains("AWS_SECRET_ACCESS_KEY"), "{refused}");
        assert!(asked.lock().unwrap().is_empty(), "{asked:?}");

        let mut open = with_osworld(&["API_KEY"]);
        open.drivers.campaign_commands = true;
        open.drivers.allow_env = ["LD_PRELOAD".to_owned(), "X".to_owned()].into();
        let refused = launch(
            &spec("", &["d"], &[("LD_PRELOAD", "/tmp/x.so")]),
            &open,
            env_of(&vars, &asked),
        )
        .unwrap_err();
        assert!(refused.contains("LD_PRELOAD"), "{refused}");
        let refused = launch(
            &spec("", &["d"], &[("X", "$LANES_LANE_TOKEN")]),
            &open,
            env_of(&vars, &asked),
        )
        .unwrap_err();
        assert!(refused.contains("LANES_LANE_TOKEN"), "{refused}");
        assert!(asked.lock().unwrap().is_empty(), "{asked:?}");
    }
}
