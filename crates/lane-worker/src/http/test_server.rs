//! A tiny HTTP/1.1 server for the client tests, plain or TLS under a throwaway CA: it records
//! every request as it came on the wire and answers as the test's handler says, one request
//! per connection.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

/// A request as the server saw it: the method and the raw request target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Seen {
    pub method: String,
    pub path: String,
    pub body: Vec<u8>,
}

/// How the server answers one request.
pub(crate) enum Answer {
    /// A status and a body with its `Content-Length`.
    Body(u16, String),
    /// A status and a body sent `Transfer-Encoding: chunked`, in these pieces.
    Chunked(u16, Vec<String>),
    /// A redirect status with this `Location`.
    Redirect(u16, String),
    /// No answer ever: the connection stays open.
    Silent,
}

type Handler = Arc<dyn Fn(&Seen) -> Answer + Send + Sync>;

/// A running server; dropping it stops it and its connections.
pub(crate) struct Server {
    /// `http://127.0.0.1:port` or `https://localhost:port`.
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: JoinHandle<()>,
}

impl Server {
    /// Every request so far, in arrival order.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A plain HTTP server on 127.0.0.1.
pub(crate) async fn serve(handler: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> Server {
    start(Arc::new(handler), None).await
}

/// An HTTPS server on 127.0.0.1 whose certificate `ca` signed (for `localhost` and
/// `127.0.0.1`).
pub(crate) async fn serve_tls(
    ca: &TestCa,
    handler: impl Fn(&Seen) -> Answer + Send + Sync + 'static,
) -> Server {
    start(Arc::new(handler), Some(ca.acceptor.clone())).await
}

async fn start(handler: Handler, tls: Option<TlsAcceptor>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let url = match tls {
        Some(_) => format!("https://localhost:{port}"),
        None => format!("http://127.0.0.1:{port}"),
    };
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let task = tokio::spawn(async move {
        // Owned here, so stopping the server drops every connection with it.
        let mut connections = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let (handler, log, tls) = (handler.clone(), log.clone(), tls.clone());
            connections.spawn(async move {
                match tls {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(stream).await {
                            answer(stream, &handler, &log).await;
                        }
                    }
                    None => answer(stream, &handler, &log).await,
                }
            });
        }
    });
    Server { url, seen, task }
}

/// Reads one request, records it and writes the handler's answer.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    handler: &Handler,
    log: &Mutex<Vec<Seen>>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut body = buf[head_end + 4..].to_vec();
    let len: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap_or(0))
        })
        .unwrap_or(0);
    while body.len() < len {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let mut words = head.split_whitespace();
    let seen = Seen {
        method: words.next().unwrap_or_default().to_owned(),
        path: words.next().unwrap_or_default().to_owned(),
        body,
    };
    log.lock().unwrap().push(seen.clone());
    let wire = match handler(&seen) {
        Answer::Body(code, body) => format!(
            "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
        Answer::Chunked(code, pieces) => {
            let mut wire = format!(
                "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            );
            for p in pieces {
                wire.push_str(&format!("{:x}\r\n{p}\r\n", p.len()));
            }
            wire.push_str("0\r\n\r\n");
            wire
        }
        Answer::Redirect(code, location) => format!(
            "HTTP/1.1 {code} X\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
        Answer::Silent => return std::future::pending().await,
    };
    let _ = s.write_all(wire.as_bytes()).await;
    let _ = s.shutdown().await;
}

/// A throwaway CA and a server certificate it signed, made at test time.
pub(crate) struct TestCa {
    /// The CA certificate, PEM.
    pub pem: String,
    acceptor: TlsAcceptor,
}

impl TestCa {
    pub(crate) fn new() -> Self {
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "lanes test ca");
        let ca =
            rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate().unwrap()).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        Self {
            pem: ca.pem(),
            acceptor: TlsAcceptor::from(Arc::new(config)),
        }
    }

    /// Writes the CA certificate to `dir/ca.pem`.
    pub(crate) fn write_pem(&self, dir: &Path) -> PathBuf {
        let path = dir.join("ca.pem");
        std::fs::write(&path, &self.pem).unwrap();
        path
    }
}
