//! Key names. Every key of a campaign starts with `lanes:{c:<id>}:`, so the hash tag puts them
//! all in one Redis Cluster slot and one script may touch any of them.

use crate::store::model::Queue;

/// The keys of one campaign.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(campaign: &str) -> Self {
        Self {
            prefix: format!("lanes:{{c:{campaign}}}:"),
        }
    }

    pub(crate) fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    pub(crate) fn version(&self) -> String {
        self.key("ver")
    }
    pub(crate) fn lock(&self) -> String {
        self.key("lock")
    }
    pub(crate) fn meta(&self) -> String {
        self.key("meta")
    }
    pub(crate) fn tasks(&self) -> String {
        self.key("tasks")
    }
    pub(crate) fn task_pos(&self) -> String {
        self.key("task_pos")
    }
    pub(crate) fn trials(&self) -> String {
        self.key("trials")
    }
    pub(crate) fn leases(&self) -> String {
        self.key("leases")
    }
    pub(crate) fn deadlines(&self) -> String {
        self.key("deadlines")
    }
    pub(crate) fn ready(&self, queue: &Queue) -> String {
        self.key(&format!("ready:{queue}"))
    }
    pub(crate) fn queues(&self) -> String {
        self.key("queues")
    }
    pub(crate) fn delayed(&self) -> String {
        self.key("delayed")
    }
    pub(crate) fn tokens(&self) -> String {
        self.key("tokens")
    }
    /// First scored wins: `HSETNX scored <trial> <attempt>`; never expires, never deleted.
    pub(crate) fn scored(&self) -> String {
        self.key("scored")
    }
    /// The ledger, a stream with ids `0-<seq + 1>`.
    pub(crate) fn results(&self) -> String {
        self.key("results")
    }
    pub(crate) fn events(&self) -> String {
        self.key("events")
    }
    pub(crate) fn blocks(&self) -> String {
        self.key("blocks")
    }
}

/// The set of every campaign id (outside any campaign's slot; only listing reads it).
pub(crate) const CAMPAIGNS: &str = "lanes:campaigns";
/// The store-wide key lease secrets are derived with (hex), set once with `SET NX`.
pub(crate) const LEASE_KEY: &str = "lanes:lease_key";

/// A stream id for a sequence number: `0-<seq + 1>` (stream ids must be above `0-0`).
pub(crate) fn stream_id(seq: u64) -> String {
    format!("0-{}", seq + 1)
}

/// The seq of a stream entry id written by [`stream_id`].
pub(crate) fn seq_of(id: &str) -> Option<u64> {
    id.strip_prefix("0-")?.parse::<u64>().ok()?.checked_sub(1)
}
