//! Harbor task folders as a task source (`[tasks] harbor = "DIR"`): every sub-folder of DIR
//! that holds a `task.toml` is one task, whose id is the folder's name. Lanes reads the
//! subset of the format it runs (one container, one step, a shell verifier writing a reward
//! file) and refuses the rest at load, naming the task and the key: a task is never run with
//! part of its definition ignored.
//!
//! Each task's payload carries its `task.toml` settings, a digest of the whole folder and one
//! digest per file, so the spec hash covers every byte of every task, a resume after an edit
//! is refused naming the file, and a worker can check the folder it runs is the one submitted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::Value;

use super::bundle::Bundle;
pub use super::bundle::{
    MAX_BUNDLE_BYTES as MAX_TASK_FOLDER_BYTES, MAX_BUNDLE_FILES as MAX_TASK_FILES,
};
/// The payload key a Harbor task's settings live under.
pub const PAYLOAD_KEY: &str = "harbor";

/// What the container driver needs of one task, read from its `task.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarborTask {
    /// `sha256:<hex>` over every file of the folder (paths, executable bits and contents).
    pub digest: String,
    /// Each file's `sha256:<hex>`, by its path inside the folder (`/`-separated).
    pub files: BTreeMap<String, String>,
    /// `[verifier] timeout_sec` (600 when absent).
    pub verifier_timeout_s: f64,
    /// `[agent] timeout_sec`, if any: it becomes the trial's `timeout_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_timeout_s: Option<f64>,
    /// `[environment] build_timeout_sec` (600 when absent).
    pub build_timeout_s: f64,
    /// `[environment] docker_image`: run this image instead of building `environment/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docker_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// `false` (from `allow_internet = false` or `network_mode = "no-network"`): loopback only.
    pub allow_internet: bool,
    /// The working directory of the agent, the solution and the tests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// `[environment.env]`: set in the container for everything that runs in it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// `[verifier.env]`: added for the tests.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub verifier_env: BTreeMap<String, String>,
    /// `[solution.env]`: added for the oracle's `solve.sh`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub solution_env: BTreeMap<String, String>,
    /// `[metadata]`, as written (difficulty, category, tags…): for reports.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl HarborTask {
    /// The task's settings in a payload, if it is a Harbor task.
    pub fn from_payload(payload: &serde_json::Value) -> Option<Result<Self, serde_json::Error>> {
        payload
            .get(PAYLOAD_KEY)
            .map(|v| serde_json::from_value(v.clone()))
    }

    /// The trial's `timeout_s`: the agent's timeout, rounded up to a whole second.
    pub fn timeout_s(&self) -> Option<u32> {
        self.agent_timeout_s
            .map(|s| s.ceil().clamp(1.0, f64::from(u32::MAX)) as u32)
    }
}

/// Why a task folder cannot be run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HarborError {
    #[error("{dir}: {reason}")]
    Dir { dir: PathBuf, reason: String },
    #[error("task `{task}`: {file}: {reason}")]
    File {
        task: String,
        file: String,
        reason: String,
    },
    #[error("task `{task}`: task.toml `{key}`: {reason}")]
    Key {
        task: String,
        key: String,
        reason: String,
    },
}

/// Every task folder under `dir`, sorted by id: (id, folder, settings).
pub fn load_dir(dir: &Path) -> Result<Vec<(String, PathBuf, HarborTask)>, HarborError> {
    let dir_err = |reason: String| HarborError::Dir {
        dir: dir.to_owned(),
        reason,
    };
    let entries = std::fs::read_dir(dir).map_err(|e| dir_err(e.to_string()))?;
    let mut folders = Vec::new();
    for e in entries {
        let e = e.map_err(|e| dir_err(e.to_string()))?;
        let path = e.path();
        if path.is_dir() && path.join("task.toml").is_file() {
            let id = e
                .file_name()
                .into_string()
                .map_err(|n| dir_err(format!("folder name {n:?} is not UTF-8")))?;
            folders.push((id, path));
        }
    }
    if folders.is_empty() {
        return Err(dir_err(
            "no task folder (a sub-folder holding a task.toml)".to_owned(),
        ));
    }
    folders.sort();
    folders
        .into_iter()
        .map(|(id, path)| {
            let task = load_task(&id, &path)?;
            Ok((id, path, task))
        })
        .collect()
}

