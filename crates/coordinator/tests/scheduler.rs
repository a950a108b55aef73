//! The scheduler over real stores: which campaign a work request is served from, the driver
//! that comes with the unit, and which no-work reason answers when no campaign has work.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use lanes_common::ids::DriverName;
use lanes_common::policy::{DriverRefusal, NoWorkReason, WorkerOffer};
use lanes_common::row::Status;
use lanes_common::spec::Campaign;
use lanes_common::spec::DriverKind;
use lanes_common::state::{StopMode, StopReason};
use lanes_coordinator::campaign_list::CampaignList;
use lanes_coordinator::scheduler::{IDLE_RETRY_MS, Scheduled, WorkRequest, schedule};
use lanes_coordinator::store::{Assignment, CampaignOp, UnitDriver};
use support::*;

fn request(lane: &str, exclude: &[&str]) -> WorkRequest {
    WorkRequest {
        lane: lanes_common::ids::LaneName::new(lane).expect("a valid lane name"),
        host: "h".parse().unwrap(),
        worker: "worker-h".to_owned(),
        arms: None,
        exclude: exclude
            .iter()
            .map(|c| c.to_string())
            .collect::<BTreeSet<_>>(),
        offer: Default::default(),
    }
}

async fn ask(h: &Harness, req: &WorkRequest) -> Scheduled {
    schedule(h.store.as_ref(), &h.clock, &CampaignList::default(), req).await
}

async fn assigned(h: &Harness, req: &WorkRequest) -> Assignment {
    match ask(h, req).await {
        Scheduled::Assigned(a) => *a,
        other => panic!("expected work, got {other:?}"),
    }
}

async fn no_work(h: &Harness, req: &WorkRequest) -> (NoWorkReason, u64) {
    match ask(h, req).await {
        Scheduled::NoWork {
            reason,
            retry_after_ms,
        } => (reason, retry_after_ms),
        Scheduled::Assigned(a) => panic!("expected no work, got {a:?}"),
    }
}

/// One task, one arm, one run: a single trial.
fn single(id: &str) -> Campaign {
    campaign(id, &[("a", "pa")], 1, "", "")
}

#[tokio::test]
async fn without_campaigns_the_answer_is_no_campaigns() {
    let h = Harness::embedded();
    assert_eq!(
        no_work(&h, &request("l", &[])).await,
        (NoWorkReason::NoCampaigns, IDLE_RETRY_MS)
    );
}

#[tokio::test]
async fn a_unit_comes_with_the_driver_it_was_leased_under() {
    let h = Harness::embedded();
    let first = campaign("c", &[("a", "pa")], 3, "", "");
    h.submit(first.clone()).await;
    let a = assigned(&h, &request("l1", &[])).await;
    assert_eq!(a.campaign.as_str(), "c");
    assert_eq!(a.driver, UnitDriver::of(&first.spec));

    // A resubmission that changes what may change of the driver (its secret keys): units
    // leased from now on carry it.
    let mut second = campaign("c", &[("a", "pa")], 3, "", "");
    second.spec.driver.secret_payload_keys = vec!["vm_password".into()];
    assert_ne!(second.spec.driver, first.spec.driver);
    h.submit(second.clone()).await;
    let b = assigned(&h, &request("l2", &[])).await;
    assert_eq!(b.driver, UnitDriver::of(&second.spec));
    assert_eq!(b.driver.driver.secret_payload_keys, vec!["vm_password"]);
}

fn named(id: &str, driver: &str) -> Campaign {
    let mut c = single(id);
    c.spec.driver.kind = DriverKind::Named(DriverName::new(driver).unwrap());
    c
}

fn offering(req: WorkRequest, offer: WorkerOffer) -> WorkRequest {
    WorkRequest {
        offer: Arc::new(offer),
        ..req
    }
}

/// A lane whose worker does not run a campaign's driver is not served it, and hears why;
/// a campaign it can run is served in the same walk.
#[tokio::test]
async fn a_campaign_whose_driver_the_worker_lacks_is_not_served() {
    let h = Harness::embedded();
    h.submit(named("c1", "osworld")).await;
    let refused = NoWorkReason::DriverRefused {
        refusal: DriverRefusal::MissingDriver {
            driver: DriverName::new("osworld").unwrap(),
        },
    };
    let (reason, _) = no_work(&h, &request("l", &[])).await;
    assert_eq!(reason, refused);
    assert!(reason.to_string().contains("`osworld`"), "{reason}");
    let mut command = single("c2");
    command.spec.driver.kind = DriverKind::Command(vec!["python3".into(), "d.py".into()]);
    h.submit(command).await;
    h.submit(single("c3")).await;
    // Only the sim campaign is served to a worker that declares nothing.
    assert_eq!(
        assigned(&h, &request("l", &[])).await.campaign.as_str(),
        "c3"
    );
    let (reason, _) = no_work(&h, &request("l", &[])).await;
    assert!(
        matches!(reason, NoWorkReason::NothingReady { .. }),
        "{reason:?}"
    );
    // A worker with the driver is served it; one that runs campaign commands gets c2.
    let with = WorkerOffer {
        drivers: [(DriverName::new("osworld").unwrap(), BTreeSet::new())].into(),
        ..WorkerOffer::default()
    };
    let a = assigned(&h, &offering(request("l", &[]), with)).await;
    assert_eq!(a.campaign.as_str(), "c1");
    let commands = WorkerOffer {
        campaign_commands: true,
        ..WorkerOffer::default()
    };
    let a = assigned(&h, &offering(request("l", &[]), commands)).await;
    assert_eq!(a.campaign.as_str(), "c2");
}

