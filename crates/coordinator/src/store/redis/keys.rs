//! Key names. Every key of a campaign starts with `lanes:{c:<id>}:`, so the hash tag puts them
//! all in one Redis Cluster slot and one script may touch any of them. The fixed ones are built
//! once per transaction, not at each access.

use std::sync::Arc;

use lanes_common::ids::ArmId;

use crate::store::model::Queue;

/// The keys of one campaign.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
    version: String,
    meta: String,
    spec: String,
    tasks: String,
    task_pos: String,
    trials: String,
    leases: String,
    deadlines: String,
    delayed: String,
    tokens: String,
    blocks: String,
    scored: String,
    // Shared: every row and event written names its stream.
    results: Arc<str>,
    events: Arc<str>,
}

impl Keys {
    pub(crate) fn new(campaign: &str) -> Self {
        let prefix = format!("lanes:{{c:{campaign}}}:");
        let key = |name: &str| format!("{prefix}{name}");
        Self {
            version: key("ver"),
            meta: key("meta"),
            spec: key("spec"),
            tasks: key("tasks"),
            task_pos: key("task_pos"),
            trials: key("trials"),
            leases: key("leases"),
            deadlines: key("deadlines"),
            delayed: key("delayed"),
            tokens: key("tokens"),
            blocks: key("blocks"),
            scored: key("scored"),
            results: key("results").into(),
            events: key("events").into(),
            prefix,
        }
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    pub(crate) fn version(&self) -> String {
        self.version.clone()
    }
    pub(crate) fn lock(&self) -> String {
        self.key("lock")
    }
    /// The meta without the parts stored under the keys below (see `meta.rs`).
    pub(crate) fn meta(&self) -> String {
        self.meta.clone()
    }
    pub(crate) fn spec(&self) -> String {
        self.spec.clone()
    }
    /// Lane -> last seen (epoch ms).
    pub(crate) fn seen(&self) -> String {
        self.key("seen")
    }
    /// Recent costs of an arm's counted rows (a capped list).
    pub(crate) fn arm_costs(&self, arm: &ArmId) -> String {
        self.key(&format!("stat:cost:{arm}"))
    }
    /// Recent wall times of an arm's counted rows (a capped list).
    pub(crate) fn arm_walls(&self, arm: &ArmId) -> String {
        self.key(&format!("stat:wall:{arm}"))
    }
    /// Summed walls of recently finished blocks (a capped list).
    pub(crate) fn block_walls(&self) -> String {
        self.key("stat:block_walls")
    }
    pub(crate) fn tasks(&self) -> String {
        self.tasks.clone()
    }
    pub(crate) fn task_pos(&self) -> String {
        self.task_pos.clone()
    }
    pub(crate) fn trials(&self) -> String {
        self.trials.clone()
    }
    pub(crate) fn leases(&self) -> String {
        self.leases.clone()
    }
    pub(crate) fn deadlines(&self) -> String {
        self.deadlines.clone()
    }
    pub(crate) fn ready(&self, queue: &Queue) -> String {
        // Written into one string (a claim names its queue several times).
        use std::fmt::Write;
        let mut k = String::with_capacity(self.prefix.len() + 16);
        k.push_str(&self.prefix);
        // `ready_prefix`.
        k.push_str("ready:");
        let _ = write!(k, "{queue}");
        k
    }
    /// What every ready queue's key starts with.
    pub(crate) fn ready_prefix(&self) -> String {
        self.key("ready:")
    }
    pub(crate) fn queues(&self) -> String {
        self.key("queues")
    }
    pub(crate) fn delayed(&self) -> String {
        self.delayed.clone()
    }
    pub(crate) fn tokens(&self) -> String {
        self.tokens.clone()
    }
    /// First scored wins: `HSETNX scored <trial> <attempt>`; never expires, never deleted.
    pub(crate) fn scored(&self) -> String {
        self.scored.clone()
    }
    /// The ledger, a stream whose entries hold a commit's rows, packed (`packed.rs`), with
    /// the id of the last (see [`stream_id`]).
    pub(crate) fn results(&self) -> Arc<str> {
        self.results.clone()
    }
    pub(crate) fn events(&self) -> Arc<str> {
        self.events.clone()
    }
    pub(crate) fn blocks(&self) -> String {
        self.blocks.clone()
    }
}

/// The set of every campaign id (outside any campaign's slot; only listing reads it).
pub(crate) const CAMPAIGNS: &str = "lanes:campaigns";
/// The store-wide key lease secrets are derived with (hex), set once with `SET NX`.
pub(crate) const LEASE_KEY: &str = "lanes:lease_key";

/// A task folder, encoded: this prefix, then its `sha256:<hex>` digest. Set once (NX).
pub(crate) fn bundle(digest: &str) -> String {
    format!("lanes:bundle:{digest}")
}

/// A dashboard login code: this prefix, then the code's SHA-256 in hex. It expires by itself
/// (PX), and GETDEL takes it once.
pub(crate) fn login_code(digest: &[u8; 32]) -> String {
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("lanes:login_code:{hex}")
}

/// Items of one stream a stream entry holds at most: a commit writes more as several
/// entries. Readers rely on it (an `XRANGE` for some seqs is bounded by it, and an entry of
/// more is corrupt), so it can only grow with a new layout.
pub(crate) const ENTRY_ITEMS: usize = 1000;

/// A stream id for a sequence number: `0-<seq + 1>` (stream ids must be above `0-0`). An
/// entry's id is that of the last item it holds.
pub(crate) fn stream_id(seq: u64) -> String {
    format!("0-{}", seq + 1)
}

/// The seq of a stream entry id written by [`stream_id`].
pub(crate) fn seq_of(id: &str) -> Option<u64> {
    id.strip_prefix("0-")?.parse::<u64>().ok()?.checked_sub(1)
}
