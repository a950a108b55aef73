//! Tests of the driver process against real child drivers (small python3 scripts).

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use super::state::lock;
use super::{DriverCommand, DriverError, DriverProcess, Notification, STDERR_TAIL_BYTES};
use crate::driver::protocol::{
    AgentResult, AgentStatus, CancelParams, EnvResult, HealthResult, LogParams, MAX_LINE_BYTES,
    ProgressParams, method,
};
use crate::secrets::Secrets;

pub(super) const CALL: Duration = Duration::from_secs(5);

/// The helpers every test driver script starts with.
pub(super) const PRELUDE: &str = r#"
import json, os, sys, time
def send(o):
    o["jsonrpc"] = "2.0"
    sys.stdout.write(json.dumps(o) + "\n")
    sys.stdout.flush()
def raw(s):
    sys.stdout.write(s)
    sys.stdout.flush()
def err(s):
    sys.stderr.write(s)
    sys.stderr.flush()
def ok(msg, result):
    send({"id": msg["id"], "result": result})
def note(method, params):
    send({"method": method, "params": params})
def requests():
    while True:
        line = sys.stdin.readline()
        if not line:
            return
        yield json.loads(line)
"#;

pub(super) struct Driver {
    pub(super) process: DriverProcess,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Driver {
    type Target = DriverProcess;
    fn deref(&self) -> &DriverProcess {
        &self.process
    }
}

/// A python3 driver running `body` after [`PRELUDE`].
pub(super) async fn driver(body: &str) -> Driver {
    driver_with_env(body, Vec::new()).await
}

pub(super) async fn driver_with_env(body: &str, env: Vec<(String, String)>) -> Driver {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("driver.py");
    std::fs::write(&script, format!("{PRELUDE}\n{body}\n")).unwrap();
    let spec = DriverCommand {
        program: "python3".into(),
        args: vec!["-u".into(), script.display().to_string()],
        cwd: Some(dir.path().to_path_buf()),
        env,
        user: None,
        record_dir: None,
    };
    let process = DriverProcess::spawn(&spec).await.unwrap();
    Driver { process, _dir: dir }
}

/// An echo driver: answers every request with its params, `fail` with an error, and exits
/// on `shutdown`.
pub(super) const ECHO: &str = r#"
for msg in requests():
    if "id" not in msg:
        note("progress", {"tag": "got " + msg["method"], "message": json.dumps(msg.get("params"))})
        continue
    if msg["method"] == "fail":
        send({"id": msg["id"], "error": {"code": -32000, "message": "provider said no",
              "data": {"failure_kind": "rate_limit", "reset_epoch": 5}}})
    elif msg["method"] == "shutdown":
        ok(msg, None)
        sys.exit(0)
    elif msg["method"] == "say":
        err(msg["params"]["text"])
        ok(msg, None)
    else:
        ok(msg, msg["params"])
"#;

/// Polls `check` every 10 ms until it holds, at most 5 s (generous for loaded machines; it normally takes milliseconds).
pub(super) async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let until = Instant::now() + Duration::from_secs(5);
    while !check().await {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(super) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test]
async fn a_normal_call() {
    let d = driver(ECHO).await;
    assert!(d.is_alive());
    assert!(d.id().is_some());
    let got: EnvResult = d
        .call(
            "reset",
            &json!({"verified": true, "health_url": "http://g/h"}),
            CALL,
        )
        .await
        .unwrap();
    assert_eq!(
        got,
        EnvResult {
            verified: true,
            health_url: Some("http://g/h".into()),
            ..Default::default()
        }
    );
    let got: HealthResult = d
        .call("health", &HealthResult { ok: true }, CALL)
        .await
        .unwrap();
    assert!(got.ok);
    assert!(d.is_alive());
}

#[tokio::test]
async fn out_of_order_responses_reach_their_calls() {
    let d = driver(
        r#"
gen = requests()
first, second = next(gen), next(gen)
ok(second, "second:" + second["params"]["name"])
ok(first, "first:" + first["params"]["name"])
for msg in gen:
    ok(msg, None)
"#,
    )
    .await;
    let (pa, pb) = (json!({"name": "a"}), json!({"name": "b"}));
    let (a, b) = tokio::join!(
        d.call::<_, String>("x", &pa, CALL),
        d.call::<_, String>("x", &pb, CALL),
    );
    let mut got = [a.unwrap(), b.unwrap()];
    got.sort();
    // Whichever went out first was answered last, and each got its own answer.
    assert!(
        got == ["first:a", "second:b"] || got == ["first:b", "second:a"],
        "{got:?}"
    );
    assert!(d.is_alive());
}

#[tokio::test]
async fn a_json_rpc_error_leaves_the_driver_fine() {
    let d = driver(ECHO).await;
    let err = d
        .call::<_, Value>("fail", &json!({}), CALL)
        .await
        .unwrap_err();
    let DriverError::Rpc {
        method,
        code,
        message,
        failure_kind,
    } = &err
    else {
        panic!("expected Rpc, got {err:?}");
    };
    assert_eq!(
        (method.as_str(), *code, message.as_str()),
        ("fail", -32000, "provider said no")
    );
    assert_eq!(failure_kind.as_deref(), Some("rate_limit"));
    assert!(!err.is_crash());
    assert_eq!(
        err.failure_kind(),
        Some(lanes_common::row::FailureKind::RateLimit)
    );
    assert!(d.is_alive());
    assert_eq!(d.call::<_, u32>("echo", &7, CALL).await.unwrap(), 7);
}

#[tokio::test]
async fn a_malformed_line_is_a_protocol_error_and_later_calls_fail() {
    let d = driver(
        r#"
for msg in requests():
    raw("this is not json\n")
"#,
    )
    .await;
    let err = d
        .call::<_, Value>("boot", &json!({}), CALL)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DriverError::Protocol(m) if m.contains("not json")),
        "{err}"
    );
    assert!(err.to_string().contains("\"this is not json\""), "{err}");
    assert!(err.is_crash());
    assert_eq!(
        err.failure_kind(),
        Some(lanes_common::row::FailureKind::DriverCrash)
    );
    assert!(!d.is_alive());
    let later = d
        .call::<_, Value>("boot", &json!({}), CALL)
        .await
        .unwrap_err();
    assert!(matches!(later, DriverError::Protocol(_)), "{later}");
    eventually("the child to be reaped", || async { d.id().is_none() }).await;
}

