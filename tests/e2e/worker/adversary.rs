//! The driver as an adversary, against real `lanes worker` processes: it echoes every secret
//! it is given everywhere it can, dumps the environment it was started with, and leaves a
//! grandchild behind when its worker is killed. None of it may reach a row, a log line, an
//! artifact or the next start of the worker.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lanes_common::proto as pb;
use lanes_common::row::Status;
use lanes_tests::campaign_watch::wait_ended;
use lanes_tests::coordinator::{CLIENT_TOKEN, LANE_TOKEN};
use lanes_tests::fleet::{Fleet, rows};
use lanes_tests::lane_client::{client, submit_request};
use lanes_tests::python_driver::driver_file;

use crate::worker::Worker;

const PAYLOAD_SECRET: &str = "PAYLOAD-SECRET-7f3a9";
/// A secret that is a number, under a secret key nested in the payload.
const NUMBER_SECRET: &str = "48151623";
const ENV_SECRET: &str = "ENV-SECRET-51c2e";

/// A driver that puts the payload's secrets and its `API_KEY` into everything it says: stderr,
/// `log` and `progress`, error answers and messages, final text, runtime outcome, check names
/// and details, and a pin. With `MODE=crash` in its env it writes them to stderr and dies at
/// `initialize`.
fn echo_driver(dir: &Path) -> PathBuf {
    driver_file(
        dir,
        "echo_driver.py",
        r#"    name, version = "echo-driver", "1.0"

    def key(self):
        import os
        return os.environ.get("API_KEY", "")

    def identity(self):
        import os
        if os.environ.get("MODE") == "crash":
            sys.stderr.write("dying with " + self.key() + "\n")
            sys.stderr.flush()
            os._exit(3)
        self.pins = {"leak": "pin " + self.key()}
        return super().identity()

    def leak(self, p, where):
        vm = p["payload"]["vm"]
        s = vm["password"] + " " + str(vm["pin"]) + " " + self.key()
        sys.stderr.write(where + ": " + s + "\n")
        sys.stderr.flush()
        self.log("info", where + " log " + s)
        self.progress(p["attempt"]["tag"], turns=1, message=where + " progress " + s)
        return s

    def boot(self, p):
        s = self.leak(p, "boot")
        if p["payload"].get("mode") == "boot_error":
            raise DriverError("boot failed: " + s, failure_kind="boot_failed")
        return {}

    def run_agent(self, p):
        s = self.leak(p, "agent")
        if p["payload"].get("mode") == "agent_error":
            return {"status": "infra_error", "failure_kind": "harness_error",
                    "error": "agent error: " + s, "final_text": "final " + s}
        return {"status": "completed", "turns": 1, "final_text": "final " + s,
                "runtime_outcome": "outcome " + s}

    def evaluate(self, p):
        s = self.leak(p, "evaluate")
        return {"score": 1.0, "passed": True,
                "checks": [{"name": "check " + s, "passed": True, "detail": "detail " + s}]}
"#,
    )
}

/// A one-arm campaign on `python3 <driver>` whose payload secrets sit under `vm`, with
/// `driver` lines added to its `[driver]` table (after `env`).
fn campaign(id: &str, driver: &Path, env: &str, driver_extra: &str, modes: &[&str]) -> String {
    let mut items = String::new();
    for (i, mode) in modes.iter().enumerate() {
        items.push_str(&format!(
            "  {{ id = \"T{i}\", payload = {{ mode = \"{mode}\", vm = {{ password = \"{PAYLOAD_SECRET}\", pin = {NUMBER_SECRET} }} }} }},\n"
        ));
    }
    format!(
        "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 9\npairing = \"none\"\nlease_ttl_s = 5\n[defaults]\ntimeout_s = 20\n[[arms]]\nid = \"a\"\n[driver]\ncommand = [\"python3\", {:?}]\nsecret_payload_keys = [\"password\", \"pin\"]\nenv = {{ {env} }}\n{driver_extra}\n[retry]\ninfra_backoff_s = 0\ninfra_retries = 0\npreflight_limit = 1\n[tasks]\nitems = [\n{items}]\n",
        driver.display().to_string()
    )
}

/// Every file under `root`, with its content.
fn files_under(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.is_file() {
                // Files only: the worker's control socket lives here too.
                let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
                out.push((p, text));
            }
        }
    }
    out
}

fn assert_clean(what: &str, text: &str) {
    for s in [PAYLOAD_SECRET, NUMBER_SECRET, ENV_SECRET] {
        assert!(!text.contains(s), "{what} holds {s}");
    }
}

