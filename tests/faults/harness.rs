//! The fault suite's harness: real `redis-server`, `lanes coordinator` and `lanes worker`
//! processes on free loopback ports, TCP proxies that can blackhole a link, and the one
//! history checker run over the whole ledger at the end of every case.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lanes_common::proto as pb;
use lanes_common::row::Row;
use lanes_common::spec::Campaign;
use lanes_coordinator::store::{RedisOptions, RedisStore, SentinelOptions, Store};
use lanes_tests::coordinator::{CLIENT_TOKEN, LANE_TOKEN};
use lanes_tests::history::{Ack, Ledger, Version, check};
use lanes_tests::lane_client::{Client, client, submit_request};
use lanes_tests::redis_sentinel::{MASTER_NAME, Replicated};
use lanes_tests::redis_server::RedisServer;

pub use crate::proxy::Proxy;

/// Lease TTL of the suite's campaigns; the coordinators' reaper delay matches it.
pub const TTL_S: u64 = 6;

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill {sig} {pid} failed");
}

/// A child process that can be killed, paused, resumed and started again with the same
/// command line. Killed on drop (resumed first, so a paused child can die).
pub struct Proc {
    name: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    /// The log's length when the child was last started: what it wrote since begins there.
    log_from: usize,
    child: Option<Child>,
    stopped: bool,
}

impl Proc {
    fn start(name: &str, args: Vec<String>, env: Vec<(String, String)>, log: PathBuf) -> Self {
        let mut p = Self {
            name: name.to_owned(),
            args,
            env,
            log,
            log_from: 0,
            child: None,
            stopped: false,
        };
        p.spawn();
        p
    }

    fn spawn(&mut self) {
        self.log_from = self.log_text().len();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_lanes"))
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.name));
        self.child = Some(child);
        self.stopped = false;
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            if self.stopped {
                signal(c.id(), "-CONT");
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP: the process keeps its sockets and answers nothing.
    pub fn pause(&mut self) {
        signal(self.pid(), "-STOP");
        self.stopped = true;
    }

    pub fn resume(&mut self) {
        signal(self.pid(), "-CONT");
        self.stopped = false;
    }

    /// Starts again with the same command line (same port, same outbox).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "{} is still running", self.name);
        self.spawn();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// What the child wrote to its log since it was last started.
    fn log_since_start(&self) -> String {
        self.log_text()
            .get(self.log_from..)
            .unwrap_or_default()
            .to_owned()
    }

    /// How the child ended, if it has (it is reaped then).
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A coordinator replica.
pub struct Coord {
    pub proc: Proc,
    pub port: u16,
}

impl Coord {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts coordinator `i` on the first port of `ports` it can bind. Another suite may
    /// take a free port before the coordinator binds it: a fresh coordinator then moves to
    /// the next port (its clients are not told the port yet).
    fn start_fresh(
        i: usize,
        store_args: &[String],
        env: Vec<(String, String)>,
        log: PathBuf,
        mut ports: impl FnMut() -> u16,
    ) -> Coord {
        for _ in 0..10 {
            let port = ports();
            let args = [
                "coordinator".into(),
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--reaper-delay-s".into(),
                TTL_S.to_string(),
            ]
            .into_iter()
            .chain(store_args.iter().cloned())
            .collect();
            let proc = Proc::start(&format!("coordinator-{i}"), args, env.clone(), log.clone());
            let mut c = Coord { proc, port };
            match c.ready() {
                Ok(()) => return c,
                Err(why) if why.contains("Address already in use") => {
                    eprintln!("{why}\nits port was taken; trying another");
                }
                Err(why) => panic!("{why}"),
            }
        }
        panic!("coordinator {i} lost its port to another process ten times in a row");
    }

    /// Waits (bounded) until it accepts connections; panics with its log if it exited.
    pub fn wait_ready(&mut self) {
        if let Err(why) = self.ready() {
            panic!("{why}");
        }
    }

    /// Waits (bounded) until this very process listens: its log since it started says so
    /// and its port accepts, so another process that took the port does not count. `Err`
    /// with its log if it exited first.
    fn ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.proc.exited() {
                return Err(format!(
                    "coordinator on {} exited ({status}):\n{}",
                    self.port,
                    self.proc.log_since_start()
                ));
            }
            if self
                .proc
                .log_since_start()
                .contains("coordinator listening")
                && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "coordinator on {} never listened:\n{}",
                self.port,
                self.proc.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The Redis a cluster runs on.
pub enum Backing {
    /// One server.
    Single(RedisServer),
    /// A master, two replicas and three Sentinels; the coordinators follow the master with
    /// `--redis-sentinel` and acknowledge with `--redis-wait 1`.
    Sentinel(Replicated),
}

/// Everything one case runs on.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub backing: Backing,
    pub coords: Vec<Coord>,
    pub workers: Vec<Proc>,
    /// Proxies in front of Redis (one per coordinator), when asked for.
    pub redis_proxies: Vec<Proxy>,
    pub store: Arc<dyn Store>,
}

/// How a cluster is laid out.
pub struct Layout {
    pub coordinators: usize,
    /// Clock offset per coordinator, in ms (test-only).
    pub clock_offsets_ms: Vec<i64>,
    /// Put a proxy between each coordinator and Redis.
    pub redis_proxies: bool,
    /// A replicated Redis behind Sentinels instead of one server.
    pub sentinel: bool,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            coordinators: 2,
            clock_offsets_ms: Vec::new(),
            redis_proxies: false,
            sentinel: false,
        }
    }
}

