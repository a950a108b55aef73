//! W3C trace context (`traceparent`) of attempts. An attempt's trace id and root span id are
//! derived from its campaign, trial and attempt number, so every coordinator replica, the
//! lane and the store agree on them without storing or sending anything more: a row names its
//! trace, and a retry links to the attempt before it, from the token alone.

use std::fmt;

use sha2::{Digest, Sha256};

/// A parsed `traceparent` (version 00): trace id, parent span id and the sampled flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

/// Why a `traceparent` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceParentError {
    #[error("traceparent must be 55 characters `00-<32 hex>-<16 hex>-<2 hex>`, got {0} characters")]
    Length(usize),
    #[error("traceparent is not `00-<32 hex>-<16 hex>-<2 hex>`")]
    Format,
    #[error("traceparent has an all-zero trace id or span id")]
    Zero,
}

impl TraceParent {
    /// The context of attempt `attempt` of `trial_id`: the root (`claim`) span of its trace.
    pub fn of_attempt(campaign: &str, trial_id: &str, attempt: u32) -> Self {
        // SHA-256 of `<campaign>:<trial_id>:<attempt>`, fed in pieces: no string is built
        // (this runs for every claim, row and span).
        let mut digits = [0u8; 10];
        let d = Sha256::new()
            .chain_update(campaign)
            .chain_update(b":")
            .chain_update(trial_id)
            .chain_update(b":")
            .chain_update(decimal(attempt, &mut digits))
            .finalize();
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        trace_id.copy_from_slice(&d[..16]);
        span_id.copy_from_slice(&d[16..24]);
        Self {
            trace_id,
            span_id,
            sampled: true,
        }
    }

    /// Parses a version-00 `traceparent`; an empty string is "none".
    pub fn parse_opt(s: &str) -> Result<Option<Self>, TraceParentError> {
        if s.is_empty() {
            Ok(None)
        } else {
            s.parse().map(Some)
        }
    }

    /// The trace id as 32 lowercase hex digits, as trace UIs and OTLP JSON show it.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }

    pub fn span_id_hex(&self) -> String {
        hex(&self.span_id)
    }
}

/// The trace id of attempt `attempt` (none for attempt 0: a trial that never started).
pub fn attempt_trace_id(campaign: &str, trial_id: &str, attempt: u32) -> Option<String> {
    (attempt > 0).then(|| TraceParent::of_attempt(campaign, trial_id, attempt).trace_id_hex())
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `00-<32 hex>-<16 hex>-<flags>`, written into one buffer.
        let mut out = *b"00-................................-................-00";
        hex_into(&self.trace_id, &mut out[3..35]);
        hex_into(&self.span_id, &mut out[36..52]);
        if self.sampled {
            out[54] = b'1';
        }
        f.write_str(std::str::from_utf8(&out).expect("hex digits and dashes are ASCII"))
    }
}

impl std::str::FromStr for TraceParent {
    type Err = TraceParentError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 55 {
            return Err(TraceParentError::Length(s.len()));
        }
        let parts: Vec<&str> = s.split('-').collect();
        let [version, trace, span, flags] = parts.as_slice() else {
            return Err(TraceParentError::Format);
        };
        if *version != "00" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
            return Err(TraceParentError::Format);
        }
        let mut trace_id = [0u8; 16];
        let mut span_id = [0u8; 8];
        unhex(trace, &mut trace_id)?;
        unhex(span, &mut span_id)?;
        let mut flag = [0u8; 1];
        unhex(flags, &mut flag)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return Err(TraceParentError::Zero);
        }
        Ok(Self {
            trace_id,
            span_id,
            sampled: flag[0] & 1 == 1,
        })
    }
}

/// `n` in decimal, written at the end of `buf`: the digits.
fn decimal(mut n: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// `bytes` as lowercase hex into `out` (twice as long).
fn hex_into(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0x0f)];
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0u8; 2 * bytes.len()];
    hex_into(bytes, &mut out);
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// Lowercase hex only, as W3C requires.
fn unhex(s: &str, out: &mut [u8]) -> Result<(), TraceParentError> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err(TraceParentError::Format),
    };
    for (o, pair) in out.iter_mut().zip(s.as_bytes().chunks(2)) {
        *o = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attempt_context_round_trips_and_is_stable() {
        let tp = TraceParent::of_attempt("c1", "t.r0.a", 2);
        let s = tp.to_string();
        assert_eq!(s.len(), 55);
        assert!(s.starts_with("00-") && s.ends_with("-01"), "{s}");
        assert_eq!(s.parse::<TraceParent>().unwrap(), tp);
        assert_eq!(TraceParent::of_attempt("c1", "t.r0.a", 2), tp);
        assert_ne!(
            TraceParent::of_attempt("c1", "t.r0.a", 3).trace_id,
            tp.trace_id
        );
        assert_eq!(
            attempt_trace_id("c1", "t.r0.a", 2).as_deref(),
            Some(tp.trace_id_hex().as_str())
        );
        assert_eq!(attempt_trace_id("c1", "t.r0.a", 0), None);
        // Pinned: rows and spans of stored campaigns name these ids (SHA-256 of
        // `c1:t.r0.a:2`, and of `camp-x:t9.r12.b:4294967295`).
        assert_eq!(s, "00-d3285fa541c75305d09d54c0cad4b807-2e20b4241684d335-01");
        assert_eq!(
            TraceParent::of_attempt("camp-x", "t9.r12.b", u32::MAX).to_string(),
            "00-f0ef072a98999f8c37d4a7043923da8f-3e42154242a91b24-01"
        );
        let unsampled = TraceParent {
            sampled: false,
            ..tp
        };
        assert_eq!(
            unsampled.to_string(),
            "00-d3285fa541c75305d09d54c0cad4b807-2e20b4241684d335-00"
        );
        assert_eq!(tp.span_id_hex(), "2e20b4241684d335");
        let mut digits = [0u8; 10];
        assert_eq!(decimal(0, &mut digits), b"0");
        assert_eq!(decimal(1_000_000_007, &mut digits), b"1000000007");
    }

    #[test]
    fn malformed_traceparents_are_refused_with_the_reason() {
        let ok = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let tp: TraceParent = ok.parse().unwrap();
        assert!(tp.sampled);
        assert_eq!(tp.to_string(), ok);
        assert_eq!(TraceParent::parse_opt("").unwrap(), None);
        for (bad, want) in [
            ("00-abc", TraceParentError::Length(6)),
            (
                "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                TraceParentError::Format,
            ),
            (
                "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
                TraceParentError::Format,
            ),
            (
                "00-00000000000000000000000000000000-b7ad6b7169203331-01",
                TraceParentError::Zero,
            ),
            (
                "00_0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                TraceParentError::Format,
            ),
        ] {
            assert_eq!(bad.parse::<TraceParent>().unwrap_err(), want, "{bad}");
        }
    }
}
