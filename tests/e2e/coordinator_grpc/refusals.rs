//! Refusals: another lane protocol, unauthenticated calls to every RPC, a reserved driver
//! env, and oversized or malformed requests, each with what to fix named.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_of_another_lane_protocol_is_refused_naming_the_side_to_upgrade() {
    use lanes_common::protocol::LANE_PROTOCOL;
    let e = env("embedded").await;
    let register = |protocol| pb::Register {
        worker_id: "w".into(),
        host: "h".into(),
        lanes: 1,
        protocol,
        ..Default::default()
    };
    for (protocol, upgrade) in [
        (0, "upgrade the worker"),
        (LANE_PROTOCOL + 1, "upgrade the coordinator"),
    ] {
        let refused =
            match ScriptedLane::connect_with(&e.coord.url(), Some(LANE_TOKEN), register(protocol))
                .await
            {
                Ok(_) => panic!("a worker of protocol {protocol} was served"),
                Err(s) => s,
            };
        assert_eq!(refused.code(), Code::FailedPrecondition, "{refused:?}");
        assert!(refused.message().contains(upgrade), "{refused:?}");
    }
    // This build's own protocol is served.
    ScriptedLane::connect_with(&e.coord.url(), Some(LANE_TOKEN), register(LANE_PROTOCOL))
        .await
        .expect("served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unauthenticated_calls_are_refused_for_every_rpc() {
    let e = env("embedded").await;
    for token in [None, Some("wrong"), Some(LANE_TOKEN)] {
        let mut c = client(&e.coord.url(), token).await;
        let codes = [
            c.submit(submit_request(&small_campaign("x", 1, "")))
                .await
                .map(drop)
                .unwrap_err()
                .code(),
            c.get(pb::GetRequest { id: "x".into() })
                .await
                .map(drop)
                .unwrap_err()
                .code(),
            c.list(pb::ListRequest {})
                .await
                .map(drop)
                .unwrap_err()
                .code(),
            c.watch(pb::WatchRequest {
                id: "x".into(),
                from: String::new(),
            })
            .await
            .map(drop)
            .unwrap_err()
            .code(),
            c.stop(pb::StopRequest {
                id: "x".into(),
                mode: 1,
            })
            .await
            .map(drop)
            .unwrap_err()
            .code(),
            c.rows(pb::RowsRequest {
                id: "x".into(),
                from_seq: 0,
                follow: false,
            })
            .await
            .map(drop)
            .unwrap_err()
            .code(),
            c.report(pb::ReportRequest { id: "x".into() })
                .await
                .map(drop)
                .unwrap_err()
                .code(),
            c.artifacts(pb::ArtifactsRequest {
                campaign: "x".into(),
                trial_id: "t.r0.a".into(),
                attempt: 1,
            })
            .await
            .map(drop)
            .unwrap_err()
            .code(),
            c.read_artifact(pb::ReadArtifactRequest {
                campaign: "x".into(),
                trial_id: "t.r0.a".into(),
                attempt: 1,
                path: "outcome.json".into(),
            })
            .await
            .map(drop)
            .unwrap_err()
            .code(),
        ];
        assert!(
            codes.iter().all(|c| *c == Code::Unauthenticated),
            "{token:?}: {codes:?}"
        );
    }
    for token in [None, Some("wrong"), Some(CLIENT_TOKEN)] {
        let err = ScriptedLane::connect(&e.coord.url(), token, "w", "h")
            .await
            .map(drop)
            .unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{token:?}");
        assert!(!err.message().contains(LANE_TOKEN));
    }
}

