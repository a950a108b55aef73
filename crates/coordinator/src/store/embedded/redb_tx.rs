//! One operation's view of the batch's write transaction: reads see the transaction (the
//! batch's earlier operations included) under the operation's own staged writes; writes are
//! staged, and reach the transaction only once the operation succeeded (see [`Staged`]).
//!
//! Keys are byte strings, `<campaign> 0x00 <fields>`, with integers big-endian (signed ones
//! with their sign bit flipped) so byte order is numeric order and a campaign is a prefix.

use redb::ReadableTable;
use serde::Serialize;
use serde::de::DeserializeOwned;

use lanes_common::ids::{TaskId, TrialId};
use lanes_common::row::Row;
use lanes_common::schedule::BlockName;
use lanes_common::spec::Task;
use lanes_common::utc::EpochMs;

use super::batch::Batch;
use super::staged::Staged;
use super::{
    BLOCKS, DEADLINES, DELAYED, EVENTS, LEASES, READY, ROWS, TASK_POS, TASKS, TOKENS, TRIALS,
    Table, backend, corrupt,
};
use crate::store::api::Event;
use crate::store::model::{BlockState, Lease, Meta, Queue, TokenRecord, TrialState};
use crate::store::tx::{R, Tx};

pub(super) fn prefix(campaign: &[u8]) -> Vec<u8> {
    let mut k = campaign.to_vec();
    k.push(0);
    k
}

pub(super) fn key(campaign: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut k = prefix(campaign);
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            k.push(0);
        }
        k.extend_from_slice(p);
    }
    k
}

/// The smallest key greater than every key starting with `p`.
pub(super) fn prefix_end(p: &[u8]) -> Vec<u8> {
    let mut e = p.to_vec();
    e.push(0xff);
    e
}

fn signed(v: i64) -> [u8; 8] {
    ((v as u64) ^ (1 << 63)).to_be_bytes()
}

fn unsigned_back(b: &[u8]) -> R<i64> {
    let arr: [u8; 8] = b.try_into().map_err(|_| corrupt("bad time key"))?;
    Ok((u64::from_be_bytes(arr) ^ (1 << 63)) as i64)
}

/// A write batch seen through one campaign's keys, with the operation's writes staged.
pub(crate) struct RedbTx<'a, 't> {
    batch: &'a mut Batch<'t>,
    campaign: &'a [u8],
    staged: Staged,
    /// The operation runs alone in its transaction: its table writes go straight into it
    /// (the writer rolls the whole transaction back if the operation fails), so a submit of
    /// a million trials is not held in memory as staged writes first.
    direct: bool,
}

impl<'a, 't> RedbTx<'a, 't> {
    pub(super) fn new(batch: &'a mut Batch<'t>, campaign: &'a [u8], direct: bool) -> Self {
        Self {
            batch,
            campaign,
            staged: Staged::default(),
            direct,
        }
    }

    /// Removes every key of this campaign. Only an operation alone in its transaction may
    /// (it writes straight into it, and nothing else of the campaign is staged).
    pub(super) fn delete_campaign(&mut self) -> R<()> {
        if !self.direct {
            return Err(backend(
                "a campaign is deleted only by an operation of its own",
            ));
        }
        self.batch.delete_campaign(self.campaign)
    }

    /// The operation's writes, to apply once it succeeded.
    pub(super) fn into_staged(self) -> Staged {
        self.staged
    }

    /// The value under `k`: the staged one if the operation wrote it, else the transaction's.
    pub(super) fn get_raw(&self, table: Table, k: &[u8]) -> R<Option<Vec<u8>>> {
        if let Some(v) = self.staged.get(table, k) {
            return Ok(v.map(<[u8]>::to_vec));
        }
        let t = self.batch.table(table)?;
        Ok(t.get(k).map_err(backend)?.map(|v| v.value().to_vec()))
    }

    /// Decodes straight from the staged value or the stored page, copying no bytes.
    fn get<T: DeserializeOwned>(&self, table: Table, k: &[u8]) -> R<Option<T>> {
        let decode = |v: &[u8]| serde_json::from_slice(v).map_err(corrupt);
        if let Some(v) = self.staged.get(table, k) {
            return v.map(decode).transpose();
        }
        let t = self.batch.table(table)?;
        t.get(k)
            .map_err(backend)?
            .map(|v| decode(v.value()))
            .transpose()
    }

