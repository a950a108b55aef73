//! A headless Chromium driven through the DevTools protocol over a pipe
//! (`--remote-debugging-pipe`: commands on the browser's fd 3, answers and events on fd 4,
//! each a JSON message ended by a NUL byte), and a raw HTTP/1.1 client for what a browser
//! would hide. No WebDriver and no websocket: the protocol is small enough to speak here.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The chromium to run: `LANES_TEST_CHROMIUM` (set by scripts/test.sh), or `chromium` on the
/// PATH. `None` when there is neither.
pub fn chromium() -> Option<String> {
    if let Ok(c) = std::env::var("LANES_TEST_CHROMIUM") {
        return Some(c);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("chromium"))
            .find(|p| p.is_file())
            .map(|p| p.display().to_string())
    })
}

type Pending = Arc<Mutex<HashMap<u64, Sender<Value>>>>;

/// One browser with one page, attached in flat session mode.
pub struct Browser {
    child: Child,
    input: ChildStdin,
    pending: Pending,
    next_id: u64,
    session: String,
    /// Console errors, uncaught exceptions and error log entries, as they arrive.
    pub problems: Arc<Mutex<Vec<String>>>,
    events: Receiver<Value>,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Browser {
    /// Starts `chromium` headless with a fresh profile in `profile`, at 1280×800.
    pub fn start(chromium: &str, profile: &Path) -> Self {
        // fd 3 and 4 are the pipe ends the protocol uses; the shell puts our stdin and stdout
        // there, then gives the browser /dev/null for its own.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("exec \"$0\" \"$@\" 3<&0 4>&1 0</dev/null 1>/dev/null")
            .arg(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-pipe",
                "--window-size=1280,800",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromium");
        let input = child.stdin.take().unwrap();
        let output = child.stdout.take().unwrap();
        let pending: Pending = Arc::default();
        let problems: Arc<Mutex<Vec<String>>> = Arc::default();
        let (event_tx, events) = channel();
        {
            let (pending, problems) = (pending.clone(), problems.clone());
            std::thread::spawn(move || read_messages(output, pending, problems, event_tx));
        }
        let mut b = Self {
            child,
            input,
            pending,
            next_id: 1,
            session: String::new(),
            problems,
            events,
        };
        let target = b.call_browser("Target.createTarget", json!({ "url": "about:blank" }));
        let target_id = target["targetId"].as_str().unwrap().to_owned();
        let attached = b.call_browser(
            "Target.attachToTarget",
            json!({ "targetId": target_id, "flatten": true }),
        );
        b.session = attached["sessionId"].as_str().unwrap().to_owned();
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            b.call(domain, json!({}));
        }
        b.viewport(1280, 800, false);
        b
    }

    fn send(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.try_send(session, method, params)
            .unwrap_or_else(|e| panic!("{method} failed: {e}"))
    }

    /// A command and its result, or the error the browser answered.
    fn try_send(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        let id = self.next_id;
        self.next_id += 1;
        let mut msg = json!({ "id": id, "method": method, "params": params });
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let (tx, rx) = channel();
        self.pending.lock().unwrap().insert(id, tx);
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.input.write_all(&bytes).expect("write to chromium");
        let reply = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("chromium did not answer {method}"));
        match reply.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(reply["result"].clone()),
        }
    }

    fn call_browser(&mut self, method: &str, params: Value) -> Value {
        self.send(None, method, params)
    }

    /// A command to the page's session.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let s = self.session.clone();
        self.send(Some(&s), method, params)
    }

    /// The page's viewport: CSS pixels, and whether it is a phone.
    pub fn viewport(&mut self, width: u32, height: u32, mobile: bool) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile }),
        );
    }

    /// The value of a JavaScript expression (awaited if a promise), as JSON.
    pub fn eval(&mut self, expression: &str) -> Value {
        self.try_eval(expression)
            .unwrap_or_else(|| panic!("the page navigated away while {expression} ran"))
    }

    /// As [`Self::eval`], but `None` when the page navigated or closed under the expression.
    fn try_eval(&mut self, expression: &str) -> Option<Value> {
        let s = self.session.clone();
        let params =
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": true });
        match self.try_send(Some(&s), "Runtime.evaluate", params) {
            Ok(r) => {
                if let Some(e) = r.get("exceptionDetails") {
                    panic!("{expression} threw: {e}");
                }
                Some(r["result"]["value"].clone())
            }
            Err(e) if navigated(&e) => None,
            Err(e) => panic!("Runtime.evaluate failed: {e}"),
        }
    }

    /// Polls `expression` until it is truthy, for up to `within`; its last value otherwise.
    pub fn wait_for(&mut self, expression: &str, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let v = match self.try_eval(expression) {
                Some(v) => v,
                // The page navigated away under the expression (a form's redirect): it runs
                // again on the next document.
                None => Value::Null,
            };
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "waited {within:?} for {expression}; last {v}; page: {}",
                self.eval("location.href + ' ' + document.body.innerText.slice(0, 800)")
            );
            // Polling a page, not waiting on a service: the browser has no other signal.
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Opens `url` and waits until a page at `path` (after redirects) has loaded.
    pub fn open(&mut self, url: &str, path: &str) {
        self.call("Page.navigate", json!({ "url": url }));
        self.wait_loaded(path);
    }

    /// Waits until the document at `path` has loaded.
    pub fn wait_loaded(&mut self, path: &str) {
        let check = format!(
            "document.readyState === 'complete' && location.pathname === {}",
            serde_json::to_string(path).unwrap()
        );
        self.wait_for(&check, Duration::from_secs(30));
    }

    /// A PNG of the viewport.
    pub fn screenshot(&mut self) -> Vec<u8> {
        let r = self.call(
            "Page.captureScreenshot",
            json!({ "format": "png", "captureBeyondViewport": false }),
        );
        base64_decode(r["data"].as_str().unwrap())
    }

    /// What went wrong in the page so far (console errors, exceptions, error log entries).
    pub fn problems(&self) -> Vec<String> {
        self.problems.lock().unwrap().clone()
    }

    /// Drops the events collected so far.
    pub fn drain_events(&self) -> usize {
        self.events.try_iter().count()
    }
}

