//! The records a backend persists, as JSON values under its own keys.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use lanes_common::ids::{ArmId, HostName, LaneName};
use lanes_common::policy::{Placement, TrialHistory};
use lanes_common::row::{ExcludedReason, Phase, Phase2Refusal, QuotaReading, Status};
use lanes_common::spec::CampaignSpec;
use lanes_common::state::{CampaignState, StopMode, StopReason};
use lanes_common::utc::EpochMs;

use super::api::{Amendment, CompleteAck};

/// How many recent values per arm feed medians and p95s.
pub(crate) const ARM_STATS_CAP: usize = 200;
/// How many finished blocks feed the phase-2 estimate.
pub(crate) const BLOCK_STATS_CAP: usize = 1000;

/// What one ready-queue entry stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// One trial.
    Trial,
    /// A whole run group: one trial per arm, leased together.
    Group,
}

impl Unit {
    /// The byte the embedded backend stores as an entry's value. Redis stores none: there the
    /// queue alone says the kind.
    pub(crate) fn stored_byte(self) -> u8 {
        match self {
            Unit::Trial => 0,
            Unit::Group => 1,
        }
    }
}

/// One of a campaign's ready queues: position keys of units waiting for a claim.
///
/// Its [`Display`](std::fmt::Display) is the name backends store (in keys and the set of
/// queues) and [`FromStr`] reads it back. The order is that of the names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Queue {
    /// Whole run groups, across every provider (only when `pairing = "group"`): `@group`.
    Groups,
    /// Single trials of one provider, fresh ones and every retry: `p:<provider>`.
    Provider(String),
}

const GROUPS_NAME: &str = "@group";
const PROVIDER_PREFIX: &str = "p:";

impl Queue {
    pub(crate) fn provider(name: &str) -> Self {
        Queue::Provider(name.to_owned())
    }

    /// The kind of every entry in this queue.
    pub(crate) fn unit(&self) -> Unit {
        match self {
            Queue::Groups => Unit::Group,
            Queue::Provider(_) => Unit::Trial,
        }
    }
}

impl std::fmt::Display for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Queue::Groups => f.write_str(GROUPS_NAME),
            Queue::Provider(p) => write!(f, "{PROVIDER_PREFIX}{p}"),
        }
    }
}

/// A stored queue name that names no queue: the data is corrupt.
#[derive(Debug, thiserror::Error)]
#[error("unknown ready queue {0:?}")]
pub(crate) struct UnknownQueue(String);

impl FromStr for Queue {
    type Err = UnknownQueue;

    fn from_str(name: &str) -> Result<Self, UnknownQueue> {
        if name == GROUPS_NAME {
            return Ok(Queue::Groups);
        }
        // Providers are never empty (the spec refuses it), so neither is a provider queue's.
        match name.strip_prefix(PROVIDER_PREFIX) {
            Some(p) if !p.is_empty() => Ok(Queue::provider(p)),
            _ => Err(UnknownQueue(name.to_owned())),
        }
    }
}

/// A value the copies of a meta share until one of them changes it (`make_mut` copies it
/// then): a backend hands the engine a copy of the meta for each operation, and the spec,
/// the capped lists and the lanes seen are most of its size. Serialized as the value itself.
#[derive(Debug, Default)]
pub(crate) struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(Arc::new(value))
    }

    /// Whether both share one value: then neither changed since one was cloned from the
    /// other, and comparing them costs nothing.
    pub(crate) fn is_same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<T: Clone> Shared<T> {
    /// The value, to change: copied first if another meta shares it.
    pub(crate) fn make_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T> std::ops::Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.as_ref().serialize(s)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Self::new)
    }
}