/// The task folders of a campaign file that has `[tasks] harbor`, by digest (`lanes run`
/// hands them to its lanes); empty for any other campaign file.
pub fn folders_of_campaign(file: &Path) -> Result<BTreeMap<String, PathBuf>, HarborError> {
    let dir_err = |reason: String| HarborError::Dir {
        dir: file.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(file).map_err(|e| dir_err(e.to_string()))?;
    let doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| dir_err(e.to_string()))?;
    let Some(dir) = doc
        .get("tasks")
        .and_then(|t| t.get("harbor"))
        .and_then(Value::as_str)
    else {
        return Ok(BTreeMap::new());
    };
    let base = file.parent().unwrap_or(Path::new("."));
    // Absolute: the folders are handed to driver processes that run elsewhere.
    let dir = std::fs::canonicalize(base.join(dir)).map_err(|e| dir_err(e.to_string()))?;
    Ok(load_dir(&dir)?
        .into_iter()
        .map(|(_, path, task)| (task.digest, path))
        .collect())
}

/// Reads one task folder: its files (digested, within the limits) and its `task.toml`.
pub fn load_task(id: &str, dir: &Path) -> Result<HarborTask, HarborError> {
    let file_err = |file: &str, reason: String| HarborError::File {
        task: id.to_owned(),
        file: file.to_owned(),
        reason,
    };
    let (digest, files) = digest_dir(dir).map_err(|(file, reason)| file_err(&file, reason))?;
    for required in ["instruction.md", "tests/test.sh"] {
        if !files.contains_key(required) {
            return Err(file_err(required, "missing".to_owned()));
        }
    }
    for compose in [
        "environment/docker-compose.yaml",
        "environment/docker-compose.yml",
    ] {
        if files.contains_key(compose) {
            return Err(file_err(
                compose,
                "compose environments are not supported: Lanes runs one container per attempt \
                 from environment/Dockerfile or [environment] docker_image"
                    .to_owned(),
            ));
        }
    }
    if let Some(f) = files.keys().find(|f| f.starts_with("steps/")) {
        return Err(file_err(
            f,
            "multi-step tasks (steps/) are not supported".to_owned(),
        ));
    }
    if files.contains_key("tests/Dockerfile") {
        return Err(file_err(
            "tests/Dockerfile",
            "a separate verifier image is not supported: the tests run in the task's container"
                .to_owned(),
        ));
    }
    let text = std::fs::read_to_string(dir.join("task.toml"))
        .map_err(|e| file_err("task.toml", e.to_string()))?;
    let mut task = parse_task_toml(id, &text)?;
    if task.docker_image.is_none() && !files.contains_key("environment/Dockerfile") {
        return Err(file_err(
            "environment/Dockerfile",
            "missing, and task.toml sets no [environment] docker_image".to_owned(),
        ));
    }
    task.digest = digest;
    task.files = files;
    Ok(task)
}

/// Reads a folder in path order: the digest of the whole, and one per file (see
/// [`Bundle`]). Errors name the file.
pub fn digest_dir(dir: &Path) -> Result<(String, BTreeMap<String, String>), (String, String)> {
    Bundle::read_dir(dir)
        .map(|b| b.digests())
        .map_err(|e| (e.path, e.reason))
}

