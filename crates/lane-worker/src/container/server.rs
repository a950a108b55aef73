//! The container driver's protocol loop: one request a line on stdin, answers on stdout.
//! `run_agent` runs in a task of its own so a `cancel` reaches it; every other call is
//! answered in order. Each attempt's container is remembered by its tag, and removed when the
//! attempt is evaluated, when the lane boots its next attempt, and when the driver ends.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{Mutex, watch};

use lanes_common::row::{DriverIdentity, FailureKind};
use lanes_common::spec::harbor::{self, HarborTask};

use super::agent::{AgentKind, INSTRUCTION_VAR};
use super::image::Images;
use super::runtime::{ExecSpec, LABEL_LANE, LABEL_TAG, Output, RunSpec, Runtime, RuntimeError};
use super::verifier;
use crate::driver::codec::{self, RpcError};
use crate::driver::protocol::{
    AgentParams, AgentResult, AgentStatus, CancelParams, EnvParams, EnvResult, InitializeParams,
    PROTOCOL, TeardownParams, code, method,
};

/// The name the container driver reports in `initialize`.
pub const DRIVER_NAME: &str = "lanes-container";
/// Processes a container may hold at once.
const PIDS_LIMIT: u32 = 1024;
/// The label naming the host (from `initialize`) on every container.
const LABEL_HOST: &str = "lanes.host";
/// Where an attempt's container logs are copied, inside its artifact folder.
const LOGS_DIR: &str = "container";

/// How the driver was started (`lanes driver container …`).
#[derive(Debug, Clone)]
pub struct Options {
    /// The runtime's CLI: `podman` or `docker`.
    pub runtime: String,
    /// Builds at once on this host, across every lane's driver.
    pub max_builds: usize,
    /// Where image builds are coordinated between the lanes' drivers and failures remembered.
    pub state_dir: PathBuf,
    /// The campaign's `[driver] env` names, which a command agent gets in its container
    /// (from [`AGENT_ENV`]). Their values stay in this process's environment: the runtime
    /// is given `--env NAME`, never a value on its command line.
    pub agent_env: Vec<String>,
}

/// The variable the lane names the campaign's env names in, comma-separated.
pub const AGENT_ENV: &str = "LANES_AGENT_ENV";

/// One attempt's container and what its later calls need.
struct Attempt {
    container: String,
    task: HarborTask,
    task_dir: PathBuf,
    attempt_dir: Option<PathBuf>,
    installed: bool,
    cancel: watch::Sender<bool>,
}

struct Driver {
    runtime: Runtime,
    agent_env: Vec<String>,
    images: Images,
    lane: Option<String>,
    host: String,
    attempts: HashMap<String, Arc<Mutex<Attempt>>>,
}

type Out = Arc<Mutex<Box<dyn AsyncWrite + Send + Unpin>>>;

async fn send(out: &Out, line: String) {
    let mut w = out.lock().await;
    let _ = w.write_all(line.as_bytes()).await;
    if !line.ends_with('\n') {
        let _ = w.write_all(b"\n").await;
    }
    let _ = w.flush().await;
}

fn driver_error(kind: FailureKind, message: impl Into<String>) -> RpcError {
    RpcError::new(code::DRIVER_ERROR, message).with_failure_kind(kind.as_str())
}

fn params<T: DeserializeOwned>(p: &Value) -> Result<T, RpcError> {
    serde_json::from_value(p.clone())
        .map_err(|e| RpcError::new(code::INVALID_PARAMS, format!("invalid params: {e}")))
}

