//! The web dashboard (`--ui-listen`): campaigns, a campaign's schedule filling in, the lanes
//! at work and the per-arm results, live. Pages are rendered here, charts as inline SVG, so
//! every page reads without JavaScript; a small script only applies the updates a
//! Server-Sent Events stream (fed from Watch) sends. Everything is read through the same
//! CampaignService calls gRPC clients make. Assets are compiled into the binary.
//!
//! - [`access`]: the client token, session cookies, CSRF tokens, login codes;
//! - [`api`]: CampaignService called in process;
//! - [`pages`]: the routes' HTML; [`charts`] and [`grid`]: the SVG;
//! - [`live`]: the SSE stream; [`artifacts`]: attempt files, read-only; [`stored`]: the
//!   same from the artifact store.

// A handler's early answer (a login redirect, a refusal) is a `Response`, returned as the
// `Err` of the checks before it; boxing it would buy nothing on this path.
#![allow(clippy::result_large_err)]

mod access;
mod api;
mod artifacts;
mod charts;
#[doc(hidden)]
pub mod fuzzing;
mod grid;
mod html;
mod ledger;
mod live;
mod lockout;
mod login;
mod pages;
mod stored;
mod tls;
mod view;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::OnceCell;

use crate::auth::Secret;
use crate::service::Shared;
use crate::service::campaign::CampaignSvc;
use access::{Access, Viewer};
use api::{Api, ApiError, Skeleton};

pub(crate) use tls::TlsListener;

/// How the dashboard is served.
#[derive(Debug, Clone)]
pub struct DashboardConfig {
    /// Attempt artifacts to serve read-only (`<dir>/<campaign>/<trial>/a<n>/<file>`); `None`
    /// lists what rows name without links.
    pub artifacts: Option<PathBuf>,
    /// A trace link per attempt: this template with `{trace_id}` replaced (for Jaeger,
    /// `http://jaeger:16686/trace/{trace_id}`); `None` shows the trace id alone.
    pub trace_url: Option<String>,
    /// The dashboard's address as browsers reach it, for login links; `None` uses the
    /// address it listens on.
    pub public_url: Option<String>,
    /// How long a login lasts.
    pub session_ttl: Duration,
    /// How long a one-time login code works.
    pub code_ttl: Duration,
}

impl Default for DashboardConfig {
    fn default() -> Self {
        Self {
            artifacts: None,
            trace_url: None,
            public_url: None,
            session_ttl: Duration::from_secs(12 * 3600),
            code_ttl: Duration::from_secs(5 * 60),
        }
    }
}

/// The dashboard's state, shared by its handlers.
pub(crate) struct Dashboard {
    svc: CampaignSvc,
    tokens: Vec<Secret>,
    secure: bool,
    /// The port it listens on (the session cookie is named after it).
    port: u16,
    config: DashboardConfig,
    /// Made on first use: its key comes from the store, which may be down at start.
    access: OnceCell<Access>,
    /// Each campaign's spec and task ids, by (campaign, spec hash): they change only with an
    /// amendment, which changes the hash.
    skeletons: Mutex<HashMap<(String, String), Arc<Skeleton>>>,
    /// Each campaign's view, shared by its pages and live streams.
    views: view::Views,
    /// Artifact reads at once (each may hold a file of up to 16 MiB).
    artifact_reads: tokio::sync::Semaphore,
}

/// Skeletons kept at most (a few campaigns' task ids).
const SKELETONS_KEPT: usize = 16;

impl Dashboard {
    fn shared(&self) -> &Shared {
        &self.svc.shared
    }

    fn now(&self) -> i64 {
        self.shared().now()
    }

    async fn access(&self) -> Result<&Access, ApiError> {
        self.access
            .get_or_try_init(|| async {
                let key = self
                    .shared()
                    .leases
                    .key(self.shared().store.as_ref())
                    .await
                    .map_err(|e| ApiError {
                        code: tonic::Code::Unavailable,
                        message: format!("the store is unreachable: {e}"),
                    })?;
                Ok(Access::new(
                    self.tokens.clone(),
                    key.derive(access::KEY_LABEL),
                    self.config.session_ttl,
                    self.secure,
                    self.port,
                    self.config.public_url.as_deref().map(public_host),
                ))
            })
            .await
    }

    /// The dashboard's own reads (the shared views), counted under a key of their own.
    fn internal_api(&self) -> Api<'_> {
        Api {
            svc: &self.svc,
            stream_key: "dashboard:views".into(),
        }
    }

    fn api<'a>(&'a self, viewer: &Viewer) -> Api<'a> {
        Api {
            svc: &self.svc,
            stream_key: viewer.stream_key(),
        }
    }

    /// The viewer, or the answer for one who must log in: a page sends the browser to the
    /// login form; anything else gets 401.
    async fn viewer(&self, headers: &HeaderMap, uri: &Uri, page: bool) -> Result<Viewer, Response> {
        let access = self.access().await.map_err(|e| unavailable(&e))?;
        match access.viewer(headers, self.now()) {
            Some(v) => Ok(v),
            None if page => Err(Redirect::to(&format!(
                "/login?next={}",
                html::url_part(uri.path_and_query().map_or("/", |p| p.as_str()))
            ))
            .into_response()),
            None => Err((
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "log in first: /login, or send the client token as Authorization: Bearer\n",
            )
                .into_response()),
        }
    }

    /// The skeleton of a campaign at its current spec hash.
    async fn skeleton(
        &self,
        api: &Api<'_>,
        id: &str,
        spec_hash: &str,
    ) -> Result<Arc<Skeleton>, ApiError> {
        let key = (id.to_owned(), spec_hash.to_owned());
        if let Some(s) = self
            .skeletons
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(s.clone());
        }
        let s = Arc::new(api.skeleton(id).await?);
        let mut kept = self.skeletons.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= SKELETONS_KEPT {
            kept.clear();
        }
        kept.insert(key, s.clone());
        Ok(s)
    }
}

