//! A real `redis-server` for tests: started on a free loopback port in its own temp dir with
//! AOF and `appendfsync always`, killed on drop. Never a shared instance, never a standard port.
//!
//! It uses no coordinator type, so the coordinator's own store suites and bench can take it
//! from this crate through a dev-dependency.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A redis-server child process.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
    fsync: &'static str,
    /// A TLS port beside the plain one: (port, certificate, key, CA).
    tls: Option<(u16, PathBuf, PathBuf, PathBuf)>,
    /// More `--name value` arguments (replication settings, say).
    extra: Vec<String>,
    /// Stopped with SIGSTOP and not continued yet.
    paused: bool,
    _tmp: Option<tempfile::TempDir>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl RedisServer {
    /// Starts a durable server (`appendonly yes`, `appendfsync always`).
    pub fn start() -> Self {
        Self::start_with("always")
    }

    /// Starts a server with the given `appendfsync` policy.
    pub fn start_with(fsync: &'static str) -> Self {
        Self::start_args(fsync, &[])
    }

    /// Starts a server with the given `appendfsync` policy and more arguments, kept for
    /// restarts (e.g. `["--replicaof", "127.0.0.1", "6390"]`).
    pub fn start_args(fsync: &'static str, extra: &[String]) -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_owned();
        let mut s = Self {
            child: None,
            port: free_port(),
            dir,
            fsync,
            tls: None,
            extra: extra.to_vec(),
            paused: false,
            _tmp: Some(tmp),
        };
        s.start_fresh();
        s
    }

    /// A durable server that also serves TLS (`rediss://`, see [`Self::tls_url`]) with this
    /// certificate and key; clients are not asked for certificates.
    pub fn start_tls(cert: &Path, key: &Path, ca: &Path) -> Self {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_owned();
        let mut s = Self {
            child: None,
            port: free_port(),
            dir,
            fsync: "always",
            tls: Some((free_port(), cert.to_owned(), key.to_owned(), ca.to_owned())),
            extra: Vec::new(),
            paused: false,
            _tmp: Some(tmp),
        };
        s.start_fresh();
        s
    }

    /// The `rediss://` URL of a server started with [`Self::start_tls`].
    pub fn tls_url(&self) -> String {
        let (port, ..) = self.tls.as_ref().expect("a TLS server");
        format!("rediss://127.0.0.1:{port}/")
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts a new server. Another process may take a free port between [`free_port`] and
    /// the server's bind (the suites run beside each other, each starting servers): then the
    /// child exits and another server answers on that port, so this moves to fresh ports and
    /// starts again rather than hand out another server's URL.
    fn start_fresh(&mut self) {
        for _ in 0..10 {
            let _ = std::fs::remove_file(self.log());
            match self.spawn_once() {
                Ok(()) => return,
                Err(exited) if self.log_tail().contains("Address already in use") => {
                    self.port = free_port();
                    if let Some((tls, ..)) = &mut self.tls {
                        *tls = free_port();
                    }
                    eprintln!("{exited}: its port was taken; trying port {}", self.port);
                }
                Err(exited) => panic!("{exited}; its log ends:\n{}", self.log_tail()),
            }
        }
        panic!("redis-server lost its port to another process ten times in a row");
    }

    /// The server's log, in its data directory.
    fn log(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// The last lines of the server's log.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Starts the server again on its port, which its clients know: one taken meanwhile
    /// fails the test, saying so.
    fn spawn(&mut self) {
        if let Err(exited) = self.spawn_once() {
            panic!("{exited}; its log ends:\n{}", self.log_tail());
        }
    }

    /// Starts the child and waits until it is the one answering on its port; `Err` if it
    /// exited first (its port taken, say, which its log tells).
    fn spawn_once(&mut self) -> Result<(), String> {
        let mut cmd = Command::new("redis-server");
        if let Some((port, cert, key, ca)) = &self.tls {
            cmd.args(["--tls-port", &port.to_string()])
                .arg("--tls-cert-file")
                .arg(cert)
                .arg("--tls-key-file")
                .arg(key)
                .arg("--tls-ca-cert-file")
                .arg(ca)
                .args(["--tls-auth-clients", "no"]);
        }
        let child = cmd
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                self.fsync,
            ])
            .args(["--protected-mode", "no", "--daemonize", "no"])
            .arg("--logfile")
            .arg(self.log())
            // DEBUG (for POPULATE in the fault suite), from loopback only.
            .args(["--enable-debug-command", "local"])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start redis-server ({e}). The Redis store tests need it: install it \
                     with `apt-get update && apt-get install -y redis-server`, or run \
                     ./scripts/test.sh, which does"
                )
            });
        self.child = Some(child);
        let child = self.child.as_mut().expect("just started");
        wait_until_ready(child, self.port, &self.dir).inspect_err(|_| self.child = None)
    }

    /// Sends several commands on one connection (so `SELECT` applies to the next ones) and
    /// answers each reply's first line.
    pub fn commands(&self, cmds: &[&[&str]]) -> Vec<String> {
        use std::io::{BufRead, BufReader, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port))
            .unwrap_or_else(|e| panic!("connect to redis-server on {}: {e}", self.port));
        let mut reader = BufReader::new(s.try_clone().expect("clone"));
        let mut out = Vec::new();
        for args in cmds {
            let mut req = format!("*{}\r\n", args.len());
            for a in *args {
                req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
            }
            s.write_all(req.as_bytes()).expect("send");
            let mut line = String::new();
            reader.read_line(&mut line).expect("reply");
            out.push(line.trim_end().to_owned());
        }
        out
    }

    /// SIGTERM, then wait for a clean exit (AOF flushed).
    pub fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }

    /// SIGKILL: no chance to flush anything it had not fsynced.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Starts again on the same port and data directory.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the server before restarting it");
        self.spawn();
    }

    /// Starts again on the same port and data with another `appendfsync` policy.
    pub fn restart_with(&mut self, fsync: &'static str) {
        self.fsync = fsync;
        self.restart();
    }

    /// Starts again on the same port with an empty data directory, as on a new disk.
    pub fn restart_empty(&mut self) {
        assert!(self.child.is_none(), "stop the server before restarting it");
        for entry in std::fs::read_dir(&self.dir).expect("read the data dir") {
            let path = entry.expect("a data dir entry").path();
            let _ = match path.is_dir() {
                true => std::fs::remove_dir_all(&path),
                false => std::fs::remove_file(&path),
            };
        }
        self.spawn();
    }

    /// SIGSTOP: the server holds its sockets open and answers nothing.
    pub fn pause(&mut self) {
        self.signal("-STOP");
        self.paused = true;
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&mut self) {
        self.signal("-CONT");
        self.paused = false;
    }

    pub fn is_paused(&self) -> bool {
        self.paused
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} redis-server on port {}", self.port);
    }

    /// The server's process id (for SIGSTOP and the like).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sends one command on a fresh connection and returns the reply: the first line of a
    /// simple reply (`+OK`, `-ERR ...`, `:1`, ...) or the whole value of a bulk one.
    pub fn command(&self, args: &[&str]) -> String {
        use std::io::{BufRead, BufReader, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port))
            .unwrap_or_else(|e| panic!("connect to redis-server on {}: {e}", self.port));
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(req.as_bytes()).expect("send a command");
        let mut reader = BufReader::new(s);
        let mut line = String::new();
        reader.read_line(&mut line).expect("read a reply");
        let line = line.trim_end().to_owned();
        if let Some(len) = line.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
            // The whole bulk value (INFO replies span many lines), then its CRLF.
            let mut value = vec![0u8; len + 2];
            std::io::Read::read_exact(&mut reader, &mut value).expect("read a bulk reply");
            value.truncate(len);
            return String::from_utf8_lossy(&value).trim_end().to_owned();
        }
        line
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// How long a started server may take to answer at all.
const START_LIMIT: Duration = Duration::from_secs(20);
/// How long a server that answers `LOADING` may take to load its data: a restart over a
/// large AOF takes seconds here and several times that on a slow CI machine.
const LOADING_LIMIT: Duration = Duration::from_secs(180);