/// Reads `task.toml`: the keys Lanes runs, the informational ones, and a refusal for
/// everything else, naming the key.
pub fn parse_task_toml(id: &str, text: &str) -> Result<HarborTask, HarborError> {
    let key_err = |key: &str, reason: &str| HarborError::Key {
        task: id.to_owned(),
        key: key.to_owned(),
        reason: reason.to_owned(),
    };
    let doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| HarborError::File {
            task: id.to_owned(),
            file: "task.toml".to_owned(),
            reason: e.message().to_owned(),
        })?;
    let mut task = HarborTask {
        digest: String::new(),
        files: BTreeMap::new(),
        verifier_timeout_s: 600.0,
        agent_timeout_s: None,
        build_timeout_s: 600.0,
        docker_image: None,
        cpus: None,
        memory_mb: None,
        allow_internet: true,
        workdir: None,
        env: BTreeMap::new(),
        verifier_env: BTreeMap::new(),
        solution_env: BTreeMap::new(),
        metadata: serde_json::Map::new(),
    };
    let mut version_seen = false;
    for (key, value) in &doc {
        match key.as_str() {
            "schema_version" | "version" => {
                if version_seen {
                    return Err(key_err(key, "set `schema_version` or `version`, not both"));
                }
                version_seen = true;
                let v = value
                    .as_str()
                    .ok_or_else(|| key_err(key, "must be a string such as \"1.1\""))?;
                if !v.starts_with("1.") && v != "1" {
                    return Err(key_err(
                        key,
                        "unsupported schema version (Lanes reads the 1.x task format)",
                    ));
                }
            }
            // Informational: the registry's package table and where the task came from.
            "task" | "source" => {}
            "metadata" => {
                let t = table(value, key, &key_err)?;
                task.metadata = serde_json::to_value(t)
                    .ok()
                    .and_then(|v| v.as_object().cloned())
                    .ok_or_else(|| key_err(key, "must be a table of plain values"))?;
            }
            "verifier" => {
                for (k, v) in table(value, key, &key_err)? {
                    let name = format!("verifier.{k}");
                    match k.as_str() {
                        "timeout_sec" => task.verifier_timeout_s = seconds(v, &name, &key_err)?,
                        "env" => task.verifier_env = env(v, &name, &key_err)?,
                        _ => return Err(unsupported(&name, &key_err)),
                    }
                }
            }
            "agent" => {
                for (k, v) in table(value, key, &key_err)? {
                    let name = format!("agent.{k}");
                    match k.as_str() {
                        "timeout_sec" => {
                            task.agent_timeout_s = Some(seconds(v, &name, &key_err)?);
                        }
                        _ => return Err(unsupported(&name, &key_err)),
                    }
                }
            }
            "solution" => {
                for (k, v) in table(value, key, &key_err)? {
                    let name = format!("solution.{k}");
                    match k.as_str() {
                        "env" => task.solution_env = env(v, &name, &key_err)?,
                        _ => return Err(unsupported(&name, &key_err)),
                    }
                }
            }
            "environment" => environment(&mut task, table(value, key, &key_err)?, &key_err)?,
            "steps" | "multi_step_reward_strategy" => {
                return Err(key_err(key, "multi-step tasks are not supported"));
            }
            "artifacts" => {
                if value.as_array().is_some_and(|a| !a.is_empty()) {
                    return Err(key_err(
                        key,
                        "collected artifacts are not supported: /logs/agent and /logs/verifier \
                         are copied into the attempt's folder",
                    ));
                }
            }
            _ => return Err(key_err(key, "unknown key")),
        }
    }
    Ok(task)
}

