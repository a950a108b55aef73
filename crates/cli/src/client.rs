//! The client commands (`submit`, `status`, `watch`, `stop`, `results`, `report`): they talk to
//! a coordinator over gRPC. With `--data-dir`, they use the running `lanes run` found through
//! `<data-dir>/lanes.addr`, or, when nothing runs, open that embedded store directly behind a
//! private loopback coordinator, so there is one code path either way.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use prost::Message;
use tokio_stream::StreamExt;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use lanes_common::proto as pb;
use lanes_common::proto::campaign_service_client::CampaignServiceClient;

use crate::exit::Code;
use crate::local_api::LocalApi;
use lanes_dial::{ClientTls, endpoint, explain_connect_error};

/// Where client commands go.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Target {
    /// The coordinator's address [default: the `lanes run` data directory ./.lanes when it
    /// exists here, else http://127.0.0.1:7700].
    #[arg(long, env = "LANES_COORDINATOR")]
    coordinator: Option<String>,
    /// The client role's bearer token (prefer --token-file).
    #[arg(long, env = "LANES_CLIENT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// A file holding the client role's token (its first line is used).
    #[arg(long, env = "LANES_CLIENT_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    tls: crate::tls_args::TlsArgs,
    /// Use the `lanes run` data directory instead: its running API, or its store.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

/// Adds the bearer token to every request.
pub(crate) type Auth =
    Box<dyn FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Send>;

pub(crate) type Client =
    CampaignServiceClient<tonic::service::interceptor::InterceptedService<Channel, Auth>>;

/// A connected client, and what keeps a private coordinator alive.
pub(crate) struct Session {
    pub(crate) client: Client,
    _local: Option<tokio::sync::oneshot::Sender<()>>,
}

pub(crate) async fn connect(
    url: &str,
    token: Option<String>,
    tls: &ClientTls,
) -> anyhow::Result<Client> {
    let channel = endpoint(url, tls)?
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!(explain_connect_error(url, &e)))?;
    let header: Option<MetadataValue<_>> = match token {
        Some(t) => Some(
            format!("Bearer {t}")
                .parse()
                .context("the token is not valid header text")?,
        ),
        None => None,
    };
    let auth: Auth = Box::new(move |mut req: tonic::Request<()>| {
        if let Some(h) = &header {
            req.metadata_mut().insert("authorization", h.clone());
        }
        Ok(req)
    });
    Ok(CampaignServiceClient::with_interceptor(channel, auth)
        .max_decoding_message_size(256 * 1024 * 1024))
}

/// Where client commands go when told nothing.
const DEFAULT_COORDINATOR: &str = "http://127.0.0.1:7700";

impl Target {
    /// `--data-dir`; or, with neither it nor a coordinator given, `./.lanes` when a `lanes run`
    /// left one here: after `lanes run` in a folder, `lanes status` there just works.
    fn data_dir(&self) -> Option<PathBuf> {
        self.data_dir.clone().or_else(|| {
            let here = std::path::Path::new(crate::run::DEFAULT_DATA_DIR);
            (self.coordinator.is_none() && here.is_dir()).then(|| here.to_owned())
        })
    }

    pub(crate) async fn session(&self) -> anyhow::Result<Session> {
        let Some(dir) = &self.data_dir() else {
            let token = crate::tokens::presented(
                self.token.clone(),
                self.token_file.as_deref(),
                lanes_coordinator::auth::Role::Client,
            )?;
            let url = self.coordinator.as_deref().unwrap_or(DEFAULT_COORDINATOR);
            return Ok(Session {
                client: connect(url, token, &self.tls.load()?).await?,
                _local: None,
            });
        };
        if let Some(api) = LocalApi::read(dir)
            && let Ok(client) =
                connect(&api.url, Some(api.client_token), &ClientTls::default()).await
        {
            return Ok(Session {
                client,
                _local: None,
            });
        }
        // Nothing runs: serve the store in this process, on a private loopback port.
        let store: Arc<dyn lanes_coordinator::store::Store> = Arc::new(
            lanes_coordinator::store::EmbeddedStore::open(dir)
                .with_context(|| format!("cannot open the store in {}", dir.display()))?,
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        // Private to this process: random tokens nobody else learns.
        let client_token = crate::tokens::generate()?;
        let config = lanes_coordinator::CoordinatorConfig {
            auth: lanes_coordinator::auth::AuthConfig::tokens(
                &client_token,
                &crate::tokens::generate()?,
            )?,
            // A read-mostly view: never reap someone else's leases from here.
            reaper_start_delay: std::time::Duration::from_secs(365 * 24 * 3600),
            ..Default::default()
        };
        tokio::spawn(lanes_coordinator::run(
            config,
            store,
            Arc::new(lanes_coordinator::store::SystemClock),
            listener,
            async {
                let _ = rx.await;
            },
        ));
        Ok(Session {
            client: connect(&url, Some(client_token), &ClientTls::default()).await?,
            _local: Some(tx),
        })
    }
}

/// A gRPC failure as an exit code and a message on stderr.
pub(crate) fn report_status(s: &tonic::Status) -> Code {
    eprintln!("lanes: {}", lanes_dial::explain_status(s));
    if s.code() == tonic::Code::FailedPrecondition
        && let Ok(details) = pb::SubmitResponse::decode(s.details())
    {
        for c in details.conflicts {
            eprintln!(
                "  {}: recorded {}, submitted {}",
                c.field, c.recorded, c.submitted
            );
        }
        return Code::Refused;
    }
    match s.code() {
        tonic::Code::InvalidArgument | tonic::Code::NotFound => Code::BadInput,
        _ => Code::Failure,
    }
}

pub(crate) fn state_name(s: i32) -> &'static str {
    match pb::CampaignState::try_from(s) {
        Ok(pb::CampaignState::Running) => "running",
        Ok(pb::CampaignState::Stopping) => "stopping",
        Ok(pb::CampaignState::Stopped) => "stopped",
        Ok(pb::CampaignState::Done) => "done",
        _ => "unknown",
    }
}

