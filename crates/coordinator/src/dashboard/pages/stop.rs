//! `/campaigns/<id>/stop`: Stop (drain) and Cancel, each behind a confirmation page whose
//! form POSTs with the viewer's CSRF token.

use std::sync::Arc;

use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use lanes_common::proto as pb;

use super::super::html::{esc, url_part};
use super::super::{Dashboard, bad_request, error_page};
use super::{campaign_id, enter, respond};

#[derive(Deserialize)]
pub(crate) struct Mode {
    #[serde(default)]
    mode: String,
}

#[derive(Deserialize)]
pub(crate) struct StopForm {
    #[serde(default)]
    mode: String,
    #[serde(default)]
    csrf: String,
}

fn mode_of(s: &str) -> Option<pb::StopMode> {
    match s {
        "" | "drain" => Some(pb::StopMode::Drain),
        "cancel" => Some(pb::StopMode::Cancel),
        _ => None,
    }
}

pub(crate) async fn confirm(
    State(d): State<Arc<Dashboard>>,
    Path(id): Path<String>,
    Query(q): Query<Mode>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let (viewer, id) = match enter(&d, &headers, &uri, &id, true).await {
        Ok(entered) => entered,
        Err(r) => return r,
    };
    let Some(mode) = mode_of(&q.mode) else {
        return bad_request("mode is drain or cancel");
    };
    let (what, effect, button) = match mode {
        pb::StopMode::Cancel => (
            "Cancel",
            "No new attempt starts, and the attempts in flight are cancelled through their lanes and recorded as cancelled.",
            "Cancel the campaign",
        ),
        _ => (
            "Stop (drain)",
            "No new attempt starts; the attempts in flight finish and are recorded. Submitting the campaign again resumes it.",
            "Stop the campaign",
        ),
    };
    let base = format!("/campaigns/{}", url_part(id.as_str()));
    let body = format!(
        "<h1>{what} {}?</h1><p>{effect}</p><form method=\"post\" action=\"{base}/stop\" class=\"confirm\">\
         <input type=\"hidden\" name=\"mode\" value=\"{}\"><input type=\"hidden\" name=\"csrf\" value=\"{}\">\
         <button class=\"danger\" id=\"confirm-stop\">{button}</button> <a href=\"{base}\">Keep it running</a></form>",
        esc(id.as_str()),
        if mode == pb::StopMode::Cancel {
            "cancel"
        } else {
            "drain"
        },
        esc(viewer.csrf()),
    );
    respond(
        what,
        &[(id.as_str(), Some(base.clone())), ("stop", None)],
        false,
        &viewer,
        &body,
    )
}

pub(crate) async fn submit(
    State(d): State<Arc<Dashboard>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
    Form(f): Form<StopForm>,
) -> Response {
    let viewer = match d.viewer(&headers, &uri, false).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let ok = match d.access().await {
        Ok(a) => a.csrf_ok(&viewer, &f.csrf, &headers),
        Err(e) => return error_page(&e),
    };
    if !ok {
        return (
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or stale; reload the page and try again\n",
        )
            .into_response();
    }
    let id = match campaign_id(&id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let Some(mode) = mode_of(&f.mode) else {
        return bad_request("mode is drain or cancel");
    };
    match d.api(&viewer).stop(id.as_str(), mode).await {
        Ok(_) => (
            StatusCode::SEE_OTHER,
            [(
                header::LOCATION,
                format!("/campaigns/{}", url_part(id.as_str())),
            )],
        )
            .into_response(),
        Err(e) => error_page(&e),
    }
}
