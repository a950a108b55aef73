//! JSON-RPC 2.0 framing for the driver protocol: one JSON object per line, no I/O.
//!
//! The lane's side uses [`encode_request`], [`encode_notification`] and [`decode`]; the
//! driver's side (the built-in sim driver) uses [`decode_request`], [`encode_response_ok`],
//! [`encode_response_err`] and [`encode_notification`], and answers a line it cannot decode
//! with [`BadRequest::rpc_error`].
//!
//! Decoding is strict: a line longer than [`MAX_LINE_BYTES`], not UTF-8, not JSON, or not a
//! JSON-RPC 2.0 object is an error. Deciding what a well-formed message *means* (an unknown
//! notification, an unknown id) is the runtime's job.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::protocol::{ErrorData, MAX_LINE_BYTES, code};

/// The longest prefix of an offending line quoted in an error message, in characters.
const QUOTE_CHARS: usize = 120;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<ErrorData>,
}

impl RpcError {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Sets `data.failure_kind` (keeping any other data).
    pub fn with_failure_kind(mut self, kind: impl Into<String>) -> Self {
        self.data
            .get_or_insert_with(ErrorData::default)
            .failure_kind = Some(kind.into());
        self
    }

    /// `data.failure_kind`, when the driver named one.
    pub fn failure_kind(&self) -> Option<&str> {
        self.data.as_ref()?.failure_kind.as_deref()
    }
}

/// A message the lane received from its driver.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// The answer to the lane's request `id`.
    Response {
        id: u64,
        result: Result<Value, RpcError>,
    },
    /// A notification; `params` is `null` when absent.
    Notification { method: String, params: Value },
    /// A request from the driver (drivers may not send requests; the runtime rejects it).
    Request { id: Value, method: String },
}

/// Why a line could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("line too long: {bytes} bytes (the limit is {MAX_LINE_BYTES})")]
    TooLong { bytes: usize },
    #[error("line is not utf-8")]
    NotUtf8,
    #[error("not json: {0}")]
    NotJson(String),
    #[error("not json-rpc 2.0: {0}")]
    NotJsonRpc(String),
}

/// A message the driver received from the lane.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// `None` for a notification.
    pub id: Option<u64>,
    pub method: String,
    /// `null` when absent; otherwise an object or an array.
    pub params: Value,
}

/// Why the driver could not decode a line as a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct BadRequest {
    /// The offending message's id, when it was an object with a valid one, so the error
    /// answer reaches the caller; `None` answers with a `null` id.
    pub id: Option<u64>,
    pub error: CodecError,
}

impl BadRequest {
    /// The JSON-RPC error that answers this line: a parse error for a line that is not
    /// JSON, an invalid request for anything else.
    pub fn rpc_error(&self) -> RpcError {
        let number = match self.error {
            CodecError::NotUtf8 | CodecError::NotJson(_) => code::PARSE_ERROR,
            CodecError::TooLong { .. } | CodecError::NotJsonRpc(_) => code::INVALID_REQUEST,
        };
        RpcError::new(number, self.error.to_string())
    }
}

