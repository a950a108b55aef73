//! `/login` and `/logout`. A browser logs in with the client token, or with a one-time code
//! from `lanes ui-link`. Opening a code's link shows a button that posts the code: a link
//! previewer (a chat unfurling the URL) fetches the page but never posts, so it cannot use
//! the code up. Failed logins are limited per peer address, a code of the wrong shape never
//! reaches the store, and a login must come from this dashboard's own page.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Form, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use super::access::{Access, code_digest, code_shape_ok, safe_next, same_origin};
use super::api::ApiError;
use super::html::{self, Frame, esc};
use super::{Dashboard, Peer, bad_request, error_page, unavailable};

#[derive(Deserialize)]
pub(crate) struct LoginQuery {
    pub(super) code: Option<String>,
    pub(super) next: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    #[serde(default)]
    pub(super) token: String,
    #[serde(default)]
    pub(super) code: String,
    pub(super) next: Option<String>,
}

#[derive(Deserialize)]
pub(crate) struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

fn frame(title: &str) -> Frame<'_> {
    Frame {
        title,
        crumbs: &[],
        live: false,
        csrf: None,
        base: None,
    }
}

fn problem(p: Option<&str>) -> String {
    p.map_or(String::new(), |p| {
        format!("<p class=\"error\" role=\"alert\">{}</p>", esc(p))
    })
}

fn token_form(next: &str, trouble: Option<&str>) -> String {
    html::page(
        &frame("Log in"),
        &format!(
            "<h1>Log in</h1>{}<form method=\"post\" action=\"/login\" class=\"login\">\
             <label for=\"token\">Client token</label>\
             <input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" required>\
             <input type=\"hidden\" name=\"next\" value=\"{}\"><button>Log in</button></form>\
             <p class=\"hint\">Or open a one-time link from <code>lanes ui-link</code>.</p>",
            problem(trouble),
            esc(next)
        ),
    )
}

fn code_form(code: &str, next: &str) -> String {
    html::page(
        &frame("Log in"),
        &format!(
            "<h1>Log in</h1><p>This one-time link logs this browser in.</p>\
             <form method=\"post\" action=\"/login\" class=\"login\">\
             <input type=\"hidden\" name=\"code\" value=\"{}\">\
             <input type=\"hidden\" name=\"next\" value=\"{}\">\
             <button id=\"use-code\">Continue</button></form>",
            esc(code),
            esc(next)
        ),
    )
}

fn refused(status: StatusCode, next: &str, why: &str) -> Response {
    (status, Html(token_form(next, Some(why)))).into_response()
}

/// The token form, or for a code link the button that posts it.
pub(crate) async fn page(Query(q): Query<LoginQuery>) -> Response {
    let next = q.next.as_deref().map(|n| safe_next(Some(n)));
    match q.code {
        Some(code) if code_shape_ok(&code) => {
            Html(code_form(&code, next.as_deref().unwrap_or(""))).into_response()
        }
        Some(_) => refused(
            StatusCode::BAD_REQUEST,
            next.as_deref().unwrap_or("/"),
            "That is not a login link of this dashboard.",
        ),
        None => Html(token_form(next.as_deref().unwrap_or("/"), None)).into_response(),
    }
}

/// A token or a code traded for a session cookie, then on to the page asked for. Only from
/// this dashboard's own form (a cross-site post could log a browser in as someone else), and
/// not from a peer that failed too often lately.
pub(crate) async fn submit(
    State(d): State<Arc<Dashboard>>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    headers: HeaderMap,
    Form(f): Form<LoginForm>,
) -> Response {
    let access = match d.access().await {
        Ok(a) => a,
        Err(e) => return unavailable(&e),
    };
    let next = f.next.as_deref().filter(|n| !n.is_empty());
    if !same_origin(&headers) {
        return bad_request("log in from this dashboard's own login page");
    }
    if !access.may_try(peer.ip()) {
        return refused(
            StatusCode::TOO_MANY_REQUESTS,
            &safe_next(next),
            "Too many failed logins from this address; wait a minute.",
        );
    }
    let now = d.now();
    if !f.code.is_empty() {
        if !code_shape_ok(&f.code) {
            return bad_request("that is not a login code");
        }
        let grant = match d
            .shared()
            .store
            .take_login_code(code_digest(&f.code), now)
            .await
        {
            Ok(g) => g,
            Err(e) => return unavailable(&ApiError::from(crate::grpc_status::from_store(e))),
        };
        let Some(grant) = grant else {
            access.failed(peer.ip());
            return refused(
                StatusCode::UNAUTHORIZED,
                &safe_next(next),
                "That login link was used already or has expired. Ask for a new one \
                 (lanes ui-link), or log in with the client token.",
            );
        };
        let next = match (next, &grant.campaign) {
            (Some(n), _) => safe_next(Some(n)),
            (None, Some(c)) => format!("/campaigns/{c}"),
            (None, None) => "/".into(),
        };
        return signed_in(access, &grant.token_mark, now, &next);
    }
    match access.mark_of(f.token.trim()) {
        Some(mark) => signed_in(access, &mark, now, &safe_next(next)),
        None => {
            access.failed(peer.ip());
            refused(
                StatusCode::UNAUTHORIZED,
                &safe_next(next),
                "That is not a client token of this coordinator.",
            )
        }
    }
}

fn signed_in(access: &Access, mark: &str, now: i64, next: &str) -> Response {
    match access.new_session(mark, now) {
        Ok(cookie) => (
            StatusCode::SEE_OTHER,
            [
                (header::SET_COOKIE, cookie),
                (header::LOCATION, next.to_owned()),
            ],
        )
            .into_response(),
        Err(e) => error_page(&ApiError {
            code: tonic::Code::Internal,
            message: format!("no randomness for a session: {e}"),
        }),
    }
}

/// Ends the session. A logged-in form carries its CSRF token; anyone else must post from
/// this dashboard's own pages.
pub(crate) async fn logout(
    State(d): State<Arc<Dashboard>>,
    headers: HeaderMap,
    Form(f): Form<CsrfForm>,
) -> Response {
    let access = match d.access().await {
        Ok(a) => a,
        Err(e) => return unavailable(&e),
    };
    let allowed = match access.viewer(&headers, d.now()) {
        Some(v) => access.csrf_ok(&v, &f.csrf, &headers),
        None => same_origin(&headers),
    };
    if !allowed {
        return bad_request("the form is stale; reload the page and try again");
    }
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, access.end_session()),
            (header::LOCATION, "/login".to_owned()),
        ],
    )
        .into_response()
}
