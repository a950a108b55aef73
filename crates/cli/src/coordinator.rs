//! `lanes coordinator`: serves the gRPC API over a Redis or embedded store.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde::Deserialize;

use lanes_coordinator::CoordinatorConfig;
use lanes_coordinator::auth::Secret;
use lanes_coordinator::store::{EmbeddedStore, RedisOptions, RedisStore, Store, SystemClock};

use crate::exit::Code;

/// Flags, each also settable from the environment (`LANES_*`) or a config file.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Address to serve on [default: 127.0.0.1:7700].
    #[arg(long, env = "LANES_LISTEN")]
    listen: Option<SocketAddr>,
    /// The Redis store, e.g. redis://127.0.0.1:6380/.
    #[arg(long, env = "LANES_REDIS", conflicts_with = "data_dir")]
    redis: Option<String>,
    /// The embedded store's data directory [default: .lanes].
    #[arg(long, env = "LANES_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Run on a Redis that can lose acknowledged writes (no `appendfsync always`).
    #[arg(long, env = "LANES_ALLOW_LOSSY_STORE")]
    allow_lossy_store: bool,
    /// `WAIT n` replicas after each Redis commit.
    #[arg(long, env = "LANES_REDIS_WAIT")]
    redis_wait: Option<u32>,
    /// Bearer token of the client role (prefer the env variable or a file).
    #[arg(long, env = "LANES_CLIENT_TOKEN", hide_env_values = true)]
    client_token: Option<String>,
    /// Bearer token of the lane role (prefer the env variable or a file).
    #[arg(long, env = "LANES_LANE_TOKEN", hide_env_values = true)]
    lane_token: Option<String>,
    #[arg(long, env = "LANES_CLIENT_TOKEN_FILE")]
    client_token_file: Option<PathBuf>,
    #[arg(long, env = "LANES_LANE_TOKEN_FILE")]
    lane_token_file: Option<PathBuf>,
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
    client_token_file: Option<PathBuf>,
    lane_token_file: Option<PathBuf>,
}

fn token(value: Option<String>, file: Option<&Path>, role: &str) -> anyhow::Result<Option<Secret>> {
    let text = match (value, file) {
        (Some(v), _) => v,
        (None, Some(f)) => std::fs::read_to_string(f)
            .with_context(|| format!("cannot read the {role} token file {}", f.display()))?,
        (None, None) => return Ok(None),
    };
    Secret::new(&text)
        .map(Some)
        .with_context(|| format!("the {role} token is empty"))
}

pub(crate) fn run(args: Args) -> anyhow::Result<Code> {
    crate::logging::init();
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
    let listen = args
        .listen
        .or(file.listen)
        .unwrap_or_else(|| "127.0.0.1:7700".parse().expect("valid default"));
    let redis = args.redis.or(file.redis);
    let data_dir = args.data_dir.or(file.data_dir);
    let config = CoordinatorConfig {
        client_token: token(
            args.client_token,
            args.client_token_file
                .as_deref()
                .or(file.client_token_file.as_deref()),
            "client",
        )?,
        lane_token: token(
            args.lane_token,
            args.lane_token_file
                .as_deref()
                .or(file.lane_token_file.as_deref()),
            "lane",
        )?,
        ..CoordinatorConfig::default()
    };
    let opts = RedisOptions {
        allow_lossy: args.allow_lossy_store || file.allow_lossy_store,
        wait_replicas: args.redis_wait.or(file.redis_wait),
    };
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async move {
        let store: Arc<dyn Store> = match (redis, data_dir) {
            (Some(url), _) => Arc::new(
                RedisStore::connect(&url, opts)
                    .await
                    .context("cannot use the redis store")?,
            ),
            (None, dir) => {
                let dir = dir.unwrap_or_else(|| PathBuf::from(".lanes"));
                Arc::new(EmbeddedStore::open(&dir).context("cannot open the embedded store")?)
            }
        };
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        tracing::info!(addr = %listener.local_addr()?, "coordinator listening");
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        lanes_coordinator::run(config, store, Arc::new(SystemClock), listener, shutdown).await?;
        Ok::<_, anyhow::Error>(Code::Ok)
    })
}
