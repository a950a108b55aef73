use super::*;
use crate::http::HttpOptions;
use crate::http::test_server::{Answer, TestCa, serve, serve_tls};

fn client() -> HttpClient {
    HttpClient::new(&HttpOptions::default()).unwrap()
}

#[test]
fn urls_parse() {
    let u = health_url("http://10.0.0.2:8080/health?x=1").unwrap();
    assert_eq!(
        (u.host_str(), u.port_or_known_default(), u.path(), u.query()),
        (Some("10.0.0.2"), Some(8080), "/health", Some("x=1"))
    );
    assert_eq!(
        health_url("http://vm").unwrap().port_or_known_default(),
        Some(80)
    );
    assert_eq!(
        health_url("https://vm/").unwrap().port_or_known_default(),
        Some(443)
    );
    assert!(health_url("ftp://vm/").is_err());
    assert!(health_url("http://:80/").is_err());
    assert!(health_url("http://vm:notaport/").is_err());
    assert!(health_url("file:///etc/passwd").is_err());
}

#[tokio::test]
async fn probes_tell_healthy_from_not() {
    let http = client();
    let ok = serve(|_| Answer::Body(200, String::new())).await;
    let bad = serve(|_| Answer::Body(503, String::new())).await;
    let moved = serve(|_| Answer::Redirect(302, "/elsewhere".into())).await;
    let url =
        |s: &crate::http::test_server::Server| health_url(&format!("{}/health", s.url)).unwrap();
    let limit = Duration::from_secs(2);
    assert!(probe(&http, &url(&ok), limit).await);
    assert!(!probe(&http, &url(&bad), limit).await);
    assert!(
        !probe(&http, &url(&moved), limit).await,
        "a redirect is not health"
    );
    assert_eq!(moved.seen().len(), 1, "the redirect was not followed");
    let closed = health_url("http://127.0.0.1:1/").unwrap();
    assert!(!probe(&http, &closed, limit).await);
}

/// A guest behind https is probed through the worker's CA file, and without it the
/// certificate is not trusted.
#[tokio::test]
async fn https_health_urls_are_verified_against_the_configured_ca() {
    let ca = TestCa::new();
    let guest = serve_tls(&ca, |_| Answer::Body(200, String::new())).await;
    let url = health_url(&format!("{}/health", guest.url)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let trusting = HttpClient::new(&HttpOptions {
        ca_file: Some(ca.write_pem(dir.path())),
        ..HttpOptions::default()
    })
    .unwrap();
    assert!(probe(&trusting, &url, Duration::from_secs(5)).await);
    assert!(!probe(&client(), &url, Duration::from_secs(5)).await);
}

/// A guest that accepts but never answers fails the probe at its limit.
#[tokio::test]
async fn a_silent_guest_fails_the_probe_at_its_limit() {
    let guest = serve(|_| Answer::Silent).await;
    let url = health_url(&guest.url).unwrap();
    let started = Instant::now();
    assert!(!probe(&client(), &url, Duration::from_millis(200)).await);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_guest_that_dies_is_reported_after_the_grace_only() {
    let server = serve(|_| Answer::Body(200, String::new())).await;
    let url = health_url(&format!("{}/health", server.url)).unwrap();
    let grace = Duration::from_millis(300);
    let mut watcher = tokio::spawn(watch(client(), url, Duration::from_millis(20), grace));
    // Healthy for a while: never reported (bounded: the watcher must still be running).
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut watcher)
            .await
            .is_err(),
        "a healthy guest is reported"
    );
    drop(server);
    let started = Instant::now();
    tokio::time::timeout(Duration::from_secs(10), watcher)
        .await
        .expect("reported after the grace")
        .unwrap();
    assert!(started.elapsed() >= grace, "not before the grace");
}
