//! Campaign files for the worker suites: two-arm campaigns on the sim driver, and one-arm
//! campaigns on a driver command.

use std::path::Path;

/// `tasks` tasks `T000..`, `runs` phase-1 runs, arms `a` (provider pa) and `b` (provider pb),
/// a 4 s lease; `head` adds top-level keys, `sim` is the sim driver's table body and `retry`
/// the `[retry]` table's.
pub fn campaign_text(
    id: &str,
    tasks: usize,
    runs: u32,
    head: &str,
    sim: &str,
    retry: &str,
) -> String {
    let mut t = format!(
        "id = \"{id}\"\nphase1_runs = {runs}\nschedule_seed = 11\nlease_ttl_s = 4\npublish_grace_s = 5\n{head}\n[defaults]\ntimeout_s = 5\nmax_turns = 20\n[[arms]]\nid = \"a\"\nprovider = \"pa\"\n[[arms]]\nid = \"b\"\nprovider = \"pb\"\n[driver]\nsim = {{ {sim} }}\n[retry]\n{retry}\n[tasks]\nitems = [\n"
    );
    for i in 0..tasks {
        t.push_str(&format!("  {{ id = \"T{i:03}\" }},\n"));
    }
    t.push_str("]\n");
    t
}

/// One arm `a` on `python3 <driver>`, a 5 s lease, no infra backoff; `items` are the task
/// lines and `head` adds top-level keys.
pub fn driver_campaign(id: &str, driver: &Path, head: &str, items: &str) -> String {
    format!(
        "id = \"{id}\"\nphase1_runs = 1\nschedule_seed = 9\npairing = \"none\"\nlease_ttl_s = 5\n{head}\n[defaults]\ntimeout_s = 20\n[[arms]]\nid = \"a\"\n[driver]\ncommand = [\"python3\", {:?}]\n[retry]\ninfra_backoff_s = 0\n[tasks]\nitems = [\n{items}]\n",
        driver.display().to_string()
    )
}
