//! A cache grown past its limit, trimmed to the read-ahead of the ready queues' windows.
//!
//! What piles up in a busy campaign's cache is finished trials' fields, which the normal
//! course never reads again. Dropping the whole cache took the windows with it: the next
//! claims scanned each ready queue again from the smallest window and read ahead and parsed
//! the tasks of members the cache had just read (a busy campaign parsed ~1.5 tasks per claim).
//! A trim keeps the meta, every sorted set's known members, and for each ready queue's members
//! their tasks (raw and parsed), task positions, trials' records and blocks: exactly what
//! [`RedisTx::read_ahead_units`](super::RedisTx) fetched for them. Every other hash field
//! goes; a round that needs one reads it again.
//!
//! It is only sound on a cache no commit in flight builds on: a round chained behind a commit
//! reads a field its cache does not hold straight from Redis, which is right only because
//! every field that commit writes is in that cache. The store trims when it starts a
//! transaction from a landed cache at the stored version.

use std::collections::HashMap;

use foldhash::HashSet;
use lanes_common::ids::TrialId;
use lanes_common::schedule::{arm_index, block_name, from_position_key};

use super::super::cache::Cache;
use super::super::keys::Keys;
use crate::store::model::{Queue, Unit};

/// `cache` trimmed to its ready queues' read-ahead; `None` when it cannot be (no meta read)
/// or is still past its limit after it: then it is dropped whole.
pub(crate) fn trimmed(keys: &Keys, mut cache: Cache) -> Option<Cache> {
    let meta = cache.meta.as_ref()?.as_ref()?;
    let n = u32::try_from(meta.spec.arms.len()).ok()?;
    let ready = keys.ready_prefix();
    let mut keep: HashMap<String, HashSet<String>> = HashMap::new();
    let mut positions: HashSet<u32> = HashSet::default();
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
            let (phase, tp, run, slot) = from_position_key(unit_key);
            positions.insert(tp);
            keep.entry(keys.tasks()).or_default().insert(tp.to_string());
            // Without its parsed task, the unit's trials are read again when claimed.
            let Some(task) = cache.task(tp) else {
                continue;
            };
            keep.entry(keys.task_pos())
                .or_default()
                .insert(task.id.to_string());
            let slots = match queue.unit() {
                Unit::Trial => slot..slot + 1,
                Unit::Group => 0..n,
            };
            for s in slots {
                let Some(arm) = meta.spec.arms.get(arm_index(tp, run, s, n) as usize) else {
                    continue;
                };
                let id = TrialId::from_parts(&task.id, run, &arm.id).to_string();
                // Trials written before layout 6 keep their leases apart.
                keep.entry(keys.leases()).or_default().insert(id.clone());
                keep.entry(keys.trials()).or_default().insert(id);
            }
            keep.entry(keys.blocks())
                .or_default()
                .insert(block_name(phase, &task.id).to_string());
        }
    }
    cache.retain(&keep, &positions);
    (!cache.is_large()).then_some(cache)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::cache::{Known, Score, ZKnown};
    use lanes_common::schedule::{SchedulePhase, position_key};
    use lanes_common::spec::Task;

    /// A cache of 20 tasks' read-ahead (one trial each), and the tasks.
    fn busy_cache(keys: &Keys) -> (Cache, Vec<Task>) {
        let mut text = "id = \"c\"\nphase1_runs = 1\nschedule_seed = 1\n[[arms]]\nid = \"a\"\n\
                        [driver]\nsim = {}\n[tasks]\nitems = [\n"
            .to_string();
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
        let arm = meta.spec.arms[0].id.clone();
        let mut c = Cache::at("1".into());
        c.meta = Some(Some(meta));
        for (tp, task) in campaign.tasks.iter().enumerate() {
            let tp = tp as u32;
            let id = TrialId::from_parts(&task.id, 0, &arm).to_string();
            c.put_field(&keys.tasks(), tp.to_string(), Some(b"{}".to_vec()));
            c.put_task(tp, task.clone());
            c.put_field(&keys.task_pos(), task.id.to_string(), Some(vec![b'0']));
            c.put_field(&keys.trials(), id.clone(), Some(vec![1]));
            c.put_field(&keys.tokens(), format!("{id}#1"), Some(vec![3]));
            c.put_field(&keys.leases(), id, None);
            let block = block_name(SchedulePhase::First, &task.id).to_string();
            c.put_field(&keys.blocks(), block, Some(vec![2]));
        }
        (c, campaign.tasks.clone())
    }

    #[test]
    fn a_trim_keeps_the_windows_read_ahead_and_drops_finished_trials() {
        let keys = Keys::new("c");
        let (mut cache, tasks) = busy_cache(&keys);
        // The window: the units of tasks 10..20; those of tasks 0..10 were claimed.
        let window: Vec<(String, f64)> = (10..20u32)
            .map(|tp| {
                let k = position_key(SchedulePhase::First, tp, 0, 0);
                (k.to_string(), k as f64)
            })
            .collect();
        let (last, score) = window.last().cloned().expect("a member");
        let ready = keys.ready(&Queue::provider("p"));
        let known = Known::Until(Score(score), last);
        cache.put_zset(ready.clone(), ZKnown::new(window, known, 256));
        let arm = "a".parse().expect("an arm id");
        let trimmed = trimmed(&keys, cache).expect("a trimmed cache");
        for (tp, task) in tasks.iter().enumerate() {
            let tp = tp as u32;
            let kept = tp >= 10;
            let id = TrialId::from_parts(&task.id, 0, &arm).to_string();
            let block = block_name(SchedulePhase::First, &task.id).to_string();
            assert_eq!(trimmed.task(tp).is_some(), kept, "task {tp}");
            let field = |key: String, f: &str| trimmed.field(&key, f).is_some();
            assert_eq!(field(keys.tasks(), &tp.to_string()), kept, "task {tp}");
            assert_eq!(
                field(keys.task_pos(), task.id.as_str()),
                kept,
                "{}",
                task.id
            );
            assert_eq!(field(keys.trials(), &id), kept, "{id}");
            assert_eq!(field(keys.leases(), &id), kept, "{id}");
            assert_eq!(field(keys.blocks(), &block), kept, "{block}");
            // A hash no window reads is dropped whole.
            assert!(!field(keys.tokens(), &format!("{id}#1")), "{id}");
        }
        // The sets and the meta stay.
        assert_eq!(trimmed.zset(&ready).map(|z| z.scores.len()), Some(10));
        assert!(matches!(trimmed.meta, Some(Some(_))));
    }

    #[test]
    fn a_cache_without_its_meta_is_not_trimmed() {
        let keys = Keys::new("c");
        let (mut cache, _) = busy_cache(&keys);
        cache.meta = None;
        assert!(trimmed(&keys, cache).is_none());
    }
}
