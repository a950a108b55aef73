//! `driver_codec`: the driver protocol's line codec (`driver::codec`) and message types
//! (`driver::protocol`), both ways.
//!
//! - The input as a line from a driver (`codec::decode`, what the lane runs on every line of
//!   a driver's stdout), and as a line from the lane (`codec::decode_request`, what the sim
//!   driver runs). What decodes must encode to a line that decodes the same; what does not
//!   decode is answered with an error line; a result or notification is then read as the type
//!   the lane expects, and a request's params as the type its method takes.
//! - The input as the makings of the messages the lane and a driver send (`arbitrary`):
//!   each encodes to one line that decodes back to the same message, and a typed message
//!   reads back as itself.

use std::collections::BTreeMap;
use std::fmt::Debug;

use arbitrary::{Arbitrary, Unstructured};
use lanes_common::row::{Check, DriverIdentity, FailureKind, QuotaReading, TokenUsage};
use lanes_worker::driver::codec::{self, Incoming};
use lanes_worker::driver::protocol::{
    AgentParams, AgentResult, AgentStatus, AttemptRef, CancelParams, EnvParams, EnvResult,
    EvaluateResult, GateResult, HealthResult, InitializeParams, LogParams, MAX_LINE_BYTES,
    PROTOCOL, ProgressParams, TeardownParams, method,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub fn fuzz_one(data: &[u8]) {
    from_a_driver(data);
    from_the_lane(data);
    let _ = encoded(&mut Unstructured::new(data));
}

/// A line fits when it is within the limit once its newline is dropped.
fn fits(line: &str) -> bool {
    line.len() <= MAX_LINE_BYTES + 1
}

fn from_a_driver(line: &[u8]) {
    let Ok(incoming) = codec::decode(line) else {
        return;
    };
    let again = match &incoming {
        Incoming::Response { id, result: Ok(v) } => codec::encode_response_ok(*id, v),
        Incoming::Response { id, result: Err(e) } => codec::encode_response_err(Some(*id), e),
        Incoming::Notification { method, params } => codec::encode_notification(method, params),
        // The lane refuses a request from a driver; there is nothing to answer.
        Incoming::Request { .. } => return,
    };
    if fits(&again) {
        assert_eq!(
            codec::decode(again.as_bytes()).as_ref(),
            Ok(&incoming),
            "a driver's message changed when encoded again: {again}"
        );
    }
    match incoming {
        // The lane reads a result as the type of the call it answers (`DriverProcess::call`).
        Incoming::Response { result: Ok(v), .. } => {
            typed::<DriverIdentity>(&v);
            typed::<EnvResult>(&v);
            typed::<GateResult>(&v);
            typed::<AgentResult>(&v);
            typed::<EvaluateResult>(&v);
            typed::<HealthResult>(&v);
        }
        Incoming::Response { result: Err(e), .. } => {
            let _ = e.failure_kind().map(str::parse::<FailureKind>);
        }
        Incoming::Notification { params, .. } => {
            typed::<ProgressParams>(&params);
            typed::<LogParams>(&params);
        }
        Incoming::Request { .. } => {}
    }
}

fn from_the_lane(line: &[u8]) {
    match codec::decode_request(line) {
        Ok(request) => {
            let again = match request.id {
                Some(id) => codec::encode_request(id, &request.method, &request.params),
                None => codec::encode_notification(&request.method, &request.params),
            };
            if fits(&again) {
                assert_eq!(
                    codec::decode_request(again.as_bytes()).as_ref(),
                    Ok(&request),
                    "a lane's message changed when encoded again: {again}"
                );
            }
            // The driver reads the params as its method's type.
            let p = &request.params;
            match request.method.as_str() {
                method::INITIALIZE => typed::<InitializeParams>(p),
                method::BOOT | method::RESET | method::GATE | method::DECLARE_INFEASIBLE => {
                    typed::<EnvParams>(p)
                }
                method::RUN_AGENT | method::EVALUATE => {
                    typed::<AgentParams>(p);
                    typed::<EnvParams>(p);
                }
                method::TEARDOWN => typed::<TeardownParams>(p),
                method::CANCEL => typed::<CancelParams>(p),
                _ => {}
            }
        }
        Err(bad) => {
            // The driver answers the line with this error; the lane must read the answer as
            // the error of its call, when the line's id could be read.
            let error = bad.rpc_error();
            let answer = codec::encode_response_err(bad.id, &error);
            match (bad.id, codec::decode(answer.as_bytes())) {
                (Some(id), got) => assert_eq!(
                    got,
                    Ok(Incoming::Response {
                        id,
                        result: Err(error)
                    }),
                    "{answer}"
                ),
                (None, got) => assert!(got.is_err(), "an answer to no id decoded: {answer}"),
            }
        }
    }
}

/// `v` read as a `T` (the runtime's `serde_json::from_value`), then written and read again:
/// the same `T`.
fn typed<T: Serialize + DeserializeOwned + PartialEq + Debug>(v: &Value) {
    if let Ok(t) = serde_json::from_value::<T>(v.clone()) {
        let written = serde_json::to_value(&t).expect("a protocol type serializes");
        let back = serde_json::from_value::<T>(written.clone())
            .unwrap_or_else(|e| panic!("{written} does not read back: {e}"));
        assert_eq!(back, t, "a protocol value changed through JSON");
    }
}

/// The messages both sides send, built from the input: each one line that reads back.
fn encoded(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let id = u64::arbitrary(u)?;
    match u.int_in_range(0..=10)? {
        0 => request(
            id,
            method::INITIALIZE,
            &InitializeParams {
                protocol: PROTOCOL.to_owned(),
                lane: String::arbitrary(u)?,
                host: String::arbitrary(u)?,
                // `null` is no sim config, and reads back as none.
                sim: option(u, value)?.filter(|v| !v.is_null()),
            },
        ),
        1 => {
            let name = *u.choose(&[
                method::BOOT,
                method::RESET,
                method::GATE,
                method::DECLARE_INFEASIBLE,
                method::EVALUATE,
            ])?;
            request(id, name, &env_params(u)?)
        }
        2 => {
            let env = env_params(u)?;
            let params = AgentParams {
                attempt: env.attempt,
                task: env.task,
                arm: env.arm,
                arm_config: value(u)?,
                payload: env.payload,
                seed: env.seed,
                timeout_s: u32::arbitrary(u)?,
                max_turns: u32::arbitrary(u)?,
                max_cost_usd: option(u, finite)?,
            };
            request(id, method::RUN_AGENT, &params)
        }
        3 => request(
            id,
            method::TEARDOWN,
            &TeardownParams {
                lane: String::arbitrary(u)?,
                tag: Option::<String>::arbitrary(u)?,
            },
        ),
        4 => notification(
            method::CANCEL,
            &CancelParams {
                tag: String::arbitrary(u)?,
            },
        ),
        5 => notification(
            method::PROGRESS,
            &ProgressParams {
                tag: String::arbitrary(u)?,
                turns: Option::<u32>::arbitrary(u)?,
                message: Option::<String>::arbitrary(u)?,
            },
        ),
        6 => notification(
            method::LOG,
            &LogParams {
                level: String::arbitrary(u)?,
                message: String::arbitrary(u)?,
            },
        ),
        7 => answer(
            id,
            &DriverIdentity {
                name: String::arbitrary(u)?,
                version: String::arbitrary(u)?,
                pins: BTreeMap::<String, String>::arbitrary(u)?,
            },
        ),
        8 => answer(id, &agent_result(u)?),
        9 => answer(
            id,
            &EvaluateResult {
                score: finite(u)?,
                passed: bool::arbitrary(u)?,
                checks: (0..u.int_in_range(0..=3)?)
                    .map(|_| {
                        Ok(Check {
                            name: String::arbitrary(u)?,
                            passed: bool::arbitrary(u)?,
                            score: option(u, finite)?,
                            detail: String::arbitrary(u)?,
                        })
                    })
                    .collect::<arbitrary::Result<_>>()?,
            },
        ),
        _ => {
            answer(
                id,
                &EnvResult {
                    verified: bool::arbitrary(u)?,
                    health_url: Option::<String>::arbitrary(u)?,
                    pins: std::collections::BTreeMap::<String, String>::arbitrary(u)?,
                },
            );
            answer(
                id,
                &GateResult {
                    infeasible: bool::arbitrary(u)?,
                    turns: u32::arbitrary(u)?,
                    reason: Option::<String>::arbitrary(u)?,
                    cost_usd: option(u, finite)?,
                },
            )
        }
    }
    Ok(())
}

/// A request of the lane: one line, which the driver decodes to the same id, method and
/// params, and which the lane's own decoder sees as a request.
fn request<P: Serialize + DeserializeOwned + PartialEq + Debug>(id: u64, name: &str, params: &P) {
    let line = codec::encode_request(id, name, params);
    assert_eq!(line.matches('\n').count(), 1, "{line}");
    assert!(line.ends_with('\n'));
    let got = codec::decode_request(line.as_bytes())
        .unwrap_or_else(|e| panic!("the lane's request does not decode: {e}: {line}"));
    assert_eq!((got.id, got.method.as_str()), (Some(id), name));
    let back: P = serde_json::from_value(got.params)
        .unwrap_or_else(|e| panic!("the lane's params do not read back: {e}: {line}"));
    assert_eq!(&back, params, "{line}");
    assert!(matches!(
        codec::decode(line.as_bytes()),
        Ok(Incoming::Request { .. })
    ));
}

/// A notification (from either side): one line that decodes on both.
fn notification<P: Serialize + DeserializeOwned + PartialEq + Debug>(name: &str, params: &P) {
    let line = codec::encode_notification(name, params);
    assert_eq!(line.matches('\n').count(), 1, "{line}");
    let Ok(Incoming::Notification { method, params: v }) = codec::decode(line.as_bytes()) else {
        panic!("a notification does not decode: {line}");
    };
    assert_eq!(method, name);
    let request = codec::decode_request(line.as_bytes()).expect("a notification decodes");
    assert_eq!((request.id, &request.params), (None, &v));
    let back: P = serde_json::from_value(v).expect("a notification's params read back");
    assert_eq!(&back, params, "{line}");
}

/// A driver's answer: one line the lane decodes to the same value. The lane may refuse the
/// value as its type (figures past their limits); what it takes is what was sent.
fn answer<R: Serialize + DeserializeOwned + PartialEq + Debug>(id: u64, result: &R) {
    let line = codec::encode_response_ok(id, result);
    assert_eq!(line.matches('\n').count(), 1, "{line}");
    let want = serde_json::to_value(result).expect("a result serializes");
    match codec::decode(line.as_bytes()) {
        Ok(Incoming::Response {
            id: got,
            result: Ok(v),
        }) => {
            assert_eq!((got, &v), (id, &want), "{line}");
            if let Ok(back) = serde_json::from_value::<R>(v) {
                assert_eq!(&back, result, "{line}");
            }
        }
        other => panic!("a driver's answer decodes as {other:?}: {line}"),
    }
}

fn env_params(u: &mut Unstructured<'_>) -> arbitrary::Result<EnvParams> {
    Ok(EnvParams {
        attempt: AttemptRef {
            campaign: String::arbitrary(u)?,
            trial_id: String::arbitrary(u)?,
            attempt: u32::arbitrary(u)?,
            tag: String::arbitrary(u)?,
            traceparent: String::arbitrary(u)?,
        },
        task: String::arbitrary(u)?,
        arm: String::arbitrary(u)?,
        seed: u64::arbitrary(u)?,
        payload: value(u)?,
        task_dir: Option::<String>::arbitrary(u)?,
        attempt_dir: Option::<String>::arbitrary(u)?,
    })
}

fn agent_result(u: &mut Unstructured<'_>) -> arbitrary::Result<AgentResult> {
    let status = *u.choose(&[
        AgentStatus::Completed,
        AgentStatus::Timeout,
        AgentStatus::MaxTurns,
        AgentStatus::AgentError,
        AgentStatus::Violation,
        AgentStatus::InfraError,
        AgentStatus::Cancelled,
    ])?;
    Ok(AgentResult {
        status,
        failure_kind: option(u, |u| u.choose(FailureKind::ALL).copied())?,
        reset_epoch: Option::<i64>::arbitrary(u)?,
        runtime_outcome: Option::<String>::arbitrary(u)?,
        infeasible: bool::arbitrary(u)?,
        final_text: Option::<String>::arbitrary(u)?,
        turns: Option::<u32>::arbitrary(u)?,
        tokens: option(u, |u| {
            Ok(TokenUsage {
                input: u64::arbitrary(u)?,
                output: u64::arbitrary(u)?,
                cache_read: u64::arbitrary(u)?,
                cache_write: u64::arbitrary(u)?,
            })
        })?,
        cost_usd: option(u, finite)?,
        quota: option(u, |u| {
            Ok(QuotaReading {
                provider: String::arbitrary(u)?,
                utilisation: finite(u)?,
                reset_epoch: Option::<i64>::arbitrary(u)?,
            })
        })?,
        error: Option::<String>::arbitrary(u)?,
    })
}

fn option<T>(
    u: &mut Unstructured<'_>,
    f: impl FnOnce(&mut Unstructured<'_>) -> arbitrary::Result<T>,
) -> arbitrary::Result<Option<T>> {
    Ok(if bool::arbitrary(u)? {
        Some(f(u)?)
    } else {
        None
    })
}

/// A finite number: JSON has no other (the lane never sends NaN or infinities; a campaign's
/// numbers are checked to be finite).
fn finite(u: &mut Unstructured<'_>) -> arbitrary::Result<f64> {
    let f = f64::arbitrary(u)?;
    Ok(if f.is_finite() { f } else { 0.0 })
}

/// Any JSON value, a few levels deep.
fn value(u: &mut Unstructured<'_>) -> arbitrary::Result<Value> {
    json(u, 3)
}

fn json(u: &mut Unstructured<'_>, depth: u32) -> arbitrary::Result<Value> {
    let most = if depth == 0 { 4 } else { 6 };
    Ok(match u.int_in_range(0..=most)? {
        0 => Value::Null,
        1 => Value::Bool(bool::arbitrary(u)?),
        2 => Value::from(i64::arbitrary(u)?),
        3 => Value::from(finite(u)?),
        4 => Value::String(String::arbitrary(u)?),
        5 => Value::Array(
            (0..u.int_in_range(0..=3)?)
                .map(|_| json(u, depth - 1))
                .collect::<arbitrary::Result<_>>()?,
        ),
        _ => Value::Object(
            (0..u.int_in_range(0..=3)?)
                .map(|_| Ok((String::arbitrary(u)?, json(u, depth - 1)?)))
                .collect::<arbitrary::Result<_>>()?,
        ),
    })
}
