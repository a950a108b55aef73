//! The artifact store against a real S3-compatible server (moto, on a free loopback port)
//! and a local mount: upload, the manifest's digests, reading back, deleting, and how each
//! failure is sorted (a wrong bucket is a refusal, a stopped server is worth waiting for).

use std::path::Path;
use std::time::Duration;

use lanes_artifacts::{ArtifactStore, MANIFEST, Manifest, StoreError, StoreOptions};
use lanes_common::ids::{AttemptTag, CampaignId, Token, TrialId};
use lanes_tests::s3_server::S3Server;
use sha2::{Digest, Sha256};

fn tag(campaign: &str, trial: &str, attempt: u32) -> AttemptTag {
    AttemptTag::new(
        CampaignId::new(campaign).unwrap(),
        Token {
            trial_id: TrialId::new(trial).unwrap(),
            attempt,
        },
    )
}

fn options(s3: &S3Server) -> StoreOptions {
    StoreOptions {
        settings: s3.env(),
        ..StoreOptions::default()
    }
}

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An attempt folder with a small file, a nested one and one large enough to go in parts.
fn attempt_folder(dir: &Path, large: usize) -> Vec<(String, Vec<u8>)> {
    let files = vec![
        ("outcome.json".to_owned(), br#"{"score":1}"#.to_vec()),
        ("driver.stderr".to_owned(), b"line one\nline two\n".to_vec()),
        (
            "container/agent/log.txt".to_owned(),
            b"agent said hi".to_vec(),
        ),
        (
            "container/big.bin".to_owned(),
            (0..large).map(|i| (i * 7 % 251) as u8).collect(),
        ),
    ];
    for (rel, bytes) in &files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    // The worker's own temporary names are never uploaded.
    std::fs::write(dir.join("outcome.json.pending"), b"{").unwrap();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_goes_up_whole_with_its_digests_and_comes_back_and_is_deleted() {
    let s3 = S3Server::start();
    let store = ArtifactStore::open(&s3.url("runs/2026"), options(&s3)).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // 20 MiB: three parts of 8 MiB.
    let files = attempt_folder(tmp.path(), 20 << 20);
    let t = tag("camp-1", "t1.r0.a", 2);

    let up = store.upload_attempt(tmp.path(), &t).await.unwrap();
    assert!(up.skipped.is_empty(), "{:?}", up.skipped);
    let base = "runs/2026/camp-1/t1.r0.a/a2";
    assert_eq!(up.uris[0], format!("s3://lanes-test/{base}/{MANIFEST}"));
    let mut want_uris: Vec<String> = files
        .iter()
        .map(|(rel, _)| format!("s3://lanes-test/{base}/{rel}"))
        .collect();
    want_uris.sort();
    assert_eq!(up.uris[1..], want_uris[..]);

    // The manifest in the store names every file with its size and digest, and each object
    // (read over plain HTTP, not through the store's client) has those bytes.
    let manifest: Manifest = serde_json::from_slice(
        &s3.object(&format!("{base}/{MANIFEST}"))
            .expect("a manifest"),
    )
    .unwrap();
    assert_eq!(manifest, up.manifest);
    assert_eq!(manifest.files.len(), files.len());
    for (rel, bytes) in &files {
        let f = manifest
            .file(rel)
            .unwrap_or_else(|| panic!("{rel} in the manifest"));
        assert_eq!(f.size, bytes.len() as u64, "{rel}");
        assert_eq!(f.sha256, sha(bytes), "{rel}");
        let object = s3.object(&format!("{base}/{rel}")).expect("the object");
        assert_eq!(sha(&object), f.sha256, "{rel} as stored");
    }
    assert!(s3.object(&format!("{base}/outcome.json.pending")).is_none());

    // Read back through the store, bounded.
    assert_eq!(store.manifest(&t).await.unwrap(), manifest);
    assert_eq!(
        store
            .read(&t, "container/agent/log.txt", 1 << 20)
            .await
            .unwrap(),
        b"agent said hi"
    );
    assert!(matches!(
        store.read(&t, "container/big.bin", 1 << 20).await,
        Err(StoreError::Refused(_))
    ));
    assert!(matches!(
        store.read(&t, "../x", 10).await,
        Err(StoreError::Refused(_))
    ));
    assert!(matches!(
        store.manifest(&tag("camp-1", "t9.r0.a", 1)).await,
        Err(StoreError::NotFound(_))
    ));

    // Uploading again (a resumed upload) leaves the same objects.
    let again = store.upload_attempt(tmp.path(), &t).await.unwrap();
    assert_eq!(again.manifest, manifest);

    // Another campaign's objects survive a delete of this one.
    let other = tag("camp-10", "t1.r0.a", 1);
    store.upload_attempt(tmp.path(), &other).await.unwrap();
    let deleted = store.delete_campaign(&t.campaign).await.unwrap();
    assert_eq!(deleted, files.len() as u64 + 1);
    assert!(s3.keys("runs/2026/camp-1/").is_empty());
    assert_eq!(s3.keys("runs/2026/camp-10/").len(), files.len() + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_over_the_limit_is_named_and_the_rest_go_up() {
    let s3 = S3Server::start();
    let store = ArtifactStore::open(
        &s3.url("p"),
        StoreOptions {
            max_file_bytes: 1000,
            ..options(&s3)
        },
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    attempt_folder(tmp.path(), 5000);
    let up = store
        .upload_attempt(tmp.path(), &tag("c", "t.r0.a", 1))
        .await
        .unwrap();
    assert_eq!(up.manifest.files.len(), 3);
    assert_eq!(up.skipped.len(), 1, "{:?}", up.skipped);
    assert!(
        up.skipped[0].starts_with("container/big.bin: 5000 bytes is over"),
        "{}",
        up.skipped[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_bucket_is_a_refusal_and_a_stopped_server_is_worth_waiting_for() {
    let s3 = S3Server::start();
    let tmp = tempfile::tempdir().unwrap();
    attempt_folder(tmp.path(), 10);
    let t = tag("c", "t.r0.a", 1);

    let wrong = ArtifactStore::open("s3://no-such-bucket/p", options(&s3)).unwrap();
    let err = wrong.upload_attempt(tmp.path(), &t).await.unwrap_err();
    assert!(matches!(err, StoreError::Refused(_)), "{err:?}");
    assert!(!err.is_transient());

    let store = ArtifactStore::open(
        &s3.url("p"),
        StoreOptions {
            request_timeout: Duration::from_secs(1),
            ..options(&s3)
        },
    )
    .unwrap();
    let stop = std::process::Command::new("kill")
        .args(["-STOP", &s3.pid().to_string()])
        .status()
        .unwrap();
    assert!(stop.success());
    let err = store.upload_attempt(tmp.path(), &t).await.unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    std::process::Command::new("kill")
        .args(["-CONT", &s3.pid().to_string()])
        .status()
        .unwrap();
    store.upload_attempt(tmp.path(), &t).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_mount_is_a_store_too() {
    let root = tempfile::tempdir().unwrap();
    let url = format!("file://{}/artifacts", root.path().display());
    let store = ArtifactStore::open(&url, StoreOptions::default()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let files = attempt_folder(tmp.path(), 100);
    let t = tag("c", "t.r0.a", 3);
    let up = store.upload_attempt(tmp.path(), &t).await.unwrap();
    assert_eq!(up.uris[0], format!("{url}/c/t.r0.a/a3/{MANIFEST}"));
    for (rel, bytes) in &files {
        assert_eq!(
            &std::fs::read(root.path().join("artifacts/c/t.r0.a/a3").join(rel)).unwrap(),
            bytes
        );
    }
    assert_eq!(
        store.delete_campaign(&t.campaign).await.unwrap(),
        files.len() as u64 + 1
    );
}

#[test]
fn a_bad_url_says_what_is_expected() {
    for (url, says) in [
        ("http://x/y", "expected s3://"),
        ("s3://", "no bucket"),
        ("file://relative/path", "absolute path"),
        ("s3://b/a//b", "artifact store URL"),
    ] {
        let err = ArtifactStore::open(url, StoreOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{url}: {err}");
    }
}
