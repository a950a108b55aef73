//! Certificates made at test time: a CA, a server certificate for 127.0.0.1 and localhost,
//! and client certificates whose subject CN is a worker id. Written as PEM files into a
//! directory, the way an operator would hand them to `lanes`.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A CA that signs server and client certificates.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate (PEM).
    pub pem: String,
}

/// A certificate and its key (PEM).
pub struct Pair {
    pub cert: String,
    pub key: String,
}

impl Pair {
    /// Writes `<name>.crt` and `<name>.key` into `dir`; answers their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let (c, k) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, &self.cert).unwrap();
        std::fs::write(&k, &self.key).unwrap();
        (c, k)
    }
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    fn leaf(&self, sans: Vec<String>, cn: &str, purpose: ExtendedKeyUsagePurpose) -> Pair {
        let mut params = CertificateParams::new(sans).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![purpose];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self) -> Pair {
        self.leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            "localhost",
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate whose subject CN is `cn` (a worker id).
    pub fn client(&self, cn: &str) -> Pair {
        self.leaf(Vec::new(), cn, ExtendedKeyUsagePurpose::ClientAuth)
    }

    /// Writes the CA certificate as `ca.crt` into `dir`.
    pub fn write(&self, dir: &Path) -> PathBuf {
        let p = dir.join("ca.crt");
        std::fs::write(&p, &self.pem).unwrap();
        p
    }
}
