//! Workers decide what runs on them: a worker is served only campaigns whose driver it runs
//! (a named driver of its drivers file, a campaign command only with
//! `--allow-campaign-commands`, env names only from its allowlist), and the campaign's status
//! and `lanes workers` say why the others are not served.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use lanes_common::proto as pb;
use lanes_tests::campaign_watch::{status, wait_ended};
use lanes_tests::coordinator::CLIENT_TOKEN;
use lanes_tests::fleet::{Fleet, rows};
use lanes_tests::lane_client::{Client, client, submit_request};
use lanes_tests::python_driver::driver_file;
use lanes_tests::worker_campaigns::{campaign_text, driver_campaign};

use crate::worker::Worker;

/// A driver that completes and passes every trial.
fn passing_driver(dir: &Path) -> std::path::PathBuf {
    driver_file(
        dir,
        "passing.py",
        r#"    name, version = "passing", "1.0"

    def run_agent(self, p):
        return {"status": "completed", "turns": 1, "cost_usd": 0.0}

    def evaluate(self, p):
        return {"score": 1.0, "passed": True, "checks": []}
"#,
    )
}

/// Waits (bounded) until the campaign's status says `worker` does not serve it; the reason.
async fn refusal(c: &mut Client, id: &str, worker: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = status(c, id).await;
        if let Some(r) = st.refused_by.iter().find(|r| r.worker_id == worker) {
            return r.reason.clone();
        }
        assert!(
            Instant::now() < deadline,
            "worker {worker} is never shown refusing {id}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn lanes_workers(url: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_lanes"))
        .args(["workers", "--coordinator", url])
        .env("LANES_CLIENT_TOKEN", CLIENT_TOKEN)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_without_the_named_driver_is_not_served_and_status_says_why() {
    let f = Fleet::start().await;
    let url = f.coord.url();
    let mut c = client(&url, Some(CLIENT_TOKEN)).await;
    let text = campaign_text("named", 4, 1, "pairing = \"none\"", "", "").replace(
        "sim = {  }",
        "name = \"passing\"\nenv = { API_KEY = \"$API_KEY\" }",
    );
    assert!(text.contains("name = \"passing\""), "{text}");
    c.submit(submit_request(&text)).await.unwrap();

    // Two workers that cannot run it: one without the driver, one whose drivers file does not
    // let a campaign give the driver API_KEY.
    let driver = passing_driver(f.dir.path());
    let write = |name: &str, env: &str| {
        let p = f.dir.path().join(name);
        std::fs::write(
            &p,
            format!(
                "[passing]\ncommand = [\"python3\", {:?}]\nenv = [{env}]\n",
                driver.display().to_string()
            ),
        )
        .unwrap();
        p.display().to_string()
    };
    let narrow = write("narrow.toml", "");
    let full = write("full.toml", "\"API_KEY\"");
    let art = |n: &str| f.dir.path().join(n);
    let _plain = Worker::start_args(&url, &art("plain"), 2, "plain", &[], None, &[]);
    let _narrow = Worker::start_args(
        &url,
        &art("narrow"),
        2,
        "narrow",
        &[],
        None,
        &["--drivers", &narrow],
    );
    let reason = refusal(&mut c, "named", "plain").await;
    assert!(reason.contains("driver `passing`"), "{reason}");
    let reason = refusal(&mut c, "named", "narrow").await;
    assert!(reason.contains("`API_KEY`"), "{reason}");
    let listed = lanes_workers(&url);
    assert!(
        listed.contains("not serving named: driver `passing`") && listed.contains("`API_KEY`"),
        "{listed}"
    );

    // A worker that has the driver and allows the env runs it all; the others ran nothing.
    let _full = Worker::start_args(
        &url,
        &art("full"),
        2,
        "full",
        &[("API_KEY", "k-123")],
        None,
        &["--drivers", &full],
    );
    let st = wait_ended(&url, "named", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32, "{st:?}");
    let rows = rows(&f.store, "named").await;
    assert!(!rows.is_empty());
    assert!(
        rows.iter()
            .all(|r| r.host.as_ref().map(|h| h.as_str()) == Some("full")),
        "{rows:#?}"
    );
    assert!(
        rows.iter()
            .all(|r| r.driver.as_ref().is_some_and(|d| d.name == "passing")),
        "{rows:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_command_campaign_needs_allow_campaign_commands_and_the_sim_runs_everywhere() {
    let f = Fleet::start().await;
    let url = f.coord.url();
    let mut c = client(&url, Some(CLIENT_TOKEN)).await;
    let driver = passing_driver(f.dir.path());
    // "cmd" sorts before "sim": a worker that took campaign commands would be served it first.
    let items = "  { id = \"C0\" },\n  { id = \"C1\" },\n";
    c.submit(submit_request(&driver_campaign("cmd", &driver, "", items)))
        .await
        .unwrap();
    c.submit(submit_request(&campaign_text("sim", 3, 1, "", "", "")))
        .await
        .unwrap();
    let _plain = Worker::start_args(
        &url,
        &f.dir.path().join("plain"),
        2,
        "plain",
        &[],
        None,
        &[],
    );
    let st = wait_ended(&url, "sim", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32, "{st:?}");
    let reason = refusal(&mut c, "cmd", "plain").await;
    assert!(reason.contains("--allow-campaign-commands"), "{reason}");
    let cmd = status(&mut c, "cmd").await;
    assert!(cmd.in_flight.is_empty() && cmd.trials_final == 0, "{cmd:?}");
    assert!(rows(&f.store, "cmd").await.is_empty());

    let _open = Worker::start_args(
        &url,
        &f.dir.path().join("open"),
        2,
        "open",
        &[],
        None,
        &["--allow-campaign-commands"],
    );
    let st = wait_ended(&url, "cmd", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32, "{st:?}");
    let rows = rows(&f.store, "cmd").await;
    assert!(
        rows.iter()
            .all(|r| r.host.as_ref().map(|h| h.as_str()) == Some("open")),
        "{rows:#?}"
    );
}
