//! The dashboard over TLS, with the coordinator's certificate: an axum listener whose
//! connections are TLS streams. Handshakes run in their own tasks (bounded in time), so a
//! slow or silent client never holds up the others.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::tls::ServerTls;

/// How long a client has to finish its handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

pub(crate) struct TlsListener {
    handshaken: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("dashboard TLS: {e}"),
    )
}

impl TlsListener {
    /// Accepts on `listener` and hands over the connections whose handshake completed. Must
    /// be made inside the runtime (it spawns the accept loop).
    pub(crate) fn new(listener: TcpListener, tls: &ServerTls) -> std::io::Result<Self> {
        let certs = CertificateDer::pem_slice_iter(&tls.cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        let key = PrivateKeyDer::from_pem_slice(&tls.key_pem).map_err(invalid)?;
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(invalid)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(invalid)?;
        // HTTP/2 first: browsers keep few HTTP/1 connections per server, and each open page
        // holds one for its live stream.
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let local = listener.local_addr()?;
        let (tx, handshaken) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    _ = tx.closed() => return,
                };
                let (tcp, addr) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors and the like: wait rather than spin.
                        tracing::warn!(error = %e, "dashboard accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await
                    {
                        let _ = tx.send((stream, addr)).await;
                    }
                });
            }
        });
        Ok(Self { handshaken, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.recv().await {
            Some(conn) => conn,
            // The accept loop ended (it never does while this listener lives).
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
