//! Proto ↔ domain conversions, in one place. Every conversion from the wire validates, and a
//! failure names the field and why, so a gRPC handler can answer `InvalidArgument` precisely.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{CampaignId, DriverName, HostName, IdError, LaneName, Token, TrialId};
use crate::policy::{ClaimGateInForce, NoWorkReason, WorkerOffer};
use crate::proto as pb;
use crate::resume::Conflict;
use crate::row::{
    AttemptRecord, AttemptResult, Check, DriverIdentity, FailureKind, GateRecord, GateVerdict,
    InfeasibleSource, Outcome, OutcomeError, Phase, PhaseWalls, QuotaReading, Row, Status,
    TokenUsage,
};
use crate::spec::env::check_name;
use crate::spec::{Campaign, Payload, Task};
use crate::state::{CampaignState, RenewState, StopMode, StopReason};
use crate::strict_json;
use crate::utc::UtcTime;

/// A wire message that does not convert to the domain.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid {field}: {reason}")]
pub struct ConvertError {
    pub field: String,
    pub reason: String,
}

impl ConvertError {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }

    fn id(field: &str, e: IdError) -> Self {
        Self::new(field, e.to_string())
    }

    fn missing(field: &str) -> Self {
        Self::new(field, "missing")
    }
}

macro_rules! enum_map {
    ($domain:ty, $wire:ty, $what:literal, $($d:ident <=> $w:ident),+ $(,)?) => {
        impl From<$domain> for $wire {
            fn from(v: $domain) -> Self {
                match v { $(<$domain>::$d => <$wire>::$w),+ }
            }
        }

        impl TryFrom<$wire> for $domain {
            type Error = ConvertError;
            fn try_from(v: $wire) -> Result<Self, ConvertError> {
                match v {
                    $(<$wire>::$w => Ok(<$domain>::$d),)+
                    #[allow(unreachable_patterns)]
                    _ => Err(ConvertError::new($what, "unspecified")),
                }
            }
        }
    };
}

enum_map!(Status, pb::Status, "status",
    Completed <=> Completed, Timeout <=> Timeout, MaxTurns <=> MaxTurns,
    AgentError <=> AgentError, Violation <=> Violation, InfraError <=> InfraError,
    Blocked <=> Blocked, Cancelled <=> Cancelled, NotStarted <=> NotStarted,
    Requeued <=> Requeued);

enum_map!(FailureKind, pb::FailureKind, "failure_kind",
    RateLimit <=> RateLimit, Overloaded <=> Overloaded, Auth <=> Auth,
    BootFailed <=> BootFailed, ResetUnverified <=> ResetUnverified, GuestLost <=> GuestLost,
    DriverCrash <=> DriverCrash, EvaluatorError <=> EvaluatorError,
    HarnessError <=> HarnessError, IdentityMismatch <=> IdentityMismatch,
    Preflight <=> Preflight, LeaseExpired <=> LeaseExpired);

enum_map!(Phase, pb::Phase, "phase",
    Assigned <=> Assigned, Admit <=> Admit, Boot <=> Boot, Reset <=> Reset, Gate <=> Gate,
    Agent <=> Agent, Evaluate <=> Evaluate, Publish <=> Publish);

enum_map!(StopMode, pb::StopMode, "mode", Drain <=> Drain, Cancel <=> Cancel);

enum_map!(RenewState, pb::RenewState, "renewal.state",
    Renewed <=> Renewed, Lost <=> Lost, Cancel <=> Cancel);

enum_map!(StopReason, pb::StopReason, "stop_reason",
    User <=> User, Time <=> Time, Budget <=> Budget, Auth <=> Auth, Quota <=> Quota);

enum_map!(CampaignState, pb::CampaignState, "state",
    Running <=> Running, Stopping <=> Stopping, Stopped <=> Stopped, Done <=> Done);

enum_map!(InfeasibleSource, pb::InfeasibleSource, "infeasible_source",
    Gate <=> Gate, Agent <=> Agent);

enum_map!(GateVerdict, pb::GateVerdict, "gate.verdict",
    Infeasible <=> Infeasible, Proceed <=> Proceed, Error <=> Error);

/// Reads a proto enum field, refusing values this build does not know.
pub fn wire_enum<W, D>(field: &str, raw: i32) -> Result<D, ConvertError>
where
    W: TryFrom<i32>,
    D: TryFrom<W, Error = ConvertError>,
{
    let w = W::try_from(raw)
        .map_err(|_| ConvertError::new(field, format!("unknown enum value {raw}")))?;
    D::try_from(w).map_err(|e| ConvertError::new(field, e.reason))
}

