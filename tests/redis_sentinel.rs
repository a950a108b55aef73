//! A replicated Redis for tests: a master, replicas and Sentinels, all real `redis-server`
//! processes on free loopback ports, each in its own temp dir, killed on drop.
//!
//! Every node runs with AOF, `appendfsync always` and `min-replicas-to-write 1`, as the store
//! asks of a master with `--redis-wait 1`. The Sentinels watch the master as [`MASTER_NAME`]
//! with a quorum of 2, declare it down after [`DOWN_AFTER_MS`] and may fail it over again after
//! twice [`FAILOVER_TIMEOUT_MS`].

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::redis_server::RedisServer;

/// The master's name in the Sentinels' configuration.
pub const MASTER_NAME: &str = "lanes";
/// How long a master must be silent before a Sentinel thinks it down.
pub const DOWN_AFTER_MS: u64 = 1_000;
/// Sentinel's failover timeout; a new failover of the same master waits twice this.
pub const FAILOVER_TIMEOUT_MS: u64 = 2_000;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The replication settings of every node; a replica also names its master.
fn node_args(master: Option<u16>) -> Vec<String> {
    let mut args: Vec<String> = [
        "--min-replicas-to-write",
        "1",
        "--min-replicas-max-lag",
        "10",
    ]
    .map(String::from)
    .to_vec();
    if let Some(port) = master {
        args.extend(["--replicaof".into(), "127.0.0.1".into(), port.to_string()]);
    }
    args
}

/// One Sentinel process.
struct Sentinel {
    child: Option<Child>,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A master, its replicas and three Sentinels.
pub struct Replicated {
    /// Every data node; `nodes[0]` was the first master. Which one is master now:
    /// [`Self::master`].
    pub nodes: Vec<RedisServer>,
    sentinels: Vec<Sentinel>,
}

impl Replicated {
    /// Starts a master, `replicas` replicas and three Sentinels, and waits until the Sentinels
    /// know every replica and each other (so a failover can happen).
    pub fn start(replicas: usize) -> Self {
        let master = RedisServer::start_args("always", &node_args(None));
        let port = master.port;
        let mut nodes = vec![master];
        for _ in 0..replicas {
            nodes.push(RedisServer::start_args("always", &node_args(Some(port))));
        }
        let sentinels = (0..3).map(|_| start_sentinel(port)).collect();
        let group = Self { nodes, sentinels };
        group.wait_settled(Duration::from_secs(60));
        group
    }

    /// Kills Sentinel `i` (for good).
    pub fn stop_sentinel(&mut self, i: usize) {
        if let Some(mut c) = self.sentinels[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `HOST:PORT` of each Sentinel.
    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect()
    }

    /// The master's port as the first Sentinel that answers names it.
    pub fn sentinels_master(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let reply = ask(
                s.port,
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
            )?;
            reply.items().get(1)?.line()?.parse().ok()
        })
    }

    /// The index in [`Self::nodes`] of the node the Sentinels name as master.
    pub fn master(&self) -> usize {
        let port = self
            .sentinels_master()
            .expect("a sentinel names the master");
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .expect("the master is one of the nodes")
    }

