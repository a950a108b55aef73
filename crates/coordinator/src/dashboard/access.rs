//! Who may see the dashboard: the client token, given once at `/login` (or as `Authorization:
//! Bearer` on each request), then a session cookie. Sessions and CSRF tokens are MACs under a
//! key derived from the store-wide key, so any replica checks a session another one issued,
//! and no session is stored. A session is bound to the token it was made with (by a MAC of
//! the token's digest), so removing a token from the coordinator ends its sessions too.
//! One-time login codes live in the store, by digest only.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header::{AUTHORIZATION, COOKIE};
use lanes_common::lease::DerivedKey;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::auth::Secret;
pub(crate) use crate::login::{KEY_LABEL, code_digest, code_shape_ok, random_hex, token_mark};

/// Who is asking, once let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Viewer {
    /// A browser with a session cookie; its CSRF token goes in every form it posts.
    Session { mark: String, csrf: String },
    /// A request with a client token in `Authorization: Bearer`.
    Bearer { mark: String },
    /// The client role is open (`--insecure-no-auth`).
    Open,
}

impl Viewer {
    /// The key this viewer's Watch and Rows streams are counted under: one per token, so a
    /// token's browser pages share one `--max-streams-per-token` budget (apart from the
    /// token's gRPC streams).
    pub(crate) fn stream_key(&self) -> String {
        match self {
            Viewer::Session { mark, .. } | Viewer::Bearer { mark } => format!("dashboard:{mark}"),
            Viewer::Open => "dashboard:open".into(),
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
    /// Mark cookies `Secure` (browsers reach the dashboard over https).
    secure: bool,
    /// The session cookie's name: one per dashboard port, so two dashboards on one host
    /// (`lanes run` beside a port-forward) keep their own sessions; `__Host-` when secure.
    cookie_name: String,
    /// Hosts an open dashboard answers to (IP literals and `localhost` always): a page of
    /// another name that resolves here (DNS rebinding) gets nothing.
    public_host: Option<String>,
    /// Failed logins per peer address in the current window.
    failures: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

/// Failed logins allowed per peer address per [`FAILURE_WINDOW`]: plenty for people, nothing
/// for a guesser; a peer's failures never lock out another peer.
const FAILURES: u32 = 20;
const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// Peers remembered at most (the oldest windows are dropped first).
const PEERS_KEPT: usize = 10_000;

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

impl Access {
    pub(crate) fn new(
        tokens: Vec<Secret>,
        key: DerivedKey,
        session_ttl: Duration,
        secure: bool,
        port: u16,
        public_host: Option<String>,
    ) -> Self {
        let cookie_name = if secure {
            format!("__Host-lanes_session_{port}")
        } else {
            format!("lanes_session_{port}")
        };
        Self {
            tokens,
            key,
            session_ttl,
            secure,
            cookie_name,
            public_host,
            failures: Mutex::default(),
        }
    }

    /// The mark of the accepted token `given`; `None` when it is not a client token. Every
    /// token is compared, in constant time.
    pub(crate) fn mark_of(&self, given: &str) -> Option<String> {
        if !crate::auth::accepts(&self.tokens, given) {
            return None;
        }
        let digest: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        Some(token_mark(&self.key, &digest))
    }

    /// Whether `mark` is the mark of a token this coordinator still accepts.
    fn mark_accepted(&self, mark: &str) -> bool {
        self.tokens.iter().fold(false, |ok, s| {
            let m = token_mark(&self.key, s.digest());
            ok | bool::from(m.as_bytes().ct_eq(mark.as_bytes()))
        })
    }

    /// How long `peer` must still wait when it failed too often lately; `None` when it may
    /// try now. A locked-out peer gets nothing, whatever it sends.
    pub(crate) fn locked_for(&self, peer: IpAddr) -> Option<Duration> {
        let failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let (since, n) = failures.get(&peer)?;
        (*n >= FAILURES)
            .then(|| FAILURE_WINDOW.checked_sub(since.elapsed()))
            .flatten()
    }

    /// Whether `peer` may try to log in now (it has not failed too often lately).
    pub(crate) fn may_try(&self, peer: IpAddr) -> bool {
        self.locked_for(peer).is_none()
    }

    /// Counts a wrong `Authorization: Bearer` token from `peer` as a failed login (a guesser
    /// would otherwise skip the login form's limit); answers whether it was wrong.
    pub(crate) fn check_bearer(&self, headers: &HeaderMap, peer: IpAddr) -> bool {
        match bearer(headers) {
            Some(token) if !self.open() && self.mark_of(token).is_none() => {
                self.failed(peer);
                true
            }
            _ => false,
        }
    }

    /// Counts a failed login of `peer`.
    pub(crate) fn failed(&self, peer: IpAddr) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if failures.len() >= PEERS_KEPT {
            failures.retain(|_, (since, _)| since.elapsed() < FAILURE_WINDOW);
            if failures.len() >= PEERS_KEPT {
                failures.clear();
            }
        }
        let f = failures.entry(peer).or_insert((Instant::now(), 0));
        if f.0.elapsed() >= FAILURE_WINDOW {
            *f = (Instant::now(), 0);
        }
        f.1 += 1;
    }

    pub(crate) fn open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The viewer of a request, or `None` when it must log in first.
    pub(crate) fn viewer(&self, headers: &HeaderMap, now_ms: i64) -> Option<Viewer> {
        if self.open() {
            return self.host_ok(headers).then_some(Viewer::Open);
        }
        if let Some(token) = bearer(headers) {
            return self.mark_of(token).map(|mark| Viewer::Bearer { mark });
        }
        let (nonce, mark) = self.session(cookie(headers, &self.cookie_name)?, now_ms)?;
        let csrf = self.key.mac(format!("csrf:{nonce}").as_bytes());
        Some(Viewer::Session { mark, csrf })
    }

    /// Whether a form posted by `viewer` carries its CSRF token. A bearer request needs none
    /// (a browser never adds that header by itself); an open dashboard checks the origin.
    pub(crate) fn csrf_ok(&self, viewer: &Viewer, given: &str, headers: &HeaderMap) -> bool {
        match viewer {
            Viewer::Session { csrf, .. } => {
                let a: [u8; 32] = Sha256::digest(csrf.as_bytes()).into();
                let b: [u8; 32] = Sha256::digest(given.as_bytes()).into();
                a.ct_eq(&b).into()
            }
            Viewer::Bearer { .. } => true,
            Viewer::Open => same_origin(headers),
        }
    }

    /// A new session's `Set-Cookie`, bound to the token `mark` names:
    /// `v2.<expires_ms>.<nonce>.<mark>.<mac>`.
    pub(crate) fn new_session(&self, mark: &str, now_ms: i64) -> Result<String, getrandom::Error> {
        let expires = now_ms + self.session_ttl.as_millis() as i64;
        let nonce = random_hex()?;
        let mac = self
            .key
            .mac(session_message(expires, &nonce, mark).as_bytes());
        let value = format!("v2.{expires}.{nonce}.{mark}.{mac}");
        Ok(format!(
            "{}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{}",
            self.cookie_name,
            self.session_ttl.as_secs(),
            if self.secure { "; Secure" } else { "" }
        ))
    }

    /// The cookie that ends a session.
    pub(crate) fn end_session(&self) -> String {
        format!(
            "{}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{}",
            self.cookie_name,
            if self.secure { "; Secure" } else { "" }
        )
    }

    /// The nonce and token mark of a valid, unexpired session of a token still accepted.
    fn session(&self, value: &str, now_ms: i64) -> Option<(String, String)> {
        let mut parts = value.split('.');
        let (Some("v2"), Some(expires), Some(nonce), Some(mark), Some(mac), None) = (
            parts.next(),
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
            .verify(session_message(expires, nonce, mark).as_bytes(), mac);
        (ok && expires > now_ms && self.mark_accepted(mark))
            .then(|| (nonce.to_owned(), mark.to_owned()))
    }
}

impl Access {
    /// The request's `Host` is an address, `localhost`, or the public URL's host.
    fn host_ok(&self, headers: &HeaderMap) -> bool {
        let Some(host) = headers.get("host").and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let name = match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        };
        let name = name.trim_start_matches('[').trim_end_matches(']');
        name.parse::<IpAddr>().is_ok()
            || name.eq_ignore_ascii_case("localhost")
            || self
                .public_host
                .as_deref()
                .is_some_and(|p| p.eq_ignore_ascii_case(name))
    }
}

fn session_message(expires: i64, nonce: &str, mark: &str) -> String {
    format!("session:v2:{expires}:{nonce}:{mark}")
}

/// The request came from a page of this origin (`Origin` matches `Host`), or says nothing of
/// where it came from and is not a cross-site fetch.
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
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

    fn access_with(tokens: &[&str], key: u8) -> Access {
        Access::new(
            tokens.iter().map(|t| Secret::new(t).unwrap()).collect(),
            LeaseKey::from_bytes([key; 32]).derive(KEY_LABEL),
            Duration::from_secs(3600),
            false,
            7780,
            Some("lanes.example".into()),
        )
    }

    fn access(tokens: &[&str]) -> Access {
        access_with(tokens, 3)
    }

    fn with(name: &str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_str(value).unwrap(),
        );
        h
    }