/// Reads an optional proto enum field, where 0 (unspecified) means none.
pub fn wire_enum_opt<W, D>(field: &str, raw: i32) -> Result<Option<D>, ConvertError>
where
    W: TryFrom<i32>,
    D: TryFrom<W, Error = ConvertError>,
{
    if raw == 0 {
        Ok(None)
    } else {
        wire_enum::<W, D>(field, raw).map(Some)
    }
}

impl From<&Token> for pb::Token {
    fn from(t: &Token) -> Self {
        pb::Token {
            trial_id: t.trial_id.to_string(),
            attempt: t.attempt,
            lease: String::new(),
        }
    }
}

/// The wire token of an attempt with its lease secret, as a worker sends it back.
pub fn token_with_lease(t: &Token, lease: &crate::lease::LeaseSecret) -> pb::Token {
    pb::Token {
        lease: lease.expose().to_owned(),
        ..pb::Token::from(t)
    }
}

/// The lease secret a wire token carries (empty when none).
pub fn lease_of(t: Option<&pb::Token>) -> crate::lease::LeaseSecret {
    crate::lease::LeaseSecret::new(t.map(|t| t.lease.clone()).unwrap_or_default())
}

impl TryFrom<pb::Token> for Token {
    type Error = ConvertError;
    fn try_from(t: pb::Token) -> Result<Self, ConvertError> {
        let trial_id =
            TrialId::new(t.trial_id).map_err(|e| ConvertError::id("token.trial_id", e))?;
        if t.attempt == 0 {
            return Err(ConvertError::new("token.attempt", "attempts start at 1"));
        }
        Ok(Token {
            trial_id,
            attempt: t.attempt,
        })
    }
}

/// Reads a required token field.
pub fn token(field: &str, t: Option<pb::Token>) -> Result<Token, ConvertError> {
    let t = t.ok_or_else(|| ConvertError::missing(field))?;
    Token::try_from(t).map_err(|e| ConvertError::new(e.field.replacen("token", field, 1), e.reason))
}

impl From<&NoWorkReason> for pb::NoWorkReason {
    fn from(r: &NoWorkReason) -> Self {
        match r {
            NoWorkReason::Stopped { .. } => pb::NoWorkReason::Stopped,
            NoWorkReason::Done => pb::NoWorkReason::Done,
            NoWorkReason::Phase1Pending => pb::NoWorkReason::Phase1Pending,
            NoWorkReason::QuotaWait { .. } => pb::NoWorkReason::QuotaWait,
            NoWorkReason::RateLimited { .. } => pb::NoWorkReason::RateLimited,
            NoWorkReason::BudgetReserved => pb::NoWorkReason::BudgetReserved,
            NoWorkReason::NothingReady { .. } => pb::NoWorkReason::NothingReady,
            NoWorkReason::CutoffAdmission { .. } => pb::NoWorkReason::CutoffAdmission,
            NoWorkReason::LaneExcluded => pb::NoWorkReason::LaneExcluded,
            NoWorkReason::NoMatchingArms => pb::NoWorkReason::NoMatchingArms,
            NoWorkReason::DriverRefused { .. } => pb::NoWorkReason::DriverRefused,
            NoWorkReason::NoCampaigns => pb::NoWorkReason::NoCampaigns,
            NoWorkReason::StoreUnavailable { .. } => pb::NoWorkReason::StoreUnavailable,
        }
    }
}

/// The no-work answer to a work request of `lane`: the reason, and the reason in words.
pub fn no_work(lane: String, reason: &NoWorkReason, retry_after_ms: u64) -> pb::NoWork {
    pb::NoWork {
        lane,
        detail: reason.to_string(),
        retry_after_ms,
        reason: pb::NoWorkReason::from(reason) as i32,
    }
}

/// At most this many entries in each list of a worker's offer.
const MAX_OFFER_ITEMS: usize = 1024;

/// Env names of an offer: variable names a campaign may use (reserved names are refused here
/// too, so no worker can open them).
fn offer_env(field: &str, names: &[String]) -> Result<BTreeSet<String>, ConvertError> {
    if names.len() > MAX_OFFER_ITEMS {
        return Err(ConvertError::new(field, "too many env names"));
    }
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            check_name(n)
                .map(|()| n.clone())
                .map_err(|e| ConvertError::new(format!("{field}[{i}]"), e.to_string()))
        })
        .collect()
}