#[tokio::test]
async fn a_malformed_line_fails_every_pending_call() {
    let d = driver(
        r#"
gen = requests()
next(gen); next(gen)
raw('{"jsonrpc": "1.0", "id": 1, "result": 1}\n')
time.sleep(30)
"#,
    )
    .await;
    let params = json!({});
    let (a, b) = tokio::join!(
        d.call::<_, Value>("a", &params, CALL),
        d.call::<_, Value>("b", &params, CALL),
    );
    for err in [a.unwrap_err(), b.unwrap_err()] {
        assert!(
            matches!(&err, DriverError::Protocol(m) if m.contains("2.0")),
            "{err}"
        );
    }
    d.wait().await;
    assert_eq!(d.id(), None);
}

#[tokio::test]
async fn an_oversized_line_is_a_protocol_error() {
    let d = driver(&format!(
        r#"
for msg in requests():
    raw('{{"jsonrpc": "2.0", "id": %d, "result": "' % msg["id"] + "x" * {} + '"}}\n')
"#,
        MAX_LINE_BYTES + 10
    ))
    .await;
    let err = d
        .call::<_, Value>("boot", &json!({}), CALL)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DriverError::Protocol(m) if m.contains("too long")),
        "{err}"
    );
    assert!(!d.is_alive());
    d.wait().await;
}

#[tokio::test]
async fn an_unknown_id_is_a_protocol_error() {
    let d = driver(
        r#"
for msg in requests():
    send({"id": msg["id"] + 100, "result": None})
"#,
    )
    .await;
    let err = d
        .call::<_, Value>("boot", &json!({}), CALL)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DriverError::Protocol(m) if m.contains("unknown id")),
        "{err}"
    );
    assert!(!d.is_alive());
}