/// A worker limited to one campaign (`lanes run`) never takes another's work, even when only
/// the other has any.
#[tokio::test]
async fn a_lane_limited_to_a_campaign_takes_no_other_work() {
    let h = Harness::embedded();
    h.submit(campaign("a-other", &[("a", "pa")], 3, "", ""))
        .await;
    h.submit(single("mine")).await;
    let only = || {
        offering(
            request("l", &[]),
            WorkerOffer {
                campaigns: Some([cid("mine")].into()),
                ..WorkerOffer::default()
            },
        )
    };
    assert_eq!(assigned(&h, &only()).await.campaign.as_str(), "mine");
    let (reason, _) = no_work(&h, &only()).await;
    assert!(
        matches!(reason, NoWorkReason::NothingReady { .. }),
        "{reason:?}"
    );
    // Everyone else still gets the other campaign.
    assert_eq!(
        assigned(&h, &request("l2", &[])).await.campaign.as_str(),
        "a-other"
    );
}

#[tokio::test]
async fn excluded_campaigns_are_skipped() {
    let h = Harness::embedded();
    h.submit(single("c1")).await;
    h.submit(single("c2")).await;
    let a = assigned(&h, &request("l", &["c1"])).await;
    assert_eq!(a.campaign.as_str(), "c2");
    assert_eq!(
        no_work(&h, &request("l", &["c1", "c2"])).await,
        (NoWorkReason::LaneExcluded, IDLE_RETRY_MS)
    );
}

/// Campaigns in every no-work state: `c1` done, `c2` stopped, `c3` with its one trial leased.
async fn three_without_work(h: &Harness) {
    for c in ["c1", "c2", "c3"] {
        h.submit(single(c)).await;
    }
    let t = h.claim_tokens(&cid("c1"), "other", "h").await.remove(0);
    h.store
        .complete(
            &cid("c1"),
            scored(&t, "other", "h", Status::Completed, 1.0),
            h.now(),
        )
        .await
        .unwrap();
    h.store
        .stop(&cid("c2"), StopMode::Drain, h.now())
        .await
        .unwrap();
    h.claim_tokens(&cid("c3"), "other", "h").await;
}

#[tokio::test]
async fn a_wait_tells_more_than_an_exclusion_a_stop_or_done() {
    let h = Harness::embedded();
    three_without_work(&h).await;
    let (reason, _) = no_work(&h, &request("l", &[])).await;
    assert_eq!(reason, NoWorkReason::NothingReady { next_ms: None });
    // Without the waiting campaign: the exclusion, then the stop, then done.
    assert_eq!(
        no_work(&h, &request("l", &["c3"])).await.0,
        NoWorkReason::LaneExcluded
    );
    h.store
        .stop(&cid("c3"), StopMode::Drain, h.now())
        .await
        .unwrap();
    assert_eq!(
        no_work(&h, &request("l", &["c2"])).await.0,
        NoWorkReason::LaneExcluded
    );
    let (reason, _) = no_work(&h, &request("l", &[])).await;
    assert_eq!(
        reason,
        NoWorkReason::Stopped {
            stop_reason: Some(StopReason::User)
        }
    );
    let (reason, _) = no_work(&h, &request("l", &["c2", "c3"])).await;
    assert_eq!(reason, NoWorkReason::LaneExcluded);
}

#[tokio::test]
async fn done_is_the_answer_only_when_every_campaign_is_done() {
    let h = Harness::embedded();
    h.submit(single("c1")).await;
    let t = h.claim_tokens(&cid("c1"), "other", "h").await.remove(0);
    h.store
        .complete(
            &cid("c1"),
            scored(&t, "other", "h", Status::Completed, 1.0),
            h.now(),
        )
        .await
        .unwrap();
    assert_eq!(no_work(&h, &request("l", &[])).await.0, NoWorkReason::Done);
    h.submit(single("c2")).await;
    h.store
        .stop(&cid("c2"), StopMode::Drain, h.now())
        .await
        .unwrap();
    assert!(matches!(
        no_work(&h, &request("l", &[])).await.0,
        NoWorkReason::Stopped { .. }
    ));
}