/// What a registering worker runs.
pub fn worker_offer(r: &pb::Register) -> Result<WorkerOffer, ConvertError> {
    if r.drivers.len() > MAX_OFFER_ITEMS || r.campaigns.len() > MAX_OFFER_ITEMS {
        return Err(ConvertError::new(
            "register",
            "too many drivers or campaigns",
        ));
    }
    let mut drivers = BTreeMap::new();
    for (i, d) in r.drivers.iter().enumerate() {
        let name = DriverName::new(&d.name)
            .map_err(|e| ConvertError::id(&format!("register.drivers[{i}].name"), e))?;
        let env = offer_env(&format!("register.drivers[{i}].env"), &d.env)?;
        if drivers.insert(name, env).is_some() {
            return Err(ConvertError::new(
                format!("register.drivers[{i}].name"),
                "duplicate driver name",
            ));
        }
    }
    let campaigns = if r.campaigns.is_empty() {
        None
    } else {
        Some(
            r.campaigns
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    CampaignId::new(c)
                        .map_err(|e| ConvertError::id(&format!("register.campaigns[{i}]"), e))
                })
                .collect::<Result<BTreeSet<_>, _>>()?,
        )
    };
    Ok(WorkerOffer {
        drivers,
        campaign_commands: r.campaign_commands,
        command_env: offer_env("register.command_env", &r.command_env)?,
        driver_override: r.driver_override,
        campaigns,
        containers: r.containers,
    })
}

/// Writes a worker's offer into its `Register`.
pub fn register_offer(o: &WorkerOffer, r: &mut pb::Register) {
    r.drivers = o
        .drivers
        .iter()
        .map(|(name, env)| pb::DriverOffer {
            name: name.to_string(),
            env: env.iter().cloned().collect(),
        })
        .collect();
    r.campaign_commands = o.campaign_commands;
    r.command_env = o.command_env.iter().cloned().collect();
    r.driver_override = o.driver_override;
    r.containers = o.containers;
    r.campaigns = o
        .campaigns
        .iter()
        .flatten()
        .map(ToString::to_string)
        .collect();
}

impl From<ClaimGateInForce> for pb::GateInForce {
    fn from(g: ClaimGateInForce) -> Self {
        pb::GateInForce {
            gate: g.gate.as_str().to_owned(),
            detail: g.detail,
            until_epoch_ms: g.until_ms,
        }
    }
}

impl From<DriverIdentity> for pb::DriverIdentity {
    fn from(d: DriverIdentity) -> Self {
        pb::DriverIdentity {
            name: d.name,
            version: d.version,
            pins: d.pins.into_iter().collect(),
        }
    }
}

impl From<pb::DriverIdentity> for DriverIdentity {
    fn from(d: pb::DriverIdentity) -> Self {
        DriverIdentity {
            name: d.name,
            version: d.version,
            pins: d.pins.into_iter().collect(),
        }
    }
}

