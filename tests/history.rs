//! The one history checker of the fault suite. Given a campaign's schedule (every version of
//! it, in order), its retry policy, its whole ledger and the outcomes workers saw
//! acknowledged, it lists every way the ledger breaks the guarantees:
//!
//! - the ledger has no holes: seqs run 0, 1, 2, … with nothing missing;
//! - each row's trial is in the schedule, and its spec hash is the hash in force when it was
//!   written: hashes never go back along the ledger, and a trial added by an amendment has no
//!   row under an older hash;
//! - each trial has at most one counted row;
//! - each trial's attempt numbers run 1..=n with no gaps;
//! - once the campaign has ended, each trial has a final row or a `not_started` row;
//! - every acknowledged outcome is in the ledger at the seq it was acknowledged with, and a
//!   counted acknowledgement is a counted row;
//! - no trial spent more infra or overloaded retries than the policy allows.
//!
//! An empty list is a green ledger.

use std::collections::{BTreeMap, BTreeSet};

use lanes_common::ids::TrialId;
use lanes_common::policy::TrialHistory;
use lanes_common::row::{Row, Status};
use lanes_common::spec::RetryPolicy;

/// One version of the schedule: its spec hash and every trial it schedules.
#[derive(Debug, Clone)]
pub struct Version {
    pub spec_hash: String,
    pub trials: BTreeSet<TrialId>,
}

/// An outcome a worker saw acknowledged (one line of a worker's `LANES_ACK_LOG`).
pub use lanes_worker::ack_log::AckLine as Ack;

/// Everything the checker reads about one campaign.
#[derive(Debug, Clone, Copy)]
pub struct Ledger<'a> {
    pub campaign: &'a str,
    /// Oldest first; the last is the schedule in force now.
    pub versions: &'a [Version],
    pub policy: &'a RetryPolicy,
    /// The whole ledger, in seq order.
    pub rows: &'a [Row],
    /// Acknowledgements of any campaign; only this campaign's are checked.
    pub acks: &'a [Ack],
    /// The campaign is done: every trial must have ended.
    pub ended: bool,
}

