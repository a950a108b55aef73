//! The worker's HTTP client, for an arm's task API and the guest's health URL: reqwest over
//! rustls (HTTP/1.1, chunked bodies and all).
//!
//! - Only the CA file the worker's operator gives is trusted: there are no built-in or system
//!   roots, so an `https` URL works only with [`HttpOptions::ca_file`]. The URLs come from the
//!   campaign, the trust from the host.
//! - Every call is bounded: a connect timeout, a request timeout (which covers the body), and
//!   a cap on the bytes of a response body, checked while it streams in.
//! - Redirects are not followed: a 3xx comes back as it is, so a task API cannot move the
//!   lane's requests (and the task's payload) to another URL. Proxy variables from the
//!   environment are ignored for the same reason.
//! - No connection is reused: guest endpoints are often minimal servers that close after
//!   every answer, and a stale pooled connection would read as a dead guest.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde_json::Value;

/// Default time to open a connection (TCP and TLS).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time for a whole request, the response body included.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default cap on a response body.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

/// How the worker talks HTTP. Worker-side only: a campaign names URLs, never local files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpOptions {
    /// A PEM file of the CA certificates trusted for `https` task APIs and health URLs. None:
    /// no `https` server can be verified, so every `https` request fails.
    pub ca_file: Option<PathBuf>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Longest response body read, in bytes; a longer one is an error.
    pub max_body: usize,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            ca_file: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            max_body: DEFAULT_MAX_BODY,
        }
    }
}

/// Why an HTTP call, or building the client, failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot read the CA file {path}: {source}")]
    CaRead {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the CA file {path} holds no usable PEM certificate{detail}")]
    CaParse { path: PathBuf, detail: String },
    #[error("cannot build the http client: {0}")]
    Build(String),
    #[error("url {url:?} is not usable: {reason}")]
    Url { url: String, reason: String },
    #[error("no answer within {} ms", .after.as_millis())]
    Timeout { after: Duration },
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("request failed: {0}")]
    Request(String),
    #[error("the answer's body exceeds {limit} bytes")]
    TooLarge { limit: usize },
}

/// One answer: its status, where a redirect pointed, and its body (at most the cap).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    /// The `Location` header of a 3xx, which is not followed.
    pub location: Option<String>,
    pub body: Vec<u8>,
}

/// Parses an `http://` or `https://` URL with a host; anything else is refused with a reason.
pub fn parse_url(url: &str) -> Result<Url, HttpError> {
    let bad = |reason: &str| HttpError::Url {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let parsed = Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    match parsed.scheme() {
        "http" | "https" => {}
        _ => return Err(bad("only http:// and https:// are supported")),
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("it has no host"));
    }
    Ok(parsed)
}

/// A URL as it may appear in a message: scheme, host, port and path, without credentials,
/// query or fragment.
pub fn shown(url: &Url) -> String {
    format!("{}{}", url.origin().ascii_serialization(), url.path())
}

/// The client. Cheap to clone (the connection machinery is shared).
#[derive(Debug, Clone)]
pub struct HttpClient {
    client: reqwest::Client,
    connect_timeout: Duration,
    request_timeout: Duration,
    max_body: usize,
}

impl HttpClient {
    /// Builds the client, reading the CA file now so a bad one stops the worker at start.
    pub fn new(options: &HttpOptions) -> Result<Self, HttpError> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(options.connect_timeout)
            .timeout(options.request_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .pool_max_idle_per_host(0)
            .tls_built_in_root_certs(false);
        if let Some(path) = &options.ca_file {
            let pem = std::fs::read(path).map_err(|source| HttpError::CaRead {
                path: path.clone(),
                source,
            })?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| HttpError::CaParse {
                    path: path.clone(),
                    detail: format!(": {}", chain(&e)),
                })?;
            if certs.is_empty() {
                return Err(HttpError::CaParse {
                    path: path.clone(),
                    detail: String::new(),
                });
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder.build().map_err(|e| HttpError::Build(chain(&e)))?;
        Ok(Self {
            client,
            connect_timeout: options.connect_timeout,
            request_timeout: options.request_timeout,
            max_body: options.max_body,
        })
    }

    /// Sends one request, with `body` as JSON when given, and reads the whole answer within
    /// the request timeout and the body cap.
    pub async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<&Value>,
    ) -> Result<Reply, HttpError> {
        let mut request = self.client.request(method, url);
        if let Some(body) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
        }
        let mut response = request.send().await.map_err(|e| self.failed(e))?;
        if response
            .content_length()
            .is_some_and(|n| n > self.max_body as u64)
        {
            return Err(HttpError::TooLarge {
                limit: self.max_body,
            });
        }
        let status = response.status();
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned());
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.failed(e))? {
            if body.len() + chunk.len() > self.max_body {
                return Err(HttpError::TooLarge {
                    limit: self.max_body,
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Reply {
            status,
            location,
            body,
        })
    }

    /// The status of a `GET` to `url` within `limit` (or the request timeout, if shorter);
    /// the body is not read.
    pub async fn status(&self, url: Url, limit: Duration) -> Result<StatusCode, HttpError> {
        let limit = limit.min(self.request_timeout);
        let response = self
            .client
            .get(url)
            .timeout(limit)
            .send()
            .await
            .map_err(|e| self.classify(e, limit))?;
        Ok(response.status())
    }

    fn failed(&self, e: reqwest::Error) -> HttpError {
        self.classify(e, self.request_timeout)
    }

    /// `limit`: the request timeout in force for this call.
    fn classify(&self, e: reqwest::Error, limit: Duration) -> HttpError {
        let e = e.without_url();
        match (e.is_connect(), e.is_timeout()) {
            (true, true) => HttpError::Connect(format!(
                "no connection within {} ms",
                self.connect_timeout.as_millis()
            )),
            (true, false) => HttpError::Connect(chain(&e)),
            (false, true) => HttpError::Timeout { after: limit },
            (false, false) => HttpError::Request(chain(&e)),
        }
    }
}

/// An error with its sources, so a TLS failure says which (e.g. `invalid peer certificate:
/// UnknownIssuer`) instead of only "error sending request".
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

#[cfg(test)]
pub(crate) mod test_server;
#[cfg(test)]
mod tests;
