//! The supervisor and its lanes in one process, against a real coordinator (in-process, over
//! an embedded store), under paused time: credits, heartbeats, replay order, GoAway, a lane
//! crash, `--driver` and the disk floor. Nothing here sleeps in real time; waits are on what
//! crossed the link.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use tokio::task::JoinHandle;

use lanes_common::ids::{CampaignId, Token, TrialId};
use lanes_common::proto as pb;
use lanes_common::proto::coordinator_message::Msg as Out;
use lanes_common::proto::worker_message::Msg as In;
use lanes_common::row::{Outcome, Status};
use lanes_coordinator::InProcessCoordinator;
use lanes_coordinator::store::{Clock, EmbeddedStore, Store};

use super::WorkerConfig;
use super::lane::LaneMsg;
use super::link::memory::{MemoryLink, Seen, Tap};
use crate::outbox::{Entry, Outbox};

/// The coordinator's clock follows tokio's, so paused time moves leases too.
struct TokioClock(tokio::time::Instant);

impl Clock for TokioClock {
    fn now_ms(&self) -> i64 {
        // 2026-12-01T00:00:00Z plus the virtual time since the test started.
        1_796_083_200_000 + self.0.elapsed().as_millis() as i64
    }
}

/// A worker and its replicas. Worker ids are unique per test: actor names are global.
struct Rig {
    config: WorkerConfig,
    store: Arc<dyn Store>,
    clock: Arc<TokioClock>,
    replicas: Vec<Arc<InProcessCoordinator>>,
    tap: Arc<Tap>,
    worker: Option<(tokio::sync::oneshot::Sender<()>, JoinHandle<()>)>,
    _dir: tempfile::TempDir,
}