    fn put<T: Serialize>(&mut self, table: Table, k: &[u8], v: &T) -> R<()> {
        let bytes = serde_json::to_vec(v).map_err(backend)?;
        if self.direct {
            return self.batch.write(table, k, Some(&bytes));
        }
        self.staged.put(table, k.to_vec(), Some(bytes));
        Ok(())
    }

    pub(super) fn put_raw(&mut self, table: Table, k: &[u8], v: &[u8]) -> R<()> {
        if self.direct {
            return self.batch.write(table, k, Some(v));
        }
        self.staged.put(table, k.to_vec(), Some(v.to_vec()));
        Ok(())
    }

    /// Whether the key was there.
    pub(super) fn del(&mut self, table: Table, k: &[u8]) -> R<bool> {
        let existed = self.get_raw(table, k)?.is_some();
        if existed {
            if self.direct {
                self.batch.write(table, k, None)?;
            } else {
                self.staged.put(table, k.to_vec(), None);
            }
        }
        Ok(existed)
    }

    /// Keys (without the first `strip` bytes) and values in `[start, end)`, at most `limit`:
    /// the transaction's entries merged with the staged writes, in key order.
    fn scan(
        &self,
        table: Table,
        strip: usize,
        start: &[u8],
        end: &[u8],
        limit: usize,
    ) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        if start >= end {
            return Ok(out);
        }
        let t = self.batch.table(table)?;
        let mut stored = t.range(start..end).map_err(backend)?;
        // Every key in the range starts with the `strip` bytes of `start`, so entries are
        // kept, and compared, without them.
        let mut next_stored = || -> R<Option<(Vec<u8>, Vec<u8>)>> {
            stored
                .next()
                .transpose()
                .map_err(backend)
                .map(|e| e.map(|(k, v)| (k.value()[strip..].to_vec(), v.value().to_vec())))
        };
        let mut staged = self.staged.range(table, start, end).peekable();
        let mut from_store = next_stored()?;
        while out.len() < limit {
            let staged_first = match (staged.peek(), &from_store) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((sk, _)), Some((dk, _))) => &sk[strip..] <= dk.as_slice(),
            };
            if staged_first {
                let Some((k, v)) = staged.next() else { break };
                // A staged write replaces the stored entry under the same key.
                if from_store
                    .as_ref()
                    .is_some_and(|(dk, _)| dk.as_slice() == &k[strip..])
                {
                    from_store = next_stored()?;
                }
                if let Some(v) = v {
                    out.push((k[strip..].to_vec(), v.clone()));
                }
            } else if let Some(entry) = from_store.take() {
                out.push(entry);
                from_store = next_stored()?;
            }
        }
        Ok(out)
    }

    pub(super) fn scan_prefix(
        &self,
        table: Table,
        p: &[u8],
        limit: usize,
    ) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
        self.scan(table, p.len(), p, &prefix_end(p), limit)
    }

    fn k(&self, parts: &[&[u8]]) -> Vec<u8> {
        key(self.campaign, parts)
    }
}

fn utf8(b: Vec<u8>) -> R<String> {
    String::from_utf8(b).map_err(corrupt)
}

/// Splits `<time:8> 0x00 <trial>`.
fn time_and_trial(k: Vec<u8>) -> R<(EpochMs, TrialId)> {
    if k.len() < 9 {
        return Err(corrupt("bad time key"));
    }
    Ok((unsigned_back(&k[..8])?, trial_id(utf8(k[9..].to_vec())?)?))
}

/// A stored trial id, checked as it is read back.
fn trial_id(s: String) -> R<TrialId> {
    TrialId::new(s).map_err(corrupt)
}

impl Tx for RedbTx<'_, '_> {
    async fn meta(&mut self) -> R<Option<Meta>> {
        match self.staged.meta() {
            Some(m) => Ok(Some(m.clone())),
            None => self.batch.meta(self.campaign),
        }
    }
    async fn put_meta(&mut self, meta: Meta) -> R<()> {
        self.staged.put_meta(self.campaign, meta);
        Ok(())
    }

