//! A campaign as its page shows it: the status, the skeleton of its schedule, the ledger
//! folded so far and the report. The page renders it once; the live stream keeps one per
//! viewer and refreshes it on each Watch event, reading only the rows since the last time.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lanes_common::proto as pb;
use lanes_common::utc::{format_rfc3339, parse_rfc3339};
use lanes_report::{Block, Report, Sections};

use super::api::{Api, Result, Skeleton};
use super::html::{duration_s, esc, table, url_part, usd};
use super::ledger::Ledger;
use super::{Dashboard, charts, grid};

pub(crate) struct CampaignView {
    pub(crate) id: String,
    pub(crate) status: pb::CampaignStatus,
    pub(crate) skeleton: Arc<Skeleton>,
    pub(crate) ledger: Ledger,
    pub(crate) report: Report,
    /// Trials final and rows when the report was last read, and when.
    report_at: (u64, u64, Instant),
    pub(crate) now_ms: i64,
    /// The live parts' HTML as of the last refresh (see [`LIVE_PARTS`]).
    pub(crate) parts: Vec<(&'static str, String)>,
}

/// A view is refreshed at most this often, however many pages and streams read it.
const FRESH: Duration = Duration::from_millis(250);
/// The report (which reads the whole ledger) is rebuilt at most this often while the
/// campaign runs; at once when it is over.
const REPORT_EVERY: Duration = Duration::from_secs(2);
/// Views kept at most, and how long an unread one is kept.
const VIEWS_KEPT: usize = 32;
const VIEW_IDLE: Duration = Duration::from_secs(600);

type Shared = Arc<tokio::sync::Mutex<Option<(CampaignView, Instant)>>>;

/// One view per campaign, shared by every page and live stream of it: the ledger is read
/// once, incrementally, whoever is watching.
#[derive(Default)]
pub(crate) struct Views {
    slots: Mutex<HashMap<String, (Shared, Instant)>>,
}

impl Views {
    /// `f` of the campaign's view, refreshed first unless it is fresh.
    pub(crate) async fn with<T>(
        &self,
        d: &Dashboard,
        id: &str,
        f: impl FnOnce(&CampaignView) -> T,
    ) -> Result<T> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots.retain(|_, (_, used)| used.elapsed() < VIEW_IDLE);
            if slots.len() >= VIEWS_KEPT && !slots.contains_key(id) {
                let oldest = slots
                    .iter()
                    .min_by_key(|(_, (_, used))| *used)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    slots.remove(&k);
                }
            }
            let (slot, used) = slots
                .entry(id.to_owned())
                .or_insert_with(|| (Shared::default(), Instant::now()));
            *used = Instant::now();
            slot.clone()
        };
        // Shared reads are the dashboard's own, not the viewer who happened to trigger them.
        let api = d.internal_api();
        let mut guard = slot.lock().await;
        match guard.as_mut() {
            Some((_, at)) if at.elapsed() < FRESH => {}
            Some((view, at)) => {
                // Refreshed in place: a failure keeps the last good view for the others, and
                // `at` moves on so they do not all retry at once.
                let refreshed = tokio::time::timeout(READ_TIMEOUT, view.refresh(d, &api)).await;
                *at = Instant::now();
                match refreshed {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        if e.code == tonic::Code::NotFound {
                            *guard = None;
                        }
                        return Err(e);
                    }
                    Err(_) => return Err(timed_out()),
                }
            }
            None => {
                let loaded = tokio::time::timeout(READ_TIMEOUT, CampaignView::load(d, &api, id))
                    .await
                    .map_err(|_| timed_out())??;
                *guard = Some((loaded, Instant::now()));
            }
        }
        let (view, _) = guard.as_ref().expect("set above");
        Ok(f(view))
    }
}

/// How long a view's store reads may take before its readers are told the store is slow.
const READ_TIMEOUT: Duration = Duration::from_secs(15);

fn timed_out() -> super::api::ApiError {
    super::api::ApiError {
        code: tonic::Code::Unavailable,
        message: format!(
            "the store did not answer within {}s",
            READ_TIMEOUT.as_secs()
        ),
    }
}

