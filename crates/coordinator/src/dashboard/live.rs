//! `/campaigns/<id>/live`: Server-Sent Events that keep a campaign page current. Each viewer's
//! stream follows the campaign's Watch stream; on an event (a few at a time) it refreshes its
//! view (status, the rows since last time, the report when trials became final), renders the
//! live parts, and sends those whose HTML changed, as one `parts` event of `{id: html}`. The
//! page's script swaps them in. When the campaign is over it sends `end` and closes.

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

use super::api::Api;
use super::pages::campaign_id;
use super::view::CampaignView;
use super::{Dashboard, error_page};

/// Events are taken together for this long before one refresh.
const SETTLE: Duration = Duration::from_millis(250);
/// A refresh this often even without events, so lease countdowns move.
const TICK: Duration = Duration::from_secs(5);

pub(crate) async fn stream(
    State(d): State<Arc<Dashboard>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Response {
    let viewer = match d.viewer(&headers, &uri, false).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let id = match campaign_id(&id) {
        Ok(id) => id,
        Err(r) => return r,
    };
    let key = viewer.stream_key(&headers);
    let watch = match d.api(&viewer, &headers).watch(id.as_str()).await {
        Ok(w) => w,
        Err(e) => return error_page(&e),
    };
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(8);
    tokio::spawn(follow(d, key, id.to_string(), watch, tx));
    Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn follow(
    d: Arc<Dashboard>,
    key: String,
    id: String,
    mut watch: <crate::service::campaign::CampaignSvc as lanes_common::proto::campaign_service_server::CampaignService>::WatchStream,
    tx: mpsc::Sender<Result<Event, Infallible>>,
) {
    let api = Api {
        svc: &d.svc,
        stream_key: key,
    };
    let mut view = match CampaignView::load(&d, &api, &id).await {
        Ok(v) => v,
        Err(e) => {
            let _ = tx
                .send(Ok(Event::default().event("problem").data(e.message)))
                .await;
            return;
        }
    };
    let mut sent: HashMap<&'static str, String> = HashMap::new();
    loop {
        let parts = view.parts();
        let mut changed: HashMap<&str, &str> = HashMap::new();
        for (part, html) in &parts {
            if sent.get(part) != Some(html) {
                changed.insert(part, html);
            }
        }
        if !changed.is_empty() {
            let data = serde_json::json!({ "state": view.state(), "parts": changed }).to_string();
            if tx
                .send(Ok(Event::default().event("parts").data(data)))
                .await
                .is_err()
            {
                return;
            }
            sent = parts.into_iter().collect();
        }
        if view.over() {
            let _ = tx
                .send(Ok(Event::default().event("end").data(view.state())))
                .await;
            return;
        }
        // The next event (or the tick), then whatever else arrives while things settle.
        tokio::select! {
            e = watch.next() => match e {
                Some(Ok(_)) => {}
                Some(Err(s)) => {
                    let _ = tx.send(Ok(Event::default().event("problem").data(s.message()))).await;
                    return;
                }
                None => return,
            },
            _ = tokio::time::sleep(TICK) => {}
            _ = tx.closed() => return,
        }
        let settle = tokio::time::sleep(SETTLE);
        tokio::pin!(settle);
        loop {
            tokio::select! {
                _ = &mut settle => break,
                e = watch.next() => if !matches!(e, Some(Ok(_))) { break },
            }
        }
        if let Err(e) = view.refresh(&d, &api).await {
            let _ = tx
                .send(Ok(Event::default().event("problem").data(e.message)))
                .await;
            return;
        }
    }
}
