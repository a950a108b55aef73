//! Artifacts in object storage, end to end: real `lanes worker` processes upload each
//! published attempt's folder to a real S3-compatible server (moto on a free port) before
//! they send its outcome. Two campaigns sharing task ids run on one worker. The store fails
//! in each way it can: stopped past a lease's TTL, answering 500s, refusing (a wrong
//! bucket), and the worker is killed mid-upload. Every trial still ends once, with its score,
//! and its row lists the objects (or says why not).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lanes_common::proto as pb;
use lanes_common::row::Row;
use lanes_tests::campaign_watch::wait_ended;
use lanes_tests::coordinator::CLIENT_TOKEN;
use lanes_tests::fleet::{Fleet, by_trial, rows};
use lanes_tests::lane_client::{client, submit_request};
use lanes_tests::python_driver::driver_file;
use lanes_tests::s3_server::{FailingFront, S3Server};
use sha2::{Digest, Sha256};

use crate::worker::Worker;

const SECRET: &str = "PAYLOAD-SECRET-a51x";

/// A driver that leaves files in the attempt folder: a log echoing the payload's secret, a
/// file whose name holds it, a nested file, and `big.bin` of `payload.big_mib` MiB when asked.
fn files_driver(dir: &Path) -> PathBuf {
    driver_file(
        dir,
        "files_driver.py",
        r#"    name, version = "files-driver", "1.0"

    def run_agent(self, p):
        return {"status": "completed", "turns": 1}

    def evaluate(self, p):
        import os
        d = p["attempt_dir"]
        with open(os.path.join(d, "agent.log"), "w") as f:
            f.write("the agent saw " + p["payload"]["password"] + "\n")
        with open(os.path.join(d, "named-" + p["payload"]["password"] + ".txt"), "w") as f:
            f.write("a name that holds the secret\n")
        os.makedirs(os.path.join(d, "trajectory"), exist_ok=True)
        with open(os.path.join(d, "trajectory", "step-1.json"), "w") as f:
            f.write('{"task": "%s"}' % p["task"])
        mib = p["payload"].get("big_mib", 0)
        if mib:
            with open(os.path.join(d, "big.bin"), "wb") as f:
                f.write(b"x" * (mib << 20))
        sys.stderr.write("evaluated with " + p["payload"]["password"] + "\n")
        return {"score": 1.0, "passed": True}
"#,
    )
}

/// Campaign `id` on the files driver: `n` tasks `T0..`, the first with `big_mib` MiB. Its
/// lease TTL is 3 s and its publish grace 1 s: a lease left unrenewed while its outcome
/// waits expires 4 s after its last renewal (and the reaper writes a `lease_lost` row).
fn campaign(id: &str, driver: &Path, n: usize, big_mib: u32) -> String {
    let mut items = String::new();
    for i in 0..n {
        let big = if i == 0 { big_mib } else { 0 };
        items.push_str(&format!(
            "  {{ id = \"T{i}\", payload = {{ password = \"{SECRET}\", big_mib = {big} }} }},\n"
        ));
    }
    format!(
        "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 9\npairing = \"none\"\nlease_ttl_s = 3\npublish_grace_s = 1\n[defaults]\ntimeout_s = 20\n[[arms]]\nid = \"a\"\n[driver]\ncommand = [\"python3\", {:?}]\nsecret_payload_keys = [\"password\"]\n[retry]\ninfra_backoff_s = 0\n[tasks]\nitems = [\n{items}]\n",
        driver.display().to_string()
    )
}

/// A worker with the store's environment and `args` after `--artifact-store URL`.
fn worker(
    f: &Fleet,
    env: &[(String, String)],
    url: &str,
    lanes: u32,
    log: &Path,
    args: &[&str],
) -> Worker {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut all = vec!["--allow-campaign-commands", "--artifact-store", url];
    all.extend_from_slice(args);
    Worker::start_args(
        &f.coord.url(),
        &f.dir.path().join("art"),
        lanes,
        "h",
        &env,
        Some(log),
        &all,
    )
}

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The outbox entries still waiting for their upload, as JSON.
fn waiting(f: &Fleet) -> Vec<serde_json::Value> {
    let outbox = f.dir.path().join("art/.outbox");
    std::fs::read_dir(&outbox)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| std::fs::read(e.path()).ok())
                .filter_map(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .filter(|v| v.get("upload").is_some())
                .collect()
        })
        .unwrap_or_default()
}

fn waiting_uploads(f: &Fleet) -> usize {
    waiting(f).len()
}

