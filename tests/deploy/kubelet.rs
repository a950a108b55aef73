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
//! - **Network.** Each container port becomes a free loopback port. `0.0.0.0:PORT` becomes
//!   `127.0.0.1:<its port>`, and `HOST:PORT` for a Service name (short or qualified) or a
//!   StatefulSet pod's DNS name becomes `127.0.0.1:<the pod's port>`. Redis config files
//!   get the same mapping for their `port` and `bind` lines. An env var named `*_PUBLIC_URL`
//!   is left alone: it says where browsers outside reach the pod, and the pod never dials it.
//! - **Env.** `value`, `fieldRef` (`spec.nodeName`, `metadata.name`, `metadata.namespace`),
//!   `secretKeyRef`, `configMapKeyRef` and `envFrom`; `$(VAR)` in args and env is expanded
//!   as the kubelet does.
//! - **Probes.** gRPC health, `httpGet`, `tcpSocket` and `exec`, against the mapped ports.
//! - **NetworkPolicies.** Every address a pod dials through a Service or pod name must be
//!   admitted by the ingress policies that select the pod behind it (pod and namespace
//!   selectors with `matchLabels`, ports by number or name).
//!
//! Not emulated: users and security contexts (the processes run as the test's user), resource
//! limits, and the kubelet's own probe traffic through the policies.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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

    /// Schedules pod `name` of workload `kind`/`workload` on `node` (labelled `node_labels`,
    /// which must satisfy the pod's nodeSelector), and registers its DNS names and ports.
    pub fn pod(
        &mut self,
        kind: &str,
        workload: &str,
        name: &str,
        node: &str,
        node_labels: &[(&str, &str)],
    ) -> Pod {
        let w = self.object(kind, workload).clone();
        let template = &w["spec"]["template"];
        let spec = template["spec"].clone();
        if let Some(selector) = spec["nodeSelector"].as_object() {
            for (k, v) in selector {
                assert!(
                    node_labels.iter().any(|(nk, nv)| nk == k && v == nv),
                    "{kind}/{workload} selects nodes by {k}={v}; node {node} has {node_labels:?}"
                );
            }
        }
        for c in items(&spec["containers"])
            .iter()
            .chain(items(&spec["initContainers"]))
        {
            for p in items(&c["ports"]) {
                let port = p["containerPort"].as_u64().expect("containerPort") as u16;
                self.ports.insert((name.to_owned(), port), free_port());
            }
        }
        let own: BTreeMap<u16, u16> = self
            .ports
            .keys()
            .filter(|(p, _)| p == name)
            .map(|(_, port)| (*port, *port))
            .collect();
        self.names
            .insert(name.to_owned(), (name.to_owned(), own.clone()));
        if let Some(service) = w["spec"]["serviceName"].as_str() {
            for host in qualified(&format!("{name}.{service}")) {
                self.names.insert(host, (name.to_owned(), own.clone()));
            }
        }
        let labels = template["metadata"]["labels"].clone();
        self.labels.insert(name.to_owned(), labels.clone());
        let services: Vec<Value> = self.all("Service").into_iter().cloned().collect();
        for svc in &services {
            let selector = &svc["spec"]["selector"];
            let Some(sel) = selector.as_object() else {
                continue;
            };
            if !sel.iter().all(|(k, v)| labels[k] == *v) {
                continue;
            }
            let mut translate = BTreeMap::new();
            for p in items(&svc["spec"]["ports"]) {
                let port = p["port"].as_u64().expect("a service port") as u16;
                let target = match &p["targetPort"] {
                    Value::Null => port,
                    t => named_port(&spec, t),
                };
                translate.insert(port, target);
            }
            let svc_name = str_of(&svc["metadata"]["name"], "service name");
            for host in qualified(svc_name) {
                // A Service stands for its first ready pod: the one scheduled first.
                self.names
                    .entry(host)
                    .or_insert_with(|| (name.to_owned(), translate.clone()));
            }
        }
        let root = self.root.join("pods").join(name);
        std::fs::create_dir_all(&root).unwrap();
        Pod {
            name: name.to_owned(),
            node: node.to_owned(),
            spec,
            root,
        }
    }

    /// The loopback port of `pod`'s container port `port`.
    pub fn port(&self, pod: &str, port: u16) -> u16 {
        *self
            .ports
            .get(&(pod.to_owned(), port))
            .unwrap_or_else(|| panic!("pod {pod} declares no container port {port}"))
    }

    /// `value` with its addresses mapped to loopback ports.
    fn map_addresses(&self, pod: &str, value: &str) -> String {
        let mut out = value.to_owned();
        let any = "0.0.0.0:";
        while let Some(i) = out.find(any) {
            let digits: String = out[i + any.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            let port: u16 = digits.parse().expect("a port after 0.0.0.0:");
            let local = self.port(pod, port);
            out.replace_range(
                i..i + any.len() + digits.len(),
                &format!("127.0.0.1:{local}"),
            );
        }
        // Longest names first, so `a.b` is not taken for `a`.
        let mut names: Vec<&String> = self.names.keys().collect();
        names.sort_by_key(|n| std::cmp::Reverse(n.len()));
        for host in names {
            let (target, translate) = &self.names[host];
            let mut from = 0;
            while let Some(at) = out[from..].find(&format!("{host}:")) {
                let i = from + at;
                let before = out[..i].chars().last();
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-') {
                    from = i + host.len();
                    continue;
                }
                let rest = &out[i + host.len() + 1..];
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                let port: u16 = digits.parse().expect("a port after a service name");
                let container_port = *translate
                    .get(&port)
                    .unwrap_or_else(|| panic!("{host} has no port {port}"));
                assert!(
                    self.admits(pod, target, container_port),
                    "the NetworkPolicies do not let pod {pod} reach {host}:{port} (pod {target}, \
                     port {container_port})"
                );
                let local = self.port(target, container_port);
                let replacement = format!("127.0.0.1:{local}");
                out.replace_range(i..i + host.len() + 1 + digits.len(), &replacement);
                from = i + replacement.len();
            }
        }
        out
    }

    /// Whether the NetworkPolicies let pod `from` open a connection to `port` of pod `to`: no
    /// policy selects `to`, or one of those that do has an ingress rule admitting `from`'s
    /// labels (same namespace) on that port.
    fn admits(&self, from: &str, to: &str, port: u16) -> bool {
        let (Some(source), Some(target)) = (self.labels.get(from), self.labels.get(to)) else {
            panic!("unknown pod {from} or {to}");
        };
        let policies: Vec<&Value> = self
            .all("NetworkPolicy")
            .into_iter()
            .filter(|p| selects(&p["spec"]["podSelector"], target))
            .filter(|p| {
                let types = items(&p["spec"]["policyTypes"]);
                types.is_empty() || types.iter().any(|t| t == "Ingress")
            })
            .collect();
        if policies.is_empty() {
            return true;
        }
        policies.iter().any(|p| {
            items(&p["spec"]["ingress"]).iter().any(|rule| {
                let ports = items(&rule["ports"]);
                let port_ok = ports.is_empty()
                    || ports.iter().any(|pp| {
                        pp["protocol"].as_str().unwrap_or("TCP") == "TCP"
                            && match &pp["port"] {
                                Value::Null => true,
                                n => named_port(&self.pod_spec_of(to), n) == port,
                            }
                    });
                let peers = items(&rule["from"]);
                let peer_ok = rule.get("from").is_none()
                    || peers.iter().any(|peer| {
                        assert!(
                            peer.get("ipBlock").is_none() || peer.get("podSelector").is_none(),
                            "peer not emulated: {peer}"
                        );
                        match (peer.get("podSelector"), peer.get("namespaceSelector")) {
                            (Some(ps), None) => selects(ps, source),
                            (ps, Some(ns)) => {
                                let ours = serde_json::json!({
                                    "kubernetes.io/metadata.name": NAMESPACE
                                });
                                selects(ns, &ours) && ps.is_none_or(|ps| selects(ps, source))
                            }
                            (None, None) => false,
                        }
                    });
                port_ok && peer_ok
            })
        })
    }

    fn pod_spec_of(&self, pod: &str) -> Value {
        // Only ports matter here: any workload whose template has this pod's labels.
        let labels = &self.labels[pod];
        self.objects
            .iter()
            .find(|o| o["spec"]["template"]["metadata"]["labels"] == *labels)
            .map(|o| o["spec"]["template"]["spec"].clone())
            .unwrap_or_default()
    }

    /// Materializes the volumes container `container` of `pod` mounts.
    pub fn sandbox(&self, pod: &Pod, container: &str) -> Sandbox {
        let c = pod.container(container);
        let mut mounts: Vec<(String, PathBuf)> = Vec::new();
        let read_only_volumes: Vec<String> = items(&c["volumeMounts"])
            .iter()
            .filter(|m| {
                let v = pod.volume(str_of(&m["name"], "mount name"));
                v.get("configMap").is_some() || v.get("secret").is_some()
            })
            .map(|m| str_of(&m["mountPath"], "mountPath").to_owned())
            .collect();
        for m in items(&c["volumeMounts"]) {
            let path = str_of(&m["mountPath"], "mountPath");
            let name = str_of(&m["name"], "mount name");
            // The runtime cannot make a mount point inside a ConfigMap or Secret volume: they
            // are read-only.
            if let Some(outer) = read_only_volumes
                .iter()
                .find(|o| *o != path && Path::new(path).starts_with(o.as_str()))
            {
                panic!(
                    "{}/{container}: mount {path} is inside the read-only volume at {outer}",
                    pod.name
                );
            }
            let mut dir = self.volume_dir(pod, name);
            if let Some(sub) = m["subPath"].as_str() {
                dir = dir.join(sub);
            }
            mounts.push((path.to_owned(), dir));
        }
        let env = self.env(pod, c, &mounts);
        let log = pod.root.join(format!("{container}.log"));
        let mut sandbox = Sandbox { mounts, env, log };
        // Redis config files carry addresses and paths too.
        for m in items(&c["volumeMounts"]) {
            let v = pod.volume(str_of(&m["name"], "mount name"));
            if v.get("configMap").is_none() {
                continue;
            }
            let path = str_of(&m["mountPath"], "mountPath");
            let dir = sandbox.map_path(path).unwrap();
            for entry in std::fs::read_dir(&dir).unwrap() {
                let file = entry.unwrap().path();
                if file.extension().is_some_and(|e| e == "conf") {
                    let text = std::fs::read_to_string(&file).unwrap();
                    let mapped = self.map_redis_conf(pod, &sandbox, &text);
                    std::fs::write(&file, mapped).unwrap();
                }
            }
        }
        sandbox.log = pod.root.join(format!("{container}.log"));
        sandbox
    }

    fn map_redis_conf(&self, pod: &Pod, sandbox: &Sandbox, text: &str) -> String {
        let mut out = String::new();
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let mapped = match (words.next(), words.next()) {
                (Some("port"), Some(port)) => {
                    format!(
                        "port {}",
                        self.port(&pod.name, port.parse().expect("a port"))
                    )
                }
                (Some("bind"), Some(_)) => "bind 127.0.0.1".to_owned(),
                (Some(directive), Some(value))
                    if !directive.starts_with('#') && value.starts_with('/') =>
                {
                    let local = sandbox.map_path(value).unwrap_or_else(|e| panic!("{e}"));
                    format!("{directive} {}", local.display())
                }
                _ => line.to_owned(),
            };
            out.push_str(&mapped);
            out.push('\n');
        }
        out
    }

    fn volume_dir(&self, pod: &Pod, name: &str) -> PathBuf {
        let v = pod.volume(name);
        if let Some(cm) = v.get("configMap") {
            let cm_name = str_of(&cm["name"], "configMap name");
            let data: SecretData = self.object("ConfigMap", cm_name)["data"]
                .as_object()
                .map(|d| {
                    d.iter()
                        .map(|(k, v)| (k.clone(), str_of(v, k).as_bytes().to_vec()))
                        .collect()
                })
                .unwrap_or_default();
            return write_volume(&pod.root.join("volumes").join(name), &data, cm);
        }
        if let Some(secret) = v.get("secret") {
            let secret_name = str_of(&secret["secretName"], "secretName");
            let data = self.secrets.get(secret_name).unwrap_or_else(|| {
                panic!(
                    "pod {} needs Secret {secret_name}, which was not created",
                    pod.name
                )
            });
            return write_volume(&pod.root.join("volumes").join(name), data, secret);
        }
        if v.get("emptyDir").is_some() {
            let dir = pod.root.join("volumes").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            return dir;
        }
        if let Some(host) = v.get("hostPath") {
            let path = str_of(&host["path"], "hostPath path");
            let dir = self.node_path(&pod.node, path);
            match host["type"].as_str() {
                Some("Directory") => assert!(
                    dir.is_dir(),
                    "pod {} needs hostPath {path} on node {}, which is not there",
                    pod.name,
                    pod.node
                ),
                Some("DirectoryOrCreate") | None => std::fs::create_dir_all(&dir).unwrap(),
                Some(other) => panic!("hostPath type {other} is not emulated"),
            }
            return dir;
        }
        if let Some(claim) = v.get("persistentVolumeClaim") {
            let claim = str_of(&claim["claimName"], "claimName");
            let dir = self.root.join("claims").join(claim);
            std::fs::create_dir_all(&dir).unwrap();
            return dir;
        }
        if v.get("__claim_template").is_some() {
            let dir = self
                .root
                .join("claims")
                .join(format!("{name}-{}", pod.name));
            std::fs::create_dir_all(&dir).unwrap();
            return dir;
        }
        panic!("volume {name} of pod {}: kind not emulated: {v}", pod.name);
    }

    fn env(&self, pod: &Pod, c: &Value, mounts: &[(String, PathBuf)]) -> Vec<(String, String)> {
        let probe = Sandbox {
            mounts: mounts.to_vec(),
            env: Vec::new(),
            log: PathBuf::new(),
        };
        let mut env: Vec<(String, String)> = Vec::new();
        for from in items(&c["envFrom"]) {
            if let Some(cm) = from.get("configMapRef") {
                let cm = self.object("ConfigMap", str_of(&cm["name"], "configMapRef name"));
                for (k, v) in cm["data"].as_object().into_iter().flatten() {
                    env.push((k.clone(), str_of(v, k).to_owned()));
                }
            } else if let Some(s) = from.get("secretRef") {
                let name = str_of(&s["name"], "secretRef name");
                for (k, v) in self.secrets.get(name).expect("the secret of an envFrom") {
                    env.push((k.clone(), String::from_utf8(v.clone()).unwrap()));
                }
            } else {
                panic!("envFrom not emulated: {from}");
            }
        }
        for e in items(&c["env"]) {
            let name = str_of(&e["name"], "env name").to_owned();
            let value = if let Some(v) = e.get("value") {
                expand(str_of(v, &name), &env)
            } else if let Some(field) = e.pointer("/valueFrom/fieldRef/fieldPath") {
                match str_of(field, "fieldPath") {
                    "spec.nodeName" => pod.node.clone(),
                    "metadata.name" => pod.name.clone(),
                    "metadata.namespace" => NAMESPACE.to_owned(),
                    "status.podIP" | "status.hostIP" => "127.0.0.1".to_owned(),
                    other => panic!("fieldRef {other} is not emulated"),
                }
            } else if let Some(r) = e.pointer("/valueFrom/secretKeyRef") {
                let secret = str_of(&r["name"], "secretKeyRef name");
                let key = str_of(&r["key"], "secretKeyRef key");
                let data = self
                    .secrets
                    .get(secret)
                    .and_then(|s| s.get(key))
                    .unwrap_or_else(|| panic!("env {name}: Secret {secret} has no key {key}"));
                String::from_utf8(data.clone()).unwrap()
            } else if let Some(r) = e.pointer("/valueFrom/configMapKeyRef") {
                let cm = self.object("ConfigMap", str_of(&r["name"], "configMapKeyRef name"));
                str_of(&cm["data"][str_of(&r["key"], "key")], &name).to_owned()
            } else {
                panic!("env {name}: source not emulated: {e}");
            };
            env.retain(|(k, _)| *k != name);
            env.push((name, value));
        }
        env.into_iter()
            .map(|(k, v)| {
                // A public URL names where browsers outside the cluster reach the pod (the
                // dashboard's, for its login links); the pod never dials it.
                if k.ends_with("_PUBLIC_URL") {
                    return (k, v);
                }
                let v = self.map_addresses(&pod.name, &v);
                let v = if v.starts_with('/') {
                    probe
                        .map_path(&v)
                        .unwrap_or_else(|e| panic!("env {k}: {e}"))
                        .display()
                        .to_string()
                } else {
                    v
                };
                (k, v)
            })
            .collect()
    }

    /// `argv` (a container's command and args, or a probe's or a hook's command) as it runs
    /// here: `$(VAR)` expanded, addresses and paths mapped, `lanes` the binary under test.
    pub fn argv(&self, pod: &Pod, sandbox: &Sandbox, argv: &[String]) -> Vec<String> {
        argv.iter()
            .enumerate()
            .map(|(i, a)| {
                let a = expand(a, &sandbox.env);
                let a = self.map_addresses(&pod.name, &a);
                if i == 0 {
                    return match a.as_str() {
                        "lanes" | "/usr/local/bin/lanes" => env!("CARGO_BIN_EXE_lanes").to_owned(),
                        _ => a,
                    };
                }
                let (flag, value) = match a.split_once('=') {
                    Some((f, v)) if f.starts_with("--") => (Some(f), v),
                    _ => (None, a.as_str()),
                };
                if !value.starts_with('/') {
                    return a.clone();
                }
                let local = sandbox
                    .map_path(value)
                    .unwrap_or_else(|e| panic!("{}: argument {a}: {e}", pod.name));
                match flag {
                    Some(f) => format!("{f}={}", local.display()),
                    None => local.display().to_string(),
                }
            })
            .collect()
    }

    /// The container's command and args, as they run here.
    pub fn container_argv(&self, pod: &Pod, sandbox: &Sandbox, container: &str) -> Vec<String> {
        let c = pod.container(container);
        let strings = |v: &Value| -> Vec<String> {
            items(v)
                .iter()
                .map(|s| str_of(s, "an argument").to_owned())
                .collect()
        };
        let mut argv = strings(&c["command"]);
        if argv.is_empty() {
            // The image's ENTRYPOINT (deploy/Containerfile).
            argv.push("lanes".to_owned());
        }
        argv.extend(strings(&c["args"]));
        self.argv(pod, sandbox, &argv)
    }

    /// Starts the container.
    pub fn start(&self, pod: &Pod, sandbox: &Sandbox, container: &str) -> Running {
        let argv = self.container_argv(pod, sandbox, container);
        Running {
            child: sandbox
                .command(&argv)
                .spawn()
                .unwrap_or_else(|e| panic!("{}/{container}: cannot start {argv:?}: {e}", pod.name)),
            log: sandbox.log.clone(),
        }
    }

    /// Runs `argv` (already mapped) in the sandbox to its end.
    pub fn run(
        &self,
        sandbox: &Sandbox,
        argv: &[String],
        within: Duration,
    ) -> (std::process::ExitStatus, String) {
        let log = sandbox.log.with_extension(format!(
            "{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let mut child = Sandbox {
            mounts: sandbox.mounts.clone(),
            env: sandbox.env.clone(),
            log: log.clone(),
        }
        .command(argv)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {argv:?}: {e}"));
        let deadline = Instant::now() + within;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{argv:?} did not end within {within:?}:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        (status, std::fs::read_to_string(&log).unwrap_or_default())
    }

    /// Whether the container's probe (`readinessProbe`, `livenessProbe`, `startupProbe`)
    /// passes now. Panics if the container declares no such probe.
    pub fn probe(&self, pod: &Pod, sandbox: &Sandbox, container: &str, which: &str) -> bool {
        let c = pod.container(container);
        let p = &c[which];
        assert!(
            p.is_object(),
            "{}/{container} declares no {which}",
            pod.name
        );
        let local = |port: &Value| self.port(&pod.name, named_port(&pod.spec, port));
        if let Some(g) = p.get("grpc") {
            let port = local(&g["port"]);
            let service = g["service"].as_str().unwrap_or_default().to_owned();
            return grpc_serving(port, &service);
        }
        if let Some(h) = p.get("httpGet") {
            let port = local(&h["port"]);
            let path = h["path"].as_str().unwrap_or("/");
            return http_ok(port, path);
        }
        if let Some(t) = p.get("tcpSocket") {
            return std::net::TcpStream::connect(("127.0.0.1", local(&t["port"]))).is_ok();
        }
        if let Some(e) = p.get("exec") {
            let argv: Vec<String> = items(&e["command"])
                .iter()
                .map(|s| str_of(s, "a probe argument").to_owned())
                .collect();
            let argv = self.argv(pod, sandbox, &argv);
            return self
                .run(sandbox, &argv, Duration::from_secs(30))
                .0
                .success();
        }
        panic!(
            "{which} of {}/{container}: kind not emulated: {p}",
            pod.name
        )
    }

    /// Waits until the probe passes.
    pub fn wait_probe(
        &self,
        pod: &Pod,
        sandbox: &Sandbox,
        running: &mut Running,
        container: &str,
        which: &str,
    ) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.probe(pod, sandbox, container, which) {
            if let Some(exit) = running.child.try_wait().unwrap() {
                panic!(
                    "{}/{container} exited ({exit}) before its {which} passed:\n{}",
                    pod.name,
                    running.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{}/{container}: {which} did not pass within a minute:\n{}",
                pod.name,
                running.output()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
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

impl Sandbox {
    /// The local path standing for `path` in the container.
    pub fn map_path(&self, path: &str) -> Result<PathBuf, String> {
        let p = Path::new(path);
        self.mounts
            .iter()
            .filter(|(m, _)| p.starts_with(m))
            .max_by_key(|(m, _)| m.len())
            .map(|(m, local)| local.join(p.strip_prefix(m).unwrap()))
            .ok_or_else(|| format!("{path} is under no volume mount of the container"))
    }

    fn command(&self, argv: &[String]) -> Command {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.log.parent().unwrap())
            .stdin(Stdio::null());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        cmd.stdout(log.try_clone().unwrap()).stderr(log);
        cmd
    }
}

/// Whether a label selector (`matchLabels` only; `{}` selects everything) selects `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    assert!(
        selector.get("matchExpressions").is_none(),
        "matchExpressions are not emulated: {selector}"
    );
    selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| labels[k] == *v))
}