/// An optional RFC 3339 time: empty is none.
fn utc(field: &str, s: String) -> Result<Option<UtcTime>, ConvertError> {
    non_empty(s)
        .map(UtcTime::parse)
        .transpose()
        .map_err(|e| ConvertError::new(field, e.to_string()))
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

impl From<Outcome> for pb::Outcome {
    fn from(o: Outcome) -> Self {
        pb::Outcome {
            token: Some(pb::Token::from(&o.token)),
            lane: o.lane.into(),
            host: o.host.into(),
            worker: o.worker,
            driver: o.driver.map(Into::into),
            status: pb::Status::from(o.status) as i32,
            failure_kind: o
                .failure_kind
                .map_or(0, |k| pb::FailureKind::from(k) as i32),
            reset_epoch: o.reset_epoch,
            score: o.result.score,
            passed: o.result.passed,
            checks: o
                .result
                .checks
                .into_iter()
                .map(|c| pb::Check {
                    name: c.name,
                    passed: c.passed,
                    score: c.score,
                    detail: c.detail,
                })
                .collect(),
            runtime_outcome: o.result.runtime_outcome.unwrap_or_default(),
            infeasible_source: o
                .result
                .infeasible_source
                .map_or(0, |s| pb::InfeasibleSource::from(s) as i32),
            final_text: o.result.final_text.unwrap_or_default(),
            turns: o.result.turns.unwrap_or_default(),
            tokens: o.result.tokens.map(|t| pb::Tokens {
                input: t.input,
                output: t.output,
                cache_read: t.cache_read,
                cache_write: t.cache_write,
            }),
            cost_usd: o.result.cost_usd,
            quota: o.result.quota.map(|q| pb::Quota {
                provider: q.provider,
                utilisation: q.utilisation,
                reset_epoch: q.reset_epoch,
            }),
            walls: Some(pb::PhaseWalls {
                admit_s: o.result.walls.admit_s,
                boot_s: o.result.walls.boot_s,
                reset_s: o.result.walls.reset_s,
                gate_s: o.result.walls.gate_s,
                agent_s: o.result.walls.agent_s,
                evaluate_s: o.result.walls.evaluate_s,
                publish_s: o.result.walls.publish_s,
            }),
            lease_lost: o.record.lease_lost,
            publication_errors: o.record.publication_errors,
            artifacts: o.record.artifacts,
            started_utc: o.record.started_utc.map(String::from).unwrap_or_default(),
            ended_utc: o.record.ended_utc.map(String::from).unwrap_or_default(),
            error: o.record.error.unwrap_or_default(),
            campaign: String::new(),
            gate: o.result.gate.map(|g| pb::Gate {
                verdict: pb::GateVerdict::from(g.verdict) as i32,
                reason: g.reason.unwrap_or_default(),
                turns: g.turns,
                cost_usd: g.cost_usd,
            }),
            // Set by the lane from its attempt span; the domain outcome carries no trace.
            traceparent: String::new(),
        }
    }
}

impl TryFrom<pb::Outcome> for Outcome {
    type Error = ConvertError;
    fn try_from(o: pb::Outcome) -> Result<Self, ConvertError> {
        let token = token("outcome.token", o.token)?;
        let status: Status = wire_enum::<pb::Status, _>("outcome.status", o.status)?;
        let walls = o.walls.unwrap_or_default();
        let outcome = Outcome {
            token,
            lane: LaneName::new(o.lane).map_err(|e| ConvertError::id("outcome.lane", e))?,
            host: HostName::new(o.host).map_err(|e| ConvertError::id("outcome.host", e))?,
            worker: o.worker,
            driver: o.driver.map(Into::into),
            status,
            failure_kind: wire_enum_opt::<pb::FailureKind, _>(
                "outcome.failure_kind",
                o.failure_kind,
            )?,
            reset_epoch: o.reset_epoch,
            result: AttemptResult {
                score: o.score,
                passed: o.passed,
                checks: o
                    .checks
                    .into_iter()
                    .map(|c| Check {
                        name: c.name,
                        passed: c.passed,
                        score: c.score,
                        detail: c.detail,
                    })
                    .collect(),
                runtime_outcome: non_empty(o.runtime_outcome),
                infeasible_source: wire_enum_opt::<pb::InfeasibleSource, _>(
                    "outcome.infeasible_source",
                    o.infeasible_source,
                )?,
                gate: o
                    .gate
                    .map(|g| -> Result<GateRecord, ConvertError> {
                        Ok(GateRecord {
                            verdict: wire_enum::<pb::GateVerdict, _>(
                                "outcome.gate.verdict",
                                g.verdict,
                            )?,
                            reason: non_empty(g.reason),
                            turns: g.turns,
                            cost_usd: g.cost_usd,
                        })
                    })
                    .transpose()?,
                final_text: non_empty(o.final_text),
                turns: (o.turns > 0).then_some(o.turns),
                tokens: o.tokens.map(|t| TokenUsage {
                    input: t.input,
                    output: t.output,
                    cache_read: t.cache_read,
                    cache_write: t.cache_write,
                }),
                cost_usd: o.cost_usd,
                quota: o.quota.map(|q| QuotaReading {
                    provider: q.provider,
                    utilisation: q.utilisation,
                    reset_epoch: q.reset_epoch,
                }),
                walls: PhaseWalls {
                    admit_s: walls.admit_s,
                    boot_s: walls.boot_s,
                    reset_s: walls.reset_s,
                    gate_s: walls.gate_s,
                    agent_s: walls.agent_s,
                    evaluate_s: walls.evaluate_s,
                    publish_s: walls.publish_s,
                },
            },
            record: AttemptRecord {
                lease_lost: o.lease_lost,
                publication_errors: o.publication_errors,
                artifacts: o.artifacts,
                started_utc: utc("outcome.started_utc", o.started_utc)?,
                ended_utc: utc("outcome.ended_utc", o.ended_utc)?,
                error: non_empty(o.error),
            },
        };
        outcome.validate().map_err(|e| {
            // Name the field the rule is about, so the answer points at what to fix.
            let field = match &e {
                OutcomeError::StoreOnlyStatus(_) => "outcome.status".to_owned(),
                OutcomeError::Score { .. } => "outcome.score".to_owned(),
                OutcomeError::Kind { .. } => "outcome.failure_kind".to_owned(),
                OutcomeError::Number { field, .. } => format!("outcome.{field}"),
                OutcomeError::Figure(f) => format!("outcome.{}", f.field()),
            };
            ConvertError::new(field, e.to_string())
        })
    }
}

impl TryFrom<&Row> for pb::Row {
    type Error = ConvertError;
    fn try_from(r: &Row) -> Result<Self, ConvertError> {
        Ok(pb::Row {
            seq: r.seq,
            json: serde_json::to_string(r).map_err(|e| ConvertError::new("row", e.to_string()))?,
        })
    }
}

impl TryFrom<pb::Row> for Row {
    type Error = ConvertError;
    fn try_from(r: pb::Row) -> Result<Self, ConvertError> {
        let row: Row = serde_json::from_str(&r.json)
            .map_err(|e| ConvertError::new("row.json", e.to_string()))?;
        if row.seq != r.seq {
            return Err(ConvertError::new(
                "row.seq",
                format!("{} differs from the row's own seq {}", r.seq, row.seq),
            ));
        }
        Ok(row)
    }
}

impl From<&Task> for pb::TaskSpec {
    fn from(t: &Task) -> Self {
        pb::TaskSpec {
            id: t.id.to_string(),
            group: t.group.clone().unwrap_or_default(),
            tags: t.tags.clone(),
            timeout_s: t.timeout_s,
            max_turns: t.max_turns,
            max_cost_usd: t.max_cost_usd,
            payload_json: t.payload.json().to_owned(),
        }
    }
}

/// Converts the `i`-th task of a submission. Only what the types check (the id, the payload)
/// is checked here; the campaign rules are `validate_tasks`'s.
pub fn task_from_wire(i: usize, t: pb::TaskSpec) -> Result<Task, ConvertError> {
    let field = |f: &str| format!("tasks[{i}].{f}");
    let id = crate::ids::TaskId::new(t.id).map_err(|e| ConvertError::id(&field("id"), e))?;
    let value: serde_json::Value = if t.payload_json.is_empty() {
        serde_json::Value::Object(Default::default())
    } else {
        // Strictly: serde_json would keep the last of a repeated key.
        strict_json::from_str(&t.payload_json).map_err(|e| match e.path() {
            Some(path) => ConvertError::new(field(&format!("payload_json.{path}")), e.to_string()),
            None => ConvertError::new(field("payload_json"), e.to_string()),
        })?
    };
    let payload = Payload::from_client(&value)
        .map_err(|e| ConvertError::new(field("payload_json"), e.to_string()))?;
    Ok(Task {
        id,
        group: non_empty(t.group),
        tags: t.tags,
        timeout_s: t.timeout_s,
        max_turns: t.max_turns,
        max_cost_usd: t.max_cost_usd,
        payload,
    })
}

impl TryFrom<&Campaign> for pb::SubmitRequest {
    type Error = ConvertError;
    fn try_from(c: &Campaign) -> Result<Self, ConvertError> {
        Ok(pb::SubmitRequest {
            spec: Some(pb::submit_request::Spec::SpecJson(
                serde_json::to_string(&c.spec)
                    .map_err(|e| ConvertError::new("spec_json", e.to_string()))?,
            )),
            tasks: c.tasks.iter().map(Into::into).collect(),
        })
    }
}

impl From<Conflict> for pb::Conflict {
    fn from(c: Conflict) -> Self {
        pb::Conflict {
            field: c.field,
            recorded: c.recorded,
            submitted: c.submitted,
        }
    }
}

impl From<pb::Conflict> for Conflict {
    fn from(c: pb::Conflict) -> Self {
        Conflict {
            field: c.field,
            recorded: c.recorded,
            submitted: c.submitted,
        }
    }
}
