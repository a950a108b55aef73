//! Bearer tokens per role (`client`, `lane`), compared in constant time. A token never reaches
//! a log line: [`Secret`] prints as `***`. A role may accept several tokens at once (one per
//! line of its token file), so tokens rotate without downtime. Nothing is open unless the
//! operator says so (`insecure_no_auth`).

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

/// The shortest token accepted, in bytes.
pub const MIN_TOKEN_BYTES: usize = 16;

/// A token or a role's token set that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("a token is shorter than {MIN_TOKEN_BYTES} bytes")]
    TooShort,
    #[error("no {role} token is configured (give one, or run with --insecure-no-auth)")]
    Missing { role: Role },
    #[error("the {role} token file has no token in it")]
    EmptyFile { role: Role },
    #[error("the client and lane roles share a token; each role needs its own")]
    Shared,
}

impl Secret {
    /// A token from its text; surrounding whitespace (a trailing newline in a file) is dropped.
    pub fn new(token: &str) -> Result<Self, TokenError> {
        let token = token.trim();
        if token.len() < MIN_TOKEN_BYTES {
            return Err(TokenError::TooShort);
        }
        Ok(Self {
            digest: Arc::new(Sha256::digest(token.as_bytes()).into()),
        })
    }

    /// Every token of a token file: one per line; blank lines and `#` comments are skipped.
    pub fn from_file_text(text: &str, role: Role) -> Result<Vec<Self>, TokenError> {
        let tokens = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(Self::new)
            .collect::<Result<Vec<_>, _>>()?;
        if tokens.is_empty() {
            return Err(TokenError::EmptyFile { role });
        }
        Ok(tokens)
    }

    /// The token's SHA-256: what a dashboard session is bound to (never the token).
    pub(crate) fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    fn matches(&self, given: &TokenDigest) -> bool {
        given.ct_eq(&*self.digest).into()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// The roles of the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// CampaignService.
    Client,
    /// LaneService.
    Lane,
}

impl Role {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Lane => "lane",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A bearer token's SHA-256: all the coordinator keeps of a token a caller sent.
pub type TokenDigest = [u8; 32];

/// The digest of a token as sent.
pub(crate) fn token_digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// Whether any of `expected` matches `given`; every one is compared, so the time taken does
/// not tell which (or whether one) matched.
pub(crate) fn accepts(expected: &[Secret], given: &str) -> bool {
    let given = token_digest(given);
    expected.iter().fold(false, |ok, s| s.matches(&given) | ok)
}

/// Who called: the interceptor puts it in the request's extensions once it has read the
/// bearer token, so no handler reads the header again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    pub role: Role,
    /// The digest of the token sent; `None` when none was (a role served to anyone).
    pub token: Option<TokenDigest>,
}

impl Caller {
    /// The caller of a request that went through [`BearerAuth`].
    pub fn of<T>(request: &Request<T>) -> Option<&Caller> {
        request.extensions().get::<Caller>()
    }
}

/// The tokens each role accepts. Empty sets are refused unless `insecure_no_auth` is set.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    pub client: Vec<Secret>,
    pub lane: Vec<Secret>,
    /// Serve a role with no tokens to anyone (tests and throwaway setups only).
    pub insecure_no_auth: bool,
}

impl AuthConfig {
    /// Both roles with one token each.
    pub fn tokens(client: &str, lane: &str) -> Result<Self, TokenError> {
        Ok(Self {
            client: vec![Secret::new(client)?],
            lane: vec![Secret::new(lane)?],
            insecure_no_auth: false,
        })
    }

    /// Refuses a role without tokens (unless insecure) and a token both roles accept.
    pub fn check(&self) -> Result<(), TokenError> {
        if !self.insecure_no_auth {
            if self.client.is_empty() {
                return Err(TokenError::Missing { role: Role::Client });
            }
            if self.lane.is_empty() {
                return Err(TokenError::Missing { role: Role::Lane });
            }
        }
        let shared = self
            .client
            .iter()
            .any(|c| self.lane.iter().any(|l| c.digest == l.digest));
        if shared {
            return Err(TokenError::Shared);
        }
        Ok(())
    }
}

/// A tonic interceptor that requires `authorization: Bearer <token>` for one role. An empty
/// set of tokens serves the role to anyone: [`AuthConfig::check`] allows that only when the
/// operator asked for it.
#[derive(Debug, Clone)]
pub struct BearerAuth {
    role: Role,
    expected: Arc<[Secret]>,
    /// Counts the requests refused (`lanes_auth_refused_total`), when metrics are on.
    refused: Option<prometheus_client::metrics::counter::Counter>,
}