#[tokio::test]
async fn a_request_from_the_driver_is_a_protocol_error() {
    let d = driver(
        r#"
for msg in requests():
    send({"id": 1, "method": "please"})
"#,
    )
    .await;
    let err = d
        .call::<_, Value>("boot", &json!({}), CALL)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DriverError::Protocol(m) if m.contains("`please`")),
        "{err}"
    );
    assert!(!d.is_alive());
}

#[tokio::test]
async fn a_driver_that_exits_fails_with_its_stderr_tail() {
    let d = driver(
        r#"
for msg in requests():
    err("x" * 10000 + "\nTraceback: boom\n")
    sys.exit(3)
"#,
    )
    .await;
    let err = d
        .call::<_, Value>("boot", &json!({}), CALL)
        .await
        .unwrap_err();
    let DriverError::Exited {
        status,
        stderr_tail,
    } = &err
    else {
        panic!("expected Exited, got {err:?}");
    };
    assert!(status.contains('3'), "{status}");
    assert!(stderr_tail.ends_with("Traceback: boom"), "{stderr_tail}");
    assert!(stderr_tail.len() <= STDERR_TAIL_BYTES);
    assert!(err.is_crash());
    assert!(!d.is_alive());
    d.wait().await;
    assert_eq!(d.id(), None);
    let later = d
        .call::<_, Value>("boot", &json!({}), CALL)
        .await
        .unwrap_err();
    assert!(matches!(later, DriverError::Exited { .. }), "{later}");
}

#[tokio::test]
async fn a_hang_past_the_deadline_kills_the_driver() {
    let d = driver(
        r#"
for msg in requests():
    time.sleep(60)
"#,
    )
    .await;
    let start = Instant::now();
    let deadline = Duration::from_millis(300);
    let err = d
        .call::<_, Value>("run_agent", &json!({}), deadline)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DriverError::Deadline { method, after } if method == "run_agent" && *after == deadline),
        "{err:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(4));
    assert!(err.is_crash());
    assert!(!d.is_alive());
    assert_eq!(d.id(), None, "the child is reaped when the call returns");
    let later = d
        .call::<_, Value>("health", &json!({}), CALL)
        .await
        .unwrap_err();
    assert!(
        matches!(&later, DriverError::Exited { status, .. } if status.contains("deadline")),
        "{later}"
    );
}

#[tokio::test]
async fn a_driver_that_closes_stdout_but_lingers_is_killed() {
    let d = driver(
        r#"
for msg in requests():
    err("closing stdout\n")
    os.close(1)
    time.sleep(60)
"#,
    )
    .await;
    let start = Instant::now();
    let err = d
        .call::<_, Value>("boot", &json!({}), CALL)
        .await
        .unwrap_err();
    let DriverError::Exited {
        status,
        stderr_tail,
    } = &err
    else {
        panic!("expected Exited, got {err:?}");
    };
    assert!(
        status.starts_with("closed its stdout and was killed"),
        "{status}"
    );
    assert_eq!(stderr_tail, "closing stdout");
    assert!(start.elapsed() < Duration::from_secs(4));
    assert!(!d.is_alive());
    assert_eq!(d.id(), None);
}

#[tokio::test]
async fn progress_and_log_notifications_are_delivered() {
    let d = driver(
        r#"
for msg in requests():
    note("progress", {"tag": "t1", "turns": 1})
    note("log", {"level": "info", "message": "thinking"})
    note("progress", {"tag": "t1", "turns": 2, "message": "clicked"})
    ok(msg, {"status": "completed"})
"#,
    )
    .await;
    let mut notes = d.take_notifications().unwrap();
    assert!(d.take_notifications().is_none(), "only once");
    let got: AgentResult = d.call("run_agent", &json!({}), CALL).await.unwrap();
    assert_eq!(got.status, AgentStatus::Completed);
    // The notifications came before the answer, so they are already queued.
    assert_eq!(
        notes.try_recv().unwrap(),
        Notification::Progress(ProgressParams {
            tag: "t1".into(),
            turns: Some(1),
            message: None
        })
    );
    assert_eq!(
        notes.try_recv().unwrap(),
        Notification::Log(LogParams {
            level: "info".into(),
            message: "thinking".into()
        })
    );
    assert_eq!(
        notes.try_recv().unwrap(),
        Notification::Progress(ProgressParams {
            tag: "t1".into(),
            turns: Some(2),
            message: Some("clicked".into())
        })
    );
    assert!(notes.try_recv().is_err());
}