impl Cluster {
    pub async fn start(layout: Layout) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let backing = match layout.sentinel {
            false => Backing::Single(RedisServer::start()),
            true => Backing::Sentinel(
                tokio::task::spawn_blocking(|| Replicated::start(2))
                    .await
                    .expect("start the replicated redis"),
            ),
        };
        let (checker_url, checker_opts) = match &backing {
            Backing::Single(redis) => (redis.url(), RedisOptions::default()),
            Backing::Sentinel(group) => (
                "redis://sentinel-master/".to_owned(),
                RedisOptions {
                    // The checker only reads.
                    allow_lossy: true,
                    sentinel: Some(SentinelOptions {
                        addrs: group.sentinel_addrs(),
                        master: MASTER_NAME.into(),
                        tls: false,
                        password: None,
                    }),
                    ..RedisOptions::default()
                },
            ),
        };
        let store: Arc<dyn Store> = Arc::new(
            RedisStore::connect(&checker_url, checker_opts)
                .await
                .expect("the checker's store connection"),
        );
        let mut redis_proxies = Vec::new();
        let mut coords = Vec::new();
        for i in 0..layout.coordinators {
            let store_args: Vec<String> = match &backing {
                Backing::Single(redis) if layout.redis_proxies => {
                    let p = Proxy::start(redis.port).await;
                    let url = format!("redis://127.0.0.1:{}/", p.port);
                    redis_proxies.push(p);
                    vec!["--redis".into(), url]
                }
                Backing::Single(redis) => vec!["--redis".into(), redis.url()],
                Backing::Sentinel(group) => vec![
                    "--redis-sentinel".into(),
                    group.sentinel_addrs().join(","),
                    "--redis-master".into(),
                    MASTER_NAME.into(),
                    "--redis-wait".into(),
                    "1".into(),
                ],
            };
            let mut env = vec![
                ("LANES_CLIENT_TOKEN".to_owned(), CLIENT_TOKEN.to_owned()),
                ("LANES_LANE_TOKEN".to_owned(), LANE_TOKEN.to_owned()),
            ];
            if let Some(off) = layout.clock_offsets_ms.get(i) {
                env.push(("LANES_TEST_CLOCK_OFFSET_MS".to_owned(), off.to_string()));
            }
            let log = dir.path().join(format!("coordinator-{i}.log"));
            let c = Coord::start_fresh(i, &store_args, env, log, free_port);
            coords.push(c);
        }
        Self {
            dir,
            backing,
            coords,
            workers: Vec::new(),
            redis_proxies,
            store,
        }
    }

    /// The one Redis server of a cluster without Sentinels.
    pub fn redis(&self) -> &RedisServer {
        match &self.backing {
            Backing::Single(r) => r,
            Backing::Sentinel(_) => panic!("this cluster runs on a replicated redis"),
        }
    }

    pub fn redis_mut(&mut self) -> &mut RedisServer {
        match &mut self.backing {
            Backing::Single(r) => r,
            Backing::Sentinel(_) => panic!("this cluster runs on a replicated redis"),
        }
    }

    /// The replicated Redis of a cluster with Sentinels.
    pub fn replicated_mut(&mut self) -> &mut Replicated {
        match &mut self.backing {
            Backing::Sentinel(g) => g,
            Backing::Single(_) => panic!("this cluster runs on one redis"),
        }
    }

    /// Starts two workers of `lanes` lanes each: the first prefers replica 0, the second
    /// replica 1, and each falls back to the other.
    pub fn add_workers_on_both(&mut self, lanes: u32) {
        let urls = self.urls();
        self.add_worker(lanes, &urls, &[]);
        self.add_worker(lanes, &[urls[1].clone(), urls[0].clone()], &[]);
    }

    /// Starts a worker on host `h<n>` with `lanes` lanes, talking to `coordinators` (urls, in
    /// order of preference).
    pub fn add_worker(&mut self, lanes: u32, coordinators: &[String], env: &[(&str, &str)]) {
        let n = self.workers.len();
        let host = format!("h{n}");
        let art = self.dir.path().join(&host);
        let mut e: Vec<(String, String)> = vec![
            ("LANES_LANE_TOKEN".into(), LANE_TOKEN.into()),
            (
                "LANES_ACK_LOG".into(),
                self.dir
                    .path()
                    .join(format!("acks-{host}.jsonl"))
                    .display()
                    .to_string(),
            ),
        ];
        e.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let proc = Proc::start(
            &format!("worker-{host}"),
            vec![
                "worker".into(),
                "--coordinator".into(),
                coordinators.join(","),
                "--lanes".into(),
                lanes.to_string(),
                "--host".into(),
                host.clone(),
                "--artifacts".into(),
                art.display().to_string(),
                "--cancel-grace-s".into(),
                "5".into(),
            ],
            e,
            self.dir.path().join(format!("worker-{host}.log")),
        );
        self.workers.push(proc);
    }

    pub fn urls(&self) -> Vec<String> {
        self.coords.iter().map(Coord::url).collect()
    }

    /// A client of the first replica that is not paused or dead: tries each in turn.
    pub async fn client(&self, i: usize) -> Client {
        client(&self.coords[i].url(), Some(CLIENT_TOKEN)).await
    }

    /// Submits a campaign through replica `i`; answers the spec hash.
    pub async fn submit(&self, i: usize, text: &str) -> pb::SubmitResponse {
        self.client(i)
            .await
            .submit(submit_request(text))
            .await
            .expect("submit")
            .into_inner()
    }

    /// The campaign's status, straight from the store (retried while the store is down:
    /// some cases restart it).
    pub async fn status(&self, id: &str) -> lanes_coordinator::store::CampaignStatus {
        use lanes_coordinator::store::Clock;
        let c = lanes_common::ids::CampaignId::new(id).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now = lanes_coordinator::store::SystemClock.now_ms();
            match self.store.status(&c, now).await {
                Ok(st) => return st,
                Err(e) if e.is_retryable() && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("status of {id}: {e}"),
            }
        }
    }

    /// Waits (bounded) until the campaign is done or stopped.
    pub async fn wait_ended(
        &self,
        id: &str,
        within: Duration,
    ) -> lanes_coordinator::store::CampaignStatus {
        let deadline = Instant::now() + within;
        loop {
            let st = self.status(id).await;
            if matches!(
                st.state,
                lanes_common::state::CampaignState::Done
                    | lanes_common::state::CampaignState::Stopped
            ) {
                return st;
            }
            if Instant::now() > deadline {
                self.dump_logs();
                panic!("campaign {id} did not end within {within:?}: {st:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits (bounded) until at least `n` rows are in the ledger.
    pub async fn wait_rows(&self, id: &str, n: usize, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let st = self.status(id).await;
            if st.rows_total as usize >= n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "fewer than {n} rows within {within:?}: {st:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits (bounded) until `host` holds a lease its lane has reported as running the agent
    /// (so the lease has been renewed at least once).
    pub async fn wait_agent_on(&self, id: &str, host: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let st = self.status(id).await;
            if st
                .in_flight
                .iter()
                .any(|f| f.host.as_str() == host && f.phase == lanes_common::row::Phase::Agent)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no agent ran on {host} within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn rows(&self, id: &str) -> Vec<Row> {
        let c = lanes_common::ids::CampaignId::new(id).unwrap();
        let mut out = Vec::new();
        loop {
            let page = self
                .store
                .rows(&c, out.len() as u64, 10_000)
                .await
                .expect("rows");
            if page.is_empty() {
                return out;
            }
            out.extend(page);
        }
    }

    /// Every acknowledgement any worker logged.
    pub fn acks(&self) -> Vec<Ack> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("acks-") {
                for line in std::fs::read_to_string(e.path()).unwrap().lines() {
                    out.push(serde_json::from_str(line).expect("an ack line"));
                }
            }
        }
        out
    }

    /// Runs the history checker over the campaign's whole ledger; panics with every
    /// violation. `versions` are the campaign texts submitted, oldest first.
    pub async fn check(&self, id: &str, texts: &[&str]) -> Vec<Row> {
        let st = self.status(id).await;
        let mut versions = Vec::new();
        let mut hashes: Vec<String> = Vec::new();
        let mut campaigns: Vec<Campaign> = texts.iter().map(|t| parse(t)).collect();
        for c in &campaigns {
            hashes.push(lanes_common::spec_hash::spec_hash(&c.spec, &c.tasks));
        }
        // Hashes the store knows: the original and each amendment's.
        let known: BTreeSet<String> = st.amendments.iter().map(|a| a.spec_hash.clone()).collect();
        for (c, h) in campaigns.drain(..).zip(hashes) {
            if versions.is_empty() || known.contains(&h) {
                versions.push(Version {
                    spec_hash: h,
                    trials: lanes_common::schedule::trials(&c)
                        .map(|t| t.trial_id)
                        .collect(),
                });
            }
        }
        let rows = self.rows(id).await;
        let acks = self.acks();
        // A stopped campaign may be resumed: its unstarted trials rightly have no rows yet.
        let ended = matches!(st.state, lanes_common::state::CampaignState::Done);
        let policy = parse(texts.last().unwrap()).spec.retry.clone();
        let bad = check(&Ledger {
            campaign: id,
            versions: &versions,
            policy: &policy,
            rows: &rows,
            acks: &acks,
            ended,
        });
        if !bad.is_empty() {
            self.dump_logs();
            panic!(
                "the history checker found {} violations:\n{}",
                bad.len(),
                bad.join("\n")
            );
        }
        eprintln!(
            "checker: {id}: {} rows, {} acks, {} trials: green",
            rows.len(),
            acks.iter().filter(|a| a.campaign == id).count(),
            versions.last().map_or(0, |v| v.trials.len())
        );
        rows
    }

    pub fn dump_logs(&self) {
        for e in std::fs::read_dir(self.dir.path()).unwrap().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "log") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(40).collect();
                eprintln!("==== {} (last 40 lines)", p.display());
                for l in tail.into_iter().rev() {
                    eprintln!("{l}");
                }
            }
        }
    }
}