/// Decodes one line from a driver (a trailing `\n` or `\r\n` is allowed).
pub fn decode(line: &[u8]) -> Result<Incoming, CodecError> {
    let (mut obj, text) = parse_object(line)?;
    check_version(&mut obj, text)?;
    let bad = |reason: &str| CodecError::NotJsonRpc(format!("{reason} in {}", quote(text)));

    if let Some(method) = obj.remove("method") {
        let Value::String(method) = method else {
            return Err(bad("\"method\" must be a string"));
        };
        if obj.contains_key("result") || obj.contains_key("error") {
            return Err(bad("a request cannot carry \"result\" or \"error\""));
        }
        return match obj.remove("id") {
            Some(id) => {
                if !matches!(id, Value::String(_) | Value::Number(_) | Value::Null) {
                    return Err(bad("\"id\" must be a number, a string or null"));
                }
                Ok(Incoming::Request { id, method })
            }
            None => {
                let params = take_params(&mut obj).map_err(&bad)?;
                Ok(Incoming::Notification { method, params })
            }
        };
    }

    let id = match obj.get("id") {
        None => return Err(bad("missing \"method\" or \"id\"")),
        Some(id) => id
            .as_u64()
            .ok_or_else(|| bad("\"id\" must be a non-negative integer"))?,
    };
    let result = match (obj.remove("result"), obj.remove("error")) {
        (Some(_), Some(_)) => return Err(bad("a response has both \"result\" and \"error\"")),
        (None, None) => return Err(bad("a response has neither \"result\" nor \"error\"")),
        (Some(result), None) => Ok(result),
        (None, Some(error)) => Err(parse_error(error).map_err(&bad)?),
    };
    Ok(Incoming::Response { id, result })
}

/// Decodes one line on the driver's side: a request or a notification. Ids must be
/// non-negative integers, which is all the lane sends.
pub fn decode_request(line: &[u8]) -> Result<Request, BadRequest> {
    let (mut obj, text) = parse_object(line).map_err(|error| BadRequest { id: None, error })?;
    // Known before anything else is checked, so every later error can answer it.
    let id = obj.get("id").and_then(Value::as_u64);
    let fail = |error| BadRequest { id, error };
    let bad = |reason: &str| {
        fail(CodecError::NotJsonRpc(format!(
            "{reason} in {}",
            quote(text)
        )))
    };

    check_version(&mut obj, text).map_err(fail)?;
    if obj.contains_key("result") || obj.contains_key("error") {
        return Err(bad("expected a request, got a response"));
    }
    let method = match obj.remove("method") {
        Some(Value::String(method)) => method,
        Some(_) => return Err(bad("\"method\" must be a string")),
        None => return Err(bad("missing \"method\"")),
    };
    let id = match obj.remove("id") {
        None => None,
        Some(_) => Some(id.ok_or_else(|| bad("\"id\" must be a non-negative integer"))?),
    };
    let params = take_params(&mut obj).map_err(&bad)?;
    Ok(Request { id, method, params })
}

/// A request line (newline-terminated).
///
/// # Panics
/// If `params` fails to serialize, which `serde_json::Value` and the protocol types never do.
pub fn encode_request<P: Serialize + ?Sized>(id: u64, method: &str, params: &P) -> String {
    #[derive(Serialize)]
    struct Request<'a, P: ?Sized> {
        jsonrpc: &'static str,
        id: u64,
        method: &'a str,
        params: &'a P,
    }
    line(&Request {
        jsonrpc: "2.0",
        id,
        method,
        params,
    })
}

/// A notification line (newline-terminated).
///
/// # Panics
/// If `params` fails to serialize, which `serde_json::Value` and the protocol types never do.
pub fn encode_notification<P: Serialize + ?Sized>(method: &str, params: &P) -> String {
    #[derive(Serialize)]
    struct Notification<'a, P: ?Sized> {
        jsonrpc: &'static str,
        method: &'a str,
        params: &'a P,
    }
    line(&Notification {
        jsonrpc: "2.0",
        method,
        params,
    })
}

/// A success response line (newline-terminated).
///
/// # Panics
/// If `result` fails to serialize, which `serde_json::Value` and the protocol types never do.
pub fn encode_response_ok<R: Serialize + ?Sized>(id: u64, result: &R) -> String {
    #[derive(Serialize)]
    struct Response<'a, R: ?Sized> {
        jsonrpc: &'static str,
        id: u64,
        result: &'a R,
    }
    line(&Response {
        jsonrpc: "2.0",
        id,
        result,
    })
}