#[tokio::test]
async fn unknown_and_malformed_notifications_are_ignored() {
    let d = driver(
        r#"
for msg in requests():
    note("telemetry", {"cpu": 3})
    note("log", {"level": "info"})
    send({"method": "heartbeat"})
    note("progress", {"tag": "t"})
    ok(msg, 1)
"#,
    )
    .await;
    let mut notes = d.take_notifications().unwrap();
    assert_eq!(d.call::<_, u32>("x", &json!({}), CALL).await.unwrap(), 1);
    assert!(d.is_alive());
    assert_eq!(
        notes.try_recv().unwrap(),
        Notification::Progress(ProgressParams {
            tag: "t".into(),
            turns: None,
            message: None
        })
    );
    assert!(notes.try_recv().is_err());
}

#[tokio::test]
async fn notify_reaches_the_driver() {
    let d = driver(ECHO).await;
    let mut notes = d.take_notifications().unwrap();
    d.notify(method::CANCEL, &CancelParams { tag: "t-9".into() });
    let got = tokio::time::timeout(CALL, notes.recv())
        .await
        .unwrap()
        .unwrap();
    let Notification::Progress(p) = got else {
        panic!("expected progress, got {got:?}")
    };
    assert_eq!(p.tag, "got cancel");
    assert_eq!(p.message.as_deref(), Some(r#"{"tag": "t-9"}"#));
}

#[tokio::test]
async fn stderr_goes_to_the_file_set_last() {
    let d = driver(ECHO).await;
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("a1").join("driver.stderr");
    let second = dir.path().join("a2").join("driver.stderr");
    let say = |text: &'static str| {
        let d = &d;
        async move {
            d.call::<_, Value>("say", &json!({ "text": text }), CALL)
                .await
                .unwrap();
            d.flush_stderr().await;
        }
    };

    say("before any file\n").await;
    assert_eq!(d.stderr_tail(), "before any file");
    d.set_stderr_file(Some(first.clone()), &Secrets::default());
    say("one\n").await;
    d.set_stderr_file(Some(second.clone()), &Secrets::default());
    say("two\n").await;
    d.set_stderr_file(None, &Secrets::default());
    say("three\n").await;

    assert_eq!(read(&first), "one\n");
    assert_eq!(read(&second), "two\n");
    assert_eq!(d.stderr_tail(), "before any file\none\ntwo\nthree");
}

/// The answer on stdout can overtake the stderr the driver wrote before it (the pipes are
/// read by different tasks): once `flush_stderr` returns, all of it is in the attempt's file,
/// and none of it spills into the next attempt's.
#[tokio::test]
async fn stderr_written_before_an_answer_is_in_its_file_after_a_flush() {
    let d = driver(
        r#"
for msg in requests():
    n = msg["params"]["round"]
    for i in range(20000):
        sys.stderr.write("round %d line %05d\n" % (n, i))
    sys.stderr.flush()
    ok(msg, None)
"#,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    for round in 0..3 {
        let file = dir.path().join(format!("a{round}")).join("driver.stderr");
        d.set_stderr_file(Some(file.clone()), &Secrets::default());
        d.call::<_, Value>("spew", &json!({ "round": round }), CALL)
            .await
            .unwrap();
        d.flush_stderr().await;
        let want: String = (0..20000)
            .map(|i| format!("round {round} line {i:05}\n"))
            .collect();
        let got = read(&file);
        assert!(
            got == want,
            "round {round}: {} of {} bytes",
            got.len(),
            want.len()
        );
    }
}

#[tokio::test]
async fn a_result_that_does_not_deserialize_is_bad_result() {
    let d = driver(ECHO).await;
    let err = d
        .call::<_, HealthResult>("health", &json!("nope"), CALL)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DriverError::BadResult { method, .. } if method == "health"),
        "{err}"
    );
    assert!(err.is_crash());
}