fn read_messages(
    output: impl Read,
    pending: Pending,
    problems: Arc<Mutex<Vec<String>>>,
    events: Sender<Value>,
) {
    let mut reader = BufReader::new(output);
    let mut buf = Vec::new();
    while reader.read_until(0, &mut buf).unwrap_or(0) > 0 {
        if buf.last() == Some(&0) {
            buf.pop();
        }
        let Ok(msg) = serde_json::from_slice::<Value>(&buf) else {
            buf.clear();
            continue;
        };
        buf.clear();
        if let Some(id) = msg.get("id").and_then(Value::as_u64) {
            if let Some(tx) = pending.lock().unwrap().remove(&id) {
                let _ = tx.send(msg);
            }
            continue;
        }
        let params = &msg["params"];
        let problem = match msg["method"].as_str() {
            Some("Runtime.consoleAPICalled") if params["type"] == "error" => {
                Some(format!("console.error: {}", params["args"]))
            }
            Some("Runtime.exceptionThrown") => {
                Some(format!("exception: {}", params["exceptionDetails"]))
            }
            Some("Log.entryAdded") if params["entry"]["level"] == "error" => Some(format!(
                "log: {} ({})",
                params["entry"]["text"], params["entry"]["url"]
            )),
            _ => None,
        };
        if let Some(p) = problem {
            problems.lock().unwrap().push(p);
        }
        let _ = events.send(msg);
    }
}

fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let bytes: Vec<u8> = s
        .bytes()
        .filter(|&c| c != b'=' && !c.is_ascii_whitespace())
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c) << (18 - 6 * i);
        }
        let n = chunk.len() * 6 / 8;
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + n]);
    }
    out
}

/// A raw HTTP/1.1 answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One request on its own connection (`Connection: close`), read to the end. An SSE answer
/// never ends, so only its head is read (`head_only`).
pub fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    request(addr, method, path, headers, body, false)
}

pub fn http_head_only(addr: &str, method: &str, path: &str, headers: &[(&str, &str)]) -> Answer {
    request(addr, method, path, headers, "", true)
}

fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    head_only: bool,
) -> Answer {
    let s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    exchange(s, addr, method, path, headers, body, head_only)
}

/// [`http`] over TLS, trusting only `ca_pem`, for a server named `localhost`.
pub fn https(
    addr: &str,
    ca_pem: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let conn =
        rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap()).unwrap();
    let sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    exchange(
        rustls::StreamOwned::new(conn, sock),
        addr,
        method,
        path,
        headers,
        body,
        false,
    )
}

#[allow(clippy::too_many_arguments)]
fn exchange(
    mut s: impl Read + Write,
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    head_only: bool,
) -> Answer {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut reader = BufReader::new(s);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status: u16 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let mut body = Vec::new();
    if !head_only {
        let chunked = headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
        if chunked {
            loop {
                line.clear();
                reader.read_line(&mut line).unwrap();
                let n = usize::from_str_radix(line.trim(), 16).unwrap_or(0);
                if n == 0 {
                    break;
                }
                let mut chunk = vec![0; n + 2];
                reader.read_exact(&mut chunk).unwrap();
                body.extend_from_slice(&chunk[..n]);
            }
        } else {
            // A TLS peer may close without close_notify once it has sent everything.
            match reader.read_to_end(&mut body) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
                Err(e) => panic!("reading the answer: {e}"),
            }
        }
    }
    Answer {
        status,
        headers,
        body,
    }
}

/// Whether a browser error says the page's document went away (a navigation) while a command
/// ran in it.
fn navigated(e: &Value) -> bool {
    let m = e["message"].as_str().unwrap_or("");
    m.contains("navigated or closed")
        || m.contains("Execution context was destroyed")
        || m.contains("Cannot find context")
}