impl Rig {
    fn new(worker_id: &str, replicas: usize, lanes: u32) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let store: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open(&dir.path().join("store")).expect("embedded store"));
        let clock = Arc::new(TokioClock(tokio::time::Instant::now()));
        let replicas = (0..replicas)
            .map(|_| {
                Arc::new(InProcessCoordinator::new(
                    store.clone(),
                    clock.clone() as Arc<dyn Clock>,
                ))
            })
            .collect();
        let config = WorkerConfig {
            tls: Default::default(),
            coordinators: Vec::new(),
            token: None,
            worker_id: worker_id.to_owned(),
            host: "test-host".parse().unwrap(),
            lanes,
            artifacts: dir.path().join("artifacts"),
            outbox: dir.path().join("outbox"),
            driver_override: None,
            drivers: Default::default(),
            sim_command: vec!["/nonexistent/lanes-sim".into()],
            disk_floor_gb: None,
            arms: Vec::new(),
            shutdown_grace: Duration::from_secs(1),
            control_socket: None,
            cancel_grace: Duration::from_secs(5),
            guest_poll: Duration::from_secs(1),
            guest_grace: Duration::from_secs(60),
            task_folders: Default::default(),
            http: Default::default(),
            metrics: None,
            artifact_store: None,
        };
        Self {
            config,
            store,
            clock,
            replicas,
            tap: Arc::default(),
            worker: None,
            _dir: dir,
        }
    }

    fn start(&mut self) {
        let link = Arc::new(MemoryLink {
            replicas: self.replicas.clone(),
            tap: self.tap.clone(),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let config = self.config.clone();
        let handle = tokio::spawn(async move {
            super::run_with_link(config, link, async {
                let _ = stopped.await;
            })
            .await
            .expect("the worker runs");
        });
        self.worker = Some((stop, handle));
    }

    async fn stop(mut self) {
        if let Some((stop, handle)) = self.worker.take() {
            let _ = stop.send(());
            handle.await.expect("the worker stops");
        }
    }

    /// Submits a campaign of `tasks` tasks and one arm, with `driver` as its `[driver]` table.
    async fn submit(&self, id: &str, tasks: usize, driver: &str) {
        let mut text =
            format!("id = \"{id}\"\nschedule_seed = 7\nphase1_runs = 1\n[tasks]\nitems = [\n");
        for i in 0..tasks {
            text.push_str(&format!("  {{ id = \"T{i}\" }},\n"));
        }
        text.push_str(&format!(
            "]\n[driver]\n{driver}\n[[arms]]\nid = \"a\"\nprovider = \"p\"\n"
        ));
        let campaign = lanes_common::spec::load_str(&text, Path::new("t.toml"), Path::new("."))
            .expect("a valid campaign");
        self.store
            .submit(campaign, self.clock.now_ms())
            .await
            .expect("submitted");
    }

    fn lane_name(&self, i: u32) -> String {
        format!("{}-{i}", self.config.worker_id)
    }

    fn lane(&self, i: u32) -> ActorRef<LaneMsg> {
        let cell = ractor::registry::where_is(format!("lane:{}", self.lane_name(i)))
            .expect("the lane is registered");
        ActorRef::from(cell)
    }

    async fn registered(&self, replica: usize) {
        self.tap
            .wait_for("the session registered", |log| {
                log.iter()
                    .any(|s| matches!(s, Seen::Got { replica: r, msg: Out::Registered(_) } if *r == replica))
                    .then_some(())
            })
            .await;
    }
}

fn position(log: &[Seen], f: impl Fn(&Seen) -> bool) -> Option<usize> {
    log.iter().position(f)
}

fn assigned_token(log: &[Seen], lane: &str) -> Option<pb::Token> {
    log.iter().find_map(|s| match s {
        Seen::Got {
            msg: Out::Assignment(a),
            ..
        } if a.lane == lane => a.trials.first().and_then(|t| t.token.clone()),
        _ => None,
    })
}

fn heartbeats(log: &[Seen]) -> Vec<Vec<pb::Token>> {
    log.iter()
        .filter_map(|s| match s {
            Seen::Sent {
                msg: In::Heartbeat(h),
                ..
            } => Some(h.tokens.iter().filter_map(|t| t.token.clone()).collect()),
            _ => None,
        })
        .collect()
}

fn sent_outcome(log: &[Seen]) -> Option<pb::Outcome> {
    log.iter().find_map(|s| match s {
        Seen::Sent {
            msg: In::Outcome(o),
            ..
        } => Some(o.clone()),
        _ => None,
    })
}

#[tokio::test(start_paused = true)]
async fn each_idle_lane_holds_exactly_one_work_credit() {
    let mut rig = Rig::new("credits", 1, 3);
    rig.start();
    let lanes: Vec<String> = (0..3).map(|i| rig.lane_name(i)).collect();
    let log = rig
        .tap
        .wait_for("three rounds of work requests from every lane", |log| {
            lanes
                .iter()
                .all(|l| {
                    log.iter()
                        .filter(|s| matches!(s, Seen::Sent { msg: In::WorkRequest(w), .. } if w.lane == *l))
                        .count()
                        >= 3
                })
                .then(|| log.to_vec())
        })
        .await;
    // Per lane, requests and answers alternate: a lane never holds two credits at once.
    for lane in &lanes {
        let mut open = 0;
        for s in &log {
            match s {
                Seen::Sent {
                    msg: In::WorkRequest(w),
                    ..
                } if w.lane == *lane => {
                    open += 1;
                    assert_eq!(open, 1, "{lane} asked again before its answer");
                }
                Seen::Got {
                    msg: Out::NoWork(w),
                    ..
                } if w.lane == *lane => open -= 1,
                _ => {}
            }
        }
    }
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_outbox_is_replayed_before_any_work_is_asked_for() {
    let mut rig = Rig::new("replay", 1, 2);
    let token = Token {
        trial_id: TrialId::new("T0.r0.a").unwrap(),
        attempt: 1,
    };
    Outbox::open(&rig.config.outbox)
        .unwrap()
        .put(&Entry {
            campaign: CampaignId::new("earlier").unwrap(),
            outcome: Outcome::new(
                token,
                "replay-0".parse().unwrap(),
                "test-host".parse().unwrap(),
                Status::Cancelled,
            ),
            record: None,
            lease: Default::default(),
            upload: None,
        })
        .unwrap();
    rig.start();
    let log = rig
        .tap
        .wait_for("a work request", |log| {
            position(log, |s| {
                matches!(
                    s,
                    Seen::Sent {
                        msg: In::WorkRequest(_),
                        ..
                    }
                )
            })
            .map(|_| log.to_vec())
        })
        .await;
    let replayed = position(&log, |s| {
        matches!(
            s,
            Seen::Sent {
                msg: In::Outcome(_),
                ..
            }
        )
    })
    .expect("the outcome was replayed");
    let first_request = position(&log, |s| {
        matches!(
            s,
            Seen::Sent {
                msg: In::WorkRequest(_),
                ..
            }
        )
    })
    .unwrap();
    assert!(
        replayed < first_request,
        "replay at {replayed}, first work request at {first_request}"
    );
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn heartbeats_carry_only_the_leases_of_lanes_that_answer() {
    let mut rig = Rig::new("beats", 1, 2);
    // A driver that never answers `initialize`: each lane's spare fails at the 60 s deadline
    // (virtual time here), and then each lane holds its lease in admission until the next.
    rig.config.driver_override = Some(vec!["sleep".into(), "1000".into()]);
    rig.submit("beats", 2, "sim = {}").await;
    rig.start();
    rig.tap
        .wait_for("the session", |log| {
            log.iter()
                .any(|s| {
                    matches!(
                        s,
                        Seen::Sent {
                            msg: In::Register(_),
                            ..
                        }
                    )
                })
                .then_some(())
        })
        .await;
    let (wedged, healthy) = rig
        .tap
        .wait_for("both lanes assigned", |log| {
            Some((
                assigned_token(log, &rig.lane_name(0))?,
                assigned_token(log, &rig.lane_name(1))?,
            ))
        })
        .await;
    // Lane 0 stops answering for 3 s while it holds its lease. One heartbeat may be under
    // way as the wedge lands: the one after it is the first that must leave the lease out.
    let before = rig
        .tap
        .wait_for("the heartbeats so far", |log| Some(heartbeats(log).len()))
        .await;
    rig.lane(0)
        .cast(LaneMsg::Wedge(Duration::from_secs(3)))
        .unwrap();
    let first = rig
        .tap
        .wait_for("a heartbeat after the wedge", |log| {
            heartbeats(log).into_iter().nth(before + 1)
        })
        .await;
    assert!(first.contains(&healthy), "{first:?}");
    assert!(
        !first.contains(&wedged),
        "a wedged lane's lease is not renewed: {first:?}"
    );
    // Once it answers again, its lease is renewed again.
    rig.tap
        .wait_for("a heartbeat with the recovered lane's lease", |log| {
            heartbeats(log)
                .into_iter()
                .any(|h| h.contains(&wedged) && h.contains(&healthy))
                .then_some(())
        })
        .await;
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn go_away_moves_the_worker_to_the_next_replica() {
    let mut rig = Rig::new("goaway", 2, 1);
    rig.start();
    rig.registered(0).await;
    rig.replicas[0].set_store_up(false);
    let log = rig
        .tap
        .wait_for("work asked of the second replica", |log| {
            log.iter()
                .any(|s| {
                    matches!(
                        s,
                        Seen::Sent {
                            replica: 1,
                            msg: In::WorkRequest(_)
                        }
                    )
                })
                .then(|| log.to_vec())
        })
        .await;
    let go_away = position(&log, |s| {
        matches!(
            s,
            Seen::Got {
                replica: 0,
                msg: Out::GoAway(_)
            }
        )
    })
    .expect("replica 0 said GoAway");
    let register = position(&log, |s| {
        matches!(
            s,
            Seen::Sent {
                replica: 1,
                msg: In::Register(_)
            }
        )
    })
    .expect("the worker registered with replica 1");
    assert!(go_away < register);
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_crashed_lane_is_restarted_and_runs_the_next_trial() {
    let mut rig = Rig::new("crash", 1, 1);
    rig.config.driver_override = Some(vec!["/nonexistent/override-driver".into()]);
    rig.start();
    rig.registered(0).await;
    let lane = rig.lane(0);
    lane.cast(LaneMsg::Crash).unwrap();
    rig.tap
        .wait_for("the crashed lane to stop", |_| {
            ractor::registry::where_is(format!("lane:{}", rig.lane_name(0)))
                .is_none()
                .then_some(())
        })
        .await;
    rig.submit("crash", 1, "sim = {}").await;
    let o = rig
        .tap
        .wait_for("an outcome from the restarted lane", sent_outcome)
        .await;
    assert_eq!(o.lane, rig.lane_name(0));
    assert_eq!(o.status, pb::Status::Blocked as i32, "{o:?}");
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_driver_flag_replaces_the_campaign_command() {
    let mut rig = Rig::new("override", 1, 1);
    rig.config.driver_override = Some(vec!["/nonexistent/override-driver".into()]);
    rig.submit(
        "override",
        1,
        "command = [\"/nonexistent/campaign-driver\"]",
    )
    .await;
    rig.start();
    let o = rig.tap.wait_for("the blocked outcome", sent_outcome).await;
    assert_eq!(o.status, pb::Status::Blocked as i32, "{o:?}");
    assert!(
        o.error.contains("/nonexistent/override-driver") && !o.error.contains("campaign-driver"),
        "{}",
        o.error
    );
    rig.stop().await;
}

#[tokio::test(start_paused = true)]
async fn below_the_disk_floor_no_credit_is_sent() {
    // Above the floor, credits flow once free space has been measured.
    let mut above = Rig::new("floor-above", 1, 1);
    above.config.disk_floor_gb = Some(0.0);
    above.start();
    above
        .tap
        .wait_for("a work request above the floor", |log| {
            log.iter()
                .any(|s| {
                    matches!(
                        s,
                        Seen::Sent {
                            msg: In::WorkRequest(_),
                            ..
                        }
                    )
                })
                .then_some(())
        })
        .await;
    above.stop().await;

    let mut below = Rig::new("floor-below", 1, 1);
    below.config.disk_floor_gb = Some(1e12);
    below.start();
    below.registered(0).await;
    // Virtual time: twenty ticks, each of which measures the disk and could send a credit.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let log = below.tap.snapshot();
    assert!(
        !log.iter().any(|s| matches!(
            s,
            Seen::Sent {
                msg: In::WorkRequest(_),
                ..
            }
        )),
        "a credit was sent below the floor"
    );
    below.stop().await;
}

/// The HTTP options reach the client when the worker starts: an unreadable CA file stops it
/// there, naming the file, before any session or lane.
#[tokio::test]
async fn an_unreadable_http_ca_file_stops_the_worker_at_start() {
    let mut rig = Rig::new("http-ca", 1, 1);
    let missing = rig._dir.path().join("missing-ca.pem");
    rig.config.http.ca_file = Some(missing);
    let link = Arc::new(MemoryLink {
        replicas: rig.replicas.clone(),
        tap: rig.tap.clone(),
    });
    let run = super::run_with_link(rig.config.clone(), link, std::future::pending());
    let err = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the worker did not stop at start")
        .expect_err("a worker without its CA file runs");
    assert!(err.to_string().contains("missing-ca.pem"), "{err}");
    assert!(rig.tap.snapshot().is_empty(), "a session was opened");
}

/// Two campaigns over one dataset hold attempt 1 of the same trial on one worker at once. Each
/// lease is tracked under its campaign: every heartbeat renews both, each proven with its own
/// secret, and the session is never refused. Keyed by token alone, the second assignment
/// overwrote the first's lease: one lease went unrenewed and the other campaign's messages
/// carried the wrong secret.
#[tokio::test(start_paused = true)]
async fn campaigns_sharing_a_token_each_keep_their_own_lease() {
    let mut rig = Rig::new("shared", 1, 2);
    // A driver that never answers `initialize`: both lanes hold their lease in admission.
    rig.config.driver_override = Some(vec!["sleep".into(), "1000".into()]);
    rig.submit("coll-x", 1, "sim = {}").await;
    rig.submit("coll-y", 1, "sim = {}").await;
    rig.start();
    let renewed = rig
        .tap
        .wait_for("a heartbeat renewing both campaigns' attempts", |log| {
            log.iter().find_map(|s| match s {
                Seen::Got {
                    msg: Out::HeartbeatAck(a),
                    ..
                } if a.tokens.len() == 2 => Some(a.tokens.clone()),
                _ => None,
            })
        })
        .await;
    let mut campaigns: Vec<(String, String, i32)> = renewed
        .iter()
        .map(|r| {
            let t = r.token.as_ref().expect("a token");
            (
                r.campaign.clone(),
                format!("{}#a{}", t.trial_id, t.attempt),
                r.state,
            )
        })
        .collect();
    campaigns.sort();
    let renewed_state = pb::RenewState::Renewed as i32;
    assert_eq!(
        campaigns,
        vec![
            ("coll-x".to_owned(), "T0.r0.a#a1".to_owned(), renewed_state),
            ("coll-y".to_owned(), "T0.r0.a#a1".to_owned(), renewed_state),
        ]
    );
    // The two heartbeat entries carry different secrets, each the one its campaign issued.
    let beat = rig
        .tap
        .wait_for("the heartbeat itself", |log| {
            log.iter().find_map(|s| match s {
                Seen::Sent {
                    msg: In::Heartbeat(h),
                    ..
                } if h.tokens.len() == 2 => Some(h.tokens.clone()),
                _ => None,
            })
        })
        .await;
    let secrets: std::collections::BTreeSet<&str> = beat
        .iter()
        .filter_map(|t| t.token.as_ref().map(|t| t.lease.as_str()))
        .collect();
    assert_eq!(secrets.len(), 2, "{beat:?}");
    rig.stop().await;
}

/// A driver in `sh` that appends each request's method to the file named by its argument,
/// answers `initialize` and `teardown`, and never answers `boot` (the lane then holds its lease
/// in boot).
const RECORDING_DRIVER: &str = r#"
while IFS= read -r line; do
  method=$(printf '%s' "$line" | sed -n 's/.*"method":"\([a-z_]*\)".*/\1/p')
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  echo "$method" >> "$1"
  case "$method" in
    initialize) echo "{\"jsonrpc\":\"2.0\",\"id\":$id,\"result\":{\"name\":\"rec\",\"version\":\"1\",\"pins\":{}}}" ;;
    teardown) echo "{\"jsonrpc\":\"2.0\",\"id\":$id,\"result\":{}}" ;;
  esac
done
"#;

/// A lane starts its driver, initializes it and tears down what an earlier process left
/// before it asks for work, and its first admission uses that process with no call (the
/// campaign has no sim settings): with hundreds of lanes starting at once, driver starts and
/// calls queued for the CPU while the leases waited, and admission took seconds.
#[tokio::test]
async fn a_lane_readies_its_driver_before_it_asks_for_work_and_admits_on_it() {
    let mut rig = Rig::new("spare", 1, 1);
    let dir = tempfile::tempdir().unwrap();
    let (script, calls) = (dir.path().join("driver.sh"), dir.path().join("calls"));
    std::fs::write(&script, RECORDING_DRIVER).unwrap();
    rig.config.driver_override = Some(vec![
        "/bin/sh".into(),
        script.display().to_string(),
        calls.display().to_string(),
    ]);
    // A campaign command, which the override replaces: no sim settings.
    rig.submit("spare", 1, "command = [\"unused\"]").await;
    let methods = || -> Vec<String> {
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    let records = rig.config.outbox.join(crate::driver::process::RECORDS_DIR);
    // The drivers running, as the worker records them (one file per pid, written at spawn).
    let running = || -> std::collections::BTreeSet<String> {
        std::fs::read_dir(&records)
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter(|n| n.ends_with(".json"))
                    .collect()
            })
            .unwrap_or_default()
    };
    rig.start();
    rig.tap
        .wait_for("a work request", |log| {
            log.iter()
                .any(|s| {
                    matches!(
                        s,
                        Seen::Sent {
                            msg: In::WorkRequest(_),
                            ..
                        }
                    )
                })
                .then_some(())
        })
        .await;
    assert_eq!(
        methods().get(..2),
        Some(&["initialize".to_owned(), "teardown".to_owned()][..]),
        "the driver is initialized and torn down before the lane asks for work"
    );
    let before = running();
    assert_eq!(before.len(), 1, "{before:?}");
    rig.tap
        .wait_for("a heartbeat of the attempt in boot", |log| {
            log.iter()
                .any(|s| match s {
                    Seen::Sent {
                        msg: In::Heartbeat(h),
                        ..
                    } => h.tokens.iter().any(|t| t.phase == pb::Phase::Boot as i32),
                    _ => false,
                })
                .then_some(())
        })
        .await;
    assert_eq!(
        running(),
        before,
        "admission used the driver already running"
    );
    // Admission ended before boot began: a call it made would have been answered by now.
    let seen = methods();
    assert_eq!(
        seen.iter().filter(|m| *m == "initialize").count(),
        1,
        "admission made no call: {seen:?}"
    );
    rig.stop().await;
}

/// The recording driver, except that lane `-2`'s `initialize` waits for the file `$2`.
const GATED_DRIVER: &str = r#"
while IFS= read -r line; do
  method=$(printf '%s' "$line" | sed -n 's/.*"method":"\([a-z_]*\)".*/\1/p')
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  case "$line" in *'"lane":"first-wave-2"'*) echo "blocked" >> "$1"; while [ ! -e "$2" ]; do sleep 0.01; done ;; esac
  echo "$method" >> "$1"
  case "$method" in
    initialize) echo "{\"jsonrpc\":\"2.0\",\"id\":$id,\"result\":{\"name\":\"rec\",\"version\":\"1\",\"pins\":{}}}" ;;
    teardown) echo "{\"jsonrpc\":\"2.0\",\"id\":$id,\"result\":{}}" ;;
  esac
