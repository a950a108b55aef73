//! Clients for the suites: an authenticated CampaignService client, and a scripted lane that
//! speaks LaneService's session stream one message at a time.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status, Streaming};

use lanes_common::proto as pb;
use lanes_common::proto::campaign_service_client::CampaignServiceClient;
use lanes_common::proto::coordinator_message::Msg;
use lanes_common::proto::lane_service_client::LaneServiceClient;

/// Adds `authorization: Bearer <token>` to every call.
#[derive(Clone)]
pub struct Bearer(pub Option<String>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(t) = &self.0 {
            let v: MetadataValue<_> = format!("Bearer {t}").parse().expect("ascii token");
            req.metadata_mut().insert("authorization", v);
        }
        Ok(req)
    }
}

pub type Client = CampaignServiceClient<InterceptedService<Channel, Bearer>>;

pub async fn channel(url: &str) -> Channel {
    Channel::from_shared(url.to_owned())
        .expect("url")
        .connect()
        .await
        .expect("connect to the coordinator")
}

pub async fn client(url: &str, token: Option<&str>) -> Client {
    CampaignServiceClient::with_interceptor(channel(url).await, Bearer(token.map(str::to_owned)))
}

/// How long a scripted lane waits for any one answer before failing the test.
const ANSWER: Duration = Duration::from_secs(10);

/// One worker session.
pub struct ScriptedLane {
    pub worker: String,
    pub host: String,
    tx: mpsc::Sender<pb::WorkerMessage>,
    rx: Streaming<pb::CoordinatorMessage>,
}

impl ScriptedLane {
    /// Opens a session and registers.
    pub async fn connect(
        url: &str,
        token: Option<&str>,
        worker: &str,
        host: &str,
    ) -> Result<Self, Status> {
        Self::connect_on(channel(url).await, token, worker, host).await
    }

    /// Opens a session over `https://` with this CA and client certificate, and registers.
    pub async fn connect_tls(
        url: &str,
        tls: &lanes_dial::ClientTls,
        token: Option<&str>,
        worker: &str,
        host: &str,
    ) -> Result<Self, Status> {
        let channel = lanes_dial::endpoint(url, tls)
            .expect("endpoint")
            .connect()
            .await
            .map_err(|e| Status::unavailable(lanes_dial::explain_connect_error(url, &e)))?;
        Self::connect_on(channel, token, worker, host).await
    }

    /// Opens a session and sends this `Register` as it is (a worker of another protocol, say).
    pub async fn connect_with(
        url: &str,
        token: Option<&str>,
        register: pb::Register,
    ) -> Result<Self, Status> {
        Self::open(channel(url).await, token, register).await
    }

    async fn connect_on(
        channel: Channel,
        token: Option<&str>,
        worker: &str,
        host: &str,
    ) -> Result<Self, Status> {
        let register = pb::Register {
            worker_id: worker.to_owned(),
            host: host.to_owned(),
            lanes: 1,
            version: "test".into(),
            protocol: lanes_common::protocol::LANE_PROTOCOL,
            ..Default::default()
        };
        Self::open(channel, token, register).await
    }

    async fn open(
        channel: Channel,
        token: Option<&str>,
        register: pb::Register,
    ) -> Result<Self, Status> {
        let mut c = LaneServiceClient::with_interceptor(channel, Bearer(token.map(str::to_owned)));
        let (tx, out) = mpsc::channel(64);
        let rx = c.session(ReceiverStream::new(out)).await?.into_inner();
        let mut lane = Self {
            worker: register.worker_id.clone(),
            host: register.host.clone(),
            tx,
            rx,
        };
        lane.send(pb::worker_message::Msg::Register(register)).await;
        match lane.next().await? {
            Msg::Registered(_) => Ok(lane),
            other => panic!("expected registered, got {other:?}"),
        }
    }

    pub async fn send(&mut self, m: pb::worker_message::Msg) {
        self.tx
            .send(pb::WorkerMessage { msg: Some(m) })
            .await
            .expect("session open");
    }

