//! The OpenTelemetry side of attempts' traces, shared by the coordinator and the lane: the
//! root `claim` span with the attempt's derived ids, remote parents and links from a
//! [`TraceParent`], and the id generator that lets a root span take derived ids.
//!
//! Spans meant for export are `tracing` spans of target [`TARGET`]: the process's OTLP layer
//! exports those and nothing else, so log-only spans (and their volume) never reach the
//! collector. Without an exporter every function here is a cheap no-op.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use lanes_common::trace::TraceParent;

/// The `tracing` target of the spans that are exported.
pub const TARGET: &str = "lanes_trace";

static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Called once by the process that installed an OTLP exporter.
pub fn set_exporting() {
    EXPORTING.store(true, Ordering::Relaxed);
}

/// Whether this process exports spans: without an exporter, spans built directly (not through
/// `tracing`) are skipped, and with them the cost of their attributes.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The remote span context a [`TraceParent`] names.
pub fn span_context(tp: &TraceParent) -> SpanContext {
    SpanContext::new(
        TraceId::from_bytes(tp.trace_id),
        SpanId::from_bytes(tp.span_id),
        if tp.sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        },
        true,
        TraceState::default(),
    )
}

/// Makes `span` a child of the remote span `tp` names. Call it before the span is entered.
pub fn set_parent(span: &tracing::Span, tp: &TraceParent) {
    let cx = Context::new().with_remote_span_context(span_context(tp));
    // Fails only when no OTLP layer is installed or the span is disabled: nothing to parent.
    let _ = span.set_parent(cx);
}

/// The context of `span` as a `traceparent`, when it is exported and valid.
pub fn traceparent_of(span: &tracing::Span) -> Option<TraceParent> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| TraceParent {
        trace_id: sc.trace_id().to_bytes(),
        span_id: sc.span_id().to_bytes(),
        sampled: sc.is_sampled(),
    })
}

/// Marks `span` failed, with an `exception` event carrying `message`.
pub fn record_error(span: &tracing::Span, kind: &str, message: &str) {
    span.set_status(opentelemetry::trace::Status::error(message.to_owned()));
    span.add_event(
        "exception",
        vec![
            KeyValue::new("exception.type", kind.to_owned()),
            KeyValue::new("exception.message", message.to_owned()),
        ],
    );
}

thread_local! {
    /// Ids the next span built on this thread takes instead of random ones.
    static FORCED: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// Random ids, except for a span built inside [`with_ids`]: the SDK takes no ids from a span
/// builder, and an attempt's root span must carry the ids derived from its token.
#[derive(Debug, Default)]
pub struct DerivedIds(RandomIdGenerator);

impl IdGenerator for DerivedIds {
    fn new_trace_id(&self) -> TraceId {
        match FORCED.get() {
            Some((t, _)) => t,
            None => self.0.new_trace_id(),
        }
    }

    fn new_span_id(&self) -> SpanId {
        match FORCED.get() {
            Some((_, s)) => s,
            None => self.0.new_span_id(),
        }
    }
}

/// Runs `f` (which builds one span) with the ids of `tp` forced on this thread; they are
/// cleared however `f` ends, a panic included.
fn with_ids<T>(tp: &TraceParent, f: impl FnOnce() -> T) -> T {
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            FORCED.set(None);
        }
    }
    FORCED.set(Some((
        TraceId::from_bytes(tp.trace_id),
        SpanId::from_bytes(tp.span_id),
    )));
    let _clear = Clear;
    f()
}

/// Records the root `claim` span of an attempt, from `started` to now, with the attempt's
/// derived ids, its attributes, and a link to the attempt before it (a retry). Returns the
/// `traceparent` the lane parents its `attempt` span on: sampled as the coordinator decided,
/// or sampled when no exporter is installed here (the lane's own sampler decides then).
pub fn claim_span(
    campaign: &str,
    trial_id: &str,
    attempt: u32,
    started: SystemTime,
    attributes: impl FnOnce() -> Vec<KeyValue>,
) -> TraceParent {
    let tp = TraceParent::of_attempt(campaign, trial_id, attempt);
    if !exporting() {
        return tp;
    }
    let mut links = Vec::new();
    if attempt > 1 {
        let before = TraceParent::of_attempt(campaign, trial_id, attempt - 1);
        links.push(Link::with_context(span_context(&before)));
    }
    let tracer = opentelemetry::global::tracer("lanes");
    let builder = tracer
        .span_builder("claim")
        .with_kind(SpanKind::Internal)
        .with_start_time(started)
        .with_attributes(attributes())
        .with_links(links);
    let mut span = with_ids(&tp, || tracer.build_with_context(builder, &Context::new()));
    let sc = span.span_context().clone();
    span.end();
    if sc.is_valid() && sc.trace_id() == TraceId::from_bytes(tp.trace_id) {
        TraceParent {
            sampled: sc.is_sampled(),
            ..tp
        }
    } else {
        tp
    }
}