/// Waits until `child` answers on `port`: a `PONG` from another process that holds the
/// port does not count. `Err` if the child exited first.
pub(crate) fn wait_until_ready(child: &mut Child, port: u16, dir: &Path) -> Result<(), String> {
    wait_until_ready_within(child, port, dir, START_LIMIT, LOADING_LIMIT)
}

/// [`wait_until_ready`], with its limits given.
fn wait_until_ready_within(
    child: &mut Child,
    port: u16,
    dir: &Path,
    start_limit: Duration,
    loading_limit: Duration,
) -> Result<(), String> {
    let started = Instant::now();
    let mut loading = false;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "redis-server on port {port} (dir {}) exited ({status})",
                dir.display()
            ));
        }
        if answering_pid(port) == Some(child.id()) {
            // Ours, and done loading its data (`PING` answers `-LOADING` until then).
            match ping(port) {
                Ping::Pong => return Ok(()),
                Ping::Loading => loading = true,
                Ping::Other => {}
            }
        }
        let limit = if loading { loading_limit } else { start_limit };
        assert!(
            started.elapsed() < limit,
            "redis-server on port {port} (dir {}) did not answer within {:.1} s{}",
            dir.display(),
            limit.as_secs_f64(),
            if loading {
                " (still loading its data)"
            } else {
                ""
            }
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a server answered to `PING`.
#[derive(Debug, PartialEq)]
enum Ping {
    Pong,
    /// `-LOADING`: up, and still reading its data set.
    Loading,
    /// No answer, or any other one.
    Other,
}

/// Sends `PING` to the server on `port`.
fn ping(port: u16) -> Ping {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return Ping::Other;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 64];
    if s.write_all(b"PING\r\n").is_err() {
        return Ping::Other;
    }
    match s.read(&mut buf) {
        Ok(n) if buf[..n].starts_with(b"+PONG") => Ping::Pong,
        Ok(n) if buf[..n].starts_with(b"-LOADING") => Ping::Loading,
        _ => Ping::Other,
    }
}

