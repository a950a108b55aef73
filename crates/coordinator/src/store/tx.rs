//! The typed transaction a backend gives the engine: reads see the transaction's own writes,
//! and all writes commit together or not at all.

use lanes_common::row::Row;
use lanes_common::spec::Task;
use lanes_common::utc::EpochMs;

use super::api::{Event, StoreError};
use super::model::{BlockState, Lease, Meta, TokenRecord, TrialState};

pub(crate) type R<T> = Result<T, StoreError>;

/// One campaign's keys within one atomic transaction.
pub(crate) trait Tx {
    fn meta(&mut self) -> R<Option<Meta>>;
    fn put_meta(&mut self, meta: &Meta) -> R<()>;

    fn task(&mut self, pos: u32) -> R<Task>;
    fn put_task(&mut self, pos: u32, task: &Task) -> R<()>;
    fn tasks(&mut self) -> R<Vec<Task>>;
    fn task_pos(&mut self, id: &str) -> R<Option<u32>>;

    fn trial(&mut self, id: &str) -> R<Option<TrialState>>;
    fn put_trial(&mut self, id: &str, state: &TrialState) -> R<()>;
    /// Ids of every trial with a stored state.
    fn trial_ids(&mut self) -> R<Vec<String>>;

    fn lease(&mut self, trial: &str) -> R<Option<Lease>>;
    fn put_lease(&mut self, trial: &str, lease: &Lease) -> R<()>;
    fn del_lease(&mut self, trial: &str) -> R<()>;
    fn leases(&mut self) -> R<Vec<(String, Lease)>>;

    fn add_deadline(&mut self, at: EpochMs, trial: &str) -> R<()>;
    fn del_deadline(&mut self, at: EpochMs, trial: &str) -> R<()>;
    /// Deadlines at or before `before`, oldest first.
    fn deadlines_due(&mut self, before: EpochMs, limit: usize) -> R<Vec<(EpochMs, String)>>;

    fn add_ready(&mut self, queue: &str, key: u64, unit: u8) -> R<()>;
    /// Whether the entry existed.
    fn del_ready(&mut self, queue: &str, key: u64) -> R<bool>;
    /// The first entries of a queue, in key order.
    fn ready_first(&mut self, queue: &str, limit: usize) -> R<Vec<(u64, u8)>>;
    fn queues(&mut self) -> R<Vec<String>>;

    fn add_delayed(&mut self, at: EpochMs, trial: &str) -> R<()>;
    fn del_delayed(&mut self, at: EpochMs, trial: &str) -> R<()>;
    fn delayed_due(&mut self, now: EpochMs, limit: usize) -> R<Vec<(EpochMs, String)>>;
    fn delayed_next(&mut self) -> R<Option<EpochMs>>;

    fn token(&mut self, trial: &str, attempt: u32) -> R<Option<TokenRecord>>;
    fn put_token(&mut self, trial: &str, attempt: u32, record: &TokenRecord) -> R<()>;

    fn put_row(&mut self, row: &Row) -> R<()>;
    fn put_event(&mut self, event: &Event) -> R<()>;

    fn block(&mut self, name: &str) -> R<BlockState>;
    fn put_block(&mut self, name: &str, block: &BlockState) -> R<()>;
}
