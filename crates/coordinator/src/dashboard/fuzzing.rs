//! Entry points for the fuzz targets (`fuzz/`, replayed by `crates/fuzz-entry`); not an API.
//! Each function forwards to the dashboard's own code, which stays private, so the fuzzers
//! exercise exactly what the dashboard runs on a request's path, query, form and headers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Form, FromRequest, Query};
use axum::http::{HeaderMap, Request, Uri, header};
use lanes_common::lease::LeaseKey;

use super::access::{self, Access, Viewer};
use super::{artifacts, html, login};
use crate::auth::Secret;

/// Where a login may send the browser next (`access::safe_next`).
pub fn safe_next(next: Option<&str>) -> String {
    access::safe_next(next)
}

/// Whether a login code has the shape of one (`access::code_shape_ok`).
pub fn code_shape_ok(code: &str) -> bool {
    access::code_shape_ok(code)
}

/// HTML escaping (`html::esc`).
pub fn esc(s: &str) -> String {
    html::esc(s)
}

/// Percent-encoding of a path segment or query value (`html::url_part`).
pub fn url_part(s: &str) -> String {
    html::url_part(s)
}

/// The host of `--ui-public-url` (`public_host`).
pub fn public_host(url: &str) -> String {
    super::public_host(url)
}

/// Whether a request comes from a page of this origin (`access::same_origin`).
pub fn same_origin(headers: &HeaderMap) -> bool {
    access::same_origin(headers)
}

/// The file an artifact URL names under `root`, after the checks of `artifacts::read` that
/// need no file system; a refusal as its text.
pub fn artifact_path(
    root: &Path,
    campaign: &str,
    trial: &str,
    attempt: &str,
    file: &str,
) -> Result<PathBuf, String> {
    artifacts::checked_path(root, campaign, trial, attempt, file).map_err(|r| format!("{r:?}"))
}

/// How an artifact is served: its content type, and whether it is a download.
pub fn artifact_kind(file: &str) -> (&'static str, bool) {
    artifacts::kind(file)
}

/// `GET /login?<query>`, as the router extracts and answers it: the query's `code` and
/// `next`, the status and the page. `None` when the query does not extract.
pub fn login_page(query: &str) -> Option<LoginPage> {
    let uri: Uri = format!("/login?{query}").parse().ok()?;
    let Query(q) = Query::<login::LoginQuery>::try_from_uri(&uri).ok()?;
    let (code, next) = (q.code.clone(), q.next.clone());
    let (status, body) = block_on(async move {
        let response = login::page(Query(q)).await;
        let status = response.status().as_u16();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await;
        (status, body)
    });
    Some(LoginPage {
        code,
        next,
        status,
        html: String::from_utf8_lossy(&body.ok()?).into_owned(),
    })
}

/// What [`login_page`] saw and answered.
#[derive(Debug)]
pub struct LoginPage {
    pub code: Option<String>,
    pub next: Option<String>,
    pub status: u16,
    pub html: String,
}

/// A `POST /login` body, extracted as the handler's `Form` extracts it: (token, code, next).
pub fn login_form(body: &[u8]) -> Option<(String, String, Option<String>)> {
    let request = Request::post("/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body.to_vec()))
        .ok()?;
    let Form(f) = block_on(Form::<login::LoginForm>::from_request(request, &())).ok()?;
    Some((f.token, f.code, f.next))
}

/// The dashboard's gatekeeper (`access::Access`) with one client token, or open (none).
pub struct Gate {
    access: Access,
    token: Option<String>,
}

/// Who [`Gate::viewer`] let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Open,
    Bearer { mark: String },
    Session { mark: String, csrf: String },
}

impl Gate {
    /// A gate for `token` (`None`: open), behind `public_url` when given.
    pub fn new(token: Option<&str>, public_url: Option<&str>) -> Option<Self> {
        let tokens = match token {
            Some(t) => vec![Secret::new(t).ok()?],
            None => Vec::new(),
        };
        let key = LeaseKey::from_bytes([7; 32]).derive(access::KEY_LABEL);
        let access = Access::new(
            tokens,
            key,
            Duration::from_secs(3600),
            false,
            7701,
            public_url.map(super::public_host),
        );
        Some(Self {
            access,
            token: token.map(str::to_owned),
        })
    }

    /// The mark of the gate's token.
    pub fn mark(&self) -> Option<String> {
        self.access.mark_of(self.token.as_deref()?)
    }

    /// A session cookie for the gate's token, issued at `now_ms`, as a `Cookie` header value.
    pub fn session_cookie(&self, now_ms: i64) -> Option<String> {
        let set = self.access.new_session(&self.mark()?, now_ms).ok()?;
        Some(set.split(';').next()?.to_owned())
    }

    /// The viewer of a request with these headers at `now_ms`.
    pub fn viewer(&self, headers: &HeaderMap, now_ms: i64) -> Option<Seen> {
        Some(match self.access.viewer(headers, now_ms)? {
            Viewer::Open => Seen::Open,
            Viewer::Bearer { mark } => Seen::Bearer { mark },
            Viewer::Session { mark, csrf } => Seen::Session { mark, csrf },
        })
    }

    /// Whether a form with CSRF token `given`, posted with these headers, passes.
    pub fn csrf_ok(&self, headers: &HeaderMap, now_ms: i64, given: &str) -> Option<bool> {
        let viewer = self.access.viewer(headers, now_ms)?;
        Some(self.access.csrf_ok(&viewer, given, headers))
    }
}

/// Runs a future that needs no I/O to completion on a current-thread runtime.
fn block_on<F: Future>(f: F) -> F::Output {
    thread_local! {
        static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a current-thread runtime");
    }
    RUNTIME.with(|rt| rt.block_on(f))
}
