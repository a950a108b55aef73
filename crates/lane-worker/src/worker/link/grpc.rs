//! The gRPC link: one bidirectional `LaneService.Session` stream per session, with HTTP/2
//! keepalive so a paused or partitioned replica is noticed even while its TCP connection
//! stays open.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataValue;

use lanes_common::proto as pb;
use lanes_common::proto::lane_service_client::LaneServiceClient;
use lanes_common::proto::worker_message::Msg as In;
use lanes_dial::{ClientTls, endpoint, explain_connect_error, explain_status};

use super::{CoordinatorLink, LinkFuture, LinkSession};

/// Puts the lane token, when there is one, on every call of a client.
#[derive(Clone)]
struct Bearer(Option<MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = &self.0 {
            req.metadata_mut().insert("authorization", t.clone());
        }
        Ok(req)
    }
}

/// HTTP/2 keepalive: a ping this often, and the connection is dead when one goes unanswered
/// this long. Together well under the shortest lease TTL (3 s × the renewals in it).
const KEEPALIVE_EVERY: Duration = Duration::from_secs(2);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(3);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one task folder fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(120);
/// The most bytes an encoded task folder may take: its files, and their paths and framing.
const MAX_BUNDLE_WIRE: usize = lanes_common::spec::bundle::MAX_BUNDLE_BYTES as usize
    + lanes_common::spec::bundle::MAX_BUNDLE_FILES * 2 * 1024;

/// Dials coordinator replicas by URL, e.g. `http://127.0.0.1:7700` or `https://coord:7700`.
pub struct GrpcLink {
    addrs: Vec<String>,
    /// The lane role's bearer token. Never logged.
    token: Option<String>,
    /// The CA and client certificate for `https://` replicas.
    tls: ClientTls,
}

impl GrpcLink {
    pub fn new(addrs: Vec<String>, token: Option<String>, tls: ClientTls) -> Self {
        Self { addrs, token, tls }
    }

    /// The interceptor that sends the lane token.
    fn bearer(&self) -> Result<Bearer, String> {
        self.token
            .as_ref()
            .map(|t| {
                format!("Bearer {t}")
                    .parse()
                    .map_err(|_| "the lane token is not valid header text".to_owned())
            })
            .transpose()
            .map(Bearer)
    }

    /// Fetches a task folder from one replica, in chunks, up to [`MAX_BUNDLE_WIRE`] bytes.
    async fn fetch_from(&self, addr: &str, digest: &str) -> Result<Vec<u8>, String> {
        let channel = endpoint(addr, &self.tls)
            .map_err(|e| e.to_string())?
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(FETCH_TIMEOUT)
            .connect()
            .await
            .map_err(|e| explain_connect_error(addr, &e))?;
        let mut client = LaneServiceClient::with_interceptor(channel, self.bearer()?);
        let mut chunks = client
            .fetch_bundle(pb::FetchBundleRequest {
                digest: digest.to_owned(),
            })
            .await
            .map_err(|s| explain_status(&s))?
            .into_inner();
        let mut out = Vec::new();
        while let Some(c) = chunks.message().await.map_err(|s| explain_status(&s))? {
            out.extend_from_slice(&c.data);
            if out.len() > MAX_BUNDLE_WIRE {
                return Err(format!(
                    "{addr} sent more than {MAX_BUNDLE_WIRE} bytes for one task folder"
                ));
            }
        }
        Ok(out)
    }

    async fn connect(&self, addr: &str, register: pb::Register) -> Result<LinkSession, String> {
        let channel = endpoint(addr, &self.tls)
            .map_err(|e| e.to_string())?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE_EVERY)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true)
            .connect()
            .await
            .map_err(|e| explain_connect_error(addr, &e))?;
        let mut client = LaneServiceClient::with_interceptor(channel, self.bearer()?);
        let (tx, rx) = mpsc::channel(256);
        tx.send(pb::WorkerMessage {
            msg: Some(In::Register(register)),
        })
        .await
        .map_err(|_| "session closed")?;
        let inbound = client
            .session(ReceiverStream::new(rx))
            .await
            .map_err(|s| format!("session refused: {} ({:?})", explain_status(&s), s.code()))?
            .into_inner()
            .map(|m| m.map_err(|s| format!("session ended: {} ({:?})", s.message(), s.code())));
        Ok(LinkSession {
            tx,
            inbound: Box::pin(inbound),
        })
    }
}

impl CoordinatorLink for GrpcLink {
    fn replicas(&self) -> Vec<String> {
        self.addrs.clone()
    }

    fn open(
        &self,
        replica: usize,
        register: pb::Register,
    ) -> LinkFuture<'_, Result<LinkSession, String>> {
        Box::pin(async move {
            let addr = self
                .addrs
                .get(replica)
                .ok_or_else(|| format!("no coordinator replica {replica}"))?;
            self.connect(addr, register).await
        })
    }

    fn fetch_bundle<'a>(&'a self, digest: &'a str) -> LinkFuture<'a, Result<Vec<u8>, String>> {
        Box::pin(async move {
            let mut errors = Vec::new();
            for addr in &self.addrs {
                match self.fetch_from(addr, digest).await {
                    Ok(b) => return Ok(b),
                    Err(e) => errors.push(format!("{addr}: {e}")),
                }
            }
            Err(errors.join("; "))
        })
    }
}
