//! The pre-registered schedule: task-major blocks, phase 1 then phase 2, one run
//! group per run, the first arm rotating by `(task_pos + run_index) mod n_arms`.
//!
//! The schedule is produced lazily, in order, so a 1M-task campaign never sits in memory twice.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::ids::{ArmId, TaskId, TrialId};
use crate::spec::{Campaign, CampaignSpec, Task};

/// The phase of the schedule a trial belongs to: the first (its runs are pre-registered) or
/// the second (adaptive: run only for blocks the first phase leaves undecided). Written as the
/// number `1` or `2` in rows, traces and block names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SchedulePhase {
    First,
    Second,
}

impl SchedulePhase {
    /// `1` or `2`.
    pub fn number(self) -> u8 {
        match self {
            Self::First => 1,
            Self::Second => 2,
        }
    }

    /// The phase numbered `n`, if there is one.
    pub fn from_number(n: u8) -> Option<Self> {
        match n {
            1 => Some(Self::First),
            2 => Some(Self::Second),
            _ => None,
        }
    }
}

impl std::fmt::Display for SchedulePhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.number())
    }
}

impl Serialize for SchedulePhase {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(self.number())
    }
}

impl<'de> Deserialize<'de> for SchedulePhase {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u8::deserialize(d)?;
        Self::from_number(n)
            .ok_or_else(|| serde::de::Error::custom(format!("phase {n}: a phase is 1 or 2")))
    }
}

/// A block: one task's trials of one phase, named `p<phase>-<task>`. Phase 2 is decided per
/// block, and the store keeps a record per block under this name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BlockName(String);

impl BlockName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for BlockName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One cell (task, arm, run_index) of the schedule, with its identity and its place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub trial_id: TrialId,
    pub task: TaskId,
    pub arm: ArmId,
    /// 0-based across phases.
    pub run_index: u32,
    pub phase: SchedulePhase,
    pub block: BlockName,
    /// Global position in the schedule, from 0.
    pub order_index: u64,
    pub task_pos: u32,
    /// Position of this trial within its run group.
    pub arm_slot: u32,
    pub first_arm: ArmId,
    pub seed: u64,
    pub timeout_s: u32,
    pub max_turns: u32,
    pub max_cost_usd: Option<f64>,
    pub payload_sha256: String,
}

impl Trial {
    /// The run group this trial belongs to: `<task>.r<run_index>`.
    pub fn group_id(&self) -> String {
        format!("{}.r{}", self.task, self.run_index)
    }
}

/// The seed of a run: the first 8 bytes, big-endian, of sha256(`<schedule_seed>:<task>:<run>`).
pub fn run_seed(schedule_seed: u64, task: &TaskId, run_index: u32) -> u64 {
    // The digest of `<schedule_seed>:<task>:<run_index>`, fed in parts (no `format!`).
    let digest = Sha256::new()
        .chain_update(itoa::Buffer::new().format(schedule_seed))
        .chain_update(":")
        .chain_update(task.as_str())
        .chain_update(":")
        .chain_update(itoa::Buffer::new().format(run_index))
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The block name of a task in a phase.
pub fn block_name(phase: SchedulePhase, task: &TaskId) -> BlockName {
    let mut name = String::with_capacity(3 + task.as_str().len());
    name.push('p');
    name.push(char::from(b'0' + phase.number()));
    name.push('-');
    name.push_str(task.as_str());
    BlockName(name)
}

/// The index into `arms` of the arm in `slot` of the run group `(task_pos, run_index)`.
pub fn arm_index(task_pos: u32, run_index: u32, slot: u32, n_arms: u32) -> u32 {
    ((u64::from(task_pos) + u64::from(run_index) + u64::from(slot)) % u64::from(n_arms)) as u32
}

/// Iterates the schedule in order.
pub fn trials<'a>(campaign: &'a Campaign) -> impl Iterator<Item = Trial> + 'a {
    trials_of(&campaign.spec, &campaign.tasks)
}

