//! `--metrics-listen`: one Prometheus registry per process, served as `GET /metrics` in the
//! OpenMetrics text format by a small axum server on the process's runtime. The endpoint has
//! no authentication (Prometheus scrapes it as is), so bind it to a private address; it
//! exposes counts and latencies only, never a token, secret or trial id.

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};

use anyhow::Context;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

/// The OpenMetrics text format's content type.
const CONTENT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Spans the OTLP pipeline dropped (its queue was full or the export failed): incremented
/// by the trace exporter, registered with every registry.
pub(crate) static SPANS_DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// A registry with the metrics every lanes process has.
pub(crate) fn registry() -> Registry {
    let mut registry = Registry::default();
    registry.register(
        "lanes_otel_spans_dropped",
        "Spans the OpenTelemetry exporter dropped instead of sending",
        SPANS_DROPPED.clone(),
    );
    registry
}

/// Binds `addr` and serves `registry` there until the runtime ends; answers the address
/// bound (the port chosen, for `:0`).
pub(crate) async fn serve(addr: SocketAddr, registry: Registry) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    let bound = listener.local_addr()?;
    let registry = Arc::new(registry);
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let registry = registry.clone();
            // Off the runtime: some collectors read the disk (the worker's outbox count).
            async move {
                tokio::task::spawn_blocking(move || scrape(&registry))
                    .await
                    .unwrap_or_else(|_| {
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response()
                    })
            }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the metrics server stopped");
        }
    });
    tracing::info!(addr = %bound, "metrics listening");
    Ok(bound)
}

fn scrape(registry: &Registry) -> axum::response::Response {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, registry) {
        Ok(()) => ([(CONTENT_TYPE, CONTENT)], body).into_response(),
        Err(_) => axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registry_has_the_dropped_spans_counter_and_ends_with_eof() {
        SPANS_DROPPED.inc();
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry()).unwrap();
        assert!(
            text.contains("# TYPE lanes_otel_spans_dropped counter\n"),
            "{text}"
        );
        assert!(text.contains("lanes_otel_spans_dropped_total "), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
