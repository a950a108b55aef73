//! From the machine's verdict to the outcome a lane publishes: pure, shared by publish and
//! release, and scrubbed of the attempt's secrets before it leaves the lane.

use serde_json::Value;

use lanes_common::ids::{HostName, LaneName, Token};
use lanes_common::proto as pb;
use lanes_common::row::{DriverIdentity, FailureKind, GateRecord, Outcome, PhaseWalls, Status};
use lanes_common::utc::UtcTime;

use crate::artifacts;
use crate::lifecycle::{ReleaseKind, Verdict};
use crate::secrets::Secrets;

/// Where and when the attempt ran: everything an outcome needs besides the verdict.
#[derive(Debug, Clone)]
pub(super) struct OutcomeCtx {
    pub token: Token,
    pub lane: LaneName,
    pub host: HostName,
    pub worker: String,
    pub driver: Option<DriverIdentity>,
    pub walls: PhaseWalls,
    pub started_utc: UtcTime,
    pub ended_utc: UtcTime,
}

impl OutcomeCtx {
    fn base(&self, status: Status) -> Outcome {
        let mut o = Outcome::new(
            self.token.clone(),
            self.lane.clone(),
            self.host.clone(),
            status,
        );
        o.worker = self.worker.clone();
        o.driver = self.driver.clone();
        o.record.started_utc = Some(self.started_utc.clone());
        o.record.ended_utc = Some(self.ended_utc.clone());
        o
    }
}

