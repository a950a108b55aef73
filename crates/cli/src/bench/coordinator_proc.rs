//! The coordinator under test: `lanes coordinator` as a child process of this binary, so its
//! CPU time and memory can be read from `/proc/<pid>` apart from the simulated lanes. It gets
//! fresh random tokens through 0600 files, a private temp directory (its embedded store lives
//! there) or the given Redis, and a loopback port it picks itself and logs. It is killed when
//! this value is dropped, so no exit path leaves it behind.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use lanes_coordinator::store::{RedisOptions, RedisStore, SentinelOptions};

/// How long the child may take to listen (it opens the store first).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Lines of the child's stderr kept to explain a failure.
const LOG_TAIL: usize = 40;

/// Where the coordinator keeps its state.
#[derive(Debug, Clone)]
pub(crate) enum StoreTarget {
    /// A fresh embedded store in the bench's temp directory.
    Embedded,
    /// A Redis URL (it may carry a password: it travels through the env, never argv).
    Redis {
        url: String,
        allow_lossy: bool,
        /// `--redis-wait`, passed on.
        wait: Option<u32>,
        /// `--redis-sentinel` and its companions, passed on.
        sentinel: Option<SentinelOptions>,
    },
}

impl StoreTarget {
    /// The URL of the Redis master now, for the probes that dial it directly.
    pub(crate) async fn master_url(&self) -> anyhow::Result<Option<String>> {
        let StoreTarget::Redis { url, sentinel, .. } = self else {
            return Ok(None);
        };
        let opts = RedisOptions {
            sentinel: sentinel.clone(),
            ..RedisOptions::default()
        };
        Ok(Some(RedisStore::master_url(url, &opts).await?))
    }
}

/// CPU time and memory of a process, from `/proc`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ProcUsage {
    /// utime + stime.
    pub(crate) cpu: Duration,
    /// VmRSS, in bytes.
    pub(crate) rss: u64,
    /// VmHWM (peak RSS), in bytes.
    pub(crate) peak_rss: u64,
}

/// The running child.
pub(crate) struct CoordinatorProc {
    child: Child,
    pub(crate) url: String,
    pub(crate) client_token: String,
    pub(crate) lane_token: String,
    /// The lane token's 0600 file, for real workers (`--workers`).
    pub(crate) lane_token_file: PathBuf,
    log: Arc<Mutex<VecDeque<String>>>,
    /// Token files and the embedded store; removed after the child is killed.
    _dir: tempfile::TempDir,
}

/// Writes `token` to a new file readable by its owner only.
fn write_token_file(path: &Path, token: &str) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    writeln!(f, "{token}").with_context(|| format!("cannot write {}", path.display()))
}

impl CoordinatorProc {
    /// Starts `lanes coordinator` (with `threads` runtime threads, if given) and waits until
    /// it listens.
    pub(crate) async fn start(store: &StoreTarget, threads: Option<u16>) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("lanes-bench-")
            .tempdir()
            .context("cannot create a temp directory")?;
        let client_token = crate::tokens::generate()?;
        let lane_token = crate::tokens::generate()?;
        let client_file = dir.path().join("client.token");
        let lane_file = dir.path().join("lane.token");
        write_token_file(&client_file, &client_token)?;
        write_token_file(&lane_file, &lane_token)?;

