//! `lanes coordinator`: serves the gRPC API over a Redis or embedded store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use serde::Deserialize;

use lanes_coordinator::CoordinatorConfig;
use lanes_coordinator::auth::{AuthConfig, Role};
use lanes_coordinator::metrics::CoordinatorMetrics;
use lanes_coordinator::store::{
    EmbeddedStore, RedisOptions, RedisStore, Store, StoreBackend, StoreError, SystemClock,
};
use lanes_coordinator::tls::ServerTls;

use crate::exit::Code;
use crate::telemetry::Service;
use crate::tokens;

/// Flags, each also settable from the environment (`LANES_*`) or a config file.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    log: crate::telemetry::LogArgs,
    /// Address to serve on [default: 127.0.0.1:7700].
    #[arg(long, env = "LANES_LISTEN")]
    listen: Option<SocketAddr>,
    /// The Redis store, e.g. redis://127.0.0.1:6380/ (its value may carry a password, so it
    /// is never shown). With --redis-sentinel only its scheme, password and database count.
    #[arg(
        long,
        env = "LANES_REDIS",
        hide_env_values = true,
        conflicts_with = "data_dir"
    )]
    redis: Option<String>,
    /// The embedded store's data directory [default: .lanes].
    #[arg(long, env = "LANES_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Run on a Redis that can lose acknowledged writes (no `appendfsync always`).
    #[arg(long, env = "LANES_ALLOW_LOSSY_STORE")]
    allow_lossy_store: bool,
    /// Answer a claim, an outcome or any other write only once N Redis replicas confirmed it
    /// (`WAIT`); the master must then have `min-replicas-to-write` >= N.
    #[arg(long, env = "LANES_REDIS_WAIT", value_name = "N")]
    redis_wait: Option<u32>,
    /// The CA (PEM) of a rediss:// server's certificate [default: the system roots].
    #[arg(long, env = "LANES_REDIS_TLS_CA")]
    redis_tls_ca: Option<PathBuf>,
    #[command(flatten)]
    sentinel: crate::redis_args::SentinelArgs,
    /// Serve TLS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, env = "LANES_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The key (PEM) of --tls-cert.
    #[arg(long, env = "LANES_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Mutual TLS: lane sessions must present a certificate signed by this CA (PEM) whose
    /// subject CN is their worker id.
    #[arg(long, env = "LANES_TLS_CLIENT_CA", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// Bearer token of the client role (prefer --client-token-file).
    #[arg(long, env = "LANES_CLIENT_TOKEN", hide_env_values = true)]
    client_token: Option<String>,
    /// Bearer token of the lane role (prefer --lane-token-file).
    #[arg(long, env = "LANES_LANE_TOKEN", hide_env_values = true)]
    lane_token: Option<String>,
    /// The client role's tokens, one per line (several at once while rotating).
    #[arg(long, env = "LANES_CLIENT_TOKEN_FILE")]
    client_token_file: Option<PathBuf>,
    /// The lane role's tokens, one per line (several at once while rotating).
    #[arg(long, env = "LANES_LANE_TOKEN_FILE")]
    lane_token_file: Option<PathBuf>,
    /// Serve a role that has no token to anyone who can reach the port. Without it, a
    /// missing token is an error (exit 2).
    #[arg(long, env = "LANES_INSECURE_NO_AUTH")]
    insecure_no_auth: bool,
    /// Seconds the reaper waits after start and after a store outage before it takes leases
    /// back, so lanes can renew first. Keep it at least the longest lease TTL in use.
    #[arg(long, env = "LANES_REAPER_DELAY_S")]
    reaper_delay_s: Option<u64>,
    /// Most trials one campaign may have; a bigger submit is refused [default: 10000000].
    #[arg(long, env = "LANES_MAX_TRIALS")]
    max_trials: Option<u64>,
    /// Largest message a client may send, and the most one SubmitStream may carry in all,
    /// in bytes [default: 268435456 (256 MiB)].
    #[arg(long, env = "LANES_MAX_CLIENT_MESSAGE_BYTES", value_parser = clap::value_parser!(u64).range(1024..))]
    max_client_message_bytes: Option<u64>,
    /// Submits running at once; more are refused with RESOURCE_EXHAUSTED [default: 4].
    #[arg(long, env = "LANES_MAX_CONCURRENT_SUBMITS", value_parser = clap::value_parser!(u32).range(1..))]
    max_concurrent_submits: Option<u32>,
    /// Watch and Rows streams one token may hold open; more are refused with
    /// RESOURCE_EXHAUSTED [default: 64].
    #[arg(long, env = "LANES_MAX_STREAMS_PER_TOKEN", value_parser = clap::value_parser!(u32).range(1..))]
    max_streams_per_token: Option<u32>,
    /// Serve Prometheus metrics on this address (`GET /metrics`, unauthenticated: bind it to
    /// a private address) [default: off].
    #[arg(long, env = "LANES_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Also serve the gRPC health service alone on this address, in plaintext and without
    /// auth, for probes that speak neither (kubelet's): service `""` is SERVING while the
    /// store answers and the replica is not stopping (readiness), `liveness` while the process
    /// serves [default: off; health is always on the API port too].
    #[arg(long, env = "LANES_HEALTH_LISTEN")]
    health_listen: Option<SocketAddr>,
    /// Serve the web dashboard on this address, over TLS when the API is. It needs the
    /// client token (a login form sets a session cookie; `lanes ui-link` prints a one-time
    /// link) [default: off].
    #[arg(long, env = "LANES_UI_LISTEN")]
    ui_listen: Option<SocketAddr>,
    /// The dashboard's URL as browsers reach it (behind an ingress or proxy), for the links
    /// `lanes ui-link` prints [default: the --ui-listen address].
    #[arg(long, env = "LANES_UI_PUBLIC_URL", value_parser = crate::ui::public_url)]
    ui_public_url: Option<String>,
    /// The workers' artifacts directory (a shared volume), which the dashboard serves
    /// read-only on trial pages [default: artifacts are listed, not served].
    #[arg(long, env = "LANES_UI_ARTIFACTS")]
    ui_artifacts: Option<PathBuf>,
    /// A link to each attempt's trace: `{trace_id}` is replaced, e.g.
    /// `http://jaeger:16686/trace/{trace_id}` [default: the trace id, unlinked].
    #[arg(long, env = "LANES_UI_TRACE_URL", value_parser = crate::ui::trace_template)]
    ui_trace_url: Option<String>,
    /// The object store the workers upload attempts' files to (`s3://bucket/prefix`,
    /// `gs://…`, `az://…`, `file:///path`), which the dashboard and `lanes artifacts` read
    /// back and `lanes delete` empties of a deleted campaign's objects. Credentials come from
    /// the cloud's standard environment variables [default: none].
    #[arg(long, env = "LANES_ARTIFACT_STORE")]
    artifact_store: Option<String>,
    /// Threads that run the coordinator's tasks [default: one per CPU it may use]. Where it
    /// shares a small machine with Redis or with lanes, fewer threads hand fewer tasks from
    /// one thread to another: one thread cut its CPU per attempt by about a tenth on 2 cores.
    #[arg(long, env = "LANES_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// A TOML file with any of these settings (flags and env win).
    #[arg(long, env = "LANES_CONFIG")]
    config: Option<PathBuf>,
}

