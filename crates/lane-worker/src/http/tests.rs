use super::test_server::{Answer, TestCa, serve, serve_tls};
use super::*;

fn client(options: HttpOptions) -> HttpClient {
    HttpClient::new(&options).unwrap()
}

fn url(base: &str, path: &str) -> Url {
    parse_url(&format!("{base}{path}")).unwrap()
}

#[test]
fn only_http_and_https_urls_with_a_host_are_accepted() {
    assert!(parse_url("http://h:8080/x").is_ok());
    assert!(parse_url("https://h/").is_ok());
    for bad in [
        "ftp://h/",
        "file:///etc/passwd",
        "http://:80/",
        "h:80",
        "unix:/tmp/s",
    ] {
        assert!(parse_url(bad).is_err(), "{bad}");
    }
    let u = parse_url("https://user:pw@h:8443/a/b?k=v#f").unwrap();
    assert_eq!(
        shown(&u),
        "https://h:8443/a/b",
        "no credentials or query in messages"
    );
}

#[test]
fn a_missing_or_empty_ca_file_stops_the_client_at_build() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.pem");
    let err = HttpClient::new(&HttpOptions {
        ca_file: Some(missing.clone()),
        ..HttpOptions::default()
    })
    .unwrap_err();
    assert!(
        matches!(&err, HttpError::CaRead { path, .. } if path == &missing),
        "{err}"
    );
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let err = HttpClient::new(&HttpOptions {
        ca_file: Some(junk.clone()),
        ..HttpOptions::default()
    })
    .unwrap_err();
    assert!(
        matches!(&err, HttpError::CaParse { path, .. } if path == &junk),
        "{err}"
    );
}

#[tokio::test]
async fn chunked_bodies_are_read_whole() {
    let server = serve(|_| Answer::Chunked(200, vec!["{\"a\":".into(), " 1}".into()])).await;
    let reply = client(HttpOptions::default())
        .send(Method::GET, url(&server.url, "/x"), None)
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, b"{\"a\": 1}");
}

/// The cap holds whether the body announces its length or streams in chunks.
#[tokio::test]
async fn bodies_over_the_cap_are_refused() {
    let http = client(HttpOptions {
        max_body: 1000,
        ..HttpOptions::default()
    });
    let announced = serve(|_| Answer::Body(200, "x".repeat(1001))).await;
    let streamed = serve(|_| Answer::Chunked(200, vec!["y".repeat(600); 2])).await;
    let fits = serve(|_| Answer::Body(200, "z".repeat(1000))).await;
    for server in [&announced, &streamed] {
        let err = http
            .send(Method::GET, url(&server.url, "/"), None)
            .await
            .unwrap_err();
        assert!(matches!(err, HttpError::TooLarge { limit: 1000 }), "{err}");
    }
    let reply = http
        .send(Method::GET, url(&fits.url, "/"), None)
        .await
        .unwrap();
    assert_eq!(reply.body.len(), 1000);
}

#[tokio::test]
async fn redirects_are_returned_not_followed() {
    let target = serve(|_| Answer::Body(200, "{}".into())).await;
    let to = format!("{}/moved", target.url);
    let server = serve(move |_| Answer::Redirect(307, to.clone())).await;
    let reply = client(HttpOptions::default())
        .send(
            Method::POST,
            url(&server.url, "/"),
            Some(&serde_json::json!({})),
        )
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::TEMPORARY_REDIRECT);
    assert_eq!(reply.location, Some(format!("{}/moved", target.url)));
    assert!(target.seen().is_empty(), "the redirect was followed");
}

#[tokio::test]
async fn a_silent_server_hits_the_request_timeout() {
    let server = serve(|_| Answer::Silent).await;
    let http = client(HttpOptions {
        request_timeout: Duration::from_millis(200),
        ..HttpOptions::default()
    });
    let started = std::time::Instant::now();
    let err = http
        .send(Method::GET, url(&server.url, "/"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, HttpError::Timeout { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(err.to_string(), "no answer within 200 ms");
}

#[tokio::test]
async fn https_trusts_the_configured_ca_only() {
    let ca = TestCa::new();
    let server = serve_tls(&ca, |_| Answer::Body(200, "{}".into())).await;
    let dir = tempfile::tempdir().unwrap();
    let trusting = client(HttpOptions {
        ca_file: Some(ca.write_pem(dir.path())),
        ..HttpOptions::default()
    });
    let reply = trusting
        .send(Method::GET, url(&server.url, "/"), None)
        .await
        .unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    // No CA file: nothing is trusted, and the error says it is the certificate.
    let err = client(HttpOptions::default())
        .send(Method::GET, url(&server.url, "/"), None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, HttpError::Connect(t) if t.contains("certificate")),
        "{err}"
    );
    // Another CA's file does not help either.
    let other = TestCa::new();
    let other_dir = tempfile::tempdir().unwrap();
    let err = client(HttpOptions {
        ca_file: Some(other.write_pem(other_dir.path())),
        ..HttpOptions::default()
    })
    .send(Method::GET, url(&server.url, "/"), None)
    .await
    .unwrap_err();
    assert!(err.to_string().contains("certificate"), "{err}");
}