    fn login(a: &Access, token: &str, now: i64) -> String {
        let mark = a.mark_of(token).unwrap();
        let set = a.new_session(&mark, now).unwrap();
        assert!(set.starts_with("lanes_session_7780="), "{set}");
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Lax"));
        set.split(';').next().unwrap().to_owned()
    }

    #[test]
    fn a_session_is_good_until_it_expires_and_only_with_its_mac() {
        let a = access(&["client-token-for-tests"]);
        let value = login(&a, "client-token-for-tests", 1_000);
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
        let other = access_with(&["client-token-for-tests"], 4);
        assert_eq!(other.viewer(&with("cookie", &value), 2_000), None);
    }

    #[test]
    fn removing_a_token_ends_its_sessions_and_only_its_own() {
        let both = access(&["client-token-for-tests", "second-client-token"]);
        let first = login(&both, "client-token-for-tests", 0);
        let second = login(&both, "second-client-token", 0);
        // The coordinator restarts with the first token removed.
        let rotated = access(&["second-client-token"]);
        assert_eq!(rotated.viewer(&with("cookie", &first), 1), None);
        assert!(rotated.viewer(&with("cookie", &second), 1).is_some());
        // A session's mark cannot be swapped for another token's.
        let theirs: Vec<&str> = second.split('.').collect();
        let mut forged: Vec<&str> = first.split('.').collect();
        forged[3] = theirs[3];
        assert_eq!(rotated.viewer(&with("cookie", &forged.join(".")), 1), None);
    }

