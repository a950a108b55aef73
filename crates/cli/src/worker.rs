//! `lanes worker`: runs N lanes on this host against a coordinator.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use lanes_common::ids::HostName;

use lanes_worker::http::HttpOptions;
use lanes_worker::{Drivers, WorkerConfig, load_drivers_file};

use crate::exit::Code;
use crate::telemetry::Service;

/// `lanes worker [OPTIONS]`, or `lanes worker drain`.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct Cmd {
    #[command(subcommand)]
    pub(crate) action: Option<Action>,
    #[command(flatten)]
    pub(crate) args: Args,
}

#[derive(clap::Subcommand, Debug)]
pub(crate) enum Action {
    /// Tell the worker running on this host to take no new work, and wait until its attempts
    /// in flight have finished and the coordinator has acknowledged their outcomes (a
    /// Kubernetes preStop, or before maintenance). The worker stays up, idle, until stopped.
    Drain(crate::drain::Args),
}

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    log: crate::telemetry::LogArgs,
    /// The coordinator's address. Repeat it, or give a comma list, for several replicas: the
    /// worker uses one at a time and moves to the next when its session fails or stalls.
    #[arg(
        long,
        env = "LANES_COORDINATOR",
        default_value = "http://127.0.0.1:7700",
        value_delimiter = ','
    )]
    coordinator: Vec<String>,
    /// Lanes (VM slots) on this host.
    #[arg(long, default_value_t = 1)]
    lanes: u32,
    /// Where attempt records, driver stderr and the outbox live.
    #[arg(long, env = "LANES_ARTIFACTS", default_value = "artifacts")]
    artifacts: PathBuf,
    /// The outbox directory [default: <artifacts>/.outbox].
    #[arg(long)]
    outbox: Option<PathBuf>,
    /// The Unix socket `lanes worker drain` reaches this worker on (mode 0600)
    /// [default: <artifacts>/.control.sock].
    #[arg(long, env = "LANES_CONTROL_SOCKET")]
    control_socket: Option<PathBuf>,
    #[command(flatten)]
    artifact_store: crate::artifact_store::ArtifactStoreArgs,
    /// Below this much free disk (GB) under --artifacts, no work is asked for.
    #[arg(long)]
    disk_floor_gb: Option<f64>,
    /// Replace every campaign's driver on this host (everything after it, up to `--`). It
    /// receives only the campaign env names --allow-env lists.
    #[arg(long, num_args = 1.., allow_hyphen_values = true, value_terminator = "--")]
    driver: Option<Vec<String>>,
    /// The drivers this worker runs, by name (a TOML file; see docs/WORKER.md). A campaign
    /// naming a driver (`[driver] name = ...`) is served only by workers that have it.
    #[arg(long, value_name = "FILE")]
    drivers: Option<PathBuf>,
    /// Run campaigns' own `[driver] command`. Off by default: a campaign submitter could
    /// otherwise run any program on this host.
    #[arg(long)]
    allow_campaign_commands: bool,
    /// Env names (comma-separated, repeatable) a campaign command or the --driver override may
    /// set or read (`$NAME`) through the campaign's `[driver] env`. Reserved names (PATH,
    /// LD_*, PYTHON*, LANES_*, ...) are refused.
    #[arg(long, value_delimiter = ',', value_name = "NAME")]
    allow_env: Vec<String>,
    /// Run container campaigns (`[driver] container`) on this runtime's CLI (on the PATH;
    /// its settings, such as CONTAINER_HOST or CONTAINERS_CONF, come from this process's
    /// environment). Without it, the coordinator serves this worker no container campaign.
    #[arg(long, value_name = "RUNTIME", value_parser = ["podman", "docker"])]
    container_runtime: Option<String>,
    /// Image builds at once on this host, with --container-runtime.
    #[arg(long, default_value_t = 2, value_name = "N")]
    max_builds: usize,
    /// The lane role's bearer token (prefer --token-file).
    #[arg(long, env = "LANES_LANE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A file holding the lane role's token (its first line is used).
    #[arg(long, env = "LANES_LANE_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    tls: crate::tls_args::TlsArgs,
    /// This worker's id, stable across restarts so a restarted lane can tear down what its
    /// earlier process left behind [default: the host name]. Two workers on one host need
    /// distinct ids.
    #[arg(long)]
    worker_id: Option<String>,
    /// This host's name, for anti-affinity [default: the machine's hostname].
    #[arg(long, env = "LANES_HOST")]
    host: Option<HostName>,
    /// Serve only these arms (comma-separated); all when unset.
    #[arg(long, value_delimiter = ',')]
    arms: Vec<String>,
    /// Seconds in-flight attempts may run after SIGTERM before they are cancelled.
    #[arg(long, default_value_t = 30)]
    shutdown_grace_s: u64,
    /// Seconds an agent may take to stop after its timeout's cancel before its driver is
    /// declared hung and restarted.
    #[arg(long, default_value_t = 30)]
    cancel_grace_s: u64,
    /// Seconds the guest's health endpoint may stay unreachable before the attempt is
    /// `guest_lost`.
    #[arg(long, default_value_t = 60)]
    guest_grace_s: u64,
    /// A PEM file of the CA certificates trusted for `https` task APIs (`http_agent`) and
    /// guest health URLs. Without it, no `https` server is trusted. To trust the public
    /// roots, give the system bundle (e.g. /etc/ssl/certs/ca-certificates.crt).
    #[arg(long, env = "LANES_HTTP_CA")]
    http_ca: Option<PathBuf>,
    /// Seconds to open a connection to a task API or a health URL.
    #[arg(long, default_value_t = 5)]
    http_connect_timeout_s: u64,
    /// Seconds one task API request may take, its answer included.
    #[arg(long, default_value_t = 30)]
    http_timeout_s: u64,
    /// Serve Prometheus metrics on this address (`GET /metrics`, unauthenticated: bind it to
    /// a private address) [default: off].
    #[arg(long, env = "LANES_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Longest task API answer read, in bytes; a longer one is a harness error.
    #[arg(long, default_value_t = lanes_worker::http::DEFAULT_MAX_BODY)]
    http_max_body_bytes: usize,
}