/// The parts of the page that change, by element id, in page order.
pub(crate) const LIVE_PARTS: [&str; 7] = [
    "summary",
    "grid",
    "throughput",
    "results",
    "lanes",
    "gates",
    "audit",
];

impl CampaignView {
    pub(crate) async fn load(d: &Dashboard, api: &Api<'_>, id: &str) -> Result<Self> {
        let status = api.get(id).await?;
        let skeleton = d.skeleton(api, id, &status.spec_hash).await?;
        let mut ledger = Ledger::default();
        api.rows(id, 0, |r| {
            ledger.absorb(&r);
            true
        })
        .await?;
        let report = api.report(id).await?;
        let mut view = Self {
            id: id.to_owned(),
            report_at: (status.trials_final, ledger.next_seq, Instant::now()),
            status,
            skeleton,
            ledger,
            report,
            now_ms: d.now(),
            parts: Vec::new(),
        };
        view.parts = view.render();
        Ok(view)
    }

    /// Reads what changed: the status, new rows, and the report when trials became final.
    pub(crate) async fn refresh(&mut self, d: &Dashboard, api: &Api<'_>) -> Result<()> {
        let status = api.get(&self.id).await?;
        // The skeleton changes only with an amendment, which changes the spec hash.
        if status.spec_hash != self.status.spec_hash {
            self.skeleton = d.skeleton(api, &self.id, &status.spec_hash).await?;
        }
        self.status = status;
        let ledger = &mut self.ledger;
        api.rows(&self.id, ledger.next_seq, |r| {
            ledger.absorb(&r);
            true
        })
        .await?;
        let (finals, rows, at) = self.report_at;
        let changed = self.status.trials_final != finals || self.ledger.next_seq != rows;
        if changed && (self.over() || at.elapsed() >= REPORT_EVERY) {
            self.report = api.report(&self.id).await?;
            self.report_at = (
                self.status.trials_final,
                self.ledger.next_seq,
                Instant::now(),
            );
        }
        self.now_ms = d.now();
        self.parts = self.render();
        Ok(())
    }

