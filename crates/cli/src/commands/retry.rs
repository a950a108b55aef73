//! `lanes retry ID --excluded --note TEXT`: an operator retry pass.

use lanes_common::proto as pb;

use super::Done;
use crate::client::Client;
use crate::exit::Code;

pub(super) async fn run(
    c: &mut Client,
    id: String,
    excluded: bool,
    reason: Option<String>,
    note: String,
) -> Done {
    let r = c
        .retry(pb::RetryRequest {
            id: id.clone(),
            excluded,
            reason: reason.unwrap_or_default(),
            note,
        })
        .await?
        .into_inner();
    if r.requeued == 0 {
        println!("{id}: no excluded trial matches; nothing requeued");
    } else {
        let mut arms: Vec<String> = r.by_arm.iter().map(|(a, n)| format!("{a} {n}")).collect();
        arms.sort();
        println!(
            "{id}: retry pass {} requeued {} trials ({}); campaign {}",
            r.pass,
            r.requeued,
            arms.join(", "),
            crate::client::state_name(r.state)
        );
    }
    Ok(Code::Ok)
}