/// Iterates the schedule of `spec` over `tasks`, in order.
pub fn trials_of<'a>(
    spec: &'a CampaignSpec,
    tasks: &'a [Task],
) -> impl Iterator<Item = Trial> + 'a {
    let n_arms = spec.arms.len() as u32;
    let phases = [
        (SchedulePhase::First, 0..spec.phase1_runs),
        (SchedulePhase::Second, spec.phase1_runs..spec.total_runs()),
    ];
    let mut order_index = 0u64;
    phases
        .into_iter()
        .flat_map(move |(phase, runs)| {
            tasks.iter().enumerate().flat_map(move |(task_pos, task)| {
                let task_pos = task_pos as u32;
                runs.clone().flat_map(move |run_index| {
                    let seed = run_seed(spec.schedule_seed, &task.id, run_index);
                    let first = arm_index(task_pos, run_index, 0, n_arms);
                    (0..n_arms).map(move |slot| {
                        let arm = &spec.arms[arm_index(task_pos, run_index, slot, n_arms) as usize];
                        (phase, task_pos, task, run_index, seed, first, slot, arm)
                    })
                })
            })
        })
        .map(
            move |(phase, task_pos, task, run_index, seed, first, slot, arm)| {
                let trial = Trial {
                    trial_id: TrialId::from_parts(&task.id, run_index, &arm.id),
                    task: task.id.clone(),
                    arm: arm.id.clone(),
                    run_index,
                    phase,
                    block: block_name(phase, &task.id),
                    order_index,
                    task_pos,
                    arm_slot: slot,
                    first_arm: spec.arms[first as usize].id.clone(),
                    seed,
                    timeout_s: task.timeout_s.unwrap_or(spec.defaults.timeout_s),
                    max_turns: task.max_turns.unwrap_or(spec.defaults.max_turns),
                    max_cost_usd: task.max_cost_usd.or(spec.defaults.max_cost_usd),
                    payload_sha256: task.payload.sha256().to_owned(),
                };
                order_index += 1;
                trial
            },
        )
}

/// The number of trials of a campaign, without building them.
pub fn trial_count(spec: &CampaignSpec, n_tasks: usize) -> u64 {
    n_tasks as u64 * u64::from(spec.total_runs()) * spec.arms.len() as u64
}

/// One run of one task: a trial per arm in slot order, sharing the run's seed.
#[derive(Debug, Clone, PartialEq)]
pub struct RunGroup {
    pub group_id: String,
    pub trials: Vec<Trial>,
}

/// Iterates the schedule as run groups, in order.
pub fn run_groups<'a>(campaign: &'a Campaign) -> impl Iterator<Item = RunGroup> + 'a {
    let n = campaign.spec.arms.len();
    let mut it = trials(campaign);
    std::iter::from_fn(move || {
        let trials: Vec<Trial> = it.by_ref().take(n).collect();
        (!trials.is_empty()).then(|| RunGroup {
            group_id: trials[0].group_id(),
            trials,
        })
    })
}

/// The phase of a run index.
pub fn phase_of(spec: &CampaignSpec, run_index: u32) -> SchedulePhase {
    if run_index < spec.phase1_runs {
        SchedulePhase::First
    } else {
        SchedulePhase::Second
    }
}

/// A trial's position in schedule order as a sortable integer that survives amendments
/// (appending tasks or runs shifts `order_index`, never this): phase, task_pos, run_index and
/// arm slot packed so that numeric order is schedule order. It fits in 41 bits, so it is exact
/// as a Redis sorted-set score.
pub fn position_key(phase: SchedulePhase, task_pos: u32, run_index: u32, slot: u32) -> u64 {
    debug_assert!(task_pos < (1 << 20) && run_index < (1 << 14) && slot < (1 << 6));
    (u64::from(phase == SchedulePhase::Second) << 40)
        | (u64::from(task_pos) << 20)
        | (u64::from(run_index) << 6)
        | u64::from(slot)
}

