//! A trial's lease and token records, folded into its record (layout 6).
//!
//! Since layout 6 a trial's field in `trials` holds a [`TrialRecord`]: its state, its lease
//! and its tokens' records, so that a claim and a completion each write one field for the
//! trial, where layout 5 wrote its state, lease and token record to three hashes. A field
//! written before layout 6 holds the state alone (a trial state record, or JSON before layout
//! 5), and that trial's lease and token records stay in the `leases` and `tokens` hashes: the
//! form of the field says where they are. The first commit that writes such a trial moves them
//! into its record and deletes them from those hashes, in the same commit, so a migrated store
//! needs no rewrite.
//!
//! A transaction decodes a trial's record once, when it first reads it (from its own pending
//! writes, the cache, then Redis), and keeps it decoded ([`Records`]): an operation reads and
//! writes a trial's state, lease and token records several times. A write changes the decoded
//! record and marks it; the marked records are encoded into the pending writes once, before
//! the next operation's savepoint and before the transaction's writes are used
//! ([`RedisTx::flush_records`]). A rollback forgets the decoded records, so they are read again
//! from what the pending writes hold after it.

use std::collections::BTreeMap;

// foldhash, not std's SipHash: an operation looks its trials up here several times.
use foldhash::{HashMap, HashSet};

use lanes_common::ids::TrialId;

use super::{RedisTx, corrupt, record, token_field, trial_id};
use crate::store::model::{Lease, TokenRecord, TrialState};
use crate::store::redis::hot_record::{Record, TrialRecord, decode, encode};
use crate::store::tx::R;

/// The trials' records this transaction decoded, and which of them changed since they were
/// last encoded into its pending writes.
#[derive(Default)]
pub(super) struct Records {
    decoded: HashMap<String, Stored>,
    changed: HashSet<String>,
}

impl Records {
    /// Forgets every decoded record (a rollback, or the writes dropped).
    pub(super) fn clear(&mut self) {
        self.decoded.clear();
        self.changed.clear();
    }

    /// Whether some record changed and is not in the pending writes yet.
    pub(super) fn changed(&self) -> bool {
        !self.changed.is_empty()
    }
}

/// A trial's field in `trials`, as stored.
pub(super) enum Stored {
    /// Layout 6: the state, lease and token records in one record.
    Folded(TrialRecord),
    /// Written before layout 6: the state alone; the lease and the token records are in the
    /// `leases` and `tokens` hashes.
    Apart(TrialState),
}

impl Stored {
    fn parse(bytes: &[u8]) -> R<Self> {
        match bytes.first() {
            Some(&TrialRecord::TAG) => decode(bytes).map(Stored::Folded).map_err(corrupt),
            _ => record(bytes).map(Stored::Apart),
        }
    }

    fn state(&self) -> &TrialState {
        match self {
            Stored::Folded(r) => &r.state,
            Stored::Apart(s) => s,
        }
    }
}

/// Whether stored bytes of a `trials` field keep their lease and token records apart.
pub(super) fn apart(bytes: &[u8]) -> bool {
    bytes.first() != Some(&TrialRecord::TAG)
}

/// More attempts than this in a trial stored apart is corrupt data: folding it would read a
/// token record for each.
const MAX_ATTEMPTS_APART: u32 = 100_000;

/// The index of `attempt` in a record's token records (attempts count from 1).
fn slot(attempt: u32) -> R<usize> {
    (attempt as usize)
        .checked_sub(1)
        .ok_or_else(|| corrupt("a token of attempt 0"))
}

impl RedisTx {
    /// The trial's field, as this transaction sees it, decoded once per transaction.
    async fn stored(&mut self, trial: &TrialId) -> R<Option<&Stored>> {
        if !self.records.decoded.contains_key(trial.as_str()) {
            let key = self.keys.trials();
            match self.hget_with(&key, trial.as_str(), Stored::parse).await? {
                Some(s) => self.records.decoded.insert(trial.to_string(), s),
                None => return Ok(None),
            };
        }
        Ok(self.records.decoded.get(trial.as_str()))
    }

    /// A lease stored apart (before layout 6).
    async fn lease_apart(&mut self, trial: &TrialId) -> R<Option<Lease>> {
        let key = self.keys.leases();
        self.hget_with(&key, trial.as_str(), record).await
    }