/// A campaign's state and counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Meta {
    pub spec: Shared<CampaignSpec>,
    pub spec_hash: String,
    pub amendments: Vec<Amendment>,
    pub n_tasks: u32,
    pub trials_total: u64,
    pub phase1_total: u64,
    pub blocks_total: u64,
    pub state: CampaignState,
    pub stop_reason: Option<StopReason>,
    pub stop_mode: Option<StopMode>,
    pub next_seq: u64,
    pub next_event: u64,
    pub spend_usd: f64,
    pub reserved_usd: f64,
    pub leases_open: u64,
    pub finals: u64,
    pub phase1_finals: u64,
    pub counted: u64,
    pub excluded: u64,
    pub not_started: u64,
    pub blocks_complete: u64,
    pub rows_by_status: BTreeMap<Status, u64>,
    /// Latest quota reading per provider.
    pub quotas: BTreeMap<String, QuotaReading>,
    /// Rate-limit pauses per provider, until epoch ms.
    pub paused_until: BTreeMap<String, EpochMs>,
    /// Recent costs of counted rows, per arm.
    pub arm_costs: Shared<BTreeMap<ArmId, Vec<f64>>>,
    /// Recent wall times of counted rows, per arm.
    pub arm_walls: Shared<BTreeMap<ArmId, Vec<f64>>>,
    /// Summed wall time of recently finished blocks.
    pub finished_block_walls: Shared<Vec<f64>>,
    /// Lanes that claimed or renewed recently, with when.
    pub lanes_seen: Shared<BTreeMap<String, EpochMs>>,
    pub created_ms: EpochMs,
}

/// Pushes `v` onto a capped list of recent values.
pub(crate) fn push_capped(list: &mut Vec<f64>, v: f64, cap: usize) {
    if cap == 0 {
        list.clear();
        return;
    }
    // Room first, then the push: a full list (often a fresh copy, exactly its length) does
    // not grow and copy itself only to drop its oldest item.
    if list.len() >= cap {
        let extra = list.len() + 1 - cap;
        list.drain(..extra);
    }
    list.push(v);
}

/// Where a queued trial waits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Queued {
    /// Ready at this time; `None` once it sits in a ready queue.
    pub delayed_until: Option<EpochMs>,
    pub placement: Placement,
    pub since_ms: EpochMs,
}

/// Why a trial is final.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct FinalMark {
    pub counted: bool,
    pub excluded_reason: Option<ExcludedReason>,
}

/// The mutable state of one trial. Absent means fresh: never claimed, in its initial queue.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct TrialState {
    /// The last attempt number issued.
    pub attempts: u32,
    pub history: TrialHistory,
    pub final_mark: Option<FinalMark>,
    /// A retry waiting in the delayed set or a single-trial ready queue.
    pub queued: Option<Queued>,
    pub rows: u32,
    /// The operator retry pass that requeued it, if any: its later rows say so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_pass: Option<u32>,
}

/// A trial's lease, held by one token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Lease {
    pub attempt: u32,
    pub lane: LaneName,
    pub host: HostName,
    pub worker: String,
    pub phase: Phase,
    pub deadline_ms: EpochMs,
    pub hard_deadline_ms: EpochMs,
    /// The lane has renewed at least once: the assignment reached it.
    pub heartbeat_seen: bool,
    pub claimed_ms: EpochMs,
    pub reserved_usd: f64,
    pub paired: bool,
    pub cancel_requested: bool,
    /// A late score made this lease pointless: the next renew answers lost.
    pub revoked: bool,
    /// Set while the reaper waits out `publish_grace_s` for a lease past evaluate: its entry
    /// in the deadline index moves here, so deferred leases never sit in front of due ones.
    #[serde(default)]
    pub grace_until_ms: Option<EpochMs>,
}

impl Lease {
    /// Where the lease's entry sits in the deadline index.
    pub(crate) fn reap_at(&self) -> EpochMs {
        self.grace_until_ms.unwrap_or(self.deadline_ms)
    }
}

/// What the store knows of one issued token.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct TokenRecord {
    /// Rows written for this token (a reap, then a late outcome, makes two).
    pub rows: u32,
    /// The answer to its completion or release, replayed on a retry.
    pub ack: Option<CompleteAck>,
}

/// A block's progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct BlockState {
    pub finals: u64,
    pub wall_s: f64,
    pub complete: bool,
    /// The phase-2 rule's verdict, once taken.
    pub phase2: Option<Phase2Verdict>,
}

