//! `--smoke` on `lanes run` and `lanes submit`: run a small campaign derived from the file
//! (`<id>-smoke`: some tasks, some arms, a few runs) with its own ledger and report, leaving
//! the pre-registered campaign untouched.

use lanes_common::smoke::{SmokeError, SmokeSelection, derive};
use lanes_common::spec::Campaign;
use lanes_common::spec_hash::spec_hash;

#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct SmokeArgs {
    /// Run a smoke run instead: campaign `<id>-smoke`, derived from this one, with its own
    /// ledger and report (its rows say `smoke: true`).
    #[arg(long)]
    smoke: bool,
    /// With --smoke: only the tasks whose id matches this glob (`*`, `?`).
    #[arg(long, value_name = "GLOB", requires = "smoke")]
    tasks: Option<String>,
    /// With --smoke: only these arms, comma-separated.
    #[arg(long, value_name = "A,B", value_delimiter = ',', requires = "smoke")]
    arms: Option<Vec<String>>,
    /// With --smoke: phase-1 runs of each (task, arm) [default: 1]; no phase 2.
    #[arg(long, value_name = "N", requires = "smoke")]
    runs: Option<u32>,
}

impl SmokeArgs {
    /// The campaign to submit: `main` itself, or its smoke run, described in one line that
    /// names both spec hashes.
    pub(crate) fn apply(&self, main: Campaign) -> Result<Campaign, SmokeError> {
        if !self.smoke {
            return Ok(main);
        }
        let smoke = derive(
            &main,
            &SmokeSelection {
                tasks: self.tasks.clone(),
                arms: self.arms.clone(),
                runs: self.runs,
            },
        )?;
        let s = &smoke.spec;
        let trials = smoke.tasks.len() as u64 * s.arms.len() as u64 * u64::from(s.phase1_runs);
        println!(
            "smoke run {} of {} ({}): {} tasks x {} arms x {} runs = {trials} trials, spec {}",
            s.id,
            main.spec.id,
            s.smoke.as_ref().map_or("", |o| o.spec_hash.as_str()),
            smoke.tasks.len(),
            s.arms.len(),
            s.phase1_runs,
            spec_hash(s, &smoke.tasks),
        );
        Ok(smoke)
    }
}