        let exe = std::env::current_exe().context("cannot find the lanes binary")?;
        let mut cmd = Command::new(exe);
        // The user's LANES_* settings are for their own coordinator, not this one.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("LANES_") {
                cmd.env_remove(k);
            }
        }
        cmd.arg("coordinator")
            .args(["--listen", "127.0.0.1:0"])
            .arg("--client-token-file")
            .arg(&client_file)
            .arg("--lane-token-file")
            .arg(&lane_file)
            // Leases are renewed every attempt; the reaper has nothing to do in a bench.
            .args(["--reaper-delay-s", "3600"])
            // Its listening line, and warnings.
            .env("RUST_LOG", "warn,lanes::coordinator=info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Its own process group: a Ctrl-C at the terminal reaches only the bench, which
            // then still reads the coordinator's figures before it kills it.
            .process_group(0);
        if let Some(n) = threads {
            cmd.arg("--threads").arg(n.to_string());
        }
        match store {
            StoreTarget::Embedded => {
                let data: PathBuf = dir.path().join("data");
                cmd.arg("--data-dir").arg(data);
            }
            StoreTarget::Redis {
                url,
                allow_lossy,
                wait,
                sentinel,
            } => {
                cmd.env("LANES_REDIS", url);
                if *allow_lossy {
                    cmd.arg("--allow-lossy-store");
                }
                if let Some(n) = wait {
                    cmd.arg("--redis-wait").arg(n.to_string());
                }
                if let Some(s) = sentinel {
                    cmd.env("LANES_REDIS_SENTINEL", s.addrs.join(","))
                        .env("LANES_REDIS_MASTER", &s.master)
                        .env("LANES_REDIS_SENTINEL_TLS", s.tls.to_string());
                    if let Some(p) = &s.password {
                        cmd.env("LANES_REDIS_SENTINEL_PASSWORD", p);
                    }
                }
            }
        }
        let mut child = cmd
            .spawn()
            .context("cannot start `lanes coordinator` as a child process")?;
        let stderr = child.stderr.take().expect("stderr is piped");
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let (addr_tx, addr_rx) = tokio::sync::oneshot::channel::<String>();
        let tail = log.clone();
        // Drains stderr for the child's whole life (a full pipe would block it).
        std::thread::spawn(move || {
            let mut addr_tx = Some(addr_tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(i) = line.find("addr=")
                    && let Some(tx) = addr_tx.take()
                {
                    let addr = line[i + 5..].split_whitespace().next().unwrap_or_default();
                    let _ = tx.send(addr.to_owned());
                }
                let mut t = tail.lock().expect("log tail");
                if t.len() == LOG_TAIL {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
        let mut proc = Self {
            child,
            url: String::new(),
            client_token,
            lane_token,
            lane_token_file: lane_file,
            log,
            _dir: dir,
        };
        match tokio::time::timeout(START_TIMEOUT, addr_rx).await {
            Ok(Ok(addr)) => {
                proc.url = format!("http://{addr}");
                Ok(proc)
            }
            Ok(Err(_)) => {
                // Its stderr closed without a listening line: it exited.
                let status = proc.child.wait().ok();
                anyhow::bail!(
                    "the coordinator exited ({}) before listening:\n{}",
                    status.map_or("unknown status".into(), |s| s.to_string()),
                    proc.log_tail()
                )
            }
            Err(_) => anyhow::bail!(
                "the coordinator did not listen within {START_TIMEOUT:?}:\n{}",
                proc.log_tail()
            ),
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines the child wrote on stderr.
    pub(crate) fn log_tail(&self) -> String {
        let t = self.log.lock().expect("log tail");
        t.iter().map(|l| format!("  {l}\n")).collect()
    }

    /// Its CPU time and memory now.
    pub(crate) fn usage(&self) -> anyhow::Result<ProcUsage> {
        proc_usage(self.pid())
    }

    /// Kills the child and reaps it.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for CoordinatorProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// CPU time and memory of process `pid` now, from `/proc`.
pub(crate) fn proc_usage(pid: u32) -> anyhow::Result<ProcUsage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("cannot read /proc/{pid}/stat"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("cannot read /proc/{pid}/status"))?;
    let ticks = cpu_ticks(&stat).context("cannot parse /proc/<pid>/stat")?;
    let kb = |field| status_kb(&status, field).with_context(|| format!("no {field}"));
    Ok(ProcUsage {
        cpu: Duration::from_secs_f64(ticks as f64 / ticks_per_second() as f64),
        rss: kb("VmRSS")? * 1024,
        peak_rss: kb("VmHWM")? * 1024,
    })
}

/// The kernel's clock ticks per second (`utime` and `stime` count them).
fn ticks_per_second() -> u64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(n)) if n > 0 => n as u64,
        // USER_HZ is 100 on every mainstream architecture.
        _ => 100,
    }
}

/// utime + stime, in ticks, from the text of `/proc/<pid>/stat`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 overall; `rest` starts at field 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A `kB` field of `/proc/<pid>/status`, e.g. `VmHWM:    61234 kB`.
fn status_kb(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|l| {
        let v = l.strip_prefix(field)?.strip_prefix(':')?;
        v.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_ticks_past_a_command_name_with_spaces() {
        let stat = "4242 (lanes (odd) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 75 0 0 20 0 9 0 123 456 789";
        assert_eq!(cpu_ticks(stat), Some(325));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn reads_kilobyte_fields_of_status() {
        let status = "Name:\tlanes\nVmHWM:\t   61234 kB\nVmRSS:\t   58000 kB\n";
        assert_eq!(status_kb(status, "VmHWM"), Some(61234));
        assert_eq!(status_kb(status, "VmRSS"), Some(58000));
        assert_eq!(status_kb(status, "VmSwap"), None);
    }

    #[test]
    fn token_files_are_private_and_never_reused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t");
        write_token_file(&f, "0123456789abcdef0123").unwrap();
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            std::fs::read_to_string(&f).unwrap(),
            "0123456789abcdef0123\n"
        );
        assert!(write_token_file(&f, "again").is_err());
    }

    #[test]
    fn reads_its_own_usage_from_proc() {
        let me = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(status_kb(&me, "VmHWM").unwrap() > 0);
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(cpu_ticks(&stat).is_some());
    }
}