fn environment(
    task: &mut HarborTask,
    t: &toml::Table,
    key_err: &impl Fn(&str, &str) -> HarborError,
) -> Result<(), HarborError> {
    let mut network_mode: Option<&str> = None;
    for (k, v) in t {
        let name = format!("environment.{k}");
        match k.as_str() {
            "build_timeout_sec" => task.build_timeout_s = seconds(v, &name, key_err)?,
            "docker_image" => {
                let image = v
                    .as_str()
                    .filter(|s| !s.trim().is_empty())
                    .ok_or_else(|| key_err(&name, "must be an image name"))?;
                task.docker_image = Some(image.to_owned());
            }
            "os" => {
                if v.as_str() != Some("linux") {
                    return Err(key_err(&name, "only \"linux\" tasks are supported"));
                }
            }
            "cpus" => {
                let cpus = number(v)
                    .filter(|c| c.is_finite() && *c > 0.0)
                    .ok_or_else(|| key_err(&name, "must be a positive number"))?;
                task.cpus = Some(cpus);
            }
            "memory_mb" => {
                let mb = v
                    .as_integer()
                    .and_then(|m| u64::try_from(m).ok())
                    .filter(|m| *m >= 6)
                    .ok_or_else(|| key_err(&name, "must be a whole number of MiB, at least 6"))?;
                task.memory_mb = Some(mb);
            }
            "memory" => {
                let mb = v
                    .as_str()
                    .and_then(size_mb)
                    .filter(|m| *m >= 6)
                    .ok_or_else(|| {
                        key_err(
                            &name,
                            "must be a size such as \"2G\" or \"512M\", at least 6M",
                        )
                    })?;
                task.memory_mb = Some(mb);
            }
            // Not enforced by a container runtime's CLI (nor by Harbor's docker environment):
            // read and checked, and disclosed as not enforced in the docs.
            "storage_mb" => {
                v.as_integer()
                    .filter(|m| *m > 0)
                    .ok_or_else(|| key_err(&name, "must be a positive whole number"))?;
            }
            "storage" => {
                v.as_str()
                    .and_then(size_mb)
                    .ok_or_else(|| key_err(&name, "must be a size such as \"10G\""))?;
            }
            "gpus" => {
                if v.as_integer() != Some(0) {
                    return Err(key_err(&name, "GPUs are not supported (only gpus = 0)"));
                }
            }
            "gpu_types" | "allowed_hosts" | "mcp_servers" => {
                if v.as_array().is_none_or(|a| !a.is_empty()) {
                    let what = match k.as_str() {
                        "gpu_types" => "GPUs are not supported",
                        "allowed_hosts" => {
                            "network allowlists are not supported: the network is on or off"
                        }
                        _ => "MCP servers are not supported",
                    };
                    return Err(key_err(&name, what));
                }
            }
            "allow_internet" => {
                task.allow_internet = v
                    .as_bool()
                    .ok_or_else(|| key_err(&name, "must be true or false"))?;
            }
            "network_mode" => {
                let mode = v.as_str().unwrap_or_default();
                match mode {
                    "public" | "no-network" => network_mode = Some(mode),
                    _ => {
                        return Err(key_err(
                            &name,
                            "only \"public\" and \"no-network\" are supported",
                        ));
                    }
                }
            }
            "workdir" => {
                let w = v
                    .as_str()
                    .filter(|w| w.starts_with('/'))
                    .ok_or_else(|| key_err(&name, "must be an absolute path"))?;
                task.workdir = Some(w.to_owned());
            }
            "env" => task.env = env(v, &name, key_err)?,
            // tpu, skills_dir, healthcheck and anything newer.
            _ => return Err(unsupported(&name, key_err)),
        }
    }
    match network_mode {
        Some("no-network") => task.allow_internet = false,
        Some(_) if !task.allow_internet => {
            return Err(key_err(
                "environment.network_mode",
                "\"public\" contradicts allow_internet = false",
            ));
        }
        _ => {}
    }
    Ok(())
}

fn unsupported(key: &str, key_err: &impl Fn(&str, &str) -> HarborError) -> HarborError {
    key_err(key, "not supported by Lanes")
}

fn table<'a>(
    v: &'a Value,
    key: &str,
    key_err: &impl Fn(&str, &str) -> HarborError,
) -> Result<&'a toml::Table, HarborError> {
    v.as_table().ok_or_else(|| key_err(key, "must be a table"))
}

fn number(v: &Value) -> Option<f64> {
    v.as_float().or_else(|| v.as_integer().map(|i| i as f64))
}

fn seconds(
    v: &Value,
    key: &str,
    key_err: &impl Fn(&str, &str) -> HarborError,
) -> Result<f64, HarborError> {
    number(v)
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 7.0 * 86_400.0)
        .ok_or_else(|| {
            key_err(
                key,
                "must be a number of seconds, above 0 and at most a week",
            )
        })
}

/// An env table of strings. `${VAR}` templates, which Harbor fills from the host's
/// environment, are refused: a task must not read the worker's environment.
fn env(
    v: &Value,
    key: &str,
    key_err: &impl Fn(&str, &str) -> HarborError,
) -> Result<BTreeMap<String, String>, HarborError> {
    let t = table(v, key, key_err)?;
    let mut out = BTreeMap::new();
    for (name, value) in t {
        let valid_name = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid_name {
            return Err(key_err(
                &format!("{key}.{name}"),
                "not a valid environment variable name",
            ));
        }
        let value = value
            .as_str()
            .ok_or_else(|| key_err(&format!("{key}.{name}"), "must be a string"))?;
        if value.contains("${") {
            return Err(key_err(
                &format!("{key}.{name}"),
                "${VAR} templates are not supported: a task cannot read the worker's environment",
            ));
        }
        out.insert(name.clone(), value.to_owned());
    }
    Ok(out)
}

