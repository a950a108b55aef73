//! The typed transaction a backend gives the engine: reads see the transaction's own writes,
//! and all writes commit together or not at all.

use lanes_common::ids::{TaskId, TrialId};
use lanes_common::row::Row;
use lanes_common::schedule::BlockName;
use lanes_common::spec::Task;
use lanes_common::utc::EpochMs;

use super::api::{Event, StoreError};
use super::model::{BlockState, Lease, Meta, Queue, TokenRecord, TrialState};

pub(crate) type R<T> = Result<T, StoreError>;

/// One campaign's keys within one atomic transaction.
#[allow(async_fn_in_trait)]
pub(crate) trait Tx {
    async fn meta(&mut self) -> R<Option<Meta>>;
    async fn put_meta(&mut self, meta: Meta) -> R<()>;

    async fn task(&mut self, pos: u32) -> R<Task>;
    async fn put_task(&mut self, pos: u32, task: &Task) -> R<()>;
    async fn tasks(&mut self) -> R<Vec<Task>>;
    async fn task_pos(&mut self, id: &TaskId) -> R<Option<u32>>;

    async fn trial(&mut self, id: &TrialId) -> R<Option<TrialState>>;
    async fn put_trial(&mut self, id: &TrialId, state: &TrialState) -> R<()>;
    /// Ids of every trial with a stored state.
    async fn trial_ids(&mut self) -> R<Vec<TrialId>>;

    // Two rules the engine keeps, which the Redis store relies on (it keeps a trial's lease
    // and token records in the trial's record, and lists leases from the deadline index): a
    // lease or token record is written for a trial whose state the same operation writes (or
    // wrote before), and every lease has exactly one deadline entry, at its `reap_at`.
    async fn lease(&mut self, trial: &TrialId) -> R<Option<Lease>>;
    async fn put_lease(&mut self, trial: &TrialId, lease: &Lease) -> R<()>;
    async fn del_lease(&mut self, trial: &TrialId) -> R<()>;
    async fn leases(&mut self) -> R<Vec<(TrialId, Lease)>>;

    async fn add_deadline(&mut self, at: EpochMs, trial: &TrialId) -> R<()>;
    async fn del_deadline(&mut self, at: EpochMs, trial: &TrialId) -> R<()>;
    /// Deadlines at or before `before`, oldest first.
    async fn deadlines_due(&mut self, before: EpochMs, limit: usize) -> R<Vec<(EpochMs, TrialId)>>;

    /// Adds the unit at position `key`; its kind is the queue's.
    async fn add_ready(&mut self, queue: &Queue, key: u64) -> R<()>;
    /// Whether the entry existed.
    async fn del_ready(&mut self, queue: &Queue, key: u64) -> R<bool>;
    /// The first keys of a queue, in key order.
    async fn ready_first(&mut self, queue: &Queue, limit: usize) -> R<Vec<u64>>;
    /// Every queue that ever held an entry, in name order.
    async fn queues(&mut self) -> R<Vec<Queue>>;

    async fn add_delayed(&mut self, at: EpochMs, trial: &TrialId) -> R<()>;
    async fn del_delayed(&mut self, at: EpochMs, trial: &TrialId) -> R<()>;
    async fn delayed_due(&mut self, now: EpochMs, limit: usize) -> R<Vec<(EpochMs, TrialId)>>;
    async fn delayed_next(&mut self) -> R<Option<EpochMs>>;

    async fn token(&mut self, trial: &TrialId, attempt: u32) -> R<Option<TokenRecord>>;
    async fn put_token(&mut self, trial: &TrialId, attempt: u32, record: &TokenRecord) -> R<()>;

    async fn put_row(&mut self, row: &Row) -> R<()>;
    async fn put_event(&mut self, event: &Event) -> R<()>;

    async fn block(&mut self, name: &BlockName) -> R<BlockState>;
    async fn put_block(&mut self, name: &BlockName, block: &BlockState) -> R<()>;
}