/// The names a Service (or a pod's DNS name) answers to in the namespace.
fn qualified(name: &str) -> Vec<String> {
    vec![
        name.to_owned(),
        format!("{name}.{NAMESPACE}"),
        format!("{name}.{NAMESPACE}.svc"),
        format!("{name}.{NAMESPACE}.svc.cluster.local"),
    ]
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

/// `$(VAR)` expanded from `env`, as the kubelet does (`$$` escapes; unknown names stay).
fn expand(s: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some((_, v)) = env.iter().rev().find(|(k, _)| *k == inner[..end])
        {
            out.push_str(v);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Writes a ConfigMap's or Secret's data into `dir`, honouring `items`.
fn write_volume(dir: &Path, data: &SecretData, source: &Value) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let listed = items(&source["items"]);
    if listed.is_empty() {
        for (k, v) in data {
            std::fs::write(dir.join(k), v).unwrap();
        }
    } else {
        for item in listed {
            let key = str_of(&item["key"], "item key");
            let path = str_of(&item["path"], "item path");
            let value = data
                .get(key)
                .unwrap_or_else(|| panic!("the volume's source has no key {key}"));
            std::fs::write(dir.join(path), value).unwrap();
        }
    }
    dir.to_owned()
}

/// A gRPC health check on a plaintext port: SERVING or not.
fn grpc_serving(port: u16, service: &str) -> bool {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let Ok(channel) =
            tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
                .unwrap()
                .connect_timeout(Duration::from_secs(1))
                .connect()
                .await
        else {
            return false;
        };
        let answer = tokio::time::timeout(
            Duration::from_secs(2),
            HealthClient::new(channel).check(HealthCheckRequest {
                service: service.to_owned(),
            }),
        )
        .await;
        matches!(answer, Ok(Ok(r)) if r.get_ref().status() == ServingStatus::Serving)
    })
}

/// An HTTP GET answered 2xx or 3xx (what the kubelet counts as success).
fn http_ok(port: u16, path: &str) -> bool {
    let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if conn.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    if conn.read_exact(&mut head).is_err() {
        return false;
    }
    matches!(&head[9..10], b"2" | b"3")
}