/// Lists every violation; empty means green.
pub fn check(l: &Ledger<'_>) -> Vec<String> {
    let mut bad = Vec::new();
    let Some(now) = l.versions.last() else {
        return vec!["no schedule given".to_owned()];
    };
    // No holes.
    for (i, r) in l.rows.iter().enumerate() {
        if r.seq != i as u64 {
            bad.push(format!("ledger hole: row {i} has seq {}", r.seq));
            break;
        }
    }
    // Spec hashes, and where each trial was first scheduled.
    let version_of: BTreeMap<&str, usize> = l
        .versions
        .iter()
        .enumerate()
        .map(|(i, v)| (v.spec_hash.as_str(), i))
        .collect();
    let mut first_scheduled: BTreeMap<&TrialId, usize> = BTreeMap::new();
    for (i, v) in l.versions.iter().enumerate() {
        for t in &v.trials {
            first_scheduled.entry(t).or_insert(i);
        }
    }
    let mut newest = 0usize;
    let mut by_trial: BTreeMap<&TrialId, Vec<&Row>> = BTreeMap::new();
    for r in l.rows {
        if !now.trials.contains(&r.trial_id) {
            bad.push(format!(
                "seq {}: trial {} is not in the schedule",
                r.seq, r.trial_id
            ));
        }
        match version_of.get(r.spec_hash.as_str()) {
            None => bad.push(format!("seq {}: unknown spec hash {}", r.seq, r.spec_hash)),
            Some(&v) => {
                if v < newest {
                    bad.push(format!(
                        "seq {}: spec hash went back to version {v} after version {newest}",
                        r.seq
                    ));
                }
                newest = newest.max(v);
                if let Some(&added) = first_scheduled.get(&r.trial_id)
                    && v < added
                {
                    bad.push(format!(
                        "seq {}: trial {} written under version {v}, before it was scheduled (version {added})",
                        r.seq, r.trial_id
                    ));
                }
            }
        }
        by_trial.entry(&r.trial_id).or_default().push(r);
    }
    // Per trial.
    for (t, rows) in &by_trial {
        let counted = rows.iter().filter(|r| r.counted).count();
        if counted > 1 {
            bad.push(format!("trial {t}: {counted} counted rows"));
        }
        let attempts: BTreeSet<u32> = rows
            .iter()
            .filter(|r| !matches!(r.status, Status::NotStarted | Status::Requeued))
            .map(|r| r.attempt)
            .collect();
        if let Some(&max) = attempts.last()
            && attempts.len() != max as usize
        {
            bad.push(format!("trial {t}: attempt numbers {attempts:?} have gaps"));
        }
        let h = TrialHistory::from_rows(rows.iter().copied());
        if h.infra_used > l.policy.infra_retries + 1 {
            bad.push(format!(
                "trial {t}: {} infra failures used the budget, the policy allows {} retries",
                h.infra_used, l.policy.infra_retries
            ));
        }
        if h.overloaded_used > l.policy.overloaded_retries + 1 {
            bad.push(format!(
                "trial {t}: {} overloaded failures, the policy allows {} retries",
                h.overloaded_used, l.policy.overloaded_retries
            ));
        }
    }
    if l.ended {
        for t in &now.trials {
            // An operator's requeue reopens a trial: only rows after the last one end it.
            let ended = by_trial.get(t).is_some_and(|rows| {
                rows.iter()
                    .rev()
                    .take_while(|r| r.status != Status::Requeued)
                    .any(|r| r.is_final || r.status == Status::NotStarted)
            });
            if !ended {
                bad.push(format!("trial {t}: no final or not_started row"));
            }
        }
    }
    // Acknowledged outcomes.
    for a in l.acks.iter().filter(|a| a.campaign == l.campaign) {
        match l.rows.get(a.seq as usize) {
            Some(r) if r.trial_id.as_str() == a.trial_id && r.attempt == a.attempt => {
                if a.counted && !r.counted {
                    bad.push(format!(
                        "ack {}#a{} at seq {}: acknowledged as counted, the row is not",
                        a.trial_id, a.attempt, a.seq
                    ));
                }
            }
            Some(r) => bad.push(format!(
                "ack {}#a{} at seq {}: that seq holds {}#a{}",
                a.trial_id, a.attempt, a.seq, r.trial_id, r.attempt
            )),
            None => bad.push(format!(
                "ack {}#a{} at seq {}: no such row",
                a.trial_id, a.attempt, a.seq
            )),
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_common::ids::CampaignId;
    use lanes_common::row::{FailureKind, StoreFields};
    use lanes_common::schedule::{Trial, trials};

    fn schedule() -> (Vec<Trial>, Vec<Version>) {
        let text = "id = \"h\"\nphase1_runs = 1\nschedule_seed = 1\npairing = \"none\"\n[[arms]]\nid = \"a\"\n[driver]\nsim = {}\n[tasks]\nitems = [{ id = \"T1\" }, { id = \"T2\" }]\n";
        let p = std::path::Path::new("h.toml");
        let c = lanes_common::spec::load_str(text, p, std::path::Path::new(".")).unwrap();
        let all: Vec<Trial> = trials(&c).collect();
        let v = Version {
            spec_hash: "sha256:v0".into(),
            trials: all.iter().map(|t| t.trial_id.clone()).collect(),
        };
        (all, vec![v])
    }

    fn row(t: &Trial, seq: u64, attempt: u32, status: Status, counted: bool) -> Row {
        let kind = (status == Status::InfraError).then_some(FailureKind::HarnessError);
        Row::bare(
            &CampaignId::new("h").unwrap(),
            t,
            attempt,
            status,
            kind,
            StoreFields {
                seq,
                spec_hash: "sha256:v0".into(),
                is_final: counted,
                counted,
                ..Default::default()
            },
        )
    }

    fn run(versions: &[Version], rows: &[Row], acks: &[Ack], ended: bool) -> Vec<String> {
        check(&Ledger {
            campaign: "h",
            versions,
            policy: &RetryPolicy {
                infra_retries: 1,
                ..RetryPolicy::default()
            },
            rows,
            acks,
            ended,
        })
    }

    fn ack(t: &Trial, attempt: u32, seq: u64, counted: bool) -> Ack {
        Ack {
            campaign: "h".into(),
            trial_id: t.trial_id.to_string(),
            attempt,
            seq,
            counted,
        }
    }

    #[test]
    fn a_clean_ledger_is_green() {
        let (t, v) = schedule();
        let rows = [
            row(&t[0], 0, 1, Status::InfraError, false),
            row(&t[1], 1, 1, Status::Completed, true),
            row(&t[0], 2, 2, Status::Completed, true),
        ];
        let acks = [ack(&t[1], 1, 1, true), ack(&t[0], 2, 2, true)];
        assert_eq!(run(&v, &rows, &acks, true), Vec::<String>::new());
    }

    #[test]
    fn each_broken_guarantee_is_named() {
        let (t, v) = schedule();
        let cases: Vec<(Vec<Row>, Vec<Ack>, &str)> = vec![
            (
                vec![
                    row(&t[0], 0, 1, Status::Completed, true),
                    row(&t[0], 1, 2, Status::Completed, true),
                    row(&t[1], 2, 1, Status::Completed, true),
                ],
                vec![],
                "2 counted rows",
            ),
            (
                vec![
                    row(&t[0], 0, 1, Status::Completed, true),
                    row(&t[1], 1, 2, Status::Completed, true),
                ],
                vec![],
                "gaps",
            ),
            (
                vec![row(&t[0], 0, 1, Status::Completed, true)],
                vec![],
                "no final or not_started row",
            ),
            (
                vec![
                    row(&t[0], 0, 1, Status::Completed, true),
                    row(&t[1], 2, 1, Status::Completed, true),
                ],
                vec![],
                "ledger hole",
            ),
            (
                vec![
                    row(&t[0], 0, 1, Status::Completed, true),
                    row(&t[1], 1, 1, Status::Completed, true),
                ],
                vec![ack(&t[0], 1, 1, true)],
                "that seq holds",
            ),
            (
                vec![
                    row(&t[0], 0, 1, Status::Completed, true),
                    row(&t[1], 1, 1, Status::Completed, true),
                ],
                vec![ack(&t[1], 1, 7, true)],
                "no such row",
            ),
            (
                vec![
                    row(&t[0], 0, 1, Status::InfraError, false),
                    row(&t[0], 1, 2, Status::InfraError, false),
                    row(&t[0], 2, 3, Status::InfraError, false),
                    row(&t[1], 3, 1, Status::Completed, true),
                ],
                vec![],
                "infra failures used the budget",
            ),
        ];
        for (rows, acks, want) in cases {
            let bad = run(&v, &rows, &acks, true);
            assert!(bad.iter().any(|b| b.contains(want)), "{want}: {bad:?}");
        }
    }

    #[test]
    fn hashes_follow_the_amendments() {
        let (t, mut v) = schedule();
        // Version 1 adds nothing new here but T2's trial is "added" by it.
        let mut v1 = v[0].clone();
        v1.spec_hash = "sha256:v1".into();
        v[0].trials.remove(&t[1].trial_id);
        v.push(v1);
        let mut early = row(&t[1], 0, 1, Status::Completed, true);
        early.spec_hash = "sha256:v0".into();
        let bad = run(&v, &[early], &[], false);
        assert!(
            bad.iter().any(|b| b.contains("before it was scheduled")),
            "{bad:?}"
        );
        let mut a = row(&t[0], 0, 1, Status::Completed, true);
        a.spec_hash = "sha256:v1".into();
        let mut b = row(&t[1], 1, 1, Status::Completed, true);
        b.spec_hash = "sha256:v0".into();
        let bad = run(&v, &[a, b], &[], false);
        assert!(bad.iter().any(|b| b.contains("went back")), "{bad:?}");
    }
}