pub fn parse(text: &str) -> Campaign {
    lanes_common::spec::load_str(text, Path::new("campaign.toml"), Path::new("."))
        .expect("a valid campaign")
}

/// A sim campaign for the suite: `tasks` × 2 arms, short agents, a short TTL.
pub fn campaign(id: &str, tasks: usize, agent_s: [f64; 2], extra: &str) -> String {
    let mut t = format!(
        "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 5\npairing = \"none\"\nlease_ttl_s = {TTL_S}\npublish_grace_s = 20\n{extra}\n[defaults]\ntimeout_s = 30\nmax_turns = 20\n[[arms]]\nid = \"a\"\nprovider = \"pa\"\n[[arms]]\nid = \"b\"\nprovider = \"pb\"\n[driver]\nsim = {{ agent_s = [{}, {}], faults = {{ agent_error = 0.02 }} }}\n[retry]\ninfra_backoff_s = 0\ninfra_retries = 3\n[tasks]\nitems = [\n",
        agent_s[0], agent_s[1]
    );
    for i in 0..tasks {
        t.push_str(&format!("  {{ id = \"T{i:04}\" }},\n"));
    }
    t.push_str("]\n");
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh coordinator whose port another process took before it could bind (here a
    /// listener that accepts connections, as a coordinator would) moves to another port, and
    /// it is its own log that says it listens there.
    #[test]
    fn a_fresh_coordinator_whose_port_was_taken_moves_to_another() {
        let redis = RedisServer::start();
        let dir = tempfile::tempdir().expect("temp dir");
        let thief = TcpListener::bind("127.0.0.1:0").expect("a listener");
        let taken = thief.local_addr().expect("its address").port();
        let mut ports = [taken, free_port()].into_iter();
        let c = Coord::start_fresh(
            0,
            &["--redis".into(), redis.url()],
            vec![
                ("LANES_CLIENT_TOKEN".into(), CLIENT_TOKEN.into()),
                ("LANES_LANE_TOKEN".into(), LANE_TOKEN.into()),
            ],
            dir.path().join("coordinator.log"),
            || ports.next().expect("two ports"),
        );
        assert_ne!(c.port, taken);
        let log = c.proc.log_text();
        assert!(log.contains("Address already in use"), "{log}");
        assert!(
            log.contains(&format!("127.0.0.1:{}", c.port)),
            "it listens on its new port: {log}"
        );
    }
}