    pub(crate) fn state(&self) -> &'static str {
        state_word(self.status.state)
    }

    fn running(&self) -> HashSet<String> {
        self.status
            .in_flight
            .iter()
            .filter_map(|f| f.token.as_ref().map(|t| t.trial_id.clone()))
            .collect()
    }

    /// Each live part's HTML, by element id: rendered once per refresh, for every viewer.
    fn render(&self) -> Vec<(&'static str, String)> {
        LIVE_PARTS
            .iter()
            .map(|&p| {
                let html = match p {
                    "summary" => self.summary(),
                    "gates" => self.gates(),
                    "lanes" => self.lanes(),
                    "grid" => grid::render(&self.skeleton, &self.ledger, &self.running()),
                    "throughput" => self.throughput(),
                    "results" => self.results(),
                    _ => self.audit(),
                };
                (p, html)
            })
            .collect()
    }

    fn summary(&self) -> String {
        let s = &self.status;
        let mut out = format!(
            "<dl class=\"facts\"><div><dt>State</dt><dd><span class=\"state s-{st}\" data-state=\"{st}\">{st}</span>{}</dd></div>",
            match stop_reason_word(s.stop_reason) {
                Some(r) => format!(" <small>({} by {r})</small>", stop_mode_word(s.stop_mode)),
                None => String::new(),
            },
            st = self.state(),
        );
        let _ = write!(
            out,
            "<div><dt>Trials final</dt><dd><b id=\"final-count\" data-final=\"{}\">{}</b> of {}<br>{}</dd></div>\
             <div><dt>Phase 1</dt><dd>{}</dd></div><div><dt>Blocks</dt><dd>{}</dd></div>\
             <div><dt>Counted</dt><dd>{}</dd></div><div><dt>Excluded</dt><dd>{}</dd></div>\
             <div><dt>Not started</dt><dd>{}</dd></div><div><dt>Rows</dt><dd>{}</dd></div>\
             <div><dt>Spend</dt><dd>{}{}</dd></div>",
            s.trials_final,
            s.trials_final,
            s.trials_total,
            charts::progress(s.trials_final, s.trials_total, ""),
            charts::progress(s.phase1_final, s.phase1_total, "final"),
            charts::progress(s.blocks_complete, s.blocks_total, "complete"),
            s.trials_counted,
            s.trials_excluded,
            s.trials_not_started,
            s.rows_total,
            usd(s.spend_usd),
            if s.reserved_usd > 0.0 {
                format!(" <small>(+{} reserved)</small>", usd(s.reserved_usd))
            } else {
                String::new()
            },
        );
        let _ = write!(
            out,
            "<div><dt>Started</dt><dd><time>{}</time></dd></div><div><dt>{}</dt><dd>{}</dd></div></dl>",
            esc(&s.created_utc),
            if self.over() { "Ended" } else { "Last row" },
            self.ledger.last_row_ms.map_or_else(
                || "—".to_owned(),
                |ms| format!("<time>{}</time>", format_rfc3339(ms))
            )
        );
        out
    }

    /// Stopped or done.
    pub(crate) fn over(&self) -> bool {
        matches!(
            pb::CampaignState::try_from(self.status.state),
            Ok(pb::CampaignState::Stopped | pb::CampaignState::Done)
        )
    }

    fn gates(&self) -> String {
        if self.status.gates.is_empty() {
            return "<p class=\"quiet\">No claim gate is holding work back.</p>".into();
        }
        let rows: Vec<Vec<String>> = self
            .status
            .gates
            .iter()
            .map(|g| {
                vec![
                    format!("<b>{}</b>", esc(&g.gate)),
                    esc(&g.detail),
                    g.until_epoch_ms.map_or_else(
                        || "—".into(),
                        |ms| {
                            format!(
                                "<time>{}</time> (in {})",
                                format_rfc3339(ms),
                                duration_s((ms - self.now_ms) as f64 / 1000.0)
                            )
                        },
                    ),
                ]
            })
            .collect();
        table("gates", &["Gate", "Why", "Lifts at"], &rows)
    }

    fn lanes(&self) -> String {
        if self.status.in_flight.is_empty() {
            return "<p class=\"quiet\">No lane is running a trial of this campaign.</p>".into();
        }
        let rows: Vec<Vec<String>> = self
            .status
            .in_flight
            .iter()
            .map(|f| {
                let (trial, attempt) = f
                    .token
                    .as_ref()
                    .map_or((String::new(), 0), |t| (t.trial_id.clone(), t.attempt));
                let left = f.deadline_in_ms as f64 / 1000.0;
                vec![
                    esc(&f.lane),
                    esc(&f.host),
                    format!(
                        "<a href=\"/campaigns/{}/trials/{}\">{}</a>",
                        url_part(&self.id),
                        url_part(&trial),
                        esc(&trial)
                    ),
                    attempt.to_string(),
                    phase_word(f.phase).to_owned(),
                    if left < 0.0 {
                        format!(
                            "<span class=\"warn\">expired {} ago</span>",
                            duration_s(-left)
                        )
                    } else {
                        duration_s(left)
                    },
                ]
            })
            .collect();
        table(
            "lanes",
            &["Lane", "Host", "Trial", "Attempt", "Phase", "Lease left"],
            &rows,
        )
    }

    fn throughput(&self) -> String {
        let start = parse_rfc3339(&self.status.created_utc).unwrap_or(self.now_ms);
        let end = if self.over() {
            self.ledger.last_row_ms.unwrap_or(self.now_ms)
        } else {
            self.now_ms
        };
        charts::throughput(&self.ledger.finals_ms, start, end.max(start + 1000))
    }

    fn results(&self) -> String {
        let r = &self.report;
        let mut out = String::new();
        if let Some(origin) = &r.smoke_of {
            let _ = write!(
                out,
                "<p class=\"warn\">Smoke run derived from campaign {}: its numbers check a setup, not a result.</p>",
                esc(origin.campaign.as_ref())
            );
        }
        out.push_str(
            "<h3>Pass rate per arm <small>counted trials, 95% Wilson interval</small></h3>",
        );
        out.push_str(&charts::arm_intervals(&r.arms));
        if !r.paired.is_empty() {
            out.push_str("<h3>Paired differences <small>a − b over trials both arms ran, 95% interval</small></h3>");
            out.push_str(&charts::paired_differences(&r.paired));
        }
        out
    }

    /// The report itself (`lanes report`'s document: the completeness audit, per arm with
    /// cost per arm and per pass, paired comparisons, operator retries, warnings) as tables,
    /// so the page and every other format carry the same cells.
    fn audit(&self) -> String {
        let doc = self.report.document(Sections::Full);
        let mut out = String::from("<dl class=\"facts\">");
        for (label, value) in &doc.facts {
            let _ = write!(
                out,
                "<div><dt>{}</dt><dd>{}</dd></div>",
                esc(label),
                esc(value)
            );
        }
        out.push_str("</dl>");
        for section in &doc.sections {
            let _ = write!(out, "<h3>{}</h3>", esc(&section.title));
            for block in &section.blocks {
                match block {
                    Block::Line(l) => {
                        let _ = write!(out, "<p>{}</p>", esc(l));
                    }
                    Block::Note(l) => {
                        let _ = write!(out, "<p class=\"quiet\">{}</p>", esc(l));
                    }
                    Block::Warnings(ws) => {
                        out.push_str("<ul class=\"warnings\">");
                        for w in ws {
                            let _ = write!(out, "<li>{}</li>", esc(w));
                        }
                        out.push_str("</ul>");
                    }
                    Block::Table(t) => {
                        if let Some(title) = &t.title {
                            let _ = write!(out, "<p><b>{}</b></p>", esc(title));
                        }
                        if t.rows.is_empty() {
                            out.push_str("<p class=\"quiet\">none</p>");
                            continue;
                        }
                        let head: Vec<String> = t.headers.iter().map(|h| esc(h)).collect();
                        let head: Vec<&str> = head.iter().map(String::as_str).collect();
                        let rows: Vec<Vec<String>> = t
                            .rows
                            .iter()
                            .map(|r| r.iter().map(|c| esc(c)).collect())
                            .collect();
                        out.push_str(&table("report", &head, &rows));
                    }
                }
            }
        }
        out
    }
}

