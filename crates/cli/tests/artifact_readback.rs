//! Artifacts read back from object storage once the worker's copy is gone: a real `lanes
//! coordinator --artifact-store` with its dashboard, a real `lanes worker` uploading to a real
//! S3-compatible server (moto on a free port), two campaigns sharing task ids. The dashboard
//! lists and serves the stored files (only those the manifest names, with the same headers as
//! files on disk), `lanes artifacts` downloads them checked against the manifest, `lanes
//! archive` keeps the URIs, and `lanes delete` removes one campaign's objects and no other's
//! (or none, with `--keep-artifacts`).

mod browser;
mod support;

use std::path::Path;

use lanes_tests::s3_server::S3Server;
use serde_json::Value;

use browser::http;
use support::{Killed, lanes, logged_addr, spawn};

const CLIENT_TOKEN: &str = "readback-client-token-for-tests";
const LANE_TOKEN: &str = "readback-lane-token-for-tests";

struct Fleet {
    api: String,
    ui: String,
    _coordinator: Killed,
    _worker: Killed,
}

fn fleet(dir: &Path, s3: &S3Server) -> Fleet {
    let url = s3.url("fleet");
    let mut coordinator = lanes();
    coordinator
        .args([
            "coordinator",
            "--listen",
            "127.0.0.1:0",
            "--ui-listen",
            "127.0.0.1:0",
        ])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--artifact-store", &url])
        .envs(s3.env())
        .env("LANES_CLIENT_TOKEN", CLIENT_TOKEN)
        .env("LANES_LANE_TOKEN", LANE_TOKEN);
    let (coordinator, rx) = spawn(coordinator);
    let api = logged_addr(&rx, "coordinator listening");
    let ui = logged_addr(&rx, "dashboard listening");
    let mut worker = lanes();
    worker
        .args([
            "worker",
            "--coordinator",
            &format!("http://{api}"),
            "--lanes",
            "2",
            "--host",
            "h",
        ])
        .arg("--artifacts")
        .arg(dir.join("artifacts"))
        .args(["--artifact-store", &url])
        .envs(s3.env())
        .env("LANES_LANE_TOKEN", LANE_TOKEN);
    let (worker, _) = spawn(worker);
    Fleet {
        api: format!("http://{api}"),
        ui,
        _coordinator: coordinator,
        _worker: worker,
    }
}

impl Fleet {
    fn cli(&self, args: &[&str]) -> std::process::Output {
        support::client(&self.api, CLIENT_TOKEN, args)
    }

    fn ok(&self, args: &[&str]) -> String {
        support::client_ok(&self.api, CLIENT_TOKEN, args)
    }

    fn get(&self, path: &str) -> browser::Answer {
        http(
            &self.ui,
            "GET",
            path,
            &[("authorization", &format!("Bearer {CLIENT_TOKEN}"))],
            "",
        )
    }
}