/// Serves the protocol until stdin ends or `shutdown`, then removes this lane's containers.
pub async fn serve(
    input: impl AsyncRead + Unpin,
    output: impl AsyncWrite + Send + Unpin + 'static,
    opts: Options,
) -> std::io::Result<()> {
    let out: Out = Arc::new(Mutex::new(Box::new(output)));
    let runtime = Runtime::new(opts.runtime.clone()).in_dir(&opts.state_dir.join("runtime"));
    let driver = Arc::new(Mutex::new(Driver {
        images: Images::new(runtime.clone(), opts.state_dir.clone(), opts.max_builds),
        runtime,
        agent_env: opts.agent_env.clone(),
        lane: None,
        host: String::new(),
        attempts: HashMap::new(),
    }));
    let mut lines = BufReader::new(input).lines();
    let mut ended = Ok(());
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(e) => {
                ended = Err(e);
                break;
            }
        };
        let req = match codec::decode_request(line.as_bytes()) {
            Ok(r) => r,
            Err(bad) => {
                send(&out, codec::encode_response_err(bad.id, &bad.rpc_error())).await;
                continue;
            }
        };
        if req.method == method::CANCEL {
            if let Ok(c) = params::<CancelParams>(&req.params) {
                let d = driver.lock().await;
                if let Some(a) = d.attempts.get(&c.tag) {
                    let _ = a.lock().await.cancel.send(true);
                }
            }
            if let Some(id) = req.id {
                send(&out, codec::encode_response_ok(id, &json!({}))).await;
            }
            continue;
        }
        let Some(id) = req.id else { continue };
        if req.method == method::SHUTDOWN {
            send(&out, codec::encode_response_ok(id, &json!({}))).await;
            break;
        }
        if req.method == method::RUN_AGENT {
            // Its own task: a cancel must reach it while it runs.
            let (driver, out) = (driver.clone(), out.clone());
            tokio::spawn(async move {
                let answer = match params::<AgentParams>(&req.params) {
                    Ok(p) => Ok(run_agent(&driver, p).await),
                    Err(e) => Err(e),
                };
                send(&out, answer_line(id, answer.map(|r| json!(r)))).await;
            });
            continue;
        }
        let answer = handle(&driver, &req.method, &req.params).await;
        send(&out, answer_line(id, answer)).await;
    }
    // The lane's containers go with the driver, however its input ended.
    let d = driver.lock().await;
    if let Some(lane) = &d.lane {
        let removed = match d.runtime.list(&[(LABEL_LANE, lane)]).await {
            Ok(ids) => d.runtime.remove(&ids).await,
            Err(e) => Err(e),
        };
        if let Err(e) = removed {
            eprintln!("lanes-container: removing lane {lane}'s containers at exit: {e}");
        }
    }
    ended
}

fn answer_line(id: u64, answer: Result<Value, RpcError>) -> String {
    match answer {
        Ok(v) => codec::encode_response_ok(id, &v),
        Err(e) => codec::encode_response_err(Some(id), &e),
    }
}

async fn handle(
    driver: &Arc<Mutex<Driver>>,
    method_name: &str,
    p: &Value,
) -> Result<Value, RpcError> {
    match method_name {
        method::INITIALIZE => {
            let init: InitializeParams = params(p)?;
            if init.protocol != PROTOCOL {
                return Err(RpcError::new(
                    code::DRIVER_ERROR,
                    format!(
                        "unsupported protocol {:?}, expected {PROTOCOL:?}",
                        init.protocol
                    ),
                ));
            }
            let mut d = driver.lock().await;
            let version = d
                .runtime
                .version()
                .await
                .map_err(|e| driver_error(FailureKind::Preflight, e.to_string()))?;
            d.lane = Some(init.lane);
            d.host = init.host;
            Ok(json!(DriverIdentity {
                name: DRIVER_NAME.to_owned(),
                version: env!("CARGO_PKG_VERSION").to_owned(),
                pins: [
                    ("protocol".to_owned(), PROTOCOL.to_owned()),
                    ("runtime".to_owned(), version),
                ]
                .into(),
            }))
        }
        method::TEARDOWN => {
            let t: TeardownParams = params(p)?;
            let mut d = driver.lock().await;
            let mut labels = vec![(LABEL_LANE, t.lane.as_str())];
            if let Some(tag) = &t.tag {
                labels.push((LABEL_TAG, tag.as_str()));
                d.attempts.remove(tag);
            } else {
                d.attempts.clear();
            }
            let ids = d
                .runtime
                .list(&labels)
                .await
                .map_err(|e| driver_error(FailureKind::HarnessError, e.to_string()))?;
            d.runtime
                .remove(&ids)
                .await
                .map_err(|e| driver_error(FailureKind::HarnessError, e.to_string()))?;
            Ok(json!({}))
        }
        method::BOOT => boot(driver, params(p)?).await.map(|r| json!(r)),
        method::RESET => {
            let e: EnvParams = params(p)?;
            let attempt = attempt_of(driver, &e.attempt.tag).await?;
            let a = attempt.lock().await;
            let runtime = driver.lock().await.runtime.clone();
            let verified = runtime.is_running(&a.container).await;
            if !verified {
                return Err(driver_error(
                    FailureKind::ResetUnverified,
                    format!("the attempt's container {} is not running", a.container),
                ));
            }
            Ok(json!(EnvResult {
                verified,
                ..Default::default()
            }))
        }
        method::EVALUATE => evaluate(driver, params(p)?).await.map(|r| json!(r)),
        method::HEALTH => Ok(json!({ "ok": true })),
        method::GATE | method::DECLARE_INFEASIBLE => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!(
                "the container driver has no `{method_name}`: campaigns with a gate need another driver"
            ),
        )),
        other => Err(RpcError::new(
            code::METHOD_NOT_FOUND,
            format!("method not found: {other}"),
        )),
    }
}

