//! The guest-health watchdog: while the agent runs, poll the health URL that boot or reset
//! gave, and report the guest lost once it has been unreachable for longer than a grace
//! window. A dead guest is infra (`guest_lost`), never a score.
//!
//! Plain HTTP/1.1 `GET` over a TCP connection: health endpoints are local, and this keeps the
//! worker free of an HTTP client stack. A 2xx status is healthy; anything else, a refused
//! connection or a timeout is not.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

/// A parsed `http://host:port/path` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthUrl {
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl HealthUrl {
    /// Parses an `http://` URL; anything else (https, no host) is refused with a reason.
    pub fn parse(url: &str) -> Result<Self, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("health url {url:?} must start with http://"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (
                h,
                p.parse::<u16>()
                    .map_err(|_| format!("health url {url:?} has a bad port"))?,
            ),
            None => (authority, 80),
        };
        if host.is_empty() {
            return Err(format!("health url {url:?} has no host"));
        }
        Ok(Self {
            host: host.to_owned(),
            port,
            path: path.to_owned(),
        })
    }
}

/// One probe: true when the endpoint answers 2xx within `limit`.
pub async fn probe(url: &HealthUrl, limit: Duration) -> bool {
    let attempt = async {
        let mut s = TcpStream::connect((url.host.as_str(), url.port))
            .await
            .ok()?;
        let req = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            url.path, url.host
        );
        s.write_all(req.as_bytes()).await.ok()?;
        let mut head = [0u8; 32];
        let n = s.read(&mut head).await.ok()?;
        let line = std::str::from_utf8(&head[..n]).ok()?;
        let code: u16 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some((200..300).contains(&code))
    };
    matches!(timeout(limit, attempt).await, Ok(Some(true)))
}

/// Polls `url` every `every` until it has failed continuously for longer than `grace`, then
/// returns. Never returns while the guest keeps answering (the caller aborts the task).
pub async fn watch(url: HealthUrl, every: Duration, grace: Duration) {
    let mut failing_since: Option<Instant> = None;
    loop {
        if probe(&url, every.max(Duration::from_millis(200))).await {
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
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[test]
    fn urls_parse() {
        let u = HealthUrl::parse("http://10.0.0.2:8080/health?x=1").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("10.0.0.2", 8080, "/health?x=1")
        );
        assert_eq!(HealthUrl::parse("http://vm").unwrap().port, 80);
        assert!(HealthUrl::parse("https://vm/").is_err());
        assert!(HealthUrl::parse("http://:80/").is_err());
        assert!(HealthUrl::parse("http://vm:notaport/").is_err());
    }

    /// A tiny server answering `code` to every request until dropped.
    async fn server(code: u16) -> (HealthUrl, tokio::task::JoinHandle<()>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let mut buf = [0u8; 512];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        (
            HealthUrl::parse(&format!("http://127.0.0.1:{port}/health")).unwrap(),
            task,
        )
    }

    #[tokio::test]
    async fn probes_tell_healthy_from_not() {
        let (ok, t1) = server(200).await;
        let (bad, t2) = server(503).await;
        assert!(probe(&ok, Duration::from_secs(2)).await);
        assert!(!probe(&bad, Duration::from_secs(2)).await);
        t1.abort();
        t2.abort();
        let closed = HealthUrl::parse("http://127.0.0.1:1/").unwrap();
        assert!(!probe(&closed, Duration::from_secs(2)).await);
    }

    #[tokio::test]
    async fn a_guest_that_dies_is_reported_after_the_grace_only() {
        let (url, server) = server(200).await;
        let grace = Duration::from_millis(300);
        let mut watcher = tokio::spawn(watch(url, Duration::from_millis(20), grace));
        // Healthy for a while: never reported (bounded: the watcher must still be running).
        assert!(
            tokio::time::timeout(Duration::from_millis(500), &mut watcher)
                .await
                .is_err(),
            "a healthy guest is reported"
        );
        server.abort();
        let _ = server.await;
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(10), watcher)
            .await
            .expect("reported after the grace")
            .unwrap();
        assert!(started.elapsed() >= grace, "not before the grace");
    }
}