#[tokio::test]
async fn a_store_that_cannot_list_answers_store_unavailable() {
    let mut h = Harness::redis().await;
    h.submit(single("c1")).await;
    h.redis.as_mut().expect("a redis harness").terminate();
    match no_work(&h, &request("l", &[])).await {
        (NoWorkReason::StoreUnavailable { error }, IDLE_RETRY_MS) => {
            assert!(!error.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

/// Counts the claims and list reads that reach the store.
#[derive(Default)]
struct Counted {
    claims: std::sync::atomic::AtomicUsize,
    lists: std::sync::atomic::AtomicUsize,
}

struct CountingStore {
    inner: Arc<dyn lanes_coordinator::store::Store>,
    counted: Arc<Counted>,
}

#[async_trait::async_trait]
impl lanes_coordinator::store::Store for CountingStore {
    async fn execute(
        &self,
        op: lanes_coordinator::store::Op,
    ) -> Result<lanes_coordinator::store::Answer, lanes_coordinator::store::StoreError> {
        use lanes_coordinator::store::Op;
        use std::sync::atomic::Ordering::Relaxed;
        match &op {
            Op::Campaign(CampaignOp::Claim { .. }) => self.counted.claims.fetch_add(1, Relaxed),
            Op::List => self.counted.lists.fetch_add(1, Relaxed),
            _ => 0,
        };
        self.inner.execute(op).await
    }
}

fn counting(h: &Harness) -> (CountingStore, Arc<Counted>) {
    let counted = Arc::new(Counted::default());
    let store = CountingStore {
        inner: h.store.clone(),
        counted: counted.clone(),
    };
    (store, counted)
}

fn count(n: &std::sync::atomic::AtomicUsize) -> usize {
    n.load(std::sync::atomic::Ordering::Relaxed)
}

/// Claims that find work walk the list read last, not one read per claim; a walk that finds
/// no work reads the list again, so a campaign submitted behind this replica's back (through
/// another replica) is served at once; one deleted since the read is passed over without a
/// "claim failed".
#[tokio::test]
async fn claims_walk_the_campaign_list_read_last_and_no_work_reads_it_again() {
    for h in [Harness::embedded(), Harness::redis().await] {
        let (store, counted) = counting(&h);
        let list = CampaignList::fresh_for(std::time::Duration::from_secs(3600));
        let req = request("l", &[]);
        let ask = || schedule(&store, &h.clock, &list, &req);
        assert!(matches!(
            ask().await,
            Scheduled::NoWork {
                reason: NoWorkReason::NoCampaigns,
                ..
            }
        ));
        assert_eq!(count(&counted.lists), 1, "read once: it was read now");
        // Submitted behind the list's back.
        h.submit(campaign("c", &[("a", "pa")], 3, "", "")).await;
        let mut tokens = Vec::new();
        for _ in 0..3 {
            match ask().await {
                Scheduled::Assigned(a) => {
                    assert_eq!(a.campaign.as_str(), "c");
                    tokens.push(a.trials[0].token.clone());
                }
                other => panic!("expected work from c, got {other:?}"),
            }
        }
        assert_eq!(
            count(&counted.lists),
            2,
            "the first claim read the list again (no work on the old one); the others walked it"
        );
        for t in &tokens {
            h.store
                .complete(
                    &cid("c"),
                    scored(t, "l", "h", Status::Completed, 1.0),
                    h.now(),
                )
                .await
                .expect("complete");
        }
        h.store.delete(&cid("c")).await.expect("delete");
        assert!(matches!(
            ask().await,
            Scheduled::NoWork {
                reason: NoWorkReason::NoCampaigns,
                ..
            }
        ));
        assert_eq!(count(&counted.lists), 3);
    }
}

/// A campaign that answered "done" is passed over, with that answer, by every claim until
/// the list is read again: a fleet's finished campaigns cost its busy lanes' claims nothing.
#[tokio::test]
async fn a_finished_campaign_is_not_asked_again_until_the_list_is_read_again() {
    for h in [Harness::embedded(), Harness::redis().await] {
        let (store, counted) = counting(&h);
        let list = CampaignList::fresh_for(std::time::Duration::from_secs(3600));
        h.submit(single("a")).await;
        let t = h.claim_tokens(&cid("a"), "other", "h").await.remove(0);
        h.store
            .complete(
                &cid("a"),
                scored(&t, "other", "h", Status::Completed, 1.0),
                h.now(),
            )
            .await
            .unwrap();
        h.submit(campaign("b", &[("a", "pa")], 4, "", "")).await;
        let req = request("l", &[]);
        let ask = || schedule(&store, &h.clock, &list, &req);
        // a (done) is asked by the first walk only; b serves each claim.
        for expected_claims in [2, 3, 4] {
            match ask().await {
                Scheduled::Assigned(u) => assert_eq!(u.campaign.as_str(), "b"),
                other => panic!("expected work from b, got {other:?}"),
            }
            assert_eq!(count(&counted.claims), expected_claims);
        }
        list.forget();
        ask().await;
        assert_eq!(
            count(&counted.claims),
            6,
            "a is asked again after a new read"
        );
    }
}
