//! `/campaigns/<id>/live`: Server-Sent Events that keep a campaign page current. Each stream
//! follows the campaign's Watch stream; on an event (a few at a time), or every few seconds so
//! lease countdowns move, it reads the campaign's shared view (refreshed at most every 250 ms
//! for all viewers together), renders the live parts, and sends those whose HTML changed, as
//! one `parts` event of `{id: html}`. The page's script swaps them in. When the campaign is
//! over it sends `end`; when the viewer's session ends, `expired`; on a store error,
//! `problem`, and the browser reconnects by itself.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Uri};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;

use lanes_common::proto::campaign_service_server::CampaignService;

use super::Dashboard;
use super::access::Viewer;
use super::pages::enter;
use crate::service::campaign::CampaignSvc;

/// Events are taken together for this long before one update.
const SETTLE: Duration = Duration::from_millis(250);
/// An update this often even without events, so lease countdowns move.
const TICK: Duration = Duration::from_secs(5);
/// How long the browser waits before reconnecting after the stream ends on a problem.
const RETRY: Duration = Duration::from_secs(3);

type Watch = <CampaignSvc as CampaignService>::WatchStream;
type Tx = mpsc::Sender<Result<Event, Infallible>>;

pub(crate) async fn stream(
    State(d): State<Arc<Dashboard>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let (viewer, id) = match enter(&d, &headers, &uri, &id, false).await {
        Ok(entered) => entered,
        Err(r) => return r,
    };
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(8);
    match d.api(&viewer).watch(id.as_str()).await {
        Ok(watch) => {
            tokio::spawn(follow(d, viewer, headers, id.to_string(), watch, tx));
        }
        // Said as an event, not an error page, so the browser keeps its stream and retries
        // (a store outage) or stops (a campaign that is gone).
        Err(e) => {
            let event = if e.code == tonic::Code::NotFound {
                "end"
            } else {
                "problem"
            };
            let _ = tx.try_send(Ok(Event::default()
                .event(event)
                .data(e.message)
                .retry(RETRY)));
        }
    }
    Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn send(tx: &Tx, event: &str, data: &str) -> bool {
    let e = Event::default().event(event).data(data).retry(RETRY);
    tx.send(Ok(e)).await.is_ok()
}

async fn follow(
    d: Arc<Dashboard>,
    viewer: Viewer,
    headers: HeaderMap,
    id: String,
    mut watch: Watch,
    tx: Tx,
) {
    let mut sent: HashMap<&'static str, String> = HashMap::new();
    loop {
        // The session may have ended (logout, expiry, its token removed) since the last time.
        if !matches!(viewer, Viewer::Open | Viewer::Bearer { .. }) {
            let still = match d.access().await {
                Ok(a) => a.viewer(&headers, d.now()).is_some(),
                Err(_) => true,
            };
            if !still {
                send(&tx, "expired", "log in again").await;
                return;
            }
        }
        // A tab closed while the store is slow ends here, not when the store answers.
        let read = tokio::select! {
            r = d.views.with(&d, &id, |v| (v.parts.clone(), v.state(), v.over())) => r,
            _ = tx.closed() => return,
        };
        let (parts, state, over) = match read {
            Ok(r) => r,
            Err(e) => {
                send(&tx, "problem", &e.message).await;
                return;
            }
        };
        let changed: HashMap<&str, &str> = parts
            .iter()
            .filter(|(part, html)| sent.get(part) != Some(html))
            .map(|(part, html)| (*part, html.as_str()))
            .collect();
        if !changed.is_empty() {
            let data = serde_json::json!({ "state": state, "parts": changed }).to_string();
            if !send(&tx, "parts", &data).await {
                return;
            }
            sent = parts.into_iter().collect();
        }
        if over {
            send(&tx, "end", state).await;
            return;
        }
        // The next event (or the tick), then whatever else arrives while things settle.
        tokio::select! {
            e = watch.next() => match e {
                Some(Ok(_)) => {}
                Some(Err(s)) => {
                    send(&tx, "problem", s.message()).await;
                    return;
                }
                None => {
                    send(&tx, "problem", "the event stream ended").await;
                    return;
                }
            },
            _ = tokio::time::sleep(TICK) => {}
            _ = tx.closed() => return,
        }
        let settle = tokio::time::sleep(SETTLE);
        tokio::pin!(settle);
        loop {
            tokio::select! {
                _ = &mut settle => break,
                // An error or the end shows at the next wait above.
                e = watch.next() => if !matches!(e, Some(Ok(_))) { break },
            }
        }
    }
}