#[tokio::test]
async fn an_absurd_cost_is_a_bad_result_naming_the_figure() {
    let d = driver(
        r#"
for msg in requests():
    ok(msg, {"status": "completed", "cost_usd": 1e308, "turns": 1})
"#,
    )
    .await;
    let err = d
        .call::<_, AgentResult>("run_agent", &json!({}), CALL)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, DriverError::BadResult { method, reason }
            if method == "run_agent" && reason.contains("cost_usd")),
        "{err}"
    );
    // The attempt's row says the driver broke the protocol, not that it spent 1e308 USD.
    assert!(err.is_crash());
}

#[tokio::test]
async fn shutdown_lets_the_driver_exit() {
    let d = driver(ECHO).await;
    let start = Instant::now();
    d.process.shutdown(Duration::from_secs(20)).await;
    assert!(start.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn shutdown_kills_a_driver_that_ignores_it() {
    let d = driver(
        r#"
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for msg in requests():
    pass
time.sleep(60)
"#,
    )
    .await;
    let start = Instant::now();
    d.process.shutdown(Duration::from_millis(300)).await;
    assert!(start.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn kill_fails_pending_and_later_calls() {
    let d = Arc::new(
        driver(
            r#"
for msg in requests():
    time.sleep(60)
"#,
        )
        .await,
    );
    let pending = tokio::spawn({
        let d = d.clone();
        async move { d.call::<_, Value>("run_agent", &json!({}), CALL).await }
    });
    eventually("the call to be pending", || async {
        !lock(&d.shared.state).pending.is_empty()
    })
    .await;
    d.kill().await;
    assert!(!d.is_alive());
    assert_eq!(d.id(), None);
    let err = pending.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, DriverError::Exited { status, .. } if status == "killed by the lane"),
        "{err}"
    );
    let later = d
        .call::<_, Value>("health", &json!({}), CALL)
        .await
        .unwrap_err();
    assert!(matches!(later, DriverError::Exited { .. }), "{later}");
    d.notify(method::CANCEL, &CancelParams { tag: "t".into() }); // dropped, no panic
}

#[tokio::test]
async fn env_is_passed_and_debug_hides_its_values() {
    let d = driver_with_env(
        r#"
for msg in requests():
    ok(msg, os.environ.get("LANES_TEST_SECRET"))
"#,
        vec![("LANES_TEST_SECRET".into(), "hunter2".into())],
    )
    .await;
    assert_eq!(
        d.call::<_, String>("x", &json!({}), CALL).await.unwrap(),
        "hunter2"
    );

    let spec = DriverCommand {
        program: "drv".into(),
        args: vec!["--fast".into()],
        cwd: None,
        env: vec![("API_KEY".into(), "sk-very-secret".into())],
        user: None,
        record_dir: None,
    };
    let debug = format!("{spec:?}");
    assert!(
        debug.contains("API_KEY") && debug.contains("--fast"),
        "{debug}"
    );
    assert!(!debug.contains("sk-very-secret"), "{debug}");
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error() {
    let spec = DriverCommand {
        program: "./no-such-driver".into(),
        ..DriverCommand::default()
    };
    let err = DriverProcess::spawn(&spec).await.unwrap_err();
    assert!(
        matches!(&err, DriverError::Spawn { program, .. } if program == "./no-such-driver"),
        "{err}"
    );
    assert!(!err.is_crash());
    assert_eq!(err.failure_kind(), None);
    let err = DriverProcess::spawn(&DriverCommand::default())
        .await
        .unwrap_err();
    assert!(matches!(err, DriverError::Spawn { .. }), "{err}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_relative_program_resolves_against_cwd() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("bin").join("drv");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    std::fs::write(
        &script,
        format!("#!/usr/bin/env python3\n{PRELUDE}\n{ECHO}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let spec = DriverCommand {
        program: "./bin/drv".into(),
        cwd: Some(dir.path().to_path_buf()),
        ..DriverCommand::default()
    };
    let d = DriverProcess::spawn(&spec).await.unwrap();
    assert_eq!(d.call::<_, String>("x", &"hi", CALL).await.unwrap(), "hi");
    d.shutdown(Duration::from_secs(2)).await;
}
