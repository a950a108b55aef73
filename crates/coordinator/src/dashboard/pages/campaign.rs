//! `/campaigns/<id>`: the schedule filling in, the lanes at work, the gates, throughput, and
//! the per-arm results with their uncertainty; the live parts update over SSE.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;

use super::super::html::{esc, url_part};
use super::super::view::{CampaignView, LIVE_PARTS};
use super::super::{Dashboard, error_page, grid};
use super::{enter, respond_at};

/// Each live part's heading.
fn heading(part: &str) -> &'static str {
    match part {
        "summary" => "Progress",
        "gates" => "Gates in force",
        "lanes" => "Lanes in flight",
        "grid" => "Schedule",
        "throughput" => "Throughput",
        "results" => "Results",
        _ => "The report",
    }
}

pub(crate) async fn page(
    State(d): State<Arc<Dashboard>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let (viewer, id) = match enter(&d, &headers, &uri, &id, true).await {
        Ok(entered) => entered,
        Err(r) => return r,
    };
    let body = d
        .views
        .with(&d, id.as_str(), |view| body(view, id.as_str()))
        .await;
    match body {
        Ok((body, live)) => {
            let base = format!("/campaigns/{}/", url_part(id.as_str()));
            respond_at(
                id.as_str(),
                &[(id.as_str(), None)],
                live,
                &viewer,
                &body,
                Some(&base),
            )
        }
        Err(e) => error_page(&e),
    }
}

/// The page's body, and whether it follows live updates.
fn body(view: &CampaignView, id: &str) -> (String, bool) {
    let base = format!("/campaigns/{}", url_part(id));
    let mut body = format!(
        "{}<div class=\"title\"><h1>{}</h1><p class=\"live-status\" id=\"live-status\" aria-live=\"polite\" \
         data-live=\"{base}/live\">{}</p></div><nav class=\"actions\"><a href=\"{base}/rows\">Rows</a>",
        grid::patterns(),
        esc(id),
        if view.over() {
            "final"
        } else {
            "live updates off"
        },
    );
    if !view.over() {
        let _ = write!(
            body,
            "<a class=\"button\" href=\"{base}/stop?mode=drain\">Stop (drain)</a>\
             <a class=\"button danger\" href=\"{base}/stop?mode=cancel\">Cancel</a>"
        );
    }
    body.push_str("</nav>");
    let parts = &view.parts;
    debug_assert_eq!(parts.len(), LIVE_PARTS.len());
    // The summary across the top; the schedule and throughput beside the results, the lanes
    // and the gates (one column on a phone); the tables below.
    for (part, html) in parts {
        let part = *part;
        match part {
            "grid" => body.push_str("<div class=\"columns\"><div>"),
            "results" => body.push_str("</div><div>"),
            "audit" => body.push_str("</div></div>"),
            _ => {}
        }
        let _ = write!(
            body,
            "<section aria-labelledby=\"h-{part}\"><h2 id=\"h-{part}\">{}</h2><div id=\"{part}\">{html}</div></section>",
            heading(part)
        );
    }
    (body, !view.over())
}
