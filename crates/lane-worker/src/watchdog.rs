//! The guest-health watchdog: while the agent runs, poll the health URL that boot or reset
//! gave, and report the guest lost once it has been unreachable for longer than a grace
//! window. A dead guest is infra (`guest_lost`), never a score.
//!
//! A `GET` through the worker's [`HttpClient`] (`http://`, or `https://` trusted through the
//! worker's CA file). A 2xx status is healthy; anything else (a redirect included: it is not
//! followed), a refused connection, a TLS failure or a timeout is not.

use std::time::Duration;

use reqwest::Url;
use tokio::time::Instant;

use crate::http::{HttpClient, HttpError, parse_url};

/// Shortest time one probe may take, however often the URL is polled.
const MIN_PROBE: Duration = Duration::from_millis(200);

/// Parses a guest health URL: `http://` or `https://` with a host.
pub fn health_url(url: &str) -> Result<Url, HttpError> {
    parse_url(url)
}

/// One probe: true when the endpoint answers 2xx within `limit`.
pub async fn probe(http: &HttpClient, url: &Url, limit: Duration) -> bool {
    matches!(http.status(url.clone(), limit).await, Ok(s) if s.is_success())
}

/// Polls `url` every `every` until it has failed continuously for longer than `grace`, then
/// returns. Never returns while the guest keeps answering (the caller aborts the task).
pub async fn watch(http: HttpClient, url: Url, every: Duration, grace: Duration) {
    let mut failing_since: Option<Instant> = None;
    loop {
        if probe(&http, &url, every.max(MIN_PROBE)).await {
            failing_since = None;
        } else {
            let since = *failing_since.get_or_insert_with(Instant::now);
            if since.elapsed() > grace {
                return;
            }
        }
        tokio::time::sleep(every).await;
    }
}

#[cfg(test)]
mod tests;
