//! Who may see the dashboard: the client token, given once at `/login` (or as `Authorization:
//! Bearer` on each request), then a session cookie. Sessions and CSRF tokens are MACs under a
//! key derived from the store-wide key, so any replica checks a session another one issued,
//! and no session is stored. One-time login codes live in the store, by digest only.

use std::time::Duration;

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};
use lanes_common::lease::DerivedKey;
use sha2::{Digest, Sha256};

use crate::auth::Secret;

/// The session cookie's name.
pub(crate) const COOKIE_NAME: &str = "lanes_session";

/// Who is asking, once let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Viewer {
    /// A browser with a session cookie; its CSRF token goes in every form it posts.
    Session { nonce: String, csrf: String },
    /// A request with the client token in `Authorization: Bearer`.
    Bearer,
    /// The client role is open (`--insecure-no-auth`).
    Open,
}

impl Viewer {
    /// The key this viewer's streams are counted under (per session, or per token).
    pub(crate) fn stream_key(&self, headers: &HeaderMap) -> String {
        match self {
            Viewer::Session { nonce, .. } => format!("dashboard-session:{nonce}"),
            Viewer::Bearer => bearer(headers).unwrap_or_default().to_owned(),
            Viewer::Open => "dashboard-open".into(),
        }
    }

    /// The CSRF token forms carry; empty when the viewer needs none.
    pub(crate) fn csrf(&self) -> &str {
        match self {
            Viewer::Session { csrf, .. } => csrf,
            _ => "",
        }
    }
}

/// The dashboard's gatekeeper.
pub(crate) struct Access {
    tokens: Vec<Secret>,
    key: DerivedKey,
    session_ttl: Duration,
    /// Mark cookies `Secure` (the dashboard is served over TLS).
    secure: bool,
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// 128 random bits as hex.
pub(crate) fn random_hex() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// What the store keeps of a login code.
pub(crate) fn code_digest(code: &str) -> [u8; 32] {
    Sha256::digest(code.as_bytes()).into()
}

impl Access {
    pub(crate) fn new(
        tokens: Vec<Secret>,
        key: DerivedKey,
        session_ttl: Duration,
        secure: bool,
    ) -> Self {
        Self {
            tokens,
            key,
            session_ttl,
            secure,
        }
    }

    /// Whether `given` is a client token; every token is compared, in constant time.
    pub(crate) fn token_ok(&self, given: &str) -> bool {
        crate::auth::accepts(&self.tokens, given)
    }

    fn open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The viewer of a request, or `None` when it must log in first.
    pub(crate) fn viewer(&self, headers: &HeaderMap, now_ms: i64) -> Option<Viewer> {
        if let Some(token) = bearer(headers) {
            return (self.open() || self.token_ok(token)).then_some(Viewer::Bearer);
        }
        if let Some(nonce) = cookie(headers, COOKIE_NAME).and_then(|v| self.session(v, now_ms)) {
            let csrf = self.key.mac(format!("csrf:{nonce}").as_bytes());
            return Some(Viewer::Session { nonce, csrf });
        }
        self.open().then_some(Viewer::Open)
    }

    /// Whether a form posted by `viewer` carries its CSRF token. A bearer request needs none
    /// (a browser never adds that header by itself); an open dashboard checks the origin.
    pub(crate) fn csrf_ok(&self, viewer: &Viewer, given: &str, headers: &HeaderMap) -> bool {
        match viewer {
            Viewer::Session { nonce, .. } => {
                self.key.verify(format!("csrf:{nonce}").as_bytes(), given)
            }
            Viewer::Bearer => true,
            Viewer::Open => same_origin(headers),
        }
    }

    /// A new session's cookie: `v1.<expires_ms>.<nonce>.<mac>`.
    pub(crate) fn new_session(&self, now_ms: i64) -> Result<String, getrandom::Error> {
        let expires = now_ms + self.session_ttl.as_millis() as i64;
        let nonce = random_hex()?;
        let mac = self.key.mac(session_message(expires, &nonce).as_bytes());
        let value = format!("v1.{expires}.{nonce}.{mac}");
        Ok(format!(
            "{COOKIE_NAME}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
            self.session_ttl.as_secs(),
            if self.secure { "; Secure" } else { "" }
        ))
    }

    /// The cookie that ends a session.
    pub(crate) fn end_session(&self) -> String {
        format!(
            "{COOKIE_NAME}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
            if self.secure { "; Secure" } else { "" }
        )
    }

