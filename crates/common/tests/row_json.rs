//! A ledger row's JSON, byte for byte (`tests/golden/rows.jsonl`; write it anew with
//! `LANES_WRITE_GOLDEN=1 cargo test -p lanes-common --test row_json`): the rows the store
//! writes for a rich outcome, a sparse one and a row of its own must keep their exact field
//! order and spelling, whatever shape the types take in memory, and a row read back writes
//! the same bytes.

use std::path::Path;

use lanes_common::row::{
    ExcludedReason, FailureKind, Outcome, Phase2Refusal, Row, Status, StoreFields,
};
use lanes_common::schedule;
use lanes_common::spec;

fn campaign() -> spec::Campaign {
    let text = "id = \"golden\"\nphase1_runs = 1\nphase2_runs = 1\nschedule_seed = 7\n\
                [[arms]]\nid = \"a\"\n[[arms]]\nid = \"b\"\n\
                [tasks]\nitems = [{ id = \"t1\" }]\n[driver]\nsim = {}\n";
    spec::load_str(text, Path::new("x.toml"), Path::new(".")).unwrap()
}

fn store(seq: u64) -> StoreFields {
    StoreFields {
        seq,
        spec_hash: "sha256:abc".to_owned(),
        is_final: true,
        counted: true,
        written_utc: "2026-12-01T00:00:01.250Z".parse().unwrap(),
        ..StoreFields::default()
    }
}

/// Every field an outcome can carry, set, in the wire's spelling.
const RICH: &str = r#"{
  "token": {"trial_id": "t1.r0.a", "attempt": 2},
  "lane": "w-0", "host": "host-1", "worker": "w",
  "driver": {"name": "osworld-driver", "version": "0.4.2", "pins": {"agent_sha256": "9f86d081"}},
  "status": "completed", "failure_kind": null, "reset_epoch": 1796083260,
  "score": 0.75, "passed": false,
  "checks": [{"name": "file", "passed": true, "score": 1.0, "detail": "found"},
             {"name": "text", "passed": false}],
  "runtime_outcome": "budget_exhausted", "infeasible_source": null,
  "gate": {"verdict": "proceed", "reason": "fine", "turns": 2, "cost_usd": 0.01},
  "final_text": "done, mostly", "turns": 17,
  "tokens": {"input": 1200, "output": 340, "cache_read": 50, "cache_write": 7},
  "cost_usd": 0.123456789, "quota": {"provider": "p", "utilisation": 0.5, "reset_epoch": 1796083300},
  "walls": {"admit_s": 0.01, "boot_s": 1.5, "reset_s": 0.25, "gate_s": 0.5, "agent_s": 30.125,
            "evaluate_s": 2.0, "publish_s": 0.05},
  "lease_lost": true, "publication_errors": ["screenshot: disk full"],
  "artifacts": ["trajectory.jsonl", "final.png"],
  "started_utc": "2026-12-01T00:00:00Z", "ended_utc": "2026-12-01T00:00:35Z",
  "error": null
}"#;

/// The least an outcome carries: unscored, with a kind and a message.
const SPARSE: &str = r#"{
  "token": {"trial_id": "t1.r0.b", "attempt": 1},
  "lane": "w-1", "host": "host-2",
  "status": "infra_error", "failure_kind": "boot_failed", "error": "the VM did not boot"
}"#;

fn rows() -> Vec<Row> {
    let c = campaign();
    let trials: Vec<_> = schedule::trials(&c).collect();
    let find = |id: &str| trials.iter().find(|t| t.trial_id.as_str() == id).unwrap();
    let rich: Outcome = serde_json::from_str(RICH).unwrap();
    let sparse: Outcome = serde_json::from_str(SPARSE).unwrap();
    let mut excluded = store(2);
    excluded.counted = false;
    excluded.excluded_reason = Some(ExcludedReason::InfraFailure(FailureKind::BootFailed));
    vec![
        Row::from_outcome(&c.spec.id, find("t1.r0.a"), rich, store(0)),
        Row::from_outcome(&c.spec.id, find("t1.r0.b"), sparse, excluded),
        Row::bare(
            &c.spec.id,
            find("t1.r1.a"),
            0,
            Status::NotStarted,
            None,
            StoreFields {
                counted: false,
                excluded_reason: Some(ExcludedReason::Phase2Refused(Phase2Refusal::Cutoff)),
                ..store(3)
            },
        ),
    ]
}

#[test]
fn rows_are_written_byte_for_byte_as_the_golden_ledger() {
    let text: String = rows()
        .iter()
        .map(|r| serde_json::to_string(r).unwrap() + "\n")
        .collect();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/rows.jsonl");
    if std::env::var_os("LANES_WRITE_GOLDEN").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let golden = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text, golden);
    // Read back, each row writes the same bytes.
    for line in golden.lines() {
        let row: Row = serde_json::from_str(line).unwrap();
        assert_eq!(serde_json::to_string(&row).unwrap(), line);
    }
}
