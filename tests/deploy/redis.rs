//! The Redis StatefulSet as the built manifests run it: dev's single node, or prod's three pods,
//! each an init container that writes the configs, then a Redis and a Sentinel beside it. The
//! pods are all scheduled before any starts (`podManagementPolicy: Parallel`), so each init
//! container can ask every Sentinel by name. The test reads what the Sentinels and the nodes
//! say with `redis-cli`, the password in its environment.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::kubelet::{Cluster, Pod, Running, Sandbox};

/// The master's name in sentinel.conf (and the coordinators' --redis-master).
const MASTER_NAME: &str = "lanes";

/// One pod and its running containers.
struct Node {
    pod: Pod,
    running: Vec<(String, Sandbox, Running)>,
    /// The loopback ports of its Redis and (under prod) its Sentinel.
    redis: u16,
    sentinel: Option<u16>,
}

/// The StatefulSet lanes-redis.
pub struct Redis {
    nodes: Vec<Node>,
    password: String,
}

impl Redis {
    /// Schedules every pod, runs each one's init containers, then starts its containers and
    /// waits for their readiness probes; with Sentinels, until the set has settled.
    pub fn start(cluster: &mut Cluster, password: &str) -> Self {
        let n = cluster.object("StatefulSet", "lanes-redis")["spec"]["replicas"]
            .as_u64()
            .unwrap_or(1);
        let nodes: Vec<Node> = (0..n)
            .map(|i| {
                let name = format!("lanes-redis-{i}");
                let pod = cluster.pod(
                    "StatefulSet",
                    "lanes-redis",
                    &name,
                    &format!("redis-node-{i}"),
                    &[],
                );
                let sentinel = pod
                    .containers()
                    .iter()
                    .any(|c| c == "sentinel")
                    .then(|| cluster.port(&name, 26379));
                Node {
                    redis: cluster.port(&name, 6379),
                    sentinel,
                    pod,
                    running: Vec::new(),
                }
            })
            .collect();
        let mut redis = Self {
            nodes,
            password: password.to_owned(),
        };
        for i in 0..redis.nodes.len() {
            let (ok, out) = redis.init(cluster, i);
            assert!(ok, "lanes-redis-{i}: an init container failed:\n{out}");
        }
        redis.start_containers(cluster, 0..redis.nodes.len());
        if redis.replicated() {
            redis.wait_settled(Duration::from_secs(60));
        }
        redis
    }

