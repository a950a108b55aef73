//! Admission of an attempt: write the attempt record, start (or reuse) the lane's driver,
//! and check the driver's identity against the campaign's pins. Runs in a spawned task,
//! because starting a driver can be slow; the driver slot travels with it and comes back.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use lanes_common::proto as pb;
use lanes_common::row::{DriverIdentity, FailureKind};

use super::parse_json;
use crate::artifacts;
use crate::driver::process::{DriverCommand, DriverError, DriverProcess, Notification};
use crate::driver::protocol::{self as proto, InitializeParams, TeardownParams, method};
use crate::lifecycle::Event;

const INIT_DEADLINE: Duration = Duration::from_secs(60);
const TEARDOWN_DEADLINE: Duration = Duration::from_secs(600);

/// The lane's driver process, what it was started from, and its identity.
#[derive(Default)]
pub(crate) struct DriverSlot {
    pub(super) driver: Option<Arc<DriverProcess>>,
    pub(super) key: Option<Vec<String>>,
    pub(super) identity: Option<DriverIdentity>,
}

impl DriverSlot {
    /// Kills the driver so the next attempt starts a fresh one.
    pub(super) async fn restart(&mut self) {
        if let Some(d) = self.driver.take() {
            d.kill().await;
        }
        self.key = None;
    }
}

/// What admission needs, owned, so it can run in a task.
pub(super) struct AdmitCtx {
    pub dir: std::io::Result<PathBuf>,
    pub record: Value,
    pub command: Vec<String>,
    pub key: Vec<String>,
    pub lane: String,
    pub host: String,
    pub spec: pb::DriverSpec,
}

/// The command for a driver spec on this host: `--driver` wins over the campaign's command,
/// and an empty command means the built-in sim.
pub(super) fn command(
    spec: &pb::DriverSpec,
    driver_override: Option<&Vec<String>>,
    sim: &[String],
) -> Vec<String> {
    if let Some(cmd) = driver_override {
        return cmd.clone();
    }
    if spec.command.is_empty() {
        return sim.to_vec();
    }
    spec.command.clone()
}

/// What identifies a driver process: a reused driver must have been started with the same
/// command, env and sim settings, or the campaign's settings would never reach it.
pub(super) fn driver_key(command: Vec<String>, spec: &pb::DriverSpec) -> Vec<String> {
    let mut key = command;
    key.push(format!("env={:?}", spec.env));
    key.push(format!("sim={}", spec.sim_json));
    key
}

/// Writes the attempt record, then starts the driver and checks the identity pins.
pub(super) async fn admit(ctx: AdmitCtx, slot: &mut DriverSlot) -> Event {
    let preflight = |reason: String| Event::PreflightFailed {
        kind: FailureKind::Preflight,
        reason,
    };
    let dir = match ctx.dir {
        Ok(d) => d,
        Err(e) => return preflight(e.to_string()),
    };
    let record_dir = dir.clone();
    let record = ctx.record;
    let written =
        tokio::task::spawn_blocking(move || artifacts::write_record(&record_dir, &record)).await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return preflight(format!("attempt record: {e}")),
        Err(e) => return preflight(format!("attempt record: {e}")),
    }
    let driver =
        match ensure_driver(slot, ctx.command, ctx.key, &ctx.lane, &ctx.host, &ctx.spec).await {
            Ok(d) => d,
            Err(e) => return preflight(format!("driver: {e}")),
        };
    driver.set_stderr_file(Some(dir.join("driver.stderr")));
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

/// The driver's environment: the campaign's `[driver] env`, where `$NAME` takes the worker's
/// variable of that name.
fn driver_env(spec: &pb::DriverSpec) -> Vec<(String, String)> {
    spec.env
        .iter()
        .map(|(k, v)| {
            let value = match v.strip_prefix('$') {
                Some(name) => std::env::var(name).unwrap_or_default(),
                None => v.clone(),
            };
            (k.clone(), value)
        })
        .collect()
}

/// Starts (or reuses) the driver for a command, initializes it, and tears down what an earlier
/// process of this lane left behind (no orphans).
async fn ensure_driver(
    slot: &mut DriverSlot,
    cmd: Vec<String>,
    want: Vec<String>,
    lane: &str,
    host: &str,
    spec: &pb::DriverSpec,
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
    let command = DriverCommand {
        program: cmd[0].clone(),
        args: cmd[1..].to_vec(),
        cwd: None,
        env: driver_env(spec),
    };
    let driver = Arc::new(DriverProcess::spawn(&command).await?);
    // Progress and log notifications are logged as they come, so they never pile up.
    if let Some(mut notes) = driver.take_notifications() {
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
    let sim = (!spec.sim_json.is_empty()).then(|| parse_json(&spec.sim_json));
    let identity: DriverIdentity = driver
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
        .await?;
    let _: Value = driver
        .call(
            method::TEARDOWN,
            &TeardownParams {
                lane: lane.to_owned(),
                tag: None,
            },
            TEARDOWN_DEADLINE,
        )
        .await
        .unwrap_or(Value::Null);
    slot.identity = Some(identity);
    slot.driver = Some(driver.clone());
    slot.key = Some(want);
    Ok(driver)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_override_wins_and_an_empty_command_is_the_sim() {
        let sim = vec!["lanes".to_owned(), "driver".to_owned(), "sim".to_owned()];
        let mut spec = pb::DriverSpec::default();
        assert_eq!(command(&spec, None, &sim), sim);
        spec.command = vec!["python3".into(), "d.py".into()];
        assert_eq!(command(&spec, None, &sim), spec.command);
        let over = vec!["mine".to_owned()];
        assert_eq!(command(&spec, Some(&over), &sim), over);
    }
}