async fn attempt_of(
    driver: &Arc<Mutex<Driver>>,
    tag: &str,
) -> Result<Arc<Mutex<Attempt>>, RpcError> {
    driver
        .lock()
        .await
        .attempts
        .get(tag)
        .cloned()
        .ok_or_else(|| {
            driver_error(
                FailureKind::GuestLost,
                format!("no container for attempt {tag}: boot it first"),
            )
        })
}

/// A container name from the lane and the tag (which may hold characters a name may not).
fn container_name(lane: &str, tag: &str) -> String {
    use sha2::Digest;
    let h = sha2::Sha256::digest(format!("{lane}\0{tag}").as_bytes());
    let hex: String = h.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let lane: String = lane
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(40)
        .collect();
    format!("lanes-{lane}-{hex}")
}

async fn boot(driver: &Arc<Mutex<Driver>>, e: EnvParams) -> Result<EnvResult, RpcError> {
    let boot_failed = |m: String| driver_error(FailureKind::BootFailed, m);
    let task = match HarborTask::from_payload(&e.payload) {
        Some(Ok(t)) => t,
        Some(Err(err)) => return Err(boot_failed(format!("the task's harbor payload: {err}"))),
        None => {
            return Err(boot_failed(
                "not a task folder: the container driver runs tasks from [tasks] harbor".to_owned(),
            ));
        }
    };
    let task_dir = e
        .task_dir
        .clone()
        .ok_or_else(|| boot_failed("the lane named no task folder for this task".to_owned()))?;
    // Absolute: the runtime's commands run in the driver's state folder.
    let task_dir = std::fs::canonicalize(&task_dir)
        .map_err(|err| boot_failed(format!("task folder {task_dir}: {err}")))?;
    check_folder(&task_dir, &task).await.map_err(boot_failed)?;
    let (runtime, images, lane, host, previous) = {
        let mut d = driver.lock().await;
        let lane = d
            .lane
            .clone()
            .ok_or_else(|| boot_failed("boot before initialize".to_owned()))?;
        // One lane runs one attempt at a time: what an earlier attempt left goes now.
        let previous: Vec<String> = d
            .attempts
            .drain()
            .map(|(_, a)| a)
            .collect::<Vec<_>>()
            .into_iter()
            .filter_map(|a| a.try_lock().ok().map(|a| a.container.clone()))
            .collect();
        (
            d.runtime.clone(),
            d.images.clone(),
            lane,
            d.host.clone(),
            previous,
        )
    };
    let _ = runtime.remove(&previous).await;
    let leftovers = runtime
        .list(&[(LABEL_LANE, &lane), (LABEL_TAG, &e.attempt.tag)])
        .await
        .unwrap_or_default();
    let _ = runtime.remove(&leftovers).await;

    let image = images
        .image_for(&task, &task_dir)
        .await
        .map_err(boot_failed)?;
    let image_id = runtime
        .image_id(&image)
        .await
        .map_err(|err| boot_failed(err.to_string()))?;
    let name = container_name(&lane, &e.attempt.tag);
    let spec = RunSpec {
        name: name.clone(),
        image,
        labels: [
            (LABEL_LANE.to_owned(), lane.clone()),
            (LABEL_TAG.to_owned(), e.attempt.tag.clone()),
            (LABEL_HOST.to_owned(), host),
        ]
        .into(),
        network: task.allow_internet,
        cpus: task.cpus,
        memory_mb: task.memory_mb,
        pids_limit: PIDS_LIMIT,
        workdir: task.workdir.clone(),
        env: task.env.clone(),
    };
    runtime
        .run(&spec)
        .await
        .map_err(|err| boot_failed(err.to_string()))?;
    let pins = BTreeMap::from([
        ("image_digest".to_owned(), image_id),
        ("task_digest".to_owned(), task.digest.clone()),
    ]);
    let (cancel, _) = watch::channel(false);
    driver.lock().await.attempts.insert(
        e.attempt.tag.clone(),
        Arc::new(Mutex::new(Attempt {
            container: name,
            task,
            task_dir,
            attempt_dir: e.attempt_dir.map(PathBuf::from),
            installed: false,
            cancel,
        })),
    );
    Ok(EnvResult {
        verified: false,
        health_url: None,
        pins,
    })
}