    /// A token record stored apart (before layout 6).
    async fn token_apart(&mut self, trial: &TrialId, attempt: u32) -> R<Option<TokenRecord>> {
        let key = self.keys.tokens();
        self.hget_with(&key, &token_field(trial.as_str(), attempt), record)
            .await
    }

    /// The trial's record, to change and then [`Self::write_record`]: a new one for a trial
    /// never written, and for one stored apart, its state with its lease and token records
    /// moved in (and deleted from their hashes by the same commit).
    async fn record_mut(&mut self, trial: &TrialId) -> R<&mut TrialRecord> {
        let state = match self.stored(trial).await? {
            Some(Stored::Folded(_)) => None,
            Some(Stored::Apart(state)) => Some(state.clone()),
            None => {
                self.records
                    .decoded
                    .insert(trial.to_string(), Stored::Folded(TrialRecord::default()));
                None
            }
        };
        if let Some(state) = state {
            if state.attempts > MAX_ATTEMPTS_APART {
                return Err(corrupt(format!(
                    "trial {trial} has {} attempts",
                    state.attempts
                )));
            }
            let lease = self.lease_apart(trial).await?;
            // Its token records in one read, then one by one from the cache.
            let fields = (1..=state.attempts)
                .map(|a| token_field(trial.as_str(), a))
                .collect();
            self.read_ahead(vec![(self.keys.tokens(), fields)]).await?;
            let mut tokens = Vec::with_capacity(state.attempts as usize);
            for attempt in 1..=state.attempts {
                tokens.push(self.token_apart(trial, attempt).await?);
                self.writes.hset(
                    self.keys.tokens(),
                    token_field(trial.as_str(), attempt),
                    None,
                );
            }
            if lease.is_some() {
                self.writes
                    .hset(self.keys.leases(), trial.to_string(), None);
            }
            let folded = TrialRecord {
                state,
                lease,
                tokens,
            };
            self.records
                .decoded
                .insert(trial.to_string(), Stored::Folded(folded));
        }
        match self.records.decoded.get_mut(trial.as_str()) {
            Some(Stored::Folded(r)) => Ok(r),
            _ => unreachable!("folded just above"),
        }
    }

    /// Marks the trial's decoded record as changed, to be written back.
    fn write_record(&mut self, trial: &TrialId) {
        if !self.records.changed.contains(trial.as_str()) {
            self.records.changed.insert(trial.to_string());
        }
    }

    /// Writes the changed records into the pending writes, encoded.
    pub(super) fn flush_records(&mut self) {
        for trial in std::mem::take(&mut self.records.changed) {
            if let Some(Stored::Folded(r)) = self.records.decoded.get(&trial) {
                let bytes = encode(r);
                self.writes.hset(self.keys.trials(), trial, Some(bytes));
            }
        }
    }

    pub(super) async fn state_of(&mut self, trial: &TrialId) -> R<Option<TrialState>> {
        Ok(self.stored(trial).await?.map(|s| s.state().clone()))
    }

    pub(super) async fn put_state(&mut self, trial: &TrialId, state: &TrialState) -> R<()> {
        self.record_mut(trial).await?.state = state.clone();
        self.write_record(trial);
        Ok(())
    }

    pub(super) async fn lease_of(&mut self, trial: &TrialId) -> R<Option<Lease>> {
        match self.stored(trial).await? {
            Some(Stored::Folded(r)) => Ok(r.lease.clone()),
            Some(Stored::Apart(_)) => self.lease_apart(trial).await,
            // A lease is only written with its trial's state.
            None => Ok(None),
        }
    }

    pub(super) async fn set_lease(&mut self, trial: &TrialId, lease: Option<&Lease>) -> R<()> {
        if lease.is_none() && self.stored(trial).await?.is_none() {
            return Ok(());
        }
        self.record_mut(trial).await?.lease = lease.cloned();
        self.write_record(trial);
        Ok(())
    }