async fn until(what: &str, within: Duration, mut ok: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + within;
    while !ok() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting until {what}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Each trial ended once, scored, and its final row names the attempt's objects: the
/// manifest first, no local path, and the manifest's digests are the objects' (read from
/// the server).
fn assert_uploaded(s3: &S3Server, prefix: &str, campaign: &str, rows: &[Row], trials: usize) {
    let trials_seen = by_trial(rows);
    assert_eq!(
        trials_seen.len(),
        trials,
        "{campaign}: every trial has a row"
    );
    for (trial, rs) in trials_seen {
        let finals: Vec<&&Row> = rs.iter().filter(|r| r.is_final).collect();
        assert_eq!(finals.len(), 1, "{campaign}/{trial} ended once: {rs:?}");
        let r = finals[0];
        assert_eq!(
            r.result.score,
            Some(1.0),
            "{campaign}/{trial} kept its score"
        );
        let base = format!("{prefix}/{campaign}/{trial}/a{}", r.token().attempt);
        let uri = |rel: &str| format!("s3://{}/{base}/{rel}", s3.bucket);
        assert_eq!(
            r.record.artifacts[0],
            uri("manifest.json"),
            "{:?}",
            r.record.artifacts
        );
        assert!(
            r.record.artifacts.iter().all(|a| a.starts_with("s3://")),
            "no local paths: {:?}",
            r.record.artifacts
        );
        let manifest: serde_json::Value = serde_json::from_slice(
            &s3.object(&format!("{base}/manifest.json"))
                .expect("manifest"),
        )
        .unwrap();
        let files = manifest["files"].as_array().unwrap();
        let names: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
        for want in [
            "named-___.txt",
            "agent.log",
            "attempt.json",
            "driver.stderr",
            "outcome.json",
            "trajectory/step-1.json",
        ] {
            assert!(
                names.contains(&want),
                "{campaign}/{trial}: {want} in {names:?}"
            );
            assert!(
                r.record.artifacts.contains(&uri(want)),
                "{want} listed in the row"
            );
        }
        for key in s3.keys(&format!("{base}/")) {
            assert!(
                !key.contains(SECRET),
                "an object key holds the secret: {key}"
            );
        }
        for file in files {
            let path = file["path"].as_str().unwrap();
            let object = s3.object(&format!("{base}/{path}")).expect("the object");
            assert_eq!(
                object.len() as u64,
                file["size"].as_u64().unwrap(),
                "{path}"
            );
            assert_eq!(sha(&object), file["sha256"].as_str().unwrap(), "{path}");
            let text = String::from_utf8_lossy(&object);
            // The driver's last stderr line was written just before it answered `evaluate`.
            if path == "driver.stderr" {
                assert!(text.contains("evaluated with "), "{base}: {text:?}");
            }
            for secret in [SECRET, S3Server::SECRET_KEY] {
                assert!(!text.contains(secret), "{base}/{path} holds {secret}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attempts_go_to_the_store_before_their_outcomes_and_rows_name_the_objects() {
    let f = Fleet::start().await;
    let s3 = S3Server::start();
    let driver = files_driver(f.dir.path());
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    // Two campaigns over the same task ids, on one worker; the first task of "one" leaves a
    // file over the size limit.
    c.submit(submit_request(&campaign("one", &driver, 3, 2)))
        .await
        .unwrap();
    c.submit(submit_request(&campaign("two", &driver, 3, 0)))
        .await
        .unwrap();
    let log = f.dir.path().join("worker.log");
    let _w = worker(
        &f,
        &s3.env(),
        &s3.url("runs"),
        2,
        &log,
        &["--artifact-max-file-mb", "1"],
    );
    for id in ["one", "two"] {
        let st = wait_ended(&f.coord.url(), id, Duration::from_secs(90)).await;
        assert_eq!(st.state, pb::CampaignState::Done as i32);
    }
    let one = rows(&f.store, "one").await;
    assert_uploaded(&s3, "runs", "one", &one, 3);
    assert_uploaded(&s3, "runs", "two", &rows(&f.store, "two").await, 3);
    // The file over the limit is not in the store, and its row says so.
    let big = one
        .iter()
        .find(|r| r.trial_id.as_str().starts_with("T0."))
        .unwrap();
    assert!(
        big.record
            .publication_errors
            .iter()
            .any(|e| e.contains("big.bin: 2097152 bytes is over")),
        "{:?}",
        big.record.publication_errors
    );
    assert!(!big.record.artifacts.iter().any(|a| a.ends_with("big.bin")));
    // No secret in a row or the worker's log: not the payload's, not the store's key.
    let all_rows = serde_json::to_string(&one).unwrap();
    let logs = std::fs::read_to_string(&log).unwrap();
    for secret in [SECRET, S3Server::SECRET_KEY] {
        assert!(!all_rows.contains(secret), "a row holds {secret}");
        assert!(!logs.contains(secret), "the worker log holds {secret}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_that_refuses_ends_in_rows_that_say_so_with_their_scores() {
    let f = Fleet::start().await;
    let s3 = S3Server::start();
    let driver = files_driver(f.dir.path());
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&campaign("refused", &driver, 2, 0)))
        .await
        .unwrap();
    let log = f.dir.path().join("worker.log");
    let _w = worker(&f, &s3.env(), "s3://no-such-bucket/runs", 2, &log, &[]);
    let st = wait_ended(&f.coord.url(), "refused", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    for r in rows(&f.store, "refused").await {
        assert_eq!(r.result.score, Some(1.0));
        assert!(
            r.record
                .publication_errors
                .iter()
                .any(|e| e.starts_with("artifact store refused")),
            "{:?}",
            r.record.publication_errors
        );
        // The evidence is still on the worker, and the row says where.
        assert!(
            r.record.artifacts[0].ends_with("outcome.json"),
            "{:?}",
            r.record.artifacts
        );
        assert!(Path::new(&r.record.artifacts[0]).exists());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn outcomes_wait_out_a_store_stopped_past_the_lease_ttl_and_then_all_publish() {
    let f = Fleet::start().await;
    let s3 = S3Server::start();
    let driver = files_driver(f.dir.path());
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&campaign("paused", &driver, 4, 0)))
        .await
        .unwrap();
    signal(s3.pid(), "-STOP");
    let log = f.dir.path().join("worker.log");
    let _w = worker(&f, &s3.env(), &s3.url("runs"), 2, &log, &[]);
    // Two lanes: once two outcomes wait, the worker asks for no more work (a lane that asked
    // before may still finish one more attempt, so 2 or 3 wait, never 4).
    until(
        "two outcomes wait for the store",
        Duration::from_secs(60),
        || waiting_uploads(&f) >= 2,
    )
    .await
    .unwrap();
    // Longer than the 3 s lease TTL: their leases stay renewed, and nothing is published.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(waiting_uploads(&f) <= 3, "the worker took no more work");
    assert!(
        rows(&f.store, "paused").await.is_empty(),
        "no outcome went out before its files"
    );
    signal(s3.pid(), "-CONT");
    let st = wait_ended(&f.coord.url(), "paused", Duration::from_secs(120)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    // One attempt each: no lease expired while its outcome waited.
    let rs = rows(&f.store, "paused").await;
    assert!(
        rs.iter()
            .all(|r| r.token().attempt == 1 && !r.record.lease_lost),
        "{rs:?}"
    );
    assert_uploaded(&s3, "runs", "paused", &rs, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_answering_500s_holds_outcomes_until_it_mends() {
    let f = Fleet::start().await;
    let s3 = S3Server::start();
    let front = FailingFront::start(&s3);
    let mut env = s3.env();
    env.retain(|(k, _)| k != "AWS_ENDPOINT_URL");
    env.push(("AWS_ENDPOINT_URL".into(), front.endpoint()));
    let driver = files_driver(f.dir.path());
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&campaign("flaky", &driver, 3, 0)))
        .await
        .unwrap();
    let log = f.dir.path().join("worker.log");
    let _w = worker(&f, &env, &s3.url("runs"), 2, &log, &[]);
    until(
        "outcomes wait on the failing store",
        Duration::from_secs(60),
        || waiting_uploads(&f) >= 2 && front.refused() > 3,
    )
    .await
    .unwrap();
    assert!(rows(&f.store, "flaky").await.is_empty());
    front.heal();
    let st = wait_ended(&f.coord.url(), "flaky", Duration::from_secs(120)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    assert_uploaded(&s3, "runs", "flaky", &rows(&f.store, "flaky").await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_upload_uploads_again_when_it_restarts() {
    let f = Fleet::start().await;
    let s3 = S3Server::start();
    let driver = files_driver(f.dir.path());
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    c.submit(submit_request(&campaign("killed", &driver, 3, 0)))
        .await
        .unwrap();
    // A stopped store holds the uploads in flight when the worker dies.
    signal(s3.pid(), "-STOP");
    let log = f.dir.path().join("worker.log");
    let mut w = worker(&f, &s3.env(), &s3.url("runs"), 2, &log, &[]);
    until("uploads are in flight", Duration::from_secs(60), || {
        waiting_uploads(&f) >= 2
    })
    .await
    .unwrap();
    w.kill9();
    let held: Vec<String> = waiting(&f)
        .iter()
        .map(|e| {
            e["outcome"]["token"]["trial_id"]
                .as_str()
                .expect("a trial id")
                .to_owned()
        })
        .collect();
    // The next process starts while the store is still away, and it stays away past the
    // lease TTL and the publish grace: the leases of the outcomes it resumed stay renewed.
    let _w = worker(
        &f,
        &s3.env(),
        &s3.url("runs"),
        2,
        &f.dir.path().join("worker2.log"),
        &[],
    );
    tokio::time::sleep(Duration::from_secs(8)).await;
    let early = rows(&f.store, "killed").await;
    assert!(
        early
            .iter()
            .all(|r| !held.contains(&r.trial_id.to_string())),
        "a held trial's lease expired while its outcome waited: {early:?}"
    );
    signal(s3.pid(), "-CONT");
    let st = wait_ended(&f.coord.url(), "killed", Duration::from_secs(120)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rs = rows(&f.store, "killed").await;
    // The outcomes the first process held are published by the second, as attempt 1.
    for trial in &held {
        let r = rs
            .iter()
            .find(|r| r.is_final && r.trial_id.as_str() == trial);
        assert_eq!(r.map(|r| r.token().attempt), Some(1), "{trial}: {rs:?}");
        assert!(
            rs.iter()
                .all(|r| r.trial_id.as_str() != trial || !r.record.lease_lost),
            "{trial}: {rs:?}"
        );
    }
    assert_uploaded(&s3, "runs", "killed", &rs, 3);
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}