/// A coordinator without an artifact store says so; a malformed trial id is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn artifact_calls_without_a_store_or_with_a_bad_trial_say_why() {
    let e = env("embedded").await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    let err = c
        .artifacts(pb::ArtifactsRequest {
            campaign: "x".into(),
            trial_id: "t.r0.a".into(),
            attempt: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(
        err.message().contains("--artifact-store"),
        "{}",
        err.message()
    );
    let err = c
        .read_artifact(pb::ReadArtifactRequest {
            campaign: "x".into(),
            trial_id: "../etc".into(),
            attempt: 1,
            path: "outcome.json".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    assert!(err.message().contains("trial_id"), "{}", err.message());
}

/// A submitted spec whose `[driver] env` sets or reads a reserved variable is refused at
/// submit, naming the variable, and nothing is stored: the loader's rule holds for specs that
/// never went through a campaign file.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_submit_with_a_reserved_driver_env_is_refused_naming_the_variable() {
    let e = env("embedded").await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    for (name, value) in [
        ("LD_PRELOAD", "/tmp/evil.so"),
        ("PATH", "/tmp/evil"),
        ("PYTHONPATH", "/tmp/evil"),
        ("API_KEY", "$LANES_LANE_TOKEN"),
    ] {
        let req = with_spec_json(submit_request(&small_campaign("envy", 1, "")), |spec| {
            spec["driver"]["env"][name] = serde_json::json!(value);
        });
        let err = c.submit(req).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{name}");
        let shown = value.strip_prefix('$').unwrap_or(name);
        assert!(
            err.message().contains(&format!("driver.env.{name}")) && err.message().contains(shown),
            "{}",
            err.message()
        );
    }
    let err = c
        .get(pb::GetRequest { id: "envy".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{}", err.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oversized_and_malformed_requests_are_refused_with_the_field_named() {
    let e = env("embedded").await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    let err = c
        .submit(pb::SubmitRequest {
            spec: Some(pb::submit_request::Spec::SpecJson("not json".into())),
            tasks: vec![],
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("spec_json"), "{}", err.message());

    let mut req = submit_request(&small_campaign("big", 1, ""));
    req.tasks[0].payload_json = format!("{{\"blob\":\"{}\"}}", "x".repeat(70 * 1024));
    let err = c.submit(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("tasks[0].payload_json"),
        "{}",
        err.message()
    );

    let mut req = submit_request(&small_campaign("dup", 2, ""));
    req.tasks[1].id = req.tasks[0].id.clone();
    let err = c.submit(req).await.unwrap_err();
    assert!(err.message().contains("tasks[1].id"), "{}", err.message());

    let err = c
        .get(pb::GetRequest {
            id: "../etc".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("invalid id"), "{}", err.message());
    let err = c
        .get(pb::GetRequest { id: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    // Over the configured message size (8 MiB in tests).
    let mut req = submit_request(&small_campaign("huge", 1, ""));
    req.tasks[0].group = " ".repeat(9 * 1024 * 1024);
    let err = c.submit(req).await.unwrap_err();
    assert!(
        matches!(err.code(), Code::OutOfRange | Code::ResourceExhausted),
        "{err:?}"
    );

    // A lane message with a bad token ends the session with the field named.
    c.submit(submit_request(&small_campaign("lanebad", 1, "")))
        .await
        .unwrap();
    let mut l = lane(&e.coord.url(), "w", "h").await;
    l.send(In::Heartbeat(pb::Heartbeat {
        tokens: vec![pb::TokenPhase {
            token: Some(pb::Token {
                trial_id: "../x".into(),
                attempt: 1,
                lease: String::new(),
            }),
            phase: pb::Phase::Agent as i32,
            campaign: "lanebad".into(),
            traceparent: String::new(),
        }],
    }))
    .await;
    let err = l.next().await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("tokens[0].token"),
        "{}",
        err.message()
    );

    let mut l = lane(&e.coord.url(), "w", "h").await;
    let Msg::Assignment(a) = l.work("w-0").await else {
        panic!("work")
    };
    let mut bad = scored_outcome("lanebad", &tokens(&a)[0], "w-0", "h", 1.0);
    bad.score = None;
    l.send(In::Outcome(bad)).await;
    // A malformed outcome is refused for good, with the field named; the session stays.
    match l.next().await.unwrap() {
        Msg::OutcomeError(e) => {
            assert!(!e.retryable);
            assert!(e.reason.contains("outcome.score"), "{}", e.reason);
        }
        other => panic!("expected an outcome error, got {other:?}"),
    }
    assert!(matches!(
        l.work("w-1").await,
        Msg::NoWork(_) | Msg::Assignment(_)
    ));
}
