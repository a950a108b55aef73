//! The hot records' stored form since Redis layout 5: trial states, leases, token records and
//! block states in a compact binary encoding instead of JSON; since layout 6, a trial's
//! [`TrialRecord`] holds its state, lease and token records in one field.
//!
//! Every claim and completion reads and writes several of these records, and their JSON (field
//! names, escaping, number formatting, the allocations of both) was about a sixth of the
//! store's client CPU per claim+complete cycle. Layouts up to 4 stored them as JSON objects,
//! which always start with `{`; a binary record starts with its kind's tag, a byte below
//! `0x20`, so [`decode`] reads both, and a migrated store's records stay JSON until a commit
//! writes them again.
//!
//! The encoding is the tag, then each field in declaration order: integers as LEB128 varints
//! (`i64` zigzag-encoded first), `f64` as 8 bytes little-endian, `bool` as one byte `0` or
//! `1`, an `Option` as a byte `0` (none) or `1` followed by the value, strings as a varint
//! length and UTF-8 bytes, and names (phases, exclusion reasons) as their ledger spelling.
//! A trial record is its state, its lease as an option, then its token records as a count
//! and an option each (attempt 1 first), each part encoded as its own record without the tag.
//! Two fields have a byte of their own instead: a placement (`0` any, `1` another lane, `2`
//! another host, then the name) and a block's phase-2 verdict (`0` none yet, `1` started, `2`
//! refused, then the refusal as its exclusion reason). Decoding is strict: every byte used,
//! every varint in its shortest form and within its field's type, every marker byte one the
//! encoding writes, every string UTF-8, every name and id in its one valid spelling. So bytes
//! that decode are exactly what encoding the record gives back ([`reencode`], which the
//! `hot_record` fuzz target checks).

use serde::Serialize;
use serde::de::DeserializeOwned;

use lanes_common::ids::{HostName, LaneName, Token, TrialId};
use lanes_common::policy::{Placement, TrialHistory};
use lanes_common::row::{ExcludedReason, Phase};

use crate::store::api::CompleteAck;
use crate::store::model::{
    BlockState, FinalMark, Lease, Phase2Verdict, Queued, TokenRecord, TrialState,
};

