//! Attempt files from the artifact store (`--artifact-store`), read-only, for when the
//! worker's copy is gone: `/campaigns/<id>/trials/<trial>/stored/a<n>/<path>`. Only a path the
//! attempt's manifest names is read, at most 16 MiB, and served with the same types and
//! headers as files read from disk ([`super::artifacts`]).

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use lanes_artifacts::{MANIFEST, StoreError};
use lanes_common::ids::{AttemptTag, CampaignId, Token, TrialId};
use lanes_common::row::Row;

use super::Dashboard;
use super::artifacts::file_response;
use super::html::{esc, url_part};

/// The largest file served, as for files on disk.
const MAX_BYTES: u64 = 16 << 20;
/// Files listed per attempt at most.
const MAX_LISTED: usize = 200;

pub(crate) async fn serve(
    State(d): State<Arc<Dashboard>>,
    Path((campaign, trial, attempt, path)): Path<(String, String, String, String)>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    if let Err(r) = d.viewer(&headers, &uri, false).await {
        return r;
    }
    let Some(store) = d.shared().artifact_store.clone() else {
        return (
            StatusCode::NOT_FOUND,
            "this dashboard has no artifact store\n",
        )
            .into_response();
    };
    let tag = match tag_of(&campaign, &trial, &attempt) {
        Ok(t) => t,
        Err(why) => return (StatusCode::BAD_REQUEST, format!("{why}\n")).into_response(),
    };
    let Ok(_reading) = d.artifact_reads.acquire().await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    };
    let manifest = match store.manifest(&tag).await {
        Ok(m) => m,
        Err(e) => return refusal(e),
    };
    let Some(file) = manifest.file(&path) else {
        return (StatusCode::NOT_FOUND, "no such artifact\n").into_response();
    };
    if file.size > MAX_BYTES {
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the artifact has {} bytes; the dashboard serves at most {MAX_BYTES} (`lanes artifacts` downloads it)\n",
                file.size
            ),
        )
            .into_response();
    }
    match store.read(&tag, &path, MAX_BYTES).await {
        Ok(bytes) => file_response(&path, bytes),
        Err(e) => refusal(e),
    }
}

/// The attempt a URL names, each part validated.
fn tag_of(campaign: &str, trial: &str, attempt: &str) -> Result<AttemptTag, String> {
    let campaign = CampaignId::new(campaign).map_err(|e| format!("campaign id: {e}"))?;
    let trial_id = TrialId::new(trial).map_err(|e| format!("trial id: {e}"))?;
    let attempt = attempt
        .strip_prefix('a')
        .and_then(|n| n.parse::<u32>().ok())
        .ok_or("the attempt is a<number>")?;
    Ok(AttemptTag::new(campaign, Token { trial_id, attempt }))
}

fn refusal(e: StoreError) -> Response {
    let status = match &e {
        StoreError::NotFound(_) => StatusCode::NOT_FOUND,
        StoreError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        StoreError::Refused(_) | StoreError::Local(_) => StatusCode::BAD_GATEWAY,
    };
    (status, format!("{e}\n")).into_response()
}

/// How long a trial page waits for an attempt's manifest.
const LIST_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

fn unlisted(why: &str) -> String {
    format!(
        "<p class=\"quiet\">In the artifact store, not listed: <code>{}</code></p>",
        esc(why)
    )
}

/// The attempt's files in the artifact store, linked, for the trial page; `None` when the
/// row names no upload (its first artifact is not a manifest) or there is no store.
pub(crate) async fn listing(
    d: &Dashboard,
    campaign: &CampaignId,
    trial: &TrialId,
    row: &Row,
    base: &str,
) -> Option<String> {
    let store = d.shared().artifact_store.as_ref()?;
    if !row
        .record
        .artifacts
        .first()?
        .ends_with(&format!("/{MANIFEST}"))
    {
        return None;
    }
    let tag = AttemptTag::new(
        campaign.clone(),
        Token {
            trial_id: trial.clone(),
            attempt: row.attempt,
        },
    );
    // A store that does not answer must not hold the page: its files are then not listed.
    let read = async {
        let _reading = d.artifact_reads.acquire().await;
        store.manifest(&tag).await
    };
    let manifest = match tokio::time::timeout(LIST_WITHIN, read).await {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => return Some(unlisted(&e.to_string())),
        Err(_) => return Some(unlisted("the artifact store did not answer in time")),
    };
    let mut out = String::from(
        "<p class=\"quiet\">In the artifact store:</p><ul class=\"artifacts stored\">",
    );
    for f in manifest.files.iter().take(MAX_LISTED) {
        let href: Vec<String> = f.path.split('/').map(url_part).collect();
        let _ = write!(
            out,
            "<li><a class=\"artifact\" href=\"{base}/trials/{}/stored/a{}/{}\">{}</a> <small>{} bytes</small></li>",
            url_part(trial.as_str()),
            row.attempt,
            href.join("/"),
            esc(&f.path),
            f.size
        );
    }
    out.push_str("</ul>");
    Some(out)
}