/// "2G", "512M", "1024K" (Harbor's units, powers of 1024) in MiB.
fn size_mb(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
    let n: u64 = num.parse().ok()?;
    match unit.to_ascii_uppercase().as_str() {
        "G" | "GB" => n.checked_mul(1024),
        "M" | "MB" => Some(n),
        "K" | "KB" => Some(n / 1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<HarborTask, HarborError> {
        parse_task_toml("t1", text)
    }

    #[test]
    fn the_keys_lanes_runs_are_read() {
        let t = parse(
            r#"
version = "1.0"
[metadata]
difficulty = "easy"
tags = ["shell"]
[verifier]
timeout_sec = 30.0
env = { STRICT = "1" }
[agent]
timeout_sec = 90.5
[environment]
build_timeout_sec = 120
cpus = 1
memory = "2G"
storage = "10G"
allow_internet = false
workdir = "/app"
env = { GREETING = "hello" }
[solution.env]
DEBUG = "0"
"#,
        )
        .unwrap();
        assert_eq!(t.verifier_timeout_s, 30.0);
        assert_eq!(t.agent_timeout_s, Some(90.5));
        assert_eq!(t.timeout_s(), Some(91));
        assert_eq!(t.build_timeout_s, 120.0);
        assert_eq!((t.cpus, t.memory_mb), (Some(1.0), Some(2048)));
        assert!(!t.allow_internet);
        assert_eq!(t.workdir.as_deref(), Some("/app"));
        assert_eq!(t.env["GREETING"], "hello");
        assert_eq!(t.verifier_env["STRICT"], "1");
        assert_eq!(t.solution_env["DEBUG"], "0");
        assert_eq!(t.metadata["difficulty"], "easy");
        // Defaults.
        let d = parse("schema_version = \"1.1\"").unwrap();
        assert_eq!((d.verifier_timeout_s, d.build_timeout_s), (600.0, 600.0));
        assert!(d.allow_internet && d.agent_timeout_s.is_none());
        let off = parse("[environment]\nnetwork_mode = \"no-network\"").unwrap();
        assert!(!off.allow_internet);
    }

    #[test]
    fn what_lanes_does_not_run_is_refused_naming_the_key() {
        for (text, key, says) in [
            ("[environment]\nos = \"windows\"", "environment.os", "linux"),
            ("[[steps]]\nname = \"a\"", "steps", "multi-step"),
            (
                "[[environment.mcp_servers]]\nname = \"m\"",
                "environment.mcp_servers",
                "MCP",
            ),
            ("[environment]\ngpus = 1", "environment.gpus", "GPU"),
            (
                "[environment]\nnetwork_mode = \"allowlist\"",
                "environment.network_mode",
                "no-network",
            ),
            (
                "[environment]\nallowed_hosts = [\"x.org\"]",
                "environment.allowed_hosts",
                "allowlist",
            ),
            (
                "[environment.healthcheck]\ncommand = \"true\"",
                "environment.healthcheck",
                "not supported",
            ),
            (
                "[verifier]\nuser = \"tester\"",
                "verifier.user",
                "not supported",
            ),
            ("[agent]\nuser = 1000", "agent.user", "not supported"),
            (
                "[environment.env]\nKEY = \"${HOST_SECRET}\"",
                "environment.env.KEY",
                "worker's environment",
            ),
            (
                "[environment]\nmemory = \"lots\"",
                "environment.memory",
                "size",
            ),
            ("[agent]\ntimeout_sec = -1", "agent.timeout_sec", "seconds"),
            ("schema_version = \"2.0\"", "schema_version", "1.x"),
            ("surprise = 1", "surprise", "unknown key"),
            ("artifacts = [\"/out\"]", "artifacts", "not supported"),
        ] {
            let e = parse(text).unwrap_err();
            let HarborError::Key { task, key: k, .. } = &e else {
                panic!("{text}: {e}");
            };
            assert_eq!((task.as_str(), k.as_str()), ("t1", key), "{text}");
            assert!(e.to_string().contains(says), "{text}: {e}");
        }
    }

    fn write(dir: &Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    fn minimal(dir: &Path) {
        write(dir, "task.toml", "version = \"1.0\"\n");
        write(dir, "instruction.md", "Do it.\n");
        write(dir, "environment/Dockerfile", "FROM scratch\n");
        write(dir, "tests/test.sh", "echo 1 > /logs/verifier/reward.txt\n");
    }

    #[test]
    fn a_folder_is_digested_file_by_file_and_every_change_shows() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("t1");
        minimal(&dir);
        let a = load_task("t1", &dir).unwrap();
        assert!(a.digest.starts_with("sha256:"), "{}", a.digest);
        assert_eq!(
            a.files.keys().collect::<Vec<_>>(),
            [
                "environment/Dockerfile",
                "instruction.md",
                "task.toml",
                "tests/test.sh"
            ]
        );
        // A change of contents, of a name, or of the executable bit changes the digest.
        write(
            &dir,
            "tests/test.sh",
            "echo 0 > /logs/verifier/reward.txt\n",
        );
        let b = load_task("t1", &dir).unwrap();
        assert_ne!(a.digest, b.digest);
        assert_ne!(a.files["tests/test.sh"], b.files["tests/test.sh"]);
        assert_eq!(a.files["task.toml"], b.files["task.toml"]);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            dir.join("tests/test.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        assert_ne!(load_task("t1", &dir).unwrap().digest, b.digest);
    }

    #[test]
    fn folders_lanes_cannot_run_are_refused_naming_the_file() {
        let root = tempfile::tempdir().unwrap();
        type Breaks<'a> = &'a dyn Fn(&Path);
        let cases: [(&str, Breaks<'_>, &str); 6] = [
            (
                "instruction.md",
                &|d| std::fs::remove_file(d.join("instruction.md")).unwrap(),
                "missing",
            ),
            (
                "tests/test.sh",
                &|d| std::fs::remove_file(d.join("tests/test.sh")).unwrap(),
                "missing",
            ),
            (
                "environment/Dockerfile",
                &|d| std::fs::remove_file(d.join("environment/Dockerfile")).unwrap(),
                "docker_image",
            ),
            (
                "environment/docker-compose.yaml",
                &|d| write(d, "environment/docker-compose.yaml", "services: {}\n"),
                "compose",
            ),
            (
                "steps/one/instruction.md",
                &|d| write(d, "steps/one/instruction.md", "x"),
                "multi-step",
            ),
            (
                "tests/link",
                &|d| std::os::unix::fs::symlink("/etc/passwd", d.join("tests/link")).unwrap(),
                "symlink",
            ),
        ];
        for (i, (file, break_it, says)) in cases.iter().enumerate() {
            let dir = root.path().join(format!("t{i}"));
            minimal(&dir);
            break_it(&dir);
            let e = load_task("t1", &dir).unwrap_err();
            let HarborError::File { file: f, .. } = &e else {
                panic!("{file}: {e}");
            };
            assert_eq!(f, file);
            assert!(e.to_string().contains(says), "{e}");
        }
        // docker_image instead of a Dockerfile is fine.
        let dir = root.path().join("img");
        minimal(&dir);
        std::fs::remove_file(dir.join("environment/Dockerfile")).unwrap();
        write(
            &dir,
            "task.toml",
            "version = \"1.0\"\n[environment]\ndocker_image = \"localhost/x:1\"\n",
        );
        assert_eq!(
            load_task("t1", &dir).unwrap().docker_image.as_deref(),
            Some("localhost/x:1")
        );
    }

    #[test]
    fn a_folder_past_the_size_limit_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("big");
        minimal(&dir);
        let blob = vec![0u8; (MAX_TASK_FOLDER_BYTES + 1) as usize];
        std::fs::write(dir.join("environment/blob"), blob).unwrap();
        let e = load_task("big", &dir).unwrap_err();
        assert!(e.to_string().contains("larger than"), "{e}");
    }

    #[test]
    fn a_tasks_dir_lists_its_task_folders_by_id() {
        let root = tempfile::tempdir().unwrap();
        minimal(&root.path().join("b-task"));
        minimal(&root.path().join("a-task"));
        std::fs::create_dir_all(root.path().join("not-a-task")).unwrap();
        let tasks = load_dir(root.path()).unwrap();
        let ids: Vec<&str> = tasks.iter().map(|(id, ..)| id.as_str()).collect();
        assert_eq!(ids, ["a-task", "b-task"]);
        let empty = tempfile::tempdir().unwrap();
        assert!(
            load_dir(empty.path())
                .unwrap_err()
                .to_string()
                .contains("no task folder")
        );
    }
}