/// The config file: the same settings as the flags, snake_case.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    redis: Option<String>,
    data_dir: Option<PathBuf>,
    #[serde(default)]
    allow_lossy_store: bool,
    redis_wait: Option<u32>,
    redis_tls_ca: Option<PathBuf>,
    redis_sentinel: Option<Vec<String>>,
    redis_master: Option<String>,
    #[serde(default)]
    redis_sentinel_tls: bool,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    client_token_file: Option<PathBuf>,
    lane_token_file: Option<PathBuf>,
    #[serde(default)]
    insecure_no_auth: bool,
    reaper_delay_s: Option<u64>,
    max_trials: Option<u64>,
    max_client_message_bytes: Option<u64>,
    max_concurrent_submits: Option<u32>,
    max_streams_per_token: Option<u32>,
    metrics_listen: Option<SocketAddr>,
    health_listen: Option<SocketAddr>,
    ui_listen: Option<SocketAddr>,
    ui_public_url: Option<String>,
    ui_artifacts: Option<PathBuf>,
    ui_trace_url: Option<String>,
    artifact_store: Option<String>,
    threads: Option<u16>,
}

/// Test-only: shifts this replica's clock by this many milliseconds, so the fault suite can
/// run two replicas whose clocks disagree. Never set it in production.
const CLOCK_OFFSET_ENV: &str = "LANES_TEST_CLOCK_OFFSET_MS";

/// The tokens of both roles, checked: a role without one, a token under 16 bytes, or a
/// token both roles share is refused before anything starts.
fn auth_config(args: &Args, file: &FileConfig) -> anyhow::Result<AuthConfig> {
    let auth = AuthConfig {
        client: tokens::accepted(
            args.client_token.clone(),
            args.client_token_file
                .as_deref()
                .or(file.client_token_file.as_deref()),
            Role::Client,
        )?,
        lane: tokens::accepted(
            args.lane_token.clone(),
            args.lane_token_file
                .as_deref()
                .or(file.lane_token_file.as_deref()),
            Role::Lane,
        )?,
        insecure_no_auth: args.insecure_no_auth || file.insecure_no_auth,
    };
    auth.check()?;
    Ok(auth)
}

