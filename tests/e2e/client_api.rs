//! What a client in any language meets over real gRPC: the submit forms (`campaign_toml`,
//! a minimal `spec_json`, a `SubmitStream` of chunks), every problem of a request listed in a
//! `google.rpc.BadRequest`, and server reflection behind the client token.

use std::sync::Arc;

use lanes_common::proto as pb;
use lanes_coordinator::store::{EmbeddedStore, ManualClock};
use lanes_tests::coordinator::{CLIENT_TOKEN, CoordinatorHandle, LANE_TOKEN};
use lanes_tests::lane_client::{Bearer, Client, channel, client};
use pb::submit_request::Spec;
use tokio_stream::StreamExt;
use tonic::Code;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_types::StatusExt;

const CAMPAIGN: &str = r#"id = "toml-form"
phase1_runs = 1
schedule_seed = 5

[[arms]]
id = "a"

[[arms]]
id = "b"

[driver]
sim = {}
"#;

struct Env {
    coord: CoordinatorHandle,
    _dir: tempfile::TempDir,
}

async fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let clock = ManualClock::new(1_796_083_200_000);
    let coord = CoordinatorHandle::start(store, Arc::new(clock)).await;
    Env { coord, _dir: dir }
}

fn tasks(n: usize) -> Vec<pb::TaskSpec> {
    (0..n)
        .map(|i| pb::TaskSpec {
            id: format!("t{i}"),
            payload_json: format!("{{\"n\":{i}}}"),
            ..Default::default()
        })
        .collect()
}

