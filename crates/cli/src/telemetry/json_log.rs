//! `--log-format json`: tracing-subscriber's JSON lines, with the OpenTelemetry `trace_id` and
//! `span_id` of the nearest span that has them (inside an attempt, every line), so a log line
//! leads to its trace and a trace to its lines.

use std::fmt;

use opentelemetry::trace::TraceContextExt;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Wraps a JSON event format and appends the trace ids to each object it writes.
pub(crate) struct WithTraceIds<F>(pub(crate) F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let ids = ctx.lookup_current().and_then(|current| {
            let dispatch = tracing::dispatcher::get_default(Clone::clone);
            current.scope().find_map(|span| {
                let cx = tracing_opentelemetry::get_otel_context(&span.id(), &dispatch)?;
                let sc = cx.span().span_context().clone();
                sc.is_valid().then_some(sc)
            })
        });
        match (ids, line.strip_suffix("}\n")) {
            (Some(sc), Some(head)) => writeln!(
                writer,
                "{head},\"trace_id\":\"{}\",\"span_id\":\"{}\"}}",
                sc.trace_id(),
                sc.span_id()
            ),
            _ => writer.write_str(&line),
        }
    }
}