    /// Waits until the Sentinels name a master other than the node on `old_port`, and that
    /// node says it is a master; answers its index.
    pub fn wait_failover_from(&self, old_port: u16, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            if let Some(port) = self.sentinels_master()
                && port != old_port
                && let Some(i) = self.nodes.iter().position(|n| n.port == port)
                && role(&self.nodes[i]).as_deref() == Some("master")
            {
                return i;
            }
            assert!(
                Instant::now() < deadline,
                "the sentinels did not fail over from port {old_port} within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the master the Sentinels name has every other running, unpaused node as a
    /// replica with its link up, and the Sentinels know them and each other.
    pub fn wait_settled(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let live = self
            .nodes
            .iter()
            .filter(|n| n.is_running() && !n.is_paused())
            .count();
        loop {
            if self.settled(live) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the replicated redis did not settle within {within:?}: {}",
                self.describe()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn settled(&self, live: usize) -> bool {
        let Some(port) = self.sentinels_master() else {
            return false;
        };
        let Some(master) = self.nodes.iter().find(|n| n.port == port) else {
            return false;
        };
        if !master.is_running() || master.is_paused() || role(master).as_deref() != Some("master") {
            return false;
        }
        let Some(info) = replication(master) else {
            return false;
        };
        let online = info
            .lines()
            .filter(|l| l.starts_with("slave") && l.contains("state=online"))
            .count();
        let replicas_up = self
            .nodes
            .iter()
            .filter(|n| n.port != port && n.is_running() && !n.is_paused())
            .all(|n| {
                replication(n).is_some_and(|info| {
                    info.contains(&format!("master_port:{port}"))
                        && info.contains("master_link_status:up")
                })
            });
        let quorum = self.sentinels.iter().all(|s| {
            let ok = ask(s.port, &["SENTINEL", "CKQUORUM", MASTER_NAME])
                .is_some_and(|r| r.line().is_some_and(|l| l.starts_with("OK 3")));
            // Every live replica known, and none of them thought down.
            let known = ask(s.port, &["SENTINEL", "REPLICAS", MASTER_NAME]).is_some_and(|r| {
                r.items()
                    .iter()
                    .filter(|rep| rep.field("flags") == Some("slave"))
                    .count()
                    + 1
                    >= live
            });
            ok && known
        });
        online + 1 >= live && replicas_up && quorum
    }

    /// What each node and the Sentinels say, for a failure message.
    pub fn describe(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| match (n.is_running(), n.is_paused()) {
                (false, _) => format!("{}: down", n.port),
                (_, true) => format!("{}: paused", n.port),
                _ => format!("{}: {:?}", n.port, role(n)),
            })
            .collect();
        format!(
            "nodes [{}], sentinels name {:?}",
            nodes.join(", "),
            self.sentinels_master()
        )
    }
}

/// What the node says it is (`master`, `slave`), if it answers.
pub fn role(node: &RedisServer) -> Option<String> {
    replication(node)?
        .lines()
        .find_map(|l| l.strip_prefix("role:"))
        .map(|r| r.trim().to_owned())
}

/// The node's `INFO replication`, if it answers within a second. A node the Sentinels
/// reconfigure closes its clients' connections (`CLIENT KILL TYPE normal`), so a question
/// may meet a closed connection: that is no answer, not a failure.
fn replication(node: &RedisServer) -> Option<String> {
    match ask(node.port, &["INFO", "replication"])? {
        Reply::Line(info) => Some(info),
        _ => None,
    }
}

/// Starts a Sentinel watching the master on `master_port`. As with a fresh
/// [`RedisServer`], another process may take the free port before the Sentinel binds it: its
/// log then says so and it starts again on another port, and only the Sentinel's own
/// `process_id` answering counts as started.
fn start_sentinel(master_port: u16) -> Sentinel {
    start_sentinel_on(master_port, free_port)
}

/// [`start_sentinel`] on the first port of `ports` it can bind.
fn start_sentinel_on(master_port: u16, mut ports: impl FnMut() -> u16) -> Sentinel {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("sentinel.log");
    for _ in 0..10 {
        let port = ports();
        let conf: PathBuf = dir.path().join("sentinel.conf");
        let _ = std::fs::remove_file(&log);
        // Sentinel rewrites its own config file, so it gets a writable one of its own.
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\nlogfile {log}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {MASTER_NAME} 2\n",
                dir = dir.path().display(),
                log = log.display(),
            ),
        )
        .expect("write sentinel.conf");
        let mut child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server --sentinel (install redis-server)");
        match crate::redis_server::wait_until_ready(&mut child, port, dir.path()) {
            Ok(()) => {
                return Sentinel {
                    child: Some(child),
                    port,
                    _dir: dir,
                };
            }
            Err(exited) => {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                assert!(
                    text.contains("Address already in use"),
                    "{exited}; its log:\n{text}"
                );
                eprintln!("sentinel {exited}: its port was taken; trying another");
            }
        }
    }
    panic!("a Sentinel lost its port to another process ten times in a row");
}

/// A RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A simple string, integer or bulk string (an error as `ERR …`).
    Line(String),
    Array(Vec<Reply>),
    Nil,
}

impl Reply {
    /// The items of an array (nothing for anything else).
    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(items) => items,
            _ => &[],
        }
    }

    pub fn line(&self) -> Option<&str> {
        match self {
            Reply::Line(l) => Some(l),
            _ => None,
        }
    }

    /// The value of `key` in an array of alternating keys and values.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.items()
            .chunks(2)
            .find(|kv| kv[0].line() == Some(key))
            .and_then(|kv| kv.get(1)?.line())
    }
}

/// Sends one command to the server on `port`; `None` when it does not answer within a
/// second.
pub fn ask(port: u16, args: &[&str]) -> Option<Reply> {
    use std::io::{BufReader, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(req.as_bytes()).ok()?;
    read_reply(&mut BufReader::new(s))
}

fn read_reply(r: &mut impl std::io::BufRead) -> Option<Reply> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let line = line.trim_end();
    let (kind, rest) = line.split_at_checked(1)?;
    Some(match kind {
        "+" | ":" => Reply::Line(rest.to_owned()),
        "-" => Reply::Line(format!("ERR {rest}")),
        "$" => match rest.parse::<i64>().ok()? {
            len if len < 0 => Reply::Nil,
            len => {
                let mut buf = vec![0u8; len as usize + 2];
                std::io::Read::read_exact(r, &mut buf).ok()?;
                buf.truncate(len as usize);
                Reply::Line(String::from_utf8_lossy(&buf).into_owned())
            }
        },
        "*" => match rest.parse::<i64>().ok()? {
            n if n < 0 => Reply::Nil,
            n => Reply::Array((0..n).map(|_| read_reply(r)).collect::<Option<_>>()?),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Sentinel whose port a Redis server took before it could bind moves to another port
    /// and is itself the one answering there, not the server that answers `PING` too.
    #[test]
    fn a_sentinel_whose_port_was_taken_moves_to_another() {
        let master = RedisServer::start();
        let thief = RedisServer::start();
        let mut ports = [thief.port, free_port()].into_iter();
        let sentinel = start_sentinel_on(master.port, || ports.next().expect("two ports"));
        assert_ne!(sentinel.port, thief.port);
        let pid = sentinel.child.as_ref().map(Child::id);
        assert_eq!(crate::redis_server::answering_pid(sentinel.port), pid);
        assert_eq!(
            crate::redis_server::answering_pid(thief.port),
            Some(thief.pid())
        );
    }
}
