//! A real S3-compatible server for tests: moto's server mode (PyPI `moto[server]`, from the
//! venv `./scripts/test.sh` installs) on a free loopback port, with a bucket made for the
//! test, killed on drop. Its state is in memory; SIGSTOP and SIGCONT keep it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// A `moto_server` child process and the bucket made in it.
pub struct S3Server {
    child: Child,
    pub port: u16,
    pub bucket: String,
}

/// The test venv's `moto_server`: beside `LANES_TEST_PYTHON`, or in the default
/// `<target>/test-venv/bin` that `./scripts/test.sh` makes.
fn moto_server() -> PathBuf {
    let bin = match std::env::var_os("LANES_TEST_PYTHON") {
        Some(python) => PathBuf::from(python)
            .parent()
            .expect("LANES_TEST_PYTHON names a file")
            .to_owned(),
        None => std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
            .join("test-venv/bin"),
    };
    let exe = bin.join("moto_server");
    assert!(
        exe.exists(),
        "moto_server is not in {}: run ./scripts/test.sh, which installs moto[server] into its venv",
        bin.display()
    );
    exe
}

impl S3Server {
    /// Starts a server and makes the bucket `lanes-test`.
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
        let child = Command::new(moto_server())
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let mut server = Self {
            child,
            port,
            bucket: "lanes-test".into(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // Another process may have taken the port between its choice and moto's bind: a
            // moto that exited must not be mistaken for the one that answers.
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("moto_server exited ({status}) before it answered on port {port}");
            }
            match server.request("PUT", &format!("/{}", server.bucket), b"") {
                Ok((200, _)) => break,
                Ok((status, body)) => panic!("moto refused the bucket: {status} {body:?}"),
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => panic!("moto_server did not answer on port {port}: {e}"),
            }
        }
        server
    }

    /// The server's URL, for `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The secret access key the tests give: no row, log or artifact may ever show it.
    pub const SECRET_KEY: &'static str = "s3-secret-key-7Hq2vX9";

    /// The environment a worker or coordinator needs to reach the server.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "lanes-test-key".into()),
            ("AWS_SECRET_ACCESS_KEY", Self::SECRET_KEY.into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// `s3://<bucket>/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// The server's process id (to stop and continue it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An object's bytes, read over plain HTTP (moto does not check signatures, but answers
    /// anonymous reads of private objects with 403), or `None`
    /// if there is no such object.
    pub fn object(&self, key: &str) -> Option<Vec<u8>> {
        match self.request("GET", &format!("/{}/{key}", self.bucket), b"") {
            Ok((200, body)) => Some(body),
            Ok((404, _)) => None,
            other => panic!("GET {key}: {other:?}"),
        }
    }

    /// The keys under `prefix`, from a `ListObjectsV2` (at most 1,000).
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        let (status, body) = self
            .request(
                "GET",
                &format!("/{}?list-type=2&prefix={prefix}", self.bucket),
                b"",
            )
            .expect("list");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let text = String::from_utf8_lossy(&body);
        text.split("<Key>")
            .skip(1)
            .filter_map(|s| s.split_once("</Key>").map(|(k, _)| k.to_owned()))
            .collect()
    }

    /// What makes a request an authenticated one to moto (which checks no signature).
    const AUTH: &str = "AWS4-HMAC-SHA256 Credential=lanes-test-key/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00";

    /// Writes an object as it is, past every client check (a test's forged manifest).
    pub fn put_object(&self, key: &str, body: &[u8]) {
        let (status, said) = self
            .request("PUT", &format!("/{}/{key}", self.bucket), body)
            .expect("put");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&said));
    }

    /// One HTTP/1.1 request; answers the status and the body.
    fn request(&self, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.port,
            Self::AUTH,
            body.len()
        )?;
        s.write_all(body)?;
        let mut raw = Vec::new();
        s.read_to_end(&mut raw)?;
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| std::io::Error::other("no HTTP header"))?;
        let head = String::from_utf8_lossy(&raw[..split]).to_string();
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("bad status line: {head}")))?;
        let mut body = raw[split + 4..].to_vec();
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            body = unchunk(&body);
        }
        Ok((status, body))
    }
}

/// The body of a chunked HTTP/1.1 response.
fn unchunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&raw[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&raw[eol + 2..eol + 2 + size]);
        raw = &raw[eol + 2 + size + 2..];
    }
    out
}

impl Drop for S3Server {
    fn drop(&mut self) {
        // A stopped server must be continued to die of SIGKILL promptly.
        let _ = Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real HTTP front for the S3 server that can fail: while failing, it answers every
/// request `500 Internal Server Error`; otherwise it passes the connection through. For
/// "the store fails for a while" without touching the store. Stops on drop.
pub struct FailingFront {
    pub port: u16,
    failing: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Requests answered with a 500 so far.
    refused: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    stopped: std::sync::Arc<AtomicBool>,
}

impl FailingFront {
    /// A front for `s3`, failing from the start.
    pub fn start(s3: &S3Server) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let failing = std::sync::Arc::new(AtomicBool::new(true));
        let refused = std::sync::Arc::new(AtomicUsize::new(0));
        let stopped = std::sync::Arc::new(AtomicBool::new(false));
        let (f, r, stop, upstream) = (failing.clone(), refused.clone(), stopped.clone(), s3.port);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut client) = conn else { return };
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                if f.load(Ordering::SeqCst) {
                    r.fetch_add(1, Ordering::SeqCst);
                    std::thread::spawn(move || {
                        // Read the request head, then fail it (the body may be left unread:
                        // the connection is closed).
                        let mut buf = [0u8; 8192];
                        let _ = client.set_read_timeout(Some(Duration::from_secs(5)));
                        let _ = client.read(&mut buf);
                        let _ = client.write_all(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                    });
                    continue;
                }
                std::thread::spawn(move || {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                        return;
                    };
                    let (mut c2, mut s2) =
                        (client.try_clone().unwrap(), server.try_clone().unwrap());
                    let up = std::thread::spawn(move || {
                        let _ = std::io::copy(&mut c2, &mut s2);
                        let _ = s2.shutdown(std::net::Shutdown::Write);
                    });
                    let (mut server, mut client) = (server, client);
                    let _ = std::io::copy(&mut server, &mut client);
                    let _ = client.shutdown(std::net::Shutdown::Write);
                    let _ = up.join();
                });
            }
        });
        Self {
            port,
            failing,
            refused,
            stopped,
        }
    }

    /// From now on, pass requests through.
    pub fn heal(&self) {
        self.failing
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// How many requests were answered with a 500.
    pub fn refused(&self) -> usize {
        self.refused.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `AWS_ENDPOINT_URL` through this front.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for FailingFront {
    fn drop(&mut self) {
        self.stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accept loop, which then ends.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