fn read_pem(path: &std::path::Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read the {what} {}", path.display()))
}

/// The server's TLS from its files; plaintext when no certificate is given.
fn server_tls(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
) -> anyhow::Result<Option<ServerTls>> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(ServerTls {
            cert_pem: read_pem(&cert, "TLS certificate")?,
            key_pem: read_pem(&key, "TLS key")?,
            client_ca_pem: client_ca
                .map(|p| read_pem(&p, "TLS client CA"))
                .transpose()?,
        })),
        (None, None) if client_ca.is_none() => Ok(None),
        _ => {
            anyhow::bail!("TLS needs both tls_cert and tls_key (and tls_client_ca only with them)")
        }
    }
}

/// The coordinator's runtime: `threads` worker threads, or one per CPU it may use.
fn runtime(threads: Option<u16>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        b.worker_threads(usize::from(n));
    }
    b.enable_all()
        .build()
        .context("cannot start the coordinator's runtime")
}

pub(crate) fn run(args: Args) -> anyhow::Result<Code> {
    // The file first: it may set the runtime's threads.
    let file: FileConfig = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            match toml::from_str(&text) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("lanes: {}: {e}", p.display());
                    return Ok(Code::BadInput);
                }
            }
        }
        None => FileConfig::default(),
    };
    let threads = args.threads.or(file.threads);
    if threads == Some(0) {
        // The flag's parser refuses 0; the file's value is checked here.
        eprintln!("lanes: threads must be at least 1");
        return Ok(Code::BadInput);
    }
    let rt = runtime(threads)?;
    let telemetry = match crate::telemetry::init(
        Service::Coordinator,
        args.log.log_format,
        Some(rt.handle()),
    ) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("lanes: {e:#}");
            return Ok(Code::BadInput);
        }
    };
    let auth = match auth_config(&args, &file) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("lanes: {e:#}");
            return Ok(Code::BadInput);
        }
    };
    let listen = args
        .listen
        .or(file.listen)
        .unwrap_or_else(|| "127.0.0.1:7700".parse().expect("valid default"));
    let metrics_listen = args.metrics_listen.or(file.metrics_listen);
    let health_listen = args.health_listen.or(file.health_listen);
    let ui_listen = args.ui_listen.or(file.ui_listen);
    // The file's values get the flags' checks.
    let checked = |v: Option<String>, check: fn(&str) -> Result<String, String>| {
        v.map(|v| check(&v)).transpose().map_err(anyhow::Error::msg)
    };
    let dashboard = match (
        checked(
            args.ui_public_url.or(file.ui_public_url),
            crate::ui::public_url,
        ),
        checked(
            args.ui_trace_url.or(file.ui_trace_url),
            crate::ui::trace_template,
        ),
    ) {
        (Ok(public), Ok(trace)) => {
            crate::ui::config(public, args.ui_artifacts.or(file.ui_artifacts), trace)
        }
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("lanes: {e:#}");
            return Ok(Code::BadInput);
        }
    };
    let mut sentinel_args = args.sentinel;
    if sentinel_args.redis_sentinel.is_empty() {
        sentinel_args.redis_sentinel = file.redis_sentinel.unwrap_or_default();
    }
    sentinel_args.redis_master = sentinel_args.redis_master.or(file.redis_master);
    sentinel_args.redis_sentinel_tls |= file.redis_sentinel_tls;
    let sentinel = match sentinel_args.options() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lanes: {e}");
            return Ok(Code::BadInput);
        }
    };
    let data_dir = args.data_dir.or(file.data_dir);
    if sentinel.is_some() && data_dir.is_some() {
        eprintln!("lanes: --redis-sentinel and --data-dir name two stores; give one");
        return Ok(Code::BadInput);
    }
    let redis = match (args.redis.or(file.redis), &sentinel) {
        (None, Some(_)) => Some(crate::redis_args::SENTINEL_URL.to_owned()),
        (url, _) => url,
    };
    let backend = match redis {
        Some(_) => StoreBackend::Redis,
        None => StoreBackend::Embedded,
    };
    let tls = server_tls(
        args.tls_cert.or(file.tls_cert),
        args.tls_key.or(file.tls_key),
        args.tls_client_ca.or(file.tls_client_ca),
    )?;
    let redis_tls_ca = args
        .redis_tls_ca
        .or(file.redis_tls_ca)
        .map(|p| read_pem(&p, "Redis CA file"))
        .transpose()?;
    let artifact_store = match crate::artifact_store::open(
        args.artifact_store.or(file.artifact_store).as_deref(),
        0,
    ) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lanes: {e:#}");
            return Ok(Code::BadInput);
        }
    };
    let defaults = CoordinatorConfig::default();
    let config = CoordinatorConfig {
        auth,
        tls,
        reaper_start_delay: args
            .reaper_delay_s
            .or(file.reaper_delay_s)
            .map(std::time::Duration::from_secs)
            .unwrap_or(defaults.reaper_start_delay),
        max_trials: args
            .max_trials
            .or(file.max_trials)
            .unwrap_or(defaults.max_trials),
        max_client_message_bytes: args
            .max_client_message_bytes
            .or(file.max_client_message_bytes)
            .map_or(defaults.max_client_message_bytes, |n| {
                usize::try_from(n).unwrap_or(usize::MAX)
            }),
        max_concurrent_submits: args
            .max_concurrent_submits
            .or(file.max_concurrent_submits)
            .map_or(defaults.max_concurrent_submits, |n| n.max(1) as usize),
        max_streams_per_token: args
            .max_streams_per_token
            .or(file.max_streams_per_token)
            .map_or(defaults.max_streams_per_token, |n| n.max(1) as usize),
        metrics: metrics_listen.map(|_| (Arc::new(CoordinatorMetrics::default()), backend)),
        dashboard,
        artifact_store,
        ..defaults
    };
    let clock: Arc<dyn lanes_coordinator::store::Clock> = match std::env::var(CLOCK_OFFSET_ENV) {
        Ok(v) => {
            let offset_ms: i64 = v
                .parse()
                .with_context(|| format!("{CLOCK_OFFSET_ENV} must be an integer"))?;
            tracing::warn!(
                offset_ms,
                "test clock offset in use: this replica's clock is shifted"
            );
            Arc::new(lanes_coordinator::store::OffsetClock { offset_ms })
        }
        Err(_) => Arc::new(SystemClock),
    };
    let opts = RedisOptions {
        allow_lossy: args.allow_lossy_store || file.allow_lossy_store,
        wait_replicas: args.redis_wait.or(file.redis_wait),
        tls_ca_pem: redis_tls_ca,
        sentinel,
        ..RedisOptions::default()
    };
    let result = rt.block_on(async move {
        let mut redis_store = None;
        let opened = match (redis, data_dir) {
            (Some(url), _) => RedisStore::connect(&url, opts)
                .await
                .map(|s| {
                    redis_store = Some(s.clone());
                    Arc::new(s) as Arc<dyn Store>
                })
                .map_err(|e| (e, "cannot use the redis store")),
            (None, dir) => {
                let dir = dir.unwrap_or_else(|| PathBuf::from(".lanes"));
                EmbeddedStore::open(&dir)
                    .map(|s| Arc::new(s) as Arc<dyn Store>)
                    .map_err(|e| (e, "cannot open the embedded store"))
            }
        };
        let store = match opened {
            Ok(store) => store,
            // A layout to migrate (or a newer one): refused, with what to do.
            Err((e @ StoreError::Layout(_), _)) => {
                eprintln!("lanes: {e}");
                return Ok(Code::Refused);
            }
            Err((e, what)) => return Err(anyhow::Error::new(e).context(what)),
        };
        if let (Some(addr), Some((metrics, _))) = (metrics_listen, &config.metrics) {
            let mut registry = crate::metrics::registry();
            metrics.register(&mut registry);
            if let Some(store) = redis_store {
                lanes_coordinator::metrics::RedisLinkMetrics::register(store, &mut registry);
            }
            crate::metrics::serve(addr, registry).await?;
        }
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        tracing::info!(
            addr = %listener.local_addr()?,
            threads = tokio::runtime::Handle::current().metrics().num_workers(),
            "coordinator listening"
        );
        let health_listener = match health_listen {
            Some(addr) => {
                let l = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr} (--health-listen)"))?;
                tracing::info!(addr = %l.local_addr()?, "health service listening (plaintext)");
                Some(l)
            }
            None => None,
        };
        let ui_listener = match ui_listen {
            Some(addr) => {
                let l = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on {addr} (--ui-listen)"))?;
                tracing::info!(addr = %l.local_addr()?, "dashboard listening");
                Some(l)
            }
            None => None,
        };
        let shutdown = async {
            // SIGTERM (Kubernetes, systemd) and Ctrl-C both drain: GoAway, then stop.
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = tokio::signal::ctrl_c() => {}
                    }
                }
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        };
        let listeners = lanes_coordinator::Listeners {
            api: listener,
            health: health_listener,
            ui: ui_listener,
        };
        lanes_coordinator::serve(config, store, clock, listeners, shutdown).await?;
        Ok::<_, anyhow::Error>(Code::Ok)
    });
    rt.block_on(telemetry.shutdown());
    result
}
