//! A kubelet in miniature: runs the containers of built manifests as local processes, with
//! exactly their command, args, env and files, so that a renamed flag, a wrong mount path or a
//! missing key fails here as it would in a cluster.
//!
//! What is emulated, and how:
//! - **Volumes.** Each volume a container mounts becomes a directory under the test's root:
//!   ConfigMap and Secret volumes are written from their data (with `items`), emptyDirs are
//!   empty, hostPaths live under a per-node directory (so a pod that restarts on the node sees
//!   what the last one left), and volume claims get one directory per claim and pod. A
//!   `hostPath` of type `Directory` must already exist, as the kubelet requires.
//! - **Paths.** Every absolute path in an arg (`--flag=/path` or `/path`), an env value, or a
//!   Redis config file maps through the longest mount path that contains it. A path that no
//!   mount contains fails the test: in the image it would be missing.
//! - **Network.** Each container port becomes a free loopback port. `0.0.0.0:PORT` and
//!   `localhost:PORT` (the pod's own) become `127.0.0.1:<its port>`, and `HOST:PORT` for a
//!   Service name (short or qualified) or a StatefulSet pod's DNS name becomes
//!   `127.0.0.1:<the pod's port>`. Redis and Sentinel config files get the same mapping for
//!   their `port`, `bind`, `replicaof HOST PORT` and `sentinel monitor NAME HOST PORT QUORUM`
//!   lines. So a process that learns an address from another (a Sentinel naming the master)
//!   learns a loopback one, and a script compares it with addresses it was given (in env or
//!   args) in the same form. An env var named `*_PUBLIC_URL` is left alone: it says where
//!   browsers outside reach the pod, and the pod never dials it.
//! - **Env.** `value`, `fieldRef` (`spec.nodeName`, `metadata.name`, `metadata.namespace`),
//!   `secretKeyRef`, `configMapKeyRef` and `envFrom`; `$(VAR)` in args and env is expanded
//!   as the kubelet does.
//! - **Probes.** gRPC health, `httpGet`, `tcpSocket` and `exec`, against the mapped ports.
//! - **NetworkPolicies.** Every address a pod dials through a Service or pod name must be
//!   admitted by the ingress policies that select the pod behind it (pod and namespace
//!   selectors with `matchLabels`, ports by number or name).
//! - **Pods deleted.** [`Cluster::delete_pod`] drops a pod's emptyDirs, and its volume claims
//!   when its disk is lost, so that the pod made again under its name starts as a new one.
//!
//! Not emulated: users and security contexts (the processes run as the test's user), resource
//! limits, scheduling (affinity, `podManagementPolicy`: the test starts pods in the order a
//! cluster would), container restarts (the test runs an init container again as the kubelet's
//! back-off would), and the kubelet's own probe traffic through the policies. Paths inside a
//! shell script are not mapped: a script takes its paths from env or args.
//!
//! One module per subject:
//! - [`network`]: pods scheduled with their DNS names and ports, addresses mapped to loopback
//!   ports, and the NetworkPolicies;
//! - [`volumes`]: a container's volumes materialized as local directories, and paths mapped
//!   through its mounts;
//! - [`processes`]: a container's env and argv, and its process started or run to its end;
//! - [`probes`]: gRPC health, `httpGet`, `tcpSocket` and `exec` probes.

mod network;
mod probes;
mod processes;
mod volumes;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The namespace every object is in.
pub const NAMESPACE: &str = "lanes";

/// A Secret's data, by key.
pub type SecretData = BTreeMap<String, Vec<u8>>;

/// The objects of a build, the secrets an operator created, and the local state of pods.
pub struct Cluster {
    objects: Vec<Value>,
    secrets: BTreeMap<String, SecretData>,
    root: PathBuf,
    /// (pod, container port) → loopback port.
    ports: BTreeMap<(String, u16), u16>,
    /// DNS name → (pod, port translation from the name's port to the pod's container port).
    names: BTreeMap<String, (String, BTreeMap<u16, u16>)>,
    /// Each pod's labels, for the NetworkPolicies.
    labels: BTreeMap<String, Value>,
}

/// One pod of a workload, placed on a node.
pub struct Pod {
    pub name: String,
    pub node: String,
    spec: Value,
    root: PathBuf,
}

/// A container's mounts: mount path → local directory (or file).
pub struct Sandbox {
    mounts: Vec<(String, PathBuf)>,
    env: Vec<(String, String)>,
    pub log: PathBuf,
}

/// A process started from a container, killed when dropped.
pub struct Running {
    pub child: Child,
    pub log: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    /// What the process wrote so far (stdout and stderr).
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM, as the kubelet does after the preStop, and waits for the exit.
    pub fn terminate(mut self, within: Duration) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "still running {within:?} after SIGTERM:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v}"))
}

fn items(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

impl Cluster {
    pub fn new(objects: Vec<Value>, secrets: BTreeMap<String, SecretData>, root: &Path) -> Self {
        Self {
            objects,
            secrets,
            root: root.to_owned(),
            ports: BTreeMap::new(),
            names: BTreeMap::new(),
            labels: BTreeMap::new(),
        }
    }

    /// The object of this kind and name.
    pub fn object(&self, kind: &str, name: &str) -> &Value {
        self.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name} in the build"))
    }

    /// Every object of this kind.
    pub fn all(&self, kind: &str) -> Vec<&Value> {
        self.objects.iter().filter(|o| o["kind"] == kind).collect()
    }

    /// The directory standing for `path` on `node` (a hostPath).
    pub fn node_path(&self, node: &str, path: &str) -> PathBuf {
        self.root
            .join("nodes")
            .join(node)
            .join(path.trim_start_matches('/'))
    }
}

impl Pod {
    pub fn container(&self, name: &str) -> &Value {
        items(&self.spec["containers"])
            .iter()
            .chain(items(&self.spec["initContainers"]))
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("pod {} has no container {name}", self.name))
    }

    pub fn containers(&self) -> Vec<String> {
        items(&self.spec["containers"])
            .iter()
            .map(|c| str_of(&c["name"], "container name").to_owned())
            .collect()
    }

    pub fn init_containers(&self) -> Vec<String> {
        items(&self.spec["initContainers"])
            .iter()
            .map(|c| str_of(&c["name"], "container name").to_owned())
            .collect()
    }

    pub fn spec(&self) -> &Value {
        &self.spec
    }

    fn volume(&self, name: &str) -> Value {
        if let Some(v) = items(&self.spec["volumes"])
            .iter()
            .find(|v| v["name"] == name)
        {
            return v.clone();
        }
        // A StatefulSet's volume claim template.
        serde_json::json!({"name": name, "__claim_template": true})
    }
}

/// A port given by number or by a container port's name.
fn named_port(spec: &Value, port: &Value) -> u16 {
    if let Some(n) = port.as_u64() {
        return n as u16;
    }
    let name = str_of(port, "a port");
    items(&spec["containers"])
        .iter()
        .flat_map(|c| items(&c["ports"]))
        .find(|p| p["name"] == name)
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("no container port named {name}")) as u16
}