#[test]
fn stored_attempts_are_served_downloaded_archived_and_deleted_after_the_worker_copy_is_gone() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let s3 = S3Server::start();
    let f = fleet(dir, &s3);
    for id in ["rb-one", "rb-two"] {
        let file = support::campaign(dir, id, 2, 0.01);
        f.ok(&["submit", file.to_str().unwrap()]);
    }
    // The second is often done before its watch begins: a watch must end on such a
    // snapshot too (it waited forever for events that never come).
    for id in ["rb-one", "rb-two"] {
        f.ok(&["watch", id]);
    }
    // The worker's copies are gone (a host drained or replaced).
    std::fs::remove_dir_all(dir.join("artifacts/rb-one")).unwrap();

    let rows: Vec<Value> = f
        .ok(&["results", "rb-one"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let row = rows
        .iter()
        .find(|r| r["counted"] == true)
        .expect("a counted row");
    let trial = row["trial_id"].as_str().unwrap();
    let attempt = row["attempt"].as_u64().unwrap();
    let base = format!("fleet/rb-one/{trial}/a{attempt}");
    let uris: Vec<&str> = row["artifacts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap())
        .collect();
    assert_eq!(
        uris[0],
        format!("s3://lanes-test/{base}/manifest.json"),
        "{uris:?}"
    );

    // The trial page lists the stored files, linked.
    let page = f.get(&format!("/campaigns/rb-one/trials/{trial}"));
    assert_eq!(page.status, 200, "{}", page.text());
    let link = format!("/campaigns/rb-one/trials/{trial}/stored/a{attempt}/outcome.json");
    assert!(page.text().contains(&link), "{}", page.text());
    // A stored file, as files on disk are served: plain text, sandboxed, never a page.
    let file = f.get(&link);
    assert_eq!(file.status, 200, "{}", file.text());
    assert_eq!(
        file.body,
        s3.object(&format!("{base}/outcome.json")).unwrap()
    );
    assert_eq!(
        file.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert!(
        file.header("content-security-policy")
            .unwrap()
            .contains("sandbox")
    );
    assert_eq!(file.header("x-content-type-options"), Some("nosniff"));
    // Only what the manifest names; nothing without the token.
    for path in ["nothing.txt", "../../rb-two/x", "a/../outcome.json"] {
        let a = f.get(&format!(
            "/campaigns/rb-one/trials/{trial}/stored/a{attempt}/{path}"
        ));
        assert!(
            a.status == 404 || a.status == 400,
            "{path}: {} {}",
            a.status,
            a.text()
        );
    }
    assert_eq!(http(&f.ui, "GET", &link, &[], "").status, 401);

    // `lanes artifacts` downloads the counted attempt, checked against its manifest.
    let out = dir.join("download");
    let said = f.ok(&["artifacts", "rb-one", trial, "--to", out.to_str().unwrap()]);
    assert!(said.contains(&format!("attempt {attempt}")), "{said}");
    let manifest: Value =
        serde_json::from_slice(&s3.object(&format!("{base}/manifest.json")).unwrap()).unwrap();
    let files = manifest["files"].as_array().unwrap();
    assert!(files.len() >= 2, "{manifest}");
    for file in files {
        let path = file["path"].as_str().unwrap();
        assert_eq!(
            std::fs::read(out.join(path)).unwrap(),
            s3.object(&format!("{base}/{path}")).unwrap(),
            "{path}"
        );
    }
    // An attempt not in the store is NOT_FOUND, said plainly.
    let missing = f.cli(&[
        "artifacts",
        "rb-one",
        trial,
        "--attempt",
        "9",
        "--to",
        out.to_str().unwrap(),
    ]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("not in the artifact store"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );

    // The archive keeps the URIs.
    let archive = dir.join("rb-one.jsonl");
    f.ok(&["archive", "rb-one", "--to", archive.to_str().unwrap()]);
    let text = std::fs::read_to_string(&archive).unwrap();
    assert!(text.contains(&format!("s3://lanes-test/{base}/manifest.json")));

    // A manifest forged in the store, naming a path out of the attempt folder, is refused by
    // the coordinator before `lanes artifacts` writes anything, and by the dashboard.
    let two: Value = f
        .ok(&["results", "rb-two"])
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .next()
        .unwrap();
    let (t2, a2) = (
        two["trial_id"].as_str().unwrap(),
        two["attempt"].as_u64().unwrap(),
    );
    let forged = format!("fleet/rb-two/{t2}/a{a2}/manifest.json");
    let original = s3.object(&forged).unwrap();
    s3.put_object(
        &forged,
        br#"{"files":[{"path":"../../escape","size":1,"sha256":"00"}]}"#,
    );
    let into = dir.join("forged");
    let refused = f.cli(&[
        "artifacts",
        "rb-two",
        t2,
        "--attempt",
        &a2.to_string(),
        "--to",
        into.to_str().unwrap(),
    ]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("unsafe path"), "{said}");
    assert!(!into.exists() && !dir.join("escape").exists());
    let page = f.get(&format!("/campaigns/rb-two/trials/{t2}"));
    assert!(page.text().contains("not listed"), "{}", page.text());
    let a = f.get(&format!(
        "/campaigns/rb-two/trials/{t2}/stored/a{a2}/..%2F..%2Fescape"
    ));
    assert_ne!(a.status, 200, "{}", a.text());
    s3.put_object(&forged, &original);

    // Deleting one campaign removes its objects and not the other's, which shares task ids.
    assert!(!s3.keys("fleet/rb-one/").is_empty());
    let two_before = s3.keys("fleet/rb-two/");
    assert!(!two_before.is_empty());
    let said = f.ok(&["delete", "rb-one", "--yes"]);
    assert!(s3.keys("fleet/rb-one/").is_empty(), "{said}");
    assert_eq!(s3.keys("fleet/rb-two/"), two_before);
    f.ok(&["delete", "rb-two", "--yes", "--keep-artifacts"]);
    assert_eq!(s3.keys("fleet/rb-two/"), two_before);
}
