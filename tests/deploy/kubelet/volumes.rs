//! Volumes: a container's ConfigMap, Secret, emptyDir, hostPath and claim volumes
//! materialized as local directories, and paths mapped through its mounts.

use super::*;

impl Cluster {
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
        // Redis and Sentinel config files carry addresses and paths too.
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
                // `sentinel monitor NAME HOST PORT QUORUM` and `replicaof HOST PORT`: a pod's or
                // Service's name dials the loopback port of the pod behind it.
                (Some("sentinel"), Some("monitor")) => {
                    let w: Vec<&str> = line.split_whitespace().collect();
                    assert_eq!(
                        w.len(),
                        6,
                        "{}: not NAME HOST PORT QUORUM: {line}",
                        pod.name
                    );
                    let (host, port) = self.map_host_port(pod, w[3], w[4]);
                    format!("sentinel monitor {} {host} {port} {}", w[2], w[5])
                }
                (Some(directive @ ("replicaof" | "slaveof")), Some(host)) => {
                    let port = words.next().expect("replicaof HOST PORT");
                    let (host, port) = self.map_host_port(pod, host, port);
                    format!("{directive} {host} {port}")
                }
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

    /// `host port` as the pod dials it here: `127.0.0.1` and a loopback port for a name the
    /// cluster knows (which the NetworkPolicies must let the pod reach), else as it is.
    fn map_host_port(&self, pod: &Pod, host: &str, port: &str) -> (String, String) {
        let mapped = self.map_addresses(&pod.name, &format!("{host}:{port}"));
        let (host, port) = mapped.rsplit_once(':').expect("HOST:PORT");
        (host.to_owned(), port.to_owned())
    }

    /// The pod is deleted (to be made again under the same name): its emptyDirs go, and with
    /// `disk_lost` its volume claims too, as when its node and that node's disk are lost.
    pub fn delete_pod(&self, pod: &Pod, disk_lost: bool) {
        let mounted = items(&pod.spec["containers"])
            .iter()
            .chain(items(&pod.spec["initContainers"]))
            .flat_map(|c| items(&c["volumeMounts"]))
            .map(|m| str_of(&m["name"], "mount name").to_owned());
        for name in mounted {
            let v = pod.volume(&name);
            let dir = if v.get("emptyDir").is_some() {
                pod.root.join("volumes").join(&name)
            } else if disk_lost && v.get("__claim_template").is_some() {
                self.root
                    .join("claims")
                    .join(format!("{name}-{}", pod.name))
            } else {
                continue;
            };
            if dir.exists() {
                std::fs::remove_dir_all(&dir).unwrap();
            }
        }
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