async fn trials_of(c: &mut Client, id: &str) -> Result<u64, tonic::Status> {
    let s = c.get(pb::GetRequest { id: id.into() }).await?;
    Ok(s.into_inner().trials_total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_file_and_a_minimal_spec_json_submit_as_they_are() {
    let e = env().await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    let r = c
        .submit(pb::SubmitRequest {
            spec: Some(Spec::CampaignToml(CAMPAIGN.into())),
            tasks: tasks(3),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.id.as_str(), r.trials), ("toml-form", 6));

    let json = r#"{"id": "json-form", "phase1_runs": 2, "schedule_seed": 5,
                   "arms": [{"id": "a"}], "driver": {"kind": {"sim": {}}}}"#;
    let r = c
        .submit(pb::SubmitRequest {
            spec: Some(Spec::SpecJson(json.into())),
            tasks: tasks(2),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.id.as_str(), r.trials), ("json-form", 4));
    assert_eq!(trials_of(&mut c, "json-form").await.unwrap(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_problem_of_a_request_comes_back_as_a_field_violation() {
    let e = env().await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    let mut bad = tasks(3);
    bad[0].id = "../up".into();
    bad[2].payload_json = "{".into();
    let err = c
        .submit(pb::SubmitRequest {
            spec: Some(Spec::SpecJson(
                r#"{"id": "x", "arms": [{"id": "a", "model": "m"}], "driver": {}}"#.into(),
            )),
            tasks: bad,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let details = err
        .get_details_bad_request()
        .expect("a google.rpc.BadRequest in the status details");
    let fields: Vec<&str> = details
        .field_violations
        .iter()
        .map(|v| v.field.as_str())
        .collect();
    assert_eq!(
        fields,
        [
            "tasks[0].id",
            "tasks[2].payload_json",
            "spec_json.phase1_runs",
            "spec_json.schedule_seed",
            "spec_json.arms[0].model",
            "spec_json.driver.kind",
        ]
    );
    for v in &details.field_violations {
        assert!(err.message().contains(&v.field), "{}", err.message());
    }

    // The campaign file's loader, with its line, in the details too.
    let err = c
        .submit(pb::SubmitRequest {
            spec: Some(Spec::CampaignToml(
                CAMPAIGN.replace("id = \"b\"", "id = \"b.c\""),
            )),
            tasks: tasks(1),
        })
        .await
        .unwrap_err();
    let v = &err.get_details_bad_request().unwrap().field_violations[0];
    assert_eq!(v.field, "campaign_toml.arms[1].id");
    assert!(v.description.starts_with("line 9: "), "{}", v.description);
}

fn header(spec: Spec) -> pb::SubmitChunk {
    pb::SubmitChunk {
        chunk: Some(pb::submit_chunk::Chunk::Header(pb::SubmitRequest {
            spec: Some(spec),
            tasks: Vec::new(),
        })),
    }
}

fn chunk(tasks: Vec<pb::TaskSpec>) -> pb::SubmitChunk {
    pb::SubmitChunk {
        chunk: Some(pb::submit_chunk::Chunk::Tasks(pb::TaskChunk { tasks })),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_campaign_is_stored_whole_when_the_stream_ends_and_not_before() {
    let e = env().await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    let all = tasks(2_500);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let mut streaming = c.clone();
    let call = tokio::spawn(async move {
        streaming
            .submit_stream(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
    });
    tx.send(header(Spec::CampaignToml(CAMPAIGN.into())))
        .await
        .unwrap();
    let mut chunks = all.chunks(1_000);
    tx.send(chunk(chunks.next().unwrap().to_vec()))
        .await
        .unwrap();
    // Mid-stream, nothing of it is visible.
    let err = trials_of(&mut c, "toml-form").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    for part in chunks {
        tx.send(chunk(part.to_vec())).await.unwrap();
    }
    drop(tx);
    let r = call.await.unwrap().unwrap().into_inner();
    assert_eq!((r.id.as_str(), r.trials), ("toml-form", 5_000));
    assert_eq!(trials_of(&mut c, "toml-form").await.unwrap(), 5_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_stream_stores_nothing() {
    let e = env().await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    let msgs = vec![
        header(Spec::CampaignToml(CAMPAIGN.into())),
        chunk(tasks(10)),
        header(Spec::CampaignToml(CAMPAIGN.into())),
        chunk(tasks(10)),
    ];
    let err = c.submit_stream(tokio_stream::iter(msgs)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(
        err.get_details_bad_request().unwrap().field_violations[0].field,
        "header"
    );
    let err = trials_of(&mut c, "toml-form").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    let err = c
        .submit_stream(tokio_stream::iter([chunk(tasks(1))]))
        .await
        .unwrap_err();
    assert!(err.message().contains("first message"), "{}", err.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_over_the_client_message_limit_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let clock = ManualClock::new(1_796_083_200_000);
    let config = lanes_coordinator::CoordinatorConfig {
        max_client_message_bytes: 64 * 1024,
        ..lanes_tests::coordinator::test_config()
    };
    let coord = CoordinatorHandle::start_with(config, store, Arc::new(clock)).await;
    let mut c = client(&coord.url(), Some(CLIENT_TOKEN)).await;
    // Each chunk is well under the limit; together they are over it.
    let mut chunks = vec![header(Spec::CampaignToml(CAMPAIGN.into()))];
    for n in 0..100 {
        let mut part = tasks(1);
        part[0].id = format!("t{n}");
        part[0].payload_json = format!("{{\"pad\":\"{}\"}}", "x".repeat(1024));
        chunks.push(chunk(part));
    }
    let err = c
        .submit_stream(tokio_stream::iter(chunks))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("--max-client-message-bytes"),
        "{}",
        err.message()
    );
    let err = trials_of(&mut c, "toml-form").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

/// `TaskSpec`, `SubmitRequest` and `SubmitChunk` with their text fields as `bytes`: the same
/// wire format, so a test can send what a careless client could, text that is not UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct RawTaskSpec {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(bytes = "vec", tag = "7")]
    payload_json: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawSubmitRequest {
    #[prost(bytes = "vec", optional, tag = "1")]
    spec_json: Option<Vec<u8>>,
    #[prost(message, repeated, tag = "2")]
    tasks: Vec<RawTaskSpec>,
    #[prost(bytes = "vec", optional, tag = "3")]
    campaign_toml: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawSubmitChunk {
    #[prost(message, optional, tag = "1")]
    header: Option<RawSubmitRequest>,
}

/// Sends `raw` as a Submit (or, with `stream`, as the header of a SubmitStream).
async fn submit_raw(url: &str, raw: RawSubmitRequest, stream: bool) -> tonic::Status {
    use tonic::codegen::http::uri::PathAndQuery;
    let channel = tonic::service::interceptor::InterceptedService::new(
        channel(url).await,
        Bearer(Some(CLIENT_TOKEN.to_owned())),
    );
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let answer = if stream {
        let codec = tonic_prost::ProstCodec::<RawSubmitChunk, pb::SubmitResponse>::default();
        let chunk = RawSubmitChunk { header: Some(raw) };
        let path = PathAndQuery::from_static("/lanes.v1.CampaignService/SubmitStream");
        grpc.client_streaming(
            tonic::Request::new(tokio_stream::iter([chunk])),
            path,
            codec,
        )
        .await
    } else {
        let codec = tonic_prost::ProstCodec::<RawSubmitRequest, pb::SubmitResponse>::default();
        let path = PathAndQuery::from_static("/lanes.v1.CampaignService/Submit");
        grpc.unary(tonic::Request::new(raw), path, codec).await
    };
    answer.expect_err("text that is not UTF-8 is refused")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_that_is_not_utf8_is_invalid_argument_naming_the_field() {
    let e = env().await;
    let url = e.coord.url();
    let bad = b"{\"id\": \"caf\xe9\"}".to_vec();
    let json = r#"{"id": "utf8", "phase1_runs": 1, "schedule_seed": 5,
                   "arms": [{"id": "a"}], "driver": {"kind": {"sim": {}}}}"#;
    let task = |payload_json: Vec<u8>| RawTaskSpec {
        id: "t0".into(),
        payload_json,
    };
    let cases = [
        (
            "spec_json",
            RawSubmitRequest {
                spec_json: Some(bad.clone()),
                tasks: vec![task(b"{}".to_vec())],
                campaign_toml: None,
            },
        ),
        (
            "campaign_toml",
            RawSubmitRequest {
                spec_json: None,
                tasks: vec![task(b"{}".to_vec())],
                campaign_toml: Some(b"id = \"caf\xe9\"".to_vec()),
            },
        ),
        (
            "payload_json",
            RawSubmitRequest {
                spec_json: Some(json.as_bytes().to_vec()),
                tasks: vec![task(bad.clone())],
                campaign_toml: None,
            },
        ),
    ];
    for stream in [false, true] {
        for (field, raw) in cases.clone() {
            let err = submit_raw(&url, raw, stream).await;
            assert_eq!(
                err.code(),
                Code::InvalidArgument,
                "{field} (stream: {stream}): {err:?}"
            );
            assert!(
                err.message().contains(field) && err.message().contains("UTF-8"),
                "{field} (stream: {stream}): {}",
                err.message()
            );
        }
    }
    // Nothing was stored, and the same spec in valid text goes through.
    let mut c = client(&url, Some(CLIENT_TOKEN)).await;
    let err = trials_of(&mut c, "utf8").await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    let r = c
        .submit(pb::SubmitRequest {
            spec: Some(Spec::SpecJson(json.into())),
            tasks: tasks(1),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.id, "utf8");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_twice_in_spec_json_is_a_field_violation() {
    let e = env().await;
    let mut c = client(&e.coord.url(), Some(CLIENT_TOKEN)).await;
    let json = r#"{"id": "first", "phase1_runs": 1, "schedule_seed": 5,
                   "arms": [{"id": "a"}], "driver": {"kind": {"sim": {}}}, "id": "second"}"#;
    let err = c
        .submit(pb::SubmitRequest {
            spec: Some(Spec::SpecJson(json.into())),
            tasks: tasks(1),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let v = &err.get_details_bad_request().unwrap().field_violations[0];
    assert_eq!(v.field, "spec_json.id");
    assert!(v.description.contains("duplicate key"), "{}", v.description);
    for id in ["first", "second"] {
        let err = trials_of(&mut c, id).await.unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{id}");
    }
}

async fn list_services(url: &str, token: Option<&str>) -> Result<Vec<String>, tonic::Status> {
    let mut r = ServerReflectionClient::with_interceptor(
        channel(url).await,
        Bearer(token.map(str::to_owned)),
    );
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut answers = r
        .server_reflection_info(tokio_stream::iter([request]))
        .await?
        .into_inner();
    let answer = answers.next().await.expect("an answer")?;
    match answer.message_response {
        Some(MessageResponse::ListServicesResponse(l)) => {
            Ok(l.service.into_iter().map(|s| s.name).collect())
        }
        other => panic!("not a service list: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_the_services_to_clients_only() {
    let e = env().await;
    let url = e.coord.url();
    let services = list_services(&url, Some(CLIENT_TOKEN)).await.unwrap();
    for want in [
        "lanes.v1.CampaignService",
        "lanes.v1.LaneService",
        "grpc.health.v1.Health",
    ] {
        assert!(
            services.iter().any(|s| s == want),
            "{want} not in {services:?}"
        );
    }
    for token in [None, Some(LANE_TOKEN), Some("wrong")] {
        let err = list_services(&url, token).await.unwrap_err();
        assert_eq!(err.code(), Code::Unauthenticated, "{token:?}");
    }
}
