//! The Redis store's layout record and `lanes store migrate` (the library side): a store of
//! layout 1 (the fixture the layout 1 code wrote) is refused at connect, migrated in place into
//! exactly what the layout 2 code writes, and then served; an empty store is stamped; a newer
//! layout is refused; the migration is idempotent, and a dry run writes nothing.

mod support;

use std::collections::BTreeMap;

use serde_json::Value;

use lanes_common::state::CampaignState;
use lanes_coordinator::store::layout::{REDIS_LAYOUT, Recorded};
use lanes_coordinator::store::{LayoutError, RedisOptions, RedisStore, Store, StoreError};
use lanes_tests::redis_dump::{dump, fixture_keys, layout_fixture, load, migrated_v2_fixture};
use lanes_tests::redis_server::RedisServer;
use support::{T0, cid};

/// A fresh server holding the layout 1 fixture.
async fn v1_store() -> (RedisServer, BTreeMap<String, Value>) {
    let server = RedisServer::start();
    let v1 = fixture_keys(&layout_fixture(1));
    load(&server.url(), &v1).await;
    assert_eq!(
        dump(&server.url()).await,
        v1,
        "the loader writes the dump back exactly"
    );
    (server, v1)
}

async fn migrate(url: &str, dry_run: bool) -> lanes_coordinator::store::MigrationReport {
    RedisStore::migrate(url, RedisOptions::default(), dry_run)
        .await
        .expect("migrate")
}

async fn connect(url: &str) -> Result<RedisStore, StoreError> {
    RedisStore::connect(url, RedisOptions::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_1_store_migrates_into_exactly_what_layout_2_writes() {
    let (server, _) = v1_store().await;
    let url = server.url();
    let report = migrate(&url, false).await;
    assert_eq!(report.recorded, Recorded::Unversioned);
    assert_eq!(report.to, REDIS_LAYOUT);
    assert_eq!(report.migrated, ["fix-group", "fix-single"]);
    assert_eq!(report.already, 0);
    assert!(
        dump(&url).await == migrated_v2_fixture(),
        "the migrated store differs from the layout 2 fixture (versions bumped)"
    );

    // A coordinator uses it: status, the ledger, and a claim of the work left.
    let store = connect(&url).await.expect("a migrated store is served");
    let c = cid("fix-single");
    let st = store.status(&c, T0 + 60_000).await.expect("status");
    assert_eq!(st.state, CampaignState::Running);
    assert_eq!((st.trials_total, st.trials_counted), (12, 1));
    assert_eq!(st.spend_usd, 0.25);
    assert_eq!(store.rows(&c, 0, 100).await.expect("rows").len(), 4);
    let outcome = store
        .claim(&c, support::request("lane-9", "host-9", 1), T0 + 60_000)
        .await
        .expect("claim");
    assert!(
        matches!(outcome, lanes_coordinator::store::ClaimOutcome::Assigned(_)),
        "{outcome:?}"
    );
    let g = store
        .status(&cid("fix-group"), T0 + 60_000)
        .await
        .expect("status");
    assert_eq!(g.trials_total, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_1_store_is_refused_naming_both_layouts_and_left_as_it_is() {
    let (server, v1) = v1_store().await;
    let err = connect(&server.url()).await.expect_err("a layout 1 store");
    assert!(
        matches!(
            &err,
            StoreError::Layout(LayoutError::Older {
                found: 1,
                current: 2,
                ..
            })
        ),
        "{err:?}"
    );
    let text = err.to_string();
    for want in [
        "has layout 1",
        "uses layout 2",
        &format!("lanes store migrate --redis {}", server.url()),
    ] {
        assert!(text.contains(want), "{want:?} not in {text:?}");
    }
    assert_eq!(
        dump(&server.url()).await,
        v1,
        "a refused store is not written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_layout_is_refused_by_connect_and_by_migrate() {
    let server = RedisServer::start();
    assert_eq!(server.command(&["SET", "lanes:layout", "3"]), "+OK");
    let err = connect(&server.url()).await.expect_err("a layout 3 store");
    assert!(
        matches!(
            &err,
            StoreError::Layout(LayoutError::Newer {
                found: 3,
                current: 2,
                ..
            })
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("layout 3, which is newer than this coordinator's layout 2")
            && text.contains("upgrade the coordinator"),
        "{text}"
    );
    let err = RedisStore::migrate(&server.url(), RedisOptions::default(), false)
        .await
        .expect_err("no migration down");
    assert!(
        matches!(err, StoreError::Layout(LayoutError::Newer { .. })),
        "{err:?}"
    );
    assert_eq!(server.command(&["GET", "lanes:layout"]), "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_store_is_stamped_with_the_current_layout() {
    let server = RedisServer::start();
    assert_eq!(server.command(&["GET", "lanes:layout"]), "$-1");
    connect(&server.url()).await.expect("an empty store");
    assert_eq!(server.command(&["GET", "lanes:layout"]), "2");
    // A second replica finds it stamped.
    connect(&server.url()).await.expect("a stamped store");

    // `migrate` stamps an empty store too.
    let other = RedisServer::start();
    let report = migrate(&other.url(), false).await;
    assert_eq!(report.recorded, Recorded::Empty);
    assert_eq!(other.command(&["GET", "lanes:layout"]), "2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_is_idempotent_and_a_dry_run_writes_nothing() {
    let (server, v1) = v1_store().await;
    let url = server.url();
    let dry = migrate(&url, true).await;
    assert!(dry.changes() && dry.dry_run);
    assert_eq!(dry.migrated, ["fix-group", "fix-single"]);
    assert!(
        dry.to_string().contains("would migrate 2 campaign(s)"),
        "{dry}"
    );
    assert_eq!(dump(&url).await, v1, "a dry run writes nothing");

    migrate(&url, false).await;
    let after = dump(&url).await;
    let again = migrate(&url, false).await;
    assert!(!again.changes(), "{again:?}");
    assert_eq!(again.recorded, Recorded::Layout(2));
    assert!(again.migrated.is_empty());
    assert!(again.to_string().contains("already at layout 2"), "{again}");
    assert_eq!(dump(&url).await, after, "a second migration writes nothing");
}

/// A coordinator still running holds a campaign lock: the migration waits for it, then stops
/// before recording the layout, keeping what it rewrote; run again, it finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_campaign_lock_stops_the_migration_and_a_rerun_finishes_it() {
    let (server, _) = v1_store().await;
    let url = server.url();
    let lock = "lanes:{c:fix-single}:lock";
    assert_eq!(
        server.command(&["SET", lock, "a-coordinator", "PX", "60000"]),
        "+OK"
    );
    let err = RedisStore::migrate(&url, RedisOptions::default(), false)
        .await
        .expect_err("a locked campaign");
    let text = err.to_string();
    assert!(
        text.contains("fix-single stayed locked")
            && text.contains("a coordinator is still running"),
        "{text}"
    );
    assert_eq!(
        server.command(&["GET", "lanes:layout"]),
        "$-1",
        "not recorded"
    );
    assert_eq!(
        server.command(&["GET", lock]),
        "a-coordinator",
        "its lock is kept"
    );
    assert!(
        matches!(connect(&url).await, Err(StoreError::Layout(_))),
        "a half-migrated store is still refused"
    );

    assert_eq!(server.command(&["DEL", lock]), ":1");
    let report = migrate(&url, false).await;
    assert_eq!(report.migrated, ["fix-single"]);
    assert_eq!(report.already, 1, "fix-group was migrated by the first run");
    assert!(dump(&url).await == migrated_v2_fixture());
}