impl BearerAuth {
    pub fn new(role: Role, expected: Vec<Secret>) -> Self {
        Self {
            role,
            expected: expected.into(),
            refused: None,
        }
    }

    /// Counts each refused request on `counter`.
    pub fn counting_refusals(
        mut self,
        counter: prometheus_client::metrics::counter::Counter,
    ) -> Self {
        self.refused = Some(counter);
        self
    }

    /// Whether any accepted token matches; every one is compared, so the time taken does
    /// not tell which (or whether one) matched.
    fn accepts(&self, given: &TokenDigest) -> bool {
        self.expected
            .iter()
            .fold(false, |ok, s| s.matches(given) | ok)
    }
}

impl tonic::service::Interceptor for BearerAuth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let given = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(token_digest);
        let caller = Caller {
            role: self.role,
            token: given,
        };
        if self.expected.is_empty() {
            req.extensions_mut().insert(caller);
            return Ok(req);
        }
        let refusal = match given {
            Some(token) if self.accepts(&token) => {
                req.extensions_mut().insert(caller);
                return Ok(req);
            }
            Some(_) => Status::unauthenticated(format!("wrong {} token", self.role.name())),
            None => Status::unauthenticated(format!(
                "missing bearer token for the {} role",
                self.role.name()
            )),
        };
        if let Some(refused) = &self.refused {
            refused.inc();
        }
        Err(refusal)
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

    const TOKEN: &str = "s3cret-s3cret-s3cret";

    #[test]
    fn tokens_are_checked_and_never_printed() {
        let s = Secret::new(&format!("{TOKEN}\n")).unwrap();
        assert_eq!(format!("{s:?}"), "Secret(***)");
        let mut auth = BearerAuth::new(Role::Lane, vec![s]);
        let ok = auth.call(req(Some(&format!("Bearer {TOKEN}")))).unwrap();
        // The caller, read once, for the handlers.
        assert_eq!(
            Caller::of(&ok),
            Some(&Caller {
                role: Role::Lane,
                token: Some(token_digest(TOKEN))
            })
        );
        let e = auth
            .call(req(Some("Bearer s3cret-s3cret-s3cre")))
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(!e.message().contains("s3cre"));
        assert!(auth.call(req(None)).is_err());
        assert!(auth.call(req(Some(&format!("Basic {TOKEN}")))).is_err());
        let mut open = BearerAuth::new(Role::Client, Vec::new());
        let anyone = open.call(req(None)).unwrap();
        assert_eq!(Caller::of(&anyone).and_then(|c| c.token), None);
        assert_eq!(Secret::new("  \n").unwrap_err(), TokenError::TooShort);
        assert_eq!(
            Secret::new("fifteen-bytes!!").unwrap_err(),
            TokenError::TooShort
        );
    }

    #[test]
    fn a_role_accepts_every_token_of_its_file() {
        let text = "# rotated on 2026-12-01\nold-token-0123456789\n\n  new-token-0123456789  \n";
        let mut auth = BearerAuth::new(
            Role::Client,
            Secret::from_file_text(text, Role::Client).unwrap(),
        );
        assert!(auth.call(req(Some("Bearer old-token-0123456789"))).is_ok());
        assert!(auth.call(req(Some("Bearer new-token-0123456789"))).is_ok());
        assert!(
            auth.call(req(Some("Bearer # rotated on 2026-12-01")))
                .is_err()
        );
        assert_eq!(
            Secret::from_file_text("# only a comment\n\n", Role::Lane).unwrap_err(),
            TokenError::EmptyFile { role: Role::Lane }
        );
    }

    #[test]
    fn nothing_is_open_unless_asked_and_roles_never_share_a_token() {
        let mut c = AuthConfig::default();
        assert_eq!(
            c.check().unwrap_err(),
            TokenError::Missing { role: Role::Client }
        );
        c.client = vec![Secret::new("client-0123456789").unwrap()];
        assert_eq!(
            c.check().unwrap_err(),
            TokenError::Missing { role: Role::Lane }
        );
        c.insecure_no_auth = true;
        assert!(c.check().is_ok());
        let same = AuthConfig::tokens("same-token-0123456789", "same-token-0123456789").unwrap();
        assert_eq!(same.check().unwrap_err(), TokenError::Shared);
        assert!(
            AuthConfig::tokens("client-0123456789", "lane-0123456789ab")
                .unwrap()
                .check()
                .is_ok()
        );
    }
}
