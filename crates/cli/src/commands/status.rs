//! `lanes status [ID]`: one campaign's state, or every campaign's, and on a Redis store the
//! master the answering replica writes to.

use lanes_common::proto as pb;

use super::Done;
use crate::client::{Client, status_json, status_text};
use crate::exit::Code;

pub(super) async fn run(c: &mut Client, id: Option<String>, json: bool) -> Done {
    let all = match id {
        Some(id) => vec![c.get(pb::GetRequest { id }).await?.into_inner()],
        None => c.list(pb::ListRequest {}).await?.into_inner().campaigns,
    };
    for st in &all {
        if json {
            let mut v = status_json(st);
            if let Some(link) = &st.redis_link {
                v["redis_link"] = serde_json::json!({
                    "master": link.master,
                    "failovers": link.failovers,
                    "wait_timeouts": link.wait_timeouts,
                });
            }
            println!("{v}");
        } else {
            print!("{}", status_text(st));
        }
    }
    if let (false, Some(link)) = (json, all.first().and_then(|st| st.redis_link.as_ref())) {
        println!("{}", link_text(link));
    }
    Ok(Code::Ok)
}

/// The answering replica's link to the Redis master, in one line.
fn link_text(link: &pb::RedisLink) -> String {
    format!(
        "store: redis master {}, {} failover{} followed, {} write{} not acknowledged for want of replicas (as the answering coordinator sees it)",
        link.master,
        link.failovers,
        if link.failovers == 1 { "" } else { "s" },
        link.wait_timeouts,
        if link.wait_timeouts == 1 { "" } else { "s" },
    )
}
