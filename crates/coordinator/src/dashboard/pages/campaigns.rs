//! `/`: every campaign with its state, progress, spend, and when it started and ended.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::Response;

use super::super::html::{esc, table, url_part, usd};
use super::super::view::state_word;
use super::super::{Dashboard, charts, error_page};
use super::respond;

pub(crate) async fn page(
    State(d): State<Arc<Dashboard>>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let viewer = match d.viewer(&headers, &uri, true).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let api = d.api(&viewer);
    let campaigns = match api.list().await {
        Ok(c) => c,
        Err(e) => return error_page(&e),
    };
    let mut rows = Vec::with_capacity(campaigns.len());
    for c in &campaigns {
        let state = state_word(c.state);
        let over = matches!(state, "stopped" | "done");
        // The last row's time is when a campaign that is over ended.
        let mut ended = "—".to_owned();
        if over && c.rows_total > 0 {
            let _ = api
                .rows(&c.id, c.rows_total - 1, |r| {
                    ended = format!("<time>{}</time>", esc(r.written_utc.as_str()));
                    false
                })
                .await;
        }
        rows.push(vec![
            format!(
                "<a href=\"/campaigns/{}\">{}</a>",
                url_part(&c.id),
                esc(&c.id)
            ),
            format!("<span class=\"state s-{state}\">{state}</span>"),
            charts::progress(c.trials_final, c.trials_total, "final"),
            format!(
                "{} counted · {} excluded",
                c.trials_counted, c.trials_excluded
            ),
            usd(c.spend_usd),
            format!("<time>{}</time>", esc(&c.created_utc)),
            ended,
        ]);
    }
    let body = if rows.is_empty() {
        "<h1>Campaigns</h1><p class=\"quiet\">No campaign yet. Submit one with <code>lanes submit FILE</code>.</p>".to_owned()
    } else {
        format!(
            "<h1>Campaigns</h1>{}",
            table(
                "campaigns",
                &[
                    "Campaign", "State", "Progress", "Results", "Spend", "Started", "Ended"
                ],
                &rows
            )
        )
    };
    respond("Campaigns", &[], false, &viewer, &body)
}
