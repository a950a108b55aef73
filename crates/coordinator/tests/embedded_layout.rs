//! The embedded store's layout record (the redb table `layout`) and `lanes store migrate
//! --data-dir`: a fresh or unversioned file is stamped, a newer layout is refused by `open`
//! and by `migrate`, the migration is idempotent and its dry run writes nothing.

use std::path::Path;

use redb::{Database, ReadableDatabase, TableDefinition, TableHandle};

use lanes_coordinator::store::embedded::FILE_NAME;
use lanes_coordinator::store::layout::{EMBEDDED_LAYOUT, Recorded};
use lanes_coordinator::store::{EmbeddedStore, LayoutError, StoreError};

const LAYOUT: TableDefinition<'static, &'static str, u32> = TableDefinition::new("layout");

/// The recorded layout, read straight from the file (`None`: no layout table).
fn recorded(dir: &Path) -> Option<u32> {
    let db = Database::open(dir.join(FILE_NAME)).expect("open the file");
    let txn = db.begin_read().expect("a read");
    let has = txn
        .list_tables()
        .expect("tables")
        .any(|t| t.name() == "layout");
    has.then(|| {
        let t = txn.open_table(LAYOUT).expect("the layout table");
        t.get("version")
            .expect("get")
            .expect("a version row")
            .value()
    })
}

/// A file with the store's tables but no layout table: what the code before layouts wrote.
fn unversioned(dir: &Path) {
    EmbeddedStore::open(dir).expect("open");
    let db = Database::open(dir.join(FILE_NAME)).expect("open the file");
    let txn = db.begin_write().expect("a write");
    assert!(txn.delete_table(LAYOUT).expect("delete the layout table"));
    txn.commit().expect("commit");
}

fn set_layout(dir: &Path, layout: u32) {
    let db = Database::open(dir.join(FILE_NAME)).expect("open the file");
    let txn = db.begin_write().expect("a write");
    txn.open_table(LAYOUT)
        .expect("the layout table")
        .insert("version", layout)
        .expect("insert");
    txn.commit().expect("commit");
}

#[test]
fn a_fresh_store_is_stamped_and_an_unversioned_one_too() {
    let dir = tempfile::tempdir().unwrap();
    drop(EmbeddedStore::open(dir.path()).expect("a fresh store"));
    assert_eq!(recorded(dir.path()), Some(EMBEDDED_LAYOUT));

    let old = tempfile::tempdir().unwrap();
    unversioned(old.path());
    assert_eq!(recorded(old.path()), None);
    drop(EmbeddedStore::open(old.path()).expect("an unversioned store is layout 1"));
    assert_eq!(recorded(old.path()), Some(EMBEDDED_LAYOUT));
}

#[test]
fn a_newer_layout_is_refused_by_open_and_by_migrate_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    drop(EmbeddedStore::open(dir.path()).expect("a fresh store"));
    set_layout(dir.path(), 7);
    let err = EmbeddedStore::open(dir.path()).expect_err("a layout 7 store");
    assert!(
        matches!(
            &err,
            StoreError::Layout(LayoutError::Newer {
                found: 7,
                current: EMBEDDED_LAYOUT,
                ..
            })
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&format!("the embedded store in {}", dir.path().display()))
            && text.contains(&format!(
                "layout 7, which is newer than this coordinator's layout {EMBEDDED_LAYOUT}"
            ))
            && text.contains("upgrade the coordinator"),
        "{text}"
    );
    let err = EmbeddedStore::migrate(dir.path(), false).expect_err("no migration down");
    assert!(
        matches!(err, StoreError::Layout(LayoutError::Newer { .. })),
        "{err:?}"
    );
    assert_eq!(recorded(dir.path()), Some(7));
}

#[test]
fn migrate_stamps_an_unversioned_store_once_and_a_dry_run_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    unversioned(dir.path());
    let dry = EmbeddedStore::migrate(dir.path(), true).expect("dry run");
    assert!(
        dry.changes() && dry.recorded == Recorded::Unversioned,
        "{dry:?}"
    );
    assert_eq!(recorded(dir.path()), None, "a dry run writes nothing");

    let done = EmbeddedStore::migrate(dir.path(), false).expect("migrate");
    assert_eq!(done.recorded, Recorded::Unversioned);
    assert_eq!(recorded(dir.path()), Some(EMBEDDED_LAYOUT));
    let again = EmbeddedStore::migrate(dir.path(), false).expect("migrate again");
    assert!(!again.changes(), "{again:?}");
    assert!(
        again
            .to_string()
            .contains(&format!("already at layout {EMBEDDED_LAYOUT}")),
        "{again}"
    );
}

/// Layout 2 changed only how a started phase-2 verdict is written, so a layout 1 file is read
/// as it is: opening it stamps it, as `lanes store migrate` does (a dry run writes nothing).
#[test]
fn a_layout_1_file_is_stamped_by_open_and_by_migrate() {
    let dir = tempfile::tempdir().unwrap();
    drop(EmbeddedStore::open(dir.path()).expect("a fresh store"));
    set_layout(dir.path(), 1);
    let dry = EmbeddedStore::migrate(dir.path(), true).expect("dry run");
    assert!(
        dry.changes() && dry.recorded == Recorded::Layout(1),
        "{dry:?}"
    );
    assert_eq!(recorded(dir.path()), Some(1), "a dry run writes nothing");
    let done = EmbeddedStore::migrate(dir.path(), false).expect("migrate");
    assert_eq!(done.recorded, Recorded::Layout(1));
    assert_eq!(recorded(dir.path()), Some(EMBEDDED_LAYOUT));

    set_layout(dir.path(), 1);
    drop(EmbeddedStore::open(dir.path()).expect("a layout 1 store opens"));
    assert_eq!(recorded(dir.path()), Some(EMBEDDED_LAYOUT));
}

#[test]
fn migrate_needs_an_existing_store_that_nobody_has_open() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let err = EmbeddedStore::migrate(&missing, false).expect_err("no directory");
    assert!(err.to_string().contains("no data directory"), "{err}");
    let err = EmbeddedStore::migrate(dir.path(), false).expect_err("no store file");
    assert!(err.to_string().contains("no embedded store in"), "{err}");
    assert!(!dir.path().join(FILE_NAME).exists(), "nothing was created");

    let store = EmbeddedStore::open(dir.path()).expect("open");
    let err = EmbeddedStore::migrate(dir.path(), false).expect_err("the store is open");
    assert!(err.to_string().contains("is in use"), "{err}");
    drop(store);
}
