//! Writes the seed inputs that are binary or made by the code itself: the lane messages
//! (prost-encoded `WorkerMessage`s) and the archives (written as `lanes archive` writes them,
//! plain and gzip-compressed). Run it by hand to remake them:
//! `cargo test -p lanes-fuzz-entry --test seeds -- --ignored`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use lanes_common::archive::{self, ARCHIVE_FORMAT, End, Header, Line};
use lanes_common::ids::{CampaignId, Token, TrialId};
use lanes_common::proto as pb;
use lanes_common::proto::worker_message::Msg;
use lanes_common::row::{
    Check, DriverIdentity, FailureKind, GateRecord, GateVerdict, Outcome, PhaseWalls, QuotaReading,
    Row, Status, StoreFields, TokenUsage,
};
use prost::Message as _;

fn corpus(target: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn token(trial: &str, attempt: u32) -> Token {
    Token {
        trial_id: TrialId::new(trial).unwrap(),
        attempt,
    }
}

fn wire_token(trial: &str) -> Option<pb::Token> {
    Some(pb::Token {
        trial_id: trial.into(),
        attempt: 1,
        lease: "ab".repeat(32),
    })
}

fn outcome() -> Outcome {
    let mut o = Outcome::new(
        token("t1.r0.a", 1),
        "w-0".parse().unwrap(),
        "host-1".parse().unwrap(),
        Status::Completed,
    );
    o.worker = "w".into();
    o.result.score = Some(1.0);
    o.result.passed = Some(true);
    o.driver = Some(DriverIdentity {
        name: "osworld-driver".into(),
        version: "0.4.2".into(),
        pins: [("agent_sha256".to_owned(), "9f86d081".to_owned())].into(),
    });
    o.result.checks = vec![Check {
        name: "exists".into(),
        passed: true,
        score: Some(1.0),
        detail: "ok".into(),
    }];
    o.result.runtime_outcome = Some("end_turn".into());
    o.result.final_text = Some("Renamed report.txt to final.txt.".into());
    o.result.turns = Some(11);
    o.result.tokens = Some(TokenUsage {
        input: 48210,
        output: 3120,
        cache_read: 120400,
        cache_write: 9800,
    });
    o.result.cost_usd = Some(0.83);
    o.result.quota = Some(QuotaReading {
        provider: "anthropic".into(),
        utilisation: 0.41,
        reset_epoch: Some(1791302400),
    });
    o.result.gate = Some(GateRecord {
        verdict: GateVerdict::Proceed,
        reason: None,
        turns: 1,
        cost_usd: Some(0.01),
    });
    o.result.walls = PhaseWalls {
        boot_s: 1.5,
        agent_s: 30.25,
        ..Default::default()
    };
    o.record.started_utc = Some("2026-12-04T10:00:00Z".parse().unwrap());
    o.record.ended_utc = Some("2026-12-04T10:00:31Z".parse().unwrap());
    o.record.artifacts = vec!["/var/lanes/artifacts/c/t1.r0.a/a1/shot.png".into()];
    o
}

/// A campaign `c` of two tasks and one arm.
fn small_campaign() -> lanes_common::spec::Campaign {
    lanes_common::spec::load_str(
        "id = \"c\"\nphase1_runs = 1\nschedule_seed = 1\n[[arms]]\nid = \"a\"\n\
         [tasks]\nitems = [{ id = \"t1\", payload = { q = 1 } }, { id = \"t2\" }]\n\
         [driver]\nsim = {}\n",
        Path::new("c.toml"),
        Path::new("."),
    )
    .unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::write(dir.join(name), bytes).unwrap();
}

/// Packed stream entries: a commit's rows and events as a layout 4 commit packs them, the
/// smallest block, and blocks cut short or with a size no entry may have.
fn write_packed_entries() {
    let dir = corpus("packed_entry");
    let campaign = small_campaign();
    let trials: Vec<_> = lanes_common::schedule::trials(&campaign).collect();
    let rows: Vec<(u64, Vec<u8>)> = (7..10)
        .map(|seq| {
            let row = Row::bare(
                &CampaignId::new("c").unwrap(),
                &trials[seq as usize % trials.len()],
                1,
                Status::Completed,
                None,
                StoreFields {
                    seq,
                    ..StoreFields::default()
                },
            );
            (seq, serde_json::to_vec(&row).unwrap())
        })
        .collect();
    let rows =
        lanes_coordinator::store::redis::packed::pack(rows.iter().map(|(s, b)| (*s, b.as_slice())));
    write(&dir, "rows", &rows);
    write(&dir, "rows_cut", &rows[..rows.len() / 2]);
    let one = lanes_coordinator::store::redis::packed::pack([(0, &b"{}"[..])]);
    write(&dir, "one", &one);
    let mut huge = one.clone();
    huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    write(&dir, "size_too_large", &huge);
}

/// Hot records as a layout 5 commit writes them (one of each kind, every option set), a trial
/// record as layout 6 writes it (a lease, a token record and an attempt without one), one cut
/// short, one with a byte too many, and one in the JSON form of older layouts.
fn write_hot_records() {
    use lanes_coordinator::store::redis::hot_record::from_json;
    use serde_json::json;
    let dir = corpus("hot_record");
    let trial = from_json(
        "trial state",
        &json!({
            "attempts": 2,
            "history": { "winner": null, "is_final": true, "infra_used": 1,
                         "overloaded_used": 0, "blocked_streak": 3 },
            "final_mark": { "counted": false, "excluded_reason": "infra_failure:guest_lost" },
            "queued": { "delayed_until": 1791302400000i64, "placement": { "OtherHost": "host-1" },
                        "since_ms": 1791302300000i64 },
            "rows": 2,
            "retry_pass": 1
        }),
    )
    .unwrap();
    let lease = json!({
        "attempt": 1, "lane": "w-0", "host": "host-1", "worker": "w", "phase": "agent",
        "deadline_ms": 1791302400000i64, "hard_deadline_ms": 1791306000000i64,
        "heartbeat_seen": true, "claimed_ms": 1791302300000i64, "reserved_usd": 0.25,
        "paired": false, "cancel_requested": false, "revoked": false, "grace_until_ms": null
    });
    let token = from_json(
        "token record",
        &json!({ "rows": 1, "ack": { "token": { "trial_id": "t1.r0.a", "attempt": 1 },
                 "counted": true, "duplicate": false, "late": false, "winner_attempt": 1,
                 "seq": 7 } }),
    )
    .unwrap();
    let block = from_json(
        "block state",
        &json!({ "finals": 2, "wall_s": 12.5, "complete": true, "phase2": "started" }),
    )
    .unwrap();
    let folded = from_json(
        "trial record",
        &json!({
            "state": { "attempts": 2,
                       "history": { "winner": 2, "is_final": true, "infra_used": 1,
                                    "overloaded_used": 0, "blocked_streak": 0 },
                       "final_mark": null, "queued": null, "rows": 1, "retry_pass": null },
            "lease": lease,
            "tokens": [null, { "rows": 1, "ack": null }]
        }),
    )
    .unwrap();
    write(&dir, "trial", &trial);
    write(&dir, "trial_record", &folded);
    write(&dir, "lease", &from_json("lease", &lease).unwrap());
    write(&dir, "token", &token);
    write(&dir, "block", &block);
    write(&dir, "trial_cut", &trial[..trial.len() / 2]);
    let mut long = block.clone();
    long.push(0);
    write(&dir, "block_trailing", &long);
    write(&dir, "lease_json", lease.to_string().as_bytes());
}

#[test]
#[ignore = "writes the generated seed inputs into fuzz/corpus"]
fn write_generated_seeds() {
    write_packed_entries();
    write_hot_records();
    let dir = corpus("lane_messages");
    let mut infra = outcome();
    infra.status = Status::InfraError;
    infra.failure_kind = Some(FailureKind::RateLimit);
    infra.result.score = None;
    infra.result.passed = None;
    infra.reset_epoch = Some(1791302400);
    infra.record.error = Some("provider returned 429".into());
    let with_campaign = |o: Outcome| {
        let mut o = pb::Outcome::from(o);
        o.token = wire_token("t1.r0.a");
        o.campaign = "c".into();
        o.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into();
        o
    };
    let token_phase = |trial: &str, phase: pb::Phase| pb::TokenPhase {
        token: wire_token(trial),
        phase: phase as i32,
        campaign: "c".into(),
        traceparent: String::new(),
    };
    let messages = [
        (
            "register",
            Msg::Register(pb::Register {
                worker_id: "vm-host-7".into(),
                host: "vm-host-7".into(),
                lanes: 4,
                version: "0.1.0".into(),
                labels: [("gpu".to_owned(), "a100".to_owned())].into(),
                arms: vec!["a".into(), "b".into()],
                drivers: vec![pb::DriverOffer {
                    name: "osworld".into(),
                    env: vec!["API_KEY".into()],
                }],
                campaign_commands: true,
                command_env: vec!["HOME_DIR".into()],
                driver_override: false,
                campaigns: vec!["c".into()],
                protocol: lanes_common::protocol::LANE_PROTOCOL,
                containers: false,
            }),
        ),
        (
            "work-request",
            Msg::WorkRequest(pb::WorkRequest {
                lane: "vm-host-7-0".into(),
                exclude_campaigns: vec!["other".into()],
            }),
        ),
        (
            "heartbeat",
            Msg::Heartbeat(pb::Heartbeat {
                tokens: vec![
                    token_phase("t1.r0.a", pb::Phase::Agent),
                    token_phase("t2.r1.b", pb::Phase::Evaluate),
                ],
            }),
        ),
        ("outcome-completed", Msg::Outcome(with_campaign(outcome()))),
        ("outcome-infra", Msg::Outcome(with_campaign(infra))),
        (
            "reconnect",
            Msg::Reconnect(pb::Reconnect {
                in_flight: vec![token_phase("t1.r0.a", pb::Phase::Boot)],
            }),
        ),
        (
            "release-blocked",
            Msg::Release(pb::Release {
                token: wire_token("t1.r0.a"),
                reason: pb::ReleaseReason::Blocked as i32,
                detail: "identity pin agent_sha256 differs".into(),
                campaign: "c".into(),
                failure_kind: pb::FailureKind::IdentityMismatch as i32,
                lane: "vm-host-7-0".into(),
                ..Default::default()
            }),
        ),
        (
            "forfeit",
            Msg::Forfeit(pb::Forfeit {
                tokens: vec![pb::CampaignToken {
                    token: wire_token("t1.r0.a"),
                    campaign: "c".into(),
                }],
            }),
        ),
        (
            "status",
            Msg::Status(pb::WorkerStatus {
                outbox_broken: true,
                unpersisted: 3,
                detail: "outbox: No space left on device\n".into(),
            }),
        ),
    ];
    for (name, msg) in messages {
        let m = pb::WorkerMessage { msg: Some(msg) };
        write(&dir, name, &m.encode_to_vec());
    }

    let dir = corpus("archive_reader");
    let campaign = small_campaign();
    let id = CampaignId::new("c").unwrap();
    let trials: Vec<_> = lanes_common::schedule::trials(&campaign).collect();
    let rows = [
        Row::from_outcome(
            &id,
            &trials[0],
            outcome(),
            StoreFields {
                seq: 0,
                counted: true,
                is_final: true,
                written_utc: "2026-12-04T10:00:32Z".parse().unwrap(),
                ..Default::default()
            },
        ),
        Row::bare(
            &id,
            &trials[1],
            1,
            Status::Cancelled,
            None,
            StoreFields {
                seq: 1,
                written_utc: "2026-12-04T10:01:00Z".parse().unwrap(),
                ..Default::default()
            },
        ),
    ];
    let mut lines = vec![archive::to_line(&Line::Header(Box::new(Header {
        format: ARCHIVE_FORMAT.into(),
        archived_utc: "2026-12-04T12:00:00Z".parse().unwrap(),
        spec: campaign.spec.clone(),
        amendments: serde_json::json!([]),
        status: serde_json::json!({"state": "done"}),
    })))];
    lines.extend(
        campaign
            .tasks
            .iter()
            .map(|t| archive::to_line(&Line::Task(t.clone()))),
    );
    lines.extend(
        rows.iter()
            .map(|r| archive::to_line(&Line::Row(Box::new(r.clone())))),
    );
    lines.push(archive::to_line(&Line::End(End {
        tasks: campaign.tasks.len() as u64,
        rows: rows.len() as u64,
    })));
    let text = lines.join("\n") + "\n";
    archive::read_from(text.as_bytes()).expect("the seed archive reads");
    write(&dir, "whole.jsonl", text.as_bytes());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).unwrap();
    write(&dir, "whole.jsonl.gz", &gz.finish().unwrap());
    let cut = lines[..lines.len() - 1].join("\n");
    write(&dir, "cut-short.jsonl", cut.as_bytes());
}
