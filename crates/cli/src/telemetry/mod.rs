//! A `lanes` process's logs and traces: logs on stderr (text for people, JSON lines for
//! machines, filtered by `RUST_LOG`), and the spans of attempts (target
//! [`lanes_telemetry::TARGET`]) exported over OTLP when the standard `OTEL_*` variables
//! name an endpoint. Without an exporter, span contexts are kept for JSON logs only, whose
//! lines carry trace ids either way (rows carry their attempt's ids whatever the logs).

mod config;
mod json_log;
mod pipeline;

use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter as _};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use lanes_telemetry as otel;

pub(crate) use config::Protocol;

/// How long shutdown waits for queued spans to reach the collector.
const FLUSH_WITHIN: Duration = Duration::from_secs(5);

#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct LogArgs {
    /// Log format on stderr: `text` for people, or `json`, one object per line with the
    /// OpenTelemetry `trace_id` and `span_id` on every line inside an attempt.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Which process this is: its default `service.name`, and its default log level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Service {
    Coordinator,
    Worker,
    /// `lanes run`: a coordinator and a worker in one process. It prints its own progress,
    /// so its logs default to warnings.
    Run,
    /// Commands that only log (`lanes store`, `lanes bench`): nothing is exported.
    Tool {
        quiet: bool,
    },
}

impl Service {
    fn name(self) -> &'static str {
        match self {
            Service::Coordinator => "lanes-coordinator",
            Service::Worker => "lanes-worker",
            Service::Run | Service::Tool { .. } => "lanes",
        }
    }

    fn default_level(self) -> &'static str {
        match self {
            Service::Run | Service::Tool { quiet: true } => "warn",
            _ => "info",
        }
    }
}

/// What must be flushed when the process ends.
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
    flusher: Option<pipeline::Flusher>,
}

/// Installs the logger and, when the environment asks for it, the OTLP exporter (its task
/// runs on `rt`). Fails on `OTEL_*` values it cannot honour, rather than run untraced.
pub(crate) fn init(
    service: Service,
    log: LogFormat,
    rt: Option<&tokio::runtime::Handle>,
) -> anyhow::Result<Telemetry> {
    let export = match (service, rt) {
        (Service::Tool { .. }, _) | (_, None) => None,
        (_, Some(rt)) => config::export(|name| std::env::var(name).ok())?.map(|e| (e, rt)),
    };
    let mut builder = SdkTracerProvider::builder()
        .with_id_generator(otel::DerivedIds::default())
        .with_resource(resource(service));
    let mut flusher = None;
    if let Some((export, rt)) = &export {
        let _inside = rt.enter();
        let mut exporter = exporter(export)?;
        exporter.set_resource(&resource(service));
        let (processor, f) = pipeline::start(exporter, crate::metrics::SPANS_DROPPED.clone(), rt);
        builder = builder.with_span_processor(processor);
        flusher = Some(f);
    }
    let provider = builder.build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    // Without an exporter, span contexts serve only the trace ids of JSON lines: text logs
    // go without the layer, whose spans were ~4 % of a busy coordinator's perf samples.
    let traces = (export.is_some() || log == LogFormat::Json).then(|| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("lanes"))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_level(false)
            .with_tracked_inactivity(false)
            .with_filter(Targets::new().with_target(otel::TARGET, tracing::Level::TRACE))
    });
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(service.default_level()));
    let logs = match log {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => {
            let format = tracing_subscriber::fmt::format().json().flatten_event(true);
            tracing_subscriber::fmt::layer()
                .json()
                .event_format(json_log::WithTraceIds(format))
                .with_writer(std::io::stderr)
                .with_filter(filter)
                .boxed()
        }
    };
    // A second init (tests call `run` more than once in a process) keeps the first.
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init();
    if let Some((export, _)) = &export {
        otel::set_exporting();
        tracing::info!(
            endpoint = %without_userinfo(&export.endpoint),
            protocol = ?export.protocol,
            service = service.name(),
            "exporting attempt traces over OTLP"
        );
    }
    Ok(Telemetry { provider, flusher })
}

/// The `service.name` the environment gives (`OTEL_SERVICE_NAME`, or `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`), else this process's default.
fn resource(service: Service) -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&opentelemetry::Key::new("service.name"))
        .is_some_and(|v| !v.as_str().starts_with("unknown_service"));
    if named {
        detected
    } else {
        Resource::builder()
            .with_service_name(service.name())
            .build()
    }
}

/// An endpoint as it may be logged: credentials in its authority (`user:pass@`) are masked.
fn without_userinfo(endpoint: &str) -> String {
    let Some((scheme, rest)) = endpoint.split_once("://") else {
        return endpoint.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => endpoint.to_owned(),
    }
}

fn exporter(export: &config::Export) -> anyhow::Result<opentelemetry_otlp::SpanExporter> {
    use opentelemetry_otlp::{WithExportConfig as _, WithTonicConfig as _};
    let built = match export.protocol {
        Protocol::Grpc => {
            let builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            if export.endpoint.starts_with("https://") {
                // Verified against the system's roots (tonic loads none by itself).
                builder
                    .with_tls_config(tonic::transport::ClientTlsConfig::new().with_enabled_roots())
                    .build()
            } else {
                builder.build()
            }
        }
        Protocol::HttpProtobuf => {
            // reqwest 0.13 brings no crypto of its own here: ring, like the rest of Lanes.
            let _ = rustls::crypto::ring::default_provider().install_default();
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .build()
        }
    };
    built.context("cannot build the OTLP span exporter")
}

/// The logger of a command that exports nothing (`lanes store`, `lanes bench`).
pub(crate) fn init_logs(quiet: bool) {
    // Without a runtime nothing is exported, and building the logger cannot fail.
    let _ = init(Service::Tool { quiet }, LogFormat::Text, None);
}

impl Telemetry {
    /// Exports the spans still queued (waiting at most a few seconds for the collector).
    pub(crate) async fn shutdown(self) {
        if let Some(f) = &self.flusher
            && !f.flush(FLUSH_WITHIN).await
        {
            tracing::warn!("the OTLP collector did not take the last spans in time");
        }
        let _ = self.provider.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::without_userinfo;

    #[test]
    fn credentials_in_an_endpoint_are_never_logged() {
        assert_eq!(
            without_userinfo("https://user:s3cret@otlp.example.com:4318/v1/traces"),
            "https://***@otlp.example.com:4318/v1/traces"
        );
        assert_eq!(without_userinfo("http://c:4317"), "http://c:4317");
        assert_eq!(
            without_userinfo("http://c:4318/path@not-userinfo"),
            "http://c:4318/path@not-userinfo"
        );
    }
}
