//! From the machine's verdict to the outcome a lane publishes: pure, shared by publish and
//! release, and scrubbed of the attempt's secrets before it leaves the lane.

use serde_json::Value;

use lanes_common::ids::Token;
use lanes_common::proto as pb;
use lanes_common::row::{DriverIdentity, FailureKind, GateRecord, Outcome, PhaseWalls, Status};

use crate::lifecycle::{ReleaseKind, Verdict};
use crate::redact::scrub;

/// Where and when the attempt ran: everything an outcome needs besides the verdict.
#[derive(Debug, Clone)]
pub(super) struct OutcomeCtx {
    pub token: Token,
    pub lane: String,
    pub host: String,
    pub worker: String,
    pub driver: Option<DriverIdentity>,
    pub walls: PhaseWalls,
    pub started_utc: String,
    pub ended_utc: String,
}

impl OutcomeCtx {
    fn base(&self, status: Status) -> Outcome {
        let mut o = Outcome::new(self.token.clone(), &self.lane, &self.host, status);
        o.worker = self.worker.clone();
        o.driver = self.driver.clone();
        o.started_utc = Some(self.started_utc.clone());
        o.ended_utc = Some(self.ended_utc.clone());
        o
    }
}

/// The outcome of an attempt that ended with a verdict.
pub(super) fn published(ctx: &OutcomeCtx, v: Verdict, secrets: &[String]) -> Outcome {
    let mut o = ctx.base(v.status);
    o.failure_kind = v.failure_kind;
    o.score = v.score;
    o.passed = v.passed;
    o.checks = v.checks;
    o.infeasible_source = v.infeasible_source;
    o.lease_lost = v.lease_lost;
    o.error = v.error;
    o.walls = ctx.walls;
    if let Some(a) = v.agent {
        if o.error.is_none() {
            o.error = a.error;
        }
        o.reset_epoch = a.reset_epoch;
        o.runtime_outcome = a.runtime_outcome;
        o.final_text = a.final_text;
        o.turns = a.turns;
        o.tokens = a.tokens;
        o.cost_usd = a.cost_usd;
        o.quota = a.quota;
    }
    add_gate(&mut o, v.gate);
    if o.status != Status::InfraError {
        o.failure_kind = None;
    }
    finish(o, secrets)
}

/// The `cancelled` or `blocked` outcome that gives a trial back.
pub(super) fn released(
    ctx: &OutcomeCtx,
    kind: ReleaseKind,
    reason: Option<String>,
    gate: Option<GateRecord>,
    secrets: &[String],
) -> Outcome {
    let (status, failure_kind) = match kind {
        ReleaseKind::Cancelled => (Status::Cancelled, None),
        ReleaseKind::Blocked(k) => (Status::Blocked, Some(k)),
    };
    let mut o = ctx.base(status);
    o.failure_kind = failure_kind;
    o.error = reason;
    add_gate(&mut o, gate);
    finish(o, secrets)
}

/// Scrubs, then validates: what the store would refuse is never published; the row says why,
/// as a harness error.
fn finish(mut o: Outcome, secrets: &[String]) -> Outcome {
    // Defence in depth: a driver may echo a secret into an error or its final text.
    scrub_outcome(&mut o, secrets);
    match o.clone().validate() {
        Ok(valid) => valid,
        Err(e) => {
            let mut bad = Outcome::new(o.token.clone(), &o.lane, &o.host, Status::InfraError);
            bad.failure_kind = Some(FailureKind::HarnessError);
            bad.error = Some(format!("driver reported an invalid outcome: {e}"));
            bad.worker = o.worker;
            bad.driver = o.driver;
            bad.walls = o.walls;
            bad.started_utc = o.started_utc;
            bad.ended_utc = o.ended_utc;
            bad
        }
    }
}

/// Records the gate and adds its turns and cost to the attempt's totals, on every path.
fn add_gate(o: &mut Outcome, gate: Option<GateRecord>) {
    let Some(g) = gate else { return };
    if g.turns > 0 {
        o.turns = Some(o.turns.unwrap_or(0) + g.turns);
    }
    if let Some(c) = g.cost_usd {
        o.cost_usd = Some(o.cost_usd.unwrap_or(0.0) + c);
    }
    o.gate = Some(g);
}

