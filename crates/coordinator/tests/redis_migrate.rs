//! The Redis store's layout record and `lanes store migrate` (the library side): a store of
//! layout 1 (the fixture the layout 1 code wrote) is refused at connect, migrated in place into
//! exactly what the layout 2 code writes (recorded as the current layout, since the steps from
//! 2 on rewrite nothing), and then served; layout 2 and 3 stores are served after the migration
//! with their ledgers read back whole beside what the current layout appends; a layout 5
//! store's leases and token records, kept apart from their trials, are served and then folded
//! into the trials' records by the commits that write them; an empty store is
//! stamped; a newer layout is refused; the migration is idempotent, and a dry run writes
//! nothing.

mod support;

use std::collections::BTreeMap;

use serde_json::Value;

use lanes_common::state::CampaignState;
use lanes_coordinator::store::layout::{REDIS_LAYOUT, Recorded};
use lanes_coordinator::store::{LayoutError, RedisOptions, RedisStore, Store, StoreError};
use lanes_tests::redis_dump::{
    dump, fixture_keys, layout_fixture, load, migrated_v2_fixture, with_layout,
};
use lanes_tests::redis_server::RedisServer;
use support::{T0, cid};

/// A fresh server holding the fixture of `layout`.
async fn store_of(layout: u32) -> (RedisServer, BTreeMap<String, Value>) {
    let server = RedisServer::start();
    let keys = fixture_keys(&layout_fixture(layout));
    load(&server.url(), &keys).await;
    assert_eq!(
        dump(&server.url()).await,
        keys,
        "the loader writes the dump back exactly"
    );
    (server, keys)
}

/// A fresh server holding the layout 1 fixture.
async fn v1_store() -> (RedisServer, BTreeMap<String, Value>) {
    store_of(1).await
}

