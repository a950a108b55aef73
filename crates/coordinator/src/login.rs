//! Login links and the marks that bind a dashboard session to a client token: what both the
//! `LoginLink` rpc (which issues a one-time code) and the dashboard (which takes it and signs
//! sessions) need, so neither imports the other. A code is 128 random bits; the store keeps
//! only its SHA-256. A token is named by its mark, a MAC of its digest under a key derived
//! from the store-wide key, so any replica computes the same mark and none reveals the token.

use std::time::Duration;

use lanes_common::lease::DerivedKey;
use sha2::{Digest, Sha256};

/// The label the session key is derived under.
pub(crate) const KEY_LABEL: &str = "dashboard-session";

/// The mark of a token: a MAC of its digest, which names it without revealing it.
pub(crate) fn token_mark(key: &DerivedKey, digest: &[u8; 32]) -> String {
    let mut m = b"token:".to_vec();
    m.extend_from_slice(digest);
    key.mac(&m)[..32].to_owned()
}

/// 128 random bits as hex: a login code, or a session's nonce.
pub(crate) fn random_hex() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `code` looks like a login code (32 lowercase hex digits); anything else is
/// refused before the store is asked.
pub(crate) fn code_shape_ok(code: &str) -> bool {
    code.len() == 32
        && code
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What the store keeps of a login code.
pub(crate) fn code_digest(code: &str) -> [u8; 32] {
    Sha256::digest(code.as_bytes()).into()
}

/// Where the dashboard is and how long its login codes last: what `LoginLink` needs of it.
#[derive(Debug, Clone)]
pub(crate) struct Links {
    /// `None` when the dashboard listens on every address and was given no public URL:
    /// there is no address to put in a link.
    pub(crate) base_url: Option<String>,
    pub(crate) code_ttl: Duration,
}

impl Links {
    /// The links of a dashboard bound to `bound`, reached at `public_url` when one is given.
    pub(crate) fn new(
        public_url: Option<&str>,
        code_ttl: Duration,
        bound: std::net::SocketAddr,
        tls: bool,
    ) -> Self {
        let base_url = match public_url {
            Some(u) => Some(u.trim_end_matches('/').to_owned()),
            None if bound.ip().is_unspecified() => None,
            None => Some(format!("{}://{bound}", if tls { "https" } else { "http" })),
        };
        Self { base_url, code_ttl }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_common::lease::LeaseKey;

    #[test]
    fn codes_have_one_shape_and_are_kept_by_digest() {
        let code = random_hex().unwrap();
        assert!(code_shape_ok(&code), "{code}");
        assert!(!code_shape_ok(&code.to_uppercase()));
        assert!(!code_shape_ok(&code[1..]));
        assert_ne!(random_hex().unwrap(), code);
        assert_eq!(code_digest(&code), code_digest(&code));
        assert_ne!(code_digest(&code), code_digest(&random_hex().unwrap()));
    }

    #[test]
    fn a_mark_names_a_token_under_one_key() {
        let key = |b| LeaseKey::from_bytes([b; 32]).derive(KEY_LABEL);
        let (t1, t2) = ([1u8; 32], [2u8; 32]);
        assert_eq!(token_mark(&key(7), &t1), token_mark(&key(7), &t1));
        assert_ne!(token_mark(&key(7), &t1), token_mark(&key(7), &t2));
        assert_ne!(token_mark(&key(7), &t1), token_mark(&key(8), &t1));
    }

    #[test]
    fn a_link_needs_an_address_a_browser_can_use() {
        let ttl = Duration::from_secs(300);
        let any = "0.0.0.0:7780".parse().unwrap();
        let local = "127.0.0.1:7780".parse().unwrap();
        assert_eq!(Links::new(None, ttl, any, false).base_url, None);
        assert_eq!(
            Links::new(None, ttl, local, true).base_url.as_deref(),
            Some("https://127.0.0.1:7780")
        );
        assert_eq!(
            Links::new(Some("https://lanes.example/"), ttl, any, true)
                .base_url
                .as_deref(),
            Some("https://lanes.example")
        );
    }
}