/// What the phase-2 rule decided for a block, the first time a claim reached it.
///
/// Stored as the string `"started"` or the refusal as an exclusion reason
/// (`phase2_refused:cutoff`, `phase2_refused:quota:<provider>`): a verdict must read back as
/// taken, and JSON `null` (what the started verdict became when it was an
/// `Option<Option<String>>`) reads back as no verdict at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase2Verdict {
    /// The block started.
    Started,
    /// The block was refused: its trials got `not_started` rows.
    Refused(Phase2Refusal),
}

const STARTED: &str = "started";

impl std::fmt::Display for Phase2Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Phase2Verdict::Started => f.write_str(STARTED),
            Phase2Verdict::Refused(why) => ExcludedReason::Phase2Refused(why.clone()).fmt(f),
        }
    }
}

/// A stored phase-2 verdict that is neither `started` nor a phase-2 refusal.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a phase-2 verdict")]
pub(crate) struct UnknownVerdict(String);

impl FromStr for Phase2Verdict {
    type Err = UnknownVerdict;

    fn from_str(s: &str) -> Result<Self, UnknownVerdict> {
        if s == STARTED {
            return Ok(Phase2Verdict::Started);
        }
        match s.parse::<ExcludedReason>() {
            Ok(ExcludedReason::Phase2Refused(why)) => Ok(Phase2Verdict::Refused(why)),
            _ => Err(UnknownVerdict(s.to_owned())),
        }
    }
}

impl Serialize for Phase2Verdict {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Phase2Verdict {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_list_keeps_its_newest_values_in_order_without_growing() {
        let mut list = Vec::new();
        for v in 0..3 {
            push_capped(&mut list, f64::from(v), 3);
        }
        assert_eq!(list, [0.0, 1.0, 2.0]);
        // A copy is exactly its length; a push onto a full one must not grow it.
        let mut copy = list.clone();
        copy.shrink_to_fit();
        let cap = copy.capacity();
        push_capped(&mut copy, 3.0, 3);
        assert_eq!(copy, [1.0, 2.0, 3.0]);
        assert_eq!(copy.capacity(), cap);
        // A list longer than the cap (a lower cap than when it was written) is cut to it.
        let mut long = vec![1.0, 2.0, 3.0, 4.0];
        push_capped(&mut long, 5.0, 2);
        assert_eq!(long, [4.0, 5.0]);
        push_capped(&mut long, 6.0, 0);
        assert!(long.is_empty(), "a cap of 0 keeps nothing");
    }

    #[test]
    fn queue_names_round_trip() {
        for (queue, name) in [
            (Queue::Groups, "@group"),
            (Queue::provider("openai"), "p:openai"),
            (Queue::provider("a:b@c"), "p:a:b@c"),
        ] {
            assert_eq!(queue.to_string(), name);
            assert_eq!(name.parse::<Queue>().unwrap(), queue);
        }
        assert_eq!(Queue::Groups.unit(), Unit::Group);
        assert_eq!(Queue::provider("x").unit(), Unit::Trial);
        // The stored bytes of entries in the embedded backend.
        assert_eq!(Unit::Trial.stored_byte(), 0);
        assert_eq!(Unit::Group.stored_byte(), 1);
    }

    #[test]
    fn queue_order_is_name_order() {
        let mut queues = [
            Queue::provider("b"),
            Queue::Groups,
            Queue::provider("a"),
            Queue::provider("ab"),
        ];
        let mut names: Vec<String> = queues.iter().map(Queue::to_string).collect();
        queues.sort();
        names.sort();
        assert_eq!(
            queues.iter().map(Queue::to_string).collect::<Vec<_>>(),
            names
        );
    }

    #[test]
    fn unknown_queue_names_are_refused() {
        for name in [
            "", "p:", "group", "@groups", "P:openai", "q:openai", " @group",
        ] {
            let err = name.parse::<Queue>().unwrap_err();
            assert_eq!(err.to_string(), format!("unknown ready queue {name:?}"));
        }
    }
}