/// Unpacks a [`position_key`] into (phase, task_pos, run_index, slot).
pub fn from_position_key(key: u64) -> (SchedulePhase, u32, u32, u32) {
    let phase = match (key >> 40) & 1 {
        0 => SchedulePhase::First,
        _ => SchedulePhase::Second,
    };
    (
        phase,
        ((key >> 20) & 0xF_FFFF) as u32,
        ((key >> 6) & 0x3FFF) as u32,
        (key & 0x3F) as u32,
    )
}

/// The trial at (task_pos, run_index, slot), computed directly, without walking the schedule.
pub fn trial_at(
    spec: &CampaignSpec,
    n_tasks: usize,
    task_pos: u32,
    task: &Task,
    run_index: u32,
    slot: u32,
) -> Trial {
    let n_arms = spec.arms.len() as u32;
    let n = u64::from(n_arms);
    let phase = phase_of(spec, run_index);
    let order_index = if phase == SchedulePhase::First {
        (u64::from(task_pos) * u64::from(spec.phase1_runs) + u64::from(run_index)) * n
            + u64::from(slot)
    } else {
        let phase1 = n_tasks as u64 * u64::from(spec.phase1_runs) * n;
        phase1
            + (u64::from(task_pos) * u64::from(spec.phase2_runs)
                + u64::from(run_index - spec.phase1_runs))
                * n
            + u64::from(slot)
    };
    let arm = &spec.arms[arm_index(task_pos, run_index, slot, n_arms) as usize];
    Trial {
        trial_id: TrialId::from_parts(&task.id, run_index, &arm.id),
        task: task.id.clone(),
        arm: arm.id.clone(),
        run_index,
        phase,
        block: block_name(phase, &task.id),
        order_index,
        task_pos,
        arm_slot: slot,
        first_arm: spec.arms[arm_index(task_pos, run_index, 0, n_arms) as usize]
            .id
            .clone(),
        seed: run_seed(spec.schedule_seed, &task.id, run_index),
        timeout_s: task.timeout_s.unwrap_or(spec.defaults.timeout_s),
        max_turns: task.max_turns.unwrap_or(spec.defaults.max_turns),
        max_cost_usd: task.max_cost_usd.or(spec.defaults.max_cost_usd),
        payload_sha256: task.payload.sha256().to_owned(),
    }
}

/// The arm slot of `arm_pos` (its index in `spec.arms`) in the run group (task_pos, run_index).
pub fn slot_of(task_pos: u32, run_index: u32, arm_pos: u32, n_arms: u32) -> u32 {
    let shift = ((u64::from(task_pos) + u64::from(run_index)) % u64::from(n_arms)) as u32;
    (arm_pos + n_arms - shift) % n_arms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_keys_round_trip_and_sort() {
        use SchedulePhase::{First, Second};
        let k = position_key(Second, 999_999, 9_999, 63);
        assert_eq!(from_position_key(k), (Second, 999_999, 9_999, 63));
        assert!(position_key(First, 5, 3, 1) < position_key(First, 5, 3, 2));
        assert!(position_key(First, 5, 9, 0) < position_key(First, 6, 0, 0));
        assert!(position_key(First, 999_999, 9_999, 63) < position_key(Second, 0, 0, 0));
        assert!(k < (1 << 53));
    }

    #[test]
    fn a_phase_is_written_as_its_number_and_read_back_only_from_1_or_2() {
        for (p, n) in [(SchedulePhase::First, "1"), (SchedulePhase::Second, "2")] {
            assert_eq!(serde_json::to_string(&p).unwrap(), n);
            assert_eq!(serde_json::from_str::<SchedulePhase>(n).unwrap(), p);
            assert_eq!(p.to_string(), n);
        }
        for bad in ["0", "3", "\"1\""] {
            assert!(serde_json::from_str::<SchedulePhase>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slot_of_inverts_arm_index() {
        for n in 1..6 {
            for tp in 0..7 {
                for run in 0..5 {
                    for slot in 0..n {
                        let arm = arm_index(tp, run, slot, n);
                        assert_eq!(slot_of(tp, run, arm, n), slot);
                    }
                }
            }
        }
    }
}
