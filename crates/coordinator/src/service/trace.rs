//! The coordinator's spans in attempts' traces: the root `claim` span of each assigned trial,
//! and the `complete` / `release` span of a store commit, a child of the lane's `attempt`
//! span (named by the traceparent the lane sends back). A malformed traceparent only loses
//! the parent link: it never refuses an outcome.

use std::time::SystemTime;

use opentelemetry::KeyValue;

use lanes_common::proto as pb;
use lanes_common::trace::TraceParent;
use lanes_telemetry as otel;

/// Records each trial's `claim` span (from `started`, when the work request came in) and sets
/// the traceparent the lane parents its `attempt` span on.
pub(crate) fn claims(a: &mut pb::Assignment, lane: &str, host: &str, started: SystemTime) {
    for t in &mut a.trials {
        let Some(token) = &t.token else { continue };
        let tp = otel::claim_span(&a.campaign, &token.trial_id, token.attempt, started, || {
            let mut kv = vec![
                KeyValue::new("lanes.campaign", a.campaign.clone()),
                KeyValue::new("lanes.trial_id", token.trial_id.clone()),
                KeyValue::new("lanes.task", t.task.clone()),
                KeyValue::new("lanes.arm", t.arm.clone()),
                KeyValue::new("lanes.run_index", i64::from(t.run_index)),
                KeyValue::new("lanes.attempt", i64::from(token.attempt)),
                KeyValue::new("lanes.lane", lane.to_owned()),
                KeyValue::new("lanes.host", host.to_owned()),
            ];
            if let Some(model) = model_of(&t.arm_config_json) {
                kv.push(KeyValue::new("gen_ai.request.model", model));
            }
            kv
        });
        t.traceparent = tp.to_string();
    }
}

/// `gen_ai.request.model`: the arm config's `model`, when it names one.
pub(crate) fn model_of(arm_config_json: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(arm_config_json).ok()?;
    v.get("model")?.as_str().map(str::to_owned)
}

/// The span of the store commit of an outcome (`complete`) or a release (`release`): a child
/// of the lane's attempt span when `traceparent` names one, else (a lane that does not trace,
/// an outcome replayed by a restarted worker) of the attempt's `claim`, derived from `token`,
/// so the commit is always in the attempt's trace.
pub(crate) fn commit_span(
    name: Commit,
    campaign: &str,
    token: Option<&pb::Token>,
    traceparent: &str,
) -> tracing::Span {
    let span = match name {
        Commit::Complete => tracing::info_span!(
            target: otel::TARGET,
            "complete",
            lanes.campaign = %campaign,
            lanes.trial_id = tracing::field::Empty,
            lanes.attempt = tracing::field::Empty,
            lanes.counted = tracing::field::Empty,
            lanes.duplicate = tracing::field::Empty,
            lanes.late = tracing::field::Empty,
            token = tracing::field::Empty,
        ),
        Commit::Release => tracing::info_span!(
            target: otel::TARGET,
            "release",
            lanes.campaign = %campaign,
            lanes.trial_id = tracing::field::Empty,
            lanes.attempt = tracing::field::Empty,
            lanes.counted = tracing::field::Empty,
            lanes.duplicate = tracing::field::Empty,
            lanes.late = tracing::field::Empty,
            token = tracing::field::Empty,
        ),
    };
    let sent = TraceParent::parse_opt(traceparent).unwrap_or_else(|e| {
        tracing::debug!(error = %e, "ignoring the lane's traceparent");
        None
    });
    let parent = sent.or_else(|| {
        token
            .filter(|t| t.attempt > 0)
            .map(|t| TraceParent::of_attempt(campaign, &t.trial_id, t.attempt))
    });
    if let Some(tp) = parent {
        otel::set_parent(&span, &tp);
    }
    span
}

/// Which commit a [`commit_span`] covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Commit {
    Complete,
    Release,
}

/// Records which attempt the commit is about, once its token was validated.
pub(crate) fn record_token(span: &tracing::Span, t: &lanes_common::ids::Token) {
    span.record("lanes.trial_id", t.trial_id.as_str());
    span.record("lanes.attempt", t.attempt);
    span.record("token", tracing::field::display(t));
}

/// Records the store's answer on the commit span.
pub(crate) fn record_ack(span: &tracing::Span, a: &crate::store::CompleteAck) {
    span.record("lanes.counted", a.counted);
    span.record("lanes.duplicate", a.duplicate);
    span.record("lanes.late", a.late);
}

/// A renewal that told the lane to stop (`lost` or `cancel`), as an event in the attempt's
/// trace: a short `renew` span under the lane's attempt span.
pub(crate) fn renewal_refused(
    traceparent: &str,
    attempt: &lanes_common::ids::AttemptTag,
    state: &str,
) {
    let Ok(Some(tp)) = TraceParent::parse_opt(traceparent) else {
        return;
    };
    let span = tracing::info_span!(
        target: otel::TARGET,
        "renew",
        lanes.campaign = %attempt.campaign,
        lanes.trial_id = %attempt.token.trial_id,
        lanes.attempt = attempt.token.attempt,
        lanes.renewal = state,
    );
    otel::set_parent(&span, &tp);
    span.in_scope(
        || tracing::info!(target: otel::TARGET, renewal = state, "the lane was told to stop"),
    );
}
