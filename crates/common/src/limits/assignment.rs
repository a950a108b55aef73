//! The largest assignment a campaign can produce, checked at submit against the lane message
//! limit. An assignment carries, per trial, the task's payload and the arm's config, and once
//! the driver spec; a run group (`pairing = "group"`) carries a trial per arm. One that does not
//! fit the lane message limit would end the session of every worker that claims it, so such a
//! campaign is refused before anything of it is stored.
//!
//! The size is an upper bound on the protobuf encoding (`lanes.v1.Assignment`): every varint is
//! counted at its widest, so the real message is never bigger.

use std::fmt;

use crate::canonical;
use crate::spec::{Campaign, CampaignSpec, DriverKind, Pairing};

/// Per trial, everything but its strings: field tags, length prefixes and numbers at their
/// widest, the token's `.r<run>.` and the block's `p<phase>-`, the 55-byte traceparent.
const TRIAL_OVERHEAD: usize = 256;
/// Per assignment, everything but the trials and the driver: campaign id, lane name (at most
/// 256 bytes), lease TTL, gate flag, and their tags and prefixes.
const ASSIGNMENT_OVERHEAD: usize = 512;
/// One string or map entry in the driver spec: tags and length prefixes.
const ENTRY_OVERHEAD: usize = 18;

/// The share of the lane message limit an assignment may fill: 7/8, the rest is headroom for
/// framing and fields added later.
pub fn assignment_budget(max_lane_message_bytes: usize) -> usize {
    max_lane_message_bytes - max_lane_message_bytes / 8
}

/// A campaign whose largest assignment would not fit a lane message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct AssignmentTooLarge {
    pub task: String,
    /// Trials in that assignment.
    pub trials: usize,
    pub bytes: usize,
    pub budget: usize,
    pub limit: usize,
}

impl fmt::Display for AssignmentTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tasks: an assignment of task {:?} ({} trial{}, with its payload, the arm configs and \
             the driver spec) could be {} bytes, over {} bytes (the lane message limit \
             max_lane_message_bytes = {} less 1/8 headroom); make the payload or the arm configs \
             smaller",
            self.task,
            self.trials,
            if self.trials == 1 { "" } else { "s" },
            self.bytes,
            self.budget,
            self.limit
        )
    }
}

/// The task whose assignment is the largest, by index, with that assignment's size bound and
/// trial count. `None` for a campaign without tasks.
pub fn largest_assignment(campaign: &Campaign) -> Option<(usize, usize, usize)> {
    let spec = &campaign.spec;
    let arms: Vec<usize> = spec
        .arms
        .iter()
        .map(|a| canonical::to_string(&a.config).len() + 2 * a.id.as_str().len())
        .collect();
    let (trials, arms_bytes) = match spec.pairing {
        Pairing::Group => (arms.len(), arms.iter().sum()),
        Pairing::None => (1, arms.iter().copied().max().unwrap_or(0)),
    };
    let fixed = ASSIGNMENT_OVERHEAD + driver_bytes(spec) + arms_bytes;
    // The bound grows with each task's own bytes only, so the largest is that of the task with
    // the most.
    let (index, own) = campaign
        .tasks
        .iter()
        .map(|t| t.payload.json().len() + 3 * t.id.as_str().len())
        .enumerate()
        .max_by_key(|&(i, own)| (own, std::cmp::Reverse(i)))?;
    Some((index, fixed + trials * (own + TRIAL_OVERHEAD), trials))
}

/// Refuses a campaign whose largest assignment would not fit `max_lane_message_bytes` with
/// headroom ([`assignment_budget`]), naming the task.
pub fn check_assignments(
    campaign: &Campaign,
    max_lane_message_bytes: usize,
) -> Result<(), AssignmentTooLarge> {
    let budget = assignment_budget(max_lane_message_bytes);
    match largest_assignment(campaign) {
        Some((index, bytes, trials)) if bytes > budget => Err(AssignmentTooLarge {
            task: campaign.tasks[index].id.to_string(),
            trials,
            bytes,
            budget,
            limit: max_lane_message_bytes,
        }),
        Some(_) | None => Ok(()),
    }
}

/// The driver spec every assignment carries once.
fn driver_bytes(spec: &CampaignSpec) -> usize {
    let strings = |items: &mut dyn Iterator<Item = usize>| -> usize {
        items.map(|n| n + ENTRY_OVERHEAD).sum()
    };
    let d = &spec.driver;
    let kind = match &d.kind {
        DriverKind::Command(cmd) => strings(&mut cmd.iter().map(String::len)),
        DriverKind::Sim(sim) => serde_json::to_string(sim).map_or(0, |s| s.len()) + ENTRY_OVERHEAD,
        DriverKind::Named(name) => name.as_str().len() + ENTRY_OVERHEAD,
        DriverKind::Container(_) => ENTRY_OVERHEAD,
    };
    kind + ENTRY_OVERHEAD
        + strings(&mut d.secret_payload_keys.iter().map(String::len))
        + strings(&mut d.env.iter().map(|(k, v)| k.len() + v.len()))
        + strings(&mut spec.expect.iter().map(|(k, v)| k.len() + v.len()))
}
