//! The per-address lockout, in front of every route: an address that failed to log in too
//! often lately (a wrong token or code at the login form, or a wrong `Authorization: Bearer`
//! token on any request) gets 429 for every request until its wait ends, a right token
//! included, so guessing through the header is as slow as through the form.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{Dashboard, Peer};

pub(crate) async fn guard(
    State(d): State<Arc<Dashboard>>,
    ConnectInfo(Peer(peer)): ConnectInfo<Peer>,
    request: Request,
    next: Next,
) -> Response {
    // Without the store the handlers answer 503 themselves.
    if let Ok(access) = d.access().await {
        if let Some(wait) = access.locked_for(peer.ip()) {
            let secs = wait.as_secs() + 1;
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, secs.to_string())],
                format!("Too many failed logins from this address; try again in {secs} s.\n"),
            )
                .into_response();
        }
        access.check_bearer(request.headers(), peer.ip());
    }
    next.run(request).await
}
