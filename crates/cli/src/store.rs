//! `lanes store`: maintenance of a store that no coordinator is using. `migrate` upgrades its
//! layout in place to the one this version of `lanes` writes.

use std::path::PathBuf;

use anyhow::Context;
use redis::IntoConnectionInfo;

use lanes_coordinator::store::{EmbeddedStore, RedisOptions, RedisStore, StoreError};

use crate::exit::Code;

#[derive(clap::Subcommand, Debug)]
pub(crate) enum StoreCmd {
    /// Upgrade a store's layout in place to the one this version writes (stop every
    /// coordinator on it first). Running it on an up-to-date store changes nothing.
    Migrate(MigrateArgs),
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("store").required(true).multiple(true).args(["redis", "redis_sentinel", "data_dir"])))]
pub(crate) struct MigrateArgs {
    /// The Redis store, e.g. redis://127.0.0.1:6380/ (its value may carry a password, so it
    /// is never shown).
    #[arg(long, env = "LANES_REDIS", hide_env_values = true)]
    redis: Option<String>,
    /// The embedded store's data directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The CA (PEM) of a rediss:// server's certificate [default: the system roots].
    #[arg(long, env = "LANES_REDIS_TLS_CA")]
    redis_tls_ca: Option<PathBuf>,
    #[command(flatten)]
    sentinel: crate::redis_args::SentinelArgs,
    /// Say what would change, and write nothing.
    #[arg(long)]
    dry_run: bool,
}

pub(crate) fn run(cmd: StoreCmd) -> anyhow::Result<Code> {
    match cmd {
        StoreCmd::Migrate(args) => migrate(args),
    }
}

fn migrate(args: MigrateArgs) -> anyhow::Result<Code> {
    crate::telemetry::init_logs(false);
    let sentinel = match args.sentinel.options() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lanes: {e}");
            return Ok(Code::BadInput);
        }
    };
    if (sentinel.is_some() || args.redis.is_some()) && args.data_dir.is_some() {
        eprintln!("lanes: --redis (or --redis-sentinel) and --data-dir name two stores; give one");
        return Ok(Code::BadInput);
    }
    let redis = match (args.redis, &sentinel) {
        (None, Some(_)) => Some(crate::redis_args::SENTINEL_URL.to_owned()),
        (url, _) => url,
    };
    let report = match (redis, args.data_dir) {
        (Some(url), _) => {
            // A URL the client cannot parse (an unknown scheme, say) is bad input, not a failure.
            if let Err(e) = url.as_str().into_connection_info() {
                eprintln!("lanes: --redis: not a Redis URL (redis://, rediss:// or unix://): {e}");
                return Ok(Code::BadInput);
            }
            let tls_ca_pem = args
                .redis_tls_ca
                .map(|p| {
                    std::fs::read(&p)
                        .with_context(|| format!("cannot read the Redis CA file {}", p.display()))
                })
                .transpose()?;
            let opts = RedisOptions {
                tls_ca_pem,
                sentinel,
                ..RedisOptions::default()
            };
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(RedisStore::migrate(&url, opts, args.dry_run))
        }
        (None, Some(dir)) => {
            if !dir.is_dir() {
                eprintln!("lanes: --data-dir: no directory {}", dir.display());
                return Ok(Code::BadInput);
            }
            EmbeddedStore::migrate(&dir, args.dry_run)
        }
        (None, None) => anyhow::bail!("give --redis URL or --data-dir DIR"),
    };
    match report {
        Ok(report) => {
            println!("{report}");
            Ok(Code::Ok)
        }
        Err(e @ StoreError::Layout(_)) => {
            eprintln!("lanes: {e}");
            Ok(Code::Refused)
        }
        Err(e) => Err(e).context("the migration failed"),
    }
}
