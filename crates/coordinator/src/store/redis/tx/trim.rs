//! A cache grown past its limit, trimmed to the read-ahead of the ready queues' windows.
//!
//! What piles up in a busy campaign's cache is finished trials' fields, which the normal
//! course never reads again. Dropping the whole cache took the windows with it: the next
//! claims scanned each ready queue again from the smallest window and read ahead and parsed
//! the tasks of members the cache had just read (a busy campaign parsed ~1.5 tasks per claim).
//! A trim keeps the meta, every sorted set's known members, and for each ready queue's members
//! what [`RedisTx::read_ahead_units`](super::RedisTx) fetched for them: their tasks (raw and
//! parsed), task positions, trials' records (and leases, for trials written before layout 6)
//! and blocks. Every other hash field goes, and a round that needs one reads it again: that
//! includes the records of the trials at work, which their completions read back in one
//! pipeline per round ([`RedisTx::prefetch_tokens`](super::RedisTx)).
//!
//! It is only sound on a cache no commit in flight builds on: a round chained behind a commit
//! reads a field its cache does not hold straight from Redis, which is right only because
//! every field that commit writes is in that cache. The store trims when it starts a
//! transaction from a landed cache (with no commit in flight).

use foldhash::HashSet;
use lanes_common::schedule::{block_name, from_position_key};

use super::super::cache::Cache;
use super::super::keys::Keys;
use super::unit_trials;
use crate::store::model::Queue;