done
"#;

/// No lane asks for work while another lane's spare driver is still starting: the first
/// wave's admissions would queue behind those starts for the CPU. Once the last spare is up,
/// every lane asks.
#[tokio::test]
async fn the_lanes_ask_for_work_together_once_every_spare_is_up() {
    let mut rig = Rig::new("first-wave", 1, 3);
    let dir = tempfile::tempdir().unwrap();
    let (script, calls, go) = (
        dir.path().join("driver.sh"),
        dir.path().join("calls"),
        dir.path().join("go"),
    );
    std::fs::write(&script, GATED_DRIVER).unwrap();
    rig.config.driver_override = Some(vec![
        "/bin/sh".into(),
        script.display().to_string(),
        calls.display().to_string(),
        go.display().to_string(),
    ]);
    rig.submit("first-wave", 3, "command = [\"unused\"]").await;
    let count = |what: &str| {
        std::fs::read_to_string(&calls)
            .unwrap_or_default()
            .lines()
            .filter(|l| *l == what)
            .count()
    };
    let work_requests = |log: &[Seen]| {
        log.iter()
            .filter(|s| {
                matches!(
                    s,
                    Seen::Sent {
                        msg: In::WorkRequest(_),
                        ..
                    }
                )
            })
            .count()
    };
    rig.start();
    rig.registered(0).await;
    // Lanes 0 and 1 are warm (their spares answered teardown); lane 2's is held at
    // initialize. The driver writes before it answers, so this waits on the file.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while count("teardown") < 2 || count("blocked") < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the spares never came up"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A lane that asked on its own would have asked within milliseconds of its spare: a
    // window is the only way to see that nothing was sent.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        work_requests(&rig.tap.snapshot()),
        0,
        "no lane asks while a spare is starting"
    );
    std::fs::write(&go, "").unwrap();
    rig.tap
        .wait_for("a work request from each lane", |log| {
            (work_requests(log) >= 3).then_some(())
        })
        .await;
    rig.stop().await;
}
