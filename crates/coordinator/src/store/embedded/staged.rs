//! An operation's writes, held in memory until it succeeds. redb allows a savepoint only
//! before a transaction's first table is opened, so an operation sharing a transaction
//! with others cannot be rolled back there: it writes here instead, and the writer copies
//! these into the transaction (see [`super::batch::Batch::apply`]) only when the operation
//! returned `Ok`.

use std::collections::BTreeMap;
use std::ops::Bound;

use redb::TableHandle;

use super::Table;
use crate::store::api::Event;
use crate::store::model::Meta;

/// `Some(value)` for an insert, `None` for a removal.
pub(super) type Entries = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// Staged writes per table, later writes to a key replacing earlier ones.
#[derive(Default)]
pub(super) struct Staged {
    pub(super) tables: Vec<(Table, Entries)>,
    /// The campaign's meta, if the operation wrote it: kept decoded, the batch encodes it.
    pub(super) meta: Option<(Vec<u8>, Meta)>,
    /// The events the operation wrote (in its staged writes too, or straight into a solo
    /// operation's transaction): reported once the batch holding them has committed.
    pub(super) events: Vec<Event>,
}

impl Staged {
    fn entries(&self, table: Table) -> Option<&Entries> {
        self.tables
            .iter()
            .find(|(t, _)| t.name() == table.name())
            .map(|(_, e)| e)
    }

    /// `Some(staged)` if the operation wrote `k` (`Some(None)`: it removed it).
    pub(super) fn get(&self, table: Table, k: &[u8]) -> Option<Option<&[u8]>> {
        self.entries(table)?.get(k).map(|v| v.as_deref())
    }

    pub(super) fn put(&mut self, table: Table, k: Vec<u8>, v: Option<Vec<u8>>) {
        let i = match self
            .tables
            .iter()
            .position(|(t, _)| t.name() == table.name())
        {
            Some(i) => i,
            None => {
                self.tables.push((table, Entries::new()));
                self.tables.len() - 1
            }
        };
        self.tables[i].1.insert(k, v);
    }

    /// The staged writes with keys in `[start, end)` (`start < end`), in key order.
    pub(super) fn range<'s>(
        &'s self,
        table: Table,
        start: &[u8],
        end: &[u8],
    ) -> impl Iterator<Item = (&'s Vec<u8>, &'s Option<Vec<u8>>)> + 's {
        let bounds: (Bound<&[u8]>, Bound<&[u8]>) = (Bound::Included(start), Bound::Excluded(end));
        self.entries(table)
            .map(|e| e.range::<[u8], _>(bounds))
            .into_iter()
            .flatten()
    }

    pub(super) fn meta(&self) -> Option<&Meta> {
        self.meta.as_ref().map(|(_, m)| m)
    }

    pub(super) fn put_meta(&mut self, campaign: &[u8], meta: Meta) {
        self.meta = Some((campaign.to_vec(), meta));
    }
}
