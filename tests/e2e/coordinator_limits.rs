//! The coordinator's request limits over real gRPC (tonic on 127.0.0.1:0, the embedded store):
//! fields over their size limits, the trial cap, a campaign whose assignments would not fit a
//! lane message, concurrent Submits, and open Watch/Rows streams per token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lanes_common::proto as pb;
use lanes_common::proto::coordinator_message::Msg;
use lanes_common::proto::worker_message::Msg as In;
use lanes_coordinator::CoordinatorConfig;
use lanes_coordinator::store::{EmbeddedStore, ManualClock, Store};
use lanes_tests::coordinator::{CLIENT_TOKEN, CoordinatorHandle, LANE_TOKEN, test_config};
use lanes_tests::counting_store::CountingStore;
use lanes_tests::lane_client::{
    Client, ScriptedLane, client, scored_outcome, small_campaign, submit_request, with_spec_json,
};
use tonic::Code;

const T0: i64 = 1_796_083_200_000;

/// A coordinator with `config` over an embedded store seen through a [`CountingStore`].
struct Env {
    store: Arc<CountingStore>,
    coord: CoordinatorHandle,
    _dir: tempfile::TempDir,
}

async fn env(config: CoordinatorConfig) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(CountingStore::new(Arc::new(
        EmbeddedStore::open(dir.path()).unwrap(),
    )));
    let coord = CoordinatorHandle::start_with(
        config,
        store.clone() as Arc<dyn Store>,
        Arc::new(ManualClock::new(T0)),
    )
    .await;
    Env {
        store,
        coord,
        _dir: dir,
    }
}

/// Polls `check` every 20 ms until it holds, for at most 10 s.
async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn refused(err: &tonic::Status, code: Code, needles: &[&str]) {
    assert_eq!(err.code(), code, "{err:?}");
    for n in needles {
        assert!(
            err.message().contains(n),
            "{:?} does not say {n:?}",
            err.message()
        );
    }
}

