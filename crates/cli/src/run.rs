//! `lanes run`: one machine, one process. The embedded store, a coordinator on a loopback
//! port (its address in `<data-dir>/lanes.addr`, so a second terminal can use the API), and N
//! local lanes with their drivers. Running it again resumes; drift is refused.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use lanes_common::spec;
use lanes_common::state::{CampaignState, StopMode, StopReason};
use lanes_coordinator::CoordinatorConfig;
use lanes_coordinator::auth::AuthConfig;
use lanes_coordinator::metrics::CoordinatorMetrics;
use lanes_coordinator::store::{
    Clock, EmbeddedStore, Store, StoreBackend, StoreError, SubmitKind, SystemClock,
};
use lanes_worker::metrics::WorkerMetrics;
use lanes_worker::{Drivers, WorkerConfig, load_drivers_file};

use crate::exit::Code;
use crate::interrupt::Interrupt;
use crate::local_api::{LocalApi, addr_file, private_dir};
use crate::telemetry::Service;
use crate::tokens;

/// Prints a line to stdout, ignoring a closed pipe (`lanes run … | head` is fine).
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// Where `lanes run` keeps its store, and where client commands look when told nothing.
pub(crate) const DEFAULT_DATA_DIR: &str = ".lanes";

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The campaign file (TOML).
    file: PathBuf,
    /// Local lanes to run.
    #[arg(long, default_value_t = 4)]
    lanes: u32,
    /// Where the embedded store lives.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    /// Attempt records and driver stderr [default: <data-dir>/artifacts].
    #[arg(long)]
    artifacts: Option<PathBuf>,
    /// A drivers file, for a campaign that names its driver (`[driver] name = ...`).
    #[arg(long, value_name = "FILE")]
    drivers: Option<PathBuf>,
    /// Serve Prometheus metrics of the coordinator and the lanes on this address (`GET
    /// /metrics`, unauthenticated: keep it on a private address) [default: off].
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Serve the web dashboard on this address [default: a free port on 127.0.0.1]. Its URL
    /// and a one-time login link are printed first.
    #[arg(long, value_name = "ADDR", conflicts_with = "no_ui")]
    ui_listen: Option<std::net::SocketAddr>,
    /// Serve no dashboard.
    #[arg(long)]
    no_ui: bool,
    /// A link to each attempt's trace on the dashboard: `{trace_id}` is replaced, e.g.
    /// `http://localhost:16686/trace/{trace_id}`.
    #[arg(long, value_name = "TEMPLATE", value_parser = crate::ui::trace_template)]
    ui_trace_url: Option<String>,
    /// Run a container campaign (`[driver] container`) on this runtime's CLI.
    #[arg(long, value_name = "RUNTIME", value_parser = ["podman", "docker"])]
    container_runtime: Option<String>,
    /// Image builds at once, with --container-runtime.
    #[arg(long, default_value_t = 2, value_name = "N")]
    max_builds: usize,
    #[command(flatten)]
    artifact_store: crate::artifact_store::ArtifactStoreArgs,
    #[command(flatten)]
    smoke: crate::smoke::SmokeArgs,
    #[command(flatten)]
    log: crate::telemetry::LogArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<Code> {
    let rt = tokio::runtime::Runtime::new()?;
    let telemetry =
        match crate::telemetry::init(Service::Run, args.log.log_format, Some(rt.handle())) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("lanes: {e:#}");
                return Ok(Code::BadInput);
            }
        };
    let campaign = match spec::load_file(&args.file) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lanes: {e}");
            return Ok(Code::BadInput);
        }
    };
    let campaign = match args.smoke.apply(campaign) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lanes: {e}");
            return Ok(Code::BadInput);
        }
    };
    let container =
        args.container_runtime
            .clone()
            .map(|program| lanes_worker::drivers::ContainerRuntime {
                program,
                max_builds: args.max_builds.max(1),
            });
    let drivers = match local_drivers(args.drivers.as_deref(), &campaign.spec, container) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("lanes: {e}");
            return Ok(Code::BadInput);
        }
    };
    let result = rt.block_on(run_async(args, campaign, drivers));
    rt.block_on(telemetry.shutdown());
    result
}

/// A one-time dashboard login link for `id`, asked of this run's own API.
async fn login_link(api: &LocalApi, id: &lanes_common::ids::CampaignId) -> anyhow::Result<String> {
    let tls = lanes_dial::ClientTls::default();
    let mut client = crate::client::connect(&api.url, Some(api.client_token.clone()), &tls).await?;
    let link = client
        .login_link(lanes_common::proto::LoginLinkRequest {
            campaign: id.to_string(),
        })
        .await?
        .into_inner();
    Ok(link.url)
}

