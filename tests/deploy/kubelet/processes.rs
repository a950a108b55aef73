//! Processes: a container's env and argv as they run here, and its process started or run
//! to its end.

use std::process::Stdio;

use super::*;

impl Cluster {
    pub(super) fn env(
        &self,
        pod: &Pod,
        c: &Value,
        mounts: &[(String, PathBuf)],
    ) -> Vec<(String, String)> {
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
}

impl Sandbox {
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
