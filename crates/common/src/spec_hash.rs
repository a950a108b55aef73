//! The spec hash: sha256 over a canonical encoding of every *measured* option.
//!
//! Encoding (`lanes-spec-hash/1`): the canonical JSON of a header object holding the measured
//! campaign options, then one canonical JSON line per task in order (its id, group, tags,
//! limits and the sha256 of its canonical payload). Operational options (cutoff, budget cap,
//! lease TTL, publish grace, quota thresholds, driver command or sim, secret keys, env, arm
//! providers and expected costs) are never read here, so changing them never changes the hash.

use serde_json::json;
use sha2::{Digest, Sha256};

use crate::canonical;
use crate::spec::{CampaignSpec, Task};

const ENCODING: &str = "lanes-spec-hash/1";

/// The canonical header: every measured option except the tasks.
pub fn measured_header(spec: &CampaignSpec) -> serde_json::Value {
    let r = &spec.retry;
    let mut header = json!({
        "encoding": ENCODING,
        "phase1_runs": spec.phase1_runs,
        "phase2_runs": spec.phase2_runs,
        "schedule_seed": spec.schedule_seed,
        "pairing": spec.pairing,
        "gate": spec.gate,
        "defaults": {
            "timeout_s": spec.defaults.timeout_s,
            "max_turns": spec.defaults.max_turns,
            "max_cost_usd": spec.defaults.max_cost_usd,
        },
        "arms": spec.arms.iter().map(|a| json!({"id": a.id, "config": a.config})).collect::<Vec<_>>(),
        "retry": {
            "rate_limit_backoff_s": r.rate_limit_backoff_s,
            "overloaded_retries": r.overloaded_retries,
            "overloaded_backoff_s": r.overloaded_backoff_s,
            "auth_backoff_s": r.auth_backoff_s,
            "preflight_limit": r.preflight_limit,
            "infra_retries": r.infra_retries,
            "infra_backoff_s": r.infra_backoff_s,
        },
        "expect": spec.expect,
    });
    // Only on a smoke run, so that no other campaign's hash moves.
    if let Some(origin) = &spec.smoke {
        header["smoke_of"] = json!({"campaign": origin.campaign, "spec_hash": origin.spec_hash});
    }
    header
}

/// The canonical line of one task.
pub fn task_line(task: &Task) -> serde_json::Value {
    json!({
        "id": task.id,
        "group": task.group,
        "tags": task.tags,
        "timeout_s": task.timeout_s,
        "max_turns": task.max_turns,
        "max_cost_usd": task.max_cost_usd,
        "payload_sha256": task.payload.sha256(),
    })
}

/// `sha256:<hex>` over the measured options of `spec` and `tasks`.
pub fn spec_hash(spec: &CampaignSpec, tasks: &[Task]) -> String {
    let mut hasher = Sha256::new();
    let mut buf = String::new();
    canonical::write(&measured_header(spec), &mut buf);
    buf.push('\n');
    hasher.update(buf.as_bytes());
    for task in tasks {
        buf.clear();
        canonical::write(&task_line(task), &mut buf);
        buf.push('\n');
        hasher.update(buf.as_bytes());
    }
    format!("sha256:{}", canonical::hex(&hasher.finalize()))
}