    /// Every lease: those stored apart (their hash), and those of the trials in the deadline
    /// index (each lease has one entry there), by trial id.
    pub(super) async fn all_leases(&mut self) -> R<Vec<(TrialId, Lease)>> {
        let key = self.keys.leases();
        let mut all = BTreeMap::new();
        for (f, v) in self.hgetall(&key).await? {
            all.insert(trial_id(f)?, record(&v)?);
        }
        let key = self.keys.deadlines();
        let (indexed, _) = self.zrange(&key, None, usize::MAX).await?;
        let ids: Vec<String> = indexed.into_iter().map(|(m, _)| m).collect();
        self.read_ahead(vec![(self.keys.trials(), ids.clone())])
            .await?;
        for id in ids {
            let id = trial_id(id)?;
            if let Some(Stored::Folded(TrialRecord {
                lease: Some(lease), ..
            })) = self.stored(&id).await?
            {
                let lease = lease.clone();
                all.insert(id, lease);
            }
        }
        Ok(all.into_iter().collect())
    }

    pub(super) async fn token_of(
        &mut self,
        trial: &TrialId,
        attempt: u32,
    ) -> R<Option<TokenRecord>> {
        let i = slot(attempt)?;
        match self.stored(trial).await? {
            Some(Stored::Folded(r)) => Ok(r.tokens.get(i).cloned().flatten()),
            Some(Stored::Apart(_)) => self.token_apart(trial, attempt).await,
            // A token record is only written with its trial's state.
            None => Ok(None),
        }
    }

    pub(super) async fn set_token(
        &mut self,
        trial: &TrialId,
        attempt: u32,
        token: &TokenRecord,
    ) -> R<()> {
        let i = slot(attempt)?;
        let r = self.record_mut(trial).await?;
        if r.tokens.len() <= i {
            r.tokens.resize(i + 1, None);
        }
        r.tokens[i] = Some(token.clone());
        self.write_record(trial);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use lanes_common::ids::{HostName, LaneName};
    use lanes_common::row::Phase;
    use lanes_tests::redis_server::RedisServer;

    use crate::store::redis::{RedisOptions, RedisStore};
    use crate::store::tx::Tx;

    use super::*;

    fn lease() -> Lease {
        Lease {
            attempt: 2,
            lane: LaneName::new("lane-1").unwrap(),
            host: HostName::new("host-1").unwrap(),
            worker: "w".into(),
            phase: Phase::Agent,
            deadline_ms: 10,
            hard_deadline_ms: 20,
            heartbeat_seen: false,
            claimed_ms: 5,
            reserved_usd: 0.0,
            paired: false,
            cancel_requested: false,
            revoked: false,
            grace_until_ms: None,
        }
    }

    fn state(attempts: u32) -> TrialState {
        TrialState {
            attempts,
            ..TrialState::default()
        }
    }

    /// An operation of a round that fails is rolled back to its savepoint: the decoded records
    /// it changed must read as they were, not as it left them.
    #[tokio::test]
    async fn a_rollback_takes_back_the_changes_of_decoded_records() {
        let server = RedisServer::start();
        let store = RedisStore::connect(&server.url(), RedisOptions::default())
            .await
            .unwrap();
        let mut tx = store.begin("fold", false, None).await.unwrap();
        let t = TrialId::new("t1.r0.a").unwrap();
        tx.put_trial(&t, &state(1)).await.unwrap();
        tx.put_token(&t, 1, &TokenRecord::default()).await.unwrap();
        let sp = tx.savepoint();
        tx.put_lease(&t, &lease()).await.unwrap();
        tx.put_token(&t, 2, &TokenRecord::default()).await.unwrap();
        tx.put_trial(&t, &state(2)).await.unwrap();
        assert_eq!(tx.trial(&t).await.unwrap(), Some(state(2)));
        assert_eq!(tx.lease(&t).await.unwrap(), Some(lease()));
        tx.rollback(sp);
        assert_eq!(tx.trial(&t).await.unwrap(), Some(state(1)));
        assert_eq!(tx.lease(&t).await.unwrap(), None);
        assert_eq!(tx.token(&t, 1).await.unwrap(), Some(TokenRecord::default()));
        assert_eq!(tx.token(&t, 2).await.unwrap(), None);
        // What is committed is the record as of the savepoint.
        tx.prepare(&store.script).unwrap();
        let stored = tx.writes.hashes[&tx.keys.trials()][t.as_str()].clone();
        let stored: TrialRecord = decode(&stored.unwrap()).unwrap();
        assert_eq!(
            stored,
            TrialRecord {
                state: state(1),
                lease: None,
                tokens: vec![Some(TokenRecord::default())],
            }
        );
    }
}
