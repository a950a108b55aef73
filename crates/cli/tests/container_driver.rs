//! `lanes driver container` against real podman, spoken to over its stdio as a lane does:
//! the example's Harbor tasks built and run (oracle passes, nop fails), what the agent can
//! and cannot see, the limits in force, each failure kind, and no container left behind when
//! the driver is killed. Podman runs with its own storage under the target folder and the
//! settings this kind of machine needs (runc, ulimits within the hard limits).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use lanes_tests::podman::podman;
use serde_json::{Value, json};

fn repo() -> PathBuf {
    lanes_tests::podman::repo()
}

/// The private podman setup (config, storage) every command of these tests uses.
fn podman_env() -> &'static Vec<(String, String)> {
    lanes_tests::podman::env(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("podman"))
}

/// The containers of a lane.
fn containers_of(lane: &str) -> Vec<String> {
    podman_env();
    lanes_tests::podman::containers_with("lanes.lane", lane)
}

/// A driver process and its stdio, spoken to one call at a time.
struct Driver {
    child: Child,
    /// Taken (closed) when the driver is dropped: it then removes its lane's containers.
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next: u64,
    lane: String,
    _state: tempfile::TempDir,
}

impl Driver {
    fn start(lane: &str) -> Self {
        let state = tempfile::tempdir().unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_lanes"))
            .args(["driver", "container", "--runtime", "podman", "--state-dir"])
            .arg(state.path())
            .envs(podman_env().iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut d = Self {
            child,
            stdin: Some(stdin),
            stdout,
            next: 0,
            lane: lane.to_owned(),
            _state: state,
        };
        let id = d.call(
            "initialize",
            json!({"protocol": "lanes-driver/1", "lane": lane, "host": "test-host"}),
        );
        assert_eq!(id.unwrap()["name"], "lanes-container");
        d.call("teardown", json!({ "lane": lane })).unwrap();
        d
    }

    fn send(&mut self, method: &str, params: Value) -> u64 {
        self.next += 1;
        let line = json!({"jsonrpc": "2.0", "id": self.next, "method": method, "params": params});
        let stdin = self.stdin.as_mut().expect("the driver's stdin is open");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        self.next
    }

    fn read(&mut self) -> Result<Value, Value> {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        match v.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(v["result"].clone()),
        }
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.send(method, params);
        self.read()
    }
}

impl Drop for Driver {
    /// Closes the driver's input and waits for it to exit: it removes its lane's containers
    /// first, so no test leaves one behind.
    fn drop(&mut self) {
        self.stdin.take();
        let _ = self.child.wait();
    }
}

/// The params of one attempt of the example's task `task`, run by `agent`.
struct Attempt {
    env: Value,
    agent: Value,
}

fn attempt(task: &str, tag: &str, agent: Value, timeout_s: u32, artifacts: &Path) -> Attempt {
    attempt_in(
        &repo().join("examples/terminal/tasks"),
        task,
        tag,
        agent,
        timeout_s,
        artifacts,
    )
}

fn attempt_in(
    tasks: &Path,
    task: &str,
    tag: &str,
    agent: Value,
    timeout_s: u32,
    artifacts: &Path,
) -> Attempt {
    let dir = tasks.join(task);
    let settings = lanes_common::spec::harbor::load_task(task, &dir).unwrap();
    let payload = json!({ "harbor": settings });
    let attempt =
        json!({"campaign": "c", "trial_id": format!("{task}.r0.a"), "attempt": 1, "tag": tag});
    Attempt {
        env: json!({
            "attempt": attempt, "task": task, "arm": "a", "seed": 1, "payload": payload,
            "task_dir": dir.display().to_string(), "attempt_dir": artifacts.display().to_string(),
        }),
        agent: json!({
            "attempt": attempt, "task": task, "arm": "a", "arm_config": agent,
            "payload": payload, "seed": 1, "timeout_s": timeout_s, "max_turns": 0,
        }),
    }
}