/// `cache` trimmed to its ready queues' read-ahead; `None` when it cannot be (no meta read)
/// or is still past its limit after it: then it is dropped whole.
pub(crate) fn trimmed(keys: &Keys, mut cache: Cache) -> Option<Cache> {
    let meta = cache.meta.as_ref()?.as_ref()?;
    let ready = keys.ready_prefix();
    // The fields to keep, by hash: tasks by position, positions by task id, trials' records
    // (and, written before layout 6, their leases) by trial id, blocks by name.
    let mut positions: HashSet<u32> = HashSet::default();
    let (mut tasks, mut task_pos, mut trials, mut blocks) = (
        HashSet::default(),
        HashSet::default(),
        HashSet::default(),
        HashSet::default(),
    );
    for (key, z) in cache.zsets() {
        let Some(queue) = key.strip_prefix(ready.as_str()) else {
            continue;
        };
        let Ok(queue) = queue.parse::<Queue>() else {
            continue;
        };
        for member in z.scores.keys() {
            let Ok(unit_key) = member.parse::<u64>() else {
                continue;
            };
            let (phase, tp, _, _) = from_position_key(unit_key);
            if positions.insert(tp) {
                tasks.insert(tp.to_string());
            }
            // Without its parsed task, the unit's trials are read again when claimed.
            let Some(task) = cache.task(tp) else {
                continue;
            };
            trials
                .extend(unit_trials(meta, queue.unit(), unit_key, &task.id).map(|t| t.to_string()));
            if !task_pos.contains(task.id.as_str()) {
                task_pos.insert(task.id.to_string());
            }
            blocks.insert(block_name(phase, &task.id).to_string());
        }
    }
    let names: [(String, &HashSet<String>); 5] = [
        (keys.tasks(), &tasks),
        (keys.task_pos(), &task_pos),
        (keys.trials(), &trials),
        (keys.leases(), &trials),
        (keys.blocks(), &blocks),
    ];
    cache.retain(
        |key, field| {
            names
                .iter()
                .any(|(k, kept)| k == key && kept.contains(field))
        },
        &positions,
    );
    (!cache.is_large()).then_some(cache)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::cache::{Known, Score, ZKnown};
    use lanes_common::ids::TrialId;
    use lanes_common::schedule::{SchedulePhase, arm_index, position_key};
    use lanes_common::spec::Task;

    /// A cache holding what 20 tasks' units read ahead (one run, `arms` arms: each task's
    /// trial of every arm, in `phase`), and the tasks.
    fn busy_cache(keys: &Keys, arms: u32, phase: SchedulePhase) -> (Cache, Vec<Task>) {
        let mut text = "id = \"c\"\nphase1_runs = 1\nschedule_seed = 1\n".to_string();
        for a in 0..arms {
            text.push_str(&format!("[[arms]]\nid = \"a{a}\"\n"));
        }
        text.push_str("[driver]\nsim = {}\n[tasks]\nitems = [\n");
        for i in 0..20 {
            text.push_str(&format!("{{ id = \"t{i}\" }},\n"));
        }
        text.push_str("]\n");
        let campaign = lanes_common::spec::load_str(
            &text,
            std::path::Path::new("c.toml"),
            std::path::Path::new("."),
        )
        .expect("a campaign");
        let meta = crate::store::engine::new_meta(&campaign, "h".into(), 0);
        let mut c = Cache::at("1".into());
        for (tp, task) in campaign.tasks.iter().enumerate() {
            let tp = tp as u32;
            c.put_field(&keys.tasks(), tp.to_string(), Some(b"{}".to_vec()));
            c.put_task(tp, task.clone());
            c.put_field(&keys.task_pos(), task.id.to_string(), Some(vec![b'0']));
            for arm in &meta.spec.arms {
                let id = TrialId::from_parts(&task.id, 0, &arm.id).to_string();
                c.put_field(&keys.trials(), id.clone(), Some(vec![1]));
                c.put_field(&keys.tokens(), format!("{id}#1"), Some(vec![3]));
                c.put_field(&keys.leases(), id, None);
            }
            let block = block_name(phase, &task.id).to_string();
            c.put_field(&keys.blocks(), block, Some(vec![2]));
        }
        c.meta = Some(Some(meta));
        (c, campaign.tasks.clone())
    }

    /// `queue`'s window: the units of tasks 10..20, each at `slot` (those of tasks 0..10
    /// were claimed).
    fn window(cache: &mut Cache, key: String, phase: SchedulePhase, slot: u32) {
        let members: Vec<(String, f64)> = (10..20u32)
            .map(|tp| {
                let k = position_key(phase, tp, 0, slot);
                (k.to_string(), k as f64)
            })
            .collect();
        let (last, score) = members.last().cloned().expect("a member");
        let known = Known::Until(Score(score), last);
        cache.put_zset(key, ZKnown::new(members, known, 256));
    }

    /// Checks `trimmed` kept the read-ahead of exactly tasks 10..20: of the trials in
    /// `slots` of each (of `arms` arms), and dropped the hashes no window reads.
    fn check(
        keys: &Keys,
        trimmed: &Cache,
        tasks: &[Task],
        arms: u32,
        slots: &[u32],
        phase: SchedulePhase,
    ) {
        let field = |key: String, f: &str| trimmed.field(&key, f).is_some();
        for (tp, task) in tasks.iter().enumerate() {
            let tp = tp as u32;
            let kept = tp >= 10;
            assert_eq!(trimmed.task(tp).is_some(), kept, "task {tp}");
            assert_eq!(field(keys.tasks(), &tp.to_string()), kept, "task {tp}");
            assert_eq!(
                field(keys.task_pos(), task.id.as_str()),
                kept,
                "{}",
                task.id
            );
            let block = block_name(phase, &task.id).to_string();
            assert_eq!(field(keys.blocks(), &block), kept, "{block}");
            for slot in 0..arms {
                let arm = format!("a{}", arm_index(tp, 0, slot, arms))
                    .parse()
                    .expect("an arm");
                let id = TrialId::from_parts(&task.id, 0, &arm).to_string();
                let kept = kept && slots.contains(&slot);
                assert_eq!(field(keys.trials(), &id), kept, "{id}");
                assert_eq!(field(keys.leases(), &id), kept, "{id}");
                assert!(!field(keys.tokens(), &format!("{id}#1")), "{id}");
            }
        }
        assert!(matches!(trimmed.meta, Some(Some(_))));
    }

    #[test]
    fn a_trim_keeps_a_provider_windows_read_ahead_and_drops_finished_trials() {
        let keys = Keys::new("c");
        let phase = SchedulePhase::First;
        let (mut cache, tasks) = busy_cache(&keys, 3, phase);
        let ready = keys.ready(&Queue::provider("p"));
        // Each member is one trial: the one in slot 1.
        window(&mut cache, ready.clone(), phase, 1);
        let trimmed = trimmed(&keys, cache).expect("a trimmed cache");
        check(&keys, &trimmed, &tasks, 3, &[1], phase);
        assert_eq!(trimmed.zset(&ready).map(|z| z.scores.len()), Some(10));
    }

    #[test]
    fn a_trim_keeps_every_trial_of_a_group_windows_members_in_phase_two() {
        let keys = Keys::new("c");
        let phase = SchedulePhase::Second;
        let (mut cache, tasks) = busy_cache(&keys, 3, phase);
        let ready = keys.ready(&Queue::Groups);
        // Each member is a run group: every arm's trial.
        window(&mut cache, ready.clone(), phase, 0);
        let trimmed = trimmed(&keys, cache).expect("a trimmed cache");
        check(&keys, &trimmed, &tasks, 3, &[0, 1, 2], phase);
        assert_eq!(trimmed.zset(&ready).map(|z| z.scores.len()), Some(10));
    }

    #[test]
    fn a_cache_without_its_meta_is_not_trimmed() {
        let keys = Keys::new("c");
        let (mut cache, _) = busy_cache(&keys, 1, SchedulePhase::First);
        cache.meta = None;
        assert!(trimmed(&keys, cache).is_none());
    }
}
