//! Container campaigns on a fleet: Harbor task folders sent with `lanes submit`, kept by
//! the coordinator and fetched by a worker that never saw them, in real podman containers
//! (with the tests' own podman storage).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use lanes_common::proto as pb;
use lanes_common::row::Status;
use lanes_tests::campaign_watch::wait_ended;
use lanes_tests::coordinator::CLIENT_TOKEN;
use lanes_tests::fleet::{Fleet, rows};
use lanes_tests::lane_client::client;

use crate::worker::Worker;

fn podman_env() -> &'static Vec<(String, String)> {
    lanes_tests::podman::env(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("podman"))
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The oracle.
const ORACLE: &str = "[[arms]]\nid = \"oracle\"\nconfig = { agent = \"oracle\" }\n";

/// Some of the example's tasks, copied into `dir/tasks`, and a campaign running them with
/// `arms`: `dir/campaign.toml`.
fn submitter_copy(dir: &Path, id: &str, tasks: &[&str], arms: &str) -> PathBuf {
    let examples = lanes_tests::podman::repo().join("examples/terminal/tasks");
    for task in tasks {
        copy_dir(&examples.join(task), &dir.join("tasks").join(task));
    }
    let campaign = dir.join("campaign.toml");
    std::fs::write(
        &campaign,
        format!(
            "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 5\nlease_ttl_s = 30\n\
             [tasks]\nharbor = \"tasks\"\n[driver]\ncontainer = {{}}\n{arms}"
        ),
    )
    .unwrap();
    campaign
}