/// boot, reset, run_agent: the agent's result.
fn run_to_agent(d: &mut Driver, a: &Attempt) -> Value {
    let booted = d.call("boot", a.env.clone()).unwrap();
    assert!(
        booted["pins"]["image_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{booted}"
    );
    assert_eq!(
        booted["pins"]["task_digest"],
        a.env["payload"]["harbor"]["digest"]
    );
    assert_eq!(d.call("reset", a.env.clone()).unwrap()["verified"], true);
    d.call("run_agent", a.agent.clone()).unwrap()
}

#[test]
fn oracle_passes_and_nop_fails_every_example_task() {
    let mut d = Driver::start("examples");
    let art = tempfile::tempdir().unwrap();
    let tasks =
        lanes_common::spec::harbor::load_dir(&repo().join("examples/terminal/tasks")).unwrap();
    assert!(tasks.len() >= 6);
    for (id, ..) in &tasks {
        for (agent, want) in [("oracle", 1.0), ("nop", 0.0)] {
            let a = attempt(
                id,
                &format!("c/{id}#{agent}"),
                json!({ "agent": agent }),
                60,
                art.path(),
            );
            let r = run_to_agent(&mut d, &a);
            assert_eq!(r["status"], "completed", "{id} {agent}: {r}");
            let e = d.call("evaluate", a.env.clone()).unwrap();
            assert_eq!(e["score"], want, "{id} {agent}: {e}");
            assert_eq!(e["passed"], want >= 1.0, "{id} {agent}: {e}");
            assert!(
                containers_of("examples").is_empty(),
                "an evaluated attempt's container is removed"
            );
        }
    }
    // The logs were copied out of the last container before it went.
    assert!(
        art.path()
            .join("container/verifier/test-stdout.txt")
            .is_file()
    );
}

#[test]
fn tests_and_solution_are_invisible_to_the_agent_and_limits_hold() {
    let mut d = Driver::start("isolation");
    let art = tempfile::tempdir().unwrap();
    // Exit 0 only when nothing of tests/ or solution/ is in the container, the only network
    // interface is loopback, the memory limit is the task's 256 MiB, and the instruction is
    // both in the file and in the variable.
    let script = "test ! -e /tests && test ! -e /solution \
        && test \"$(ls /sys/class/net)\" = lo \
        && limit=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes) \
        && test \"$limit\" = 268435456 \
        && grep -q hello.txt /lanes/instruction.md && echo \"$LANES_INSTRUCTION\" | grep -q hello.txt";
    let a = attempt(
        "hello-file",
        "c/iso#1",
        json!({"agent": "command", "command": script}),
        60,
        art.path(),
    );
    let r = run_to_agent(&mut d, &a);
    assert_eq!(r["status"], "completed", "{r}");
    // Past the limit, an allocation is killed: the agent's command fails.
    let hog = attempt(
        "hello-file",
        "c/iso#2",
        json!({"agent": "command", "command": "head -c 400m /dev/zero | tail > /dev/null"}),
        60,
        art.path(),
    );
    let r = run_to_agent(&mut d, &hog);
    assert_eq!(r["status"], "agent_error", "{r}");
    // Its container was never evaluated: it goes when the driver's input ends.
    assert_eq!(containers_of("isolation").len(), 1);
    drop(d);
    assert!(
        containers_of("isolation").is_empty(),
        "a driver that exits removes its lane's containers"
    );
}

#[test]
fn each_failure_kind_is_named() {
    let mut d = Driver::start("failures");
    let art = tempfile::tempdir().unwrap();
    let tasks = tempfile::tempdir().unwrap();
    let copy = |from: &str, to: &str| {
        let status = Command::new("cp")
            .arg("-r")
            .arg(repo().join("examples/terminal/tasks").join(from))
            .arg(tasks.path().join(to))
            .status()
            .unwrap();
        assert!(status.success());
    };

    // A build that fails is boot_failed, and the next attempt fails at once without a build.
    copy("hello-file", "broken-build");
    std::fs::write(
        tasks.path().join("broken-build/environment/Dockerfile"),
        "FROM localhost/lanes-busybox:1\nRUN exit 3\n",
    )
    .unwrap();
    let a = attempt_in(
        tasks.path(),
        "broken-build",
        "c/b#1",
        json!({"agent": "nop"}),
        60,
        art.path(),
    );
    let e = d.call("boot", a.env.clone()).unwrap_err();
    assert_eq!(e["data"]["failure_kind"], "boot_failed", "{e}");
    let again = d.call("boot", a.env.clone()).unwrap_err();
    assert!(
        again["message"]
            .as_str()
            .unwrap()
            .contains("an earlier build"),
        "{again}"
    );

    // A folder edited after it was loaded is refused, naming the file.
    copy("hello-file", "edited");
    let a = attempt_in(
        tasks.path(),
        "edited",
        "c/e#1",
        json!({"agent": "nop"}),
        60,
        art.path(),
    );
    std::fs::write(
        tasks.path().join("edited/instruction.md"),
        "Something else.\n",
    )
    .unwrap();
    let e = d.call("boot", a.env.clone()).unwrap_err();
    assert!(
        e["message"].as_str().unwrap().contains("instruction.md"),
        "{e}"
    );

    // An agent that exits non-zero is agent_error (and is evaluated).
    let a = attempt(
        "hello-file",
        "c/x#1",
        json!({"agent": "command", "command": "exit 4"}),
        60,
        art.path(),
    );
    assert_eq!(run_to_agent(&mut d, &a)["status"], "agent_error");
    assert_eq!(d.call("evaluate", a.env.clone()).unwrap()["score"], 0.0);

    // The agent's timeout is `timeout`, its processes (a background one too) are killed,
    // and what it left is evaluated.
    let a = attempt(
        "hello-file",
        "c/t#1",
        json!({"agent": "command", "command": "(sleep 300 &) ; echo hello, world! > /app/hello.txt; sleep 300"}),
        2,
        art.path(),
    );
    let r = run_to_agent(&mut d, &a);
    assert_eq!(r["status"], "timeout", "{r}");
    let name = containers_of("failures");
    assert_eq!(name.len(), 1);
    let procs = podman(&[
        "exec",
        &name[0],
        "sh",
        "-c",
        "ps -o args | grep -c '[s]leep 300' || true",
    ]);
    assert_eq!(
        procs, "0",
        "the agent's processes are killed, its background one too"
    );
    assert_eq!(d.call("evaluate", a.env.clone()).unwrap()["score"], 1.0);

    // A container that dies under the agent is guest_lost.
    let a = attempt(
        "hello-file",
        "c/g#1",
        json!({"agent": "command", "command": "sleep 60"}),
        120,
        art.path(),
    );
    d.call("boot", a.env.clone()).unwrap();
    d.send("run_agent", a.agent.clone());
    let victim = containers_of("failures");
    // Wait until the agent runs in it, then remove the container under it.
    loop {
        let ps = podman(&["exec", &victim[0], "sh", "-c", "ps -o args"]);
        if ps.contains("sleep 60") {
            break;
        }
    }
    podman(&["rm", "-f", "-t", "0", &victim[0]]);
    let r = d.read().unwrap();
    assert_eq!(r["status"], "infra_error", "{r}");
    assert_eq!(r["failure_kind"], "guest_lost", "{r}");

    // No reward file is evaluator_error, never a score.
    copy("hello-file", "no-reward");
    std::fs::write(
        tasks.path().join("no-reward/tests/test.sh"),
        "#!/bin/sh\necho no reward\n",
    )
    .unwrap();
    let a = attempt_in(
        tasks.path(),
        "no-reward",
        "c/n#1",
        json!({"agent": "nop"}),
        60,
        art.path(),
    );
    run_to_agent(&mut d, &a);
    let e = d.call("evaluate", a.env.clone()).unwrap_err();
    assert_eq!(e["data"]["failure_kind"], "evaluator_error", "{e}");

    // A verifier past its timeout is evaluator_error.
    copy("hello-file", "slow-verifier");
    std::fs::write(
        tasks.path().join("slow-verifier/tests/test.sh"),
        "#!/bin/sh\nsleep 60\n",
    )
    .unwrap();
    let toml = std::fs::read_to_string(tasks.path().join("slow-verifier/task.toml")).unwrap();
    std::fs::write(
        tasks.path().join("slow-verifier/task.toml"),
        toml.replace("timeout_sec = 30.0", "timeout_sec = 2.0"),
    )
    .unwrap();
    let a = attempt_in(
        tasks.path(),
        "slow-verifier",
        "c/s#1",
        json!({"agent": "nop"}),
        60,
        art.path(),
    );
    run_to_agent(&mut d, &a);
    let e = d.call("evaluate", a.env.clone()).unwrap_err();
    assert_eq!(e["data"]["failure_kind"], "evaluator_error", "{e}");
    assert!(e["message"].as_str().unwrap().contains("timeout"), "{e}");
}

#[test]
fn a_killed_driver_leaves_nothing_once_the_next_one_starts() {
    let mut d = Driver::start("killed");
    let art = tempfile::tempdir().unwrap();
    let a = attempt(
        "hello-file",
        "c/k#1",
        json!({"agent": "command", "command": "sleep 120"}),
        300,
        art.path(),
    );
    d.call("boot", a.env.clone()).unwrap();
    d.send("run_agent", a.agent.clone());
    assert_eq!(containers_of("killed").len(), 1);
    // kill -9: the driver cleans nothing up itself.
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    assert_eq!(
        containers_of("killed").len(),
        1,
        "the container outlived its driver"
    );
    // The lane's next driver tears down what the last one left.
    let _next = Driver::start(&d.lane);
    assert!(containers_of("killed").is_empty());
}

/// The example as the README runs it: `lanes run … --container-runtime podman`. The oracle
/// passes every task, nop none, the one-line shell agent one; every row pins the image and
/// the task folder it ran.
#[test]
fn lanes_run_of_the_terminal_example() {
    let data = tempfile::tempdir().unwrap();
    let campaign = repo().join("examples/terminal/campaign.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_lanes"))
        .arg("run")
        .arg(&campaign)
        .args(["--container-runtime", "podman", "--no-ui", "--lanes", "4"])
        .arg("--data-dir")
        .arg(data.path())
        .envs(podman_env().iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("done: 21/21 final (21 counted"), "{stdout}");
    let passed = |arm: &str| -> String {
        let line = stdout
            .lines()
            .skip_while(|l| !l.starts_with("PER ARM"))
            .find(|l| l.trim_start().starts_with(&format!("{arm} ")))
            .unwrap_or_else(|| panic!("no {arm} row: {stdout}"));
        // arm, denom, counted, passed.
        line.split_whitespace().nth(3).unwrap().to_owned()
    };
    assert_eq!(passed("oracle"), "7", "{stdout}");
    assert_eq!(passed("nop"), "0", "{stdout}");
    assert_eq!(passed("shell"), "1", "{stdout}");

    let rows = Command::new(env!("CARGO_BIN_EXE_lanes"))
        .args(["results", "terminal", "--format", "jsonl", "--data-dir"])
        .arg(data.path())
        .output()
        .unwrap();
    let rows = String::from_utf8_lossy(&rows.stdout);
    // One counted row per trial; an attempt retried on a loaded machine (an infra failure)
    // adds an uncounted row of its own trial, never a second counted one.
    let mut counted = std::collections::BTreeSet::new();
    let mut trials = std::collections::BTreeSet::new();
    let mut attempts = std::collections::BTreeSet::new();
    for line in rows.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let trial = r["trial_id"].as_str().unwrap().to_owned();
        let attempt = r["attempt"].as_u64().unwrap();
        assert!(
            attempts.insert((trial.clone(), attempt)),
            "an attempt twice: {rows}"
        );
        if r["counted"] == Value::Bool(true) {
            assert!(counted.insert(trial.clone()), "two counted rows: {rows}");
        }
        trials.insert(trial);
        let pins = &r["driver"]["pins"];
        assert!(
            pins["image_digest"]
                .as_str()
                .is_some_and(|d| d.starts_with("sha256:")),
            "{r}"
        );
        assert!(
            pins["task_digest"]
                .as_str()
                .is_some_and(|d| d.starts_with("sha256:")),
            "{r}"
        );
    }
    assert_eq!(counted.len(), 21, "{rows}");
    assert_eq!(trials, counted, "{rows}");
}