/// The outcome of an attempt that ended with a verdict.
pub(super) fn published(ctx: &OutcomeCtx, v: Verdict, secrets: &Secrets) -> Outcome {
    let mut o = ctx.base(v.status);
    o.failure_kind = v.failure_kind;
    o.result.score = v.score;
    o.result.passed = v.passed;
    o.result.checks = v.checks;
    o.result.infeasible_source = v.infeasible_source;
    o.record.lease_lost = v.lease_lost;
    o.record.error = v.error;
    o.result.walls = ctx.walls;
    if let Some(a) = v.agent {
        if o.record.error.is_none() {
            o.record.error = a.error;
        }
        o.reset_epoch = a.reset_epoch;
        o.result.runtime_outcome = a.runtime_outcome;
        o.result.final_text = a.final_text;
        o.result.turns = a.turns;
        o.result.tokens = a.tokens;
        o.result.cost_usd = a.cost_usd;
        o.result.quota = a.quota;
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
    secrets: &Secrets,
) -> Outcome {
    let (status, failure_kind) = match kind {
        ReleaseKind::Cancelled => (Status::Cancelled, None),
        ReleaseKind::Blocked(k) => (Status::Blocked, Some(k)),
    };
    let mut o = ctx.base(status);
    o.failure_kind = failure_kind;
    o.record.error = reason;
    add_gate(&mut o, gate);
    finish(o, secrets)
}

/// Scrubs, then validates: what the store would refuse is never published; the row says why,
/// as a harness error.
fn finish(mut o: Outcome, secrets: &Secrets) -> Outcome {
    // Defence in depth: a driver may echo a secret into any text it hands back, and an error
    // may quote its stderr.
    scrub_outcome(&mut o, secrets);
    match o.clone().validate() {
        Ok(valid) => valid,
        Err(e) => {
            let mut bad = Outcome::new(
                o.token.clone(),
                o.lane.clone(),
                o.host.clone(),
                Status::InfraError,
            );
            bad.failure_kind = Some(FailureKind::HarnessError);
            bad.record.error = Some(format!("driver reported an invalid outcome: {e}"));
            bad.worker = o.worker;
            bad.driver = o.driver;
            bad.result.walls = o.result.walls;
            bad.record.started_utc = o.record.started_utc;
            bad.record.ended_utc = o.record.ended_utc;
            bad
        }
    }
}

/// Records the gate and adds its turns and cost to the attempt's totals, on every path.
fn add_gate(o: &mut Outcome, gate: Option<GateRecord>) {
    let Some(g) = gate else { return };
    if g.turns > 0 {
        o.result.turns = Some(o.result.turns.unwrap_or(0) + g.turns);
    }
    if let Some(c) = g.cost_usd {
        o.result.cost_usd = Some(o.result.cost_usd.unwrap_or(0.0) + c);
    }
    o.result.gate = Some(g);
}

/// The secret values of an attempt: the values of its payload's `secret_payload_keys` (at any
/// depth, any type) and the env values this worker hands the driver. Very short values are
/// skipped (they would mangle ordinary text).
pub(super) fn secrets_of(
    spec: &pb::DriverSpec,
    payload: &Value,
    env: &[(String, String)],
) -> Secrets {
    let mut out = artifacts::secret_values(payload, &spec.secret_payload_keys);
    out.extend(env.iter().map(|(_, v)| v.clone()));
    Secrets::new(out)
}

/// Replaces secret values in every text of an outcome that a driver or its stderr could
/// have written.
fn scrub_outcome(o: &mut Outcome, secrets: &Secrets) {
    if secrets.is_empty() {
        return;
    }
    let scrub = |t: &mut String| secrets.scrub(t);
    for field in [
        &mut o.record.error,
        &mut o.result.final_text,
        &mut o.result.runtime_outcome,
    ]
    .into_iter()
    .flatten()
    {
        scrub(field);
    }
    o.record.publication_errors.iter_mut().for_each(scrub);
    for c in &mut o.result.checks {
        scrub(&mut c.name);
        scrub(&mut c.detail);
    }
    if let Some(reason) = o.result.gate.as_mut().and_then(|g| g.reason.as_mut()) {
        scrub(reason);
    }
    if let Some(q) = o.result.quota.as_mut() {
        scrub(&mut q.provider);
    }
    if let Some(d) = o.driver.as_mut() {
        scrub(&mut d.name);
        scrub(&mut d.version);
        d.pins = std::mem::take(&mut d.pins)
            .into_iter()
            .map(|(k, v)| (secrets.scrubbed(&k), secrets.scrubbed(&v)))
            .collect();
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
            lane: "l".parse().unwrap(),
            host: "h".parse().unwrap(),
            worker: "w".into(),
            driver: None,
            walls: PhaseWalls::default(),
            started_utc: "2026-01-01T00:00:00Z".parse().unwrap(),
            ended_utc: "2026-01-01T00:01:00Z".parse().unwrap(),
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
            name: "check-hunter22".into(),
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
            quota: Some(lanes_common::row::QuotaReading {
                provider: "p-31337".into(),
                utilisation: 0.5,
                reset_epoch: None,
            }),
            error: None,
        });
        let mut c = ctx();
        c.driver = Some(DriverIdentity {
            name: "drv".into(),
            version: "1".into(),
            pins: [("key".to_owned(), "pin hunter22".to_owned())].into(),
        });
        // A number under a secret key, deep in the payload.
        let spec = pb::DriverSpec {
            secret_payload_keys: vec!["pw".into(), "n".into()],
            ..Default::default()
        };
        let payload = serde_json::json!({"vm": {"pw": "hunter22", "n": 31337}});
        let secrets = secrets_of(&spec, &payload, &[]);
        let o = published(&c, v, &secrets);
        assert_eq!(
            o.record.error.as_deref(),
            Some("login failed for *** at vm")
        );
        assert_eq!(o.result.final_text.as_deref(), Some("the password is ***"));
        assert_eq!(o.result.checks[0].name, "check-***");
        assert_eq!(o.result.checks[0].detail, "saw ***");
        assert_eq!(o.result.quota.unwrap().provider, "p-***");
        assert_eq!(o.driver.unwrap().pins["key"], "pin ***");
    }

    #[test]
    fn an_absurd_figure_is_a_harness_error_not_a_spend() {
        // The task API's figures reach the outcome without the driver codec's check.
        let agent = |cost_usd, tokens| AgentResult {
            status: AgentStatus::Completed,
            failure_kind: None,
            reset_epoch: None,
            runtime_outcome: None,
            infeasible: false,
            final_text: None,
            turns: Some(3),
            tokens,
            cost_usd,
            quota: None,
            error: None,
        };
        let huge_tokens = lanes_common::row::TokenUsage {
            input: u64::MAX,
            output: 1,
            cache_read: 0,
            cache_write: 0,
        };
        for (a, field) in [
            (agent(Some(1e308), None), "cost_usd"),
            (agent(Some(-2.0), None), "cost_usd"),
            (agent(None, Some(huge_tokens)), "tokens.input"),
        ] {
            let mut v = verdict(Status::Completed);
            v.score = Some(1.0);
            v.agent = Some(a);
            let o = published(&ctx(), v, &Secrets::default());
            assert_eq!(
                (o.status, o.failure_kind),
                (Status::InfraError, Some(FailureKind::HarnessError)),
                "{o:?}"
            );
            assert_eq!((o.result.cost_usd, o.result.tokens), (None, None));
            let error = o.record.error.unwrap();
            assert!(error.contains(field), "{error}");
        }
    }

    #[test]
    fn release_and_blocked_rows_are_scrubbed_too() {
        let secrets = Secrets::new(["hunter22".to_owned()]);
        let stderr_error = "driver: driver exited (exit status: 1); stderr tail: pw=hunter22";
        for kind in [
            ReleaseKind::Cancelled,
            ReleaseKind::Blocked(FailureKind::Preflight),
            ReleaseKind::Blocked(FailureKind::IdentityMismatch),
        ] {
            let gate = GateRecord {
                verdict: GateVerdict::Proceed,
                reason: Some("saw hunter22".into()),
                turns: 1,
                cost_usd: None,
            };
            let o = released(
                &ctx(),
                kind,
                Some(stderr_error.into()),
                Some(gate),
                &secrets,
            );
            let text = serde_json::to_string(&o).unwrap();
            assert!(!text.contains("hunter22"), "{text}");
            assert!(o.record.error.unwrap().ends_with("pw=***"));
        }
    }

    #[test]
    fn the_gate_counts_toward_turns_and_cost_on_a_release_too() {
        let gate = GateRecord {
            verdict: GateVerdict::Proceed,
            reason: Some("fine".into()),
            turns: 2,
            cost_usd: Some(0.5),
        };
        let o = released(
            &ctx(),
            ReleaseKind::Cancelled,
            None,
            Some(gate),
            &Secrets::default(),
        );
        assert_eq!(o.status, Status::Cancelled);
        assert_eq!((o.result.turns, o.result.cost_usd), (Some(2), Some(0.5)));
        let blocked = released(
            &ctx(),
            ReleaseKind::Blocked(FailureKind::IdentityMismatch),
            Some("pin".into()),
            None,
            &Secrets::default(),
        );
        assert_eq!(
            (
                blocked.status,
                blocked.failure_kind,
                blocked.record.error.as_deref()
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
        let o = published(&ctx(), v, &Secrets::default());
        assert_eq!((o.status, o.failure_kind), (Status::Completed, None));
        let mut bad = verdict(Status::Completed);
        bad.score = Some(f64::NAN);
        let o = published(&ctx(), bad, &Secrets::default());
        assert_eq!(
            (o.status, o.failure_kind),
            (Status::InfraError, Some(FailureKind::HarnessError))
        );
    }
}
