//! The embedded store's layout record: the redb table `layout`, whose one row `version` holds
//! the layout of the file. Checked (and written on a fresh or unversioned file) when the
//! store opens, and by `lanes store migrate --data-dir`.

use std::path::Path;

use redb::{
    Database, DatabaseError, ReadableTable, TableDefinition, TableHandle, WriteTransaction,
};

use super::{FILE_NAME, backend};
use crate::store::api::StoreError;
use crate::store::layout::{EMBEDDED_LAYOUT, LayoutError, MigrationReport, Recorded, StoreAt};
use crate::store::tx::R;

const LAYOUT: TableDefinition<'static, &'static str, u32> = TableDefinition::new("layout");
const ROW: &str = "version";

/// What the file records: no table at all is a fresh file; tables without `layout` are the
/// layout from before layouts were recorded.
fn recorded(txn: &WriteTransaction) -> R<Recorded> {
    let mut tables = txn.list_tables().map_err(backend)?.peekable();
    if tables.peek().is_none() {
        return Ok(Recorded::Empty);
    }
    if !tables.any(|t| t.name() == LAYOUT.name()) {
        return Ok(Recorded::Unversioned);
    }
    let table = txn.open_table(LAYOUT).map_err(backend)?;
    let row = table.get(ROW).map_err(backend)?;
    match row.map(|v| v.value()) {
        Some(n) if n >= 1 => Ok(Recorded::Layout(n)),
        other => Err(StoreError::Corrupt(format!(
            "the layout table holds {other:?}, not a layout"
        ))),
    }
}

fn stamp(txn: &WriteTransaction, layout: u32) -> R<()> {
    let mut table = txn.open_table(LAYOUT).map_err(backend)?;
    table.insert(ROW, layout).map_err(backend)?;
    Ok(())
}

/// When the store opens, in its first write transaction: stamps a fresh, unversioned or older
/// file with [`EMBEDDED_LAYOUT`]; refuses a newer layout.
pub(super) fn check(txn: &WriteTransaction, at: &StoreAt) -> R<()> {
    match recorded(txn)? {
        Recorded::Empty | Recorded::Unversioned => stamp(txn, EMBEDDED_LAYOUT),
        // Older layouts are read as they are (nothing to rewrite); the stamp makes an older
        // coordinator refuse the file from now on.
        Recorded::Layout(n) if n < EMBEDDED_LAYOUT => stamp(txn, EMBEDDED_LAYOUT),
        Recorded::Layout(n) => match LayoutError::check(at, n, EMBEDDED_LAYOUT) {
            None => Ok(()),
            Some(e) => Err(e.into()),
        },
    }
}

/// Upgrades the store in `dir` to [`EMBEDDED_LAYOUT`]. No layout so far needs its data
/// rewritten (layout 2 reads layout 1's), so this only records it, as opening the store does. redb locks an open file, so a coordinator or `lanes run` using the
/// store makes this fail instead of racing it.
pub(crate) fn migrate(dir: &Path, dry_run: bool) -> R<MigrationReport> {
    if !dir.is_dir() {
        return Err(backend(format!("no data directory {}", dir.display())));
    }
    let path = dir.join(FILE_NAME);
    if !path.is_file() {
        return Err(backend(format!(
            "no embedded store in {} (no {FILE_NAME})",
            dir.display()
        )));
    }
    let db = Database::open(&path).map_err(|e| match e {
        DatabaseError::DatabaseAlreadyOpen => backend(format!(
            "{} is in use (a running coordinator or `lanes run` has it open): stop it first",
            path.display()
        )),
        other => backend(format!("cannot open {}: {other}", path.display())),
    })?;
    let txn = db.begin_write().map_err(backend)?;
    let recorded = recorded(&txn)?;
    let store = StoreAt::Embedded(dir.to_owned());
    let report = MigrationReport {
        store: store.clone(),
        recorded,
        to: EMBEDDED_LAYOUT,
        migrated: Vec::new(),
        already: 0,
        dry_run,
    };
    match recorded {
        Recorded::Layout(n) if n == EMBEDDED_LAYOUT => {
            txn.abort().map_err(backend)?;
        }
        Recorded::Layout(n) if n > EMBEDDED_LAYOUT => {
            txn.abort().map_err(backend)?;
            return Err(LayoutError::Newer {
                store,
                found: n,
                current: EMBEDDED_LAYOUT,
            }
            .into());
        }
        Recorded::Empty | Recorded::Unversioned | Recorded::Layout(_) if dry_run => {
            txn.abort().map_err(backend)?;
        }
        Recorded::Empty | Recorded::Unversioned | Recorded::Layout(_) => {
            stamp(&txn, EMBEDDED_LAYOUT)?;
            txn.commit().map_err(backend)?;
        }
    }
    Ok(report)
}