/// Why stored bytes are not a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("a {kind} record is cut off at byte {at}")]
    Cut { kind: &'static str, at: usize },
    #[error("a {kind} record has {extra} bytes past its end")]
    Trailing { kind: &'static str, extra: usize },
    #[error("a {kind} record has a bad {what} at byte {at}")]
    Bad {
        kind: &'static str,
        what: &'static str,
        at: usize,
    },
    #[error("a {kind} record starts with byte {tag:#04x}, neither its tag nor JSON")]
    Tag { kind: &'static str, tag: u8 },
    #[error("a {kind} record in JSON: {error}")]
    Json { kind: &'static str, error: String },
    #[error("a stored record is empty")]
    Empty,
}

/// A record with a binary form of its own.
pub(crate) trait Record: Sized + Serialize + DeserializeOwned {
    /// Its kind's first byte (below `0x20`: never the start of JSON).
    const TAG: u8;
    /// Its kind, as errors name it.
    const KIND: &'static str;
    fn put(&self, w: &mut Writer);
    fn get(r: &mut Reader<'_>) -> Result<Self, RecordError>;
}

/// A trial's record since layout 6: its state with its lease and its tokens' records, so a
/// claim or a completion writes one field of one hash for the trial, not three. Layout 5
/// stored the three apart (`trials`, `leases`, `tokens`), and a trial stored that way keeps
/// its lease and token records there until a commit next writes it (`tx/fold.rs`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub(crate) struct TrialRecord {
    pub state: TrialState,
    pub lease: Option<Lease>,
    /// Token records by attempt: attempt 1 first.
    pub tokens: Vec<Option<TokenRecord>>,
}

/// `record` in its stored form.
pub(crate) fn encode<T: Record>(record: &T) -> Vec<u8> {
    let mut w = Writer(Vec::with_capacity(64));
    w.0.push(T::TAG);
    record.put(&mut w);
    w.0
}

/// A stored record, binary or (written by layout 4 or older) JSON.
pub(crate) fn decode<T: Record>(bytes: &[u8]) -> Result<T, RecordError> {
    match bytes.first() {
        None => Err(RecordError::Empty),
        Some(&tag) if tag == T::TAG => {
            let mut r = Reader {
                kind: T::KIND,
                bytes,
                at: 1,
            };
            let record = T::get(&mut r)?;
            match bytes.len() - r.at {
                0 => Ok(record),
                extra => Err(RecordError::Trailing {
                    kind: T::KIND,
                    extra,
                }),
            }
        }
        Some(b'{') => serde_json::from_slice(bytes).map_err(|e| RecordError::Json {
            kind: T::KIND,
            error: e.to_string(),
        }),
        Some(&tag) => Err(RecordError::Tag { kind: T::KIND, tag }),
    }
}

/// The stored form of whatever record `bytes` hold, decoded and encoded again: for a binary
/// record, exactly `bytes`. For the fuzz target and the tests.
pub fn reencode(bytes: &[u8]) -> Result<Vec<u8>, RecordError> {
    fn again<T: Record>(bytes: &[u8]) -> Result<Vec<u8>, RecordError> {
        decode::<T>(bytes).map(|r| encode(&r))
    }
    match bytes.first() {
        Some(&TrialState::TAG) => again::<TrialState>(bytes),
        Some(&Lease::TAG) => again::<Lease>(bytes),
        Some(&TokenRecord::TAG) => again::<TokenRecord>(bytes),
        Some(&BlockState::TAG) => again::<BlockState>(bytes),
        Some(&TrialRecord::TAG) => again::<TrialRecord>(bytes),
        Some(&tag) => Err(RecordError::Tag { kind: "hot", tag }),
        None => Err(RecordError::Empty),
    }
}

/// What stored JSON (layout 4 or older) reads as, in binary: one encoding for each kind of
/// record the bytes decode as. For the fuzz target.
pub fn from_older_json(bytes: &[u8]) -> Vec<Vec<u8>> {
    fn binary<T: Record>(bytes: &[u8]) -> Option<Vec<u8>> {
        decode::<T>(bytes).ok().map(|r| encode(&r))
    }
    if bytes.first() != Some(&b'{') {
        return Vec::new();
    }
    [
        binary::<TrialState>(bytes),
        binary::<Lease>(bytes),
        binary::<TokenRecord>(bytes),
        binary::<BlockState>(bytes),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// A binary record as `(kind, JSON)`, for dumps a reader can follow (the layout fixtures).
pub fn to_json(bytes: &[u8]) -> Result<(&'static str, serde_json::Value), RecordError> {
    fn json<T: Record>(bytes: &[u8]) -> Result<(&'static str, serde_json::Value), RecordError> {
        let record = decode::<T>(bytes)?;
        let value = serde_json::to_value(&record).map_err(|e| RecordError::Json {
            kind: T::KIND,
            error: e.to_string(),
        })?;
        Ok((T::KIND, value))
    }
    match bytes.first() {
        Some(&TrialState::TAG) => json::<TrialState>(bytes),
        Some(&Lease::TAG) => json::<Lease>(bytes),
        Some(&TokenRecord::TAG) => json::<TokenRecord>(bytes),
        Some(&BlockState::TAG) => json::<BlockState>(bytes),
        Some(&TrialRecord::TAG) => json::<TrialRecord>(bytes),
        Some(&tag) => Err(RecordError::Tag { kind: "hot", tag }),
        None => Err(RecordError::Empty),
    }
}

/// The binary record of `kind` that [`to_json`] showed as `value`.
pub fn from_json(kind: &str, value: &serde_json::Value) -> Result<Vec<u8>, RecordError> {
    fn binary<T: Record>(value: &serde_json::Value) -> Result<Vec<u8>, RecordError> {
        let record: T = serde_json::from_value(value.clone()).map_err(|e| RecordError::Json {
            kind: T::KIND,
            error: e.to_string(),
        })?;
        Ok(encode(&record))
    }
    match kind {
        TrialState::KIND => binary::<TrialState>(value),
        Lease::KIND => binary::<Lease>(value),
        TokenRecord::KIND => binary::<TokenRecord>(value),
        BlockState::KIND => binary::<BlockState>(value),
        TrialRecord::KIND => binary::<TrialRecord>(value),
        _ => Err(RecordError::Json {
            kind: "hot",
            error: format!("no record kind {kind:?}"),
        }),
    }
}

/// Whether stored hash field bytes are a binary record (rather than text).
pub fn is_binary(bytes: &[u8]) -> bool {
    bytes.first().is_some_and(|b| *b < 0x20)
}

/// A record being encoded.
pub(crate) struct Writer(Vec<u8>);

impl Writer {
    fn u64(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn u32(&mut self, v: u32) {
        self.u64(u64::from(v));
    }

    fn i64(&mut self, v: i64) {
        self.u64(((v << 1) ^ (v >> 63)) as u64);
    }

    fn f64(&mut self, v: f64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn bool(&mut self, v: bool) {
        self.0.push(u8::from(v));
    }

    fn str(&mut self, s: &str) {
        self.u64(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }

    fn opt<T>(&mut self, v: Option<&T>, put: impl FnOnce(&mut Self, &T)) {
        match v {
            None => self.0.push(0),
            Some(v) => {
                self.0.push(1);
                put(self, v);
            }
        }
    }
}

/// A record being decoded: the stored bytes and how far it got.
pub(crate) struct Reader<'a> {
    kind: &'static str,
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bad(&self, what: &'static str, at: usize) -> RecordError {
        RecordError::Bad {
            kind: self.kind,
            what,
            at,
        }
    }

    fn byte(&mut self) -> Result<u8, RecordError> {
        let b = *self.bytes.get(self.at).ok_or(RecordError::Cut {
            kind: self.kind,
            at: self.at,
        })?;
        self.at += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        let cut = RecordError::Cut {
            kind: self.kind,
            at: self.at,
        };
        let end = self.at.checked_add(n).ok_or(cut.clone())?;
        let out = self.bytes.get(self.at..end).ok_or(cut)?;
        self.at = end;
        Ok(out)
    }

    /// A varint in its shortest form.
    fn u64(&mut self) -> Result<u64, RecordError> {
        let start = self.at;
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                return Err(self.bad("varint", start));
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                // A last byte of 0 after the first is a longer form than needed.
                if b == 0 && shift > 0 {
                    return Err(self.bad("varint", start));
                }
                return Ok(v);
            }
        }
        Err(self.bad("varint", start))
    }

    fn u32(&mut self) -> Result<u32, RecordError> {
        let start = self.at;
        u32::try_from(self.u64()?).map_err(|_| self.bad("u32", start))
    }

    fn i64(&mut self) -> Result<i64, RecordError> {
        let z = self.u64()?;
        Ok((z >> 1) as i64 ^ -((z & 1) as i64))
    }

    fn f64(&mut self) -> Result<f64, RecordError> {
        let b = self.take(8)?;
        Ok(f64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn bool(&mut self) -> Result<bool, RecordError> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.bad("bool", self.at - 1)),
        }
    }

    fn str(&mut self) -> Result<&'a str, RecordError> {
        let start = self.at;
        let n = usize::try_from(self.u64()?).map_err(|_| self.bad("length", start))?;
        let b = self.take(n)?;
        std::str::from_utf8(b).map_err(|_| self.bad("string", start))
    }

    fn opt<T>(
        &mut self,
        get: impl FnOnce(&mut Self) -> Result<T, RecordError>,
    ) -> Result<Option<T>, RecordError> {
        match self.byte()? {
            0 => Ok(None),
            1 => get(self).map(Some),
            _ => Err(self.bad("option", self.at - 1)),
        }
    }

    /// A name in its one spelling (`parse` must give back something displayed as `s`).
    fn name<T: std::str::FromStr + std::fmt::Display>(
        &mut self,
        what: &'static str,
    ) -> Result<T, RecordError> {
        let start = self.at;
        let s = self.str()?;
        match s.parse::<T>() {
            Ok(v) if v.to_string() == s => Ok(v),
            _ => Err(self.bad(what, start)),
        }
    }

    fn lane(&mut self) -> Result<LaneName, RecordError> {
        let start = self.at;
        LaneName::new(self.str()?).map_err(|_| self.bad("lane", start))
    }

    fn host(&mut self) -> Result<HostName, RecordError> {
        let start = self.at;
        HostName::new(self.str()?).map_err(|_| self.bad("host", start))
    }
}

impl Record for TrialState {
    const TAG: u8 = 1;
    const KIND: &'static str = "trial state";

    fn put(&self, w: &mut Writer) {
        w.u32(self.attempts);
        let h = &self.history;
        w.opt(h.winner.as_ref(), |w, v| w.u32(*v));
        w.bool(h.is_final);
        w.u32(h.infra_used);
        w.u32(h.overloaded_used);
        w.u32(h.blocked_streak);
        w.opt(self.final_mark.as_ref(), |w, m| {
            w.bool(m.counted);
            w.opt(m.excluded_reason.as_ref(), |w, r| w.str(&r.to_string()));
        });
        w.opt(self.queued.as_ref(), |w, q| {
            w.opt(q.delayed_until.as_ref(), |w, v| w.i64(*v));
            match &q.placement {
                Placement::Any => w.0.push(0),
                Placement::OtherLane(l) => {
                    w.0.push(1);
                    w.str(l.as_str());
                }
                Placement::OtherHost(h) => {
                    w.0.push(2);
                    w.str(h.as_str());
                }
            }
            w.i64(q.since_ms);
        });
        w.u32(self.rows);
        w.opt(self.retry_pass.as_ref(), |w, v| w.u32(*v));
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, RecordError> {
        let attempts = r.u32()?;
        let history = TrialHistory {
            winner: r.opt(Reader::u32)?,
            is_final: r.bool()?,
            infra_used: r.u32()?,
            overloaded_used: r.u32()?,
            blocked_streak: r.u32()?,
        };
        let final_mark = r.opt(|r| {
            Ok(FinalMark {
                counted: r.bool()?,
                excluded_reason: r.opt(|r| r.name::<ExcludedReason>("exclusion"))?,
            })
        })?;
        let queued = r.opt(|r| {
            let delayed_until = r.opt(Reader::i64)?;
            let at = r.at;
            let placement = match r.byte()? {
                0 => Placement::Any,
                1 => Placement::OtherLane(r.lane()?),
                2 => Placement::OtherHost(r.host()?),
                _ => return Err(r.bad("placement", at)),
            };
            Ok(Queued {
                delayed_until,
                placement,
                since_ms: r.i64()?,
            })
        })?;
        Ok(TrialState {
            attempts,
            history,
            final_mark,
            queued,
            rows: r.u32()?,
            retry_pass: r.opt(Reader::u32)?,
        })
    }
}

impl Record for Lease {
    const TAG: u8 = 2;
    const KIND: &'static str = "lease";

    fn put(&self, w: &mut Writer) {
        w.u32(self.attempt);
        w.str(self.lane.as_str());
        w.str(self.host.as_str());
        w.str(&self.worker);
        w.str(self.phase.as_str());
        w.i64(self.deadline_ms);
        w.i64(self.hard_deadline_ms);
        w.bool(self.heartbeat_seen);
        w.i64(self.claimed_ms);
        w.f64(self.reserved_usd);
        w.bool(self.paired);
        w.bool(self.cancel_requested);
        w.bool(self.revoked);
        w.opt(self.grace_until_ms.as_ref(), |w, v| w.i64(*v));
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, RecordError> {
        Ok(Lease {
            attempt: r.u32()?,
            lane: r.lane()?,
            host: r.host()?,
            worker: r.str()?.to_owned(),
            phase: r.name::<Phase>("phase")?,
            deadline_ms: r.i64()?,
            hard_deadline_ms: r.i64()?,
            heartbeat_seen: r.bool()?,
            claimed_ms: r.i64()?,
            reserved_usd: r.f64()?,
            paired: r.bool()?,
            cancel_requested: r.bool()?,
            revoked: r.bool()?,
            grace_until_ms: r.opt(Reader::i64)?,
        })
    }
}

impl Record for TokenRecord {
    const TAG: u8 = 3;
    const KIND: &'static str = "token record";

    fn put(&self, w: &mut Writer) {
        w.u32(self.rows);
        w.opt(self.ack.as_ref(), |w, a| {
            w.str(a.token.trial_id.as_str());
            w.u32(a.token.attempt);
            w.bool(a.counted);
            w.bool(a.duplicate);
            w.bool(a.late);
            w.opt(a.winner_attempt.as_ref(), |w, v| w.u32(*v));
            w.u64(a.seq);
        });
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, RecordError> {
        let rows = r.u32()?;
        let ack = r.opt(|r| {
            let at = r.at;
            let trial_id = TrialId::new(r.str()?).map_err(|_| r.bad("trial id", at))?;
            Ok(CompleteAck {
                token: Token {
                    trial_id,
                    attempt: r.u32()?,
                },
                counted: r.bool()?,
                duplicate: r.bool()?,
                late: r.bool()?,
                winner_attempt: r.opt(Reader::u32)?,
                seq: r.u64()?,
            })
        })?;
        Ok(TokenRecord { rows, ack })
    }
}

impl Record for BlockState {
    const TAG: u8 = 4;
    const KIND: &'static str = "block state";

    fn put(&self, w: &mut Writer) {
        w.u64(self.finals);
        w.f64(self.wall_s);
        w.bool(self.complete);
        match &self.phase2 {
            None => w.0.push(0),
            Some(Phase2Verdict::Started) => w.0.push(1),
            Some(v @ Phase2Verdict::Refused(_)) => {
                w.0.push(2);
                w.str(&v.to_string());
            }
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, RecordError> {
        Ok(BlockState {
            finals: r.u64()?,
            wall_s: r.f64()?,
            complete: r.bool()?,
            phase2: {
                let at = r.at;
                match r.byte()? {
                    0 => None,
                    1 => Some(Phase2Verdict::Started),
                    // A refusal, spelled as its exclusion reason ("started" has its own byte).
                    2 => match r.name::<Phase2Verdict>("phase-2 verdict")? {
                        v @ Phase2Verdict::Refused(_) => Some(v),
                        Phase2Verdict::Started => return Err(r.bad("phase-2 verdict", at)),
                    },
                    _ => return Err(r.bad("phase-2 verdict", at)),
                }
            },
        })
    }
}

impl Record for TrialRecord {
    const TAG: u8 = 5;
    const KIND: &'static str = "trial record";

    fn put(&self, w: &mut Writer) {
        self.state.put(w);
        w.opt(self.lease.as_ref(), |w, l| l.put(w));
        w.u64(self.tokens.len() as u64);
        for t in &self.tokens {
            w.opt(t.as_ref(), |w, t| t.put(w));
        }
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, RecordError> {
        let state = TrialState::get(r)?;
        let lease = r.opt(Lease::get)?;
        let at = r.at;
        let n = r.u64()?;
        // Each token takes a byte at least: a count past the bytes left is corrupt, and is
        // refused before anything is allocated for it.
        if n > (r.bytes.len() - r.at) as u64 {
            return Err(r.bad("token count", at));
        }
        let mut tokens = Vec::with_capacity(n as usize);
        for _ in 0..n {
            tokens.push(r.opt(TokenRecord::get)?);
        }
        Ok(TrialRecord {
            state,
            lease,
            tokens,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_common::row::{FailureKind, Phase2Refusal};
    use proptest::prelude::*;

    fn lease(phase: Phase, grace: Option<i64>) -> Lease {
        Lease {
            attempt: 3,
            lane: LaneName::new("lane-7").unwrap(),
            host: HostName::new("höst-2").unwrap(),
            worker: "w1".into(),
            phase,
            deadline_ms: 1_700_000_060_000,
            hard_deadline_ms: 1_700_000_600_000,
            heartbeat_seen: true,
            claimed_ms: -5,
            reserved_usd: 0.125,
            paired: false,
            cancel_requested: true,
            revoked: false,
            grace_until_ms: grace,
        }
    }

    fn trial(reason: Option<ExcludedReason>, placement: Placement) -> TrialState {
        TrialState {
            attempts: 4,
            history: TrialHistory {
                winner: Some(2),
                is_final: true,
                infra_used: 1,
                overloaded_used: 300,
                blocked_streak: u32::MAX,
            },
            final_mark: Some(FinalMark {
                counted: false,
                excluded_reason: reason,
            }),
            queued: Some(Queued {
                delayed_until: Some(i64::MIN),
                placement,
                since_ms: i64::MAX,
            }),
            rows: 9,
            retry_pass: Some(1),
        }
    }

    fn token(ack: bool) -> TokenRecord {
        TokenRecord {
            rows: 2,
            ack: ack.then(|| CompleteAck {
                token: Token {
                    trial_id: TrialId::new("t-1.r0.arm-a").unwrap(),
                    attempt: 2,
                },
                counted: true,
                duplicate: false,
                late: true,
                winner_attempt: None,
                seq: u64::MAX,
            }),
        }
    }

    fn block(phase2: Option<Phase2Verdict>) -> BlockState {
        BlockState {
            finals: 1 << 40,
            wall_s: -0.0,
            complete: true,
            phase2,
        }
    }

    /// Encoded, decoded back to the same record, and the bytes are exactly what decoding and
    /// encoding again gives.
    fn round_trip<T: Record + PartialEq + std::fmt::Debug>(record: &T) -> Vec<u8> {
        let bytes = encode(record);
        assert_eq!(bytes[0], T::TAG);
        assert_eq!(&decode::<T>(&bytes).unwrap(), record);
        assert_eq!(reencode(&bytes).unwrap(), bytes);
        let (kind, json) = to_json(&bytes).unwrap();
        assert_eq!(from_json(kind, &json).unwrap(), bytes);
        bytes
    }

    #[test]
    fn every_record_and_variant_reads_back_as_written() {
        for phase in Phase::ALL {
            round_trip(&lease(*phase, None));
            round_trip(&lease(*phase, Some(-1)));
        }
        let reasons = [
            None,
            Some(ExcludedReason::PreflightLimit),
            Some(ExcludedReason::InfraFailure(FailureKind::GuestLost)),
            Some(ExcludedReason::Phase2Refused(Phase2Refusal::Cutoff)),
            Some(ExcludedReason::Phase2Refused(Phase2Refusal::Quota(
                "p:ä".into(),
            ))),
        ];
        let placements = [
            Placement::Any,
            Placement::OtherLane(LaneName::new("lane-1").unwrap()),
            Placement::OtherHost(HostName::new("host 9").unwrap()),
        ];
        for r in &reasons {
            for p in &placements {
                round_trip(&trial(r.clone(), p.clone()));
            }
        }
        round_trip(&TrialState::default());
        round_trip(&token(false));
        round_trip(&token(true));
        round_trip(&TokenRecord::default());
        for p in [
            None,
            Some(Phase2Verdict::Started),
            Some(Phase2Verdict::Refused(Phase2Refusal::Cutoff)),
            Some(Phase2Verdict::Refused(Phase2Refusal::Quota("p:ä".into()))),
        ] {
            round_trip(&block(p));
        }
        round_trip(&BlockState::default());
        round_trip(&TrialRecord::default());
        round_trip(&TrialRecord {
            state: trial(None, Placement::Any),
            lease: Some(lease(Phase::Agent, Some(3))),
            tokens: vec![Some(token(true)), None, Some(TokenRecord::default())],
        });
    }

    #[test]
    fn a_trial_record_refuses_a_token_count_past_its_bytes() {
        let mut bytes = encode(&TrialRecord::default());
        // The empty record ends with its token count, 0: claim a huge one instead.
        bytes.pop();
        bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(matches!(
            decode::<TrialRecord>(&bytes),
            Err(RecordError::Bad {
                what: "token count",
                ..
            })
        ));
    }

    #[test]
    fn records_of_older_layouts_are_read_from_their_json() {
        let l = lease(Phase::Agent, Some(7));
        assert_eq!(
            decode::<Lease>(&serde_json::to_vec(&l).unwrap()).unwrap(),
            l
        );
        let t = trial(None, Placement::Any);
        let json = serde_json::to_vec(&t).unwrap();
        assert_eq!(decode::<TrialState>(&json).unwrap(), t);
        assert!(matches!(
            decode::<TrialState>(b"{\"attempts\":"),
            Err(RecordError::Json { .. })
        ));
        let k = token(true);
        assert_eq!(
            decode::<TokenRecord>(&serde_json::to_vec(&k).unwrap()).unwrap(),
            k
        );
        let b = block(Some(Phase2Verdict::Started));
        assert_eq!(
            decode::<BlockState>(&serde_json::to_vec(&b).unwrap()).unwrap(),
            b
        );
        // Layout 4's forms: no verdict, and a refusal.
        let old = br#"{"finals":1,"wall_s":2.5,"complete":false,"phase2":"phase2_refused:cutoff"}"#;
        assert_eq!(
            decode::<BlockState>(old).unwrap().phase2,
            Some(Phase2Verdict::Refused(Phase2Refusal::Cutoff))
        );
        let old = br#"{"finals":1,"wall_s":2.5,"complete":false,"phase2":null}"#;
        assert_eq!(decode::<BlockState>(old).unwrap().phase2, None);
        assert!(
            encode(&l).len() * 3 < serde_json::to_vec(&l).unwrap().len(),
            "a lease is a third of its JSON or less"
        );
    }

    /// The encoding is part of the layout: these bytes stay readable whatever changes.
    #[test]
    fn the_encoding_is_pinned() {
        let b = block(Some(Phase2Verdict::Refused(Phase2Refusal::Cutoff)));
        let mut want = vec![4, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20];
        want.extend_from_slice(&(-0.0f64).to_le_bytes());
        want.extend_from_slice(&[1, 2, 21]);
        want.extend_from_slice(b"phase2_refused:cutoff");
        assert_eq!(encode(&b), want);
        let k = TokenRecord {
            rows: 300,
            ack: None,
        };
        assert_eq!(encode(&k), vec![3, 0xac, 0x02, 0]);
        let t = TrialState {
            queued: Some(Queued {
                delayed_until: Some(-1),
                placement: Placement::OtherLane(LaneName::new("l").unwrap()),
                since_ms: 1,
            }),
            ..TrialState::default()
        };
        assert_eq!(
            encode(&t),
            vec![1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, b'l', 2, 0, 0]
        );
        let l = lease(Phase::Boot, None);
        let bytes = encode(&l);
        assert_eq!(&bytes[..2], &[2, 3]);
        assert_eq!(&bytes[2..10], b"\x06lane-7\x07");
    }

    #[test]
    fn bytes_that_are_not_a_record_are_refused_with_what_is_wrong() {
        let bytes = encode(&trial(
            Some(ExcludedReason::PreflightLimit),
            Placement::OtherHost(HostName::new("h").unwrap()),
        ));
        for n in 1..bytes.len() {
            assert!(
                matches!(
                    decode::<TrialState>(&bytes[..n]),
                    Err(RecordError::Cut { .. })
                ),
                "cut at {n}"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        assert_eq!(
            decode::<TrialState>(&long),
            Err(RecordError::Trailing {
                kind: "trial state",
                extra: 1
            })
        );
        assert_eq!(decode::<TrialState>(&[]), Err(RecordError::Empty));
        assert!(matches!(
            decode::<Lease>(&bytes),
            Err(RecordError::Tag { tag: 1, .. })
        ));
        // 0 as two bytes: not its shortest form.
        assert!(matches!(
            decode::<TokenRecord>(&[3, 0x80, 0x00, 0]),
            Err(RecordError::Bad { what: "varint", .. })
        ));
        assert!(matches!(
            decode::<TokenRecord>(&[3, 0xff, 0xff, 0xff, 0xff, 0x7f, 0]),
            Err(RecordError::Bad { what: "u32", .. })
        ));
        assert!(matches!(
            decode::<TokenRecord>(&[3, 0, 2]),
            Err(RecordError::Bad { what: "option", .. })
        ));
        let mut b = encode(&block(None));
        b[1 + 6 + 8] = 2;
        assert!(matches!(
            decode::<BlockState>(&b),
            Err(RecordError::Bad { what: "bool", .. })
        ));
        // A refusal is spelled as its exclusion reason; "started" has a byte of its own.
        let mut b = encode(&block(None));
        b.pop();
        for why in [&b"started"[..], b"x", b"preflight_limit"] {
            let mut bad = b.clone();
            bad.push(2);
            bad.push(why.len() as u8);
            bad.extend_from_slice(why);
            assert!(
                matches!(
                    decode::<BlockState>(&bad),
                    Err(RecordError::Bad {
                        what: "phase-2 verdict",
                        ..
                    })
                ),
                "{why:?}"
            );
        }
        let mut l = encode(&lease(Phase::Boot, None));
        let at = l.windows(4).position(|w| w == b"boot").unwrap();
        l[at] = b'B';
        assert!(matches!(
            decode::<Lease>(&l),
            Err(RecordError::Bad { what: "phase", .. })
        ));
        let mut l = encode(&lease(Phase::Boot, None));
        l[4] = b' ';
        assert!(matches!(
            decode::<Lease>(&l),
            Err(RecordError::Bad { what: "lane", .. })
        ));
    }

    fn phase() -> impl Strategy<Value = Phase> {
        proptest::sample::select(Phase::ALL.to_vec())
    }

    fn lane() -> impl Strategy<Value = String> {
        "[a-z0-9][a-z0-9._-]{0,20}"
    }

    fn host() -> impl Strategy<Value = String> {
        "[a-z0-9][a-z0-9 é._-]{0,20}"
    }

    prop_compose! {
        fn any_lease()(
            attempt in any::<u32>(), lane in lane(), host in host(), worker in ".{0,12}",
            phase in phase(), d in any::<i64>(), h in any::<i64>(), seen in any::<bool>(),
            c in any::<i64>(), usd in -1e12f64..1e12, flags in any::<(bool, bool, bool)>(),
            grace in any::<Option<i64>>(),
        ) -> Lease {
            Lease {
                attempt, lane: LaneName::new(lane).unwrap(), host: HostName::new(host).unwrap(),
                worker, phase, deadline_ms: d, hard_deadline_ms: h, heartbeat_seen: seen,
                claimed_ms: c, reserved_usd: usd, paired: flags.0, cancel_requested: flags.1,
                revoked: flags.2, grace_until_ms: grace,
            }
        }
    }

    prop_compose! {
        fn any_trial()(
            n in any::<(u32, u32, u32, u32, u32)>(), winner in any::<Option<u32>>(),
            fin in any::<bool>(), mark in any::<Option<(bool, bool)>>(),
            queued in any::<Option<(Option<i64>, u8, i64)>>(), lane in lane(),
            retry in any::<Option<u32>>(),
        ) -> TrialState {
            TrialState {
                attempts: n.0,
                history: TrialHistory {
                    winner, is_final: fin, infra_used: n.1, overloaded_used: n.2,
                    blocked_streak: n.3,
                },
                final_mark: mark.map(|(counted, why)| FinalMark {
                    counted,
                    excluded_reason: why.then_some(ExcludedReason::PreflightLimit),
                }),
                queued: queued.map(|(delayed_until, p, since_ms)| Queued {
                    delayed_until,
                    placement: match p % 3 {
                        0 => Placement::Any,
                        1 => Placement::OtherLane(LaneName::new(&lane).unwrap()),
                        _ => Placement::OtherHost(HostName::new(&lane).unwrap()),
                    },
                    since_ms,
                }),
                rows: n.4,
                retry_pass: retry,
            }
        }
    }

    proptest! {
        #[test]
        fn any_lease_or_trial_state_reads_back(l in any_lease(), t in any_trial()) {
            round_trip(&l);
            round_trip(&t);
        }

        #[test]
        fn any_block_or_token_record_reads_back(
            finals in any::<u64>(), wall in -1e9f64..1e9, complete in any::<bool>(),
            phase2 in any::<Option<Option<String>>>(), rows in any::<u32>(),
            seq in any::<u64>(), winner in any::<Option<u32>>(),
        ) {
            let phase2 = phase2.map(|p| {
                p.map_or(Phase2Verdict::Started, |q| Phase2Verdict::Refused(Phase2Refusal::Quota(q)))
            });
            round_trip(&BlockState { finals, wall_s: wall, complete, phase2 });
            let mut k = token(true);
            k.rows = rows;
            if let Some(a) = &mut k.ack {
                a.seq = seq;
                a.winner_attempt = winner;
            }
            round_trip(&k);
        }

        #[test]
        fn any_bytes_decode_to_an_answer_and_back_to_themselves(
            tag in 1u8..5, body in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let mut bytes = vec![tag];
            bytes.extend(body);
            if let Ok(again) = reencode(&bytes) {
                prop_assert_eq!(again, bytes);
            }
        }
    }
}