fn lanes_submit(url: &str, campaign: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lanes"))
        .args(["submit", "--coordinator", url])
        .arg(campaign)
        .env("LANES_CLIENT_TOKEN", CLIENT_TOKEN)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `lanes submit` sends the task folders; the coordinator keeps them; a worker on a host
/// where the folders never were fetches each once, checks its digest, caches it, and runs
/// it: the oracle passes both tasks, and each row pins the folder's digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_folder_submitted_to_a_fleet_runs_on_a_worker_that_never_saw_it() {
    let env = podman_env();
    let f = Fleet::start().await;
    let url = f.coord.url();
    let submitter = f.dir.path().join("submitter");
    let campaign = submitter_copy(
        &submitter,
        "fleet-folders",
        &["hello-file", "count-lines"],
        ORACLE,
    );
    let loaded = lanes_common::spec::load_file(&campaign).unwrap();
    let digests: Vec<String> = loaded
        .tasks
        .iter()
        .map(|t| {
            t.payload.value()["harbor"]["digest"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();

    // A client that does not send the folders first is refused, naming the tasks.
    let mut c = client(&url, Some(CLIENT_TOKEN)).await;
    let refused = c
        .submit(pb::SubmitRequest::try_from(&loaded).unwrap())
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(refused.message().contains("count-lines"), "{refused:?}");
    assert!(refused.message().contains("hello-file"), "{refused:?}");

    let (ok, said) = lanes_submit(&url, &campaign);
    assert!(ok, "{said}");
    assert!(said.contains("sent 2 task folder(s)"), "{said}");
    // Submitted again (a resume): the coordinator keeps them already.
    let (ok, said) = lanes_submit(&url, &campaign);
    assert!(ok, "{said}");
    assert!(!said.contains("sent"), "{said}");
    // The worker's host never had them.
    std::fs::remove_dir_all(&submitter).unwrap();

    let art = f.dir.path().join("art");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let _w = Worker::start_args(
        &url,
        &art,
        2,
        "fleet",
        &env,
        None,
        &["--container-runtime", "podman"],
    );
    let st = wait_ended(&url, "fleet-folders", Duration::from_secs(300)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32, "{st:?}");
    let rows = rows(&f.store, "fleet-folders").await;
    let finals: Vec<_> = rows.iter().filter(|r| r.is_final).collect();
    assert_eq!(finals.len(), 2, "{rows:#?}");
    for r in finals {
        assert_eq!(r.status, Status::Completed, "{r:#?}");
        assert_eq!(r.result.passed, Some(true), "{r:#?}");
        let pins = &r.driver.as_ref().unwrap().pins;
        assert!(digests.contains(&pins["task_digest"]), "{r:#?}");
    }
    // Cached once per worker, by digest, private to the worker's account.
    for d in &digests {
        let cached = art
            .join(".outbox/task-folders")
            .join(d.trim_start_matches("sha256:"));
        let b = lanes_common::spec::bundle::Bundle::read_dir(&cached).unwrap();
        assert_eq!(&b.digest(), d);
    }
}

/// The coordinator checks what it is sent: a bundle whose files do not match its digest, or
/// whose paths would leave the folder, is refused; a worker cannot fetch what it does not
/// keep.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinator_refuses_a_bundle_that_is_not_what_it_says() {
    let f = Fleet::start().await;
    let url = f.coord.url();
    let mut c = client(&url, Some(CLIENT_TOKEN)).await;
    let file = |path: &str| pb::BundleFile {
        path: path.to_owned(),
        executable: false,
        data: b"echo 1\n".to_vec(),
    };
    let good = lanes_common::spec::bundle::Bundle::try_from(pb::TaskBundle {
        files: vec![file("tests/test.sh")],
    })
    .unwrap();
    let other = "sha256:".to_owned() + &"0".repeat(64);
    let e = c
        .put_bundle(pb::PutBundleRequest {
            digest: other.clone(),
            bundle: Some(good.clone().into()),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("digest"), "{e:?}");
    for bad in ["../escape.sh", "/etc/cron.d/x", "a/./b"] {
        let e = c
            .put_bundle(pb::PutBundleRequest {
                digest: other.clone(),
                bundle: Some(pb::TaskBundle {
                    files: vec![file(bad)],
                }),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}: {e:?}");
        assert!(e.message().contains(bad), "{e:?}");
    }
    let e = c
        .missing_bundles(pb::MissingBundlesRequest {
            digests: vec!["sha256:../../x".to_owned()],
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");

    let digest = good.digest();
    let put = |d: String| pb::PutBundleRequest {
        digest: d,
        bundle: Some(good.clone().into()),
    };
    assert!(
        c.put_bundle(put(digest.clone()))
            .await
            .unwrap()
            .into_inner()
            .stored
    );
    assert!(
        !c.put_bundle(put(digest.clone()))
            .await
            .unwrap()
            .into_inner()
            .stored
    );
    let missing = c
        .missing_bundles(pb::MissingBundlesRequest {
            digests: vec![other.clone(), digest.clone()],
        })
        .await
        .unwrap()
        .into_inner()
        .missing;
    assert_eq!(missing, vec![other]);
}

/// kill -9 of a worker and its drivers together (as an OOM kill of the host's cgroup does)
/// while its agent runs in a container: no driver gets to remove its containers, so the
/// container outlives them; the restarted worker (same host, same outbox) sweeps the dead
/// drivers' records and its lanes tear down what their drivers left before they claim
/// anything, so the old container is removed; the retried attempt's own container goes when
/// it ends. (Killing the worker alone was racy: its drivers see their input end and remove
/// the lane's containers themselves, sometimes before the test looked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_attempt_leaves_no_container_once_restarted() {
    use lanes_tests::podman::{containers_of_campaign, wait_containers};
    let env = podman_env();
    let f = Fleet::start().await;
    let url = f.coord.url();
    let id = "killed-worker";
    let campaign = submitter_copy(
        &f.dir.path().join("submitter"),
        id,
        &["hello-file"],
        "[[arms]]\nid = \"sleepy\"\nconfig = { agent = \"command\", command = \"sleep 6\" }\n",
    );
    let (ok, said) = lanes_submit(&url, &campaign);
    assert!(ok, "{said}");
    let art = f.dir.path().join("art");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let start = || {
        Worker::start_args(
            &url,
            &art,
            1,
            "k9",
            &env,
            None,
            &["--container-runtime", "podman", "--worker-id", "k9"],
        )
    };
    let mut w = start();
    assert!(
        wait_containers(id, Duration::from_secs(120), |c| !c.is_empty()),
        "no container started"
    );
    let old = containers_of_campaign(id);
    // Stopped first, so none of them sees the worker go and cleans up; then all killed.
    let drivers = art.join(".outbox").join("drivers");
    signal_driver_groups(&drivers, "-STOP");
    w.kill9();
    signal_driver_groups(&drivers, "-KILL");
    assert_eq!(
        containers_of_campaign(id),
        old,
        "the container outlived its worker"
    );

    let _w = start();
    assert!(
        wait_containers(id, Duration::from_secs(60), |now| !old
            .iter()
            .any(|o| now.contains(o))),
        "the killed worker's container is still there: {:?}",
        containers_of_campaign(id)
    );
    let st = wait_ended(&url, id, Duration::from_secs(120)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32, "{st:?}");
    assert!(
        wait_containers(id, Duration::from_secs(30), <[String]>::is_empty),
        "left behind: {:?}",
        containers_of_campaign(id)
    );
}

/// Sends `sig` to the process group of every driver recorded in `records` (the worker's
/// `<outbox>/drivers/<pid>.json`, which name each driver's group); at least one must be alive.
fn signal_driver_groups(records: &Path, sig: &str) {
    let mut sent = 0;
    for e in std::fs::read_dir(records).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        let record: serde_json::Value = serde_json::from_str(&text).unwrap();
        let pgid = record["pgid"].as_u64().expect("a recorded process group");
        // A record may outlive its driver by a moment (a driver that just exited).
        let status = Command::new("kill")
            .args([sig, "--", &format!("-{pgid}")])
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        sent += u32::from(status.success());
    }
    assert!(sent > 0, "no live driver recorded in {}", records.display());
}