pub(crate) fn state_word(state: i32) -> &'static str {
    match pb::CampaignState::try_from(state) {
        Ok(pb::CampaignState::Running) => "running",
        Ok(pb::CampaignState::Stopping) => "stopping",
        Ok(pb::CampaignState::Stopped) => "stopped",
        Ok(pb::CampaignState::Done) => "done",
        _ => "unknown",
    }
}

fn stop_reason_word(reason: i32) -> Option<&'static str> {
    match pb::StopReason::try_from(reason) {
        Ok(pb::StopReason::User) => Some("a user"),
        Ok(pb::StopReason::Time) => Some("the cutoff time"),
        Ok(pb::StopReason::Budget) => Some("the budget"),
        Ok(pb::StopReason::Auth) => Some("authentication failures"),
        Ok(pb::StopReason::Quota) => Some("a quota"),
        _ => None,
    }
}

fn stop_mode_word(mode: i32) -> &'static str {
    match pb::StopMode::try_from(mode) {
        Ok(pb::StopMode::Cancel) => "cancelled",
        _ => "drained",
    }
}

pub(crate) fn phase_word(phase: i32) -> &'static str {
    match pb::Phase::try_from(phase) {
        Ok(pb::Phase::Assigned) => "assigned",
        Ok(pb::Phase::Admit) => "admit",
        Ok(pb::Phase::Boot) => "boot",
        Ok(pb::Phase::Reset) => "reset",
        Ok(pb::Phase::Gate) => "gate",
        Ok(pb::Phase::Agent) => "agent",
        Ok(pb::Phase::Evaluate) => "evaluate",
        Ok(pb::Phase::Publish) => "publish",
        _ => "?",
    }
}
