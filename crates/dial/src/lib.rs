//! How a gRPC client (a worker or the `lanes` client commands) dials a coordinator: plain
//! `http://`, or `https://` with the coordinator's CA (or the system roots) and, for mutual
//! TLS, a client certificate. The PEM bytes are read by the caller.

use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// TLS material for dialing `https://` URLs.
#[derive(Clone, Default)]
pub struct ClientTls {
    /// The CA that signed the coordinator's certificate; the system roots when `None`.
    pub ca_pem: Option<Vec<u8>>,
    /// A client certificate and its key (PEM), for a coordinator that asks for one.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("ca", &self.ca_pem.is_some())
            .field("client_certificate", &self.identity.is_some())
            .finish()
    }
}

/// A coordinator URL that cannot be dialed as given.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("bad coordinator url {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("{url}: TLS settings (--tls-ca, --tls-cert) are given but the url is not https://")]
    TlsOnPlainUrl { url: String },
    #[error("{url}: cannot set up TLS: {reason}")]
    Tls { url: String, reason: String },
}

/// The endpoint for `url`: TLS when it is `https://`. TLS material for an `http://` URL is
/// refused rather than silently unused.
pub fn endpoint(url: &str, tls: &ClientTls) -> Result<Endpoint, DialError> {
    let ep = Endpoint::from_shared(url.to_owned()).map_err(|e| DialError::Url {
        url: url.to_owned(),
        reason: e.to_string(),
    })?;
    let secure = url.starts_with("https://");
    if !secure {
        if tls.ca_pem.is_some() || tls.identity.is_some() {
            return Err(DialError::TlsOnPlainUrl {
                url: url.to_owned(),
            });
        }
        return Ok(ep);
    }
    let mut config = ClientTlsConfig::new();
    config = match &tls.ca_pem {
        Some(ca) => config.ca_certificate(Certificate::from_pem(ca)),
        None => config.with_native_roots(),
    };
    if let Some((cert, key)) = &tls.identity {
        config = config.identity(Identity::from_pem(cert, key));
    }
    ep.tls_config(config).map_err(|e| DialError::Tls {
        url: url.to_owned(),
        reason: e.to_string(),
    })
}

/// What a plaintext HTTP/2 client sees from a TLS port: the server's TLS alert read as an
/// HTTP/2 frame.
/// The call failed in its transport (the server closed the connection or sent no HTTP/2),
/// not in the coordinator's handling.
fn transport_failure(status: &tonic::Status) -> bool {
    let text = status.to_string();
    // What a plaintext client sees from a TLS port depends on timing: a bare transport
    // error, an HTTP/2 frame error (the TLS alert read as a frame), or a cancelled call.
    matches!(
        status.code(),
        tonic::Code::Unavailable
            | tonic::Code::Internal
            | tonic::Code::Unknown
            | tonic::Code::Cancelled
    ) && [
        "transport error",
        "h2 protocol error",
        "FRAME_SIZE_ERROR",
        "connection",
        "operation was canceled",
    ]
    .iter()
    .any(|s| text.contains(s))
}

/// A gRPC status from a call, with a hint when it looks like plaintext sent to a TLS port.
pub fn explain_status(status: &tonic::Status) -> String {
    if transport_failure(status) {
        format!(
            "{}: the connection failed; if the coordinator serves TLS, use an https:// url (and --tls-ca)",
            status.message()
        )
    } else {
        status.message().to_owned()
    }
}

/// A connection failure in words a user can act on: a plaintext URL to a TLS port fails at
/// the HTTP/2 handshake with a bare transport error, so say what to try.
pub fn explain_connect_error(url: &str, error: &dyn std::error::Error) -> String {
    // Transport errors often wrap an error with the same words ("tcp connect error: tcp
    // connect error: ..."): a cause already said is not said again.
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let said = s.to_string();
        if !said.is_empty() && !text.ends_with(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = s.source();
    }
    if url.starts_with("http://") {
        format!(
            "cannot reach the coordinator at {url}: {text} (if it serves TLS, use an https:// url and --tls-ca)"
        )
    } else {
        format!("cannot reach the coordinator at {url}: {text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Chain(&'static str, Option<Box<Chain>>);

    impl std::fmt::Display for Chain {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Chain {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|c| c as _)
        }
    }

    #[test]
    fn a_cause_is_said_once() {
        let e = Chain(
            "transport error",
            Some(Box::new(Chain(
                "tcp connect error",
                Some(Box::new(Chain(
                    "tcp connect error",
                    Some(Box::new(Chain("Connection refused (os error 111)", None))),
                ))),
            ))),
        );
        let text = explain_connect_error("http://127.0.0.1:1", &e);
        assert_eq!(
            text,
            "cannot reach the coordinator at http://127.0.0.1:1: transport error: tcp connect \
             error: Connection refused (os error 111) (if it serves TLS, use an https:// url and \
             --tls-ca)"
        );
    }

    #[test]
    fn tls_material_on_a_plain_url_is_refused() {
        let tls = ClientTls {
            ca_pem: Some(b"-----BEGIN CERTIFICATE-----".to_vec()),
            identity: None,
        };
        let e = endpoint("http://127.0.0.1:1", &tls).unwrap_err();
        assert!(e.to_string().contains("not https://"), "{e}");
        assert!(endpoint("http://127.0.0.1:1", &ClientTls::default()).is_ok());
        assert!(endpoint("not a url", &ClientTls::default()).is_err());
    }
}