fn stop_reason_name(s: i32) -> Option<&'static str> {
    match pb::StopReason::try_from(s) {
        Ok(pb::StopReason::User) => Some("STOPPED_USER"),
        Ok(pb::StopReason::Time) => Some("STOPPED_TIME"),
        Ok(pb::StopReason::Budget) => Some("STOPPED_BUDGET"),
        Ok(pb::StopReason::Auth) => Some("STOPPED_AUTH"),
        Ok(pb::StopReason::Quota) => Some("STOPPED_QUOTA"),
        _ => None,
    }
}

/// The status as JSON: stable field names for scripts.
pub(crate) fn status_json(s: &pb::CampaignStatus) -> serde_json::Value {
    serde_json::json!({
        "id": s.id,
        "state": state_name(s.state),
        "stop_reason": stop_reason_name(s.stop_reason),
        "spec_hash": s.spec_hash,
        "created_utc": s.created_utc,
        "trials_total": s.trials_total,
        "trials_final": s.trials_final,
        "trials_counted": s.trials_counted,
        "trials_excluded": s.trials_excluded,
        "trials_not_started": s.trials_not_started,
        "counts_by_status": s.counts_by_status,
        "rows_total": s.rows_total,
        "blocks_total": s.blocks_total,
        "blocks_complete": s.blocks_complete,
        "spend_usd": s.spend_usd,
        "reserved_usd": s.reserved_usd,
        "gates": s.gates.iter().map(|g| serde_json::json!({"gate": g.gate, "detail": g.detail, "until_epoch_ms": g.until_epoch_ms})).collect::<Vec<_>>(),
        "in_flight": s.in_flight.iter().map(|f| serde_json::json!({
            "trial_id": f.token.as_ref().map(|t| t.trial_id.clone()),
            "attempt": f.token.as_ref().map(|t| t.attempt),
            "lane": f.lane, "host": f.host,
            "phase": pb::Phase::try_from(f.phase).map(|p| p.as_str_name()).unwrap_or("unknown"),
            "deadline_in_ms": f.deadline_in_ms,
        })).collect::<Vec<_>>(),
        "refused_by": s.refused_by.iter().map(|r| serde_json::json!({"worker_id": r.worker_id, "reason": r.reason})).collect::<Vec<_>>(),
    })
}

pub(crate) fn status_text(s: &pb::CampaignStatus) -> String {
    let mut t = format!(
        "{}: {}{}, {}/{} final ({} counted, {} excluded, {} not started), {} in flight, spend ${:.2} (+${:.2} reserved), blocks {}/{}\n",
        s.id,
        state_name(s.state),
        stop_reason_name(s.stop_reason)
            .map(|r| format!(" ({r})"))
            .unwrap_or_default(),
        s.trials_final,
        s.trials_total,
        s.trials_counted,
        s.trials_excluded,
        s.trials_not_started,
        s.in_flight.len(),
        s.spend_usd,
        s.reserved_usd,
        s.blocks_complete,
        s.blocks_total,
    );
    for g in &s.gates {
        t.push_str(&format!("  gate {}: {}\n", g.gate, g.detail));
    }
    for r in &s.refused_by {
        t.push_str(&format!(
            "  not served by worker {}: {}\n",
            r.worker_id, r.reason
        ));
    }
    t
}

/// The CSV columns of `lanes results --format csv`.
pub(crate) const CSV_COLUMNS: &[&str] = &[
    "seq",
    "trial_id",
    "task",
    "arm",
    "run_index",
    "phase",
    "block",
    "order_index",
    "seed",
    "attempt",
    "lane",
    "host",
    "status",
    "failure_kind",
    "final",
    "excluded",
    "excluded_reason",
    "counted",
    "duplicate",
    "late",
    "paired",
    "score",
    "passed",
    "runtime_outcome",
    "turns",
    "cost_usd",
    "wall_s",
    "lease_lost",
    "started_utc",
    "ended_utc",
    "spec_hash",
    "error",
];

fn csv_field(v: &serde_json::Value) -> String {
    let s = match v {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

pub(crate) fn csv_line(row: &serde_json::Value) -> String {
    CSV_COLUMNS
        .iter()
        .map(|c| csv_field(row.get(*c).unwrap_or(&serde_json::Value::Null)))
        .collect::<Vec<_>>()
        .join(",")
}

/// Follows the Rows stream, printing each row.
pub(crate) async fn print_rows(
    client: &mut Client,
    id: &str,
    csv: bool,
    follow: bool,
) -> Result<(), tonic::Status> {
    use std::io::Write as _;
    let mut stream = client
        .rows(pb::RowsRequest {
            id: id.to_owned(),
            from_seq: 0,
            follow,
        })
        .await?
        .into_inner();
    let mut out = std::io::stdout().lock();
    if csv {
        let _ = writeln!(out, "{}", CSV_COLUMNS.join(","));
    }
    while let Some(r) = stream.next().await {
        let r = r?;
        let line = if csv {
            let v: serde_json::Value = serde_json::from_str(&r.json).unwrap_or_default();
            csv_line(&v)
        } else {
            r.json
        };
        if writeln!(out, "{line}").is_err() {
            return Ok(());
        }
    }
    Ok(())
}