    async fn task(&mut self, pos: u32) -> R<Task> {
        self.get(TASKS, &self.k(&[&pos.to_be_bytes()]))?
            .ok_or_else(|| corrupt(format!("task {pos} missing")))
    }
    async fn put_task(&mut self, pos: u32, task: &Task) -> R<()> {
        self.put(TASKS, &self.k(&[&pos.to_be_bytes()]), task)?;
        self.put_raw(
            TASK_POS,
            &self.k(&[task.id.as_str().as_bytes()]),
            &pos.to_be_bytes(),
        )
    }
    async fn tasks(&mut self) -> R<Vec<Task>> {
        self.scan_prefix(TASKS, &prefix(self.campaign), usize::MAX)?
            .into_iter()
            .map(|(_, v)| serde_json::from_slice(&v).map_err(corrupt))
            .collect()
    }
    async fn task_pos(&mut self, id: &TaskId) -> R<Option<u32>> {
        match self.get_raw(TASK_POS, &self.k(&[id.as_str().as_bytes()]))? {
            Some(v) => {
                let arr: [u8; 4] = v
                    .as_slice()
                    .try_into()
                    .map_err(|_| corrupt("bad task pos"))?;
                Ok(Some(u32::from_be_bytes(arr)))
            }
            None => Ok(None),
        }
    }

    async fn trial(&mut self, id: &TrialId) -> R<Option<TrialState>> {
        self.get(TRIALS, &self.k(&[id.as_str().as_bytes()]))
    }
    async fn put_trial(&mut self, id: &TrialId, state: &TrialState) -> R<()> {
        self.put(TRIALS, &self.k(&[id.as_str().as_bytes()]), state)
    }
    async fn trial_ids(&mut self) -> R<Vec<TrialId>> {
        self.scan_prefix(TRIALS, &prefix(self.campaign), usize::MAX)?
            .into_iter()
            .map(|(k, _)| trial_id(utf8(k)?))
            .collect()
    }

    async fn lease(&mut self, trial: &TrialId) -> R<Option<Lease>> {
        self.get(LEASES, &self.k(&[trial.as_str().as_bytes()]))
    }
    async fn put_lease(&mut self, trial: &TrialId, lease: &Lease) -> R<()> {
        self.put(LEASES, &self.k(&[trial.as_str().as_bytes()]), lease)
    }
    async fn del_lease(&mut self, trial: &TrialId) -> R<()> {
        self.del(LEASES, &self.k(&[trial.as_str().as_bytes()]))
            .map(drop)
    }
    async fn leases(&mut self) -> R<Vec<(TrialId, Lease)>> {
        self.scan_prefix(LEASES, &prefix(self.campaign), usize::MAX)?
            .into_iter()
            .map(|(k, v)| {
                Ok((
                    trial_id(utf8(k)?)?,
                    serde_json::from_slice(&v).map_err(corrupt)?,
                ))
            })
            .collect()
    }

    async fn add_deadline(&mut self, at: EpochMs, trial: &TrialId) -> R<()> {
        self.put_raw(
            DEADLINES,
            &self.k(&[&signed(at), trial.as_str().as_bytes()]),
            &[],
        )
    }
    async fn del_deadline(&mut self, at: EpochMs, trial: &TrialId) -> R<()> {
        self.del(
            DEADLINES,
            &self.k(&[&signed(at), trial.as_str().as_bytes()]),
        )
        .map(drop)
    }
    async fn deadlines_due(&mut self, before: EpochMs, limit: usize) -> R<Vec<(EpochMs, TrialId)>> {
        let p = prefix(self.campaign);
        let end = self.k(&[&signed(before.saturating_add(1))]);
        self.scan(DEADLINES, p.len(), &p, &end, limit)?
            .into_iter()
            .map(|(k, _)| time_and_trial(k))
            .collect()
    }