pub(crate) fn run(args: Args) -> anyhow::Result<Code> {
    let rt = tokio::runtime::Runtime::new()?;
    let telemetry =
        match crate::telemetry::init(Service::Worker, args.log.log_format, Some(rt.handle())) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("lanes: {e:#}");
                return Ok(Code::BadInput);
            }
        };
    let host = args.host.unwrap_or_else(lanes_worker::worker::machine_host);
    let worker_id = args.worker_id.unwrap_or_else(|| host.to_string());
    anyhow::ensure!(
        args.coordinator.iter().any(|a| !a.trim().is_empty()),
        "--coordinator: give at least one coordinator address"
    );
    let control_socket = lanes_worker::control::ControlSocket {
        required: args.control_socket.is_some(),
        path: args
            .control_socket
            .clone()
            .unwrap_or_else(|| args.artifacts.join(lanes_worker::control::DEFAULT_NAME)),
    };
    let drivers = Drivers {
        named: match &args.drivers {
            Some(path) => load_drivers_file(path)?,
            None => Default::default(),
        },
        campaign_commands: args.allow_campaign_commands,
        allow_env: Drivers::allow_env(&args.allow_env)?,
        campaigns: Default::default(),
        container: args.container_runtime.clone().map(|program| {
            lanes_worker::drivers::ContainerRuntime {
                program,
                max_builds: args.max_builds.max(1),
            }
        }),
    };
    let exe = std::env::current_exe().context("cannot find the lanes binary for the sim driver")?;
    let artifact_store = match args.artifact_store.open() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lanes: {e:#}");
            return Ok(Code::BadInput);
        }
    };
    let metrics = args
        .metrics_listen
        .map(|addr| (addr, lanes_worker::metrics::WorkerMetrics::default()));
    let config = WorkerConfig {
        coordinators: args
            .coordinator
            .into_iter()
            .map(|a| a.trim().to_owned())
            .filter(|a| !a.is_empty())
            .collect(),
        token: crate::tokens::presented(
            args.token,
            args.token_file.as_deref(),
            lanes_coordinator::auth::Role::Lane,
        )?,
        tls: args.tls.load()?,
        worker_id,
        host,
        lanes: args.lanes.max(1),
        outbox: args
            .outbox
            .unwrap_or_else(|| args.artifacts.join(".outbox")),
        artifacts: args.artifacts,
        driver_override: args.driver,
        drivers,
        sim_command: vec![exe.display().to_string(), "driver".into(), "sim".into()],
        disk_floor_gb: args.disk_floor_gb,
        arms: args.arms,
        shutdown_grace: Duration::from_secs(args.shutdown_grace_s),
        control_socket: Some(control_socket),
        cancel_grace: Duration::from_secs(args.cancel_grace_s),
        guest_poll: Duration::from_secs(1),
        guest_grace: Duration::from_secs(args.guest_grace_s),
        task_folders: Default::default(),
        http: HttpOptions {
            ca_file: args.http_ca,
            connect_timeout: Duration::from_secs(args.http_connect_timeout_s.max(1)),
            request_timeout: Duration::from_secs(args.http_timeout_s.max(1)),
            max_body: args.http_max_body_bytes,
        },
        metrics: metrics.as_ref().map(|(_, m)| m.clone()),
        artifact_store,
    };
    let result = rt.block_on(async move {
        let shutdown = async {
            use tokio::signal::unix::{SignalKind, signal};
            let mut term = signal(SignalKind::terminate()).expect("sigterm handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        if let Some((addr, metrics)) = metrics {
            let mut registry = crate::metrics::registry();
            let outbox = lanes_worker::outbox::Outbox::open(&config.outbox)
                .with_context(|| format!("cannot open the outbox {}", config.outbox.display()))?;
            metrics.register(&mut registry, outbox);
            crate::metrics::serve(addr, registry).await?;
        }
        lanes_worker::run(config, shutdown).await?;
        Ok::<_, anyhow::Error>(Code::Ok)
    });
    rt.block_on(telemetry.shutdown());
    result
}