    /// The next message, or the status that ended the session.
    pub async fn next(&mut self) -> Result<Msg, Status> {
        match tokio::time::timeout(ANSWER, self.rx.next()).await {
            Err(_) => panic!("no answer from the coordinator within {ANSWER:?}"),
            Ok(None) => Err(Status::cancelled("session ended")),
            Ok(Some(Err(s))) => Err(s),
            Ok(Some(Ok(m))) => Ok(m.msg.expect("a message")),
        }
    }

    /// Asks for one unit of work.
    pub async fn work(&mut self, lane: &str) -> Msg {
        self.send(pb::worker_message::Msg::WorkRequest(pb::WorkRequest {
            lane: lane.to_owned(),
            exclude_campaigns: Vec::new(),
        }))
        .await;
        self.next().await.expect("an answer to a work request")
    }

    /// Heartbeats tokens of `campaign` in `phase`; returns the ack.
    pub async fn heartbeat(
        &mut self,
        campaign: &str,
        tokens: &[pb::Token],
        phase: pb::Phase,
    ) -> pb::HeartbeatAck {
        self.send(pb::worker_message::Msg::Heartbeat(pb::Heartbeat {
            tokens: tokens
                .iter()
                .map(|t| pb::TokenPhase {
                    token: Some(t.clone()),
                    phase: phase as i32,
                    campaign: campaign.to_owned(),
                    traceparent: String::new(),
                })
                .collect(),
        }))
        .await;
        loop {
            match self.next().await.expect("heartbeat answer") {
                Msg::HeartbeatAck(a) => return a,
                // Cancels precede the ack that reports them.
                Msg::Cancel(_) => {}
                other => panic!("expected a heartbeat ack, got {other:?}"),
            }
        }
    }

    /// Sends a scored outcome.
    pub async fn score(
        &mut self,
        campaign: &str,
        token: &pb::Token,
        lane: &str,
        score: f64,
    ) -> Msg {
        self.send(pb::worker_message::Msg::Outcome(scored_outcome(
            campaign, token, lane, &self.host, score,
        )))
        .await;
        self.next().await.expect("an answer to an outcome")
    }
}

/// A completed, scored outcome on the wire.
pub fn scored_outcome(
    campaign: &str,
    token: &pb::Token,
    lane: &str,
    host: &str,
    score: f64,
) -> pb::Outcome {
    pb::Outcome {
        token: Some(token.clone()),
        lane: lane.to_owned(),
        host: host.to_owned(),
        status: pb::Status::Completed as i32,
        score: Some(score),
        passed: Some(score >= 1.0),
        campaign: campaign.to_owned(),
        ..Default::default()
    }
}

/// A campaign file's text, built into a SubmitRequest.
pub fn submit_request(text: &str) -> pb::SubmitRequest {
    let c = lanes_common::spec::load_str(
        text,
        std::path::Path::new("e2e.toml"),
        std::path::Path::new("."),
    )
    .expect("valid campaign");
    pb::SubmitRequest::try_from(&c).expect("converts")
}

/// Edits the `spec_json` of a request built by [`submit_request`].
pub fn with_spec_json(
    mut req: pb::SubmitRequest,
    f: impl FnOnce(&mut serde_json::Value),
) -> pb::SubmitRequest {
    let Some(pb::submit_request::Spec::SpecJson(json)) = &mut req.spec else {
        panic!("not a spec_json request");
    };
    let mut spec: serde_json::Value = serde_json::from_str(json).unwrap();
    f(&mut spec);
    *json = spec.to_string();
    req
}

/// A small campaign: `tasks` tasks, arms `a` (provider pa) and `b` (provider pb).
pub fn small_campaign(id: &str, tasks: usize, extra: &str) -> String {
    let mut t = format!(
        "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 3\nlease_ttl_s = 10\n{extra}\n[[arms]]\nid = \"a\"\nprovider = \"pa\"\n[[arms]]\nid = \"b\"\nprovider = \"pb\"\n[driver]\nsim = {{}}\n[tasks]\nitems = [\n"
    );
    for i in 0..tasks {
        t.push_str(&format!(
            "  {{ id = \"T{i}\", payload = {{ n = {i} }} }},\n"
        ));
    }
    t.push_str("]\n");
    t
}