    /// The nonce of a valid, unexpired session cookie.
    fn session(&self, value: &str, now_ms: i64) -> Option<String> {
        let mut parts = value.split('.');
        let (Some("v1"), Some(expires), Some(nonce), Some(mac), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        let expires: i64 = expires.parse().ok()?;
        let ok = self
            .key
            .verify(session_message(expires, nonce).as_bytes(), mac);
        (ok && expires > now_ms).then(|| nonce.to_owned())
    }
}

fn session_message(expires: i64, nonce: &str) -> String {
    format!("session:v1:{expires}:{nonce}")
}

/// The request came from a page of this origin (`Origin` matches `Host`), or says nothing of
/// where it came from and is not a cross-site fetch.
fn same_origin(headers: &HeaderMap) -> bool {
    let host = headers.get("host").and_then(|v| v.to_str().ok());
    match (headers.get("origin").and_then(|v| v.to_str().ok()), host) {
        (Some(origin), Some(host)) => {
            origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                == Some(host)
        }
        (Some(_), None) => false,
        (None, _) => headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_none_or(|s| s == "same-origin" || s == "none"),
    }
}

/// Where a login may send the browser next: a path on this dashboard, nothing else (no
/// scheme, no `//host`, no backslash tricks).
pub(crate) fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.contains('\\')
                && n.len() <= 512
                && n.chars().all(|c| c.is_ascii_graphic()) =>
        {
            n.to_owned()
        }
        _ => "/".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use lanes_common::lease::LeaseKey;

    fn access(tokens: &[&str]) -> Access {
        Access::new(
            tokens.iter().map(|t| Secret::new(t).unwrap()).collect(),
            LeaseKey::from_bytes([3; 32]).derive("dashboard-session"),
            Duration::from_secs(3600),
            false,
        )
    }

    fn with(name: &str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
        h
    }

    #[test]
    fn a_session_is_good_until_it_expires_and_only_with_its_mac() {
        let a = access(&["client-token-for-tests"]);
        let set = a.new_session(1_000).unwrap();
        let value = set.split(';').next().unwrap().to_owned();
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"));
        let viewer = a.viewer(&with("cookie", &value), 2_000).unwrap();
        let Viewer::Session { ref csrf, .. } = viewer else {
            panic!("{viewer:?}")
        };
        assert!(a.csrf_ok(&viewer, csrf, &HeaderMap::new()));
        assert!(!a.csrf_ok(&viewer, "0".repeat(64).as_str(), &HeaderMap::new()));
        // Expired.
        assert_eq!(a.viewer(&with("cookie", &value), 1_000 + 3_600_001), None);
        // Tampered: a later expiry under the old MAC.
        let mut parts: Vec<&str> = value.split('.').collect();
        let later = "99999999999999".to_owned();
        parts[1] = &later;
        assert_eq!(a.viewer(&with("cookie", &parts.join(".")), 2_000), None);
        // Another store's key does not accept it.
        let other = Access::new(
            vec![Secret::new("client-token-for-tests").unwrap()],
            LeaseKey::from_bytes([4; 32]).derive("dashboard-session"),
            Duration::from_secs(3600),
            false,
        );
        assert_eq!(other.viewer(&with("cookie", &value), 2_000), None);
    }

    #[test]
    fn bearer_tokens_are_checked_and_nothing_is_open_by_default() {
        let a = access(&["client-token-for-tests"]);
        assert_eq!(a.viewer(&HeaderMap::new(), 0), None);
        let ok = with("authorization", "Bearer client-token-for-tests");
        assert_eq!(a.viewer(&ok, 0), Some(Viewer::Bearer));
        let wrong = with("authorization", "Bearer lane-token-for-tests");
        assert_eq!(a.viewer(&wrong, 0), None);
        let open = access(&[]);
        assert_eq!(open.viewer(&HeaderMap::new(), 0), Some(Viewer::Open));
        let mut cross = with("origin", "http://evil.example");
        cross.insert("host", HeaderValue::from_static("127.0.0.1:9"));
        assert!(!open.csrf_ok(&Viewer::Open, "", &cross));
        let mut same = with("origin", "http://127.0.0.1:9");
        same.insert("host", HeaderValue::from_static("127.0.0.1:9"));
        assert!(open.csrf_ok(&Viewer::Open, "", &same));
    }

    #[test]
    fn next_pages_stay_on_the_dashboard() {
        assert_eq!(safe_next(Some("/campaigns/c1")), "/campaigns/c1");
        for bad in ["//evil.example", "https://evil.example", "/\\evil", "x", ""] {
            assert_eq!(safe_next(Some(bad)), "/", "{bad}");
        }
        assert_eq!(safe_next(None), "/");
    }
}
