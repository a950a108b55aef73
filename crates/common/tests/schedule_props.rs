//! Properties of the schedule over random campaign shapes: completeness,
//! phase order, shared run seeds, rotation, contiguous order indexes and the trial count.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::path::Path;

use lanes_common::schedule::{self, Trial};
use lanes_common::spec::{self, Campaign};
use proptest::prelude::*;

fn campaign(n_tasks: usize, n_arms: usize, p1: u32, p2: u32, seed: u64) -> Campaign {
    let mut text =
        format!("id = \"props\"\nphase1_runs = {p1}\nphase2_runs = {p2}\nschedule_seed = {seed}\n");
    for a in 0..n_arms {
        writeln!(text, "[[arms]]\nid = \"arm{a}\"").unwrap();
    }
    let items: Vec<String> = (0..n_tasks)
        .map(|t| format!("{{ id = \"task-{t}\" }}"))
        .collect();
    writeln!(
        text,
        "[tasks]\nitems = [{}]\n[driver]\nsim = {{}}",
        items.join(", ")
    )
    .unwrap();
    spec::load_str(&text, Path::new("x.toml"), Path::new(".")).expect("campaign loads")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn schedule_invariants(
        n_tasks in 1usize..20,
        n_arms in 1usize..5,
        p1 in 1u32..4,
        p2 in 0u32..3,
        schedule_seed in any::<u64>(),
    ) {
        let c = campaign(n_tasks, n_arms, p1, p2, schedule_seed);
        let trials: Vec<Trial> = schedule::trials(&c).collect();
        let n = n_arms as u32;
        let total = n_tasks * (p1 + p2) as usize * n_arms;

        // trial_count() matches, without building the schedule.
        prop_assert_eq!(schedule::trial_count(&c.spec, c.tasks.len()), total as u64);
        prop_assert_eq!(trials.len(), total);

        // order_index is 0..N, contiguous, in iteration order.
        for (i, t) in trials.iter().enumerate() {
            prop_assert_eq!(t.order_index, i as u64);
        }

        // Every (task, arm, run) appears exactly once, and nothing else does.
        let cells: HashSet<(String, String, u32)> = trials
            .iter()
            .map(|t| (t.task.to_string(), t.arm.to_string(), t.run_index))
            .collect();
        prop_assert_eq!(cells.len(), total);
        for task in &c.tasks {
            for arm in &c.spec.arms {
                for run in 0..p1 + p2 {
                    prop_assert!(cells.contains(&(task.id.to_string(), arm.id.to_string(), run)));
                }
            }
        }

        // Phase 1 is runs 0..p1, phase 2 the next p2; every phase-2 trial comes after every
        // phase-1 trial.
        let last_p1 = trials.iter().filter(|t| t.phase.number() == 1).map(|t| t.order_index).max();
        let first_p2 = trials.iter().filter(|t| t.phase.number() == 2).map(|t| t.order_index).min();
        if let (Some(l), Some(f)) = (last_p1, first_p2) {
            prop_assert!(l < f, "phase 2 starts at {f} before phase 1 ends at {l}");
        }
        prop_assert_eq!(first_p2.is_some(), p2 > 0);

        let mut group_seeds: BTreeMap<(String, u32), BTreeSet<u64>> = BTreeMap::new();
        let mut group_arms: BTreeMap<(String, u32), Vec<u32>> = BTreeMap::new();
        for t in &trials {
            let expected_phase = if t.run_index < p1 { 1 } else { 2 };
            prop_assert_eq!(t.phase.number(), expected_phase);
            prop_assert_eq!(t.block.as_str(), format!("p{}-{}", t.phase, t.task));
            prop_assert_eq!(
                t.trial_id.as_str(),
                format!("{}.r{}.{}", t.task, t.run_index, t.arm)
            );
            // task_pos is the task's place in the given order.
            prop_assert_eq!(&c.tasks[t.task_pos as usize].id, &t.task);

            // Rotation: slot s runs arms[(task_pos + run_index + s) mod n]; the first arm is
            // arms[(task_pos + run_index) mod n].
            let rot = |s: u32| ((t.task_pos + t.run_index + s) % n) as usize;
            prop_assert_eq!(&t.arm, &c.spec.arms[rot(t.arm_slot)].id);
            prop_assert_eq!(&t.first_arm, &c.spec.arms[rot(0)].id);

            // The seed is the run's, from the schedule seed.
            prop_assert_eq!(t.seed, schedule::run_seed(schedule_seed, &t.task, t.run_index));

            let key = (t.task.to_string(), t.run_index);
            group_seeds.entry(key.clone()).or_default().insert(t.seed);
            group_arms.entry(key).or_default().push(t.arm_slot);
        }

        // All arms of a run share its seed, and each run group has one trial per slot, in
        // slot order.
        prop_assert_eq!(group_seeds.len(), n_tasks * (p1 + p2) as usize);
        for (key, seeds) in &group_seeds {
            prop_assert_eq!(seeds.len(), 1, "run group {:?} has seeds {:?}", key, seeds);
        }
        for slots in group_arms.values() {
            prop_assert_eq!(slots, &(0..n).collect::<Vec<_>>());
        }

        // Task-major within a phase: sorting by (phase, task_pos, run_index, slot) keeps the
        // schedule's order.
        let mut sorted = trials.clone();
        sorted.sort_by_key(|t| (t.phase, t.task_pos, t.run_index, t.arm_slot));
        prop_assert!(sorted.iter().zip(&trials).all(|(a, b)| a.order_index == b.order_index));

        // Run groups cut the same schedule into runs of n trials.
        let groups: Vec<_> = schedule::run_groups(&c).collect();
        prop_assert_eq!(groups.len(), n_tasks * (p1 + p2) as usize);
        let regrouped: Vec<Trial> = groups
            .iter()
            .flat_map(|g| {
                assert_eq!(g.trials.len(), n_arms);
                assert!(g.trials.iter().all(|t| t.group_id() == g.group_id));
                g.trials.clone()
            })
            .collect();
        prop_assert_eq!(regrouped, trials);
    }
}

/// The rule: with two arms, `arms[0]` goes first when that sum is even.
#[test]
fn two_arms_first_arm_is_arms0_when_sum_even() {
    let c = campaign(5, 2, 3, 2, 7);
    for t in schedule::trials(&c) {
        let even = (t.task_pos + t.run_index) % 2 == 0;
        let expected = if even { "arm0" } else { "arm1" };
        assert_eq!(t.first_arm.as_str(), expected, "{}", t.trial_id);
    }
}
