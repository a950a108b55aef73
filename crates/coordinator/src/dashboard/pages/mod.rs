//! One module per route's page. Handlers are thin: let the viewer in, read through
//! [`super::api`], and lay the page out.

pub(crate) mod campaign;
pub(crate) mod campaigns;
pub(crate) mod rows;
pub(crate) mod stop;
pub(crate) mod trial;

use axum::response::{Html, IntoResponse, Response};
use lanes_common::ids::CampaignId;

use super::html::{Frame, page};
use super::{access::Viewer, bad_request};

/// A page as an answer.
pub(crate) fn respond(
    title: &str,
    crumbs: &[(&str, Option<String>)],
    live: bool,
    viewer: &Viewer,
    body: &str,
) -> Response {
    respond_at(title, crumbs, live, viewer, body, None)
}

/// [`respond`] with a base for the page's relative links.
pub(crate) fn respond_at(
    title: &str,
    crumbs: &[(&str, Option<String>)],
    live: bool,
    viewer: &Viewer,
    body: &str,
    base: Option<&str>,
) -> Response {
    let csrf = match viewer {
        Viewer::Session { csrf, .. } => Some(csrf.as_str()),
        _ => None,
    };
    Html(page(
        &Frame {
            title,
            crumbs,
            live,
            csrf,
            base,
        },
        body,
    ))
    .into_response()
}

/// What every campaign route does first: let the viewer in (a page sends the browser to log
/// in; anything else gets 401), then check the campaign id from the path.
pub(crate) async fn enter(
    d: &super::Dashboard,
    headers: &axum::http::HeaderMap,
    uri: &axum::http::Uri,
    id: &str,
    page: bool,
) -> Result<(Viewer, CampaignId), Response> {
    let viewer = d.viewer(headers, uri, page).await?;
    Ok((viewer, campaign_id(id)?))
}

/// A campaign id from a path, checked before it goes anywhere.
pub(crate) fn campaign_id(id: &str) -> Result<CampaignId, Response> {
    CampaignId::new(id).map_err(|e| bad_request(&format!("campaign id: {e}")))
}