/// Serves the dashboard on `listener` (TLS when `tls` is given) until `shutdown` resolves.
pub(crate) async fn serve(
    shared: Shared,
    tokens: Vec<Secret>,
    config: DashboardConfig,
    listener: TcpListener,
    tls: Option<&crate::tls::ServerTls>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let dashboard = Arc::new(Dashboard {
        svc: CampaignSvc { shared },
        tokens,
        port: listener.local_addr()?.port(),
        // Browsers may reach a plaintext dashboard over https through a proxy.
        secure: tls.is_some()
            || config
                .public_url
                .as_deref()
                .is_some_and(|u| u.starts_with("https://")),
        config,
        access: OnceCell::new(),
        skeletons: Mutex::default(),
        views: view::Views::default(),
        artifact_reads: tokio::sync::Semaphore::new(4),
    });
    let app = router(dashboard).into_make_service_with_connect_info::<Peer>();
    match tls {
        Some(tls) => {
            let listener = TlsListener::new(listener, tls)?;
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        }
    }
}

/// The address a request came from (failed logins are counted per peer).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub(crate) std::net::SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TcpListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, TcpListener>) -> Self {
        Peer(*stream.remote_addr())
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        Peer(*stream.remote_addr())
    }
}

/// The host of a public URL (`https://HOST[:PORT]`).
fn public_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split('/').next().unwrap_or(rest);
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h.to_owned(),
        _ => host.to_owned(),
    }
}

fn router(d: Arc<Dashboard>) -> Router {
    Router::new()
        .route("/", get(pages::campaigns::page))
        .route("/login", get(login::page).post(login::submit))
        .route("/logout", post(login::logout))
        .route("/assets/{file}", get(asset))
        // Browsers ask for it on every page that names none (plain-text artifacts).
        .route("/favicon.ico", get(|| asset(Path("icon.svg".to_owned()))))
        .route("/campaigns/{id}", get(pages::campaign::page))
        .route("/campaigns/{id}/live", get(live::stream))
        .route("/campaigns/{id}/rows", get(pages::rows::page))
        .route(
            "/campaigns/{id}/stop",
            get(pages::stop::confirm).post(pages::stop::submit),
        )
        .route("/campaigns/{id}/trials/{trial}", get(pages::trial::page))
        .route(
            "/campaigns/{id}/trials/{trial}/artifacts/{attempt}/{file}",
            get(artifacts::serve),
        )
        .route(
            "/campaigns/{id}/trials/{trial}/stored/{attempt}/{*path}",
            get(stored::serve),
        )
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            d.clone(),
            lockout::guard,
        ))
        .layer(axum::middleware::map_response(security_headers))
        .with_state(d)
}

/// Headers on every answer: no framing, no sniffing, no referrer, no inline script, and no
/// caching of pages that carry campaign data.
async fn security_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    // An answer with a policy of its own (an artifact's sandbox) keeps it.
    h.entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'self'",
        ));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        // Not `no-referrer`: under it a browser sends `Origin: null` with the page's own
        // form posts, and those are checked for their origin.
        HeaderValue::from_static("same-origin"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    r
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "no such page\n").into_response()
}

/// An error as a page: the status the gRPC code maps to, and its message.
fn error_page(e: &ApiError) -> Response {
    use tonic::Code;
    let status = match e.code {
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::InvalidArgument => StatusCode::BAD_REQUEST,
        Code::FailedPrecondition => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let body = html::page(
        &html::Frame {
            title: "Error",
            crumbs: &[],
            live: false,
            csrf: None,
            base: None,
        },
        &format!(
            "<h1>{}</h1><p class=\"error\">{}</p>",
            status.as_u16(),
            html::esc(&e.message)
        ),
    );
    (status, axum::response::Html(body)).into_response()
}

/// The store cannot be reached to check a login: said without the store's own words, which
/// are for the operator's log, not an unauthenticated caller.
fn unavailable(e: &ApiError) -> Response {
    tracing::warn!(error = %e, "dashboard: cannot check a login");
    error_page(&ApiError {
        code: tonic::Code::Unavailable,
        message: "the coordinator cannot reach its store; try again shortly".into(),
    })
}

fn bad_request(message: &str) -> Response {
    error_page(&ApiError {
        code: tonic::Code::InvalidArgument,
        message: message.to_owned(),
    })
}

async fn asset(Path(file): Path<String>) -> Response {
    let (body, kind): (&'static str, &str) = match file.as_str() {
        "dashboard.css" => (
            include_str!("assets/dashboard.css"),
            "text/css; charset=utf-8",
        ),
        "live.js" => (
            include_str!("assets/live.js"),
            "text/javascript; charset=utf-8",
        ),
        "icon.svg" => (include_str!("assets/icon.svg"), "image/svg+xml"),
        _ => return not_found().await,
    };
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        body,
    )
        .into_response()
}
