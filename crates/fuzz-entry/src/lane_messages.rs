//! `lane_messages`: a lane session's messages as the coordinator reads them. The input is
//! decoded (prost) as a `WorkerMessage`, and each kind goes through every check and
//! conversion the coordinator's lane service applies before it touches the store: the size
//! limits (`limits::check_register`, `check_outcome`, `check_release`), the protocol version,
//! ids, tokens, phases and enums (`convert`), the worker's offer, the lease secret's check.
//!
//! What must hold: nothing panics; a worker's offer reads back from the `Register` a worker
//! writes of it; an outcome that converts converts again to itself, passes the limits once
//! written back (the lane publishes exactly that: `Outcome::validate` fits it), and its row
//! (`Row::from_outcome`, as the store writes it) reads back as itself from its JSON.

use std::sync::LazyLock;

use lanes_common::convert::{lease_of, register_offer, token, wire_enum, worker_offer};
use lanes_common::ids::{ArmId, CampaignId, LaneName, Token};
use lanes_common::lease::LeaseKey;
use lanes_common::limits::{check_outcome, check_register, check_release};
use lanes_common::log_safe::LogSafe;
use lanes_common::proto as pb;
use lanes_common::proto::worker_message::Msg;
use lanes_common::row::{FailureKind, Outcome, Phase, Row, StoreFields};
use lanes_common::schedule::Trial;
use prost::Message as _;

/// The store's lease key: any fixed key will do.
static KEY: LazyLock<LeaseKey> = LazyLock::new(|| LeaseKey::from_bytes([3; 32]));

/// A trial to write outcome rows for.
static TRIAL: LazyLock<Trial> = LazyLock::new(|| {
    let c = lanes_common::spec::load_str(
        "id = \"c\"\nphase1_runs = 1\nschedule_seed = 1\n[[arms]]\nid = \"a\"\n\
         [tasks]\nitems = [{ id = \"t\" }]\n[driver]\nsim = {}\n",
        std::path::Path::new("c.toml"),
        std::path::Path::new("."),
    )
    .expect("the fixed campaign loads");
    lanes_common::schedule::trials(&c).next().expect("a trial")
});

pub fn fuzz_one(data: &[u8]) {
    let Ok(m) = pb::WorkerMessage::decode(data) else {
        return;
    };
    match m.msg {
        Some(Msg::Register(r)) => register(r),
        Some(Msg::WorkRequest(r)) => {
            let _ = LaneName::new(r.lane);
            for c in &r.exclude_campaigns {
                let _ = LogSafe(c).to_string();
            }
        }
        Some(Msg::Status(s)) => {
            let _ = LogSafe(&s.detail).to_string();
        }
        Some(Msg::Heartbeat(h)) => renew(h.tokens),
        Some(Msg::Reconnect(r)) => renew(r.in_flight),
        Some(Msg::Outcome(o)) => outcome(o),
        Some(Msg::Release(r)) => release(r),
        Some(Msg::Forfeit(f)) => {
            for (i, ct) in f.tokens.into_iter().enumerate() {
                let lease = lease_of(ct.token.as_ref());
                let Ok(t) = token(&format!("forfeit.tokens[{i}].token"), ct.token) else {
                    continue;
                };
                holds(&ct.campaign, &t, &lease);
            }
        }
        None => {}
    }
}

fn register(r: pb::Register) {
    let _ = (
        LogSafe(&r.worker_id).to_string(),
        LogSafe(&r.host).to_string(),
    );
    if check_register(&r).is_err() {
        return;
    }
    let _ = lanes_common::protocol::check_worker(r.protocol);
    for a in &r.arms {
        let _ = ArmId::new(a);
    }
    if let Ok(offer) = worker_offer(&r) {
        let mut written = pb::Register::default();
        register_offer(&offer, &mut written);
        assert_eq!(
            worker_offer(&written).as_ref(),
            Ok(&offer),
            "a worker's offer changed through its Register"
        );
    }
}

fn renew(tokens: Vec<pb::TokenPhase>) {
    for (i, tp) in tokens.into_iter().enumerate() {
        let lease = lease_of(tp.token.as_ref());
        let Ok(t) = token(&format!("tokens[{i}].token"), tp.token) else {
            continue;
        };
        let _ = wire_enum::<pb::Phase, Phase>(&format!("tokens[{i}].phase"), tp.phase);
        holds(&tp.campaign, &t, &lease);
    }
}

/// The lease check of a token of `campaign` (a fuzzer cannot know a lease secret).
fn holds(campaign: &str, t: &Token, lease: &lanes_common::lease::LeaseSecret) {
    let _ = LogSafe(campaign).to_string();
    if let Ok(c) = CampaignId::new(campaign) {
        assert!(!KEY.verify(&c, t, "w", lease), "a guessed lease secret");
    }
}

fn outcome(o: pb::Outcome) {
    let _ = CampaignId::new(&o.campaign);
    let _ = lease_of(o.token.as_ref());
    let checked = check_outcome(&o).is_ok();
    // A lane converts without the limits check and publishes what `validate` made of it;
    // the coordinator checks the limits first. Either way, what converts is the same.
    let Ok(outcome) = Outcome::try_from(o) else {
        return;
    };
    let written = pb::Outcome::from(outcome.clone());
    if let Err(e) = check_outcome(&written) {
        panic!("a validated outcome is over a limit: {e}");
    }
    let again = Outcome::try_from(written)
        .unwrap_or_else(|e| panic!("a validated outcome does not convert again: {e}"));
    assert_eq!(again, outcome, "an outcome changed through the wire");
    if !checked {
        return;
    }
    let row = Row::from_outcome(
        &CampaignId::new("c").expect("an id"),
        &TRIAL,
        outcome,
        StoreFields::default(),
    );
    let stored = pb::Row::try_from(&row)
        .unwrap_or_else(|e| panic!("an outcome's row does not serialize: {e}"));
    let read = Row::try_from(stored.clone())
        .unwrap_or_else(|e| panic!("an outcome's row does not read back: {e}: {}", stored.json));
    assert_eq!(read, row, "a row changed through its JSON: {}", stored.json);
}

fn release(r: pb::Release) {
    let _ = CampaignId::new(&r.campaign);
    let lease = lease_of(r.token.as_ref());
    if check_release(&r).is_err() {
        return;
    }
    let Ok(t) = token("release.token", r.token) else {
        return;
    };
    holds(&r.campaign, &t, &lease);
    if let Ok(pb::ReleaseReason::Blocked) = pb::ReleaseReason::try_from(r.reason) {
        let _: FailureKind =
            wire_enum::<pb::FailureKind, _>("release.failure_kind", r.failure_kind)
                .unwrap_or(FailureKind::Preflight);
    }
    let _ = LaneName::new(r.lane);
}
