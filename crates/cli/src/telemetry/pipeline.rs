//! The span pipeline between the SDK and the OTLP exporter: a bounded queue and one export
//! task on the process's runtime. A span that finds the queue full, or whose batch the
//! collector did not take (down, slow past the exporter's timeout, refusing), is dropped and
//! counted in `lanes_otel_spans_dropped_total`: a dead collector never blocks or fails the
//! scheduler. The SDK's own batch processor exports from a thread of its own with a blocking
//! executor, which the tonic and async reqwest exporters cannot run on, and it counts drops
//! only in a log line.

use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{mpsc, oneshot};

/// Spans held while the exporter is busy; beyond it spans are dropped (and counted).
pub(crate) const QUEUE: usize = 8192;
/// Spans per export request.
pub(crate) const BATCH: usize = 512;
/// The longest a finished span waits for company before it is sent.
pub(crate) const LINGER: Duration = Duration::from_secs(1);

enum Msg {
    Span(Box<SpanData>),
    Flush(oneshot::Sender<()>),
}

/// The SDK side: hands finished, sampled spans to the export task without waiting.
#[derive(Debug)]
pub(crate) struct Processor {
    tx: mpsc::Sender<Msg>,
    dropped: Counter,
}

/// The process side: flushes what is queued, at shutdown.
#[derive(Debug, Clone)]
pub(crate) struct Flusher {
    tx: mpsc::Sender<Msg>,
}

/// Starts the export task on `rt` and returns both ends.
pub(crate) fn start<E>(
    exporter: E,
    dropped: Counter,
    rt: &tokio::runtime::Handle,
) -> (Processor, Flusher)
where
    E: SpanExporter + 'static,
{
    let (tx, rx) = mpsc::channel(QUEUE);
    rt.spawn(export_loop(exporter, rx, dropped.clone()));
    (
        Processor {
            tx: tx.clone(),
            dropped,
        },
        Flusher { tx },
    )
}

impl SpanProcessor for Processor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.tx.try_send(Msg::Span(Box::new(span))).is_err() {
            self.dropped.inc();
        }
    }

    /// Flushing waits on the export task, which runs on the runtime that may be calling this:
    /// the process flushes through [`Flusher::flush`] instead.
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

impl Flusher {
    /// Exports everything queued before this call, waiting at most `within`. Returns whether
    /// the export task answered in time.
    pub(crate) async fn flush(&self, within: Duration) -> bool {
        let flushed = async {
            let (tx, rx) = oneshot::channel();
            // Waits for room in a full queue too: all of it is bounded by `within`.
            self.tx.send(Msg::Flush(tx)).await.is_ok() && rx.await.is_ok()
        };
        tokio::time::timeout(within, flushed).await.unwrap_or(false)
    }
}

async fn export_loop<E: SpanExporter>(exporter: E, mut rx: mpsc::Receiver<Msg>, dropped: Counter) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(BATCH);
    let mut flushes: Vec<oneshot::Sender<()>> = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        let deadline = tokio::time::Instant::now() + LINGER;
        // Gather a batch: until it is full, a flush asks for it, or the linger ends.
        loop {
            match next.take() {
                Some(Msg::Span(s)) => batch.push(*s),
                Some(Msg::Flush(done)) => {
                    flushes.push(done);
                    break;
                }
                None => {}
            }
            if batch.len() >= BATCH {
                break;
            }
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(m)) => next = Some(m),
                Ok(None) | Err(_) => break,
            }
        }
        if !batch.is_empty() {
            let spans = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
            let n = spans.len() as u64;
            if let Err(e) = exporter.export(spans).await {
                dropped.inc_by(n);
                tracing::debug!(error = %e, spans = n, "span export failed: spans dropped");
            }
        }
        for done in flushes.drain(..) {
            let _ = done.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{
        SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
    };
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
    use std::borrow::Cow;
    use std::sync::{Arc, Mutex};
    use std::time::SystemTime;

    /// An exporter that records batches, or refuses them all.
    #[derive(Debug, Clone, Default)]
    struct Recording {
        got: Arc<Mutex<Vec<usize>>>,
        refuse: bool,
    }

    impl SpanExporter for Recording {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            if self.refuse {
                return Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                    "collector down".into(),
                ));
            }
            self.got.lock().unwrap().push(batch.len());
            Ok(())
        }
    }

    fn span(sampled: bool) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from_bytes([1; 16]),
                SpanId::from_bytes([2; 8]),
                if sampled {
                    TraceFlags::SAMPLED
                } else {
                    TraceFlags::default()
                },
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed("s"),
            start_time: SystemTime::now(),
            end_time: SystemTime::now(),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        }
    }

    #[tokio::test]
    async fn sampled_spans_are_exported_on_flush_and_unsampled_ones_are_not() {
        let exporter = Recording::default();
        let dropped = Counter::default();
        let (p, f) = start(
            exporter.clone(),
            dropped.clone(),
            &tokio::runtime::Handle::current(),
        );
        for _ in 0..3 {
            p.on_end(span(true));
        }
        p.on_end(span(false));
        assert!(f.flush(Duration::from_secs(10)).await);
        assert_eq!(exporter.got.lock().unwrap().iter().sum::<usize>(), 3);
        assert_eq!(dropped.get(), 0);
    }

    #[tokio::test]
    async fn a_refusing_collector_costs_counted_drops_and_never_blocks() {
        let exporter = Recording {
            refuse: true,
            ..Default::default()
        };
        let dropped = Counter::default();
        let (p, f) = start(
            exporter,
            dropped.clone(),
            &tokio::runtime::Handle::current(),
        );
        for _ in 0..5 {
            p.on_end(span(true));
        }
        assert!(f.flush(Duration::from_secs(10)).await);
        assert_eq!(dropped.get(), 5);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_full_queue_drops_and_counts_instead_of_waiting() {
        // The export task cannot run while this test holds the only thread: the queue fills.
        let dropped = Counter::default();
        let (p, _f) = start(
            Recording::default(),
            dropped.clone(),
            &tokio::runtime::Handle::current(),
        );
        for _ in 0..QUEUE + 10 {
            p.on_end(span(true));
        }
        assert_eq!(dropped.get(), 10);
    }
}