/// Polls until `check` holds, at most `within`.
async fn until<F: std::future::Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> F,
) {
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secrets_a_driver_echoes_never_reach_rows_logs_or_artifacts() {
    let f = Fleet::start().await;
    let driver = echo_driver(f.dir.path());
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let env = format!("API_KEY = \"{ENV_SECRET}\"");
    // Scored, agent infra error, boot failure: the published rows.
    let echo = campaign(
        "echo",
        &driver,
        &env,
        "",
        &["ok", "agent_error", "boot_error"],
    );
    // An identity mismatch naming the echoed pin: a blocked row.
    let pinned = campaign(
        "pinned",
        &driver,
        &env,
        "[driver.expect]\nleak = \"pin something-else\"",
        &["ok"],
    );
    // A driver that dies at initialize with the secret on stderr: a blocked (preflight) row
    // whose error quotes the stderr tail.
    let crash = campaign(
        "crash",
        &driver,
        &format!("{env}, MODE = \"crash\""),
        "",
        &["ok"],
    );
    for text in [&echo, &pinned, &crash] {
        c.submit(submit_request(text)).await.unwrap();
    }
    let artifacts = f.dir.path().join("art");
    let log = f.dir.path().join("worker.log");
    let _w = Worker::start_args(
        &f.coord.url(),
        &artifacts,
        2,
        "h",
        &[],
        Some(&log),
        &["--allow-campaign-commands", "--allow-env", "API_KEY,MODE"],
    );

    let st = wait_ended(&f.coord.url(), "echo", Duration::from_secs(90)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    for id in ["pinned", "crash"] {
        until(
            &format!("a blocked row of {id}"),
            Duration::from_secs(60),
            || async {
                rows(&f.store, id)
                    .await
                    .iter()
                    .any(|r| r.status == Status::Blocked)
            },
        )
        .await;
    }

    let mut all_rows = Vec::new();
    for id in ["echo", "pinned", "crash"] {
        all_rows.extend(rows(&f.store, id).await);
    }
    let text = serde_json::to_string(&all_rows).unwrap();
    assert_clean("a row", &text);
    // The driver did echo, everywhere: what it said is in the rows, masked.
    let row = |task: &str| all_rows.iter().find(|r| r.task.as_str() == task).unwrap();
    let ok = all_rows
        .iter()
        .find(|r| r.status == Status::Completed)
        .expect("a scored row");
    assert_eq!(ok.result.final_text.as_deref(), Some("final *** *** ***"));
    assert_eq!(
        ok.result.runtime_outcome.as_deref(),
        Some("outcome *** *** ***")
    );
    assert_eq!(ok.result.checks[0].name, "check *** *** ***");
    assert_eq!(ok.result.checks[0].detail, "detail *** *** ***");
    assert_eq!(ok.driver.as_ref().unwrap().pins["leak"], "pin ***");
    assert!(
        row("T1")
            .record
            .error
            .as_deref()
            .unwrap()
            .contains("*** *** ***")
    );
    let blocked: Vec<_> = all_rows
        .iter()
        .filter(|r| r.status == Status::Blocked)
        .collect();
    assert!(
        blocked.iter().any(|r| r
            .record
            .error
            .as_deref()
            .unwrap()
            .contains("driver has pin ***")),
        "{blocked:#?}"
    );
    assert!(
        blocked.iter().any(|r| r
            .record
            .error
            .as_deref()
            .unwrap()
            .contains("dying with ***")),
        "{blocked:#?}"
    );

    let files = files_under(&artifacts);
    let stderr_files: Vec<_> = files
        .iter()
        .filter(|(p, _)| p.ends_with("driver.stderr"))
        .collect();
    assert!(
        stderr_files
            .iter()
            .any(|(_, t)| t.contains("agent: *** *** ***")),
        "the driver's stderr was saved, masked"
    );
    for (p, text) in &files {
        assert_clean(&p.display().to_string(), text);
    }

    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(
        logs.contains("agent progress *** *** ***"),
        "the debug log has the driver's notifications, masked"
    );
    assert_clean("the worker log", &logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_driver_sees_no_worker_variable_and_no_token() {
    let f = Fleet::start().await;
    let dump = f.dir.path().join("env.json");
    let driver = driver_file(
        f.dir.path(),
        "env_driver.py",
        &format!(
            r#"    def boot(self, p):
        import json, os
        with open({dump:?}, "w") as out:
            json.dump(dict(os.environ), out)
        return {{}}

    def run_agent(self, p):
        return {{"status": "completed", "turns": 1}}

    def evaluate(self, p):
        return {{"score": 1.0, "passed": True, "checks": []}}
"#,
            dump = dump.display().to_string()
        ),
    );
    let text = format!(
        "id = \"env\"\nphase1_runs = 1\nschedule_seed = 9\npairing = \"none\"\n[defaults]\ntimeout_s = 20\n[[arms]]\nid = \"a\"\n[driver]\ncommand = [\"python3\", {:?}]\nenv = {{ API_KEY = \"k-visible\" }}\n[tasks]\nitems = [ {{ id = \"E\" }} ]\n",
        driver.display().to_string()
    );
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&text)).await.unwrap();
    let planted = "planted-value-5a7e";
    let client_token = "client-token-in-the-worker-env";
    let _w = Worker::start_args(
        &f.coord.url(),
        &f.dir.path().join("art"),
        1,
        "h",
        &[
            ("PLANTED_WORKER_VARIABLE", planted),
            ("LANES_CLIENT_TOKEN", client_token),
        ],
        None,
        &["--allow-campaign-commands", "--allow-env", "API_KEY"],
    );
    let st = wait_ended(&f.coord.url(), "env", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let env: BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    assert_eq!(env.get("API_KEY").map(String::as_str), Some("k-visible"));
    for (name, value) in &env {
        assert!(
            !name.starts_with("LANES_") && !name.starts_with("CARGO") && name != "RUST_LOG",
            "the driver sees the worker's {name}"
        );
        for s in [planted, client_token, LANE_TOKEN] {
            assert!(!value.contains(s), "{name} carries a worker value");
        }
    }
}

/// Gone, or a zombie nobody reaped yet.
fn is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn drivers_left_by_a_killed_worker_die_when_it_starts_again() {
    let f = Fleet::start().await;
    let pids = f.dir.path().join("pids.txt");
    let driver = driver_file(
        f.dir.path(),
        "orphan_driver.py",
        &format!(
            r#"    def boot(self, p):
        import os, subprocess
        child = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open({pids:?}, "a") as out:
            out.write(f"{{os.getpid()}} {{child.pid}}\n")
        return {{}}

    def run_agent(self, p):
        self.cancel_event(p["attempt"]["tag"]).wait(120)
        return {{"status": "cancelled", "turns": 1}}
"#,
            pids = pids.display().to_string()
        ),
    );
    let text = format!(
        "id = \"orphans\"\nphase1_runs = 1\nschedule_seed = 9\npairing = \"none\"\nlease_ttl_s = 5\n[defaults]\ntimeout_s = 120\n[[arms]]\nid = \"a\"\n[driver]\ncommand = [\"python3\", {:?}]\n[tasks]\nitems = [ {{ id = \"O\" }} ]\n",
        driver.display().to_string()
    );
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&text)).await.unwrap();
    let artifacts = f.dir.path().join("art");
    let read_pids = || -> Vec<u32> {
        std::fs::read_to_string(&pids)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    };

    let mut w = Worker::start(&f.coord.url(), &artifacts, 1, "h");
    until(
        "the driver's grandchild",
        Duration::from_secs(30),
        || async { read_pids().len() >= 2 },
    )
    .await;
    let first = read_pids();
    let (driver_pid, grandchild) = (first[0], first[1]);
    w.kill9();
    // The worker is gone; what its driver started is not.
    assert!(!is_gone(grandchild), "the grandchild outlived the worker");

    let mut w = Worker::start(&f.coord.url(), &artifacts, 1, "h");
    let gone = async move {
        until(
            "the orphans to be killed",
            Duration::from_secs(20),
            move || async move { is_gone(driver_pid) && is_gone(grandchild) },
        )
        .await
    };
    // Whatever the outcome, leave no process of this test behind.
    let result = tokio::spawn(gone).await;
    w.kill9();
    for pid in read_pids() {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status();
    }
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// A driver that reads every lease the worker journals (under `payload.outbox`), waits until
/// it sees the other lane's lease too, and returns what it read in its final text; task T1's
/// driver answers only after T0's lease has left the journal (the worker once masked only the
/// leases it still held when the driver answered).
fn snoop_driver(dir: &Path) -> PathBuf {
    driver_file(
        dir,
        "snoop_driver.py",
        r#"    name, version = "snoop-driver", "1.0"

    def read_leases(self, outbox):
        import os
        leases = os.path.join(outbox, "leases")
        try:
            texts = [open(os.path.join(leases, n)).read() for n in sorted(os.listdir(leases))]
            texts = [t for t in texts if len(t) > 1]  # an empty slot (a byte at most) holds no lease
            return len(texts), "read " + " | ".join(texts)
        except OSError as e:
            return -1, "denied " + type(e).__name__

    def run_agent(self, p):
        outbox = p["payload"]["outbox"]
        deadline = time.time() + 5
        while True:
            n, text = self.read_leases(outbox)
            if n < 0 or n >= 2 or time.time() > deadline:
                break
            time.sleep(0.05)
        # T1 answers only once T0's lease has left the worker: what it read must stay masked.
        while p["task"] == "T1" and n >= 2 and time.time() < deadline + 10:
            if self.read_leases(outbox)[0] < 2:
                break
            time.sleep(0.05)
        return {"status": "completed", "turns": 1, "final_text": text}

    def evaluate(self, p):
        return {"score": 1.0, "passed": True}
"#,
    )
}

/// The driver is an adversary that reads the worker's files. As another account
/// (`user = "nobody"`) it cannot read the lease journal at all: the outbox is 0700 and its
/// files 0600 (they were 0755 and 0644, and a driver returned every lane's lease secret in
/// its final text). As the worker's own account it can, and every lease secret the worker
/// holds is masked in what it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_driver_cannot_read_or_return_lease_secrets() {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::Uid::effective().is_root()
        || !matches!(nix::unistd::User::from_name("nobody"), Ok(Some(_)))
    {
        eprintln!("skipped: needs root and a `nobody` account to run a driver as another user");
        return;
    }
    let f = Fleet::start().await;
    let open = |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755));
    // The scratch directory and the artifacts root are world-traversable, as /srv/lanes is.
    open(f.dir.path()).unwrap();
    let art = f.dir.path().join("art");
    std::fs::create_dir(&art).unwrap();
    open(&art).unwrap();
    let driver = snoop_driver(f.dir.path());
    open(&driver).unwrap();
    let drivers = f.dir.path().join("drivers.toml");
    let command = format!(
        "command = [\"python3\", {:?}]",
        driver.display().to_string()
    );
    let cwd = f.dir.path().display().to_string();
    std::fs::write(
        &drivers,
        format!("[other]\n{command}\ncwd = {cwd:?}\nuser = \"nobody\"\n[own]\n{command}\n"),
    )
    .unwrap();
    let campaign_of = |id: &str, name: &str| {
        let outbox = art.join(".outbox").display().to_string();
        format!(
            "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 9\npairing = \"none\"\nlease_ttl_s = 5\n[defaults]\ntimeout_s = 20\n[[arms]]\nid = \"a\"\n[driver]\nname = \"{name}\"\n[tasks]\nitems = [\n  {{ id = \"T0\", payload = {{ outbox = {outbox:?} }} }},\n  {{ id = \"T1\", payload = {{ outbox = {outbox:?} }} }},\n]\n"
        )
    };
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let drivers_arg = drivers.display().to_string();
    let _w = Worker::start_args(
        &f.coord.url(),
        &art,
        2,
        "h",
        &[],
        None,
        &["--drivers", &drivers_arg],
    );
    for (id, name) in [("as-other", "other"), ("as-own", "own")] {
        c.submit(submit_request(&campaign_of(id, name)))
            .await
            .unwrap();
        let st = wait_ended(&f.coord.url(), id, Duration::from_secs(60)).await;
        assert_eq!(st.state, pb::CampaignState::Done as i32, "{id}: {st:?}");
    }
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&art.join(".outbox")), 0o700);
    assert_eq!(mode(&art.join(".outbox/leases")), 0o700);
    for r in rows(&f.store, "as-other").await {
        let text = r.result.final_text.clone().unwrap_or_default();
        assert_eq!(text, "denied PermissionError", "{r:#?}");
    }
    // Every lease read is masked; the attempt that ran first waited to read the other lane's
    // too (the second may run after the first's lease left the journal).
    let mut most = 0;
    for r in rows(&f.store, "as-own").await {
        let text = r.result.final_text.clone().unwrap_or_default();
        assert!(text.starts_with("read "), "{text}");
        let read = text.matches("\"lease\":").count();
        assert!(read >= 1, "{text}");
        assert_eq!(text.matches("\"lease\":\"***\"").count(), read, "{text}");
        most = most.max(read);
    }
    assert_eq!(most, 2, "an attempt read both lanes' leases");
    // The attempt records are private too.
    let record = art.join("as-own/T0.r0.a/a1");
    assert_eq!(mode(&record), 0o700);
    assert_eq!(mode(&record.join("attempt.json")), 0o600);
    assert_eq!(mode(&record.join("outcome.json")), 0o600);
}
