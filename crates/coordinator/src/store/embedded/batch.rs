//! One batch's write transaction as its operations see it: every table held open for the
//! whole batch (opening and closing a redb table per access costs more than most of the
//! accesses), and each campaign's meta kept decoded. The meta is the one value every
//! operation reads and most write, and it is large (it carries the spec and the recent
//! cost and wall-time lists): the batch decodes it once, hands each operation a copy, and
//! encodes it once, when the batch ends, instead of once per operation. The writer hands the
//! decoded metas a batch committed to the next batch, so a campaign's meta is decoded once
//! per writer, not once per batch (with 1,000 lanes seen it was most of a renewal's cost).

use std::collections::{BTreeMap, BTreeSet};

use redb::{ReadableTable, TableHandle, WriteTransaction};

use super::redb_tx::{prefix, prefix_end};
use super::staged::Staged;
use super::{ALL, META, SECRETS, Table, backend, corrupt};
use crate::store::model::Meta;
use crate::store::tx::R;

type Open<'t> = redb::Table<'t, &'static [u8], &'static [u8]>;

/// Decoded metas by campaign, as committed.
pub(super) type Metas = BTreeMap<Vec<u8>, Meta>;

/// Campaigns whose decoded meta the writer keeps between batches; past this, a batch starts
/// from none (a meta carries its spec, so this bounds the memory it holds).
const MAX_KEPT: usize = 64;

pub(super) struct Batch<'t> {
    /// In the order of [`ALL`].
    tables: Vec<Open<'t>>,
    /// Metas as the batch's applied operations left them (and as committed before them, for
    /// the campaigns the previous batches touched), by campaign.
    metas: Metas,
    /// Campaigns whose meta an applied operation changed: written by [`Self::finish`].
    dirty: BTreeSet<Vec<u8>>,
    wrote: bool,
    /// Metas this batch decoded from the file.
    decoded: u64,
}

impl<'t> Batch<'t> {
    /// The batch of `txn`, starting from `known`: metas as committed before it.
    pub(super) fn open(txn: &'t WriteTransaction, mut known: Metas) -> R<Self> {
        let tables = ALL
            .iter()
            .map(|t| txn.open_table(*t).map_err(backend))
            .collect::<R<_>>()?;
        if known.len() > MAX_KEPT {
            known.clear();
        }
        Ok(Self {
            tables,
            metas: known,
            dirty: BTreeSet::new(),
            wrote: false,
            decoded: 0,
        })
    }

    fn slot(table: Table) -> R<usize> {
        ALL.iter()
            .position(|t| t.name() == table.name())
            .ok_or_else(|| backend(format!("no table {}", table.name())))
    }

    pub(super) fn table(&self, table: Table) -> R<&Open<'t>> {
        Ok(&self.tables[Self::slot(table)?])
    }

    /// Writes straight into the transaction (`None` removes): for an operation that runs
    /// alone in its transaction, which is rolled back as a whole if the operation fails.
    pub(super) fn write(&mut self, table: Table, k: &[u8], v: Option<&[u8]>) -> R<()> {
        let t = &mut self.tables[Self::slot(table)?];
        match v {
            Some(v) => t.insert(k, v).map_err(backend)?,
            None => t.remove(k).map_err(backend)?,
        };
        self.wrote = true;
        Ok(())
    }

    /// The campaign's meta as the batch stands, decoded once per batch.
    pub(super) fn meta(&mut self, campaign: &[u8]) -> R<Option<Meta>> {
        if let Some(m) = self.metas.get(campaign) {
            return Ok(Some(m.clone()));
        }
        let meta: Meta = match self.table(META)?.get(campaign).map_err(backend)? {
            Some(bytes) => serde_json::from_slice(bytes.value()).map_err(corrupt)?,
            None => return Ok(None),
        };
        self.decoded += 1;
        self.metas.insert(campaign.to_vec(), meta.clone());
        Ok(Some(meta))
    }

    /// Removes every key of `campaign`: its meta (here and in the kept metas) and its range
    /// in every other campaign table. For an operation that runs alone in its transaction.
    pub(super) fn delete_campaign(&mut self, campaign: &[u8]) -> R<()> {
        let start = prefix(campaign);
        let end = prefix_end(&start);
        for (slot, table) in ALL.iter().enumerate() {
            let t = &mut self.tables[slot];
            if table.name() == META.name() {
                t.remove(campaign).map_err(backend)?;
            } else if table.name() != SECRETS.name() {
                t.retain_in::<&[u8], _>(start.as_slice()..end.as_slice(), |_, _| false)
                    .map_err(backend)?;
            }
        }
        self.metas.remove(campaign);
        self.dirty.remove(campaign);
        self.wrote = true;
        Ok(())
    }

    pub(super) fn metas_decoded(&self) -> u64 {
        self.decoded
    }

    /// Copies a succeeded operation's writes into the transaction.
    pub(super) fn apply(&mut self, staged: Staged) -> R<()> {
        let Staged { tables, meta, .. } = staged;
        for (table, entries) in tables {
            let t = &mut self.tables[Self::slot(table)?];
            for (k, v) in entries {
                match v {
                    Some(v) => t.insert(k.as_slice(), v.as_slice()).map_err(backend)?,
                    None => t.remove(k.as_slice()).map_err(backend)?,
                };
                self.wrote = true;
            }
        }
        if let Some((campaign, meta)) = meta {
            self.dirty.insert(campaign.clone());
            self.metas.insert(campaign, meta);
            self.wrote = true;
        }
        Ok(())
    }

    /// Writes the changed metas and closes the tables; answers whether the batch wrote
    /// anything (if not, there is nothing to commit), and the metas as they stand, which
    /// are the committed ones once the transaction commits.
    pub(super) fn finish(mut self) -> R<(bool, Metas)> {
        let slot = Self::slot(META)?;
        for campaign in std::mem::take(&mut self.dirty) {
            let meta = self
                .metas
                .get(&campaign)
                .ok_or_else(|| backend("a changed meta went missing"))?;
            let bytes = serde_json::to_vec(meta).map_err(backend)?;
            self.tables[slot]
                .insert(campaign.as_slice(), bytes.as_slice())
                .map_err(backend)?;
        }
        Ok((self.wrote, self.metas))
    }
}
