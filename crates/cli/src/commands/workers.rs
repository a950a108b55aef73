//! `lanes workers`: the workers connected to the answering replica, what they run, their
//! health, and the running campaigns each refuses.

use lanes_common::proto as pb;

use super::Done;
use crate::client::Client;
use crate::exit::Code;

pub(super) async fn run(c: &mut Client, json: bool) -> Done {
    let workers = c.workers(pb::WorkersRequest {}).await?.into_inner().workers;
    if json {
        for w in &workers {
            println!("{}", worker_json(w));
        }
    } else {
        print!("{}", workers_text(&workers));
    }
    Ok(Code::Ok)
}

fn worker_json(w: &pb::WorkerInfo) -> serde_json::Value {
    serde_json::json!({
        "worker_id": w.worker_id, "host": w.host, "lanes": w.lanes,
        "version": w.version, "connected_utc": w.connected_utc,
        "outbox_broken": w.outbox_broken, "unpersisted": w.unpersisted,
        "detail": w.detail,
        "drivers": w.drivers, "campaign_commands": w.campaign_commands,
        "containers": w.containers,
        "driver_override": w.driver_override, "campaigns": w.campaigns,
        "refused": w.refused.iter()
            .map(|r| serde_json::json!({"campaign": r.campaign, "reason": r.reason}))
            .collect::<Vec<_>>(),
    })
}

/// One line per worker: who, how many lanes, since when, whether it takes work and what it
/// runs; then, indented, each running campaign it does not serve and why.
fn workers_text(workers: &[pb::WorkerInfo]) -> String {
    if workers.is_empty() {
        return "no workers connected to this replica\n".to_owned();
    }
    let mut out = format!(
        "{:<24} {:<24} {:>5}  {:<20}  {:<8}  RUNS\n",
        "WORKER", "HOST", "LANES", "CONNECTED", "HEALTH"
    );
    for w in workers {
        let health = if w.outbox_broken {
            format!("OUTBOX BROKEN: {}", w.detail)
        } else {
            "ok".to_owned()
        };
        out.push_str(&format!(
            "{:<24} {:<24} {:>5}  {:<20}  {health:<8}  {}\n",
            w.worker_id,
            w.host,
            w.lanes,
            w.connected_utc,
            runs(w)
        ));
        for r in &w.refused {
            out.push_str(&format!("  not serving {}: {}\n", r.campaign, r.reason));
        }
    }
    out
}

/// What a worker runs, in a few words: `sim`, its named drivers, campaign commands.
fn runs(w: &pb::WorkerInfo) -> String {
    if w.driver_override {
        return "--driver (every campaign)".to_owned();
    }
    let mut parts = vec!["sim".to_owned()];
    parts.extend(w.drivers.iter().cloned());
    if w.campaign_commands {
        parts.push("campaign commands".to_owned());
    }
    if w.containers {
        parts.push("containers".to_owned());
    }
    let mut text = parts.join(", ");
    if !w.campaigns.is_empty() {
        text.push_str(&format!(" (only {})", w.campaigns.join(", ")));
    }
    text
}
