//! Podman for the container tests: a private setup (its own storage under the given root,
//! runc, ulimits within this kind of machine's hard limits) that every podman command of a
//! test uses, so nothing of the host's own containers is touched, and the example's base
//! image built offline from the host's busybox.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The environment every podman command (and every `lanes` process that runs podman) of
/// the tests gets: `CONTAINERS_CONF` and `CONTAINERS_STORAGE_CONF` under `root`. The first
/// call sets it up and builds the example's base image.
pub fn env(root: &Path) -> &'static Vec<(String, String)> {
    ENV_SET.get_or_init(|| {
        std::fs::create_dir_all(root).unwrap();
        let conf = root.join("containers.conf");
        std::fs::write(
            &conf,
            "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n\
             [engine]\nruntime = \"runc\"\n",
        )
        .unwrap();
        let storage = root.join("storage.conf");
        std::fs::write(
            &storage,
            format!(
                "[storage]\ndriver = \"overlay\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
                root.join("graph").display(),
                root.join("run").display()
            ),
        )
        .unwrap();
        let env = vec![
            ("CONTAINERS_CONF".to_owned(), conf.display().to_string()),
            (
                "CONTAINERS_STORAGE_CONF".to_owned(),
                storage.display().to_string(),
            ),
        ];
        let status = Command::new("sh")
            .arg(repo().join("examples/terminal/base-image.sh"))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .status()
            .expect("sh runs");
        assert!(status.success(), "the base image builds");
        env
    })
}

/// Runs podman with the tests' setup (which [`env`] must have made); its stdout, trimmed.
pub fn podman(args: &[&str]) -> String {
    let env = ENV_SET.get().expect("podman::env was called first");
    let out = Command::new("podman")
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .expect("podman runs");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

static ENV_SET: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// The containers (running or not) that carry the label `key=value`.
pub fn containers_with(key: &str, value: &str) -> Vec<String> {
    podman(&[
        "ps",
        "-a",
        "-q",
        "--filter",
        &format!("label={key}={value}"),
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

/// The containers (running or not) of campaign `campaign`'s attempts: their `lanes.tag`
/// label starts with `<campaign>/`.
pub fn containers_of_campaign(campaign: &str) -> Vec<String> {
    let prefix = format!("{campaign}/");
    podman(&[
        "ps",
        "-a",
        "--format",
        "{{.ID}} {{index .Labels \"lanes.tag\"}}",
    ])
    .lines()
    .filter_map(|l| l.split_once(' '))
    .filter(|(_, tag)| tag.starts_with(&prefix))
    .map(|(id, _)| id.to_owned())
    .collect()
}

/// Waits (polling podman, up to `within`) until `done` holds of the campaign's containers;
/// answers whether it did.
pub fn wait_containers(
    campaign: &str,
    within: std::time::Duration,
    done: impl Fn(&[String]) -> bool,
) -> bool {
    let deadline = std::time::Instant::now() + within;
    loop {
        if done(&containers_of_campaign(campaign)) {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