    async fn add_ready(&mut self, queue: &Queue, key: u64) -> R<()> {
        self.put_raw(
            READY,
            &self.k(&[queue.to_string().as_bytes(), &key.to_be_bytes()]),
            &[queue.unit().stored_byte()],
        )
    }
    async fn del_ready(&mut self, queue: &Queue, key: u64) -> R<bool> {
        self.del(
            READY,
            &self.k(&[queue.to_string().as_bytes(), &key.to_be_bytes()]),
        )
    }
    async fn ready_first(&mut self, queue: &Queue, limit: usize) -> R<Vec<u64>> {
        let mut p = self.k(&[queue.to_string().as_bytes()]);
        p.push(0);
        // The value (the unit's byte) is not read back: the queue says the kind.
        self.scan_prefix(READY, &p, limit)?
            .into_iter()
            .map(|(k, _)| {
                let arr: [u8; 8] = k
                    .as_slice()
                    .try_into()
                    .map_err(|_| corrupt("bad ready key"))?;
                Ok(u64::from_be_bytes(arr))
            })
            .collect()
    }
    async fn queues(&mut self) -> R<Vec<Queue>> {
        let mut out: Vec<Queue> = Vec::new();
        let p = prefix(self.campaign);
        let mut start = p.clone();
        loop {
            let found = self.scan(READY, p.len(), &start, &prefix_end(&p), 1)?;
            let Some((k, _)) = found.into_iter().next() else {
                return Ok(out);
            };
            let name_len = k.iter().position(|&b| b == 0).unwrap_or(k.len());
            let name = utf8(k[..name_len].to_vec())?;
            start = self.k(&[name.as_bytes()]);
            start.push(1);
            out.push(name.parse().map_err(corrupt)?);
        }
    }

    async fn add_delayed(&mut self, at: EpochMs, trial: &TrialId) -> R<()> {
        self.put_raw(
            DELAYED,
            &self.k(&[&signed(at), trial.as_str().as_bytes()]),
            &[],
        )
    }
    async fn del_delayed(&mut self, at: EpochMs, trial: &TrialId) -> R<()> {
        self.del(DELAYED, &self.k(&[&signed(at), trial.as_str().as_bytes()]))
            .map(drop)
    }
    async fn delayed_due(&mut self, now: EpochMs, limit: usize) -> R<Vec<(EpochMs, TrialId)>> {
        let p = prefix(self.campaign);
        let end = self.k(&[&signed(now.saturating_add(1))]);
        self.scan(DELAYED, p.len(), &p, &end, limit)?
            .into_iter()
            .map(|(k, _)| time_and_trial(k))
            .collect()
    }
    async fn delayed_next(&mut self) -> R<Option<EpochMs>> {
        let p = prefix(self.campaign);
        Ok(self
            .scan_prefix(DELAYED, &p, 1)?
            .into_iter()
            .next()
            .map(|(k, _)| time_and_trial(k))
            .transpose()?
            .map(|(t, _)| t))
    }

    async fn token(&mut self, trial: &TrialId, attempt: u32) -> R<Option<TokenRecord>> {
        self.get(
            TOKENS,
            &self.k(&[trial.as_str().as_bytes(), &attempt.to_be_bytes()]),
        )
    }
    async fn put_token(&mut self, trial: &TrialId, attempt: u32, record: &TokenRecord) -> R<()> {
        self.put(
            TOKENS,
            &self.k(&[trial.as_str().as_bytes(), &attempt.to_be_bytes()]),
            record,
        )
    }

    async fn put_row(&mut self, row: &Row) -> R<()> {
        self.put(ROWS, &self.k(&[&row.seq.to_be_bytes()]), row)
    }
    async fn put_event(&mut self, event: &Event) -> R<()> {
        self.put(EVENTS, &self.k(&[&event.seq.to_be_bytes()]), event)?;
        self.staged.events.push(event.clone());
        Ok(())
    }

    async fn block(&mut self, name: &BlockName) -> R<BlockState> {
        let name = name.as_str();
        Ok(self
            .get(BLOCKS, &self.k(&[name.as_bytes()]))?
            .unwrap_or_default())
    }
    async fn put_block(&mut self, name: &BlockName, block: &BlockState) -> R<()> {
        let name = name.as_str();
        self.put(BLOCKS, &self.k(&[name.as_bytes()]), block)
    }
}
