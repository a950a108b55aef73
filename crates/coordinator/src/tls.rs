//! The coordinator's TLS: its certificate, and for mutual TLS the CA of client certificates.
//! With a client CA, a lane session must present a certificate whose subject common name is
//! the worker id it registers; a stolen lane token alone then opens no session. Clients
//! (CampaignService) may connect without a certificate and still need their token.

use tonic::transport::{Certificate, Identity, ServerTlsConfig};
use tonic::{Request, Status};

/// PEM material of the coordinator's TLS.
#[derive(Clone)]
pub struct ServerTls {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    /// The CA that signs workers' client certificates; `None` means no mutual TLS.
    pub client_ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("mutual", &self.client_ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    pub(crate) fn config(&self) -> ServerTlsConfig {
        let tls =
            ServerTlsConfig::new().identity(Identity::from_pem(&self.cert_pem, &self.key_pem));
        match &self.client_ca_pem {
            // Optional at the handshake so clients without a certificate reach
            // CampaignService; lane sessions check for one themselves.
            Some(ca) => tls
                .client_ca_root(Certificate::from_pem(ca))
                .client_auth_optional(true),
            None => tls,
        }
    }
}

/// The subject common name of the client certificate of a request, if it presented one.
pub(crate) fn peer_common_name<T>(request: &Request<T>) -> Option<String> {
    let certs = request.peer_certs()?;
    let der = certs.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_owned)
}

/// What a lane session must prove under mutual TLS: the worker id it may register as.
pub(crate) fn lane_identity<T>(
    request: &Request<T>,
    mutual: bool,
) -> Result<Option<String>, Status> {
    if !mutual {
        return Ok(None);
    }
    match peer_common_name(request) {
        Some(cn) => Ok(Some(cn)),
        None => Err(Status::unauthenticated(
            "this coordinator requires mutual TLS for lane sessions: present a client certificate whose subject CN is the worker id",
        )),
    }
}