/// The folder must be the one submitted: its digest is the payload's (the files that differ
/// are named).
async fn check_folder(dir: &Path, task: &HarborTask) -> Result<(), String> {
    let dir = dir.to_owned();
    let (digest, files) = tokio::task::spawn_blocking(move || harbor::digest_dir(&dir))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|(file, reason)| format!("task folder: {file}: {reason}"))?;
    if digest == task.digest {
        return Ok(());
    }
    let mut differ: Vec<&String> = files
        .keys()
        .chain(task.files.keys())
        .filter(|f| files.get(*f) != task.files.get(*f))
        .collect();
    differ.sort();
    differ.dedup();
    Err(format!(
        "the task folder differs from the submitted one (digest {digest}, expected {}): {}",
        task.digest,
        differ
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The agent's result in the words of the protocol.
fn agent_result(
    status: AgentStatus,
    kind: Option<FailureKind>,
    text: Option<String>,
    error: Option<String>,
) -> AgentResult {
    AgentResult {
        status,
        failure_kind: kind,
        reset_epoch: None,
        runtime_outcome: None,
        infeasible: false,
        final_text: text,
        turns: None,
        tokens: None,
        cost_usd: None,
        quota: None,
        error,
    }
}

async fn run_agent(driver: &Arc<Mutex<Driver>>, p: AgentParams) -> AgentResult {
    let infra = |kind: FailureKind, m: String| {
        agent_result(AgentStatus::InfraError, Some(kind), None, Some(m))
    };
    let kind = match AgentKind::from_config(&p.arm_config) {
        Ok(k) => k,
        Err(m) => return infra(FailureKind::HarnessError, m),
    };
    let attempt = match attempt_of(driver, &p.attempt.tag).await {
        Ok(a) => a,
        Err(e) => return infra(FailureKind::GuestLost, e.message),
    };
    let (runtime, agent_env) = {
        let d = driver.lock().await;
        (d.runtime.clone(), d.agent_env.clone())
    };
    let (container, task, task_dir, mut cancelled, installed) = {
        let a = attempt.lock().await;
        (
            a.container.clone(),
            a.task.clone(),
            a.task_dir.clone(),
            a.cancel.subscribe(),
            a.installed,
        )
    };
    let mut env = task.env.clone();
    // Only a command agent gets the campaign's env (its API keys): the oracle runs the
    // dataset's own solution.
    let passed = if matches!(kind, AgentKind::Command { .. }) {
        agent_env
    } else {
        Vec::new()
    };
    let exec = |env: BTreeMap<String, String>| ExecSpec {
        workdir: task.workdir.clone(),
        env,
        passed: passed.clone(),
    };
    let script = match &kind {
        AgentKind::Nop => return agent_result(AgentStatus::Completed, None, None, None),
        AgentKind::Oracle => {
            let solution = task_dir.join("solution");
            if !solution.join("solve.sh").is_file() {
                return infra(
                    FailureKind::HarnessError,
                    "the task has no solution/solve.sh for the oracle".to_owned(),
                );
            }
            if let Err(e) = runtime.copy_in(&container, &solution, "/solution").await {
                return lost_or(&runtime, &container, e).await;
            }
            env.extend(task.solution_env.clone());
            env.insert("DEBIAN_FRONTEND".to_owned(), "noninteractive".to_owned());
            "mkdir -p /logs/agent && chmod +x /solution/solve.sh && /solution/solve.sh > /logs/agent/oracle.txt 2>&1".to_owned()
        }
        AgentKind::Command { command, install } => {
            let instruction =
                std::fs::read_to_string(task_dir.join("instruction.md")).unwrap_or_default();
            // The instruction reaches the container as a file, through a private folder.
            let dir =
                std::env::temp_dir().join(format!("lanes-{}-{container}", std::process::id()));
            let staged = crate::private_fs::create_dir(&dir).and_then(|()| {
                crate::private_fs::write(&dir.join("instruction.md"), instruction.as_bytes())
            });
            if let Err(e) = staged {
                let _ = std::fs::remove_dir_all(&dir);
                return infra(
                    FailureKind::HarnessError,
                    format!("staging the instruction: {e}"),
                );
            }
            let copied = runtime.copy_in(&container, &dir, "/lanes").await;
            let _ = std::fs::remove_dir_all(&dir);
            if let Err(e) = copied {
                return lost_or(&runtime, &container, e).await;
            }
            env.insert(INSTRUCTION_VAR.to_owned(), instruction);
            if let (Some(install), false) = (install, installed) {
                let limit = Duration::from_secs(u64::from(p.timeout_s.max(1)));
                match runtime
                    .exec(&container, install, &exec(env.clone()), limit)
                    .await
                {
                    Ok(Output { code: Some(0), .. }) => attempt.lock().await.installed = true,
                    Ok(o) => {
                        return agent_result(
                            AgentStatus::AgentError,
                            None,
                            None,
                            Some(format!(
                                "install exited {:?}: {}",
                                o.code,
                                super::runtime::tail(&o.stderr, 2000)
                            )),
                        );
                    }
                    Err(e) => return lost_or(&runtime, &container, e).await,
                }
            }
            format!("mkdir -p /logs/agent && {{ {command}\n}} > /logs/agent/command.txt 2>&1")
        }
    };
    let limit = Duration::from_secs(u64::from(p.timeout_s.max(1)));
    let spec = exec(env);
    let run = runtime.exec(&container, &script, &spec, limit);
    let outcome = tokio::select! {
        r = run => Some(r),
        _ = cancelled.wait_for(|c| *c) => None,
    };
    match outcome {
        None => {
            // Killing the exec client leaves the agent's processes running: kill them.
            let _ = runtime.kill_processes(&container).await;
            agent_result(AgentStatus::Cancelled, None, None, None)
        }
        Some(Err(RuntimeError::TimedOut { .. })) => {
            let _ = runtime.kill_processes(&container).await;
            agent_result(
                AgentStatus::Timeout,
                None,
                None,
                Some(format!("the agent ran past {}s", p.timeout_s)),
            )
        }
        Some(Err(e)) => lost_or(&runtime, &container, e).await,
        Some(Ok(o)) => {
            if !runtime.is_running(&container).await {
                return infra(
                    FailureKind::GuestLost,
                    "the container died under the agent".to_owned(),
                );
            }
            // Whatever the agent left running in the background stops before evaluation.
            let _ = runtime.kill_processes(&container).await;
            match o.code {
                Some(0) => agent_result(AgentStatus::Completed, None, None, None),
                code => agent_result(
                    AgentStatus::AgentError,
                    None,
                    None,
                    Some(format!("the agent exited {code:?}")),
                ),
            }
        }
    }
}

/// A runtime error under the agent: the container is gone (`guest_lost`), or the harness
/// failed.
async fn lost_or(runtime: &Runtime, container: &str, e: RuntimeError) -> AgentResult {
    let kind = if runtime.is_running(container).await {
        FailureKind::HarnessError
    } else {
        FailureKind::GuestLost
    };
    agent_result(
        AgentStatus::InfraError,
        Some(kind),
        None,
        Some(e.to_string()),
    )
}

/// Runs the task's tests in the attempt's container: `tests/` is copied to `/tests` only now,
/// `/logs/verifier` is emptied first (nothing the agent wrote there counts), and the reward
/// file is read back. The container is removed after its logs are copied out.
async fn evaluate(
    driver: &Arc<Mutex<Driver>>,
    e: EnvParams,
) -> Result<crate::driver::protocol::EvaluateResult, RpcError> {
    let eval_err = |m: String| driver_error(FailureKind::EvaluatorError, m);
    let attempt = attempt_of(driver, &e.attempt.tag).await?;
    let runtime = driver.lock().await.runtime.clone();
    let a = attempt.lock().await;
    let c = a.container.as_str();
    let result = async {
        runtime
            .kill_processes(c)
            .await
            .map_err(|err| eval_err(err.to_string()))?;
        let root = ExecSpec::default();
        runtime
            .exec(
                c,
                "rm -rf /tests /logs/verifier && mkdir -p /logs/verifier",
                &root,
                Duration::from_secs(60),
            )
            .await
            .map_err(|err| eval_err(err.to_string()))?;
        runtime
            .copy_in(c, &a.task_dir.join("tests"), "/tests")
            .await
            .map_err(|err| eval_err(err.to_string()))?;
        let mut env = a.task.env.clone();
        env.extend(a.task.verifier_env.clone());
        // The tests never get the campaign's env.
        let spec = ExecSpec {
            workdir: a.task.workdir.clone(),
            env,
            passed: Vec::new(),
        };
        let limit = Duration::from_secs_f64(a.task.verifier_timeout_s);
        match runtime
            .exec(
                c,
                "chmod +x /tests/test.sh && /tests/test.sh > /logs/verifier/test-stdout.txt 2>&1",
                &spec,
                limit,
            )
            .await
        {
            Ok(_) => {}
            Err(RuntimeError::TimedOut { .. }) => {
                let _ = runtime.kill_processes(c).await;
                return Err(eval_err(format!(
                    "the verifier ran past its timeout of {}s",
                    a.task.verifier_timeout_s
                )));
            }
            Err(err) => return Err(eval_err(err.to_string())),
        }
        let read = |file: &'static str| {
            let runtime = runtime.clone();
            async move {
                let script = format!("cat /logs/verifier/{file}");
                match runtime
                    .exec(c, &script, &ExecSpec::default(), Duration::from_secs(60))
                    .await
                {
                    Ok(Output {
                        code: Some(0),
                        stdout,
                        ..
                    }) => Some(stdout),
                    _ => None,
                }
            }
        };
        let (json, txt, output) = (
            read("reward.json").await,
            read("reward.txt").await,
            read("test-stdout.txt").await,
        );
        verifier::read(
            json.as_deref(),
            txt.as_deref(),
            output.as_deref().unwrap_or(""),
        )
        .map_err(|err| eval_err(err.to_string()))
    }
    .await;
    if let Some(dir) = &a.attempt_dir {
        let _ = runtime.copy_out(c, "/logs", &dir.join(LOGS_DIR)).await;
    }
    let _ = runtime.remove(std::slice::from_ref(&a.container)).await;
    drop(a);
    driver.lock().await.attempts.remove(&e.attempt.tag);
    result
}
