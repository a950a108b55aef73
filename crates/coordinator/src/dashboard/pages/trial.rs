//! `/campaigns/<id>/trials/<trial_id>`: every attempt of one trial, with its status, failure
//! kind, walls per phase, flags, artifacts and trace.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;

use lanes_common::ids::TrialId;
use lanes_common::row::Row;

use super::super::html::{duration_s, esc, table, url_part, usd};
use super::super::{Dashboard, bad_request, error_page};
use super::super::{artifacts, stored};
use super::rows::flags;
use super::{enter, respond};

pub(crate) async fn page(
    State(d): State<Arc<Dashboard>>,
    Path((id, trial)): Path<(String, String)>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let (viewer, id) = match enter(&d, &headers, &uri, &id, true).await {
        Ok(entered) => entered,
        Err(r) => return r,
    };
    let trial = match TrialId::new(trial) {
        Ok(t) => t,
        Err(e) => return bad_request(&format!("trial id: {e}")),
    };
    let api = d.api(&viewer);
    // Where the trial's rows are, from the campaign's shared view; then just those rows.
    let seqs = d
        .views
        .with(&d, id.as_str(), |v| {
            v.ledger
                .trials
                .get(trial.as_str())
                .map(|t| t.seqs.clone())
                .unwrap_or_default()
        })
        .await;
    let seqs = match seqs {
        Ok(s) => s,
        Err(e) => return error_page(&e),
    };
    let mut mine = Vec::<Row>::with_capacity(seqs.len());
    for seq in seqs {
        let read = api
            .rows(id.as_str(), seq, |r| {
                mine.push(r);
                false
            })
            .await;
        if let Err(e) = read {
            return error_page(&e);
        }
    }
    let base = format!("/campaigns/{}", url_part(id.as_str()));
    let mut body = format!("<h1>Trial {}</h1>", esc(trial.as_str()));
    if mine.is_empty() {
        body.push_str("<p class=\"quiet\">No attempt has a row yet: the trial waits for a lane, or is running its first attempt.</p>");
    }
    let attempts: Vec<Vec<String>> = mine
        .iter()
        .map(|r| {
            vec![
                format!("<a href=\"#a{}-{}\">{}</a>", r.attempt, r.seq, r.attempt),
                esc(r.status.as_str()),
                r.failure_kind.map_or_else(String::new, |k| esc(k.as_str())),
                flags(r),
                r.result
                    .score
                    .map_or_else(|| "—".into(), |s| format!("{s:.3}")),
                r.result.cost_usd.map_or_else(|| "—".into(), usd),
                duration_s(r.wall_s),
            ]
        })
        .collect();
    if !attempts.is_empty() {
        body.push_str(&table(
            "attempts",
            &[
                "Attempt",
                "Status",
                "Failure kind",
                "Flags",
                "Score",
                "Cost",
                "Wall",
            ],
            &attempts,
        ));
    }
    for r in &mine {
        let _ = write!(
            body,
            "<section class=\"attempt\" id=\"a{}-{}\"><h2>Attempt {} <small>row {}</small></h2><dl class=\"facts\">",
            r.attempt, r.seq, r.attempt, r.seq
        );
        let mut fact = |k: &str, v: String| {
            let _ = write!(body, "<div><dt>{k}</dt><dd>{v}</dd></div>");
        };
        fact("Status", esc(r.status.as_str()));
        if let Some(k) = r.failure_kind {
            fact("Failure kind", esc(k.as_str()));
        }
        fact("Flags", flags(r));
        if let Some(why) = &r.excluded_reason {
            fact("Excluded because", esc(&why.to_string()));
        }
        fact("Lane", esc(r.lane.as_ref().map_or("—", |l| l.as_str())));
        fact("Host", esc(r.host.as_ref().map_or("—", |h| h.as_str())));
        fact(
            "Started",
            esc(r.record.started_utc.as_ref().map_or("—", |t| t.as_str())),
        );
        fact(
            "Ended",
            esc(r.record.ended_utc.as_ref().map_or("—", |t| t.as_str())),
        );
        if let Some(e) = &r.record.error {
            fact("Error", format!("<code>{}</code>", esc(e)));
        }
        fact(
            "Trace",
            trace(d.config.trace_url.as_deref(), r.trace_id.as_deref()),
        );
        body.push_str("</dl>");
        let w = &r.result.walls;
        let walls = [
            ("admit", w.admit_s),
            ("boot", w.boot_s),
            ("reset", w.reset_s),
            ("gate", w.gate_s),
            ("agent", w.agent_s),
            ("evaluate", w.evaluate_s),
            ("publish", w.publish_s),
        ];
        let head: Vec<&str> = walls.iter().map(|(p, _)| *p).chain(["total"]).collect();
        let cells: Vec<String> = walls
            .iter()
            .map(|(_, s)| duration_s(*s))
            .chain([duration_s(r.wall_s)])
            .collect();
        body.push_str("<h3>Walls per phase</h3>");
        body.push_str(&table("walls", &head, &[cells]));
        // The store is asked only when this host has no copy.
        let stored = match artifacts::has_local(&d.config, &id, &trial, r.attempt) {
            true => None,
            false => stored::listing(&d, &id, &trial, r, &base).await,
        };
        body.push_str(&artifacts::section(
            &d.config, &id, &trial, r, &base, stored,
        ));
        body.push_str("</section>");
    }
    respond(
        trial.as_str(),
        &[(id.as_str(), Some(base.clone())), (trial.as_str(), None)],
        false,
        &viewer,
        &body,
    )
}

/// The trace id, linked through the configured template when there is one.
fn trace(template: Option<&str>, trace_id: Option<&str>) -> String {
    match (template, trace_id) {
        (_, None) => "—".into(),
        (Some(t), Some(id)) => format!(
            "<a class=\"trace\" href=\"{}\" rel=\"noreferrer\">{}</a>",
            esc(&t.replace("{trace_id}", &url_part(id))),
            esc(id)
        ),
        (None, Some(id)) => format!("<code>{}</code>", esc(id)),
    }
}