async fn not_stored(c: &mut Client, id: &str) {
    let err = c.get(pb::GetRequest { id: id.into() }).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{id} was stored: {err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fields_over_their_limits_are_refused_naming_the_field_and_the_limit() {
    let e = env(test_config()).await;
    let url = e.coord.url();
    let mut c = client(&url, Some(CLIENT_TOKEN)).await;

    // A submit: task fields and arm fields.
    let req = || submit_request(&small_campaign("limits", 2, ""));
    let mut r = req();
    r.tasks[1].group = "g".repeat(257);
    let err = c.submit(r).await.unwrap_err();
    refused(
        &err,
        Code::InvalidArgument,
        &["tasks[1].group", "257 bytes", "limit of 256"],
    );
    let mut r = req();
    r.tasks[0].tags = vec!["t".into(); 65];
    let err = c.submit(r).await.unwrap_err();
    refused(
        &err,
        Code::InvalidArgument,
        &["tasks[0].tags", "more than 64 tags"],
    );
    let r = with_spec_json(req(), |s| {
        s["arms"][0]["config"] = serde_json::json!({ "k": "x".repeat(70_000) })
    });
    let err = c.submit(r).await.unwrap_err();
    refused(
        &err,
        Code::InvalidArgument,
        &["spec_json.arms[0].config", "limit of 65536"],
    );
    let r = with_spec_json(req(), |s| s["arms"][1]["provider"] = "p".repeat(129).into());
    let err = c.submit(r).await.unwrap_err();
    refused(
        &err,
        Code::InvalidArgument,
        &["spec_json.arms[1].provider", "limit of 128"],
    );
    not_stored(&mut c, "limits").await;

    // A lane's outcome and release: refused for good, naming the field; the session goes on.
    c.submit(submit_request(&small_campaign(
        "lanes",
        1,
        "pairing = \"none\"",
    )))
    .await
    .unwrap();
    let mut l = ScriptedLane::connect(&url, Some(LANE_TOKEN), "w", "h")
        .await
        .unwrap();
    let Msg::Assignment(a) = l.work("w-0").await else {
        panic!("work")
    };
    let t = a.trials[0].token.clone().unwrap();
    let outcome = || scored_outcome("lanes", &t, "w-0", "h", 1.0);
    let oversized: Vec<(&str, pb::Outcome)> = vec![
        (
            "outcome.final_text is 65537 bytes, over the limit of 65536 bytes",
            pb::Outcome {
                final_text: "x".repeat(64 * 1024 + 1),
                ..outcome()
            },
        ),
        (
            "outcome.error is 16385 bytes, over the limit of 16384 bytes",
            pb::Outcome {
                error: "e".repeat(16 * 1024 + 1),
                ..outcome()
            },
        ),
        (
            "outcome.checks is 1025 items, over the limit of 1024 items",
            pb::Outcome {
                checks: vec![pb::Check::default(); 1025],
                ..outcome()
            },
        ),
        (
            "outcome.checks[0].detail",
            pb::Outcome {
                checks: vec![pb::Check {
                    name: "c".into(),
                    detail: "d".repeat(4097),
                    ..Default::default()
                }],
                ..outcome()
            },
        ),
        (
            "outcome.runtime_outcome",
            pb::Outcome {
                runtime_outcome: "r".repeat(257),
                ..outcome()
            },
        ),
        (
            "outcome.publication_errors[0]",
            pb::Outcome {
                publication_errors: vec!["p".repeat(4097)],
                ..outcome()
            },
        ),
        (
            "outcome.driver.pins",
            pb::Outcome {
                driver: Some(pb::DriverIdentity {
                    pins: (0..65).map(|i| (i.to_string(), String::new())).collect(),
                    ..Default::default()
                }),
                ..outcome()
            },
        ),
        (
            "outcome.quota.provider",
            pb::Outcome {
                quota: Some(pb::Quota {
                    provider: "q".repeat(129),
                    ..Default::default()
                }),
                ..outcome()
            },
        ),
        // Figures no attempt can have: they would poison the spend and the budget gate.
        (
            "outcome.cost_usd: cost_usd must be a finite number from 0 to 10000 USD, got 1e308",
            pb::Outcome {
                cost_usd: Some(1e308),
                ..outcome()
            },
        ),
        (
            "outcome.tokens.input: tokens.input is 18446744073709551615, over the maximum of \
             10000000000",
            pb::Outcome {
                tokens: Some(pb::Tokens {
                    input: u64::MAX,
                    ..Default::default()
                }),
                ..outcome()
            },
        ),
    ];
    for (want, o) in oversized {
        l.send(In::Outcome(o)).await;
        match l.next().await.unwrap() {
            Msg::OutcomeError(err) => {
                assert!(!err.retryable, "{err:?}");
                assert!(
                    err.reason.contains(want),
                    "{:?} does not say {want:?}",
                    err.reason
                );
                // The refusal names the token, without its lease secret.
                let echoed = err.token.as_ref().expect("the refused token");
                assert_eq!((&echoed.trial_id, echoed.attempt), (&t.trial_id, t.attempt));
                assert!(echoed.lease.is_empty(), "{echoed:?}");
            }
            other => panic!("expected {want:?} refused, got {other:?}"),
        }
    }
    l.send(In::Release(pb::Release {
        token: Some(t.clone()),
        reason: pb::ReleaseReason::Cancelled as i32,
        detail: "d".repeat(16 * 1024 + 1),
        campaign: "lanes".into(),
        lane: "w-0".into(),
        ..Default::default()
    }))
    .await;
    match l.next().await.unwrap() {
        Msg::OutcomeError(err) => {
            assert!(!err.retryable, "{err:?}");
            assert!(
                err.reason
                    .contains("release.detail is 16385 bytes, over the limit of 16384"),
                "{}",
                err.reason
            );
        }
        other => panic!("expected the release refused, got {other:?}"),
    }
    // Nothing of that was recorded, and the same outcome within the limits is.
    match l.score("lanes", &t, "w-0", 1.0).await {
        Msg::OutcomeAck(ack) => assert!(ack.counted && ack.seq == 0, "{ack:?}"),
        other => panic!("expected an ack, got {other:?}"),
    }

    // A register over a limit ends the session, naming the field.
    let err = ScriptedLane::connect(&url, Some(LANE_TOKEN), "w", &"h".repeat(257))
        .await
        .map(drop)
        .unwrap_err();
    refused(
        &err,
        Code::InvalidArgument,
        &["register.host is 257 bytes", "limit of 256 bytes"],
    );
    let err = ScriptedLane::connect(&url, Some(LANE_TOKEN), &"w".repeat(257), "h")
        .await
        .map(drop)
        .unwrap_err();
    refused(&err, Code::InvalidArgument, &["register.worker_id"]);
    // A host name with a control character would forge lines in logs and rows: refused.
    let err = ScriptedLane::connect(&url, Some(LANE_TOKEN), "w", "h\nforged")
        .await
        .map(drop)
        .unwrap_err();
    refused(
        &err,
        Code::InvalidArgument,
        &["register.host", "control characters"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_campaign_over_the_trial_cap_is_refused_before_it_is_stored() {
    let e = env(CoordinatorConfig {
        max_trials: 6,
        ..test_config()
    })
    .await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    // 4 tasks x 1 run x 2 arms.
    let err = c
        .submit(submit_request(&small_campaign("capped", 4, "")))
        .await
        .unwrap_err();
    refused(
        &err,
        Code::InvalidArgument,
        &["8 trials", "limit of 6 trials", "--max-trials"],
    );
    not_stored(&mut c, "capped").await;
    let ok = c
        .submit(submit_request(&small_campaign("capped", 3, "")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(ok.trials, 6);
    // Growing it past the cap is refused too.
    let err = c
        .submit(submit_request(&small_campaign("capped", 4, "")))
        .await
        .unwrap_err();
    refused(&err, Code::InvalidArgument, &["--max-trials"]);
}

/// 64 arms with 60 KB configs each: every trial fits a lane message, but a run group carries
/// all 64 and would not (4 MiB). Such a campaign would end the session of every worker that
/// claims a unit of it; it is refused at submit, naming the task.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_campaign_whose_run_groups_exceed_the_lane_message_limit_is_refused() {
    let e = env(test_config()).await;
    let url = e.coord.url();
    let mut c = client(&url, Some(CLIENT_TOKEN)).await;
    let poison = |id: &str, pairing: &str| {
        let arms: String = (0..64)
            .map(|i| {
                format!(
                    "[[arms]]\nid = \"a{i}\"\nconfig = {{ blob = \"{}\" }}\n",
                    "x".repeat(60_000)
                )
            })
            .collect();
        format!(
            "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 1\npairing = \"{pairing}\"\n{arms}\
             [driver]\nsim = {{}}\n[tasks]\nitems = [{{ id = \"T0\" }}, {{ id = \"T1\" }}]\n"
        )
    };
    let err = c
        .submit(submit_request(&poison("poison", "group")))
        .await
        .unwrap_err();
    refused(
        &err,
        Code::InvalidArgument,
        &[
            "task \"T0\"",
            "64 trials",
            "max_lane_message_bytes = 4194304",
        ],
    );
    not_stored(&mut c, "poison").await;

    // Unpaired, each assignment is one trial: it fits, and a lane gets it.
    c.submit(submit_request(&poison("single", "none")))
        .await
        .unwrap();
    let mut l = ScriptedLane::connect(&url, Some(LANE_TOKEN), "w", "h")
        .await
        .unwrap();
    match l.work("w-0").await {
        Msg::Assignment(a) => assert_eq!(a.trials.len(), 1),
        other => panic!("expected an assignment, got {other:?}"),
    }
}

/// A resume refused for every task of a big campaign: the refusal lists the first conflicts and
/// counts the rest, so it fits the status's trailers (in full it overflowed a client's metadata
/// limit, and the client saw RESOURCE_EXHAUSTED instead of the refusal).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resume_refused_for_thousands_of_conflicts_fits_its_status() {
    use prost::Message as _;
    let e = env(test_config()).await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    let mut r = submit_request(&small_campaign("drift", 3_000, ""));
    c.submit(r.clone()).await.unwrap();
    for t in &mut r.tasks {
        t.payload_json = format!("{{\"changed\":\"{}\"}}", t.id);
    }
    let err = c.submit(r).await.unwrap_err();
    refused(
        &err,
        Code::FailedPrecondition,
        &[
            "resume refused: tasks[T0].payload_sha256: recorded ",
            " more",
        ],
    );
    assert!(
        err.message().len() + err.details().len() <= 6 * 1024,
        "{} bytes of message and {} of details",
        err.message().len(),
        err.details().len()
    );
    let details = pb::SubmitResponse::decode(err.details()).unwrap();
    assert!(
        (1..=50).contains(&details.conflicts.len()),
        "{} conflicts in the details",
        details.conflicts.len()
    );
    assert_eq!(details.conflicts[0].field, "tasks[T0].payload_sha256");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn submits_beyond_the_concurrency_limit_are_refused_until_one_finishes() {
    let e = env(CoordinatorConfig {
        max_concurrent_submits: 2,
        ..test_config()
    })
    .await;
    let url = e.coord.url();
    e.store.hold_submits(true);
    let mut running = Vec::new();
    for id in ["held-1", "held-2"] {
        let url = url.clone();
        running.push(tokio::spawn(async move {
            let mut c = client(&url, Some(CLIENT_TOKEN)).await;
            c.submit(submit_request(&small_campaign(id, 1, ""))).await
        }));
    }
    let store = e.store.clone();
    eventually("two submits in the store", async || {
        store.submits_held() == 2
    })
    .await;
    let mut c = client(&url, Some(CLIENT_TOKEN)).await;
    // Refused at once: it never reaches the store, where it would be held too.
    let third = c.submit(submit_request(&small_campaign("third", 1, "")));
    let err = tokio::time::timeout(Duration::from_secs(10), third)
        .await
        .expect("the third submit is answered at once, not held with the others")
        .unwrap_err();
    refused(
        &err,
        Code::ResourceExhausted,
        &["2 submits", "--max-concurrent-submits"],
    );
    not_stored(&mut c, "third").await;

    e.store.hold_submits(false);
    for r in running {
        r.await.unwrap().expect("a held submit goes through");
    }
    c.submit(submit_request(&small_campaign("third", 1, "")))
        .await
        .expect("a slot is free again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn open_streams_per_token_are_limited_and_closing_one_frees_a_slot() {
    let e = env(CoordinatorConfig {
        max_streams_per_token: 3,
        ..test_config()
    })
    .await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&small_campaign("streams", 1, "")))
        .await
        .unwrap();
    let watch = || pb::WatchRequest {
        id: "streams".into(),
        from: String::new(),
    };
    let first = c.watch(watch()).await.unwrap().into_inner();
    let _second = c.watch(watch()).await.unwrap().into_inner();
    let _rows = c
        .rows(pb::RowsRequest {
            id: "streams".into(),
            from_seq: 0,
            follow: true,
        })
        .await
        .unwrap()
        .into_inner();
    let err = c.watch(watch()).await.map(drop).unwrap_err();
    refused(
        &err,
        Code::ResourceExhausted,
        &["3 Watch/Rows streams", "--max-streams-per-token"],
    );
    assert!(!err.message().contains(CLIENT_TOKEN));
    let err = c
        .rows(pb::RowsRequest {
            id: "streams".into(),
            from_seq: 0,
            follow: false,
        })
        .await
        .map(drop)
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    // Other calls are not streams and are not limited.
    c.get(pb::GetRequest {
        id: "streams".into(),
    })
    .await
    .unwrap();

    drop(first);
    let mut again = None;
    eventually("a freed stream slot", async || {
        again = c.watch(watch()).await.ok();
        again.is_some()
    })
    .await;
    let err = c.watch(watch()).await.map(drop).unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
}