    /// Whether the nodes are replicated and watched by Sentinels (prod).
    pub fn replicated(&self) -> bool {
        self.nodes[0].sentinel.is_some()
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Node `i`'s address as the Sentinels and the coordinators give it.
    pub fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.nodes[i].redis)
    }

    /// Runs node `i`'s init containers in order, each to its end: whether all succeeded, and
    /// what they wrote.
    pub fn init(&self, cluster: &Cluster, i: usize) -> (bool, String) {
        let pod = &self.nodes[i].pod;
        let mut said = String::new();
        for init in pod.init_containers() {
            let sandbox = cluster.sandbox(pod, &init);
            let argv = cluster.container_argv(pod, &sandbox, &init);
            let (status, out) = cluster.run(&sandbox, &argv, Duration::from_secs(30));
            said.push_str(&out);
            if !status.success() {
                return (false, format!("{init}: {argv:?}: {status}\n{said}"));
            }
        }
        (true, said)
    }

    /// Starts the containers of nodes `which`, all of them before any probe (a replica is
    /// ready only once its master runs), then waits until each is ready, and live, by its
    /// probes.
    pub fn start_containers(&mut self, cluster: &Cluster, which: std::ops::Range<usize>) {
        for i in which.clone() {
            let node = &mut self.nodes[i];
            for c in node.pod.containers() {
                let sandbox = cluster.sandbox(&node.pod, &c);
                let running = cluster.start(&node.pod, &sandbox, &c);
                node.running.push((c, sandbox, running));
            }
        }
        for i in which {
            let node = &mut self.nodes[i];
            for (c, sandbox, running) in &mut node.running {
                cluster.wait_probe(&node.pod, sandbox, running, c, "readinessProbe");
                assert!(cluster.probe(&node.pod, sandbox, c, "livenessProbe"));
            }
        }
    }

    /// Node `i`'s pod is lost with its node: its processes are killed, its emptyDirs are gone
    /// and, with `disk_lost`, its data volume too.
    pub fn lose(&mut self, cluster: &Cluster, i: usize, disk_lost: bool) {
        self.nodes[i].running.clear();
        cluster.delete_pod(&self.nodes[i].pod, disk_lost);
    }

    /// Node `i`'s pod made again: its init containers run until they succeed, as the
    /// kubelet runs them again after a failure (what each failed run said is returned, with
    /// what the one that succeeded said); then its containers start.
    pub fn restart(
        &mut self,
        cluster: &Cluster,
        i: usize,
        within: Duration,
    ) -> (Vec<String>, String) {
        let deadline = Instant::now() + within;
        let mut failed = Vec::new();
        let said = loop {
            let (ok, out) = self.init(cluster, i);
            if ok {
                break out;
            }
            failed.push(out);
            assert!(
                Instant::now() < deadline,
                "lanes-redis-{i}: its init containers did not succeed within {within:?}:\n{}",
                failed.join("\n")
            );
            std::thread::sleep(Duration::from_secs(1));
        };
        self.start_containers(cluster, i..i + 1);
        (failed, said)
    }

    /// `redis-cli` to the loopback `port`, with the password: its `--raw` answer, or `None`
    /// when it fails.
    fn cli(&self, port: u16, args: &[&str]) -> Option<String> {
        let out = Command::new("timeout")
            .args([
                "5",
                "redis-cli",
                "-h",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "--raw",
            ])
            .args(args)
            .env("REDISCLI_AUTH", &self.password)
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
        (out.status.success() && !text.starts_with("ERR") && !text.starts_with("NOAUTH"))
            .then_some(text)
    }

    fn running(&self, i: usize, container: &str) -> bool {
        self.nodes[i].running.iter().any(|(c, _, _)| c == container)
    }

    /// The node the running Sentinels name as master, if they all name the same one.
    pub fn sentinels_master(&self) -> Option<usize> {
        let mut named = None;
        for (i, node) in self.nodes.iter().enumerate() {
            let Some(port) = node.sentinel.filter(|_| self.running(i, "sentinel")) else {
                continue;
            };
            let answer = self.cli(port, &["SENTINEL", "get-master-addr-by-name", MASTER_NAME])?;
            let addr = answer.lines().collect::<Vec<_>>().join(":");
            let at = (0..self.nodes.len()).find(|&j| self.addr(j) == addr)?;
            if named.is_some_and(|n| n != at) {
                return None;
            }
            named = Some(at);
        }
        named
    }

    /// The master, as the Sentinels name it.
    pub fn master(&self) -> usize {
        self.sentinels_master()
            .unwrap_or_else(|| panic!("the sentinels name no one master: {}", self.describe()))
    }

    /// Whether every node runs, the master the Sentinels agree on has every other node as a
    /// replica with its link up, and each Sentinel knows those replicas (none thought down)
    /// and can reach a quorum with the others.
    fn settled(&self) -> bool {
        let n = self.nodes.len();
        if (0..n).any(|i| !self.running(i, "redis") || !self.running(i, "sentinel")) {
            return false;
        }
        let Some(m) = self.sentinels_master() else {
            return false;
        };
        let info = |i: usize| self.cli(self.nodes[i].redis, &["INFO", "replication"]);
        let Some(master_info) = info(m) else {
            return false;
        };
        let online = master_info
            .lines()
            .filter(|l| l.starts_with("slave") && l.contains("state=online"))
            .count();
        if !master_info.contains("role:master") || online != n - 1 {
            return false;
        }
        let replicas_up = (0..n).filter(|&i| i != m).all(|i| {
            info(i).is_some_and(|t| {
                t.contains("role:slave")
                    && t.contains("master_host:127.0.0.1\n")
                    && t.contains(&format!("master_port:{}\n", self.nodes[m].redis))
                    && t.contains("master_link_status:up")
            })
        });
        let sentinels_agree = self.nodes.iter().all(|node| {
            let port = node.sentinel.unwrap();
            let quorum = self
                .cli(port, &["SENTINEL", "CKQUORUM", MASTER_NAME])
                .is_some_and(|a| a.starts_with(&format!("OK {n} usable")));
            let replicas = self
                .cli(port, &["SENTINEL", "REPLICAS", MASTER_NAME])
                .map(|a| flags(&a))
                .is_some_and(|f| f.len() == n - 1 && f.iter().all(|f| f == "slave"));
            quorum && replicas
        });
        replicas_up && sentinels_agree
    }

    /// Waits until the set has settled (see [`Self::settled`]).
    pub fn wait_settled(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.settled() {
            assert!(
                Instant::now() < deadline,
                "the Redis nodes and Sentinels did not settle within {within:?}: {}",
                self.describe()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What each node and Sentinel says, for a failure message.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let role = self
                .cli(node.redis, &["ROLE"])
                .map(|r| r.lines().take(3).collect::<Vec<_>>().join(" "));
            let names = node
                .sentinel
                .and_then(|p| self.cli(p, &["SENTINEL", "get-master-addr-by-name", MASTER_NAME]));
            out.push_str(&format!(
                "\n  lanes-redis-{i} ({}): role {role:?}; its sentinel names {:?}",
                self.addr(i),
                names.map(|n| n.lines().collect::<Vec<_>>().join(":"))
            ));
        }
        out
    }

    /// What container `container` of node `i` has written so far.
    pub fn log(&self, i: usize, container: &str) -> String {
        self.nodes[i]
            .running
            .iter()
            .find(|(c, _, _)| c == container)
            .map(|(_, _, r)| r.output())
            .unwrap_or_default()
    }

    /// SIGTERM to every container, as when the pods are deleted; each Redis had started.
    pub fn terminate(self) {
        for (i, node) in self.nodes.into_iter().enumerate() {
            for (c, _, running) in node.running {
                let log = running.log.clone();
                let _ = running.terminate(Duration::from_secs(30));
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                if c == "redis" {
                    assert!(
                        said.contains("Ready to accept connections"),
                        "lanes-redis-{i}/{c}:\n{said}"
                    );
                }
            }
        }
    }
}

/// The `flags` of each entry in a `--raw` answer to `SENTINEL REPLICAS` (one field or value
/// per line).
fn flags(answer: &str) -> Vec<String> {
    let lines: Vec<&str> = answer.lines().collect();
    lines
        .windows(2)
        .filter(|w| w[0] == "flags")
        .map(|w| w[1].to_owned())
        .collect()
}
