//! Proto ↔ domain conversions (`lanes_common::convert`): round trips are lossless, and invalid
//! wire messages are refused with the field named.

use std::collections::BTreeMap;
use std::path::Path;

use lanes_common::convert::ConvertError;
use lanes_common::ids::{Token, TrialId};
use lanes_common::proto as pb;
use lanes_common::row::{
    Check, DriverIdentity, ExcludedReason, FailureKind, InfeasibleSource, Outcome, PhaseWalls,
    QuotaReading, Row, Status, StoreFields, TokenUsage,
};
use lanes_common::schedule::{self, Trial};
use lanes_common::spec::{self, Campaign};
use lanes_common::spec_hash::spec_hash;
use proptest::prelude::*;

pub(crate) const CAMPAIGN: &str = r#"
id = "convert-test"
phase1_runs = 2
phase2_runs = 1
schedule_seed = 20261005
pairing = "none"
gate = true
lease_ttl_s = 12
publish_grace_s = 60
cutoff_utc = "2026-12-31T00:00:00Z"
budget_cap_usd = 50.5
quota_wait = 0.9
quota_stop = 0.99

[defaults]
timeout_s = 30
max_turns = 20
max_cost_usd = 1.25

[[arms]]
id = "careful"
config = { model = "sim-large", effort = "high", nested = { list = [1, 2.5, "x"], flag = true } }
provider = "anthropic"
expected_cost_usd = 0.05

[[arms]]
id = "quick"

[tasks]
items = [
  { id = "MB-01", group = "g1", tags = ["a", "b"], timeout_s = 9, max_turns = 3, max_cost_usd = 0.5, payload = { instruction = "open", n = 3, f = 0.1, deep = { k = [true, false] } } },
  { id = "osw:chrome.2" },
]

[driver]
sim = { boot_s = 0.05, agent_s = [0.05, 0.2], pass_rate = { careful = 0.7 }, faults = { boot_failed = 0.03, rate_limit = 0.02, timeout = 0.05 }, cost_usd = [0.01, 0.06] }
secret_payload_keys = ["vm_password"]
env = { API_KEY = "$API_KEY" }

[driver.expect]
dataset_commit = "a1b2c3d"

[retry]
infra_retries = 2
overloaded_backoff_s = 7
"#;

pub(crate) fn campaign(text: &str) -> Campaign {
    spec::load_str(text, Path::new("x.toml"), Path::new(".")).unwrap()
}

pub(crate) fn trial() -> Trial {
    schedule::trials(&campaign(CAMPAIGN)).nth(3).unwrap()
}

pub(crate) fn token(attempt: u32) -> Token {
    Token {
        trial_id: trial().trial_id,
        attempt,
    }
}

/// An outcome with every field set to a non-default value.
pub(crate) fn full_outcome() -> Outcome {
    let mut o = Outcome::new(
        token(3),
        "host-a-lane-2".parse().unwrap(),
        "host-a".parse().unwrap(),
        Status::Completed,
    );
    o.worker = "worker-7".into();
    o.driver = Some(DriverIdentity {
        name: "osworld".into(),
        version: "1.2.3".into(),
        pins: BTreeMap::from([
            ("dataset_commit".to_string(), "a1b2c3d".to_string()),
            ("agent_sha256".to_string(), "beef".to_string()),
        ]),
    });
    o.result.score = Some(0.75);
    o.result.passed = Some(true);
    o.result.checks = vec![
        Check {
            name: "file_exists".into(),
            passed: true,
            score: Some(1.0),
            detail: "found".into(),
        },
        Check {
            name: "content".into(),
            passed: false,
            score: None,
            detail: String::new(),
        },
    ];
    o.result.runtime_outcome = Some("budget_exhausted".into());
    o.result.infeasible_source = Some(InfeasibleSource::Agent);
    o.result.final_text = Some("done — ünïcode".into());
    o.result.turns = Some(17);
    o.result.tokens = Some(TokenUsage {
        input: 1000,
        output: 200,
        cache_read: 30,
        cache_write: 4,
    });
    o.result.cost_usd = Some(0.1 + 0.2);
    o.result.quota = Some(QuotaReading {
        provider: "anthropic".into(),
        utilisation: 0.42,
        reset_epoch: Some(1_800_000_000),
    });
    o.result.walls = PhaseWalls {
        admit_s: 0.01,
        boot_s: 1.5,
        reset_s: 0.3,
        gate_s: 0.7,
        agent_s: 42.123,
        evaluate_s: 2.2,
        publish_s: 0.05,
    };
    o.record.lease_lost = true;
    o.record.publication_errors = vec!["attempt record: disk full".into()];
    o.record.artifacts = vec!["a3/stderr.log".into(), "a3/screenshot.png".into()];
    o.record.started_utc = Some("2026-12-02T10:00:00Z".parse().unwrap());
    o.record.ended_utc = Some("2026-12-02T10:00:47Z".parse().unwrap());
    o.record.error = Some("none really".into());
    o
}

pub(crate) fn to_wire(o: &Outcome) -> pb::Outcome {
    pb::Outcome::from(o.clone())
}

pub(crate) fn from_wire(o: pb::Outcome) -> Result<Outcome, ConvertError> {
    Outcome::try_from(o)
}

pub(crate) fn wire_err(o: pb::Outcome) -> ConvertError {
    match from_wire(o) {
        Ok(o) => panic!("expected a conversion error, got {o:?}"),
        Err(e) => e,
    }
}

mod campaigns;
mod outcomes;
mod rows;