/// The secret values of an attempt: its payload's `secret_payload_keys` and the driver env
/// values. Very short values are skipped (they would mangle ordinary text).
pub(super) fn secrets_of(
    spec: &pb::DriverSpec,
    payload: &Value,
    env: &[(String, String)],
) -> Vec<String> {
    let mut out: Vec<String> = spec
        .secret_payload_keys
        .iter()
        .filter_map(|k| payload.get(k))
        .map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    out.extend(env.iter().map(|(_, v)| v.clone()));
    out.retain(|s| s.len() >= 4);
    out
}

/// Replaces secret values in every free-text field of an outcome.
fn scrub_outcome(o: &mut Outcome, secrets: &[String]) {
    if secrets.is_empty() {
        return;
    }
    for field in [&mut o.error, &mut o.final_text, &mut o.runtime_outcome]
        .into_iter()
        .flatten()
    {
        scrub(field, secrets);
    }
    for e in &mut o.publication_errors {
        scrub(e, secrets);
    }
    for c in &mut o.checks {
        scrub(&mut c.detail, secrets);
    }
    if let Some(reason) = o.gate.as_mut().and_then(|g| g.reason.as_mut()) {
        scrub(reason, secrets);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::protocol::{AgentResult, AgentStatus};
    use lanes_common::ids::TrialId;
    use lanes_common::row::{Check, GateVerdict};

    fn ctx() -> OutcomeCtx {
        OutcomeCtx {
            token: Token {
                trial_id: TrialId::new("T.r0.a").unwrap(),
                attempt: 1,
            },
            lane: "l".into(),
            host: "h".into(),
            worker: "w".into(),
            driver: None,
            walls: PhaseWalls::default(),
            started_utc: "2026-01-01T00:00:00Z".into(),
            ended_utc: "2026-01-01T00:01:00Z".into(),
        }
    }

    fn verdict(status: Status) -> Verdict {
        Verdict {
            status,
            failure_kind: None,
            score: None,
            passed: None,
            checks: Vec::new(),
            infeasible_source: None,
            agent: None,
            lease_lost: false,
            error: None,
            gate: None,
        }
    }

    #[test]
    fn secrets_are_scrubbed_from_free_text() {
        let mut v = verdict(Status::InfraError);
        v.failure_kind = Some(FailureKind::HarnessError);
        v.error = Some("login failed for hunter22 at vm".into());
        v.checks.push(Check {
            name: "c".into(),
            passed: false,
            score: None,
            detail: "saw hunter22".into(),
        });
        v.agent = Some(AgentResult {
            status: AgentStatus::InfraError,
            failure_kind: None,
            reset_epoch: None,
            runtime_outcome: None,
            infeasible: false,
            final_text: Some("the password is hunter22".into()),
            turns: None,
            tokens: None,
            cost_usd: None,
            quota: None,
            error: None,
        });
        let o = published(&ctx(), v, &["hunter22".to_owned()]);
        assert_eq!(o.error.as_deref(), Some("login failed for *** at vm"));
        assert_eq!(o.final_text.as_deref(), Some("the password is ***"));
        assert_eq!(o.checks[0].detail, "saw ***");
    }

    #[test]
    fn the_gate_counts_toward_turns_and_cost_on_a_release_too() {
        let gate = GateRecord {
            verdict: GateVerdict::Proceed,
            reason: Some("fine".into()),
            turns: 2,
            cost_usd: Some(0.5),
        };
        let o = released(&ctx(), ReleaseKind::Cancelled, None, Some(gate), &[]);
        assert_eq!(o.status, Status::Cancelled);
        assert_eq!((o.turns, o.cost_usd), (Some(2), Some(0.5)));
        let blocked = released(
            &ctx(),
            ReleaseKind::Blocked(FailureKind::IdentityMismatch),
            Some("pin".into()),
            None,
            &[],
        );
        assert_eq!(
            (
                blocked.status,
                blocked.failure_kind,
                blocked.error.as_deref()
            ),
            (
                Status::Blocked,
                Some(FailureKind::IdentityMismatch),
                Some("pin")
            )
        );
    }

    #[test]
    fn a_kind_on_a_scored_verdict_is_dropped_and_an_invalid_one_is_a_harness_error() {
        let mut v = verdict(Status::Completed);
        v.score = Some(1.0);
        v.failure_kind = Some(FailureKind::RateLimit);
        let o = published(&ctx(), v, &[]);
        assert_eq!((o.status, o.failure_kind), (Status::Completed, None));
        let mut bad = verdict(Status::Completed);
        bad.score = Some(f64::NAN);
        let o = published(&ctx(), bad, &[]);
        assert_eq!(
            (o.status, o.failure_kind),
            (Status::InfraError, Some(FailureKind::HarnessError))
        );
    }
}
