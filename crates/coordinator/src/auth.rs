//! Bearer tokens per role (`client`, `lane`), compared in constant time. A token never reaches
//! a log line: [`Secret`] prints as `***`.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::{Request, Status};

/// A bearer token. Only its digest is compared, so the comparison's time depends on neither
/// the token's content nor its length.
#[derive(Clone)]
pub struct Secret {
    digest: Arc<[u8; 32]>,
}

impl Secret {
    /// A token from its text; surrounding whitespace (a trailing newline in a file) is dropped.
    pub fn new(token: &str) -> Option<Self> {
        let token = token.trim();
        (!token.is_empty()).then(|| Self {
            digest: Arc::new(Sha256::digest(token.as_bytes()).into()),
        })
    }

    fn matches(&self, given: &str) -> bool {
        let d: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        d.ct_eq(&*self.digest).into()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// The roles of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// CampaignService.
    Client,
    /// LaneService.
    Lane,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Lane => "lane",
        }
    }
}

/// A tonic interceptor that requires `authorization: Bearer <token>` for one role. With no
/// token configured the role is open (the coordinator warns at start).
#[derive(Debug, Clone)]
pub struct BearerAuth {
    role: Role,
    expected: Option<Secret>,
}

impl BearerAuth {
    pub fn new(role: Role, expected: Option<Secret>) -> Self {
        Self { role, expected }
    }
}

impl tonic::service::Interceptor for BearerAuth {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(req);
        };
        let given = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match given {
            Some(token) if expected.matches(token) => Ok(req),
            Some(_) => Err(Status::unauthenticated(format!(
                "wrong {} token",
                self.role.name()
            ))),
            None => Err(Status::unauthenticated(format!(
                "missing bearer token for the {} role",
                self.role.name()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    fn req(auth: Option<&str>) -> Request<()> {
        let mut r = Request::new(());
        if let Some(a) = auth {
            r.metadata_mut().insert("authorization", a.parse().unwrap());
        }
        r
    }

    #[test]
    fn tokens_are_checked_and_never_printed() {
        let s = Secret::new("s3cret\n").unwrap();
        assert_eq!(format!("{s:?}"), "Secret(***)");
        let mut auth = BearerAuth::new(Role::Lane, Some(s));
        assert!(auth.call(req(Some("Bearer s3cret"))).is_ok());
        let e = auth.call(req(Some("Bearer s3cre"))).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(!e.message().contains("s3cre"));
        assert!(auth.call(req(None)).is_err());
        assert!(auth.call(req(Some("Basic s3cret"))).is_err());
        let mut open = BearerAuth::new(Role::Client, None);
        assert!(open.call(req(None)).is_ok());
        assert!(Secret::new("  \n").is_none());
    }
}