/// An error response line (newline-terminated); a `None` id is sent as `null`, for a line
/// whose id could not be read.
pub fn encode_response_err(id: Option<u64>, error: &RpcError) -> String {
    #[derive(Serialize)]
    struct Response<'a> {
        jsonrpc: &'static str,
        id: Option<u64>,
        error: &'a RpcError,
    }
    line(&Response {
        jsonrpc: "2.0",
        id,
        error,
    })
}

fn line<T: Serialize>(message: &T) -> String {
    let mut out = serde_json::to_string(message).expect("a JSON-RPC message serializes");
    out.push('\n');
    out
}

/// Checks size, UTF-8, JSON and object-ness; returns the object and the line's text (for
/// error messages).
fn parse_object(line: &[u8]) -> Result<(Map<String, Value>, &str), CodecError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > MAX_LINE_BYTES {
        return Err(CodecError::TooLong { bytes: line.len() });
    }
    let text = std::str::from_utf8(line).map_err(|_| CodecError::NotUtf8)?;
    if text.trim().is_empty() {
        return Err(CodecError::NotJson("empty line".to_owned()));
    }
    let value: Value = serde_json::from_str(text)
        .map_err(|e| CodecError::NotJson(format!("{e} in {}", quote(text))))?;
    let Value::Object(obj) = value else {
        return Err(CodecError::NotJsonRpc(format!(
            "expected an object in {}",
            quote(text)
        )));
    };
    Ok((obj, text))
}

/// Checks (and removes) `"jsonrpc": "2.0"`.
fn check_version(obj: &mut Map<String, Value>, text: &str) -> Result<(), CodecError> {
    match obj.remove("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => Ok(()),
        Some(_) => Err(CodecError::NotJsonRpc(format!(
            "\"jsonrpc\" must be \"2.0\" in {}",
            quote(text)
        ))),
        None => Err(CodecError::NotJsonRpc(format!(
            "missing \"jsonrpc\" in {}",
            quote(text)
        ))),
    }
}

/// `params`: absent or `null` is `null`; otherwise an object or an array.
fn take_params(obj: &mut Map<String, Value>) -> Result<Value, &'static str> {
    match obj.remove("params") {
        None | Some(Value::Null) => Ok(Value::Null),
        Some(params @ (Value::Object(_) | Value::Array(_))) => Ok(params),
        Some(_) => Err("\"params\" must be an object or an array"),
    }
}

/// A JSON-RPC error object. `data` that is an object becomes [`ErrorData`] (a non-string
/// `failure_kind` stays in `extra`); any other non-null `data` is kept as `extra["value"]`.
fn parse_error(error: Value) -> Result<RpcError, &'static str> {
    let Value::Object(mut error) = error else {
        return Err("\"error\" must be an object");
    };
    let code = error
        .get("code")
        .and_then(Value::as_i64)
        .ok_or("\"error.code\" must be an integer")?;
    let message = match error.remove("message") {
        Some(Value::String(message)) => message,
        _ => return Err("\"error.message\" must be a string"),
    };
    let data = match error.remove("data") {
        None | Some(Value::Null) => None,
        Some(Value::Object(mut data)) => {
            let failure_kind = match data.remove("failure_kind") {
                Some(Value::String(kind)) => Some(kind),
                Some(Value::Null) | None => None,
                Some(other) => {
                    data.insert("failure_kind".to_owned(), other);
                    None
                }
            };
            Some(ErrorData {
                failure_kind,
                extra: data.into_iter().collect(),
            })
        }
        Some(other) => Some(ErrorData {
            failure_kind: None,
            extra: [("value".to_owned(), other)].into_iter().collect(),
        }),
    };
    Ok(RpcError {
        code,
        message,
        data,
    })
}

