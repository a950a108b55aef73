//! The Redis layout, pinned by fixtures: a small scenario (two campaigns mid-run: leases held,
//! renewed, completed, retried, delayed, released, a provider paused, a quota read) is played
//! against a fresh Redis store with a manual clock, and every key it leaves is dumped as
//! `{ key: { type, value } }`. `tests/fixtures/redis_layout_v<N>.json` holds the dump of
//! layout `N`; the test fails when the code writes anything else, so a layout change always
//! comes with a new fixture (and the old one stays, for the migration from it).
//!
//! Regenerate the current layout's fixture with
//! `LANES_WRITE_LAYOUT_FIXTURE=1 cargo test -p lanes-coordinator --test redis_layout`.

mod support;

use std::path::PathBuf;

use serde_json::{Value, json};

use lanes_common::lease::LeaseKey;
use lanes_common::row::{FailureKind, Phase, QuotaReading, Status};
use lanes_coordinator::store::{Release, ReleaseReason};
use support::*;

/// The layout the code writes now.
const LAYOUT: u32 = lanes_coordinator::store::layout::REDIS_LAYOUT;

fn fixture_path(layout: u32) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(format!("redis_layout_v{layout}.json"))
}

/// Plays the scenario: two campaigns left mid-run.
async fn scenario(h: &Harness) {
    let key = LeaseKey::from_hex(&"ab".repeat(32)).expect("a hex key");
    h.store.lease_key(key).await.expect("lease key");

    // Single trials on two providers, a retry policy, phase 2.
    let c = cid("fix-single");
    h.submit(campaign(
        "fix-single",
        &[("a", "pa"), ("b", "pb")],
        3,
        "pairing = \"none\"\nphase2_runs = 1\nlease_ttl_s = 60\nquota_wait = 0.9\nquota_stop = 0.99",
        "",
    ))
    .await;
    let tokens: Vec<_> = (0..5)
        .map(|i| (format!("lane-{i}"), format!("host-{}", i % 2)))
        .collect();
    let mut held = Vec::new();
    for (lane, host) in &tokens {
        let t = h.claim_tokens(&c, lane, host).await.remove(0);
        held.push((t, lane.clone(), host.clone()));
    }
    h.advance_s(5);
    // Renewed (one into the agent phase), then: a score with a quota reading, an infra
    // failure retried, a rate limit that pauses its provider, a preflight block; one stays
    // leased.
    for (t, _, _) in &held {
        h.renew(&c, t, Phase::Agent).await;
    }
    let (t0, l0, h0) = &held[0];
    let mut o = scored(t0, l0, h0, Status::Completed, 1.0);
    o.result.cost_usd = Some(0.25);
    o.result.quota = Some(QuotaReading {
        provider: "pa".into(),
        utilisation: 0.1,
        reset_epoch: None,
    });
    h.store.complete(&c, o, h.now()).await.expect("complete");
    let (t1, l1, h1) = &held[1];
    h.store
        .complete(&c, infra(t1, l1, h1, FailureKind::GuestLost), h.now())
        .await
        .expect("infra");
    let (t2, l2, h2) = &held[2];
    let mut o = infra(t2, l2, h2, FailureKind::RateLimit);
    o.reset_epoch = Some(h.now() / 1000 + 300);
    h.store.complete(&c, o, h.now()).await.expect("rate limit");
    let (t3, l3, h3) = &held[3];
    h.store
        .release(
            &c,
            Release {
                token: t3.clone(),
                reason: ReleaseReason::Blocked(FailureKind::Preflight),
                lane: lanes_common::ids::LaneName::new(l3.as_str()).expect("a lane"),
                host: h3.parse().unwrap(),
                detail: Some("no gpu".into()),
            },
            h.now(),
        )
        .await
        .expect("release");
    let r = h.store.reap(&c, h.now()).await.expect("reap");
    assert_eq!((r.expired, r.cancelled), (0, 0));

    // Whole run groups, one of them leased and reaped undelivered.
    let g = cid("fix-group");
    h.submit(campaign(
        "fix-group",
        &[("a", "pa"), ("b", "pb")],
        2,
        "pairing = \"group\"\nlease_ttl_s = 30",
        "",
    ))
    .await;
    h.claim_tokens(&g, "lane-g", "host-g").await;
    h.advance_s(40);
    let r = h.store.reap(&g, h.now()).await.expect("reap");
    assert_eq!(r.cancelled, 2);
}

/// Every key of the server (see `lanes_tests::redis_dump`), under the layout it is of.
async fn dump(url: &str) -> Value {
    let mut keys = lanes_tests::redis_dump::dump(url).await;
    // A campaign version is `<count>:<random token>`: the token differs from run to run, so
    // the dump keeps its form only.
    for (key, entry) in keys.iter_mut() {
        if key.ends_with("}:ver")
            && let Some((n, _)) = entry["value"].as_str().and_then(|v| v.split_once(':'))
        {
            entry["value"] = json!(format!("{n}:<token>"));
        }
    }
    json!({ "layout": LAYOUT, "keys": keys })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layout_is_the_fixtures() {
    let h = Harness::redis().await;
    scenario(&h).await;
    let got = dump(&h.redis.as_ref().expect("a redis harness").url()).await;
    let path = fixture_path(LAYOUT);
    let text = serde_json::to_string_pretty(&got).expect("json") + "\n";
    if std::env::var_os("LANES_WRITE_LAYOUT_FIXTURE").is_some() {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("fixtures dir");
        std::fs::write(&path, &text).expect("write the fixture");
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; write it with LANES_WRITE_LAYOUT_FIXTURE=1",
            path.display()
        )
    });
    let want: Value = serde_json::from_str(&want).expect("the fixture is JSON");
    assert!(
        got == want,
        "the Redis layout differs from {}: a layout change needs a new fixture (and a \
         migration from the old one)",
        path.display()
    );
}
