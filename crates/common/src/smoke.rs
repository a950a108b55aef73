//! Smoke runs: a small campaign derived from a pre-registered one (some tasks, some arms, a
//! few runs) to check a setup before spending on the real thing. It gets its own id,
//! `<id>-smoke`, so its rows never enter the main campaign's ledger or report, and it records
//! what it was derived from, so its rows and report say they are a smoke run.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ids::{ArmId, CampaignId};
use crate::spec::Campaign;
use crate::spec_hash::spec_hash;

/// The campaign a smoke run was derived from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SmokeOrigin {
    /// The main campaign's id.
    pub campaign: CampaignId,
    /// The main campaign's spec hash when the smoke run was derived.
    pub spec_hash: String,
}

/// What a smoke run keeps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SmokeSelection {
    /// Task ids matching this glob (`*` any run of characters, `?` one); all when `None`.
    pub tasks: Option<String>,
    /// These arms, in the campaign's arm order; all when `None`.
    pub arms: Option<Vec<String>>,
    /// Phase-1 runs of each (task, arm); phase 2 is dropped. 1 when `None`.
    pub runs: Option<u32>,
}

/// A selection that leaves nothing to run, or names what the campaign does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmokeError {
    #[error("--tasks {glob:?} matches none of the campaign's {total} tasks (such as {examples})")]
    NoTasks {
        glob: String,
        total: usize,
        examples: String,
    },
    #[error("--arms: the campaign has no arm {arm:?} (its arms: {known})")]
    UnknownArm { arm: String, known: String },
    #[error("--arms: give at least one arm")]
    NoArms,
    #[error("--runs must be at least 1")]
    ZeroRuns,
    #[error("the smoke run's id {id:?} is not a campaign id: {reason}")]
    BadId { id: String, reason: String },
    #[error("{0} is already a smoke run: derive from the main campaign")]
    AlreadySmoke(CampaignId),
}

/// The smoke run of `main` that `selection` picks: id `<id>-smoke`, the chosen tasks and
/// arms, `runs` phase-1 runs and no phase 2. Everything else is the main campaign's.
pub fn derive(main: &Campaign, selection: &SmokeSelection) -> Result<Campaign, SmokeError> {
    if main.spec.smoke.is_some() {
        return Err(SmokeError::AlreadySmoke(main.spec.id.clone()));
    }
    let id_text = format!("{}-smoke", main.spec.id);
    let id = CampaignId::new(&id_text).map_err(|e| SmokeError::BadId {
        id: id_text,
        reason: e.to_string(),
    })?;
    let tasks: Vec<_> = match &selection.tasks {
        None => main.tasks.clone(),
        Some(glob) => {
            let kept: Vec<_> = main
                .tasks
                .iter()
                .filter(|t| glob_match(glob, t.id.as_str()))
                .cloned()
                .collect();
            if kept.is_empty() {
                let examples: Vec<&str> =
                    main.tasks.iter().take(3).map(|t| t.id.as_str()).collect();
                return Err(SmokeError::NoTasks {
                    glob: glob.clone(),
                    total: main.tasks.len(),
                    examples: examples.join(", "),
                });
            }
            kept
        }
    };
    let arms = match &selection.arms {
        None => main.spec.arms.clone(),
        Some(names) => {
            if names.is_empty() {
                return Err(SmokeError::NoArms);
            }
            let known = || {
                let ids: Vec<&str> = main.spec.arms.iter().map(|a| a.id.as_str()).collect();
                ids.join(", ")
            };
            for name in names {
                let found = ArmId::new(name)
                    .ok()
                    .and_then(|id| main.spec.arm(&id).cloned());
                if found.is_none() {
                    return Err(SmokeError::UnknownArm {
                        arm: name.clone(),
                        known: known(),
                    });
                }
            }
            main.spec
                .arms
                .iter()
                .filter(|a| names.iter().any(|n| n == a.id.as_str()))
                .cloned()
                .collect()
        }
    };
    let runs = selection.runs.unwrap_or(1);
    if runs == 0 {
        return Err(SmokeError::ZeroRuns);
    }
    let mut spec = main.spec.clone();
    spec.smoke = Some(SmokeOrigin {
        campaign: main.spec.id.clone(),
        spec_hash: spec_hash(&main.spec, &main.tasks),
    });
    spec.id = id;
    spec.arms = arms;
    spec.phase1_runs = runs;
    spec.phase2_runs = 0;
    Ok(Campaign { spec, tasks })
}

/// Whether `text` matches `glob`: `*` matches any run of characters, `?` any one character,
/// everything else itself.
pub fn glob_match(glob: &str, text: &str) -> bool {
    let (g, t): (Vec<char>, Vec<char>) = (glob.chars().collect(), text.chars().collect());
    // The classic greedy matcher with one backtrack point: the last `*` seen.
    let (mut gi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if gi < g.len() && (g[gi] == '?' || g[gi] == t[ti]) {
            gi += 1;
            ti += 1;
        } else if gi < g.len() && g[gi] == '*' {
            star = Some((gi, ti));
            gi += 1;
        } else if let Some((sg, st)) = star {
            gi = sg + 1;
            ti = st + 1;
            star = Some((sg, st + 1));
        } else {
            return false;
        }
    }
    g[gi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs_match_as_a_shell_does() {
        for (glob, text, want) in [
            ("*", "anything", true),
            ("", "", true),
            ("", "x", false),
            ("MB-0?", "MB-01", true),
            ("MB-0?", "MB-012", false),
            ("MB-*", "MB-", true),
            ("*-easy", "t1-easy", true),
            ("*-easy", "t1-easy-not", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("t1", "t1", true),
            ("t1", "t10", false),
            ("**", "", true),
        ] {
            assert_eq!(glob_match(glob, text), want, "{glob:?} vs {text:?}");
        }
    }
}