/// Without a runtime, `lanes run` refuses a container campaign at once, saying what to add.
#[test]
fn lanes_run_without_a_runtime_refuses_a_container_campaign() {
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_lanes"))
        .arg("run")
        .arg(repo().join("examples/terminal/campaign.toml"))
        .args(["--no-ui", "--data-dir"])
        .arg(data.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--container-runtime"), "{stderr}");
}

/// Copies the example's `hello-file` task into `tasks/` (with its solution when asked): a
/// campaign of one task.
fn copy_hello_file(tasks: &Path, with_solution: bool) {
    let (from, to) = (
        repo().join("examples/terminal/tasks/hello-file"),
        tasks.join("hello-file"),
    );
    let solution = with_solution.then_some("solution/solve.sh");
    let files = [
        "task.toml",
        "instruction.md",
        "environment/Dockerfile",
        "tests/test.sh",
    ];
    for f in files.into_iter().chain(solution) {
        std::fs::create_dir_all(to.join(f).parent().unwrap()).unwrap();
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

/// kill -9 of `lanes run` while its agent runs in a container, then the same command again
/// (a resume): no container of the killed run is left, the retried attempt runs, and the
/// finished run leaves none.
#[test]
fn lanes_run_killed_mid_attempt_then_run_again_leaves_no_container() {
    use lanes_tests::podman::{containers_of_campaign, wait_containers};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    copy_hello_file(&dir.path().join("tasks"), false);
    let id = "killed-run";
    let campaign = dir.path().join("campaign.toml");
    std::fs::write(
        &campaign,
        format!(
            "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 3\nlease_ttl_s = 10\n\
             [tasks]\nharbor = \"tasks\"\n[driver]\ncontainer = {{}}\n\
             [[arms]]\nid = \"sleepy\"\nconfig = {{ agent = \"command\", command = \"sleep 6\" }}\n"
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_lanes"))
            .arg("run")
            .arg(&campaign)
            .args(["--container-runtime", "podman", "--no-ui", "--lanes", "1"])
            .arg("--data-dir")
            .arg(&data)
            .envs(podman_env().iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut first = run();
    let started = wait_containers(id, Duration::from_secs(120), |c| !c.is_empty());
    let old = containers_of_campaign(id);
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(started, "no container started");

    let second = run().wait_with_output().unwrap();
    assert!(
        second.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&second.stdout),
        String::from_utf8_lossy(&second.stderr)
    );
    let now = containers_of_campaign(id);
    assert!(
        !old.iter().any(|o| now.contains(o)),
        "the killed run's container is still there: {now:?}"
    );
    assert!(
        wait_containers(id, Duration::from_secs(30), <[String]>::is_empty),
        "left behind: {:?}",
        containers_of_campaign(id)
    );
}

/// Every file under `dir`, read lossily, with its path.
fn files_under(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
                out.push((p, text));
            }
        }
    }
    out
}

/// A command agent gets the campaign's `[driver] env` inside its container (the worker's
/// value, through `--env NAME`, never on a command line), and a secret the agent writes into
/// `/logs` is masked in the attempt's folder, as in rows.
#[test]
fn a_command_agent_gets_the_campaigns_env_and_its_logs_are_scrubbed() {
    let dir = tempfile::tempdir().unwrap();
    copy_hello_file(&dir.path().join("tasks"), true);
    const KEY: &str = "sk-agent-key-5f1e2d3c";
    let id = "agent-env";
    let campaign = dir.path().join("campaign.toml");
    std::fs::write(
        &campaign,
        format!(
            "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 4\n\
             [tasks]\nharbor = \"tasks\"\n\
             [driver]\ncontainer = {{}}\nenv = {{ AGENT_API_KEY = \"$TEST_AGENT_API_KEY\" }}\n\
             [[arms]]\nid = \"keyed\"\n\
             config = {{ agent = \"command\", command = \"echo key=$AGENT_API_KEY > /logs/agent/leak.txt; test -n \\\"$AGENT_API_KEY\\\" && echo \\\"$GREETING, world!\\\" > hello.txt\" }}\n\
             [[arms]]\nid = \"oracle\"\nconfig = {{ agent = \"oracle\" }}\n"
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let out = Command::new(env!("CARGO_BIN_EXE_lanes"))
        .arg("run")
        .arg(&campaign)
        .args(["--container-runtime", "podman", "--no-ui", "--lanes", "2"])
        .arg("--data-dir")
        .arg(&data)
        .env("TEST_AGENT_API_KEY", KEY)
        .envs(podman_env().iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The key reached the command agent (its task passed only with it)...
    let leak = data
        .join("artifacts")
        .join(id)
        .join("hello-file.r0.keyed/a1");
    let files = files_under(&leak);
    let logged = files
        .iter()
        .find(|(p, _)| p.ends_with("leak.txt"))
        .unwrap_or_else(|| panic!("no leak.txt in {files:?}"));
    assert_eq!(logged.1, "key=***\n", "the agent's log, scrubbed");
    assert!(stdout.contains("done: 2/2 final (2 counted"), "{stdout}");
    let rows = Command::new(env!("CARGO_BIN_EXE_lanes"))
        .args(["results", id, "--format", "jsonl", "--data-dir"])
        .arg(&data)
        .output()
        .unwrap();
    let rows = String::from_utf8_lossy(&rows.stdout);
    for line in rows.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        assert_eq!(r["passed"], true, "{r}");
    }
    // ... and nowhere in the artifacts is it written out.
    for (p, text) in files_under(&data.join("artifacts")) {
        assert!(!text.contains(KEY), "{} holds the key", p.display());
    }
}