/// The `process_id` of the Redis server answering on `port`, if one answers.
pub(crate) fn answering_pid(port: u16) -> Option<u32> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(b"INFO server\r\n").ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    // The `process_id` line comes early in the section; read until it is whole.
    while reply.len() < 64 * 1024 {
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply);
        if let Some(rest) = text.split("process_id:").nth(1)
            && let Some((pid, _)) = rest.split_once("\r\n")
        {
            return pid.trim().parse().ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    impl RedisServer {
        /// A server not started yet, in a directory of its own, to start on `port`.
        fn unstarted(port: u16) -> Self {
            let tmp = tempfile::tempdir().expect("temp dir");
            RedisServer {
                child: None,
                port,
                dir: tmp.path().to_owned(),
                fsync: "always",
                tls: None,
                extra: Vec::new(),
                paused: false,
                _tmp: Some(tmp),
            }
        }
    }

    /// A fresh server whose port another server took before it could bind moves to another
    /// port and is itself the one answering there; the other server is left alone. A restart
    /// cannot move, and fails instead.
    #[test]
    fn a_fresh_server_whose_port_was_taken_moves_to_another() {
        let taken = RedisServer::start();
        let mut s = RedisServer::unstarted(taken.port);
        s.start_fresh();
        assert_ne!(s.port, taken.port);
        assert_eq!(answering_pid(s.port), Some(s.pid()));
        assert_eq!(answering_pid(taken.port), Some(taken.pid()));
        assert_eq!(s.command(&["SET", "k", "v"]), "+OK");
        assert_eq!(taken.command(&["EXISTS", "k"]), ":0");

        // A restart keeps its port, which its clients know: taken meanwhile, it fails
        // saying why, and the server holding the port is left alone.
        let mut restarted = RedisServer::start();
        restarted.kill9();
        let mut thief = RedisServer::unstarted(restarted.port);
        thief.start_fresh();
        assert_eq!(thief.port, restarted.port);
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| restarted.restart()))
            .expect_err("a restart on a taken port fails");
        let msg = err
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or_default();
        assert!(msg.contains("Address already in use"), "{msg}");
        assert_eq!(answering_pid(thief.port), Some(thief.pid()));
    }

    /// A server that answers `-LOADING` for longer than a start may take is waited for
    /// while it loads; one that never answers fails at the start limit. The fake answers
    /// `INFO` with the pid of a child that stands in for it.
    #[test]
    fn a_server_loading_its_data_is_waited_for_past_the_start_limit() {
        let mut child = Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("spawn sleep");
        let loading_until = Instant::now() + Duration::from_millis(1500);
        let port = fake_server(child.id(), loading_until);
        let dir = Path::new("/nonexistent");
        let (start, loading) = (Duration::from_millis(300), Duration::from_secs(30));
        wait_until_ready_within(&mut child, port, dir, start, loading).expect("ready once loaded");
        assert!(Instant::now() >= loading_until);

        // Nothing answers on a port nobody listens on.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let silent_port = silent.local_addr().expect("addr").port();
        drop(silent);
        let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wait_until_ready_within(&mut child, silent_port, dir, start, loading)
        }))
        .expect_err("a silent port fails at the start limit");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("did not answer within 0.3 s"), "{msg}");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// A loopback server that claims to be process `pid` and answers `PING` with
    /// `-LOADING` until `loading_until`, then `+PONG`.
    fn fake_server(pid: u32, loading_until: Instant) -> u16 {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut buf = [0u8; 256];
                let Ok(n) = conn.read(&mut buf) else { continue };
                let reply = if buf[..n].starts_with(b"INFO") {
                    let body = format!("# Server\r\nprocess_id:{pid}\r\n");
                    format!("${}\r\n{body}\r\n", body.len())
                } else if Instant::now() < loading_until {
                    "-LOADING Redis is loading the dataset in memory\r\n".to_owned()
                } else {
                    "+PONG\r\n".to_owned()
                };
                let _ = conn.write_all(reply.as_bytes());
            }
        });
        port
    }
}