    #[test]
    fn bearer_tokens_are_checked_and_nothing_is_open_by_default() {
        let a = access(&["client-token-for-tests"]);
        assert_eq!(a.viewer(&HeaderMap::new(), 0), None);
        let ok = with("authorization", "Bearer client-token-for-tests");
        assert!(matches!(a.viewer(&ok, 0), Some(Viewer::Bearer { .. })));
        let wrong = with("authorization", "Bearer lane-token-for-tests");
        assert_eq!(a.viewer(&wrong, 0), None);
        let open = access(&[]);
        for host in ["127.0.0.1:9", "[::1]:9", "localhost:7780", "lanes.example"] {
            assert_eq!(
                open.viewer(&with("host", host), 0),
                Some(Viewer::Open),
                "{host}"
            );
        }
        // A page of another name that resolves here (DNS rebinding) gets nothing.
        assert_eq!(open.viewer(&with("host", "evil.example:7780"), 0), None);
        assert_eq!(open.viewer(&HeaderMap::new(), 0), None);
        let mut cross = with("origin", "http://evil.example");
        cross.insert("host", HeaderValue::from_static("127.0.0.1:9"));
        assert!(!open.csrf_ok(&Viewer::Open, "", &cross));
        let mut same = with("origin", "http://127.0.0.1:9");
        same.insert("host", HeaderValue::from_static("127.0.0.1:9"));
        assert!(open.csrf_ok(&Viewer::Open, "", &same));
    }

    #[test]
    fn failed_logins_are_limited_per_peer_and_codes_checked_for_shape() {
        let a = access(&["client-token-for-tests"]);
        let (guesser, user): (IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..FAILURES {
            assert!(a.may_try(guesser));
            a.failed(guesser);
        }
        assert!(!a.may_try(guesser));
        let wait = a.locked_for(guesser).expect("locked out");
        assert!(wait > Duration::ZERO && wait <= FAILURE_WINDOW, "{wait:?}");
        assert!(
            a.may_try(user),
            "one peer's failures never lock out another"
        );
        assert!(code_shape_ok("0123456789abcdef0123456789abcdef"));
        for bad in [
            "",
            "0123456789ABCDEF0123456789abcdef",
            "0123",
            "../../etc/passwd",
        ] {
            assert!(!code_shape_ok(bad), "{bad}");
        }
    }

    #[test]
    fn wrong_bearer_tokens_count_as_failed_logins() {
        let a = access(&["client-token-for-tests"]);
        let peer: IpAddr = "10.0.0.3".parse().unwrap();
        let right = with("authorization", "Bearer client-token-for-tests");
        let wrong = with("authorization", "Bearer guess-0000000000000");
        assert!(!a.check_bearer(&right, peer));
        assert!(!a.check_bearer(&HeaderMap::new(), peer));
        for _ in 0..FAILURES {
            assert!(a.may_try(peer));
            assert!(a.check_bearer(&wrong, peer));
        }
        assert!(a.locked_for(peer).is_some());
        // Nothing is counted on an open dashboard, which reads no token.
        let open = access(&[]);
        assert!(!open.check_bearer(&wrong, peer));
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