/// A line's first [`QUOTE_CHARS`] characters, quoted and escaped.
fn quote(text: &str) -> String {
    if text.char_indices().nth(QUOTE_CHARS).is_none() {
        return format!("{text:?}");
    }
    let mut short: String = text.chars().take(QUOTE_CHARS - 1).collect();
    short.push('…');
    format!("{short:?}")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::driver::protocol::{AttemptRef, CancelParams, code, method};

    fn not_json_rpc(line: &str) -> String {
        match decode(line.as_bytes()) {
            Err(CodecError::NotJsonRpc(reason)) => reason,
            other => panic!("expected NotJsonRpc for {line}, got {other:?}"),
        }
    }

    #[test]
    fn decodes_a_result() {
        let got = decode(br#"{"jsonrpc":"2.0","id":7,"result":{"ok":true}}"#).unwrap();
        assert_eq!(
            got,
            Incoming::Response {
                id: 7,
                result: Ok(json!({"ok": true}))
            }
        );
    }

    #[test]
    fn decodes_a_null_result() {
        let got = decode(b"{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":null}\n").unwrap();
        assert_eq!(
            got,
            Incoming::Response {
                id: 0,
                result: Ok(Value::Null)
            }
        );
    }

    #[test]
    fn accepts_crlf_and_lf_endings() {
        for line in [
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}\r\n",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}\n",
            " {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1} ",
        ] {
            assert_eq!(
                decode(line.as_bytes()).unwrap(),
                Incoming::Response {
                    id: 1,
                    result: Ok(json!(1))
                }
            );
        }
    }

    #[test]
    fn decodes_an_error_with_failure_kind() {
        let line = r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32000,"message":"slow down",
            "data":{"failure_kind":"rate_limit","reset_epoch":17}}}"#
            .replace('\n', "");
        let Incoming::Response {
            id,
            result: Err(err),
        } = decode(line.as_bytes()).unwrap()
        else {
            panic!("expected an error response");
        };
        assert_eq!(id, 3);
        assert_eq!(err.code, code::DRIVER_ERROR);
        assert_eq!(err.message, "slow down");
        assert_eq!(err.failure_kind(), Some("rate_limit"));
        assert_eq!(err.data.unwrap().extra.get("reset_epoch"), Some(&json!(17)));
    }

    #[test]
    fn error_data_of_other_shapes_is_kept() {
        let line = r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"m","data":"why"}}"#;
        let Incoming::Response {
            result: Err(err), ..
        } = decode(line.as_bytes()).unwrap()
        else {
            panic!("expected an error response");
        };
        assert_eq!(err.failure_kind(), None);
        assert_eq!(err.data.unwrap().extra.get("value"), Some(&json!("why")));

        let line = r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"m","data":{"failure_kind":5}}}"#;
        let Incoming::Response {
            result: Err(err), ..
        } = decode(line.as_bytes()).unwrap()
        else {
            panic!("expected an error response");
        };
        assert_eq!(err.failure_kind(), None);
        assert_eq!(err.data.unwrap().extra.get("failure_kind"), Some(&json!(5)));

        let line = r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"m","data":null}}"#;
        let Incoming::Response {
            result: Err(err), ..
        } = decode(line.as_bytes()).unwrap()
        else {
            panic!("expected an error response");
        };
        assert_eq!(err, RpcError::new(-1, "m"));
    }

    #[test]
    fn malformed_error_objects_are_rejected() {
        for (line, reason) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"error":"bad"}"#,
                "\"error\" must be an object",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"message":"m"}}"#,
                "\"error.code\"",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":1.5,"message":"m"}}"#,
                "\"error.code\"",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":1}}"#,
                "\"error.message\"",
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":2}}"#,
                "\"error.message\"",
            ),
        ] {
            assert!(not_json_rpc(line).contains(reason), "{line}");
        }
    }

    #[test]
    fn decodes_notifications_including_unknown_methods() {
        let got = decode(br#"{"jsonrpc":"2.0","method":"progress","params":{"turns":2}}"#);
        assert_eq!(
            got.unwrap(),
            Incoming::Notification {
                method: "progress".into(),
                params: json!({"turns": 2})
            }
        );
        let got = decode(br#"{"jsonrpc":"2.0","method":"something_new"}"#).unwrap();
        assert_eq!(
            got,
            Incoming::Notification {
                method: "something_new".into(),
                params: Value::Null
            }
        );
        let got = decode(br#"{"jsonrpc":"2.0","method":"x","params":null}"#).unwrap();
        assert_eq!(
            got,
            Incoming::Notification {
                method: "x".into(),
                params: Value::Null
            }
        );
        let got = decode(br#"{"jsonrpc":"2.0","method":"x","params":[1]}"#).unwrap();
        assert_eq!(
            got,
            Incoming::Notification {
                method: "x".into(),
                params: json!([1])
            }
        );
    }

    #[test]
    fn decodes_requests_from_the_driver() {
        for (line, id) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"boot","params":{}}"#,
                json!(1),
            ),
            (r#"{"jsonrpc":"2.0","id":"a","method":"boot"}"#, json!("a")),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"boot"}"#,
                Value::Null,
            ),
        ] {
            assert_eq!(
                decode(line.as_bytes()).unwrap(),
                Incoming::Request {
                    id,
                    method: "boot".into()
                }
            );
        }
        assert!(
            not_json_rpc(r#"{"jsonrpc":"2.0","id":{},"method":"boot"}"#).contains("\"id\" must")
        );
    }

    #[test]
    fn rejects_lines_that_are_not_json() {
        for line in [
            "hello world",
            "{\"jsonrpc\":",
            "",
            "   ",
            "Traceback (most recent call last):",
        ] {
            let err = decode(line.as_bytes()).unwrap_err();
            assert!(matches!(err, CodecError::NotJson(_)), "{line}: {err:?}");
            assert!(err.to_string().starts_with("not json: "), "{err}");
        }
        let err = decode(b"hello world").unwrap_err().to_string();
        assert!(err.contains("\"hello world\""), "{err}");
    }

    #[test]
    fn rejects_non_utf8() {
        assert_eq!(
            decode(b"{\"a\": \"\xff\xfe\"}").unwrap_err(),
            CodecError::NotUtf8
        );
        assert_eq!(
            decode_request(b"\xc3\x28").unwrap_err().error,
            CodecError::NotUtf8
        );
    }

    #[test]
    fn rejects_wrong_or_missing_version() {
        assert!(
            not_json_rpc(r#"{"jsonrpc":"1.0","id":1,"result":1}"#)
                .contains("\"jsonrpc\" must be \"2.0\"")
        );
        assert!(
            not_json_rpc(r#"{"jsonrpc":2.0,"id":1,"result":1}"#)
                .contains("\"jsonrpc\" must be \"2.0\"")
        );
        assert!(not_json_rpc(r#"{"id":1,"result":1}"#).contains("missing \"jsonrpc\""));
    }

    #[test]
    fn rejects_non_objects() {
        for line in ["[1,2]", "42", "\"x\"", "null"] {
            assert!(not_json_rpc(line).contains("expected an object"), "{line}");
        }
    }

    #[test]
    fn rejects_both_or_neither_result_and_error() {
        assert!(
            not_json_rpc(r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}"#)
                .contains("both")
        );
        assert!(not_json_rpc(r#"{"jsonrpc":"2.0","id":1}"#).contains("neither"));
    }

    #[test]
    fn rejects_non_integer_response_ids() {
        for line in [
            r#"{"jsonrpc":"2.0","id":"1","result":1}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"result":1}"#,
            r#"{"jsonrpc":"2.0","id":-1,"result":1}"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}"#,
        ] {
            assert!(not_json_rpc(line).contains("\"id\" must be"), "{line}");
        }
        assert!(not_json_rpc(r#"{"jsonrpc":"2.0","result":1}"#).contains("missing"));
    }

    #[test]
    fn rejects_bad_methods_and_params() {
        assert!(
            not_json_rpc(r#"{"jsonrpc":"2.0","method":5}"#).contains("\"method\" must be a string")
        );
        assert!(
            not_json_rpc(r#"{"jsonrpc":"2.0","method":"log","params":"x"}"#).contains("\"params\"")
        );
        assert!(
            not_json_rpc(r#"{"jsonrpc":"2.0","id":1,"method":"x","result":1}"#)
                .contains("cannot carry")
        );
    }

    #[test]
    fn rejects_oversized_lines() {
        let pad = "x".repeat(MAX_LINE_BYTES);
        let line = format!(r#"{{"jsonrpc":"2.0","id":1,"result":"{pad}"}}"#);
        let err = decode(line.as_bytes()).unwrap_err();
        assert_eq!(err, CodecError::TooLong { bytes: line.len() });
        assert!(err.to_string().starts_with("line too long: "), "{err}");
        assert_eq!(
            decode_request(line.as_bytes()).unwrap_err(),
            BadRequest {
                id: None,
                error: CodecError::TooLong { bytes: line.len() }
            }
        );

        // Exactly at the limit is fine, and the newline does not count.
        let overhead = r#"{"jsonrpc":"2.0","id":1,"result":""}"#.len();
        let pad = "x".repeat(MAX_LINE_BYTES - overhead);
        let line = format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"{pad}\"}}\n");
        assert_eq!(line.len(), MAX_LINE_BYTES + 1);
        assert!(decode(line.as_bytes()).is_ok());
    }

    #[test]
    fn quotes_only_a_short_prefix() {
        let long = "y".repeat(10_000);
        let err = decode(long.as_bytes()).unwrap_err().to_string();
        assert!(err.len() < 250, "{err}");
        assert!(err.contains('…'), "{err}");

        assert_eq!(quote("abc"), "\"abc\"");
        let exact = "é".repeat(QUOTE_CHARS);
        assert_eq!(quote(&exact), format!("{exact:?}"));
        let over = "é".repeat(QUOTE_CHARS + 1);
        let quoted = quote(&over);
        assert_eq!(quoted.chars().count(), QUOTE_CHARS + 2);
        assert!(quoted.ends_with("…\""));
    }

    #[test]
    fn request_round_trip() {
        let params = CancelParams { tag: "t-1".into() };
        let line = encode_request(42, method::CANCEL, &params);
        assert!(line.ends_with('\n'));
        assert_eq!(line.matches('\n').count(), 1);
        let got = decode_request(line.as_bytes()).unwrap();
        assert_eq!(got.id, Some(42));
        assert_eq!(got.method, "cancel");
        assert_eq!(
            serde_json::from_value::<CancelParams>(got.params).unwrap(),
            params
        );

        // The lane's decoder sees a request (which the runtime refuses).
        assert_eq!(
            decode(line.as_bytes()).unwrap(),
            Incoming::Request {
                id: json!(42),
                method: "cancel".into()
            }
        );
    }

    #[test]
    fn notification_round_trip() {
        let attempt = AttemptRef {
            campaign: "c".into(),
            trial_id: "t\nwith newline".into(),
            attempt: 1,
            tag: "x".into(),
            traceparent: String::new(),
        };
        let line = encode_notification("progress", &attempt);
        assert_eq!(
            line.matches('\n').count(),
            1,
            "embedded newlines are escaped"
        );
        let Incoming::Notification { method, params } = decode(line.as_bytes()).unwrap() else {
            panic!("expected a notification");
        };
        assert_eq!(method, "progress");
        assert_eq!(
            serde_json::from_value::<AttemptRef>(params.clone()).unwrap(),
            attempt
        );
        assert_eq!(
            decode_request(line.as_bytes()).unwrap(),
            Request {
                id: None,
                method,
                params
            }
        );
    }

    #[test]
    fn response_round_trips() {
        let line = encode_response_ok(9, &json!({"verified": true}));
        assert_eq!(
            decode(line.as_bytes()).unwrap(),
            Incoming::Response {
                id: 9,
                result: Ok(json!({"verified": true}))
            }
        );
        let line = encode_response_ok(10, &());
        assert_eq!(
            decode(line.as_bytes()).unwrap(),
            Incoming::Response {
                id: 10,
                result: Ok(Value::Null)
            }
        );

        for err in [
            RpcError::new(code::METHOD_NOT_FOUND, "no such method: fly"),
            RpcError::new(code::DRIVER_ERROR, "provider says no").with_failure_kind("overloaded"),
        ] {
            let line = encode_response_err(Some(11), &err);
            assert!(line.ends_with('\n'));
            assert_eq!(
                decode(line.as_bytes()).unwrap(),
                Incoming::Response {
                    id: 11,
                    result: Err(err.clone())
                }
            );
        }
        let plain = encode_response_err(Some(1), &RpcError::new(1, "m"));
        assert!(!plain.contains("data"), "{plain}");
        let anonymous = encode_response_err(None, &RpcError::new(1, "m"));
        let value: Value = serde_json::from_str(&anonymous).unwrap();
        assert_eq!(value["id"], Value::Null);
    }

    #[test]
    fn decode_request_rejects_responses_and_bad_ids() {
        let reason = |line: &str| match decode_request(line.as_bytes()) {
            Err(BadRequest {
                error: CodecError::NotJsonRpc(reason),
                ..
            }) => reason,
            other => panic!("expected NotJsonRpc for {line}, got {other:?}"),
        };
        assert!(reason(&encode_response_ok(1, &1)).contains("got a response"));
        assert!(reason(r#"{"jsonrpc":"2.0","id":"1","method":"boot"}"#).contains("\"id\""));
        assert!(reason(r#"{"jsonrpc":"2.0","id":1}"#).contains("missing \"method\""));
        assert!(reason(r#"{"jsonrpc":"2.0","method":true}"#).contains("\"method\""));
        assert!(reason(r#"{"jsonrpc":"2.0","method":"x","params":1}"#).contains("\"params\""));
        assert!(reason(r#"{"jsonrpc":"1.0","method":"x"}"#).contains("2.0"));
        assert!(matches!(
            decode_request(b"nope"),
            Err(BadRequest {
                id: None,
                error: CodecError::NotJson(_)
            })
        ));
    }

    #[test]
    fn a_bad_request_keeps_its_id_and_maps_to_a_json_rpc_code() {
        let bad = |line: &str| decode_request(line.as_bytes()).unwrap_err();
        for (line, id, number) in [
            ("{not json", None, code::PARSE_ERROR),
            ("[1, 2]", None, code::INVALID_REQUEST),
            (
                r#"{"id": 3, "method": "health"}"#,
                Some(3),
                code::INVALID_REQUEST,
            ),
            (
                r#"{"jsonrpc":"2.0","id":4}"#,
                Some(4),
                code::INVALID_REQUEST,
            ),
            (
                r#"{"jsonrpc":"2.0","id":5,"method":7}"#,
                Some(5),
                code::INVALID_REQUEST,
            ),
            (
                r#"{"jsonrpc":"2.0","id":"6","method":"x"}"#,
                None,
                code::INVALID_REQUEST,
            ),
        ] {
            let err = bad(line);
            assert_eq!(err.id, id, "{line}");
            let rpc = err.rpc_error();
            assert_eq!(rpc.code, number, "{line}");
            assert_eq!(rpc.message, err.error.to_string());
        }
        let long = "x".repeat(MAX_LINE_BYTES + 1);
        assert_eq!(bad(&long).rpc_error().code, code::INVALID_REQUEST);
        assert_eq!(
            decode_request(b"\xff").unwrap_err().rpc_error().code,
            code::PARSE_ERROR
        );
    }
}
