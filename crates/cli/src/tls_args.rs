//! The TLS flags of a command that dials a coordinator (`lanes worker`, the client
//! commands): the CA for `https://` URLs and, for mutual TLS, a client certificate.

use std::path::{Path, PathBuf};

use anyhow::Context;

use lanes_dial::ClientTls;

#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct TlsArgs {
    /// The CA (PEM) that signed the coordinator's certificate, for https:// URLs
    /// [default: the system roots].
    #[arg(long, env = "LANES_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// A client certificate (PEM), for a coordinator that requires mutual TLS. A worker's
    /// certificate subject (CN) must be its worker id.
    #[arg(long, env = "LANES_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The key (PEM) of --tls-cert.
    #[arg(long, env = "LANES_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
}

fn read(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read the {what} {}", path.display()))
}

impl TlsArgs {
    pub(crate) fn load(&self) -> anyhow::Result<ClientTls> {
        Ok(ClientTls {
            ca_pem: self
                .tls_ca
                .as_deref()
                .map(|p| read(p, "CA file"))
                .transpose()?,
            identity: match (&self.tls_cert, &self.tls_key) {
                (Some(c), Some(k)) => Some((read(c, "certificate file")?, read(k, "key file")?)),
                _ => None,
            },
        })
    }
}