/// What the local lanes run: the campaign file's own command and the env names it uses (its
/// author is the one running it), a named driver from `--drivers`, and only this campaign,
/// even when the store holds others.
fn local_drivers(
    file: Option<&Path>,
    spec: &spec::CampaignSpec,
    container: Option<lanes_worker::drivers::ContainerRuntime>,
) -> anyhow::Result<Drivers> {
    let drivers = Drivers {
        named: match file {
            Some(path) => load_drivers_file(path)?,
            None => Default::default(),
        },
        campaign_commands: true,
        allow_env: spec::env::names_used(&spec.driver.env)
            .map(str::to_owned)
            .collect(),
        campaigns: [spec.id.clone()].into(),
        container,
    };
    if let Some(refusal) = drivers.offer(false).refusal(spec) {
        anyhow::bail!(
            "{refusal}{}",
            if file.is_none() {
                " (give it with --drivers FILE)"
            } else {
                ""
            }
        );
    }
    Ok(drivers)
}

async fn run_async(args: Args, campaign: spec::Campaign, drivers: Drivers) -> anyhow::Result<Code> {
    let artifact_store = match args.artifact_store.open() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lanes: {e:#}");
            return Ok(Code::BadInput);
        }
    };
    let id = campaign.spec.id.clone();
    let ttl = Duration::from_secs(u64::from(campaign.spec.ops.lease_ttl_s));
    private_dir(&args.data_dir)?;
    let store: Arc<dyn Store> = match EmbeddedStore::open(&args.data_dir) {
        Ok(store) => Arc::new(store),
        // A layout to migrate (or a newer one): refused, with what to do.
        Err(e @ StoreError::Layout(_)) => {
            eprintln!("lanes: {e}");
            return Ok(Code::Refused);
        }
        Err(e) => {
            return Err(e)
                .with_context(|| format!("cannot open the store in {}", args.data_dir.display()));
        }
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    match store.submit(campaign, clock.now_ms()).await {
        Ok(s) => match s.kind {
            SubmitKind::Created => out!(
                "campaign {} submitted: {} trials, {}",
                s.id,
                s.trials,
                s.spec_hash
            ),
            SubmitKind::Resumed => out!(
                "campaign {} resumed: {} trials, {}",
                s.id,
                s.trials,
                s.spec_hash
            ),
            SubmitKind::Amended => out!(
                "campaign {} amended: now {} trials, {}",
                s.id,
                s.trials,
                s.spec_hash
            ),
        },
        Err(StoreError::Refused(conflicts)) => {
            eprintln!(
                "lanes: resume of {id} refused; the campaign file drifted from what was recorded:"
            );
            for c in conflicts {
                eprintln!(
                    "  {}: recorded {}, now {}",
                    c.field, c.recorded, c.submitted
                );
            }
            return Ok(Code::Refused);
        }
        Err(e) => return Err(e.into()),
    }

    // The API on a loopback port, for `lanes status --data-dir` and friends, behind tokens
    // made for this run and kept in a file only this user can read.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let api = LocalApi {
        url: format!("http://{addr}"),
        client_token: tokens::generate()?,
        lane_token: tokens::generate()?,
    };
    api.write(&args.data_dir)?;
    let (stop_coord, coord_stopped) = tokio::sync::oneshot::channel::<()>();
    // One registry for both halves of the process.
    let metrics = match args.metrics_listen {
        Some(addr) => {
            let coordinator = Arc::new(CoordinatorMetrics::default());
            let worker = WorkerMetrics::default();
            let mut registry = crate::metrics::registry();
            coordinator.register(&mut registry);
            let outbox = args.data_dir.join("outbox");
            let opened = lanes_worker::outbox::Outbox::open(&outbox)
                .with_context(|| format!("cannot open the outbox {}", outbox.display()))?;
            worker.register(&mut registry, opened);
            let bound = crate::metrics::serve(addr, registry).await?;
            out!("metrics on http://{bound}/metrics");
            Some((coordinator, worker))
        }
        None => None,
    };
    let artifacts = args
        .artifacts
        .clone()
        .unwrap_or_else(|| args.data_dir.join("artifacts"));
    let ui_listener =
        if args.no_ui {
            None
        } else {
            let addr = args
                .ui_listen
                .unwrap_or_else(|| "127.0.0.1:0".parse().expect("valid address"));
            Some(tokio::net::TcpListener::bind(addr).await.with_context(|| {
                format!("cannot listen on {addr} for the dashboard (--ui-listen)")
            })?)
        };
    let ui_addr = ui_listener.as_ref().map(|l| l.local_addr()).transpose()?;
    let config = CoordinatorConfig {
        dashboard: crate::ui::config(None, Some(artifacts.clone()), args.ui_trace_url.clone()),
        auth: AuthConfig::tokens(&api.client_token, &api.lane_token)?,
        reaper_start_delay: ttl,
        metrics: metrics
            .as_ref()
            .map(|(c, _)| (c.clone(), StoreBackend::Embedded)),
        artifact_store: artifact_store.clone(),
        ..CoordinatorConfig::default()
    };
    let listeners = lanes_coordinator::Listeners {
        api: listener,
        health: None,
        ui: ui_listener,
    };
    let coordinator = tokio::spawn(lanes_coordinator::serve(
        config,
        store.clone(),
        clock.clone(),
        listeners,
        async {
            let _ = coord_stopped.await;
        },
    ));
    if let Some(addr) = ui_addr {
        out!("dashboard on http://{addr}/campaigns/{id}");
        // A link that logs the browser in once: the token itself never goes in a URL.
        match login_link(&api, &id).await {
            Ok(link) => out!("log in (one-time link, 5 minutes): {link}"),
            Err(e) => out!(
                "no login link ({e:#}); log in with the client token in {}",
                addr_file(&args.data_dir).display()
            ),
        }
    }

    let exe = std::env::current_exe().context("cannot find the lanes binary for the sim driver")?;
    let host = lanes_worker::worker::machine_host();
    let worker = WorkerConfig {
        coordinators: vec![api.url.clone()],
        token: Some(api.lane_token.clone()),
        tls: Default::default(),
        worker_id: "local".into(),
        host,
        lanes: args.lanes.max(1),
        outbox: args.data_dir.join("outbox"),
        artifacts,
        driver_override: None,
        drivers,
        sim_command: vec![exe.display().to_string(), "driver".into(), "sim".into()],
        disk_floor_gb: None,
        arms: Vec::new(),
        shutdown_grace: Duration::from_secs(30),
        control_socket: None,
        cancel_grace: Duration::from_secs(30),
        guest_poll: Duration::from_secs(1),
        guest_grace: Duration::from_secs(60),
        // The campaign's task folders, read in place.
        task_folders: lanes_common::spec::harbor::folders_of_campaign(&args.file)
            .context("the campaign's task folders")?,
        http: Default::default(),
        metrics: metrics.map(|(_, w)| w),
        artifact_store,
    };
    let (stop_worker, worker_stopped) = tokio::sync::oneshot::channel::<()>();
    let worker = tokio::spawn(lanes_worker::run(worker, async {
        let _ = worker_stopped.await;
    }));

    // Progress until the campaign ends; Ctrl-C drains it. A live view on a terminal, plain
    // lines otherwise.
    let mut view = std::io::IsTerminal::is_terminal(&std::io::stdout())
        .then(|| crate::progress::View::new(args.lanes));
    // Ctrl-C (or SIGTERM) drains it: caught from here on, so one that comes while the status
    // is read is not lost.
    let mut interrupt = Interrupt::install()?;
    let mut interrupted = false;
    let mut last = String::new();
    let status = loop {
        let st = store.status(&id, clock.now_ms()).await?;
        let line = format!(
            "{}: {}/{} final ({} counted, {} excluded, {} not started), {} in flight, spend ${:.2}",
            st.state,
            st.trials_final,
            st.trials_total,
            st.trials_counted,
            st.trials_excluded,
            st.trials_not_started,
            st.in_flight.len(),
            st.spend_usd
        );
        if let Some(v) = view.as_mut() {
            v.update(&st);
            last = line;
        } else if line != last {
            out!("{line}");
            last = line;
        }
        if matches!(st.state, CampaignState::Done | CampaignState::Stopped) {
            break st;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            () = interrupt.recv(), if !interrupted => {
                interrupted = true;
                out!("interrupted: draining; in-flight attempts finish, then it stops");
                store.stop(&id, StopMode::Drain, clock.now_ms()).await?;
            }
        }
    };
    if let Some(v) = view.take() {
        v.finish();
        out!("{last}");
    }
    let _ = stop_worker.send(());
    let _ = worker.await;
    let _ = stop_coord.send(());
    let _ = coordinator.await;
    let _ = std::fs::remove_file(addr_file(&args.data_dir));

    let report = lanes_coordinator::report::build(store.as_ref(), &id).await?;
    out!();
    print!("{}", report.to_text());
    Ok(match (status.state, status.stop_reason) {
        (CampaignState::Done, _) => Code::Ok,
        (_, Some(StopReason::User)) => {
            out!("\nstopped; resume with: lanes run {}", args.file.display());
            Code::Stopped
        }
        _ => {
            out!(
                "\nstopped by a gate ({}); resume with: lanes run {}",
                status.stop_reason.map_or("unknown", |r| r.as_str()),
                args.file.display()
            );
            Code::Gate
        }
    })
}