/// What the layout 1 fixture migrated to the current layout holds.
fn migrated_v1() -> BTreeMap<String, Value> {
    with_layout(migrated_v2_fixture(), REDIS_LAYOUT)
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
async fn a_layout_1_store_migrates_into_exactly_what_layout_2_writes_recorded_as_current() {
    let (server, _) = v1_store().await;
    let url = server.url();
    let report = migrate(&url, false).await;
    assert_eq!(report.recorded, Recorded::Unversioned);
    assert_eq!(report.to, REDIS_LAYOUT);
    assert_eq!(report.migrated, ["fix-group", "fix-single"]);
    assert_eq!(report.already, 0);
    assert!(
        dump(&url).await == migrated_v1(),
        "the migrated store differs from the layout 2 fixture (versions bumped, layout current)"
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

/// Seqs read back whole, then one at a time from each seq: each read gives exactly the item
/// asked for, across entries of one item (layout 2), of several under their seqs (layout 3)
/// and packed (layout 4).
async fn read_back(store: &RedisStore, c: &lanes_common::ids::CampaignId) -> (usize, usize) {
    let rows = store.rows(c, 0, usize::MAX).await.expect("rows");
    let seqs: Vec<u64> = rows.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (0..rows.len() as u64).collect::<Vec<_>>(), "row seqs");
    for s in 0..=rows.len() as u64 {
        let one: Vec<u64> = store
            .rows(c, s, 1)
            .await
            .expect("a row")
            .iter()
            .map(|r| r.seq)
            .collect();
        let want: Vec<u64> = (s..rows.len() as u64).take(1).collect();
        assert_eq!(one, want, "the row from seq {s}");
    }
    let events = store.events(c, 0, usize::MAX).await.expect("events");
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (0..events.len() as u64).collect::<Vec<_>>(),
        "event seqs"
    );
    for s in 0..=events.len() as u64 {
        let two: Vec<u64> = store
            .events(c, s, 2)
            .await
            .expect("events")
            .iter()
            .map(|e| e.seq)
            .collect();
        let want: Vec<u64> = (s..events.len() as u64).take(2).collect();
        assert_eq!(two, want, "the events from seq {s}");
    }
    (rows.len(), events.len())
}

/// Layout 2 wrote a stream entry per row or event; layout 3 writes one per commit and stream,
/// its items under their seqs; layout 4 packs them into one compressed field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_2_store_is_stamped_and_its_ledger_reads_whole_beside_new_entries() {
    an_older_store_is_stamped_and_its_ledger_reads_whole_beside_new_entries(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_3_store_is_stamped_and_its_ledger_reads_whole_beside_new_entries() {
    an_older_store_is_stamped_and_its_ledger_reads_whole_beside_new_entries(3).await;
}

/// Layout 5 stores trial states, leases, token records and block states in binary; layout 4
/// stored them as JSON, read as they are until a commit writes them again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_4_store_is_stamped_and_its_json_records_read_beside_binary_ones() {
    an_older_store_is_stamped_and_its_ledger_reads_whole_beside_new_entries(4).await;
}

/// The step from layout 5 rewrites nothing: a trial's lease and token records stay in their
/// own hashes, are served from there, and move into the trial's record when a commit next
/// writes the trial.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layout_5_store_is_stamped_and_its_leases_and_tokens_kept_apart_are_served_then_folded() {
    let (server, old) = store_of(5).await;
    let url = server.url();
    let report = migrate(&url, false).await;
    assert_eq!(report.recorded, Recorded::Layout(5));
    assert!(
        dump(&url).await == with_layout(old.clone(), REDIS_LAYOUT),
        "only the layout record changes"
    );
    let store = connect(&url).await.expect("a migrated store is served");
    let c = cid("fix-single");
    let leases = "lanes:{c:fix-single}:leases";
    let tokens = "lanes:{c:fix-single}:tokens";
    let kept = |keys: &BTreeMap<String, Value>, key: &str| -> Vec<String> {
        keys.get(key)
            .and_then(|k| k["value"].as_object())
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    assert_eq!(kept(&old, leases).len(), 1, "the fixture holds one lease");

    // The lease kept apart is listed, renewed and completed.
    let now = T0 + 60_000;
    let status = store.status(&c, now).await.expect("status");
    assert_eq!(status.in_flight.len(), 1, "{:?}", status.in_flight);
    let held = status.in_flight[0].clone();
    let tid = held.token.trial_id.to_string();
    let renewed = store
        .renew(
            &c,
            vec![(held.token.clone(), lanes_common::row::Phase::Agent)],
            now,
        )
        .await
        .expect("renew");
    assert_eq!(renewed[0].1, lanes_coordinator::store::RenewState::Renewed);
    let after = dump(&url).await;
    assert!(
        kept(&after, leases).is_empty(),
        "the renewal folded the lease into the trial's record"
    );
    assert!(
        !kept(&after, tokens)
            .iter()
            .any(|f| f.starts_with(&format!("{tid}#"))),
        "and its token records"
    );
    assert_eq!(
        after["lanes:{c:fix-single}:trials"]["value"][&tid]["record"],
        "trial record"
    );
    let status = store.status(&c, now).await.expect("status");
    assert_eq!(
        status.in_flight.len(),
        1,
        "still listed once: {:?}",
        status.in_flight
    );
    let ack = store
        .complete(
            &c,
            support::scored(
                &held.token,
                held.lane.as_str(),
                held.host.as_str(),
                lanes_common::row::Status::Completed,
                1.0,
            ),
            now,
        )
        .await
        .expect("complete");
    assert!(ack.counted && !ack.duplicate, "{ack:?}");
    assert!(
        store
            .status(&c, now)
            .await
            .expect("status")
            .in_flight
            .is_empty()
    );

    // An outcome delivered again for a token whose record was kept apart gets the answer
    // recorded then, and writes no row.
    let apart = kept(&after, tokens);
    let (rows, _) = read_back(&store, &c).await;
    let field = apart.first().expect("token records kept apart");
    let (trial, attempt) = field.rsplit_once('#').expect("trial#attempt");
    let token = lanes_common::ids::Token {
        trial_id: lanes_common::ids::TrialId::new(trial).expect("a trial id"),
        attempt: attempt.parse().expect("an attempt"),
    };
    let stored = &after[tokens]["value"][field]["json"];
    let again = store
        .complete(
            &c,
            support::scored(
                &token,
                "lane-9",
                "host-9",
                lanes_common::row::Status::Completed,
                0.5,
            ),
            now,
        )
        .await
        .expect("complete again");
    assert_eq!(
        again.seq,
        stored["ack"]["seq"].as_u64().expect("a seq"),
        "{stored}"
    );
    assert_eq!(read_back(&store, &c).await.0, rows, "no new row");
}

/// The steps from layouts 2, 3 and 4 rewrite nothing: the old entries are read as they are,
/// beside the new ones.
async fn an_older_store_is_stamped_and_its_ledger_reads_whole_beside_new_entries(from: u32) {
    let (server, old) = store_of(from).await;
    let url = server.url();
    let err = connect(&url).await.expect_err("an older store");
    assert!(
        matches!(
            &err,
            StoreError::Layout(LayoutError::Older { found, .. }) if *found == from
        ),
        "{err:?}"
    );
    let report = migrate(&url, false).await;
    assert_eq!(report.recorded, Recorded::Layout(from));
    assert!(
        report.migrated.is_empty() && report.already == 0,
        "{report:?}"
    );
    assert!(
        report.to_string().contains(&format!(
            "layout {from} -> {REDIS_LAYOUT}: no campaign to rewrite, stamped with layout {REDIS_LAYOUT}"
        )),
        "{report}"
    );
    assert!(
        dump(&url).await == with_layout(old, REDIS_LAYOUT),
        "only the layout record changes"
    );

    let store = connect(&url).await.expect("a migrated store is served");
    let c = cid("fix-single");
    let (rows, events) = read_back(&store, &c).await;
    assert_eq!(rows, 4, "the layout {from} ledger");

    // Claims, then their outcomes at once: an outcome's events share one entry, and outcomes
    // in one round share their rows' entry.
    let now = T0 + 60_000;
    let mut assigned = Vec::new();
    for lane in ["lane-7", "lane-8", "lane-9"] {
        match store
            .claim(&c, support::request(lane, "host-9", 1), now)
            .await
            .expect("claim")
        {
            lanes_coordinator::store::ClaimOutcome::Assigned(a) => assigned.extend(a),
            // The rest waits for phase 1 to end.
            lanes_coordinator::store::ClaimOutcome::NoWork { .. } => break,
        }
    }
    assert!(!assigned.is_empty(), "the fixture holds work to claim");
    let mut done = tokio::task::JoinSet::new();
    for a in &assigned {
        let (store, c) = (store.clone(), c.clone());
        let outcome = support::scored(
            &a.trials[0].token,
            "lane-9",
            "host-9",
            lanes_common::row::Status::Completed,
            1.0,
        );
        done.spawn(async move { store.complete(&c, outcome, now).await });
    }
    for d in done.join_all().await {
        d.expect("complete");
    }
    let stream = server.command(&["XLEN", "lanes:{c:fix-single}:events"]);
    let (rows_after, events_after) = read_back(&store, &c).await;
    assert_eq!(rows_after, rows + assigned.len());
    assert!(
        events_after > events + assigned.len(),
        "{events} -> {events_after}"
    );
    let entries: usize = stream.trim_start_matches(':').parse().expect("XLEN");
    assert!(
        entries < events_after,
        "some new entry holds several events: {entries} entries, {events_after} events"
    );
    // The commits since wrote their trial states in binary, beside the fixture's JSON ones
    // (the reads of both kinds are `hot_record.rs`'s unit tests).
    let trials = &dump(&url).await["lanes:{c:fix-single}:trials"]["value"];
    let forms: Vec<bool> = trials
        .as_object()
        .expect("a hash")
        .values()
        .map(|v| v.get("record").is_some())
        .collect();
    assert!(forms.contains(&true), "{trials}");
    assert!(forms.contains(&false), "{trials}");
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
                current: REDIS_LAYOUT,
                ..
            })
        ),
        "{err:?}"
    );
    let text = err.to_string();
    for want in [
        "has layout 1",
        &format!("uses layout {REDIS_LAYOUT}"),
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
    let newer = REDIS_LAYOUT + 1;
    assert_eq!(
        server.command(&["SET", "lanes:layout", &newer.to_string()]),
        "+OK"
    );
    let err = connect(&server.url()).await.expect_err("a newer store");
    assert!(
        matches!(
            &err,
            StoreError::Layout(LayoutError::Newer { found, current, .. })
                if *found == newer && *current == REDIS_LAYOUT
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "layout {newer}, which is newer than this coordinator's layout {REDIS_LAYOUT}"
        )) && text.contains("upgrade the coordinator"),
        "{text}"
    );
    let err = RedisStore::migrate(&server.url(), RedisOptions::default(), false)
        .await
        .expect_err("no migration down");
    assert!(
        matches!(err, StoreError::Layout(LayoutError::Newer { .. })),
        "{err:?}"
    );
    assert_eq!(server.command(&["GET", "lanes:layout"]), newer.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_store_is_stamped_with_the_current_layout() {
    let server = RedisServer::start();
    assert_eq!(server.command(&["GET", "lanes:layout"]), "$-1");
    connect(&server.url()).await.expect("an empty store");
    assert_eq!(
        server.command(&["GET", "lanes:layout"]),
        REDIS_LAYOUT.to_string()
    );
    // A second replica finds it stamped.
    connect(&server.url()).await.expect("a stamped store");

    // `migrate` stamps an empty store too.
    let other = RedisServer::start();
    let report = migrate(&other.url(), false).await;
    assert_eq!(report.recorded, Recorded::Empty);
    assert_eq!(
        other.command(&["GET", "lanes:layout"]),
        REDIS_LAYOUT.to_string()
    );
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
    assert_eq!(again.recorded, Recorded::Layout(REDIS_LAYOUT));
    assert!(again.migrated.is_empty());
    assert!(
        again
            .to_string()
            .contains(&format!("already at layout {REDIS_LAYOUT}")),
        "{again}"
    );
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
    assert!(dump(&url).await == migrated_v1());
}
