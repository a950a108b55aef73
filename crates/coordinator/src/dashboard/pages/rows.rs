//! `/campaigns/<id>/rows`: the ledger as a table, filtered by arm, status and failure kind,
//! a page at a time, read from the store in seq order from where the last page stopped.

use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Uri};
use axum::response::Response;
use serde::Deserialize;

use lanes_common::row::{FailureKind, Row, Status};

use super::super::html::{esc, table, url_part, usd};
use super::super::{Dashboard, bad_request, error_page};
use super::{enter, respond};

/// Rows shown per page.
const PAGE: usize = 100;
/// Rows read per page at most, so a filter that matches little still answers quickly.
const SCAN: u64 = 20_000;

#[derive(Deserialize, Default)]
pub(crate) struct Filter {
    #[serde(default)]
    arm: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    failure_kind: String,
    #[serde(default)]
    from: u64,
}

impl Filter {
    fn query(&self, from: u64) -> String {
        format!(
            "?arm={}&status={}&failure_kind={}&from={from}",
            url_part(&self.arm),
            url_part(&self.status),
            url_part(&self.failure_kind)
        )
    }
}

/// The filter as types: an unknown status or failure kind is refused, not matched by nothing.
struct Wanted {
    arm: Option<String>,
    status: Option<Status>,
    failure_kind: Option<FailureKind>,
}

impl Wanted {
    fn of(f: &Filter) -> Result<Self, String> {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Ok(Self {
            arm: opt(&f.arm),
            status: opt(&f.status)
                .map(|s| Status::from_str(&s).map_err(|e| e.to_string()))
                .transpose()?,
            failure_kind: opt(&f.failure_kind)
                .map(|s| FailureKind::from_str(&s).map_err(|e| e.to_string()))
                .transpose()?,
        })
    }

    fn matches(&self, r: &Row) -> bool {
        self.arm.as_deref().is_none_or(|a| r.arm.as_str() == a)
            && self.status.is_none_or(|s| r.status == s)
            && self.failure_kind.is_none_or(|k| r.failure_kind == Some(k))
    }
}

fn select(name: &str, label: &str, options: &[&str], chosen: &str) -> String {
    let mut out = format!("<label>{label} <select name=\"{name}\"><option value=\"\">any</option>");
    for o in options {
        let _ = write!(
            out,
            "<option{}>{}</option>",
            if *o == chosen { " selected" } else { "" },
            esc(o)
        );
    }
    out.push_str("</select></label>");
    out
}

pub(crate) async fn page(
    State(d): State<Arc<Dashboard>>,
    Path(id): Path<String>,
    Query(filter): Query<Filter>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let (viewer, id) = match enter(&d, &headers, &uri, &id, true).await {
        Ok(entered) => entered,
        Err(r) => return r,
    };
    let wanted = match Wanted::of(&filter) {
        Ok(w) => w,
        Err(e) => return bad_request(&e),
    };
    let api = d.api(&viewer);
    let status = match api.get(id.as_str()).await {
        Ok(s) => s,
        Err(e) => return error_page(&e),
    };
    let skeleton = match d.skeleton(&api, id.as_str(), &status.spec_hash).await {
        Ok(s) => s,
        Err(e) => return error_page(&e),
    };
    let (mut shown, mut next) = (Vec::new(), filter.from);
    let read = api
        .rows(id.as_str(), filter.from, |r| {
            next = r.seq + 1;
            if wanted.matches(&r) {
                shown.push(r);
            }
            shown.len() < PAGE && next - filter.from < SCAN
        })
        .await;
    if let Err(e) = read {
        return error_page(&e);
    }
    let base = format!("/campaigns/{}", url_part(id.as_str()));
    let arms: Vec<&str> = skeleton.spec.arms.iter().map(|a| a.id.as_str()).collect();
    let statuses: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
    let kinds: Vec<&str> = FailureKind::ALL.iter().map(|s| s.as_str()).collect();
    let mut body = format!(
        "<h1>Rows of {}</h1><form method=\"get\" class=\"filters\">{}{}{}<button>Filter</button></form>",
        esc(id.as_str()),
        select("arm", "Arm", &arms, &filter.arm),
        select("status", "Status", &statuses, &filter.status),
        select("failure_kind", "Failure kind", &kinds, &filter.failure_kind),
    );
    let rows: Vec<Vec<String>> = shown
        .iter()
        .map(|r| {
            vec![
                r.seq.to_string(),
                format!(
                    "<a href=\"{base}/trials/{}\">{}</a>",
                    url_part(r.trial_id.as_str()),
                    esc(r.trial_id.as_str())
                ),
                r.attempt.to_string(),
                esc(r.status.as_str()),
                r.failure_kind.map_or_else(String::new, |k| esc(k.as_str())),
                flags(r),
                r.result
                    .score
                    .map_or_else(|| "—".into(), |s| format!("{s:.3}")),
                r.result.cost_usd.map_or_else(|| "—".into(), usd),
                format!("{:.1}s", r.wall_s),
                format!("<time>{}</time>", esc(r.written_utc.as_str())),
            ]
        })
        .collect();
    let _ = write!(
        body,
        "<p>{} rows shown, from seq {} to {} of {}.</p>",
        shown.len(),
        filter.from,
        next.saturating_sub(1),
        status.rows_total
    );
    body.push_str(&table(
        "rows",
        &[
            "Seq",
            "Trial",
            "Attempt",
            "Status",
            "Failure kind",
            "Flags",
            "Score",
            "Cost",
            "Wall",
            "Written",
        ],
        &rows,
    ));
    if next < status.rows_total {
        let _ = write!(
            body,
            "<p><a rel=\"next\" href=\"{base}/rows{}\">Next rows</a></p>",
            esc(&filter.query(next))
        );
    }
    respond(
        "Rows",
        &[(id.as_str(), Some(base.clone())), ("rows", None)],
        false,
        &viewer,
        &body,
    )
}

/// A row's flags in words: final, counted, excluded, duplicate, late.
pub(crate) fn flags(r: &Row) -> String {
    let mut f = Vec::new();
    if r.is_final {
        f.push("final");
    }
    if r.counted {
        f.push("counted");
    }
    if r.excluded {
        f.push("excluded");
    }
    if r.duplicate {
        f.push("duplicate");
    }
    if r.late {
        f.push("late");
    }
    if r.result.passed == Some(true) {
        f.push("passed");
    }
    f.join(" ")
}
