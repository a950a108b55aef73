//! Faults the sim driver injects (infra, rate limits, auth, hung drivers) and how the
//! worker and coordinator retry, pause or stop on them.

use std::time::Duration;

use lanes_common::policy::TrialHistory;
use lanes_common::proto as pb;
use lanes_common::row::{ExcludedReason, FailureKind, Row};
use lanes_tests::campaign_watch::wait_ended;
use lanes_tests::coordinator::CLIENT_TOKEN;
use lanes_tests::fleet::{Fleet, by_trial, rows};
use lanes_tests::lane_client::{client, submit_request};
use lanes_tests::worker_campaigns::campaign_text;

use crate::worker::Worker;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_200_trial_campaign_with_every_fault_but_auth_reaches_done() {
    let f = Fleet::start().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let sim = "agent_s = [0.0, 0.02], default_pass_rate = 0.6, rate_limit_reset_s = 1.0, cost_usd = [0.01, 0.02], faults = { boot_failed = 0.03, reset_unverified = 0.03, rate_limit = 0.03, overloaded = 0.03, guest_lost = 0.03, evaluator_error = 0.03, harness_error = 0.03, driver_crash = 0.02, garbage = 0.02, exit = 0.02, timeout = 0.03, max_turns = 0.02, agent_error = 0.03, violation = 0.02 }";
    let text = campaign_text(
        "faults",
        50,
        2,
        "pairing = \"none\"",
        sim,
        "infra_backoff_s = 0\noverloaded_backoff_s = 0\nrate_limit_backoff_s = 1",
    );
    let r = c.submit(submit_request(&text)).await.unwrap().into_inner();
    assert_eq!(r.trials, 200);
    let _w1 = Worker::start(&f.coord.url(), &f.dir.path().join("w1"), 4, "host-1");
    let _w2 = Worker::start(&f.coord.url(), &f.dir.path().join("w2"), 4, "host-2");
    let st = wait_ended(&f.coord.url(), "faults", Duration::from_secs(180)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32, "{st:?}");
    assert_eq!(st.trials_final, 200);

    let rows = rows(&f.store, "faults").await;
    let trials = by_trial(&rows);
    assert_eq!(trials.len(), 200);
    let policy = lanes_common::spec::RetryPolicy {
        infra_backoff_s: 0,
        overloaded_backoff_s: 0,
        rate_limit_backoff_s: 1,
        ..Default::default()
    };
    let mut kinds_seen = std::collections::BTreeSet::new();
    for (id, rs) in &trials {
        let counted = rs.iter().filter(|r| r.counted).count();
        let excluded = rs.iter().any(|r| r.is_final && r.excluded);
        assert!(counted <= 1, "{id} counted {counted} times");
        assert!(
            counted == 1 || excluded,
            "{id} is neither counted nor excluded"
        );
        for r in rs.iter() {
            if let Some(k) = r.failure_kind {
                kinds_seen.insert(k);
            }
        }
        // Retried as the policy says: an exclusion comes only with its budget spent.
        let h = TrialHistory::from_rows(rs.iter().copied());
        if let Some(r) = rs.iter().find(|r| r.excluded) {
            match r.excluded_reason.as_ref().unwrap() {
                ExcludedReason::InfraFailure(FailureKind::Overloaded) => {
                    assert_eq!(h.overloaded_used, policy.overloaded_retries + 1, "{id}")
                }
                ExcludedReason::InfraFailure(_) => {
                    assert_eq!(h.infra_used, policy.infra_retries + 1, "{id}")
                }
                other => panic!("{id}: unexpected exclusion {other}"),
            }
        }
        // Attempts without gaps.
        let attempts: Vec<u32> = rs.iter().map(|r| r.attempt).collect();
        let max = *attempts.iter().max().unwrap();
        for a in 1..=max {
            assert!(attempts.contains(&a), "{id}: attempt {a} has no row");
        }
    }
    for k in [
        FailureKind::BootFailed,
        FailureKind::DriverCrash,
        FailureKind::EvaluatorError,
        FailureKind::RateLimit,
    ] {
        assert!(kinds_seen.contains(&k), "no {k} seen: {kinds_seen:?}");
    }
    // Every row carries the driver's identity when the driver answered initialize.
    assert!(
        rows.iter()
            .filter(|r| r.status.is_scored())
            .all(|r| r.driver.as_ref().is_some_and(|d| d.name == "lanes-sim"))
    );
    drop(f.redis);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_auth_failure_campaign_stops_with_stopped_auth() {
    let f = Fleet::start().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = campaign_text(
        "auth",
        3,
        1,
        "pairing = \"none\"",
        "faults = { auth = 1.0 }",
        "auth_backoff_s = 0",
    );
    c.submit(submit_request(&text)).await.unwrap();
    let _w = Worker::start(&f.coord.url(), f.dir.path(), 1, "h");
    let st = wait_ended(&f.coord.url(), "auth", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Stopped as i32);
    assert_eq!(st.stop_reason, pb::StopReason::Auth as i32);
    let rows = rows(&f.store, "auth").await;
    assert!(
        rows.iter()
            .all(|r| r.failure_kind == Some(FailureKind::Auth))
    );
    assert!(!rows.last().unwrap().is_final, "a resume retries it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_driver_is_killed_at_its_deadline_and_the_next_attempt_gets_a_fresh_one() {
    let f = Fleet::start().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let text = campaign_text(
        "hang",
        1,
        1,
        "pairing = \"none\"\n",
        "faults = { hang = 1.0 }",
        "infra_backoff_s = 0",
    )
    .replace("timeout_s = 5", "timeout_s = 1");
    c.submit(submit_request(&text)).await.unwrap();
    let _w = Worker::start(&f.coord.url(), f.dir.path(), 1, "h");
    let st = wait_ended(&f.coord.url(), "hang", Duration::from_secs(60)).await;
    assert_eq!(st.state, pb::CampaignState::Done as i32);
    let rows = rows(&f.store, "hang").await;
    let crashes: Vec<&Row> = rows
        .iter()
        .filter(|r| r.failure_kind == Some(FailureKind::DriverCrash))
        .collect();
    // Two trials (arms a and b), each tried twice: every attempt got a driver that answered
    // boot and reset, so a hung driver never blocked the next attempt.
    assert_eq!(crashes.len(), 4, "{rows:#?}");
    assert!(
        crashes.iter().all(|r| r
            .record
            .error
            .as_deref()
            .is_some_and(|e| e.contains("deadline") || e.contains("cancel grace"))),
        "{crashes:#?}"
    );
    assert!(rows.iter().filter(|r| r.is_final).all(|r| r.excluded));
}

/// Two providers, one of which rate-limits like a real provider (every request inside the
/// window is refused). Run once without the provider-wide pause and once with it: the pause
/// must cut the rate-limit failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_provider_pause_cuts_rate_limit_failures() {
    let f = Fleet::start().await;
    let mut c = client(&f.coord.url(), Some(CLIENT_TOKEN)).await;
    let _w = Worker::start(&f.coord.url(), f.dir.path(), 1, "h");
    let mut counts = Vec::new();
    for (id, pause) in [("nopause", false), ("pause", true)] {
        let text = campaign_text(
            id,
            20,
            1,
            &format!("pairing = \"none\"\nrate_limit_pause = {pause}"),
            "agent_s = [0.02, 0.05], rate_limit_reset_s = 1.0, faults = { rate_limit = 0.15 }",
            "rate_limit_backoff_s = 1",
        );
        c.submit(submit_request(&text)).await.unwrap();
        let st = wait_ended(&f.coord.url(), id, Duration::from_secs(120)).await;
        assert_eq!(st.state, pb::CampaignState::Done as i32);
        let rows = rows(&f.store, id).await;
        counts.push(
            rows.iter()
                .filter(|r| r.failure_kind == Some(FailureKind::RateLimit))
                .count(),
        );
    }
    eprintln!(
        "rate-limit failures: without the pause {}, with it {}",
        counts[0], counts[1]
    );
    assert!(counts[0] > 0, "the provider never rate-limited");
    assert!(
        counts[1] < counts[0],
        "the pause did not cut rate-limit failures: {counts:?}"
    );
}
